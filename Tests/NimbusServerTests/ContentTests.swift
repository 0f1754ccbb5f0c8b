import Crypto
import Foundation
import NimbusAPI
import NimbusServer
import Testing

@Suite("Content and revisions")
struct ContentTests {
    @Test("a simple upload stores the bytes, and downloads carry ETag, length, ranges and attachment headers")
    func uploadAndDownload() async throws {
        try await TestServer.run { server in
            let alice = try await server.signUp()
            let content = randomData(9 * 1024 * 1024 + 123)  // three blocks
            let file = try await alice.upload("big.bin", content)
            #expect(file.size == Int64(content.count))
            #expect(file.checksum == sha256(content))
            #expect(file.downloadUrl == "/v1/files/\(file.id)/content")
            #expect(file.mimeType == "application/octet-stream")

            let whole = try await alice.get(file.downloadUrl!)
            #expect(whole.status == 200)
            #expect(whole.body == content)
            #expect(whole.header("ETag") == "\"\(file.revisionId!)\"")
            #expect(whole.header("Content-Length") == String(content.count))
            #expect(whole.header("Accept-Ranges") == "bytes")
            #expect(whole.header("Content-Disposition")?.hasPrefix("attachment;") == true)
            #expect(whole.header("X-Content-Type-Options") == "nosniff")

            // A range across a block boundary.
            let start = 4 * 1024 * 1024 - 10
            let partial = try await alice.get(file.downloadUrl!, headers: ["Range": "bytes=\(start)-\(start + 99)"])
            #expect(partial.status == 206)
            #expect(partial.body == content[start..<(start + 100)])
            #expect(partial.header("Content-Range") == "bytes \(start)-\(start + 99)/\(content.count)")
            let suffix = try await alice.get(file.downloadUrl!, headers: ["Range": "bytes=-7"])
            #expect(suffix.status == 206)
            #expect(suffix.body == content.suffix(7))
            let open = try await alice.get(file.downloadUrl!, headers: ["Range": "bytes=\(content.count - 5)-"])
            #expect(open.body == content.suffix(5))
            let beyond = try await alice.get(file.downloadUrl!, headers: ["Range": "bytes=\(content.count)-"])
            #expect(beyond.status == 416)
            #expect(beyond.header("Content-Range") == "bytes */\(content.count)")
            #expect(beyond.errorCode == "range_not_satisfiable")

            let cached = try await alice.get(file.downloadUrl!, headers: ["If-None-Match": "\"\(file.revisionId!)\""])
            #expect(cached.status == 304)
            #expect(cached.body.isEmpty)
            let stale = try await alice.get(file.downloadUrl!, headers: ["If-None-Match": "\"something-else\""])
            #expect(stale.status == 200)
        }
    }

    @Test("mime types come from the query, the Content-Type, or the name")
    func mimeTypes() async throws {
        try await TestServer.run { server in
            let alice = try await server.signUp()
            #expect(try await alice.upload("photo.JPG", Data([1])).mimeType == "image/jpeg")
            #expect(try await alice.upload("a.bin", Data([1]), query: "&mimeType=text/csv").mimeType == "text/csv")
            let typed: File = try await alice.uploadReply("b.dat", Data([1]), headers: ["Content-Type": "application/pdf"]).decode()
            #expect(typed.mimeType == "application/pdf")
            let folder = try await alice.get("/v1/files/root/content")
            #expect(folder.status == 400)
        }
    }

