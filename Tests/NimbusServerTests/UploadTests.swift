import AsyncHTTPClient
import Foundation
import NimbusTestSupport
import NIOCore
import NimbusAPI
import NimbusServer
import Testing

/// Chunk size used by these tests: the smallest the protocol allows, so files stay small.
let testChunk = 256 * 1024

extension APIClient {
    func initiate(
        _ name: String, size: Int, requestId: String = UUID().uuidString, parentId: String? = nil, fileId: String? = nil,
        checksum: String? = nil, headers: [String: String] = [:], query: String = ""
    ) async throws -> Reply {
        try await send(
            .POST, "/v1/upload?uploadType=resumable" + query,
            json: UploadRequest(
                requestId: requestId, name: name, mimeType: "application/octet-stream", parentId: parentId, size: Int64(size), fileId: fileId,
                checksum: checksum), headers: headers)
    }

    func sendChunk(_ session: UploadResponse, _ content: Data, chunk k: Int, total: Int? = nil) async throws -> Reply {
        let size = Int(session.chunkSize)
        let start = k * size
        let end = min(start + size, content.count)
        return try await send(
            .PUT, session.uploadUrl, body: content.subdata(in: start..<end),
            headers: ["Content-Range": "bytes \(start)-\(end - 1)/\(total ?? content.count)"])
    }
}

@Suite("Resumable uploads")
struct UploadTests {
    static func configure(_ configuration: inout ServerConfiguration) {
        configuration.chunkSize = Int64(testChunk)
    }

    @Test("the full protocol: initiate, 308 per chunk, 201 with the file at the end, status in between")
    func fullProtocol() async throws {
        try await TestServer.run(configure: Self.configure) { server in
            let alice = try await server.signUp()
            let content = randomData(testChunk * 2 + 1000)
            let started = try await alice.initiate("video.mp4", size: content.count, checksum: sha256(content))
            #expect(started.status == 200)
            let session: UploadResponse = try started.decode()
            #expect(session.totalChunks == 3)
            #expect(session.chunksProcessed == 0)
            #expect(session.chunkSize == Int64(testChunk))
            #expect(session.uploadUrl == "/v1/upload/\(session.uploadId)/chunk")
            #expect(session.uploadExpiresAt > server.clock.now().addingTimeInterval(23 * 3600))
            #expect(session.file == nil)

            let again: UploadResponse = try await alice.initiate("video.mp4", size: content.count, requestId: "fixed").decode()
            let same: UploadResponse = try await alice.initiate("video.mp4", size: content.count, requestId: "fixed").decode()
            #expect(again.uploadId == same.uploadId, "the same requestId returns the same session")
            #expect(try await alice.initiate("other.mp4", size: 5, requestId: "fixed").status == 409)

            for k in 0..<2 {
                let reply = try await alice.sendChunk(session, content, chunk: k)
                #expect(reply.status == 308)
                let state: UploadResponse = try reply.decode()
                #expect(state.chunksProcessed == k + 1)
                #expect(state.file == nil)
            }
            let status: UploadResponse = try await alice.get("/v1/upload/\(session.uploadId)").decode()
            #expect(status.chunksProcessed == 2)
            let last = try await alice.sendChunk(session, content, chunk: 2)
            #expect(last.status == 201)
            let done: UploadResponse = try last.decode()
            let file = try #require(done.file)
            #expect(file.name == "video.mp4")
            #expect(file.size == Int64(content.count))
            #expect(file.checksum == sha256(content))
            #expect(done.chunksProcessed == 3)
            #expect(try await alice.content(file.id) == content)
            // Re-sending the last chunk after completion is acknowledged again with the same file.
            let replay = try await alice.sendChunk(session, content, chunk: 2)
            #expect(replay.status == 201)
            #expect(try replay.decode(UploadResponse.self).file?.id == file.id)
        }
    }

