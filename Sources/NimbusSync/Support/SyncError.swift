import Foundation
import NimbusAPI

/// Everything that can go wrong in the sync engine, classified by what happens next (``isRetryable``).
public enum SyncError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The request got no usable answer (connection refused, reset, timed out). Retried with backoff.
    case network(String)
    /// The server answered with an error body (decoded once, ``ErrorCode``), or a remote refused otherwise.
    case server(status: Int, code: ErrorCode, message: String, retryAfter: Int?)
    /// The remote folder this syncs with is not there (deleted from a web UI, a disk not mounted, a file in its
    /// place): nothing is planned from an empty listing; syncing with it waits until it is there again.
    case remoteRootMissing(String)
    /// A creation the remote refused as "not there" although the folder it goes in is there (a listing that had
    /// not caught up): tried again.
    case refusedAsNotThere(String)
    /// The credentials are no longer accepted; everything waits until the user signs in again.
    case unauthorized(String)
    /// No account is signed in.
    case notSignedIn
    /// Not enough free space on this device for a download.
    case insufficientSpace(needed: Int64, available: Int64)
    /// Downloaded bytes did not match the server's checksum (they were discarded).
    case checksumMismatch(expected: String, actual: String)
    /// A local file could not be read or written.
    case localFile(String)
    /// The call cannot work as asked (unknown item, folder where a file is needed, invalid name...).
    case invalid(String)

    /// Whether trying again later can succeed without anyone doing anything.
    public var isRetryable: Bool {
        switch self {
        case .network: true
        // The server paused this device's deletions until its user confirms them: tried again, later.
        case .server(_, .api(.massDeletionPaused), _, _): true
        case .server(let status, _, _, _): status >= 500 || status == 429 || status == 408
        case .checksumMismatch, .refusedAsNotThere: true
        case .unauthorized, .notSignedIn, .insufficientSpace, .localFile, .invalid, .remoteRootMissing: false
        }
    }

    /// The error's code, if this is a server error.
    public var code: ErrorCode? {
        if case .server(_, let code, _, _) = self { return code }
        return nil
    }

    /// The HTTP status the server sent, if this is a server error.
    public var status: Int? {
        if case .server(let status, _, _, _) = self { return status }
        return nil
    }

    /// What went wrong and what happens next, in words for the user.
    public var description: String {
        switch self {
        case .network(let detail): "The server could not be reached (\(detail)); will retry."
        case .server(let status, let code, let message, _): "\(message) (\(status) \(code))"
        case .unauthorized(let detail): "Signed out by the server (\(detail)); sign in again to resume syncing."
        case .notSignedIn: "Not signed in; sign in to sync."
        case .insufficientSpace(let needed, let available):
            "Not enough free space: \(ByteCount.format(needed)) needed, \(ByteCount.format(available)) available. Free some space and retry."
        case .checksumMismatch(let expected, let actual): "Downloaded content does not match (expected \(expected), got \(actual)); will retry."
        case .localFile(let detail): detail
        case .invalid(let detail): detail
        case .remoteRootMissing(let detail): detail
        case .refusedAsNotThere(let detail): detail
        }
    }
}

/// An error's machine code, typed: one of the Nimbus API's codes (`APIErrorCode`), or another store's (an S3
/// code, a WebDAV status) kept to be shown. What happens next follows from the error's case or its API code, never
/// from a string.
public enum ErrorCode: Sendable, Hashable, CustomStringConvertible {
    case api(APIErrorCode)
    case other(String)

    /// A Nimbus error body's `error.code`: the API's code when this client knows it, else kept as it came.
    public init(apiCode raw: String) {
        self = APIErrorCode(rawValue: raw).map(Self.api) ?? .other(raw)
    }

    public var description: String {
        switch self {
        case .api(let code): code.rawValue
        case .other(let code): code
        }
    }
}