    @Test("a simple upload with a requestId is safe to retry: the same file comes back, once; a checksum is checked")
    func idempotentSimpleUpload() async throws {
        try await TestServer.run { server in
            let alice = try await server.signUp()
            let content = Data("retried".utf8)
            let checksum = SHA256.hash(data: content).map { String(format: "%02x", $0) }.joined()
            let first = try await alice.upload("r.txt", content, query: "&requestId=op-1&checksum=\(checksum)")
            // The answer was lost; the client sends the same request again.
            let again = try await alice.upload("r.txt", content, query: "&requestId=op-1&checksum=\(checksum)")
            #expect(again.id == first.id)
            #expect(again.revisionId == first.revisionId)
            let listed = try await alice.list()
            #expect(listed.files.filter { $0.name.hasPrefix("r") }.map(\.name) == ["r.txt"], "a retry makes no second file")
            let revisions: RevisionList = try await alice.get("/v1/files/\(first.id)/revisions").decode()
            #expect(revisions.revisions.count == 1, "nor a second revision")
            // Renamed since: the retry still answers with that file, under its new name.
            let renamed: File = try await alice.send(.PATCH, "/v1/files/\(first.id)", json: ["name": "s.txt"]).decode()
            #expect(try await alice.upload("r.txt", content, query: "&requestId=op-1").id == renamed.id)
            // Another device's version since: the retry answers with the revision the request made (its bytes), not
            // that newer head — the client then sees the newer one as a change, never as its own.
            let newer = try await alice.send(.POST, "/v1/upload?uploadType=media&fileId=\(first.id)", body: Data("another device".utf8))
            #expect(newer.status == 201 || newer.status == 200, "\(newer.text)")
            let head = try newer.decode(File.self)
            let late = try await alice.uploadReply("r.txt", content, query: "&requestId=op-1")
            let answered = try late.decode(File.self)
            #expect(answered.id == first.id && answered.revisionId == first.revisionId && answered.checksum == checksum)
            #expect(answered.size == Int64(content.count) && head.revisionId != first.revisionId)
            #expect(late.header("ETag") == "\"\(first.revisionId ?? "")\"", "an If-Match with it is stale, as it should be")
            #expect(try await alice.get("/v1/files/\(first.id)").decode(File.self).revisionId == head.revisionId, "the head is untouched")

            let reused = try await alice.uploadReply("other.txt", Data("different".utf8), query: "&requestId=op-1")
            #expect(reused.status == 409)
            #expect(reused.errorCode == "request_id_reused")
            #expect(try reused.decode(APIErrorBody.self).error.existingId == first.id, "it names the file that requestId made")
            let wrong = try await alice.uploadReply("bad.txt", Data("abc".utf8), query: "&checksum=\(checksum)")
            #expect(wrong.status == 422)
            #expect(wrong.errorCode == "checksum_mismatch")
            #expect(try await alice.uploadReply("bad.txt", Data("abc".utf8), query: "&checksum=xyz").status == 400)
            #expect(try await alice.uploadReply("bad.txt", Data("abc".utf8), query: "&requestId=").status == 400)
            #expect(try await alice.send(.POST, "/v1/upload?uploadType=media&fileId=\(first.id)&requestId=op-2", body: content).status == 400)
            #expect(try await alice.list().files.contains { $0.name == "bad.txt" } == false, "refused uploads leave nothing")
            let about: About = try await alice.get("/v1/about").decode()
            #expect(about.quota.used == Int64(content.count + "another device".utf8.count), "each stored revision counts once, retries nothing")
        }
    }

