import Crypto
import Foundation
import Hummingbird
import NimbusAPI

/// `/v1/auth/*`: register, login, refresh, logout. The only `/v1` routes that need no access token.
struct AuthController: Sendable {
    let dependencies: Dependencies

    func register(_ routes: inout RouteTable) {
        routes.on(Routes.register, use: registerUser)
        routes.on(Routes.login, use: login)
        routes.on(Routes.refresh, use: refresh)
        routes.on(Routes.logout, use: logout)
        routes.on(Routes.createAppPassword, use: createAppPassword)
        routes.on(Routes.appPasswords, use: listAppPasswords)
        routes.on(Routes.revokeAppPassword, use: revokeAppPassword)
    }

    /// A new app password for this account (the access token's): its secret is in this answer only.
    @Sendable func createAppPassword(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        let body = try await request.decode(as: AppPasswordRequest.self, context: context)
        let label = body.label.trimmingCharacters(in: .whitespacesAndNewlines)
        guard (1...100).contains(label.count), !label.contains(where: { $0.isNewline || $0.asciiValue.map { $0 < 32 } == true }) else {
            throw DriveError.badRequest("'label' names what the password is for (\"Finder on my laptop\"): 1 to 100 characters on one line.")
        }
        let secret = AppPasswords.make()
        let record = try await dependencies.accounts.createAppPassword(
            userId: me.userId, label: label, passwordHash: AppPasswords.hash(secret), now: dependencies.now)
        return try JSONResponse.make(
            AppPassword(id: record.id, label: record.label, password: secret, createdAt: record.createdAt), status: .created,
            headers: [.cacheControl: "no-store"])
    }

    @Sendable func listAppPasswords(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        let records = try await dependencies.accounts.appPasswords(userId: me.userId)
        return try JSONResponse.make(
            AppPasswordList(appPasswords: records.map { AppPassword(id: $0.id, label: $0.label, createdAt: $0.createdAt, lastUsedAt: $0.lastUsedAt) }))
    }

    @Sendable func revokeAppPassword(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        try await dependencies.accounts.revokeAppPassword(userId: me.userId, id: try context.parameter("id"))
        return Response(status: .noContent)
    }

    @Sendable func registerUser(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        guard dependencies.configuration.allowRegistration else {
            throw DriveError.forbidden("Registration is closed on this server; ask its admin to run 'nimbus user add'.")
        }
        let credentials = try await request.decode(as: Credentials.self, context: context)
        try Accounts.validate(username: credentials.username)
        try Accounts.validate(password: credentials.password)
        let hash = try await dependencies.hashPassword(credentials.password)
        let user = try await dependencies.accounts.createUser(
            username: credentials.username, passwordHash: hash, quota: dependencies.configuration.defaultQuota, now: dependencies.now)
        return try JSONResponse.make(RegisteredUser(userId: user.id, username: user.username), status: .created)
    }

    @Sendable func login(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let credentials = try await request.decode(as: Credentials.self, context: context)
        let outcome = try await dependencies.signIn(username: credentials.username, remoteIP: context.remoteIP) { () -> UserRecord? in
            let user = try await dependencies.accounts.user(username: credentials.username)
            // Verify against a dummy hash for unknown users so timing does not tell which usernames exist.
            let ok = try await dependencies.verifyPassword(credentials.password, hash: user?.passwordHash ?? Accounts.dummyHash)
            // Said only to whoever knows the password.
            if ok, user?.disabledAt != nil { throw DriveError.accountDisabled }
            return ok ? user : nil
        }
        let user: UserRecord
        switch outcome {
        case .signedIn(let signedIn): user = signedIn
        case .lockedOut(let wait):
            throw DriveError.tooManyRequests("Too many failed logins for this account from this address; try again in \(wait) s.", retryAfter: wait)
        case .refused: throw DriveError.unauthorized("Wrong username or password.")
        }
        let refresh = TokenService.makeRefreshToken()
        let deviceName = credentials.deviceName?.trimmingCharacters(in: .whitespacesAndNewlines)
        let device = try await dependencies.accounts.createDevice(
            userId: user.id, name: String((deviceName.flatMap { $0.isEmpty ? nil : $0 } ?? "device").prefix(100)),
            refreshHash: refresh.hash, now: dependencies.now)
        return try await tokens(userId: user.id, deviceId: device.id, refreshToken: refresh.token)
    }

