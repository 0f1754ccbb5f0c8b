import Foundation
import NimbusAPI
import NimbusServer
import NimbusTestSupport
import NIOHTTP1
import Testing

/// The operator's account commands (`nimbus user list|passwd|quota|disable|enable|remove`, through ``Admin``) on the
/// store of a server that is running — SQLite beside it, or the same PostgreSQL — and what its clients see at once.
@Suite("Operating: users")
struct UserAdminTests {
    /// Runs `body` with a server and the `--data` / `--database` the commands would be given.
    static func run(_ body: @Sendable (TestServer, URL, String?) async throws -> Void) async throws {
        let database = TestServices.scaledOut ? try TestServices.postgresURL() : nil
        try await TestServer.run(configure: { if let database { $0.database = database } }) { server in
            try await body(server, server.dataDirectory, database)
        }
    }

    /// A WebDAV listing of the user's root with an app password: its status.
    static func davStatus(_ server: TestServer, _ user: String, _ password: String) async throws -> Int {
        let basic = "Basic " + Data("\(user):\(password)".utf8).base64EncodedString()
        return try await APIClient(baseURL: server.baseURL).send(
            HTTPMethod(rawValue: "PROPFIND"), "/remote.php/dav/files/\(user)/", headers: ["Authorization": basic, "Depth": "1"]
        ).status
    }

    @Test("list shows every account with quota, use, devices and last sign-in; quota changes what the server enforces")
    func listAndQuota() async throws {
        try await Self.run { server, data, database in
            let alice = try await server.signUp("alice")
            _ = try await server.signUp("bob")
            _ = try await alice.upload("a.txt", Data(repeating: 7, count: 1000))
            let users = try await Admin.users(dataDirectory: data, database: database)
            #expect(users.map(\.username) == ["alice", "bob"])
            let a = try #require(users.first)
            #expect(a.used == 1000 && a.quota == nil && a.devices == 1 && a.appPasswords == 0 && !a.disabled)
            #expect(a.lastSeen != nil)

            let limited = try await Admin.setQuota(dataDirectory: data, database: database, username: "alice", quota: 1500)
            #expect(limited.quota == 1500 && limited.used == 1000)
            #expect(try await alice.get("/v1/about").decode(About.self).quota.limit == 1500)
            let over = try await alice.uploadReply("b.bin", Data(repeating: 1, count: 1000))
            #expect(over.status == 507 && over.errorCode == "quota_exceeded", "\(over.status) \(over.text)")
            _ = try await Admin.setQuota(dataDirectory: data, database: database, username: "alice", quota: nil)
            #expect(try await alice.uploadReply("b.bin", Data(repeating: 1, count: 1000)).status == 201)
            #expect(try await alice.get("/v1/about").decode(About.self).quota.limit == nil)

            // Unknown users and a data folder with no server in it are refused, and make nothing.
            await #expect(throws: (any Error).self) { _ = try await Admin.setQuota(dataDirectory: data, database: database, username: "nobody", quota: 1) }
            let empty = FileManager.default.temporaryDirectory.appending(path: "nimbus-none-\(UUID().uuidString)")
            await #expect(throws: (any Error).self) { _ = try await Admin.users(dataDirectory: empty, database: nil) }
            #expect(!FileManager.default.fileExists(atPath: empty.path), "no folder made for a typo")
        }
    }