    @Test("a batch upload commits many files in one request; each entry succeeds or fails alone, and a retry makes nothing twice")
    func batchUpload() async throws {
        try await TestServer.run { server in
            let alice = try await server.signUp()
            let folder = try await alice.mkdir("Batch")
            #expect(try await alice.get("/v1/files/\(folder.id)").decode() as File == folder, "a creation answers the row as a read returns it")
            let existing = try await alice.upload("taken.txt", Data("old".utf8), in: folder.id)
            func sha(_ data: Data) -> String { SHA256.hash(data: data).map { String(format: "%02x", $0) }.joined() }
            let a = Data("alpha".utf8), b = Data(repeating: 7, count: 70_000), c = Data("gamma".utf8)
            let request = BatchUploadRequest(files: [
                .init(name: "a.txt", parentId: folder.id, requestId: "batch-a", checksum: sha(a), content: a),
                .init(name: "b.bin", parentId: folder.id, requestId: "batch-b", content: b),
                .init(name: "taken.txt", parentId: folder.id, content: c),  // clash → 409 for this entry only
                .init(name: "bad/name", parentId: folder.id, content: c),  // invalid → 400
                .init(name: "sum.txt", parentId: folder.id, checksum: sha(a), content: c),  // wrong checksum → 422
                .init(fileId: existing.id, ifMatch: existing.revisionId, content: c),  // a new version
                .init(name: "root.txt", content: a),  // no parentId: the root
            ])
            let reply = try await alice.send(.POST, "/v1/upload?uploadType=batch", json: request)
            #expect(reply.status == 200, "\(reply.text)")
            let results = try reply.decode(BatchUploadResponse.self).results
            #expect(results.map(\.status) == [201, 201, 409, 400, 422, 201, 201])
            #expect(results[2].error?.code == "name_conflict")
            #expect(results[2].error?.existingId == existing.id)
            #expect(results[3].error?.code == "invalid_name")
            #expect(results[4].error?.code == "checksum_mismatch")
            #expect(results[5].file?.id == existing.id)
            for file in results.compactMap(\.file) {
                let read: File = try await alice.get("/v1/files/\(file.id)").decode()
                #expect(read == file, "a commit answers the file as a read returns it")
            }
            let aFile = try #require(results[0].file), bFile = try #require(results[1].file)
            #expect(try await alice.content(aFile.id) == a)
            #expect(try await alice.content(bFile.id) == b)
            #expect(try await alice.content(existing.id) == c)
            #expect(results[6].file?.parentId == (try await alice.root()).id)
            #expect(Set(try await alice.list(folder.id).files.map(\.name)) == ["a.txt", "b.bin", "taken.txt"], "failed entries leave nothing")

            // The answer was lost: the same batch again returns the same files (200) and adds nothing.
            let retry = try await alice.send(.POST, "/v1/upload?uploadType=batch", json: BatchUploadRequest(files: Array(request.files.prefix(2))))
            let again = try retry.decode(BatchUploadResponse.self).results
            #expect(again.map(\.status) == [200, 200])
            #expect(again.map(\.file?.id) == [aFile.id, bFile.id])
            #expect(again.map(\.file?.revisionId) == [aFile.revisionId, bFile.revisionId])
            #expect(try await alice.list(folder.id).files.count == 3)
            // A file made by a resumable session keeps its requestId too: the same id later, as a simple or batch
            // upload (the session long forgotten), is that file, not a second one.
            let session = try await alice.send(
                .POST, "/v1/upload?uploadType=resumable",
                json: UploadRequest(requestId: "batch-r", name: "r.txt", mimeType: "text/plain", parentId: folder.id, size: Int64(a.count)))
            let opened = try session.decode(UploadResponse.self)
            let done = try await alice.send(.PUT, opened.uploadUrl, body: a, headers: ["Content-Range": "bytes 0-\(a.count - 1)/\(a.count)"])
            let made = try #require(try done.decode(UploadResponse.self).file)
            #expect(try await alice.get("/v1/files/\(made.id)").decode() as File == made)
            let simple = try await alice.upload("r.txt", a, in: folder.id, query: "&requestId=batch-r")
            #expect(simple.id == made.id)
            let viaBatch = try await alice.send(
                .POST, "/v1/upload?uploadType=batch", json: BatchUploadRequest(files: [.init(name: "r.txt", parentId: folder.id, requestId: "batch-r", content: a)]))
            #expect(try viaBatch.decode(BatchUploadResponse.self).results.first?.file?.id == made.id)
            #expect(try await alice.list(folder.id).files.count == 4)
            // A stale ifMatch fails that entry with the current file.
            let stale = try await alice.send(
                .POST, "/v1/upload?uploadType=batch", json: BatchUploadRequest(files: [.init(fileId: existing.id, ifMatch: existing.revisionId, content: a)]))
            #expect(try stale.decode(BatchUploadResponse.self).results.first?.error?.code == "version_conflict")

            // Malformed batches are refused whole and change nothing.
            #expect(try await alice.send(.POST, "/v1/upload?uploadType=batch", json: BatchUploadRequest(files: [])).status == 400)
            #expect(try await alice.send(.POST, "/v1/upload?uploadType=batch", body: Data("{not json".utf8)).status == 400)
            let tooMany = BatchUploadRequest(files: (0...BatchUploadRequest.maxFiles).map { .init(name: "n\($0)", parentId: folder.id, content: a) })
            #expect(try await alice.send(.POST, "/v1/upload?uploadType=batch", json: tooMany).status == 400)
            #expect(try await alice.list(folder.id).files.count == 4)
            let about: About = try await alice.get("/v1/about").decode()
            #expect(about.quota.used == Int64(a.count + b.count + c.count + 3), "stored once each: a (twice, one block), b, c, and old")
        }
    }

