import Foundation

/// The machine codes of the API's errors (`error.code` in every error body), shared by the server that sends
/// them and the clients that act on them. A client meeting a code it does not know keeps the raw string
/// (``APIErrorBody/Detail/code``) and goes by the HTTP status.
public enum APIErrorCode: String, Sendable, Codable, CaseIterable {
    // 400
    case invalidRequest = "invalid_request"
    case invalidName = "invalid_name"
    case invalidMimeType = "invalid_mime_type"
    case invalidMove = "invalid_move"
    case invalidChunk = "invalid_chunk"
    case invalidUsername = "invalid_username"
    case invalidPassword = "invalid_password"
    case weakPassword = "weak_password"
    case notAFolder = "not_a_folder"
    case isAFolder = "is_a_folder"
    case trashed
    case uploadIncomplete = "upload_incomplete"
    /// A grant or link on the user's root folder: share the folders in it instead.
    case cannotShareRoot = "cannot_share_root"
    // 401 / 403 / 404 / 405
    case unauthorized
    /// The account is disabled by the server's operator (`nimbus user disable`): nothing signs in; its files are kept.
    case accountDisabled = "account_disabled"
    /// A public link with a password: get a session with it first (`POST /v1/public/{token}/session`).
    case passwordRequired = "password_required"
    /// A public link's password was wrong.
    case passwordIncorrect = "password_incorrect"
    case forbidden
    case notFound = "not_found"
    /// The item has no thumbnail (a folder, a type none is made of, or one the worker could not read).
    case noThumbnail = "no_thumbnail"
    case methodNotAllowed = "method_not_allowed"
    // 409
    /// Another item holds the name (`existingId` names it).
    case nameConflict = "name_conflict"
    /// The item's head is not the revision the change was based on (`file` is the current one).
    case versionConflict = "version_conflict"
    /// The request id already made something else (`existingId` names the file it made, when it made one).
    case requestIdReused = "request_id_reused"
    case usernameTaken = "username_taken"
    /// The user already reaches the item through a grant (on it or on a folder above or below it).
    case alreadyGranted = "already_granted"
    /// A block commit names blocks the store lacks (`missing` lists them): send them, then commit again.
    case blocksMissing = "blocks_missing"
    /// The server's mass-deletion breaker paused this device's deletions: the user confirms with
    /// `POST /v1/trash/confirm` (`nimbus trash confirm`, or the web app), then they go on.
    case massDeletionPaused = "mass_deletion_paused"
    case conflict
    // 410
    case gone
    case cursorExpired = "cursor_expired"
    case uploadExpired = "upload_expired"
    // 412 / 413 / 416 / 422 / 429 / 500 / 507
    case preconditionFailed = "precondition_failed"
    case tooLarge = "too_large"
    /// 431: the request's header fields are over the server's limit (32 KiB in all, 16 KiB for one field).
    case headersTooLarge = "headers_too_large"
    /// 414: the request target (path and query) is over 16 KiB.
    case uriTooLong = "uri_too_long"
    case rangeNotSatisfiable = "range_not_satisfiable"
    case checksumMismatch = "checksum_mismatch"
    /// 415: a `Content-Encoding` the route does not take.
    case unsupportedEncoding = "unsupported_encoding"
    case rateLimited = "rate_limited"
    case internalError = "internal_error"
    /// 500: the stored bytes of the file (one of its blocks) are damaged on the server's disk; nothing of them was
    /// sent. Other versions may be whole; uploading the content again repairs it.
    case contentDamaged = "content_damaged"
    /// 503: a store the server needs is unreachable; retry after `Retry-After` seconds.
    case unavailable
    case quotaExceeded = "quota_exceeded"
    /// The server's own disk (blocks or database) is full: 507, like a quota, until space is freed.
    case insufficientStorage = "insufficient_storage"
}

extension APIErrorBody.Detail {
    /// The code as the shared enum, when it is one this build knows.
    public var knownCode: APIErrorCode? { APIErrorCode(rawValue: code) }
}

extension APIErrorBody {
    public init(_ code: APIErrorCode, message: String, existingId: String? = nil, file: File? = nil) {
        self.init(code: code.rawValue, message: message, existingId: existingId, file: file)
    }
}
