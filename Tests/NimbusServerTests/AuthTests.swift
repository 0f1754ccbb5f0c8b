import Crypto
import Foundation
import NIOConcurrencyHelpers
import NimbusAPI
@testable import NimbusServer
import NimbusTestSupport
import Testing

@Suite("Authentication")
struct AuthTests {
    @Test("register, log in, and reach a protected route with the access token")
    func registerAndLogIn() async throws {
        try await TestServer.run { server in
            let anonymous = APIClient(baseURL: server.baseURL)
            let reply = try await anonymous.send(.POST, "/v1/auth/register", json: Credentials(username: "alice", password: "correct horse"))
            #expect(reply.status == 201)
            let user: RegisteredUser = try reply.decode()
            #expect(user.username == "alice")

            let alice = try await server.logIn("alice")
            let tokens = try #require(alice.tokens)
            #expect(tokens.userId == user.userId)
            #expect(!tokens.deviceId.isEmpty)
            #expect(tokens.expiresAt > server.clock.now())
            #expect(tokens.expiresAt <= server.clock.now().addingTimeInterval(15 * 60 + 1))
            let about: About = try await alice.get("/v1/about").decode()
            #expect(about.username == "alice")
            #expect(about.apiVersion == "v1")
        }
    }

    @Test("a taken username is a 409 and bad usernames or passwords are 400s")
    func registrationErrors() async throws {
        try await TestServer.run { server in
            _ = try await server.signUp("bob")
            let anonymous = APIClient(baseURL: server.baseURL)
            let again = try await anonymous.send(.POST, "/v1/auth/register", json: Credentials(username: "bob", password: "another one"))
            #expect(again.status == 409)
            #expect(again.errorCode == "username_taken")
            for (username, password) in [("", "long enough"), ("has space", "long enough"), ("carol", "short"), (String(repeating: "x", count: 65), "long enough")] {
                let reply = try await anonymous.send(.POST, "/v1/auth/register", json: Credentials(username: username, password: password))
                #expect(reply.status == 400, "\(username)/\(password)")
                _ = reply.errorCode
            }
            let malformed = try await anonymous.send(.POST, "/v1/auth/register", body: Data("{not json".utf8), headers: ["Content-Type": "application/json"])
            #expect(malformed.status == 400)
            #expect(malformed.errorCode == "invalid_request")
            // A JSON body too big to read is 413 with the usual error body, signed in or not — never a 500.
            let huge = Data(("{\"username\":\"" + String(repeating: "x", count: 2 << 20) + "\",\"password\":\"long enough\"}").utf8)
            for (client, path) in [(anonymous, "/v1/auth/register"), (anonymous, "/v1/auth/login"), (try await server.signUp(), "/v1/files")] {
                let reply = try await client.send(.POST, path, body: huge, headers: ["Content-Type": "application/json"])
                #expect(reply.status == 413, "\(path): \(reply.status) \(reply.text)")
                #expect(reply.errorCode == "too_large", "\(path)")
            }
        }
    }

    @Test("registration is refused with 403 unless the server allows it")
    func registrationClosed() async throws {
        try await TestServer.run(configure: { $0.allowRegistration = false }) { server in
            let reply = try await APIClient(baseURL: server.baseURL).send(
                .POST, "/v1/auth/register", json: Credentials(username: "dave", password: "correct horse"))
            #expect(reply.status == 403)
            #expect(reply.errorCode == "forbidden")
        }
    }