    @Test("a new version needs the current revision in If-Match; a stale one is a 409 carrying the current file")
    func newVersions() async throws {
        try await TestServer.run { server in
            let alice = try await server.signUp()
            let v1 = try await alice.upload("doc.txt", Data("one".utf8))
            let ok = try await alice.send(
                .POST, "/v1/upload?uploadType=media&fileId=\(v1.id)", body: Data("two".utf8), headers: ["If-Match": "\"\(v1.revisionId!)\""])
            #expect(ok.status == 201)
            let v2: File = try ok.decode()
            #expect(v2.id == v1.id)
            #expect(v2.revisionId != v1.revisionId)
            #expect(try await alice.content(v1.id) == Data("two".utf8))

            let stale = try await alice.send(
                .POST, "/v1/upload?uploadType=media&fileId=\(v1.id)", body: Data("three".utf8), headers: ["If-Match": "\"\(v1.revisionId!)\""])
            #expect(stale.status == 409)
            #expect(stale.errorCode == "version_conflict")
            let body = try stale.decode(APIErrorBody.self)
            #expect(body.error.file?.revisionId == v2.revisionId)
            #expect(try await alice.content(v1.id) == Data("two".utf8), "a refused version changes nothing")

            let unconditional: File = try await alice.send(.POST, "/v1/upload?uploadType=media&fileId=\(v1.id)", body: Data("four".utf8)).decode()
            #expect(unconditional.size == 4)
            #expect(try await alice.send(.POST, "/v1/upload?uploadType=media&fileId=root", body: Data("x".utf8)).status == 400)
            #expect(try await alice.send(.POST, "/v1/upload?uploadType=media", body: Data("x".utf8)).status == 400)
            #expect(try await alice.send(.POST, "/v1/upload?uploadType=sideways&name=x", body: Data("x".utf8)).status == 400)

            let named = try await alice.uploadReply("doc.txt", Data("five".utf8))
            #expect(named.status == 409)
            #expect(named.errorCode == "name_conflict")
            let replaced: File = try await alice.upload("doc.txt", Data("six".utf8), query: "&onConflict=replace")
            #expect(replaced.id == v1.id)
            let renamed: File = try await alice.upload("doc.txt", Data("seven".utf8), query: "&onConflict=rename")
            #expect(renamed.name == "doc (1).txt")
        }
    }

