import CompressNIO
import Foundation
import NIOCore
import NIOFoundationCompat

/// Compression of block uploads: `deflate` (zlib, fastest level) when a sample of the content shrinks by a tenth or
/// more — text and documents do, photos, video and archives do not, and are sent as they are.
enum BlockCompression {
    static func deflate(_ body: Data, sample firstBlock: Int) -> Data? {
        guard body.count >= 4096 else { return nil }
        let algorithm = CompressionAlgorithm.zlib(configuration: ZlibConfiguration(compressionLevel: 1))
        // A sample from the first block's bytes (after its header line) decides for the whole request.
        let sampleStart = min(body.count, 80)
        let sampleEnd = min(body.count, sampleStart + min(max(firstBlock, 4096), 16 * 1024))
        var sample = ByteBuffer(data: body.subdata(in: body.startIndex + sampleStart..<body.startIndex + sampleEnd))
        let sampleSize = sample.readableBytes
        guard let compressedSample = try? sample.compress(with: algorithm), compressedSample.readableBytes < sampleSize * 9 / 10 else { return nil }
        var whole = ByteBuffer(data: body)
        guard let compressed = try? whole.compress(with: algorithm), compressed.readableBytes < body.count * 9 / 10 else { return nil }
        return Data(buffer: compressed)
    }
}