    @Test("re-sent chunks are acknowledged; wrong ranges, lengths and totals are refused and change nothing")
    func badAndDuplicateChunks() async throws {
        try await TestServer.run(configure: Self.configure) { server in
            let alice = try await server.signUp()
            let content = randomData(testChunk * 3)
            let session: UploadResponse = try await alice.initiate("data.bin", size: content.count).decode()
            #expect(try await alice.sendChunk(session, content, chunk: 0).status == 308)
            #expect(try await alice.sendChunk(session, content, chunk: 1).status == 308)

            let duplicate = try await alice.sendChunk(session, content, chunk: 0)
            #expect(duplicate.status == 308)
            #expect(try duplicate.decode(UploadResponse.self).chunksProcessed == 2)

            let url = session.uploadUrl
            let chunk = content.subdata(in: (2 * testChunk)..<(3 * testChunk))
            let cases: [(String?, Data, Int)] = [
                (nil, chunk, 400),  // no Content-Range
                ("bytes 0-10/\(content.count)", chunk, 400),  // wrong length for chunk 0
                ("bytes \(2 * testChunk)-\(3 * testChunk - 1)/\(content.count + 1)", chunk, 400),  // wrong total
                ("bytes 100-\(testChunk + 99)/\(content.count)", chunk, 416),  // misaligned
                ("bytes \(3 * testChunk)-\(4 * testChunk - 1)/\(content.count)", chunk, 416),  // beyond the end
                ("bytes \(2 * testChunk)-\(3 * testChunk - 1)/\(content.count)", chunk.prefix(1000), 400),  // short body
                ("bytes \(2 * testChunk)-\(3 * testChunk - 1)/\(content.count)", chunk + Data([1, 2]), 400),  // long body
                ("bytes=garbage", chunk, 400),
            ]
            for (range, body, status) in cases {
                let reply = try await alice.send(.PUT, url, body: body, headers: range.map { ["Content-Range": $0] } ?? [:])
                #expect(reply.status == status, "\(range ?? "none") with \(body.count) bytes → \(reply.status) \(reply.text)")
                _ = reply.errorCode
                let state: UploadResponse = try await alice.get("/v1/upload/\(session.uploadId)").decode()
                #expect(state.chunksProcessed == 2, "a refused chunk changes nothing")
            }
            let skip: UploadResponse = try await alice.initiate("skip.bin", size: content.count).decode()
            let ahead = try await alice.sendChunk(skip, content, chunk: 1)
            #expect(ahead.status == 416, "chunks go in order")
            #expect(try await alice.sendChunk(session, content, chunk: 2).status == 201)
            #expect(try await alice.list().files.map(\.name) == ["data.bin"])
            let staging = try FileManager.default.contentsOfDirectory(atPath: server.dataDirectory.appending(path: "tmp").path)
            #expect(staging.isEmpty)
        }
    }

    @Test("a checksum that does not match is a 422, and nothing becomes visible")
    func checksumMismatch() async throws {
        try await TestServer.run(configure: Self.configure) { server in
            let alice = try await server.signUp()
            let content = randomData(testChunk + 10)
            let session: UploadResponse = try await alice.initiate("x.bin", size: content.count, checksum: sha256(Data("other".utf8))).decode()
            #expect(try await alice.sendChunk(session, content, chunk: 0).status == 308)
            let last = try await alice.sendChunk(session, content, chunk: 1)
            #expect(last.status == 422)
            #expect(last.errorCode == "checksum_mismatch")
            #expect(try await alice.list().files.isEmpty)
            #expect(try await alice.get("/v1/about").decode(About.self).quota.used == 0)
            let bad = try await alice.initiate("y.bin", size: 10, checksum: "not-a-checksum")
            #expect(bad.status == 400)
        }
    }

    @Test("size limits and quota are checked when the session starts: 413 and 507")
    func limitsAtInitiation() async throws {
        try await TestServer.run(configure: { Self.configure(&$0); $0.defaultQuota = 1_000_000 }) { server in
            let alice = try await server.signUp()
            let huge = try await alice.initiate("huge.iso", size: 10 * 1024 * 1024 * 1024 + 1)
            #expect(huge.status == 413)
            #expect(huge.errorCode == "too_large")
            let over = try await alice.initiate("big.bin", size: 1_000_001)
            #expect(over.status == 507)
            #expect(over.errorCode == "quota_exceeded")
            #expect(try await alice.initiate("neg.bin", size: -1).status == 400)
            #expect(try await alice.initiate("a/b", size: 1).status == 400)
            #expect(try await alice.initiate("ok.bin", size: 1, parentId: "nope").status == 404)
        }
    }

