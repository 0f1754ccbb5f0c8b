import Foundation
import NimbusAPI

/// The signed-in account and device, persisted by a ``TokenStore``.
public struct Account: Codable, Sendable, Equatable {
    /// The server's address.
    public var server: URL
    /// The account's id on the server.
    public var userId: String
    /// The account's name.
    public var username: String
    /// This device's id on the server (what signing out revokes).
    public var deviceId: String
    /// The short-lived access token (a JWT).
    public var accessToken: String
    /// The refresh token, rotated on every use.
    public var refreshToken: String
    /// When the access token expires.
    public var expiresAt: Date
}

/// Where tokens live between launches: a 0600 file by default; an app can use the Keychain instead.
public protocol TokenStore: Sendable {
    /// The account kept, if any.
    func load() throws -> Account?
    /// Keeps `credentials` (nil forgets them).
    func save(_ credentials: Account?) throws
}

/// Tokens in a JSON file readable only by its owner (mode 0600), written atomically.
public struct FileTokenStore: TokenStore {
    /// The JSON file.
    public let url: URL

    /// Tokens kept in the file at `url`.
    public init(url: URL) { self.url = url }

    /// The account in the file, if there is one.
    public func load() throws -> Account? {
        guard FileManager.default.fileExists(atPath: url.path) else { return nil }
        return try JSONDecoder.nimbus.decode(Account.self, from: Data(contentsOf: url))
    }

    /// Writes `credentials` atomically with mode 0600 (nil deletes the file).
    public func save(_ credentials: Account?) throws {
        guard let credentials else {
            try? FileManager.default.removeItem(at: url)
            return
        }
        let data = try JSONEncoder.nimbus.encode(credentials)
        let temporary = url.appendingPathExtension("tmp")
        _ = FileManager.default.createFile(atPath: temporary.path, contents: nil, attributes: [.posixPermissions: 0o600])
        let handle = try FileHandle(forWritingTo: temporary)
        try handle.write(contentsOf: data)
        try handle.synchronize()
        try handle.close()
        // rename(2) replaces atomically, whether or not the file exists yet.
        guard rename(temporary.path, url.path) == 0 else {
            throw SyncError.localFile("Could not save \(url.path) (errno \(errno)).")
        }
    }
}

