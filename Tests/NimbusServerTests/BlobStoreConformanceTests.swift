import Crypto
import Foundation
import NIOCore
import NIOPosix
import NimbusAPI
import NimbusS3
import NimbusTestSupport
import Testing

@testable import NimbusServer

/// The ``BlobStore`` contract, run against every implementation: the local folder and an S3 bucket (a real S3
/// server that checks signatures, `rclone serve s3`).
@Suite("BlobStore conformance")
struct BlobStoreConformanceTests {
    /// The local folder; S3 as `rclone serve s3` (checks signatures); S3 as moto (another implementation, whose
    /// bucket the store makes itself).
    enum Kind: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case local, s3, moto
        var testDescription: String { rawValue }
    }

    /// A store of `kind` with 64 KiB blocks over a fresh folder (and, for S3, a fresh key prefix).
    static func withStore(_ kind: Kind, _ body: (any BlobStore, URL) async throws -> Void) async throws {
        let folder = FileManager.default.temporaryDirectory.appending(path: "nimbus-blobs-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: folder) }
        switch kind {
        case .local:
            try await body(try LocalBlobStore(root: folder, blockSize: 64 * 1024), folder)
        case .s3, .moto:
            let s3 = try kind == .s3 ? TestServices.s3() : TestServices.moto()
            let client = S3Client(
                endpoint: URL(string: s3.endpoint)!, bucket: s3.bucket,
                signer: SigV4Signer(accessKey: s3.accessKey, secretKey: s3.secretKey, region: s3.region))
            let store = try S3BlobStore(client: client, prefix: UUID().uuidString, stagingRoot: folder, blockSize: 64 * 1024)
            try await store.ensureBucket()
            try await body(store, folder)
        }
    }

    static func stage(_ bytes: [UInt8], in store: any BlobStore) async throws -> [StagedBlock] {
        var stager = store.makeStager(runningHash: SHA256())
        try await stager.append(ByteBuffer(bytes: bytes))
        return try await stager.finish().blocks
    }

    static func read(_ store: any BlobStore, _ blocks: [BlockRef], user: String, range: Range<Int64>) async throws -> [UInt8] {
        var result: [UInt8] = []
        try await store.read(blocks, user: user, range: range) { result += Array(buffer: $0) }
        return result
    }

    /// The `…Blocking` calls wait on their thread: never on Swift's cooperative pool, as the server never does.
    static func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await NIOThreadPool.singleton.runIfActive(body)
    }

    static func staged(_ folder: URL) -> [String] {
        (try? FileManager.default.contentsOfDirectory(atPath: folder.appending(path: "tmp").path)) ?? []
    }

    /// A block staged as its own file (as stores before packs kept every block, and `admin migrate` still puts them).
    static func stageOwn(_ bytes: [UInt8], in folder: URL) throws -> StagedBlock {
        let path = folder.appending(path: "tmp").path + "/own-" + UUID().uuidString
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        return StagedBlock(ref: BlockRef(hash: SHA256.hash(data: bytes).hexString, size: Int64(bytes.count)), path: path)
    }

    @Test("put makes blocks durable and readable, by whole and by any range across blocks, inline ones included", arguments: Kind.allCases)
    func putAndRead(_ kind: Kind) async throws {
        try await Self.withStore(kind) { store, folder in
            // 600,000 bytes: more than two maximum-size blocks (256 KiB), so there are at least three whatever the random
            // bytes (200,000 could, rarely, be one block — and the reads below index the second).
            let content = [UInt8](randomData(600_000))
            let blocks = try await Self.stage(content, in: store)
            try #require(blocks.count >= 3, "content-defined blocks of ~64 KiB, at most 256 KiB")
            #expect(blocks.map(\.ref.size).reduce(0, +) == 600_000)
            #expect(Set(blocks.compactMap(\.ref.pack?.pack)).count == 1 && Self.staged(folder).count == 1, "all in one staged pack")
            for block in blocks { #expect(block.ref.hash == SHA256.hash(data: content[Int(block.ref.pack!.offset)..<Int(block.ref.pack!.offset + block.ref.size)]).hexString) }
            try await store.put(blocks, user: "u1")
            #expect(Self.staged(folder).isEmpty, "put consumes the staging files")
            for block in blocks { #expect(try await Self.offPool { try store.containsBlocking(block.ref, user: "u1") }) }
            #expect(try await !Self.offPool { try store.containsBlocking(blocks[0].ref, user: "u2") }, "one namespace per user")
            #expect(try await store.storedBlockCount() == 1, "one pack")
            // A small block kept in the database sits between stored ones: read serves it from memory.
            let inline: [UInt8] = Array("inline bytes".utf8)
            let refs = blocks.map(\.ref)
            let first = Int(refs[0].size), second = Int(refs[1].size)
            let mixed = [refs[0], BlockRef(hash: SHA256.hash(data: inline).hexString, size: Int64(inline.count), inline: inline), refs[1]]
            let whole = Array(content[0..<first]) + inline + Array(content[first..<first + second])
            #expect(try await Self.read(store, mixed, user: "u1", range: 0..<Int64(whole.count)) == whole)
            let edge = Int64(first)
            for range in [Int64(0)..<1, edge - 6..<edge + 14, edge..<edge + 12, edge + 4..<edge + 4000, 1000..<Int64(whole.count) - 2] {
                #expect(try await Self.read(store, mixed, user: "u1", range: range) == Array(whole[Int(range.lowerBound)..<Int(range.upperBound)]))
            }
            #expect(try await Self.read(store, refs, user: "u1", range: 0..<600_000) == content)
            // A block kept as its own file or object (stores before packs; `admin migrate`) reads the same way.
            let own = [UInt8](randomData(5000))
            let single = try Self.stageOwn(own, in: folder)
            try await store.put([single], user: "u1")
            #expect(try await Self.offPool { try store.containsBlocking(single.ref, user: "u1") })
            #expect(try await Self.read(store, [refs[0], single.ref], user: "u1", range: edge - 10..<edge + 5000) == Array(content[first - 10..<first]) + own)
            #expect(try await store.storedBlockCount() == 2)
        }
    }

    @Test("a block whose stored bytes no longer hash to its name is never passed on: the read stops before it, whole or ranged", arguments: Kind.allCases)
    func damagedNeverRead(_ kind: Kind) async throws {
        try await Self.withStore(kind) { store, _ in
            let content = [UInt8](randomData(600_000))
            let blocks = try await Self.stage(content, in: store)
            try await store.put(blocks, user: "u1")
            // What rot does, seen from the manifest: the second block's bytes are not the ones its name was made of.
            var refs = blocks.map(\.ref)
            refs[1].hash = SHA256.hash(data: Data("other bytes".utf8)).hexString
            let first = Int64(refs[0].size), second = Int64(refs[1].size)
            for range in [Int64(0)..<600_000, first + 10..<first + 20, first - 100..<first + 1, first + second - 1..<first + second + 100] {
                var got: [UInt8] = []
                await #expect(throws: DamagedBlock.self, "\(range)") {
                    try await store.read(refs, user: "u1", range: range) { got += Array(buffer: $0) }
                }
                let clean = Int(max(range.lowerBound, min(first, range.upperBound)) - range.lowerBound)
                #expect(got == Array(content[Int(range.lowerBound)..<Int(range.lowerBound) + clean]), "only what lies before the damaged block")
            }
            #expect(try await Self.read(store, refs, user: "u1", range: 0..<first) == Array(content[0..<Int(first)]), "the blocks around it read")
            #expect(try await Self.read(store, refs, user: "u1", range: first + second..<600_000) == Array(content[Int(first + second)...]))
            let inline: [UInt8] = Array("inline bytes".utf8)
            await #expect(throws: DamagedBlock.self) {
                _ = try await Self.read(store, [BlockRef(hash: refs[1].hash, size: Int64(inline.count), inline: inline)], user: "u1", range: 0..<4)
            }
        }
    }

    @Test("a commit's checksum is right from the first byte, and when it goes on from where one of the same first blocks left off (an append, an edit past the start, the same list again); never across users", arguments: Kind.allCases)
    func checksumResumes(_ kind: Kind) async throws {
        try await Self.withStore(kind) { store, _ in
            let user = "u-\(UUID().uuidString)"
            let original = [UInt8](randomData(10 << 20))
            func stored(_ bytes: [UInt8]) async throws -> [BlockRef] {
                let blocks = try await Self.stage(bytes, in: store)
                try await store.put(blocks, user: user)
                return blocks.map(\.ref)
            }
            func resumesAt(_ refs: [BlockRef], as who: String = user) -> Int { PrefixDigests.shared.start(PrefixDigests.keys(refs, user: who)).blocks }
            let first = try await stored(original)
            #expect(resumesAt(first) == 0)
            #expect(try await store.checksum(of: first, user: user) == SHA256.hash(data: original).hexString)
            #expect(resumesAt(first) == first.count, "the whole list's state is kept")
            #expect(try await store.checksum(of: first, user: user) == SHA256.hash(data: original).hexString)
            #expect(resumesAt(first, as: "someone else") == 0)

            let appended = original + [UInt8](randomData(1 << 20))
            let longer = try await stored(appended)
            let from = resumesAt(longer)
            #expect(from > first.count / 2, "an append goes on from (near) the end of what was checked")
            #expect(try await store.checksum(of: longer, user: user) == SHA256.hash(data: appended).hexString)

            var edited = original
            edited[7 << 20] ^= 0xFF
            let changed = try await stored(edited)
            let at = resumesAt(changed)
            #expect(at > 0 && changed[..<at].map(\.hash) == first[..<at].map(\.hash), "an edit at 7 MiB goes on from a state before it")
            #expect(try await store.checksum(of: changed, user: user) == SHA256.hash(data: edited).hexString)
            // A list that leaves the edited version 20 blocks past its edit goes on from no later than there.
            if let index = first.indices.first(where: { first[$0].hash != changed[$0].hash }), index + 21 < changed.count {
                var mixed = changed
                mixed.remove(at: index + 20)
                var expected: [UInt8] = []
                for ref in mixed { expected += edited[Int(ref.pack!.offset)..<Int(ref.pack!.offset + ref.size)] }
                #expect(resumesAt(mixed) <= index + 20)
                #expect(try await store.checksum(of: mixed, user: user) == SHA256.hash(data: expected).hexString)
            } else {
                Issue.record("the edit changed no block, or one too near the end")
            }
        }
    }

    @Test("put is idempotent (a block twice in one call, or again later); delete is too, and a deleted block or pack is gone", arguments: Kind.allCases)
    func idempotence(_ kind: Kind) async throws {
        try await Self.withStore(kind) { store, folder in
            let content = [UInt8](randomData(64 * 1024))
            let first = try Self.stageOwn(content, in: folder)
            let twin = try Self.stageOwn(content, in: folder)
            try await store.put([first, twin], user: "u1")
            try await store.put([try Self.stageOwn(content, in: folder)], user: "u1")
            #expect(try await store.storedBlockCount() == 1)
            #expect(Self.staged(folder).isEmpty)
            #expect(try await Self.read(store, [first.ref], user: "u1", range: 0..<65536) == content)
            let hash = first.ref.hash
            try await Self.offPool { try store.deleteBlocking([hash], user: "u1") }
            try await Self.offPool { try store.deleteBlocking([hash, "0000"], user: "u1") }
            #expect(try await !Self.offPool { try store.containsBlocking(hash, user: "u1") })
            #expect(try await store.storedBlockCount() == 0)
            await #expect(throws: (any Error).self) { _ = try await Self.read(store, [first.ref], user: "u1", range: 0..<65536) }
            // Packs: two stagings of the same content are two packs (the database keeps one place per block).
            let packed = try await Self.stage(content, in: store)
            let again = try await Self.stage(content, in: store)
            try await store.put(packed + again, user: "u1")
            #expect(try await store.storedBlockCount() == 2)
            let ids = Set((packed + again).compactMap(\.ref.pack?.pack))
            try await Self.offPool { try store.deletePacksBlocking(Array(ids) + ["pnothing"], user: "u1") }
            try await Self.offPool { try store.deletePacksBlocking(Array(ids), user: "u1") }
            #expect(try await !Self.offPool { try store.containsBlocking(packed[0].ref, user: "u1") })
            #expect(try await store.storedBlockCount() == 0)
            await #expect(throws: (any Error).self) { _ = try await Self.read(store, packed.map(\.ref), user: "u1", range: 0..<65536) }
        }
    }

    @Test("discard and clearStaging remove staging files and nothing stored", arguments: Kind.allCases)
    func staging(_ kind: Kind) async throws {
        try await Self.withStore(kind) { store, folder in
            let kept = try await Self.stage([UInt8](randomData(1000)), in: store)
            try await store.put(kept, user: "u1")
            let dropped = try await Self.stage([UInt8](randomData(100_000)), in: store)
            let own = try Self.stageOwn([UInt8](randomData(2000)), in: folder)
            #expect(Self.staged(folder).count == 2, "one pack, one block")
            store.discard(dropped + [own])
            #expect(Self.staged(folder).isEmpty)
            _ = try await Self.stage([UInt8](randomData(100_000)), in: store)  // a crash leaves these
            try store.clearStaging()
            #expect(Self.staged(folder).isEmpty)
            #expect(try await Self.offPool { try store.containsBlocking(kept[0].ref, user: "u1") })
            try await store.checkReachable()
        }
    }

    @Test("an unreachable S3 store is a 503 with Retry-After (DriveError.unavailable), not a hang or a 500")
    func unreachable() async throws {
        let folder = FileManager.default.temporaryDirectory.appending(path: "nimbus-blobs-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: folder) }
        // A port held (bound, not listening) for the test: refused, and no other test's server can take it meanwhile
        // (a port found free and released was once taken by another test's server, which answered 404).
        try await TestServices.withRefusingPort { port in
            let client = S3Client(
                endpoint: URL(string: "http://127.0.0.1:\(port)")!, bucket: "b", signer: SigV4Signer(accessKey: "a", secretKey: "s", region: "us-east-1"),
                timeout: .seconds(2))
            let store = try S3BlobStore(client: client, prefix: "", stagingRoot: folder)
            for attempt in 0..<2 {
                do {
                    if attempt == 0 { try await store.checkReachable() } else { _ = try await Self.offPool { try store.containsBlocking("h", user: "u") } }
                    Issue.record("an unreachable store answered")
                } catch let error as DriveError {
                    guard case .unavailable = error else {
                        Issue.record("expected unavailable, got \(error)")
                        continue
                    }
                }
            }
        }
    }
}