    @Test("an empty file completes at initiation")
    func emptyFile() async throws {
        try await TestServer.run(configure: Self.configure) { server in
            let alice = try await server.signUp()
            let reply = try await alice.initiate("empty.txt", size: 0)
            #expect(reply.status == 201)
            let done: UploadResponse = try reply.decode()
            #expect(done.totalChunks == 0)
            #expect(done.file?.size == 0)
            #expect(done.file?.checksum == sha256(Data()))
        }
    }

    @Test("cancel frees the quota at once, and the stored bytes once the grace period has passed")
    func cancelFreesBytes() async throws {
        try await TestServer.run(configure: Self.configure) { server in
            let alice = try await server.signUp()
            let content = randomData(testChunk * 3)
            let session: UploadResponse = try await alice.initiate("c.bin", size: content.count).decode()
            _ = try await alice.sendChunk(session, content, chunk: 0)
            _ = try await alice.sendChunk(session, content, chunk: 1)
            #expect(try await alice.get("/v1/about").decode(About.self).quota.used == Int64(2 * testChunk))
            #expect(try await alice.send(.DELETE, "/v1/upload/\(session.uploadId)").status == 204)
            #expect(try await alice.get("/v1/about").decode(About.self).quota.used == 0)
            #expect(try await alice.get("/v1/upload/\(session.uploadId)").status == 404)
            #expect(try await alice.sendChunk(session, content, chunk: 2).status == 404)
            await server.parts.runMaintenance()
            #expect(try await server.parts.storedBlockCount() == 2, "kept through the grace period")
            server.clock.advance(by: 24 * 3600 + 1)
            await server.parts.runMaintenance()
            #expect(try await server.parts.storedBlockCount() == 0, "no block stays in the store")
        }
    }

    @Test("sessions expire: 410, then their bytes are collected")
    func expiry() async throws {
        try await TestServer.run(configure: Self.configure) { server in
            var alice = try await server.signUp("kim")
            let content = randomData(testChunk * 2)
            let session: UploadResponse = try await alice.initiate("e.bin", size: content.count).decode()
            _ = try await alice.sendChunk(session, content, chunk: 0)
            server.clock.advance(by: 24 * 3600 + 1)
            alice = try await server.logIn("kim")
            let status = try await alice.get("/v1/upload/\(session.uploadId)")
            #expect(status.status == 410)
            #expect(status.errorCode == "upload_expired")
            #expect(try await alice.sendChunk(session, content, chunk: 1).status == 410)
            #expect(try await alice.get("/v1/about").decode(About.self).quota.used == Int64(testChunk))
            await server.parts.runMaintenance()
            #expect(try await alice.get("/v1/about").decode(About.self).quota.used == 0, "the collector freed the bytes")
            #expect(try await alice.get("/v1/upload/\(session.uploadId)").status == 410, "it still answers 410 afterwards")
        }
    }

