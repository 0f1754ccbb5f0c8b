import Foundation
import NimbusAPI

/// Signing in with HTTP Basic — the user name and one of the user's app passwords, never the account password — as
/// WebDAV, OCS and the Nextcloud apps do. Failures count towards the lockout of that account from that address,
/// exactly like `POST /v1/auth/login`.
enum BasicSignIn: Sendable {
    case signedIn(Principal, username: String)
    /// No `Authorization` header.
    case missing
    /// An `Authorization` header that is not `Basic base64(user:password)`.
    case malformed
    case lockedOut(retryAfter: Int)
    case refused
}

extension Dependencies {
    func signIn(basicAuthorization header: String?, remoteIP: String) async throws -> BasicSignIn {
        guard let header else { return .missing }
        guard let (username, password) = BasicCredentials.parse(header) else { return .malformed }
        let outcome = try await signIn(username: username, remoteIP: remoteIP, clearsFailures: false) { () -> Principal? in
            let record = try await accounts.useAppPassword(passwordHash: AppPasswords.hash(password), now: now)
            let user = try await accounts.user(username: username)
            guard let record, let user, record.userId == user.id else { return nil }
            guard user.disabledAt == nil else { throw DriveError.accountDisabled }
            return Principal(userId: user.id, deviceId: Principal.appPasswordPrefix + record.id)
        }
        switch outcome {
        case .signedIn(let principal):
            Acting.current?.record(principal)
            return .signedIn(principal, username: username)
        case .lockedOut(let wait): return .lockedOut(retryAfter: wait)
        case .refused: return .refused
        }
    }
}

enum BasicCredentials {
    /// The user name and password of a Basic `Authorization` header.
    static func parse(_ header: String) -> (user: String, password: String)? {
        let parts = header.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "basic", let decoded = Data(base64Encoded: String(parts[1])),
            let text = String(data: decoded, encoding: .utf8), let colon = text.firstIndex(of: ":")
        else { return nil }
        return (String(text[..<colon]), String(text[text.index(after: colon)...]))
    }
}