/// The Nimbus API, typed: every call decodes its answer or throws a classified ``SyncError``.
///
/// Holds the tokens; a 401 on an authenticated call refreshes them once and retries, and only if that fails
/// does the call throw ``SyncError/unauthorized(_:)``.
public actor ServerClient {
    /// How requests reach the server.
    public let transport: any Transport
    let tokenStore: any TokenStore
    /// The signed-in account, if any.
    public private(set) var credentials: Account?

    /// A client over `transport`, with the tokens `tokenStore` keeps.
    public init(transport: any Transport, tokenStore: any TokenStore) {
        self.transport = transport
        self.tokenStore = tokenStore
        self.credentials = try? tokenStore.load()
    }

    // MARK: Auth

    /// Signs in as a device named `deviceName` and keeps the tokens.
    public func logIn(server: URL, username: String, password: String, deviceName: String) async throws -> Account {
        let body = NimbusAPI.Credentials(username: username, password: password, deviceName: deviceName)
        let (head, data) = try await raw(TransportRequest(method: Routes.login.method, path: Routes.login.path(), body: try JSONEncoder.nimbus.encode(body)), json: true)
        try Self.check(head, data)
        let pair = try Self.decode(TokenPair.self, data)
        let credentials = Account(
            server: server, userId: pair.userId, username: username, deviceId: pair.deviceId, accessToken: pair.accessToken,
            refreshToken: pair.refreshToken, expiresAt: pair.expiresAt)
        try store(credentials)
        return credentials
    }

    /// Forgets the tokens (and revokes the device on the server when it can be reached).
    public func logOut() async {
        if let credentials {
            let body = try? JSONEncoder.nimbus.encode(RefreshRequest(refreshToken: credentials.refreshToken))
            _ = try? await transport.send(
                TransportRequest(method: Routes.logout.method, path: Routes.logout.path(), headers: ["Content-Type": "application/json"], body: body))
        }
        try? store(nil)
    }

    func store(_ credentials: Account?) throws {
        self.credentials = credentials
        do { try tokenStore.save(credentials) } catch { throw SyncError.localFile("Could not save the sign-in: \(error)") }
    }

    /// Exchanges the refresh token for new tokens; `false` if the server refused (sign in again).
    func refresh() async throws -> Bool {
        guard let current = credentials else { return false }
        let body = try JSONEncoder.nimbus.encode(RefreshRequest(refreshToken: current.refreshToken))
        let (head, data) = try await raw(TransportRequest(method: Routes.refresh.method, path: Routes.refresh.path(), body: body), json: true)
        guard head.status == 200, let pair = try? JSONDecoder.nimbus.decode(TokenPair.self, from: data) else {
            if head.status == 401 || head.status == 400 { return false }
            try Self.check(head, data)
            return false
        }
        var next = current
        next.accessToken = pair.accessToken
        next.refreshToken = pair.refreshToken
        next.expiresAt = pair.expiresAt
        try store(next)
        return true
    }

    // MARK: Calls

    /// Sends with the access token; on 401 refreshes once and retries.
    public func authorized(_ request: TransportRequest, json: Bool = false) async throws -> (TransportResponseHead, Data) {
        guard let token = credentials?.accessToken else { throw SyncError.notSignedIn }
        var signed = request
        signed.headers["Authorization"] = "Bearer \(token)"
        let (head, data) = try await raw(signed, json: json)
        guard head.status == 401 else { return (head, data) }
        guard try await refresh(), let fresh = credentials?.accessToken else {
            throw ServerFailure(head, data)?.syncError ?? SyncError.unauthorized("401")
        }
        signed.headers["Authorization"] = "Bearer \(fresh)"
        let (retryHead, retryData) = try await raw(signed, json: json)
        if retryHead.status == 401 { throw ServerFailure(retryHead, retryData)?.syncError ?? SyncError.unauthorized("401") }
        return (retryHead, retryData)
    }

    /// Streams a response body with the access token (downloads, events); refreshes once on 401.
    public func authorizedStream(_ request: TransportRequest, into sink: @escaping @Sendable (Data) async throws -> Void) async throws
        -> TransportResponseHead
    {
        guard let token = credentials?.accessToken else { throw SyncError.notSignedIn }
        var signed = request
        signed.headers["Authorization"] = "Bearer \(token)"
        var (head, data) = try await rawStream(signed, sink)
        if head.status == 401 {
            guard try await refresh(), let fresh = credentials?.accessToken else { throw SyncError.unauthorized("401") }
            signed.headers["Authorization"] = "Bearer \(fresh)"
            (head, data) = try await rawStream(signed, sink)
        }
        if head.status == 401 { throw SyncError.unauthorized("401") }
        if !(200..<300).contains(head.status) { try Self.check(head, data) }
        return head
    }

    private func raw(_ request: TransportRequest, json: Bool) async throws -> (TransportResponseHead, Data) {
        var request = request
        if json, request.body != nil { request.headers["Content-Type"] = "application/json" }
        do {
            return try await transport.send(request)
        } catch let error as SyncError {
            throw error
        } catch is CancellationError {
            throw CancellationError()
        } catch {
            throw SyncError.network("\(error)")
        }
    }

    private func rawStream(_ request: TransportRequest, _ sink: @escaping @Sendable (Data) async throws -> Void) async throws
        -> (TransportResponseHead, Data)
    {
        do {
            return try await transport.stream(request, into: sink)
        } catch let error as SyncError {
            throw error
        } catch is CancellationError {
            throw CancellationError()
        } catch {
            throw SyncError.network("\(error)")
        }
    }

    // MARK: Decoding

    /// Throws the server's error for a non-2xx answer.
    static func check(_ head: TransportResponseHead, _ data: Data) throws {
        if let failure = ServerFailure(head, data) { throw failure.syncError }
    }

    static func decode<T: Decodable>(_ type: T.Type, _ data: Data) throws -> T {
        do {
            return try JSONDecoder.nimbus.decode(T.self, from: data)
        } catch {
            throw SyncError.server(status: 200, code: .other("bad_response"), message: "Unexpected answer from the server: \(error)", retryAfter: nil)
        }
    }

    /// An authorized JSON call that must succeed.
    public func call<T: Decodable>(_ method: String, _ path: String, body: (any Encodable)? = nil, headers: [String: String] = [:]) async throws -> T {
        let data = try body.map { try JSONEncoder.nimbus.encode($0) }
        let (head, reply) = try await authorized(TransportRequest(method: method, path: path, headers: headers, body: data), json: true)
        try Self.check(head, reply)
        return try Self.decode(T.self, reply)
    }

    /// An authorized call of `endpoint` (its path's placeholders filled, in order, with `parameters`), its body JSON,
    /// its answer decoded (`NoBody`: a `204`, nothing to decode).
    public func call<Body: Encodable, Answer: Decodable>(
        _ endpoint: Endpoint<Body, Answer>, _ parameters: String..., query: KeyValuePairs<String, String?> = [:], body: Body? = nil,
        headers: [String: String] = [:]
    ) async throws -> Answer {
        let data = try body.map { try JSONEncoder.nimbus.encode($0) }
        let request = TransportRequest(method: endpoint.method, path: endpoint.path(parameters, query: query), headers: headers, body: data)
        let (head, reply) = try await authorized(request, json: data != nil)
        try Self.check(head, reply)
        if Answer.self == NoBody.self, let none = NoBody() as? Answer { return none }
        return try Self.decode(Answer.self, reply)
    }

    /// An authorized call whose answer has no body worth decoding.
    public func callWithoutResult(_ method: String, _ path: String, headers: [String: String] = [:]) async throws {
        let (head, reply) = try await authorized(TransportRequest(method: method, path: path, headers: headers))
        try Self.check(head, reply)
    }
}

