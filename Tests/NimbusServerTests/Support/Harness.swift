import AsyncHTTPClient
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NimbusAPI
import NimbusServer
import NimbusTestSupport
import Testing

/// A clock tests move by hand.
final class TestClock: WallClock {
    private let current = NIOLockedValueBox(Date())
    func now() -> Date { current.withLockedValue { $0 } }
    func advance(by seconds: TimeInterval) { current.withLockedValue { $0 = $0.addingTimeInterval(seconds) } }
}

/// A real server on an ephemeral port over a fresh data folder, for the duration of `body`.
struct TestServer: Sendable {
    let port: Int
    let parts: NimbusServerParts
    let dataDirectory: URL
    let clock: TestClock

    var baseURL: String { "http://127.0.0.1:\(port)" }

    static func run(
        configure: @Sendable (inout ServerConfiguration) -> Void = { _ in },
        _ body: @Sendable (TestServer) async throws -> Void
    ) async throws {
        let directory = FileManager.default.temporaryDirectory.appending(path: "nimbus-test-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let clock = TestClock()
        var configuration = ServerConfiguration(dataDirectory: directory)
        configuration.port = 0
        configuration.allowRegistration = true
        configuration.bcryptCost = 4
        configuration.clock = clock
        configuration.logLevel = .warning
        // Tests check that /healthz answers 200 when the stores work, not how fast a machine running 180 tests at
        // once answers it (a CI run saw 503 "no answer within 3 s" on a loaded moment).
        configuration.healthCheckBudget = .seconds(30)
        // A small reserve file (the default sets 32 MiB aside in every data folder).
        configuration.minimumFreeSpace = 4 << 20
        configuration.environment.merge(TestServices.s3Keys) { $1 }
        if TestServices.scaledOut {
            configuration.database = try TestServices.postgresURL()
            configuration.blobs = try TestServices.s3().blobsURL()
        }
        configure(&configuration)
        let (app, parts) = try await buildApplication(configuration: configuration)
        do {
            try await app.test(.live) { client in
                let server = TestServer(port: client.port!, parts: parts, dataDirectory: directory, clock: clock)
                try await body(server)
                // No public link's token anywhere but in the answers that make it and show it to its owner.
                for leak in TokenSniffer.leaks(in: Transcript.take(server.baseURL)) { Issue.record(Comment(rawValue: leak)) }
            }
        } catch {
            await parts.close()
            throw error
        }
        await parts.close()
    }

    /// Registers a user and logs in: a client carrying its access token.
    func signUp(_ username: String = "u" + UUID().uuidString.prefix(8).lowercased(), password: String = "correct horse") async throws -> APIClient {
        let anonymous = APIClient(baseURL: baseURL)
        let registered = try await anonymous.send(.POST, "/v1/auth/register", json: Credentials(username: username, password: password))
        #expect(registered.status == 201, "register: \(registered.text)")
        return try await logIn(username, password: password)
    }

    func logIn(_ username: String, password: String = "correct horse", device: String = "test") async throws -> APIClient {
        let anonymous = APIClient(baseURL: baseURL)
        let reply = try await anonymous.send(.POST, "/v1/auth/login", json: Credentials(username: username, password: password, deviceName: device))
        #expect(reply.status == 200, "login: \(reply.text)")
        let tokens: TokenPair = try reply.decode()
        return APIClient(baseURL: baseURL, token: tokens.accessToken, tokens: tokens)
    }
}

/// A small HTTP client over AsyncHTTPClient that speaks the API's JSON.
struct APIClient: Sendable {
    let baseURL: String
    var token: String?
    var tokens: TokenPair?

    init(baseURL: String, token: String? = nil, tokens: TokenPair? = nil) {
        self.baseURL = baseURL
        self.token = token
        self.tokens = tokens
    }

    struct Reply: Sendable {
        var status: Int
        var headers: HTTPHeaders
        var body: Data

        var text: String { String(decoding: body, as: UTF8.self) }

        func decode<T: Decodable>(_ type: T.Type = T.self) throws -> T {
            do {
                return try JSONDecoder.nimbus.decode(T.self, from: body)
            } catch {
                Issue.record("could not decode \(T.self) from \(status) \(text)")
                throw error
            }
        }