    @Test("a new version through a resumable upload, and 409 at initiation and at the last chunk when the head moved")
    func resumableVersions() async throws {
        try await TestServer.run(configure: Self.configure) { server in
            let alice = try await server.signUp()
            let v1 = try await alice.upload("doc.bin", Data("one".utf8))
            let content = randomData(testChunk + 5)
            let ifMatch = ["If-Match": "\"\(v1.revisionId!)\""]
            let session: UploadResponse = try await alice.initiate("doc.bin", size: content.count, fileId: v1.id, headers: ifMatch).decode()
            _ = try await alice.sendChunk(session, content, chunk: 0)
            // Another device commits first.
            _ = try await alice.send(.POST, "/v1/upload?uploadType=media&fileId=\(v1.id)", body: Data("two".utf8))
            let last = try await alice.sendChunk(session, content, chunk: 1)
            #expect(last.status == 409)
            #expect(last.errorCode == "version_conflict")
            #expect(try last.decode(APIErrorBody.self).error.file?.id == v1.id)
            #expect(try await alice.content(v1.id) == Data("two".utf8))

            let late = try await alice.initiate("doc.bin", size: 10, fileId: v1.id, headers: ifMatch)
            #expect(late.status == 409)
            let head: File = try await alice.get("/v1/files/\(v1.id)").decode()
            let fresh: UploadResponse = try await alice.initiate(
                "doc.bin", size: content.count, fileId: v1.id, headers: ["If-Match": "\"\(head.revisionId!)\""]
            ).decode()
            _ = try await alice.sendChunk(fresh, content, chunk: 0)
            let ok = try await alice.sendChunk(fresh, content, chunk: 1)
            #expect(ok.status == 201)
            #expect(try ok.decode(UploadResponse.self).file?.id == v1.id)
            #expect(try await alice.content(v1.id) == content)

            let clash = try await alice.initiate("doc.bin", size: 3)
            #expect(clash.status == 409)
            #expect(clash.errorCode == "name_conflict")
            let renamed: UploadResponse = try await alice.initiate("doc.bin", size: 3, query: "&onConflict=rename").decode()
            let done: UploadResponse = try await alice.sendChunk(renamed, Data("abc".utf8), chunk: 0).decode()
            #expect(done.file?.name == "doc (1).bin")
        }
    }

    @Test("racing versions of one file: exactly one wins each round, the rest get 409", arguments: [false, true])
    func racingVersions(resumable: Bool) async throws {
        try await TestServer.run(configure: Self.configure) { server in
            let alice = try await server.signUp()
            let file = try await alice.upload("race.txt", Data("start".utf8))
            var head = try #require(file.revisionId)
            for round in 0..<3 {
                let contents = (0..<20).map { Data("round \(round) writer \($0)".utf8) }
                let statuses = try await withThrowingTaskGroup(of: (Int, Int).self) { group in
                    for (index, content) in contents.enumerated() {
                        group.addTask { [head] in
                            let ifMatch = ["If-Match": "\"\(head)\""]
                            if resumable {
                                let started = try await alice.initiate("race.txt", size: content.count, fileId: file.id, headers: ifMatch)
                                guard started.status == 200 else { return (index, started.status) }
                                let session: UploadResponse = try started.decode()
                                return (index, try await alice.sendChunk(session, content, chunk: 0).status)
                            }
                            let reply = try await alice.send(
                                .POST, "/v1/upload?uploadType=media&fileId=\(file.id)", body: content, headers: ifMatch)
                            return (index, reply.status)
                        }
                    }
                    return try await group.reduce(into: [Int: Int]()) { $0[$1.0] = $1.1 }
                }
                let winners = statuses.filter { $0.value == 201 }.map(\.key)
                #expect(winners.count == 1, "round \(round): \(statuses.values.sorted())")
                #expect(statuses.values.allSatisfy { $0 == 201 || $0 == 409 })
                let current: File = try await alice.get("/v1/files/\(file.id)").decode()
                if let winner = winners.first {
                    #expect(try await alice.content(file.id) == contents[winner], "the winner's bytes are the head")
                }
                head = try #require(current.revisionId)
            }
            let revisions: RevisionList = try await alice.get("/v1/files/\(file.id)/revisions").decode()
            #expect(revisions.revisions.count == 4)
        }
    }
}

