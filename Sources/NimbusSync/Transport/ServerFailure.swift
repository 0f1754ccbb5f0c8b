import Foundation
import NimbusAPI

/// A Nimbus server's error answer, its body decoded once: the status, the typed code (``ErrorCode``), the message and
/// what the body adds (the item holding a name, the current file, the blocks missing). ``ServerClient`` and
/// ``NimbusProvider`` both make their errors from it, so an error body is read in one place.
struct ServerFailure: Sendable, Equatable {
    var status: Int
    var code: ErrorCode
    var message: String
    var existingId: String?
    var file: File?
    var missing: [String]?
    var retryAfter: Int?

    /// The failure an answer carries; nil for a success (2xx, and 304 and 308, which their callers handle).
    init?(_ head: TransportResponseHead, _ data: Data) {
        guard !(200..<300).contains(head.status) && head.status != 304 && head.status != 308 else { return nil }
        let detail = (try? JSONDecoder.nimbus.decode(APIErrorBody.self, from: data))?.error
        // Without an error body (a proxy's page), the start of what came, unless it is markup.
        let text = String(decoding: data.prefix(200), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        self.init(
            status: head.status, detail: detail, fallback: text.isEmpty || text.hasPrefix("<") ? nil : text,
            retryAfter: head.headers["retry-after"].flatMap(Int.init))
    }

    init(status: Int, code: ErrorCode, message: String, retryAfter: Int?) {
        self.status = status
        self.code = code
        self.message = message
        self.retryAfter = retryAfter
    }

    /// The failure of an error body's `detail` (a batch entry's), or of a status alone.
    init(status: Int, detail: APIErrorBody.Detail?, fallback: String? = nil, retryAfter: Int?) {
        self.status = status
        code = detail.map { ErrorCode(apiCode: $0.code) } ?? .other("http_\(status)")
        message = detail?.message ?? fallback ?? "HTTP \(status)"
        existingId = detail?.existingId
        file = detail?.file
        missing = detail?.missing
        self.retryAfter = retryAfter
    }

    /// What the engine's own calls (sign-in, listings, revisions) throw.
    var syncError: SyncError {
        status == 401 ? .unauthorized(message) : .server(status: status, code: code, message: message, retryAfter: retryAfter)
    }
}
