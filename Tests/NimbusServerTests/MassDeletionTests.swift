import Foundation
import NimbusAPI
@testable import NimbusServer
import Testing

/// The server's mass-deletion breaker: one device deleting too much too fast is paused (409
/// `mass_deletion_paused`, nothing deleted) until the user confirms; what went is restored in one call.
@Suite("Mass-deletion breaker")
struct MassDeletionTests {
    /// A user with `count` empty files in one folder, signed in on two devices.
    static func user(_ server: TestServer, files count: Int) async throws -> (laptop: APIClient, web: APIClient, files: [File]) {
        let name = "u" + UUID().uuidString.prefix(8).lowercased()
        _ = try await server.signUp(name)
        let laptop = try await server.logIn(name, device: "laptop")
        let web = try await server.logIn(name, device: "web browser")
        let folder = try await laptop.mkdir("docs")
        var files: [File] = []
        for index in 0..<count {
            let reply = try await laptop.send(
                .POST, "/v1/files", json: CreateFileRequest(name: "f\(index).txt", mimeType: "text/plain", parentId: folder.id))
            #expect(reply.status == 201)
            files.append(try reply.decode())
        }
        return (laptop, web, files)
    }

    /// The same device with a fresh access token (after the test clock moved past the old one's expiry).
    static func refreshed(_ client: APIClient, _ server: TestServer) async throws -> APIClient {
        let refresh = try #require(client.tokens?.refreshToken)
        let tokens: TokenPair = try await APIClient(baseURL: server.baseURL).send(.POST, "/v1/auth/refresh", json: RefreshRequest(refreshToken: refresh)).decode()
        return APIClient(baseURL: server.baseURL, token: tokens.accessToken, tokens: tokens)
    }

    @Test("over half of the items and at least the minimum within the window pauses that device only, deleting nothing more; confirm lets it go on")
    func shareOfItems() async throws {
        try await TestServer.run(configure: { $0.massDeletion = MassDeletionLimits(threshold: MassDeletionThreshold(fraction: 0.5, minimum: 10, absolute: 1000)) }) { server in
            let (laptop, web, files) = try await Self.user(server, files: 30)
            let started = server.clock.now()
            // 31 items (a folder and 30 files): the 16th deletion would be over half of them.
            for file in files.prefix(15) {
                let reply = try await laptop.send(.DELETE, "/v1/files/\(file.id)")
                #expect(reply.status == 204, "\(reply.text)")
            }
            server.clock.advance(by: 60)
            let refused = try await laptop.send(.DELETE, "/v1/files/\(files[15].id)")
            #expect(refused.status == 409)
            #expect(refused.errorCode == "mass_deletion_paused")
            #expect(refused.text.contains("nimbus trash confirm"))
            let kept: File = try await laptop.get("/v1/files/\(files[15].id)").decode()
            #expect(!kept.trashed, "a refused deletion deletes nothing")
            // Paused: even one more (or a permanent deletion) is refused, whatever the count.
            let permanent = try await laptop.send(.DELETE, "/v1/files/\(files[16].id)?permanent=true")
            #expect(permanent.status == 409)
            #expect(permanent.errorCode == "mass_deletion_paused")
            #expect(try await laptop.get("/v1/files/\(files[16].id)").status == 200)
            // Another device of the same user is not paused.
            #expect(try await web.send(.DELETE, "/v1/files/\(files[29].id)").status == 204)

            let paused: DeletionPauseList = try await web.get("/v1/trash/paused").decode()
            #expect(paused.paused.count == 1)
            #expect(paused.paused.first?.deviceName == "laptop")
            #expect(paused.paused.first?.deletions == 16)
            #expect(paused.paused.first?.deviceId == laptop.tokens?.deviceId)

            // Undo everything since the start in one call: all 31 items are live again.
            let restore = try await web.send(.POST, "/v1/trash/restore", json: RestoreTrashRequest(since: started))
            #expect(restore.status == 200, "\(restore.text)")
            let restored: RestoreTrashResponse = try restore.decode()
            #expect(restored.restored == 16 && restored.items == 16)
            let trash: FileList = try await web.get("/v1/trash").decode()
            #expect(trash.files.isEmpty)
            let listed: FileList = try await web.list(files[0].parentId, query: "&limit=100")
            #expect(listed.files.count == 30)

            // The user confirms (here from the web): the laptop goes on, past the threshold, for the window.
            let confirmed = try await web.send(.POST, "/v1/trash/confirm")
            #expect(confirmed.status == 200)
            #expect(try confirmed.decode(DeletionPauseList.self).paused.map(\.deviceName) == ["laptop"])
            #expect(try await web.get("/v1/trash/paused").decode(DeletionPauseList.self).paused.isEmpty)
            for file in files.prefix(25) {
                let reply = try await laptop.send(.DELETE, "/v1/files/\(file.id)")
                #expect(reply.status == 204, "\(reply.text)")
            }
            // Nothing paused: confirming again is harmless.
            #expect(try await web.send(.POST, "/v1/trash/confirm").decode(DeletionPauseList.self).paused.isEmpty)
        }
    }

