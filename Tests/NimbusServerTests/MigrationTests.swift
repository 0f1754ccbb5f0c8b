import Foundation
import NIOConcurrencyHelpers
import NimbusAPI
@testable import NimbusServer
import NimbusTestSupport
import Testing

@Suite("Moving up: embedded store → PostgreSQL + S3", .disabled(if: TestServices.scaledOut, "migrates from the embedded store; run once"))
struct MigrationTests {
    struct Before: Sendable {
        var tokens: TokenPair
        var cursor: String
        var bigId: String
        var smallId: String
        var afterId: String
        var trashedId: String
        var v1: Data
        var v2: Data
        var textId: String
    }

    static let text = Data((0..<3000).map { "row \($0): some text that compresses well\n" }.joined().utf8)

    @Test("admin migrate copies everything and verifies it; tokens, refresh tokens and cursors keep working; a second run copies nothing")
    func migrate() async throws {
        let directory = FileManager.default.temporaryDirectory.appending(path: "nimbus-migrate-\(UUID().uuidString)")
        let fresh = FileManager.default.temporaryDirectory.appending(path: "nimbus-migrated-\(UUID().uuidString)")
        defer {
            try? FileManager.default.removeItem(at: directory)
            try? FileManager.default.removeItem(at: fresh)
        }
        let before = NIOLockedValueBox<Before?>(nil)
        try await TestServer.run(configure: { $0.dataDirectory = directory }) { server in
            let anonymous = APIClient(baseURL: server.baseURL)
            #expect(try await anonymous.send(.POST, "/v1/auth/register", json: Credentials(username: "mia", password: "correct horse")).status == 201)
            let tokens: TokenPair = try await anonymous.send(
                .POST, "/v1/auth/login", json: Credentials(username: "mia", password: "correct horse", deviceName: "laptop")).decode()
            let mia = APIClient(baseURL: server.baseURL, token: tokens.accessToken)
            let v1 = randomData(300_000), v2 = randomData(300_000)
            let big = try await mia.upload("big.bin", v1)
            #expect(try await mia.send(.POST, "/v1/upload?uploadType=media&fileId=\(big.id)", body: v2).status == 201)
            let small = try await mia.upload("small.txt", Data("small".utf8))
            let old = try await mia.upload("old.txt", Data("old".utf8))
            #expect(try await mia.send(.DELETE, "/v1/files/\(old.id)").status == 204)
            // A block of the block API: in a pack, kept compressed at rest; the pack goes to S3 as it is and reads back right.
            let hash = sha256(Self.text)
            #expect(try await mia.send(.PUT, "/v1/blocks/\(hash)", body: Self.text).status == 201)
            let text = try await mia.send(
                .POST, "/v1/blocks/commit",
                json: BlockCommitRequest(name: "text.txt", size: Int64(Self.text.count), checksum: hash, blocks: [.block(hash)]))
            #expect(text.status == 201, "\(text.text)")
            let textId = try text.decode(File.self).id
            let cursor: ChangeCursor = try await mia.get("/v1/changes/start").decode()
            let after = try await mia.upload("after.txt", Data("after the cursor".utf8))
            before.withLockedValue {
                $0 = Before(
                    tokens: tokens, cursor: cursor.cursor, bigId: big.id, smallId: small.id, afterId: after.id, trashedId: old.id, v1: v1, v2: v2, textId: textId)
            }
        }
        let was = try #require(before.withLockedValue { $0 })
        // A device the mass-deletion breaker paused stays paused after the move (its deletions wait for a confirm).
        let sqlite = try SQLiteDatabase(path: directory.appending(path: "nimbus.sqlite").path)
        try await sqlite.write { db in
            try db.perform("INSERT INTO deletion_guard (user_id, device_id, paused_at, paused_items) VALUES ('u-mig', 'd-mig', 1000, 42)", [])
            try db.perform("INSERT INTO deletion_log (user_id, device_id, at, items) VALUES ('u-mig', 'd-mig', 1000, 42)", [])
        }
        let database = try TestServices.postgresURL()
        let blobs = try TestServices.s3().blobsURL()
        let report = try await StoreCopier.copyAndVerify(dataDirectory: directory, toDatabase: database, toBlobs: blobs, environment: TestServices.s3Keys)
        #expect(report.rows.allSatisfy { $0.table == "settings" || $0.source == $0.target }, "\(report)")
        #expect(report.rows.first { $0.table == "files" }?.target == 6, "root, big, small, old, text, after")
        #expect(report.rows.first { $0.table == "deletion_guard" }?.target == 1, "the breaker's state moves too")
        #expect((report.rows.first { $0.table == "deletion_log" }?.target ?? 0) >= 2, "the test's own deletion, and the row put there")
        #expect(report.blocksCopied == 0, "every block is in a pack; small content rides in the rows")
        #expect(report.packsCopied == 3, "the two versions of the big file and the text's block, a pack each")
        #expect(report.blocksVerified > 3, "every content-defined block of both versions, and the text's")
        let again = try await StoreCopier.copyAndVerify(dataDirectory: directory, toDatabase: database, toBlobs: blobs, environment: TestServices.s3Keys)
        #expect(again.blocksCopied == 0 && again.packsCopied == 0, "interrupted or repeated: nothing is sent twice")
        #expect(again.rows.map(\.target) == report.rows.map(\.target))

        // The scaled-out server, on a new and empty data folder: everything comes from PostgreSQL and S3.
        try await TestServer.run(configure: {
            $0.dataDirectory = fresh
            $0.database = database
            $0.blobs = blobs
        }) { server in
            let mia = APIClient(baseURL: server.baseURL, token: was.tokens.accessToken)
            #expect(try await mia.get("/v1/files/root").status == 200, "an access token from before the move is accepted")
            let changes: ChangeList = try await mia.get("/v1/changes?cursor=\(was.cursor)").decode()
            #expect(changes.changes.map(\.fileId) == [was.afterId], "a cursor from before the move goes on where it was")
            #expect(try await mia.content(was.bigId) == was.v2)
            let revisions: RevisionList = try await mia.get("/v1/files/\(was.bigId)/revisions").decode()
            #expect(revisions.revisions.count == 2)
            let first = try #require(revisions.revisions.last)
            #expect(try await mia.get("/v1/files/\(was.bigId)/revisions/\(first.revisionId)/content").body == was.v1)
            #expect(try await mia.content(was.smallId) == Data("small".utf8))
            #expect(try await mia.content(was.textId) == Self.text)
            let trash: FileList = try await mia.get("/v1/trash").decode()
            #expect(trash.files.map(\.id) == [was.trashedId])
            #expect(try await mia.get("/v1/about").decode(About.self).quota.used == 600_000 + 5 + 3 + 16 + Int64(Self.text.count))
            let refreshed = try await APIClient(baseURL: server.baseURL).send(
                .POST, "/v1/auth/refresh", json: RefreshRequest(refreshToken: was.tokens.refreshToken))
            #expect(refreshed.status == 200, "the device stays signed in: \(refreshed.text)")
            let newer = try await mia.upload("new.txt", Data("written after the move".utf8))
            let next: ChangeList = try await mia.get("/v1/changes?cursor=\(changes.cursor)").decode()
            #expect(next.changes.map(\.fileId) == [newer.id], "the feed's sequence goes on after the copied rows")
        }
    }
}
