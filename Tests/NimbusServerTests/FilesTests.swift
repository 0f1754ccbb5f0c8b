import Foundation
import NimbusAPI
import NimbusServer
import NimbusTestSupport
import Testing

@Suite("Files and folders")
struct FilesTests {
    @Test("the root folder exists for every user, with parentId null and a folder ETag")
    func rootFolder() async throws {
        try await TestServer.run { server in
            let alice = try await server.signUp()
            let reply = try await alice.get("/v1/files/root")
            #expect(reply.status == 200)
            let root: File = try reply.decode()
            #expect(root.isFolder)
            #expect(root.parentId == nil)
            #expect(reply.text.contains("\"parentId\":null"))
            #expect(reply.header("ETag")?.hasPrefix("\"v") == true)
            let byId: File = try await alice.get("/v1/files/\(root.id)").decode()
            #expect(byId == root)
        }
    }

    @Test("listings put folders first, then sort by name, and paginate")
    func listing() async throws {
        try await TestServer.run { server in
            let alice = try await server.signUp()
            for name in ["b.txt", "a.txt", "C.txt"] { _ = try await alice.upload(name, Data(name.utf8)) }
            for name in ["zeta", "alpha"] { _ = try await alice.mkdir(name) }
            let all = try await alice.list()
            #expect(all.files.map(\.name) == ["alpha", "zeta", "C.txt", "a.txt", "b.txt"])
            #expect(all.pagination.totalItems == 5)
            #expect(all.pagination.nextPage == nil)

            let first = try await alice.list(query: "limit=2")
            #expect(first.files.map(\.name) == ["alpha", "zeta"])
            #expect(first.pagination.nextPage == 2)
            let third = try await alice.list(query: "limit=2&page=3")
            #expect(third.files.map(\.name) == ["b.txt"])
            #expect(third.pagination.nextPage == nil)
            let beyond = try await alice.list(query: "limit=2&page=9")
            #expect(beyond.files.isEmpty)
            for bad in ["page=0", "limit=0", "limit=-3", "page=x"] {
                let reply = try await alice.get("/v1/files?\(bad)")
                #expect(reply.status == 400, "\(bad)")
                #expect(reply.errorCode == "invalid_request")
            }
            let clamped = try await alice.list(query: "limit=5000")
            #expect(clamped.pagination.limit == 1000)
        }
    }

    @Test("creating folders and empty files, with the three conflict policies")
    func createAndConflicts() async throws {
        try await TestServer.run { server in
            let alice = try await server.signUp()
            let work = try await alice.mkdir("Work")
            #expect(work.isFolder && work.size == 0 && work.revisionId == nil && work.downloadUrl == nil)
            let empty = try await alice.send(.POST, "/v1/files", json: CreateFileRequest(name: "notes.txt", mimeType: "text/plain", parentId: work.id))
            #expect(empty.status == 201)
            let notes: File = try empty.decode()
            #expect(notes.size == 0)
            #expect(notes.checksum == sha256(Data()))
            #expect(notes.revisionId != nil)
            #expect(empty.header("ETag") == "\"\(notes.revisionId!)\"")

            let clash = try await alice.send(.POST, "/v1/files", json: CreateFileRequest(name: "notes.txt", mimeType: "text/plain", parentId: work.id))
            #expect(clash.status == 409)
            #expect(clash.errorCode == "name_conflict")
            #expect(try clash.decode(APIErrorBody.self).error.existingId == notes.id)

            let renamed: File = try await alice.send(
                .POST, "/v1/files?onConflict=rename", json: CreateFileRequest(name: "notes.txt", mimeType: "text/plain", parentId: work.id)
            ).decode()
            #expect(renamed.name == "notes (1).txt")
            let renamedAgain: File = try await alice.send(
                .POST, "/v1/files?onConflict=rename", json: CreateFileRequest(name: "notes.txt", mimeType: "text/plain", parentId: work.id)
            ).decode()
            #expect(renamedAgain.name == "notes (2).txt")

            _ = try await alice.upload("data.bin", Data("old".utf8), in: work.id)
            let replaced = try await alice.send(
                .POST, "/v1/files?onConflict=replace", json: CreateFileRequest(name: "data.bin", mimeType: "application/octet-stream", parentId: work.id))
            #expect(replaced.status == 201)
            let data: File = try replaced.decode()
            #expect(data.size == 0)
            let revisions: RevisionList = try await alice.get("/v1/files/\(data.id)/revisions").decode()
            #expect(revisions.revisions.count == 2, "replace keeps the old content as a revision")

            let folderClash = try await alice.send(.POST, "/v1/files?onConflict=replace", json: CreateFileRequest(name: "Work", mimeType: folderMimeType))
            #expect(folderClash.status == 409)
            let badPolicy = try await alice.send(.POST, "/v1/files?onConflict=merge", json: CreateFileRequest(name: "x", mimeType: folderMimeType))
            #expect(badPolicy.status == 400)
        }
    }