    @Test("a single request over the hourly cap is refused whole; the window slides, and a pause lasts until confirmed")
    func perWindow() async throws {
        try await TestServer.run(configure: { $0.massDeletion = MassDeletionLimits(threshold: MassDeletionThreshold(fraction: 0.5, minimum: 10_000, absolute: 5)) }) { server in
            var (laptop, web, files) = try await Self.user(server, files: 40)
            // A folder of 41 items in one request: over the cap, nothing trashed.
            let folder = try #require(files.first?.parentId)
            let whole = try await laptop.send(.DELETE, "/v1/files/\(folder)")
            #expect(whole.status == 409)
            #expect(whole.errorCode == "mass_deletion_paused")
            #expect(try await laptop.get("/v1/files/\(folder)").decode(File.self).trashed == false)
            #expect(try await laptop.list(folder, query: "&limit=100").files.count == 40)

            // The web device: 5 an hour pass; the 6th would be over the cap...
            for file in files[0..<5] { #expect(try await web.send(.DELETE, "/v1/files/\(file.id)").status == 204) }
            // ... but an hour later, the first five are out of the window.
            server.clock.advance(by: 3601)
            web = try await Self.refreshed(web, server)
            for file in files[5..<10] { #expect(try await web.send(.DELETE, "/v1/files/\(file.id)").status == 204) }
            #expect(try await web.send(.DELETE, "/v1/files/\(files[10].id)").status == 409)
            // A pause does not lapse with the window: only a confirmation lifts it.
            server.clock.advance(by: 7200)
            web = try await Self.refreshed(web, server)
            laptop = try await Self.refreshed(laptop, server)
            #expect(try await web.send(.DELETE, "/v1/files/\(files[11].id)").status == 409)
            #expect(try await laptop.send(.DELETE, "/v1/files/\(files[11].id)").status == 409, "the laptop is still paused too")
            let lifted: DeletionPauseList = try await laptop.send(.POST, "/v1/trash/confirm").decode()
            #expect(Set(lifted.paused.compactMap(\.deviceName)) == ["laptop", "web browser"])
            #expect(try await web.send(.DELETE, "/v1/files/\(folder)").status == 204)
            // The maintenance pass forgets what is older than the window (and lapsed confirmations).
            server.clock.advance(by: 7200)
            #expect(try await server.parts.dependencies.files.pruneDeletionLog(before: server.clock.now().addingTimeInterval(-3600)) > 0)
        }
    }

    @Test("a WebDAV client is held to the breaker too: its app password is the device, named by its label")
    func webDAV() async throws {
        try await TestServer.run(configure: { $0.massDeletion = MassDeletionLimits(threshold: MassDeletionThreshold(fraction: 0.5, minimum: 1_000, absolute: 3)) }) { server in
            let (api, basic) = try await DAVTests.user(server)
            for name in ["a", "b", "c", "d", "e"] { _ = try await api.upload("\(name).txt", Data(name.utf8)) }
            let dav = APIClient(baseURL: server.baseURL)
            for name in ["a", "b", "c"] {
                #expect(try await dav.send(.DELETE, "/dav/\(name).txt", headers: ["Authorization": basic]).status == 204)
            }
            let refused = try await dav.send(.DELETE, "/dav/d.txt", headers: ["Authorization": basic])
            #expect(refused.status == 409, "\(refused.text)")
            #expect(try await dav.send(.GET, "/dav/d.txt", headers: ["Authorization": basic]).status == 200, "nothing deleted")
            let paused: DeletionPauseList = try await api.get("/v1/trash/paused").decode()
            #expect(paused.paused.map(\.deviceName) == ["tests"])
            #expect(paused.paused.first?.deviceId.hasPrefix("app-password:") == true)
            // The /v1 device is not held up; after the confirmation, the WebDAV client goes on.
            #expect(try await api.send(.POST, "/v1/trash/confirm").status == 200)
            #expect(try await dav.send(.DELETE, "/dav/d.txt", headers: ["Authorization": basic]).status == 204)
        }
    }

    @Test("turned off, nothing is paused; restoring since a time takes folders back before what was trashed out of them")
    func disabledAndRestoreOrder() async throws {
        try await TestServer.run(configure: { $0.massDeletion.enabled = false }) { server in
            let (laptop, _, files) = try await Self.user(server, files: 12)
            let folder = try #require(files.first?.parentId)
            let before = server.clock.now()
            server.clock.advance(by: 1)
            // A file trashed first, then its folder: both are trash roots.
            #expect(try await laptop.send(.DELETE, "/v1/files/\(files[0].id)").status == 204)
            server.clock.advance(by: 1)
            #expect(try await laptop.send(.DELETE, "/v1/files/\(folder)").status == 204)
            // Something trashed before `since` stays in the trash.
            let reply = try await laptop.send(.POST, "/v1/trash/restore", json: RestoreTrashRequest(since: before.addingTimeInterval(1.5)))
            let restored: RestoreTrashResponse = try reply.decode()
            #expect(restored.restored == 1 && restored.items == 12)
            #expect(try await laptop.get("/v1/trash").decode(FileList.self).files.map(\.id) == [files[0].id])
            let again: RestoreTrashResponse = try await laptop.send(.POST, "/v1/trash/restore", json: RestoreTrashRequest(since: before)).decode()
            #expect(again.restored == 1 && again.items == 1)
            let back: File = try await laptop.get("/v1/files/\(files[0].id)").decode()
            #expect(back.parentId == folder, "back in its folder, not in the root")
            #expect(try await laptop.list(folder, query: "&limit=100").files.count == 12)
            // Bad input changes nothing.
            let bad = try await laptop.send(.POST, "/v1/trash/restore", body: Data(#"{"since":"yesterday"}"#.utf8), headers: ["Content-Type": "application/json"])
            #expect(bad.status == 400)
            #expect(bad.errorCode == "invalid_request")
            #expect(try await APIClient(baseURL: server.baseURL).send(.POST, "/v1/trash/confirm").status == 401)
        }
    }
}
