import CompressNIO
import Foundation
import NIOCore

/// `Content-Encoding` of request bodies and `Accept-Encoding` of answers, where a route takes them (the block API):
/// `gzip` and `deflate` (zlib format, as HTTP means it), through zlib (compress-nio).
enum BodyEncoding {
    static func algorithm(_ name: String) -> CompressionAlgorithm? {
        switch name.trimmingCharacters(in: .whitespaces).lowercased() {
        case "gzip", "x-gzip": .gzip()
        case "deflate": .zlib()
        default: nil
        }
    }

    /// The body's bytes once decoded; `nil` encoding or `identity` returns it as it is.
    static func decode(_ body: ByteBuffer, encoding: String?, maxSize: Int) throws -> ByteBuffer {
        guard let encoding, encoding.lowercased() != "identity" else { return body }
        guard let algorithm = algorithm(encoding) else {
            throw DriveError.unsupportedEncoding("Content-Encoding: \(encoding) is not taken here; send gzip, deflate or identity.")
        }
        var body = body
        do {
            return try body.decompress(with: algorithm, maxSize: maxSize)
        } catch let error as CompressNIOError where error == .bufferOverflow {
            throw DriveError.tooLarge("Decoded, the body is over \(maxSize) bytes.")
        } catch {
            throw DriveError.badRequest("The body is not valid \(encoding) (\(error)); nothing was stored.")
        }
    }

    /// The encoding to answer with, from `Accept-Encoding` (gzip preferred), if any.
    static func accepted(_ header: String?) -> String? {
        guard let header else { return nil }
        let offered = header.split(separator: ",").map { part -> (String, Double) in
            let pieces = part.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
            let quality = pieces.dropFirst().first { $0.hasPrefix("q=") }.flatMap { Double($0.dropFirst(2)) } ?? 1
            return (pieces.first ?? "", quality)
        }
        for name in ["gzip", "deflate"] where offered.contains(where: { $0.0 == name && $0.1 > 0 }) { return name }
        return nil
    }

    /// `bytes` encoded, or nil when that does not save at least a tenth (photos, video, archives).
    static func encode(_ bytes: ByteBuffer, as name: String) -> ByteBuffer? {
        guard let algorithm = algorithm(name) else { return nil }
        return compressIfWorthIt(bytes, with: algorithm, minimumSize: 1024)
    }

    /// `bytes` compressed with `algorithm`, or nil when they are shorter than `minimumSize` or compressing does not
    /// save at least a tenth. The one rule both the wire (``encode(_:as:)``) and storage at rest
    /// (``StoredBlockCodec``) follow.
    static func compressIfWorthIt(_ bytes: ByteBuffer, with algorithm: CompressionAlgorithm, minimumSize: Int) -> ByteBuffer? {
        guard bytes.readableBytes >= minimumSize else { return nil }
        var source = bytes
        guard let encoded = try? source.compress(with: algorithm), encoded.readableBytes < bytes.readableBytes * 9 / 10 else { return nil }
        return encoded
    }
}
