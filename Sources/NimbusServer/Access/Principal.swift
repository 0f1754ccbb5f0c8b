import Foundation

/// Who a request acts for: one of a user's devices (a bearer token from `/v1/auth/login`) or one of their app
/// passwords (WebDAV's Basic auth). The access decision (``AccessPolicy``) takes it with the item and the action; a
/// public-link session and a grantee acting in someone else's tree are further kinds of principal, not further
/// checks in the routes.
struct Principal: Sendable, Equatable {
    /// The account the principal signs in as.
    var userId: String
    /// The device it acts through: a device id, or ``appPasswordPrefix`` and the app password's id. The mass-deletion
    /// breaker counts deletions per device (an app password's by its label).
    var deviceId: String

    /// The device id of a WebDAV client signed in with an app password: this prefix and the password's id.
    static let appPasswordPrefix = "app-password:"

    /// The app password's id, when this device is one.
    static func appPasswordId(_ deviceId: String) -> String? {
        deviceId.hasPrefix(appPasswordPrefix) ? String(deviceId.dropFirst(appPasswordPrefix.count)) : nil
    }

    /// How the principal signed in.
    enum Kind: Sendable, Equatable {
        case device(id: String)
        case appPassword(id: String)
        /// Someone with a public link (no account): `userId` and `deviceId` are ``linkPrefix`` and the link's id.
        case link(id: String)
    }

    static let linkPrefix = "link:"

    /// The principal a public link's requests act as.
    static func link(_ linkId: String) -> Principal { Principal(userId: linkPrefix + linkId, deviceId: linkPrefix + linkId) }

    var kind: Kind {
        if let id = Self.appPasswordId(deviceId) { return .appPassword(id: id) }
        if deviceId.hasPrefix(Self.linkPrefix) { return .link(id: String(deviceId.dropFirst(Self.linkPrefix.count))) }
        return .device(id: deviceId)
    }
}
