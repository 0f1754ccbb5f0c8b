import Foundation

/// `POST /v1/auth/register` and `POST /v1/auth/login` bodies.
public struct Credentials: Codable, Sendable, Hashable {
    public var username: String
    public var password: String
    public var deviceName: String?

    public init(username: String, password: String, deviceName: String? = nil) {
        self.username = username
        self.password = password
        self.deviceName = deviceName
    }
}

/// `POST /v1/auth/register` answer.
public struct RegisteredUser: Codable, Sendable, Hashable {
    public var userId: String
    public var username: String

    public init(userId: String, username: String) {
        self.userId = userId
        self.username = username
    }
}

/// `POST /v1/auth/login` and `POST /v1/auth/refresh` answer.
public struct TokenPair: Codable, Sendable, Hashable {
    public var accessToken: String
    public var refreshToken: String
    public var expiresAt: Date
    public var userId: String
    public var deviceId: String

    public init(accessToken: String, refreshToken: String, expiresAt: Date, userId: String, deviceId: String) {
        self.accessToken = accessToken
        self.refreshToken = refreshToken
        self.expiresAt = expiresAt
        self.userId = userId
        self.deviceId = deviceId
    }
}

/// `POST /v1/auth/refresh` (and optionally `POST /v1/auth/logout`) body.
public struct RefreshRequest: Codable, Sendable, Hashable {
    public var refreshToken: String

    public init(refreshToken: String) { self.refreshToken = refreshToken }
}

/// `POST /v1/auth/app-passwords` body: what the password is for ("Finder on the laptop").
public struct AppPasswordRequest: Codable, Sendable, Hashable {
    public var label: String

    public init(label: String) { self.label = label }
}

/// An app password: a per-device secret for clients that sign in with a user name and password (WebDAV's Basic
/// auth), never the account password. `password` is in the answer to its creation only; the server keeps a hash.
public struct AppPassword: Codable, Sendable, Hashable {
    public var id: String
    public var label: String
    public var password: String?
    public var createdAt: Date
    public var lastUsedAt: Date?

    public init(id: String, label: String, password: String? = nil, createdAt: Date, lastUsedAt: Date? = nil) {
        self.id = id
        self.label = label
        self.password = password
        self.createdAt = createdAt
        self.lastUsedAt = lastUsedAt
    }
}

/// `GET /v1/auth/app-passwords` answer, newest first.
public struct AppPasswordList: Codable, Sendable, Hashable {
    public var appPasswords: [AppPassword]

    public init(appPasswords: [AppPassword]) { self.appPasswords = appPasswords }
}