/// Blocks through their life on the real server (both back-ends): put, adopted, orphaned, swept — and the races
/// the contract closes.
@Suite("Block lifecycle")
struct BlockLifecycleTests {
    @Test("content deleted and uploaded again within the grace period is adopted again and survives the sweep")
    func readoptedWithinGrace() async throws {
        try await TestServer.run { server in
            let alice = try await server.signUp("grace")
            let content = randomData(300_000)
            let first = try await alice.upload("a.bin", content)
            #expect(try await alice.send(.DELETE, "/v1/files/\(first.id)?permanent=true").status == 204)
            #expect(try await alice.get("/v1/about").decode(About.self).quota.used == 0)
            server.clock.advance(by: 3600)
            let again = try await server.logIn("grace").upload("b.bin", content)
            #expect(try await server.logIn("grace").get("/v1/about").decode(About.self).quota.used == 300_000)
            server.clock.advance(by: 24 * 3600 + 1)
            await server.parts.runMaintenance()
            let later = try await server.logIn("grace")
            #expect(try await later.content(again.id) == content, "the sweep left the re-adopted block alone")
            #expect(try await server.parts.storedBlockCount() == 1)
        }
    }

    @Test("a commit whose block a sweep deleted after it was put fails with 503, and changes nothing")
    func sweptBetweenPutAndCommit() async throws {
        try await TestServer.run { server in
            let alice = try await server.signUp("race")
            let before = try await alice.list().files.count
            let store = try #require(server.parts.dependencies.store as? SQLMetadataStore)
            let blobs = server.parts.dependencies.blobs
            let user = try #require(try await store.user(username: "race"))
            var stager = blobs.makeStager(runningHash: SHA256())
            try await stager.append(ByteBuffer(data: randomData(100_000)))
            let staged = try await stager.finish()
            let content = StagedContent(blocks: staged.blocks, checksum: staged.checksum, size: staged.size, mimeType: "application/octet-stream")
            let now = server.clock.now()
            try await store.putBlocks(content.blocks, userId: user.id, now: now)
            // What a sweep running between the put and the commit would do.
            let packs = Array(Set(content.blocks.compactMap(\.ref.pack?.pack)))
            #expect(!packs.isEmpty)
            try await NIOThreadPool.singleton.runIfActive { try blobs.deletePacksBlocking(packs, user: user.id) }
            await #expect(throws: DriveError.self) {
                _ = try await store.write(user: user.id) { db, effects in
                    try store.commit(db, &effects, userId: user.id, target: .new(parentId: nil, name: "x.bin", policy: .fail), content: content, now: now)
                }
            }
            #expect(try await alice.list().files.count == before, "nothing became visible")
            #expect(try await alice.get("/v1/about").decode(About.self).quota.used == 0)
        }
    }
}