    @Test("every content change is a revision; revisions list, download and restore")
    func revisions() async throws {
        try await TestServer.run { server in
            let alice = try await server.signUp()
            let v1 = try await alice.upload("essay.md", Data("draft".utf8))
            let v2: File = try await alice.send(.POST, "/v1/upload?uploadType=media&fileId=\(v1.id)", body: Data("final".utf8)).decode()
            let list: RevisionList = try await alice.get("/v1/files/\(v1.id)/revisions").decode()
            #expect(list.revisions.map(\.revisionId) == [v2.revisionId!, v1.revisionId!], "newest first")
            #expect(list.pagination.totalItems == 2)
            let oldest = list.revisions[1]
            #expect(oldest.checksum == sha256(Data("draft".utf8)))
            #expect(oldest.size == 5)
            #expect(oldest.fileId == v1.id)

            let single: FileRevision = try await alice.get("/v1/files/\(v1.id)/revisions/\(oldest.revisionId)").decode()
            #expect(single == oldest)
            #expect(try await alice.get(oldest.downloadUrl).body == Data("draft".utf8))
            let ranged = try await alice.get(oldest.downloadUrl, headers: ["Range": "bytes=1-2"])
            #expect(ranged.status == 206 && ranged.body == Data("ra".utf8))

            let restored = try await alice.send(.POST, "/v1/files/\(v1.id)/revisions/\(oldest.revisionId)/restore")
            #expect(restored.status == 200)
            let head: File = try restored.decode()
            #expect(head.revisionId != v1.revisionId && head.revisionId != v2.revisionId, "a restore makes a new head")
            #expect(head.checksum == oldest.checksum)
            #expect(try await alice.content(v1.id) == Data("draft".utf8))
            let after: RevisionList = try await alice.get("/v1/files/\(v1.id)/revisions").decode()
            #expect(after.revisions.count == 3, "history keeps everything")
            let paged: RevisionList = try await alice.get("/v1/files/\(v1.id)/revisions?limit=1&page=2").decode()
            #expect(paged.revisions.map(\.revisionId) == [v2.revisionId!])
            #expect(paged.pagination.nextPage == 3)

            #expect(try await alice.get("/v1/files/\(v1.id)/revisions/nope").status == 404)
            #expect(try await alice.send(.POST, "/v1/files/\(v1.id)/revisions/nope/restore").status == 404)
        }
    }

    @Test("revisions past retention are pruned and their blocks freed")
    func retention() async throws {
        try await TestServer.run(configure: { $0.revisionRetention = RevisionRetention(keepLast: 2, keepFor: .seconds(3600)) }) { server in
            var alice = try await server.signUp("judy")
            let file = try await alice.upload("log.txt", randomData(1000))
            for _ in 0..<3 {
                _ = try await alice.send(.POST, "/v1/upload?uploadType=media&fileId=\(file.id)", body: randomData(1000))
            }
            // Young revisions are all kept, whatever their number.
            #expect(try await alice.get("/v1/files/\(file.id)/revisions").decode(RevisionList.self).revisions.count == 4)
            #expect(try await alice.get("/v1/about").decode(About.self).quota.used == 4000)
            server.clock.advance(by: 7200)
            alice = try await server.logIn("judy")
            let latest = randomData(1000)
            _ = try await alice.send(.POST, "/v1/upload?uploadType=media&fileId=\(file.id)", body: latest)
            let kept: RevisionList = try await alice.get("/v1/files/\(file.id)/revisions").decode()
            #expect(kept.revisions.count == 2, "the newest two stay; old ones beyond them go")
            #expect(try await alice.get("/v1/about").decode(About.self).quota.used == 2000)
            #expect(try await alice.content(file.id) == latest)
        }
    }

    @Test("small content lives in the database: no block file, served with ranges, shared with an equal block of a big file")
    func inlineBlocks() async throws {
        try await TestServer.run { server in
            let alice = try await server.signUp()
            func blockFiles() async throws -> Int { try await server.parts.storedBlockCount() }
            func used() async throws -> Int64 { try await alice.get("/v1/about").decode(About.self).quota.used }
            let small = randomData(10_000)
            let file = try await alice.upload("small.bin", small)
            #expect(try await blockFiles() == 0, "kept in the database")
            #expect(try await alice.content(file.id) == small)
            let part = try await alice.get("/v1/files/\(file.id)/content", headers: ["Range": "bytes=100-199"])
            #expect(part.status == 206)
            #expect(part.body == small[100..<200])
            // A big file (over the inline limit) whose last block is these very bytes (a content-defined chunk ends
            // just before them, and they are shorter than the least chunk): that block is stored (and charged) once.
            let random = randomData(1024 * 1024)
            var cut = 0
            for length in random.withUnsafeBytes({ FastCDC.lengths(of: $0) }) where cut <= 64 * 1024 { cut += length }
            let big = random.prefix(cut) + small
            let bigFile = try await alice.upload("big.bin", big)
            #expect(try await used() == Int64(big.count))
            #expect(try await alice.content(bigFile.id) == big)
            #expect(try await alice.send(.DELETE, "/v1/files/\(file.id)?permanent=true").status == 204)
            #expect(try await alice.content(bigFile.id) == big, "the shared block outlives the small file")
            #expect(try await alice.send(.DELETE, "/v1/files/\(bigFile.id)?permanent=true").status == 204)
            #expect(try await used() == 0)
            #expect(try await blockFiles() == 1, "the big file's pack: deleted by the sweep, after the grace period")
            server.clock.advance(by: 24 * 3600 + 1)
            await server.parts.runMaintenance()
            #expect(try await blockFiles() == 0)
        }
    }