    @Test("a repeated requestId returns the item made the first time")
    func idempotentCreate() async throws {
        try await TestServer.run { server in
            let alice = try await server.signUp()
            let request = CreateFileRequest(name: "Photos", mimeType: folderMimeType, requestId: "req-1")
            let first: File = try await alice.send(.POST, "/v1/files", json: request).decode()
            let again = try await alice.send(.POST, "/v1/files", json: request)
            #expect(again.status == 201)
            #expect(try again.decode(File.self).id == first.id)
            #expect(try await alice.list().files.count == 1)
            // A requestId that made something else is 409 request_id_reused naming it, and makes nothing.
            let file = try await alice.upload("notes.txt", Data("content".utf8), query: "&requestId=req-2")
            for (name, mime, requestId, madeId) in [
                ("Notes", folderMimeType, "req-2", file.id), ("empty.txt", "text/plain", "req-1", first.id), ("empty.txt", "text/plain", "req-2", file.id),
            ] {
                let reused = try await alice.send(.POST, "/v1/files", json: CreateFileRequest(name: name, mimeType: mime, requestId: requestId))
                #expect(reused.status == 409, "\(name) with \(requestId): \(reused.text)")
                #expect(reused.errorCode == "request_id_reused")
                #expect(try reused.decode(APIErrorBody.self).error.existingId == madeId)
            }
            #expect(try await alice.list().files.count == 2)
            // An empty file made by POST /v1/files: its retry answers with it.
            let empty = CreateFileRequest(name: "empty.txt", mimeType: "text/plain", requestId: "req-3")
            let made: File = try await alice.send(.POST, "/v1/files", json: empty).decode()
            #expect(try await alice.send(.POST, "/v1/files", json: empty).decode(File.self) == made)
        }
    }

    @Test(
        "invalid names are a 400 and create nothing",
        arguments: ["", ".", "..", "a/b", "nul\u{0}byte", String(repeating: "n", count: 256)])
    func invalidNames(_ name: String) async throws {
        try await TestServer.run { server in
            let alice = try await server.signUp()
            let reply = try await alice.send(.POST, "/v1/files", json: CreateFileRequest(name: name, mimeType: folderMimeType))
            #expect(reply.status == 400)
            #expect(reply.errorCode == "invalid_name")
            let upload = try await alice.uploadReply(name, Data("x".utf8))
            #expect(upload.status == 400)
            #expect(try await alice.list().files.isEmpty)
        }
    }

    @Test("names are NFC-normalised and case-sensitive")
    func normalisedNames() async throws {
        try await TestServer.run { server in
            let alice = try await server.signUp()
            let nfd = try await alice.mkdir("Cafe\u{0301}")
            #expect(nfd.name == "Caf\u{00E9}")
            let clash = try await alice.send(.POST, "/v1/files", json: CreateFileRequest(name: "Caf\u{00E9}", mimeType: folderMimeType))
            #expect(clash.status == 409)
            _ = try await alice.mkdir("café".uppercased())
            #expect(try await alice.list().files.count == 2)
        }
    }

