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