    @Test("disable refuses sign-in, live tokens, refresh, app passwords and public links at once, keeps the data; enable brings them back")
    func disableAndEnable() async throws {
        try await Self.run { server, data, database in
            let alice = try await server.signUp("alice")
            let file = try await alice.upload("keep.txt", Data("kept".utf8))
            let app: AppPassword = try await alice.send(.POST, "/v1/auth/app-passwords", json: AppPasswordRequest(label: "dav")).decode()
            let secret = try #require(app.password)
            #expect(try await Self.davStatus(server, "alice", secret) == 207)
            let link: Link = try await alice.send(.POST, "/v1/files/\(file.id)/links", json: LinkRequest(access: .view)).decode()
            let linked = "/v1/public/\(try #require(link.token))/items/\(file.id)/content"
            #expect(try await APIClient(baseURL: server.baseURL).get(linked).status == 200)

            #expect(try await Admin.setDisabled(dataDirectory: data, database: database, username: "alice", true))
            #expect(try await Admin.setDisabled(dataDirectory: data, database: database, username: "alice", true) == false, "already")
            let anonymous = APIClient(baseURL: server.baseURL)
            let token = try await alice.get("/v1/files/\(file.id)")
            #expect(token.status == 401 && token.errorCode == "account_disabled", "\(token.status) \(token.text)")
            let login = try await anonymous.send(.POST, "/v1/auth/login", json: Credentials(username: "alice", password: "correct horse"))
            #expect(login.status == 401 && login.errorCode == "account_disabled", "\(login.text)")
            let wrong = try await anonymous.send(.POST, "/v1/auth/login", json: Credentials(username: "alice", password: "wrong password"))
            #expect(wrong.status == 401 && wrong.errorCode == "unauthorized", "a wrong password learns nothing more")
            let refresh = try await anonymous.send(.POST, "/v1/auth/refresh", json: RefreshRequest(refreshToken: try #require(alice.tokens).refreshToken))
            #expect(refresh.status == 401 && refresh.errorCode == "account_disabled", "\(refresh.text)")
            #expect(try await Self.davStatus(server, "alice", secret) == 401)
            #expect(try await anonymous.get(linked).status == 410, "its public links stop with it")
            #expect(try await Admin.users(dataDirectory: data, database: database).first { $0.username == "alice" }?.disabled == true)

            #expect(try await Admin.setDisabled(dataDirectory: data, database: database, username: "alice", false))
            #expect(try await alice.content(file.id) == Data("kept".utf8), "the same token works again; the data was kept")
            #expect(try await Self.davStatus(server, "alice", secret) == 207)
            #expect(try await anonymous.get(linked).status == 200)
        }
    }

    @Test("passwd signs out every device and app password; the new password signs in, the old does not")
    func passwd() async throws {
        try await Self.run { server, data, database in
            let alice = try await server.signUp("alice")
            let app: AppPassword = try await alice.send(.POST, "/v1/auth/app-passwords", json: AppPasswordRequest(label: "dav")).decode()
            await #expect(throws: (any Error).self) {
                try await Admin.setPassword(dataDirectory: data, database: database, username: "alice", password: "short", bcryptCost: 4)
            }
            #expect(try await alice.get("/v1/about").status == 200, "a refused password changes nothing")
            try await Admin.setPassword(dataDirectory: data, database: database, username: "alice", password: "a new horse", bcryptCost: 4)
            #expect(try await alice.get("/v1/about").status == 401)
            let anonymous = APIClient(baseURL: server.baseURL)
            #expect(try await Self.davStatus(server, "alice", try #require(app.password)) == 401)
            #expect(try await anonymous.send(.POST, "/v1/auth/login", json: Credentials(username: "alice", password: "correct horse")).status == 401)
            _ = try await server.logIn("alice", password: "a new horse")
            #expect(try await Admin.users(dataDirectory: data, database: database).first?.appPasswords == 0)
        }
    }

    @Test("remove takes the account and its data; a grantee's mount goes in their feed; the blocks go at the next sweep")
    func remove() async throws {
        try await Self.run { server, data, database in
            let s = try await SharingTests.share(server, role: .editor)
            let big = randomData(300_000)
            _ = try await s.alice.upload("big.bin", big)
            let start: ChangeCursor = try await s.bob.get("/v1/changes/start").decode()
            let (removed, items) = try await Admin.removeUser(dataDirectory: data, database: database, username: "alice")
            #expect(removed.username == "alice" && removed.used > 300_000)
            #expect(items == 5, "Project, plan.txt, Private, secret.txt, big.bin")
            #expect(try await Admin.users(dataDirectory: data, database: database).map(\.username) == ["bob"])
            #expect(try await s.alice.get("/v1/about").status == 401)
            let anonymous = APIClient(baseURL: server.baseURL)
            #expect(try await anonymous.send(.POST, "/v1/auth/login", json: Credentials(username: "alice", password: "correct horse")).status == 401)
            let feed: ChangeList = try await s.bob.get("/v1/changes?cursor=\(start.cursor)").decode()
            #expect(feed.changes.map(\.type) == [.delete] && feed.changes.first?.fileId == s.project.id, "\(feed.changes)")
            #expect(try await s.bob.list().files.isEmpty)
            #expect(try await s.bob.get("/v1/files/\(s.plan.id)").status == 404)

            // The name is free again, for a new account with nothing of the old one's.
            let again = try await server.signUp("alice")
            #expect(try await again.list().files.isEmpty)
            #expect(try await again.get("/v1/about").decode(About.self).quota.used == 0)

            // Its blocks are freed, and the sweep deletes them (and their packs) after the freed-space grace.
            #expect(try await server.parts.storedBlockCount() > 0)
            server.clock.advance(by: 2 * 3600)
            await server.parts.runMaintenance()
            #expect(try await server.parts.storedBlockCount() == 0, "bob holds nothing of his own")
            await #expect(throws: (any Error).self) { _ = try await Admin.removeUser(dataDirectory: data, database: database, username: "nobody") }
        }
    }
}