    @Test("rename and move, guarded by If-Match; cycles and clashes refused")
    func renameAndMove() async throws {
        try await TestServer.run { server in
            let alice = try await server.signUp()
            let a = try await alice.mkdir("A")
            let b = try await alice.mkdir("B", in: a.id)
            let c = try await alice.mkdir("C", in: b.id)
            let file = try await alice.upload("doc.txt", Data("hello".utf8))

            let renamed = try await alice.send(.PATCH, "/v1/files/\(file.id)", json: UpdateFileRequest(name: "renamed.txt"))
            #expect(renamed.status == 200)
            #expect(try renamed.decode(File.self).name == "renamed.txt")

            let moved: File = try await alice.send(.PATCH, "/v1/files/\(file.id)", json: UpdateFileRequest(parentId: c.id)).decode()
            #expect(moved.parentId == c.id)
            #expect(try await alice.list(c.id).files.map(\.id) == [file.id])

            let stale = try await alice.send(
                .PATCH, "/v1/files/\(a.id)", json: UpdateFileRequest(name: "A2"), headers: ["If-Match": "\"v0\""])
            #expect(stale.status == 412)
            #expect(stale.errorCode == "precondition_failed")
            #expect(try await alice.get("/v1/files/\(a.id)").decode(File.self).name == "A", "a refused PATCH changes nothing")

            let current = try await alice.get("/v1/files/\(a.id)")
            let etag = try #require(current.header("ETag"))
            let guarded = try await alice.send(.PATCH, "/v1/files/\(a.id)", json: UpdateFileRequest(name: "A2"), headers: ["If-Match": etag])
            #expect(guarded.status == 200)
            let reused = try await alice.send(.PATCH, "/v1/files/\(a.id)", json: UpdateFileRequest(name: "A3"), headers: ["If-Match": etag])
            #expect(reused.status == 412, "the ETag moved with the rename")

            for target in [a.id, b.id, c.id] {
                let cycle = try await alice.send(.PATCH, "/v1/files/\(a.id)", json: UpdateFileRequest(parentId: target))
                #expect(cycle.status == 400)
                #expect(cycle.errorCode == "invalid_move")
            }
            _ = try await alice.mkdir("taken", in: c.id)
            let clash = try await alice.send(.PATCH, "/v1/files/\(file.id)", json: UpdateFileRequest(name: "taken"))
            #expect(clash.status == 409)
            let intoFile = try await alice.send(.PATCH, "/v1/files/\(b.id)", json: UpdateFileRequest(parentId: file.id))
            #expect(intoFile.status == 400)
            let unknownFields = try await alice.send(
                .PATCH, "/v1/files/\(file.id)", body: Data(#"{"size": 99, "trashed": true, "userId": "x"}"#.utf8),
                headers: ["Content-Type": "application/json"])
            #expect(unknownFields.status == 200)
            let after: File = try unknownFields.decode()
            #expect(after.size == 5 && !after.trashed, "unknown fields are never applied")
            let root = try await alice.root()
            #expect(try await alice.send(.PATCH, "/v1/files/\(root.id)", json: UpdateFileRequest(name: "x")).status == 400)
        }
    }

    @Test("delete moves a tree to the trash; untrash brings it back; permanent delete removes it")
    func trash() async throws {
        try await TestServer.run { server in
            let alice = try await server.signUp()
            let folder = try await alice.mkdir("Projects")
            let inner = try await alice.upload("plan.md", Data("plan".utf8), in: folder.id)
            #expect(try await alice.send(.DELETE, "/v1/files/\(folder.id)").status == 204)
            #expect(try await alice.list().files.isEmpty)
            let trashed: FileList = try await alice.get("/v1/trash").decode()
            #expect(trashed.files.map(\.id) == [folder.id])
            #expect(try await alice.get("/v1/files/\(inner.id)").decode(File.self).trashed, "children go with their folder")
            #expect(try await alice.list(folder.id).files.map(\.id) == [inner.id], "a trashed folder still lists what went with it")
            #expect(try await alice.send(.POST, "/v1/files", json: CreateFileRequest(name: "x", mimeType: folderMimeType, parentId: folder.id)).status == 400)

            // The name is free while the folder is in the trash.
            let replacement = try await alice.mkdir("Projects")
            let restored: File = try await alice.send(.POST, "/v1/files/\(folder.id)/untrash").decode()
            #expect(!restored.trashed)
            #expect(restored.name == "Projects (1)", "restoring into a taken name picks a free one")
            #expect(try await alice.get("/v1/files/\(inner.id)").decode(File.self).trashed == false)
            #expect(try await alice.get("/v1/trash").decode(FileList.self).files.isEmpty)

            #expect(try await alice.send(.DELETE, "/v1/files/\(replacement.id)?permanent=true").status == 204)
            #expect(try await alice.get("/v1/files/\(replacement.id)").status == 404)
            #expect(try await alice.send(.DELETE, "/v1/files/\(folder.id)?permanent=true").status == 204)
            #expect(try await alice.get("/v1/files/\(inner.id)").status == 404)
            #expect(try await alice.get("/v1/about").decode(About.self).quota.used == 0, "purged content frees its space")
            #expect(try await alice.send(.DELETE, "/v1/files/root").status == 400)
            #expect(try await alice.send(.DELETE, "/v1/files/\(UUID().uuidString)").status == 404)
        }
    }

    @Test("untrashing an item whose folder is still trashed puts it in the root folder")
    func untrashOrphan() async throws {
        try await TestServer.run { server in
            let alice = try await server.signUp()
            let folder = try await alice.mkdir("Old")
            let file = try await alice.upload("keep.txt", Data("k".utf8), in: folder.id)
            _ = try await alice.send(.DELETE, "/v1/files/\(folder.id)")
            let restored: File = try await alice.send(.POST, "/v1/files/\(file.id)/untrash").decode()
            let root = try await alice.root()
            #expect(restored.parentId == root.id)
            #expect(!restored.trashed)
            #expect(try await alice.get("/v1/files/\(folder.id)").decode(File.self).trashed)
        }
    }

    @Test("the trash is purged after its retention period")
    func trashRetention() async throws {
        try await TestServer.run(configure: { $0.trashRetention = .seconds(3600) }) { server in
            var alice = try await server.signUp("ivy")
            let old = try await alice.upload("old.txt", Data("old".utf8))
            _ = try await alice.send(.DELETE, "/v1/files/\(old.id)")
            server.clock.advance(by: 1800)
            alice = try await server.logIn("ivy")
            let recent = try await alice.upload("recent.txt", Data("recent".utf8))
            _ = try await alice.send(.DELETE, "/v1/files/\(recent.id)")
            server.clock.advance(by: 1801)
            await server.parts.runMaintenance()
            alice = try await server.logIn("ivy")
            #expect(try await alice.get("/v1/files/\(old.id)").status == 404)
            #expect(try await alice.get("/v1/files/\(recent.id)").status == 200)
            #expect(try await alice.get("/v1/trash").decode(FileList.self).files.map(\.id) == [recent.id])
        }
    }

    @Test("/metrics shows the database's transactions and the blob store's operations")
    func storeMetrics() async throws {
        try await TestServer.run { server in
            let alice = try await server.signUp()
            let content = randomData(600_000)  // larger than an inline block: it goes to the blob store
            let file = try await alice.upload("big.bin", content)
            #expect(try await alice.content(file.id) == content)
            let text = try await APIClient(baseURL: server.baseURL).get("/metrics").text
            let database = TestServices.scaledOut ? "postgres" : "sqlite", store = TestServices.scaledOut ? "s3" : "local"
            /// The `_count` of a histogram whose labels include all of `labels`.
            func count(_ name: String, _ labels: [String]) -> Double? {
                text.split(separator: "\n").first { line in
                    line.hasPrefix(name + "_count{") && labels.allSatisfy { line.contains($0) }
                }.flatMap { Double($0.split(separator: " ").last ?? "") }
            }
            #expect((count("nimbus_db_transaction_seconds", ["database=\"\(database)\"", "kind=\"write\""]) ?? 0) > 0, "\(text.prefix(2000))")
            #expect((count("nimbus_db_transaction_seconds", ["database=\"\(database)\"", "kind=\"read\""]) ?? 0) > 0)
            for op in ["put", "read"] {
                #expect((count("nimbus_blob_seconds", ["store=\"\(store)\"", "op=\"\(op)\""]) ?? 0) > 0, "blob \(op)")
            }
            if TestServices.scaledOut {
                #expect(text.contains("nimbus_db_pool_connections{"), "pool gauges")
                #expect((count("nimbus_db_pool_wait_seconds", ["database=\"postgres\""]) ?? 0) > 0)
            }
        }
    }

    @Test("unknown routes and ids answer 404 in the JSON error shape")
    func notFound() async throws {
        try await TestServer.run { server in
            let alice = try await server.signUp()
            for path in ["/v1/nothing", "/v1/files/doesnotexist", "/v1/files/doesnotexist/content", "/v1/files/doesnotexist/revisions"] {
                let reply = try await alice.get(path)
                #expect(reply.status == 404, "\(path)")
                #expect(reply.errorCode == "not_found")
            }
            let health = try await APIClient(baseURL: server.baseURL).get("/healthz")
            #expect(health.status == 200)
            let metrics = try await APIClient(baseURL: server.baseURL).get("/metrics")
            #expect(metrics.status == 200)
            #expect(metrics.text.contains("hb_requests") || metrics.text.contains("http"), "metrics: \(metrics.text.prefix(200))")
        }
    }
}