    @Sendable func refresh(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let body = try await request.decode(as: RefreshRequest.self, context: context)
        let next = dependencies.tokens.successor(of: body.refreshToken)
        let device = try await dependencies.accounts.rotateRefreshToken(
            presentedHash: TokenService.hashRefreshToken(body.refreshToken), newHash: next.hash, now: dependencies.now,
            maxIdle: dependencies.configuration.refreshTokenLifetime.timeInterval, grace: dependencies.configuration.refreshRetryGrace.timeInterval)
        return try await tokens(userId: device.userId, deviceId: device.id, refreshToken: next.token)
    }

    /// Signs the device out: with its access token (`Authorization`), or with its refresh token in the body.
    @Sendable func logout(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        if request.headers[.authorization] != nil {
            let identity = try await dependencies.principal(request)
            try await dependencies.signOut(deviceId: identity.deviceId)
            return Response(status: .noContent)
        }
        let body = try await request.decode(as: RefreshRequest.self, context: context)
        // Rotating proves the token is current; the device is then revoked.
        let device = try await dependencies.accounts.rotateRefreshToken(
            presentedHash: TokenService.hashRefreshToken(body.refreshToken), newHash: TokenService.makeRefreshToken().hash,
            now: dependencies.now, maxIdle: .infinity, grace: 0)
        try await dependencies.signOut(deviceId: device.id)
        return Response(status: .noContent)
    }

    private func tokens(userId: String, deviceId: String, refreshToken: String) async throws -> Response {
        let access = try await dependencies.tokens.accessToken(for: Principal(userId: userId, deviceId: deviceId), now: dependencies.now)
        let pair = TokenPair(
            accessToken: access.token, refreshToken: refreshToken, expiresAt: access.expiresAt, userId: userId, deviceId: deviceId)
        return try JSONResponse.make(pair, headers: [.cacheControl: "no-store"])
    }
}

/// App passwords: 25 characters from a 31-letter alphabet (124 random bits) in five groups, easy to type from one
/// screen into another; kept as SHA-256 (a slow hash adds nothing to 124 random bits, and a sign-in looks it up).
enum AppPasswords {
    static func make() -> String {
        let alphabet = Array("abcdefghjkmnpqrstuvwxyz23456789")  // no 0/o, 1/l/i: read off a screen
        var generator = SystemRandomNumberGenerator()
        let letters = (0..<25).map { _ in alphabet[Int(generator.next(upperBound: UInt32(alphabet.count)))] }
        return stride(from: 0, to: 25, by: 5).map { String(letters[$0..<$0 + 5]) }.joined(separator: "-")
    }

    static func hash(_ password: String) -> String {
        SHA256.hash(data: Data(password.utf8)).hexString
    }
}

/// Username and password rules.
enum Accounts {
    /// A bcrypt hash of a random string: verifying against it costs what a real check costs.
    static let dummyHash = "$2b$10$CwTycUXWue0Thq9StjUM0uJ8.1ZdHqk4X9zGeQ2eUyIZ0s2aG5W6e"

    static func validate(username: String) throws(DriveError) {
        let allowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
        guard (1...64).contains(username.count), username.allSatisfy(allowed.contains), !username.hasPrefix(".") else {
            throw .badRequest("A username is 1 to 64 characters of letters, digits, '.', '_' and '-', not starting with '.'.", code: .invalidUsername)
        }
    }

    static func validate(password: String) throws(DriveError) {
        guard password.count >= 8 else {
            throw .badRequest("A password needs at least 8 characters.", code: .weakPassword)
        }
        guard password.utf8.count <= 72 else {
            throw .badRequest("A password can be at most 72 bytes (bcrypt's limit).", code: .invalidPassword)
        }
    }
}
