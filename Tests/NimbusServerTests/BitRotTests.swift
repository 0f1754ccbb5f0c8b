import Foundation
import NimbusAPI
import NimbusServer
import NimbusTestSupport
import NIOHTTP1
import Testing

/// A byte flipped on the server's disk (a failing disk, a bad controller): never served as the file, found by
/// `nimbus admin verify` and by the scrub before anyone reads it, healed by uploading the same content again.
@Suite("Operating: bit rot caught and healed")
struct BitRotTests {
    /// A server keeping blocks in its data folder (on PostgreSQL too, when the suite runs scaled out), and the
    /// `--database` to give the admin commands.
    static func run(_ body: @Sendable (TestServer, String?) async throws -> Void) async throws {
        let database = TestServices.scaledOut ? try TestServices.postgresURL() : nil
        try await TestServer.run(configure: { configuration in
            configuration.database = database
            configuration.blobs = nil
        }) { server in try await body(server, database) }
    }

    /// Flips one bit of the content at `offset` of the (only) pack a whole upload of random bytes went into.
    static func flip(_ server: TestServer, userId: String, at offset: Int) throws {
        let folder = server.dataDirectory.appending(path: "packs/\(userId)")
        let packs = try FileManager.default.contentsOfDirectory(atPath: folder.path)
        let pack = folder.appending(path: try #require(packs.first))
        var bytes = try Data(contentsOf: pack)
        bytes[offset] ^= 0x01
        try bytes.write(to: pack)
    }

    /// Asks `path`; the answer must not be the file's bytes with rot in them: an error status, or the connection cut
    /// before the end (AsyncHTTPClient throws). Returns the status (nil: cut).
    static func refused(_ client: APIClient, _ path: String, headers: [String: String] = [:], wrong: Data) async -> Int? {
        do {
            let reply = try await client.send(.GET, path, headers: headers)
            #expect(reply.status >= 400, "\(path): \(reply.status), \(reply.body.count) bytes")
            #expect(!reply.body.isEmpty && !wrong.starts(with: reply.body) || reply.status >= 400)
            return reply.status
        } catch {
            return nil
        }
    }

    static func blockHolding(_ client: APIClient, fileId: String, offset: Int64) async throws -> String {
        let manifest: BlockManifest = try await client.get("/v1/files/\(fileId)/blocks").decode()
        var start: Int64 = 0
        for block in manifest.blocks {
            if offset < start + block.size { return block.hash }
            start += block.size
        }
        throw CancellationError()
    }

    @Test("a flipped byte is served by no route; verify names the file; uploading the content again heals every file using it")
    func caughtOnReadAndHealed() async throws {
        try await Self.run { server, database in
            let alice = try await server.signUp("alice")
            let userId = try #require(alice.tokens).userId
            let v1 = Data("the first version".utf8)
            _ = try await alice.upload("f.bin", v1)
            let content = randomData(2_000_000)
            let file = try await alice.upload("f.bin", content, query: "&onConflict=replace")
            let damagedHash = try await Self.blockHolding(alice, fileId: file.id, offset: 1_000_000)
            try Self.flip(server, userId: userId, at: 1_000_000)
            var wrong = content
            wrong[1_000_000] ^= 0x01

            // Every route that serves content: whole, a range in the damaged block, a range beside it, its revision,
            // the block itself, WebDAV, a zip, a public link.
            let first = await Self.refused(alice, "/v1/files/\(file.id)/content", wrong: wrong)
            #expect(first == nil, "the headers were out: the connection is cut before the end")
            #expect(await Self.refused(alice, "/v1/files/\(file.id)/content", headers: ["Range": "bytes=999990-1000010"], wrong: wrong) != 200)
            let revisions: RevisionList = try await alice.get("/v1/files/\(file.id)/revisions").decode()
            let head = try #require(revisions.revisions.first { $0.revisionId == file.revisionId })
            #expect(await Self.refused(alice, "/v1/files/\(file.id)/revisions/\(head.revisionId)/content", wrong: wrong) != 200)
            #expect(try await alice.get("/v1/blocks/\(damagedHash)").status == 404, "marked damaged: no such block to read")
            let app: AppPassword = try await alice.send(.POST, "/v1/auth/app-passwords", json: AppPasswordRequest(label: "dav")).decode()
            let basic = "Basic " + Data("alice:\(try #require(app.password))".utf8).base64EncodedString()
            #expect(await Self.refused(APIClient(baseURL: server.baseURL), "/remote.php/dav/files/alice/f.bin", headers: ["Authorization": basic], wrong: wrong) != 200)
            #expect(await Self.refused(alice, "/v1/zip?ids=\(file.id)", wrong: wrong) != 200)
            let link: Link = try await alice.send(.POST, "/v1/files/\(file.id)/links", json: LinkRequest(access: .view)).decode()
            #expect(await Self.refused(APIClient(baseURL: server.baseURL), "/v1/public/\(try #require(link.token))/items/\(file.id)/content", wrong: wrong) != 200)

            // What rot did not touch is served: a range before it, the older version.
            let before = try await alice.send(.GET, "/v1/files/\(file.id)/content", headers: ["Range": "bytes=0-99"])
            #expect(before.status == 206 && before.body == content.prefix(100))
            let older = try #require(revisions.revisions.first { $0.revisionId != file.revisionId })
            #expect(try await alice.get("/v1/files/\(file.id)/revisions/\(older.revisionId)/content").body == v1)
            // Counted, and reported missing: the next upload of it stores it again.
            #expect(try await APIClient(baseURL: server.baseURL).get("/metrics").text.contains("nimbus_blocks_damaged_total{store=\"local\"}"))
            let missing: MissingBlocksResponse = try await alice.send(.POST, "/v1/blocks/missing", json: MissingBlocksRequest(hashes: [damagedHash])).decode()
            #expect(missing.missing == [damagedHash])

            let found = try await Admin.verify(dataDirectory: server.dataDirectory, database: database)
            #expect(found.damagedBlocks == 1 && found.checkedBlocks > 20, "\(found)")
            #expect(found.damagedFiles.map(\.path) == ["/f.bin"] && found.damagedFiles.first?.username == "alice" && found.damagedFiles.first?.head == true)

            // The same bytes uploaded again — here as another file — make every file using the block whole.
            _ = try await alice.upload("copy of f.bin", content)
            #expect(try await alice.content(file.id) == content)
            let healed = try await Admin.verify(dataDirectory: server.dataDirectory, database: database)
            #expect(healed.damagedFiles.isEmpty && healed.damagedBlocks == 0, "\(healed)")
            #expect(healed.healedBlocks == 1 && healed.healedFiles.map(\.path).contains("/f.bin"), "\(healed)")
            #expect(try await Admin.verify(dataDirectory: server.dataDirectory, database: database).healedBlocks == 0, "said once")
        }
    }

    @Test("the scrub finds rot no read touched; a block sent again by the block API heals it")
    func scrubbedAndHealedByBlocks() async throws {
        try await Self.run { server, database in
            let alice = try await server.signUp("alice")
            let userId = try #require(alice.tokens).userId
            let content = randomData(1_500_000)
            let file = try await alice.upload("quiet.bin", content)
            // Two blocks of the one pack: the scrub's pass over the pack goes on after the first.
            let hashes = [try await Self.blockHolding(alice, fileId: file.id, offset: 700_000), try await Self.blockHolding(alice, fileId: file.id, offset: 1_300_000)]
            try #require(hashes[0] != hashes[1])
            try Self.flip(server, userId: userId, at: 700_000)
            try Self.flip(server, userId: userId, at: 1_300_000)
            let before: MissingBlocksResponse = try await alice.send(.POST, "/v1/blocks/missing", json: MissingBlocksRequest(hashes: hashes)).decode()
            #expect(before.missing.isEmpty, "nothing read them yet")
            await server.parts.runMaintenance()
            let after: MissingBlocksResponse = try await alice.send(.POST, "/v1/blocks/missing", json: MissingBlocksRequest(hashes: hashes)).decode()
            #expect(after.missing == hashes, "the scrub found both")

            // A client sends the block again (as a sync would, told it is missing).
            let manifest: BlockManifest = try await alice.get("/v1/files/\(file.id)/blocks").decode()
            var start = 0
            for block in manifest.blocks {
                defer { start += Int(block.size) }
                guard hashes.contains(block.hash) else { continue }
                let put = try await alice.send(.PUT, "/v1/blocks/\(block.hash)", body: content.subdata(in: start..<start + Int(block.size)))
                #expect(put.status == 201, "\(put.status) \(put.text)")
            }
            #expect(try await alice.content(file.id) == content)
            let verified = try await Admin.verify(dataDirectory: server.dataDirectory, database: database)
            #expect(verified.damagedFiles.isEmpty && verified.healedFiles.map(\.path) == ["/quiet.bin"], "\(verified)")
        }
    }
}