@Suite("Unreachable stores")
struct UnreachableStoreTests {
    @Test("an unreachable blob store: /healthz is 503 naming it, uploads that need it fail fast with 503 + Retry-After, nothing changes")
    func blobStoreDown() async throws {
        // Nobody listens there, and nobody can take the port meanwhile (a port found free and let go was once taken
        // by another test's server while the suites ran in parallel: a 500 from whatever answered, not a 503).
        try await TestServices.withRefusingPort { port in
        try await TestServer.run(configure: { $0.blobs = "s3://nimbus-test?endpoint=http://127.0.0.1:\(port)&region=us-east-1&timeout=2" }) { server in
            let health = try await APIClient(baseURL: server.baseURL).get("/healthz")
            #expect(health.status == 503)
            #expect(health.header("Retry-After") != nil)
            let body = try JSONSerialization.jsonObject(with: health.body) as? [String: String]
            #expect(body?["status"] == "unavailable")
            #expect(body?["database"] == "ok")
            #expect(body?["blobs"].map { $0 != "ok" } == true, "the reason is given: \(String(describing: body))")
            let alice = try await server.signUp()
            _ = try await alice.upload("small.txt", randomData(1000))  // kept in the database: fine
            for _ in 0..<2 {
                let started = Date()
                let big = try await alice.uploadReply("big.bin", randomData(200_000))
                #expect(big.status == 503)
                #expect(big.errorCode == "unavailable")
                #expect(big.header("Retry-After") != nil)
                #expect(Date().timeIntervalSince(started) < 60, "fails, never hangs (the store's timeout is 2 s, the client's 120 s)")
            }
            #expect(try await alice.list().files.map(\.name) == ["small.txt"])
            #expect(try await alice.get("/v1/about").decode(About.self).quota.used == 1000)
        }
        }
    }
}

@Suite("S3 blob store on a bucket that does not exist yet")
struct FreshBucketTests {
    @Test("nimbus serve --blobs on moto makes its bucket at start, then stores and serves blocks")
    func freshBucket() async throws {
        let moto = try TestServices.moto()
        try await TestServer.run(configure: { $0.blobs = moto.blobsURL() }) { server in
            let alice = try await server.signUp()
            // 2 MiB: several blocks in one pack, and little CPU when the whole suite runs at once (5 MiB once outlasted
            // the client's 90 s read timeout on the CI machine's two cores).
            let content = randomData(2 * 1024 * 1024)
            let file = try await alice.upload("big.bin", content)
            #expect(try await alice.content(file.id) == content)
            #expect(try await server.parts.storedBlockCount() == 1, "one pack")
            #expect(try await APIClient(baseURL: server.baseURL).get("/healthz").status == 200)
        }
    }
}