    @Test("identical content is stored once per user, never shared across users")
    func deduplication() async throws {
        try await TestServer.run { server in
            let alice = try await server.signUp()
            let bob = try await server.signUp()
            let content = randomData(5 * 1024 * 1024)
            _ = try await alice.upload("one.bin", content)
            _ = try await alice.upload("two.bin", content)
            #expect(try await alice.get("/v1/about").decode(About.self).quota.used == Int64(content.count))
            _ = try await bob.upload("mine.bin", content)
            #expect(try await bob.get("/v1/about").decode(About.self).quota.used == Int64(content.count))
            #expect(try await server.parts.storedBlockCount() == 2, "each user holds their own pack of the blocks; alice's second upload kept none")
        }
    }

    @Test("quota: 507 when content would not fit, and nothing is stored")
    func quota() async throws {
        try await TestServer.run(configure: { $0.defaultQuota = 10_000 }) { server in
            let alice = try await server.signUp()
            _ = try await alice.upload("a.bin", randomData(6000))
            let over = try await alice.uploadReply("b.bin", randomData(6000))
            #expect(over.status == 507)
            #expect(over.errorCode == "quota_exceeded")
            let about: About = try await alice.get("/v1/about").decode()
            #expect(about.quota.used == 6000)
            #expect(about.quota.limit == 10_000)
            #expect(try await alice.list().files.count == 1)
            let staging = try FileManager.default.contentsOfDirectory(atPath: server.dataDirectory.appending(path: "tmp").path)
            #expect(staging.isEmpty, "refused uploads leave no staged bytes")
        }
    }

    @Test("a batch is one transaction: quota counts every earlier entry, a failed entry charges nothing, the folder's ETag moves")
    func batchAccounting() async throws {
        // The store defers per-user and per-folder row updates to the end of the transaction (Effects); each entry
        // must still see what the entries before it charged, and a rolled-back entry must leave no charge.
        try await TestServer.run(configure: { $0.defaultQuota = 10_000 }) { server in
            let alice = try await server.signUp()
            let folder = try await alice.mkdir("Q")
            let etagBefore = try #require(try await alice.send(.GET, "/v1/files/\(folder.id)").header("ETag"))
            let shared = randomData(3000)
            let reply = try await alice.send(
                .POST, "/v1/upload?uploadType=batch",
                json: BatchUploadRequest(files: [
                    .init(name: "a.bin", parentId: folder.id, content: randomData(4000)),
                    .init(name: "same.bin", parentId: folder.id, content: shared),
                    .init(name: "a.bin", parentId: folder.id, content: randomData(100)),  // clash: rolled back, no charge
                    .init(name: "same-again.bin", parentId: folder.id, content: shared),  // stored once: costs nothing
                    .init(name: "over.bin", parentId: folder.id, content: randomData(3001)),  // 7,000 used + 3,001 > 10,000
                    .init(name: "fits.bin", parentId: folder.id, content: randomData(3000)),
                ]))
            #expect(reply.status == 200, "\(reply.text)")
            let results = try reply.decode(BatchUploadResponse.self).results
            #expect(results.map(\.status) == [201, 201, 409, 201, 507, 201])
            #expect(results[4].error?.code == "quota_exceeded")
            #expect(try await alice.get("/v1/about").decode(About.self).quota.used == 10_000)
            let etagAfter = try #require(try await alice.send(.GET, "/v1/files/\(folder.id)").header("ETag"))
            #expect(etagAfter != etagBefore, "the folder's listing changed, so its ETag moved")
            #expect(Set(try await alice.list(folder.id).files.map(\.name)) == ["a.bin", "same.bin", "same-again.bin", "fits.bin"])
            // Deleting for good frees what no other file references, once, at the end of the transaction.
            let same = try #require(results[1].file)
            #expect(try await alice.send(.DELETE, "/v1/files/\(same.id)?permanent=true").status == 204)
            #expect(try await alice.get("/v1/about").decode(About.self).quota.used == 10_000, "same-again.bin still holds the block")
        }
    }

