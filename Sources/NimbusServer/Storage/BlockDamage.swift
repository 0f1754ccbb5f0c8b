import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import NIOConcurrencyHelpers
import NIOCore
import NimbusAPI

/// A stored block whose bytes no longer hash to its name — bit rot, a failing disk or controller, a pack cut short —
/// found as it was read. Its bytes never reach a client: the read stops with this error (500 `content_damaged`
/// before the answer's headers; after them, the connection ends before its `Content-Length`).
struct DamagedBlock: Error, CustomStringConvertible {
    var user: String
    var hash: String

    var description: String { "block \(hash) of user \(user) is damaged: its stored bytes no longer hash to its name" }
}

extension DamagedBlock: HTTPResponseError {
    var status: HTTPResponse.Status { .internalServerError }

    func response(from request: Request, context: some RequestContext) throws -> Response {
        let body = APIErrorBody(
            .contentDamaged,
            message: "This file's stored bytes are damaged on the server (its disk returned other bytes than were written). The server's "
                + "operator is told; other versions of the file may be whole, and uploading the file again repairs it.")
        let data = (try? JSONEncoder.nimbus.encode(body)) ?? Data()
        return Response(status: status, headers: [.contentType: "application/json; charset=utf-8"], body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }
}

/// Every block read from storage is checked against its SHA-256 before any of its bytes go further.
enum BlockCheck {
    /// `bytes` (the whole block) hash to `block.hash`, or ``DamagedBlock`` is thrown.
    static func verify(_ bytes: ByteBuffer, _ block: BlockRef, user: String) throws {
        let digest = bytes.withUnsafeReadableBytes { SHA256.hash(data: $0) }
        guard bytes.readableBytes == Int(block.size), digest.hexString == block.hash else { throw DamagedBlock(user: user, hash: block.hash) }
    }

    static func verify(_ bytes: [UInt8], _ block: BlockRef, user: String) throws {
        guard bytes.count == Int(block.size), SHA256.hash(data: bytes).hexString == block.hash else { throw DamagedBlock(user: user, hash: block.hash) }
    }
}

/// Where a read that found a damaged block reports it (the blob store knows nothing of the database): the server
/// sets the handler once its metadata store exists — it marks the block damaged, counts it, and logs the files and
/// the user it belongs to.
final class DamageReports: Sendable {
    private let handler = NIOLockedValueBox<(@Sendable (DamagedBlock) async -> Void)?>(nil)

    func setHandler(_ handler: @escaping @Sendable (DamagedBlock) async -> Void) {
        self.handler.withLockedValue { $0 = handler }
    }

    func report(_ damage: DamagedBlock) async {
        guard let handler = handler.withLockedValue({ $0 }) else { return }
        await handler(damage)
    }
}