    @Test("users added offline with Admin.addUser can log in, with a bcrypt cost of at least 10 by default")
    func offlineUser() async throws {
        let directory = FileManager.default.temporaryDirectory.appending(path: "nimbus-admin-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        // Scaled out, the user goes into the PostgreSQL database the server will use.
        let database = TestServices.scaledOut ? try TestServices.postgresURL() : nil
        let added = try await Admin.addUser(dataDirectory: directory, database: database, username: "erin", password: "correct horse", quota: 1000)
        #expect(added.created)
        await #expect(throws: (any Error).self) {
            _ = try await Admin.addUser(dataDirectory: directory, database: database, username: "erin", password: "correct horse", quota: nil)
        }
        if database == nil {
            let hash = try String(decoding: Data(contentsOf: directory.appending(path: "nimbus.sqlite")), as: UTF8.self)
            #expect(hash.contains("$2b$10$"), "the stored hash uses bcrypt with cost 10")
        }
        try await TestServer.run(configure: { $0.dataDirectory = directory; $0.database = database }) { server in
            let erin = try await server.logIn("erin")
            let about: About = try await erin.get("/v1/about").decode()
            #expect(about.quota.limit == 1000)
            #expect(about.quota.used == 0)
        }
    }

    @Test("wrong passwords are 401, and repeated failures lock the account from that address with 429 and Retry-After")
    func loginRateLimit() async throws {
        try await TestServer.run { server in
            _ = try await server.signUp("frank")
            let anonymous = APIClient(baseURL: server.baseURL)
            for _ in 0..<4 {
                let reply = try await anonymous.send(.POST, "/v1/auth/login", json: Credentials(username: "frank", password: "wrong password"))
                #expect(reply.status == 401)
                #expect(reply.errorCode == "unauthorized")
            }
            let fifth = try await anonymous.send(.POST, "/v1/auth/login", json: Credentials(username: "frank", password: "wrong password"))
            #expect(fifth.status == 401)
            let locked = try await anonymous.send(.POST, "/v1/auth/login", json: Credentials(username: "frank", password: "correct horse"))
            #expect(locked.status == 429)
            #expect(locked.errorCode == "rate_limited")
            let retryAfter = try #require(locked.header("Retry-After").flatMap(Int.init))
            #expect(retryAfter > 0)
            server.clock.advance(by: TimeInterval(retryAfter + 1))
            let after = try await anonymous.send(.POST, "/v1/auth/login", json: Credentials(username: "frank", password: "correct horse"))
            #expect(after.status == 200)
            let unknown = try await anonymous.send(.POST, "/v1/auth/login", json: Credentials(username: "nobody", password: "correct horse"))
            #expect(unknown.status == 401)

            // Per account and source address: a stranger at 127.0.0.2 locks out only 127.0.0.2.
            // curl waited for off Swift's cooperative pool (DAVTests.run): a blocking wait there, with another test
            // blocking the pool's other thread, left the server under test no thread to answer curl with (CI hung).
            func curlLogin(_ password: String, from address: String) async throws -> Int {
                let body = "{\"username\":\"frank\",\"password\":\"\(password)\"}"
                let arguments = ["-s", "-o", "/dev/null", "-w", "%{http_code}", "--interface", address, "-H", "Content-Type: application/json",
                    "-d", body, server.baseURL + "/v1/auth/login"]
                let (_, output) = try await DAVTests.run("/usr/bin/curl", arguments, in: FileManager.default.temporaryDirectory)
                return Int(output.trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
            }
            for _ in 0..<5 { #expect(try await curlLogin("wrong password", from: "127.0.0.2") == 401) }
            #expect(try await curlLogin("correct horse", from: "127.0.0.2") == 429, "the stranger's address is locked")
            let owner = try await anonymous.send(.POST, "/v1/auth/login", json: Credentials(username: "frank", password: "correct horse"))
            #expect(owner.status == 200, "the owner, from their own address, is not: \(owner.status)")
        }
    }

    @Test("refresh rotates the refresh token; a retry within a minute gets the same new one; a later replay signs the device out")
    func refreshRotation() async throws {
        try await TestServer.run { server in
            let client = try await server.signUp()
            let first = try #require(client.tokens)
            let anonymous = APIClient(baseURL: server.baseURL)
            let reply = try await anonymous.send(.POST, "/v1/auth/refresh", json: RefreshRequest(refreshToken: first.refreshToken))
            #expect(reply.status == 200)
            let second: TokenPair = try reply.decode()
            #expect(second.refreshToken != first.refreshToken)
            #expect(second.deviceId == first.deviceId)

            // Retried within the grace window (the answer was lost; refreshes raced): the same new refresh token,
            // nothing revoked — eight at once all get it.
            let retried = try await withThrowingTaskGroup(of: APIClient.Reply.self) { group in
                for _ in 0..<8 { group.addTask { try await anonymous.send(.POST, "/v1/auth/refresh", json: RefreshRequest(refreshToken: first.refreshToken)) } }
                return try await group.reduce(into: [APIClient.Reply]()) { $0.append($1) }
            }
            for reply in retried {
                #expect(reply.status == 200, "\(reply.text)")
                #expect(try reply.decode(TokenPair.self).refreshToken == second.refreshToken)
            }
            #expect(try await APIClient(baseURL: server.baseURL, token: second.accessToken).get("/v1/about").status == 200)

            // Later than that, the old token is a replay: someone else has it, and the device is signed out.
            server.clock.advance(by: 61)
            let replay = try await anonymous.send(.POST, "/v1/auth/refresh", json: RefreshRequest(refreshToken: first.refreshToken))
            #expect(replay.status == 401)
            // The replay revoked the device: the new tokens are dead too.
            let afterReplay = try await anonymous.send(.POST, "/v1/auth/refresh", json: RefreshRequest(refreshToken: second.refreshToken))
            #expect(afterReplay.status == 401)
            let api = APIClient(baseURL: server.baseURL, token: second.accessToken)
            #expect(try await api.get("/v1/about").status == 401)
            let garbage = try await anonymous.send(.POST, "/v1/auth/refresh", json: RefreshRequest(refreshToken: "nonsense"))
            #expect(garbage.status == 401)
        }
    }

    @Test("logout revokes the device at once, by access token or by refresh token")
    func logout() async throws {
        try await TestServer.run { server in
            let phone = try await server.signUp("grace")
            let laptop = try await server.logIn("grace", device: "laptop")
            #expect(try await phone.send(.POST, "/v1/auth/logout").status == 204)
            #expect(try await phone.get("/v1/about").status == 401)
            #expect(try await laptop.get("/v1/about").status == 200, "other devices stay signed in")
            let anonymous = APIClient(baseURL: server.baseURL)
            let reply = try await anonymous.send(.POST, "/v1/auth/logout", json: RefreshRequest(refreshToken: laptop.tokens!.refreshToken))
            #expect(reply.status == 204)
            #expect(try await laptop.get("/v1/about").status == 401)
        }
    }

    @Test("app passwords: created with a label (the secret shown once, kept hashed), listed, revoked; per user; bad input changes nothing")
    func appPasswords() async throws {
        try await TestServer.run { server in
            let alice = try await server.signUp("alice")
            let made = try await alice.send(.POST, "/v1/auth/app-passwords", json: AppPasswordRequest(label: "  Finder on the laptop "))
            #expect(made.status == 201, "\(made.text)")
            #expect(made.header("Cache-Control") == "no-store")
            let first: AppPassword = try made.decode()
            let secret = try #require(first.password)
            #expect(first.label == "Finder on the laptop")
            #expect(secret.count == 29 && secret.split(separator: "-").count == 5, "\(secret)")
            server.clock.advance(by: 1)
            let second: AppPassword = try await alice.send(.POST, "/v1/auth/app-passwords", json: AppPasswordRequest(label: "phone")).decode()
            #expect(second.id != first.id && second.password != secret)

            // Listed newest first, never with the secret; the store keeps only its SHA-256.
            let listed = try await alice.get("/v1/auth/app-passwords")
            #expect(listed.status == 200)
            #expect(!listed.text.contains(secret) && !listed.text.contains("\"password\""), "\(listed.text)")
            let list: AppPasswordList = try listed.decode()
            #expect(list.appPasswords.map(\.label) == ["phone", "Finder on the laptop"])
            let stored = try await server.parts.dependencies.accounts.appPasswords(userId: try #require(alice.tokens).userId)
            #expect(stored.allSatisfy { $0.passwordHash != secret })
            #expect(stored.contains { $0.passwordHash == sha256(Data(secret.utf8)) })

            // Bad labels and bodies are 400 and make nothing; no token is 401.
            for body in [#"{"label":""}"#, #"{"label":"   "}"#, #"{"label":"a\nb"}"#, "{\"label\":\"\(String(repeating: "x", count: 101))\"}", #"{}"#, "not json"] {
                let reply = try await alice.send(.POST, "/v1/auth/app-passwords", body: Data(body.utf8), headers: ["Content-Type": "application/json"])
                #expect(reply.status == 400, "\(body): \(reply.status) \(reply.text)")
            }
            let anonymous = APIClient(baseURL: server.baseURL)
            #expect(try await anonymous.send(.POST, "/v1/auth/app-passwords", json: AppPasswordRequest(label: "x")).status == 401)
            #expect(try await anonymous.get("/v1/auth/app-passwords").status == 401)
            #expect(try await anonymous.send(.DELETE, "/v1/auth/app-passwords/\(first.id)").status == 401)
            #expect(try await alice.get("/v1/auth/app-passwords").decode(AppPasswordList.self).appPasswords.count == 2)

            // Another user neither sees nor revokes them (404, as for anything of someone else's).
            let bob = try await server.signUp("bob")
            #expect(try await bob.get("/v1/auth/app-passwords").decode(AppPasswordList.self).appPasswords.isEmpty)
            let foreign = try await bob.send(.DELETE, "/v1/auth/app-passwords/\(first.id)")
            #expect(foreign.status == 404)
            #expect(foreign.errorCode == "not_found")

            // Revoked: gone from the list and from the store; a second revoke is 404.
            #expect(try await alice.send(.DELETE, "/v1/auth/app-passwords/\(first.id)").status == 204)
            #expect(try await alice.send(.DELETE, "/v1/auth/app-passwords/\(first.id)").status == 404)
            #expect(try await alice.get("/v1/auth/app-passwords").decode(AppPasswordList.self).appPasswords.map(\.id) == [second.id])
            #expect(try await server.parts.dependencies.accounts.useAppPassword(passwordHash: sha256(Data(secret.utf8)), now: server.clock.now()) == nil)
            let used = try await server.parts.dependencies.accounts.useAppPassword(passwordHash: sha256(Data(try #require(second.password).utf8)), now: server.clock.now())
            #expect(used?.id == second.id && used?.lastUsedAt != nil)
            // A new account password deletes the app passwords made under the old one.
            try await server.parts.dependencies.accounts.setPassword(userId: try #require(alice.tokens).userId, passwordHash: Accounts.dummyHash)
            #expect(try await server.parts.dependencies.accounts.appPasswords(userId: try #require(alice.tokens).userId).isEmpty)
        }
    }

    @Test("missing, malformed, tampered, expired, unsigned and foreign tokens are all 401")
    func badTokens() async throws {
        try await TestServer.run { server in
            let client = try await server.signUp()
            let token = try #require(client.token)
            let base = server.baseURL
            #expect(try await APIClient(baseURL: base).get("/v1/files/root").status == 401)
            #expect(try await APIClient(baseURL: base).get("/v1/files/root", headers: ["Authorization": "Basic abc"]).status == 401)
            #expect(try await APIClient(baseURL: base, token: "not.a.jwt").get("/v1/files/root").status == 401)
            var tampered = Array(token)
            tampered[tampered.count - 2] = tampered[tampered.count - 2] == "A" ? "B" : "A"
            #expect(try await APIClient(baseURL: base, token: String(tampered)).get("/v1/files/root").status == 401)

            let parts = token.split(separator: ".").map(String.init)
            let claims = try JSONSerialization.jsonObject(with: Data(base64URL: parts[1])) as! [String: Any]
            let unsigned = base64URL(Data(#"{"alg":"none","typ":"JWT"}"#.utf8)) + "." + parts[1] + "."
            #expect(try await APIClient(baseURL: base, token: unsigned).get("/v1/files/root").status == 401)

            // Tokens signed with the server's own secret but wrong in one claim or in the algorithm.
            let secret =
                TestServices.scaledOut
                ? try await server.parts.dependencies.accounts.sharedSetting("jwt-secret", orStore: "")
                : try String(contentsOf: server.dataDirectory.appending(path: "jwt-secret"), encoding: .utf8)
            let key = SymmetricKey(data: hexBytes(secret.trimmingCharacters(in: .whitespacesAndNewlines)))
            func forge(_ alg: String, _ change: (inout [String: Any]) -> Void) -> String {
                var payload = claims
                change(&payload)
                let header = base64URL(try! JSONSerialization.data(withJSONObject: ["alg": alg, "typ": "JWT"]))
                let body = base64URL(try! JSONSerialization.data(withJSONObject: payload))
                let input = header + "." + body
                let signature: Data =
                    alg == "HS384"
                    ? Data(HMAC<SHA384>.authenticationCode(for: Data(input.utf8), using: key))
                    : Data(HMAC<SHA256>.authenticationCode(for: Data(input.utf8), using: key))
                return input + "." + base64URL(signature)
            }
            let control = forge("HS256") { _ in }
            #expect(try await APIClient(baseURL: base, token: control).get("/v1/files/root").status == 200, "the forging itself is right")
            #expect(try await APIClient(baseURL: base, token: forge("HS256") { $0["aud"] = "someone-else" }).get("/v1/files/root").status == 401)
            #expect(try await APIClient(baseURL: base, token: forge("HS256") { $0["iss"] = "elsewhere" }).get("/v1/files/root").status == 401)
            #expect(try await APIClient(baseURL: base, token: forge("HS384") { _ in }).get("/v1/files/root").status == 401)

            server.clock.advance(by: 15 * 60 + 1)
            let expired = try await client.get("/v1/files/root")
            #expect(expired.status == 401)
            #expect(expired.errorCode == "unauthorized")
        }
    }

    @Test("the JWT secret is created on first start (mode 0600, or in the shared database) and kept across restarts")
    func secretFile() async throws {
        let directory = FileManager.default.temporaryDirectory.appending(path: "nimbus-secret-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        // Scaled out, the key lives in the database: a second server on it (a replica) accepts the first one's tokens.
        let database = TestServices.scaledOut ? try TestServices.postgresURL() : nil
        let issued = NIOLockedValueBox<APIClient?>(nil)
        try await TestServer.run(configure: { $0.dataDirectory = directory; $0.database = database }) { server in
            if database == nil {
                let attributes = try FileManager.default.attributesOfItem(atPath: directory.appending(path: "jwt-secret").path)
                #expect((attributes[.posixPermissions] as? Int) == 0o600)
            }
            let henry = try await server.signUp("henry")
            issued.withLockedValue { $0 = henry }
        }
        let first = database == nil ? try String(contentsOf: directory.appending(path: "jwt-secret"), encoding: .utf8) : ""
        try await TestServer.run(configure: { $0.dataDirectory = directory; $0.database = database }) { server in
            _ = try await server.logIn("henry")
            let earlier = try #require(issued.withLockedValue { $0 })
            let again = APIClient(baseURL: server.baseURL, token: earlier.token)
            #expect(try await again.get("/v1/files/root").status == 200, "a token from before the restart is still good")
        }
        if database == nil {
            #expect(try String(contentsOf: directory.appending(path: "jwt-secret"), encoding: .utf8) == first)
        }
    }
}

func base64URL(_ data: Data) -> String {
    data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
        .replacingOccurrences(of: "=", with: "")
}

extension Data {
    init(base64URL text: String) {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        self = Data(base64Encoded: base64) ?? Data()
    }
}

func hexBytes(_ hex: String) -> [UInt8] {
    var bytes: [UInt8] = []
    var index = hex.startIndex
    while index < hex.endIndex {
        let next = hex.index(index, offsetBy: 2)
        bytes.append(UInt8(hex[index..<next], radix: 16)!)
        index = next
    }
    return bytes
}