    @Test("a batch sees its own entries: same name twice, replace twice, one requestId twice, same content twice")
    func batchSeesItself() async throws {
        // A batch reads every entry's checks up front and sends the rows as multi-row inserts; what an earlier entry
        // made must still count for the later ones exactly as if each were its own request.
        try await TestServer.run { server in
            let alice = try await server.signUp()
            let folder = try await alice.mkdir("B")
            let existing = try await alice.upload("old.txt", Data("old".utf8), in: folder.id)
            let start: ChangeCursor = try await alice.get("/v1/changes/start").decode()
            let one = Data("one".utf8), two = Data("two".utf8), same = randomData(1000)
            func sha(_ data: Data) -> String { SHA256.hash(data: data).map { String(format: "%02x", $0) }.joined() }
            let reply = try await alice.send(
                .POST, "/v1/upload?uploadType=batch",
                json: BatchUploadRequest(files: [
                    .init(name: "a.txt", parentId: folder.id, content: one),
                    .init(name: "a.txt", parentId: folder.id, content: two),  // fail: 409, the first entry's file
                    .init(name: "a.txt", parentId: folder.id, onConflict: "rename", content: two),  // "a (1).txt"
                    .init(name: "r.txt", parentId: folder.id, onConflict: "replace", content: one),
                    .init(name: "r.txt", parentId: folder.id, onConflict: "replace", content: two),  // a second revision
                    .init(name: "q.txt", parentId: folder.id, requestId: "req-q", checksum: sha(one), content: one),
                    .init(name: "q.txt", parentId: folder.id, requestId: "req-q", content: one),  // a retry: 200, same file
                    .init(name: "q2.txt", parentId: folder.id, requestId: "req-q", content: two),  // reused: 409
                    .init(name: "s1.bin", parentId: folder.id, content: same),
                    .init(name: "s2.bin", parentId: folder.id, content: same),  // stored once
                    .init(name: "old.txt", parentId: folder.id, onConflict: "replace", content: two),  // a file from before
                ]))
            #expect(reply.status == 200, "\(reply.text)")
            let results = try reply.decode(BatchUploadResponse.self).results
            #expect(results.map(\.status) == [201, 409, 201, 201, 201, 201, 200, 409, 201, 201, 201])
            #expect(results[1].error?.existingId == results[0].file?.id)
            #expect(results[2].file?.name == "a (1).txt")
            #expect(results[4].file?.id == results[3].file?.id)
            #expect(results[6].file?.id == results[5].file?.id)
            #expect(results[7].error?.code == "request_id_reused")
            #expect(results[10].file?.id == existing.id)
            for result in results {
                guard let file = result.file else { continue }
                let read: File = try await alice.get("/v1/files/\(file.id)").decode()
                if result.status == 201, file.id != results[3].file?.id { #expect(read == file, "\(file.name): the answer is the row") }
            }
            let r = try #require(results[4].file)
            #expect(try await alice.content(r.id) == two)
            let revisions: RevisionList = try await alice.get("/v1/files/\(r.id)/revisions").decode()
            #expect(revisions.revisions.count == 2)
            #expect(revisions.revisions.first?.revisionId == r.revisionId, "the newest revision is listed first")
            #expect(try await alice.get("/v1/files/\(r.id)").decode(File.self) == r)
            #expect(try await alice.get("/v1/about").decode(About.self).quota.used == Int64(3 + one.count + two.count + same.count), "each content once")
            let feed: ChangeList = try await alice.get("/v1/changes?cursor=\(start.cursor)").decode()
            let ids = feed.changes.map(\.fileId)
            #expect(Set(ids).count == ids.count, "each file once in the feed: \(ids)")
            #expect(Set(ids) == Set(results.compactMap(\.file?.id)), "every file the batch made or changed, nothing else")
            #expect(try await alice.list(folder.id).files.count == 7)
        }
    }

    @Test("a client's modifiedAt (media query, batch entry, block commit) is the file's; a rename keeps it; a bad one is a 400 that stores nothing")
    func clientModificationTime() async throws {
        try await TestServer.run { server in
            let alice = try await server.signUp()
            let when = Date(timeIntervalSince1970: 1_740_830_400)  // 2025-03-01T12:00:00Z
            let media: File = try await alice.send(
                .POST, "/v1/upload?uploadType=media&name=m.txt&modifiedAt=2025-03-01T12:00:00Z", body: Data("m".utf8)).decode()
            #expect(media.modifiedAt == when)
            let renamed: File = try await alice.send(.PATCH, "/v1/files/\(media.id)", json: UpdateFileRequest(name: "m2.txt")).decode()
            #expect(renamed.name == "m2.txt" && renamed.modifiedAt == when, "a rename is not a change of the content")
            let plain: File = try await alice.send(.POST, "/v1/upload?uploadType=media&name=p.txt", body: Data("p".utf8)).decode()
            #expect(plain.modifiedAt > when, "without it: the commit's time")

            let batch: BatchUploadResponse = try await alice.send(
                .POST, "/v1/upload?uploadType=batch",
                json: BatchUploadRequest(files: [
                    .init(name: "b.txt", content: Data("b".utf8), modifiedAt: when.addingTimeInterval(60)),
                    .init(name: "bad.txt", content: Data("x".utf8), modifiedAt: Date(timeIntervalSince1970: -5)),
                ])).decode()
            #expect(batch.results.map(\.status) == [201, 400])
            #expect(batch.results.first?.file?.modifiedAt == when.addingTimeInterval(60))

            let bytes = Data("blocks".utf8)
            #expect(try await alice.send(.PUT, "/v1/blocks/\(sha256(bytes))", body: bytes, headers: ["Content-Type": "application/octet-stream"]).status == 201)
            let committed: File = try await alice.send(
                .POST, "/v1/blocks/commit",
                json: BlockCommitRequest(name: "k.txt", size: Int64(bytes.count), checksum: sha256(bytes), blocks: [.block(sha256(bytes))], modifiedAt: when)
            ).decode()
            #expect(committed.modifiedAt == when)

            for bad in ["yesterday", "1969-12-31T23:59:59Z", "10000-01-01T00:00:00Z"] {
                let reply = try await alice.send(.POST, "/v1/upload?uploadType=media&name=x.txt&modifiedAt=\(bad)", body: Data("x".utf8))
                #expect(reply.status == 400, "\(bad): \(reply.text)")
            }
            #expect(try await alice.list().files.map(\.name).sorted() == ["b.txt", "k.txt", "m2.txt", "p.txt"], "nothing stored for the bad ones")
        }
    }

    @Test("uploads over the size limit are a 413")
    func tooLarge() async throws {
        try await TestServer.run(configure: { $0.maxUploadSize = 1000 }) { server in
            let alice = try await server.signUp()
            let reply = try await alice.uploadReply("huge.bin", randomData(1001))
            #expect(reply.status == 413)
            #expect(reply.errorCode == "too_large")
            #expect(try await alice.list().files.isEmpty)
        }
    }
}