        /// The `error.code` of an error body (and a test failure if the body is not the error shape).
        var errorCode: String? {
            guard let error = try? JSONDecoder.nimbus.decode(APIErrorBody.self, from: body) else {
                Issue.record("not an error body: \(status) \(text)")
                return nil
            }
            return error.error.code
        }

        func header(_ name: String) -> String? { headers.first(name: name) }
    }

    func send(
        _ method: HTTPMethod, _ path: String, json: (any Encodable & Sendable)? = nil, body: Data? = nil,
        headers: [String: String] = [:], timeout: TimeAmount = .seconds(120)
    ) async throws -> Reply {
        var request = HTTPClientRequest(url: baseURL + path)
        request.method = method
        if let token { request.headers.add(name: "Authorization", value: "Bearer \(token)") }
        if let json {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(data: try JSONEncoder.nimbus.encode(json)))
        } else if let body {
            request.body = .bytes(ByteBuffer(data: body))
        }
        for (name, value) in headers { request.headers.replaceOrAdd(name: name, value: value) }
        let response = try await HTTPClient.shared.execute(request, timeout: timeout)
        let buffer = try await response.body.collect(upTo: 1 << 30)
        let reply = Reply(status: Int(response.status.code), headers: response.headers, body: Data(buffer: buffer))
        Transcript.record(baseURL: baseURL, method: method, path: path, status: reply.status, headers: reply.headers, body: reply.body)
        return reply
    }

    func get(_ path: String, headers: [String: String] = [:]) async throws -> Reply { try await send(.GET, path, headers: headers) }

    // MARK: Conveniences that expect success

    func root() async throws -> File { try await get("/v1/files/root").decode() }

    func mkdir(_ name: String, in parentId: String? = nil) async throws -> File {
        let reply = try await send(.POST, "/v1/files", json: CreateFileRequest(name: name, mimeType: folderMimeType, parentId: parentId))
        #expect(reply.status == 201, "mkdir \(name): \(reply.text)")
        return try reply.decode()
    }

    func upload(_ name: String, _ content: Data, in parentId: String? = nil, query: String = "") async throws -> File {
        let reply = try await uploadReply(name, content, in: parentId, query: query)
        #expect(reply.status == 201, "upload \(name): \(reply.text)")
        return try reply.decode()
    }

    func uploadReply(_ name: String, _ content: Data, in parentId: String? = nil, query: String = "", headers: [String: String] = [:]) async throws -> Reply {
        var path = "/v1/upload?uploadType=media&name=\(name.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? name)"
        if let parentId { path += "&parentId=\(parentId)" }
        return try await send(.POST, path + query, body: content, headers: headers)
    }

    func list(_ parentId: String? = nil, query: String = "") async throws -> FileList {
        try await get("/v1/files?" + (parentId.map { "parentId=\($0)&" } ?? "") + query).decode()
    }

    func content(_ fileId: String) async throws -> Data { try await get("/v1/files/\(fileId)/content").body }
}

/// `count` random bytes from the crypto library's generator (one call, not a system call per byte: that took a
/// second per MiB in debug builds).
func randomData(_ count: Int) -> Data {
    guard count > 0 else { return Data() }
    return SymmetricKey(size: SymmetricKeySize(bitCount: count * 8)).withUnsafeBytes { Data($0) }
}

import Crypto

/// `count` random-looking bytes that are the same in every run for one `seed` (AES-GCM's keystream under a key
/// derived from it): for tests whose bounds depend on the content (where FastCDC cuts), so they cannot flake.
func seededData(_ count: Int, seed: String) -> Data {
    guard count > 0 else { return Data() }
    let key = SymmetricKey(data: SHA256.hash(data: Data(seed.utf8)))
    // A fixed nonce is fine here: this is a keystream for tests, not encryption.
    // (Copied out: the sealed box's ciphertext is a slice whose indices do not start at 0.)
    return (try? Data(AES.GCM.seal(Data(count: count), using: key, nonce: AES.GCM.Nonce(data: Data(count: 12))).ciphertext)) ?? Data(count: count)
}

func sha256(_ data: Data) -> String {
    SHA256.hash(data: data).map { String(format: "%02x", $0) }.joined()
}
