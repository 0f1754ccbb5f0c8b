import Foundation
import NimbusAPI

/// Everything that can go wrong in the sync engine, classified by what happens next (``isRetryable``).
public enum SyncError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The request got no usable answer (connection refused, reset, timed out). Retried with backoff.
    case network(String)
    /// The server answered with an error body.
    case server(status: Int, code: String, message: String, retryAfter: Int?)
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
        case .server(_, APIErrorCode.massDeletionPaused.rawValue, _, _), .server(_, Self.refusedAsNotThere, _, _): true
        case .server(let status, _, _, _): status >= 500 || status == 429 || status == 408
        case .checksumMismatch: true
        case .unauthorized, .notSignedIn, .insufficientSpace, .localFile, .invalid: false
        }
    }

    /// The code of a creation a remote refused as "not there" while the folder it goes in is there (retried).
    public static let refusedAsNotThere = "refused_as_not_there"

    /// The `error.code` the server sent, if this is a server error.
    public var code: String? {
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
        }
    }
}