@Suite("Crash safety", .serialized)
struct CrashTests {
    @Test("an upload survives kill -9 during and between chunks, and resumes from the last durable chunk")
    func killDuringUpload() async throws {
        let data = FileManager.default.temporaryDirectory.appending(path: "nimbus-crash-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: data) }
        let content = randomData(testChunk * 4 + 77)
        var server = try ChildServer(data: data, arguments: ["--chunk-size", "256KiB"])
        defer { server.stop() }
        let anonymous = APIClient(baseURL: server.baseURL)
        #expect(try await anonymous.send(.POST, "/v1/auth/register", json: Credentials(username: "lee", password: "correct horse")).status == 201)
        let tokens: TokenPair = try await anonymous.send(.POST, "/v1/auth/login", json: Credentials(username: "lee", password: "correct horse")).decode()
        var alice = APIClient(baseURL: server.baseURL, token: tokens.accessToken)
        let session: UploadResponse = try await alice.initiate("crash.bin", size: content.count, checksum: sha256(content)).decode()
        #expect(try await alice.sendChunk(session, content, chunk: 0).status == 308)

        // Half of chunk 1 is on the wire when the server dies.
        let half = content.subdata(in: testChunk..<(testChunk + testChunk / 2))
        let (stream, continuation) = AsyncStream.makeStream(of: ByteBuffer.self)
        var request = HTTPClientRequest(url: server.baseURL + session.uploadUrl)
        request.method = .PUT
        request.headers.add(name: "Authorization", value: "Bearer \(tokens.accessToken)")
        request.headers.add(name: "Content-Range", value: "bytes \(testChunk)-\(2 * testChunk - 1)/\(content.count)")
        request.body = .stream(stream, length: .known(Int64(testChunk)))
        let inFlight = Task { try await HTTPClient.shared.execute(request, timeout: .seconds(30)) }
        continuation.yield(ByteBuffer(data: half))
        try await Task.sleep(for: .milliseconds(300))
        server.kill()
        continuation.finish()
        _ = try? await inFlight.value

        server = try ChildServer(data: data, arguments: ["--chunk-size", "256KiB"])
        alice = APIClient(baseURL: server.baseURL, token: tokens.accessToken)
        var state: UploadResponse = try await alice.get("/v1/upload/\(session.uploadId)").decode()
        #expect(state.chunksProcessed == 1, "the half chunk was never acknowledged, chunk 0 was")
        #expect(try await alice.sendChunk(session, content, chunk: 1).status == 308)
        #expect(try await alice.sendChunk(session, content, chunk: 2).status == 308)

        // Killed between chunks.
        server.kill()
        server = try ChildServer(data: data, arguments: ["--chunk-size", "256KiB"])
        alice = APIClient(baseURL: server.baseURL, token: tokens.accessToken)
        state = try await alice.get("/v1/upload/\(session.uploadId)").decode()
        #expect(state.chunksProcessed == 3)
        #expect(try await alice.sendChunk(session, content, chunk: 3).status == 308)
        let last = try await alice.sendChunk(session, content, chunk: 4)
        #expect(last.status == 201, "\(last.text)")
        let file = try #require(try last.decode(UploadResponse.self).file)
        #expect(file.checksum == sha256(content))
        #expect(try await alice.content(file.id) == content)
        let staging = try FileManager.default.contentsOfDirectory(atPath: data.appending(path: "tmp").path)
        #expect(staging.isEmpty, "half-written staging files are cleared at start")
    }

    @Test("a simple upload acknowledged before kill -9 is there after restart")
    func acknowledgedSurvives() async throws {
        let data = FileManager.default.temporaryDirectory.appending(path: "nimbus-crash-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: data) }
        var server = try ChildServer(data: data)
        defer { server.stop() }
        let anonymous = APIClient(baseURL: server.baseURL)
        _ = try await anonymous.send(.POST, "/v1/auth/register", json: Credentials(username: "max", password: "correct horse"))
        let tokens: TokenPair = try await anonymous.send(.POST, "/v1/auth/login", json: Credentials(username: "max", password: "correct horse")).decode()
        let content = randomData(5 * 1024 * 1024)
        let client = APIClient(baseURL: server.baseURL, token: tokens.accessToken)
        let file = try await client.upload("kept.bin", content)
        // Small content is kept in the database (simple and batch uploads): acknowledged means durable too.
        let small = randomData(3000)
        let smallFile = try await client.upload("small.bin", small)
        let batch = try await client.send(
            .POST, "/v1/upload?uploadType=batch", json: BatchUploadRequest(files: [.init(name: "b1.bin", content: small + small), .init(name: "b2.bin", content: content)]))
        let batched = try batch.decode(BatchUploadResponse.self).results.compactMap(\.file)
        #expect(batched.count == 2)
        server.kill()
        server = try ChildServer(data: data)
        let after = APIClient(baseURL: server.baseURL, token: tokens.accessToken)
        #expect(try await after.content(file.id) == content)
        #expect(try await after.content(smallFile.id) == small)
        #expect(try await after.content(batched[0].id) == small + small)
        #expect(try await after.content(batched[1].id) == content)
    }
}
