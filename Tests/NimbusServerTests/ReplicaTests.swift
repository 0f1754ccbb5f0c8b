import Foundation
import NIOConcurrencyHelpers
import NimbusAPI
import NimbusTestSupport
import Testing

/// Two real `nimbus serve` processes on one PostgreSQL database and one S3 bucket, sharing nothing else (each its
/// own `--data` folder, used only for request-scoped staging): what a deployment behind a load balancer does.
@Suite(
    "Replicas on one PostgreSQL and one S3 store", .serialized,
    .disabled(if: TestServices.scaledOut, "starts its own PostgreSQL + S3 replicas; run once, in the first pass"))
struct ReplicaTests {
    struct Replicas {
        var a: ChildServer
        var b: ChildServer
        let arguments: [String]
        let dataA: URL
        let dataB: URL
        let token: String

        func client(_ server: ChildServer) -> APIClient { APIClient(baseURL: server.baseURL, token: token) }
    }

    static func withReplicas(_ body: (inout Replicas) async throws -> Void) async throws {
        let database = try TestServices.postgresURL()
        let blobs = try TestServices.s3().blobsURL()
        let root = FileManager.default.temporaryDirectory.appending(path: "nimbus-replicas-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: root) }
        let arguments = ["--database", database, "--blobs", blobs, "--chunk-size", "256KiB"]
        let dataA = root.appending(path: "a"), dataB = root.appending(path: "b")
        let a = try ChildServer(data: dataA, arguments: arguments)
        let b = try ChildServer(data: dataB, arguments: arguments)
        let anonymous = APIClient(baseURL: a.baseURL)
        #expect(try await anonymous.send(.POST, "/v1/auth/register", json: Credentials(username: "rita", password: "correct horse")).status == 201)
        // Logged in on B: a token issued by one replica is accepted by the other.
        let tokens: TokenPair = try await APIClient(baseURL: b.baseURL).send(
            .POST, "/v1/auth/login", json: Credentials(username: "rita", password: "correct horse")).decode()
        var replicas = Replicas(a: a, b: b, arguments: arguments, dataA: dataA, dataB: dataB, token: tokens.accessToken)
        defer {
            replicas.a.stop()
            replicas.b.stop()
        }
        try await body(&replicas)
    }

    @Test("a resumable upload whose chunks alternate between the replicas; either one serves the file")
    func alternatingChunks() async throws {
        try await Self.withReplicas { replicas in
            let a = replicas.client(replicas.a), b = replicas.client(replicas.b)
            let content = randomData(testChunk * 5 + 1234)
            let session: UploadResponse = try await a.initiate("big.bin", size: content.count, checksum: sha256(content)).decode()
            var last: APIClient.Reply?
            for chunk in 0..<session.totalChunks {
                let reply = try await (chunk % 2 == 0 ? b : a).sendChunk(session, content, chunk: chunk)
                #expect(reply.status == (chunk == session.totalChunks - 1 ? 201 : 308), "chunk \(chunk): \(reply.text)")
                last = reply
            }
            let file = try #require(try last?.decode(UploadResponse.self).file)
            #expect(file.checksum == sha256(content))
            #expect(try await a.content(file.id) == content)
            #expect(try await b.content(file.id) == content)
            // Status and a re-sent chunk on the other replica agree.
            let status: UploadResponse = try await b.get("/v1/upload/\(session.uploadId)").decode()
            #expect(status.chunksProcessed == session.totalChunks)
        }
    }

    @Test("a long-poll on replica B is answered by a commit on replica A")
    func changesAcrossReplicas() async throws {
        try await Self.withReplicas { replicas in
            let a = replicas.client(replicas.a), b = replicas.client(replicas.b)
            let start: ChangeCursor = try await b.get("/v1/changes/start").decode()
            // The poll's timeout is long (60 s) so that a loaded machine's slow upload cannot be mistaken for it:
            // what must hold is that the answer came well before the timeout and soon after the commit.
            let began = Date()
            async let poll = b.get("/v1/changes?cursor=\(start.cursor)&timeout=60")
            try await Task.sleep(for: .milliseconds(500))
            let made = try await a.upload("from-a.txt", Data("hello".utf8))
            let committed = Date()
            let reply = try await poll
            let waited = Date().timeIntervalSince(began), afterCommit = Date().timeIntervalSince(committed)
            #expect(reply.status == 200)
            let list: ChangeList = try reply.decode()
            #expect(list.changes.map(\.fileId).contains(made.id), "answered with the change, not empty at the timeout")
            #expect(waited < 50, "woken by the commit (NOTIFY), not by the 60 s timeout: \(waited) s")
            #expect(afterCommit < 10, "answered soon after the commit: \(afterCommit) s")
        }
    }

    @Test("login lockout holds across replicas: wrong passwords sent to both at once all count, and both refuse")
    func lockoutAcrossReplicas() async throws {
        try await Self.withReplicas { replicas in
            let servers = [replicas.a, replicas.b]
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for index in 0..<5 {
                    group.addTask {
                        try await APIClient(baseURL: servers[index % 2].baseURL).send(
                            .POST, "/v1/auth/login", json: Credentials(username: "rita", password: "wrong password")
                        ).status
                    }
                }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(statuses.allSatisfy { $0 == 401 || $0 == 429 }, "\(statuses)")
            for server in servers {
                let locked = try await APIClient(baseURL: server.baseURL).send(
                    .POST, "/v1/auth/login", json: Credentials(username: "rita", password: "correct horse"))
                #expect(locked.status == 429, "\(server.baseURL): \(locked.text)")
                #expect(locked.header("Retry-After") != nil)
            }
        }
    }

    @Test("20 writers racing on one file through both replicas: exactly one wins each round")
    func racingWriters() async throws {
        try await Self.withReplicas { replicas in
            let a = replicas.client(replicas.a), b = replicas.client(replicas.b)
            let file = try await a.upload("race.txt", Data("start".utf8))
            var head = try #require(file.revisionId)
            for round in 0..<3 {
                let contents = (0..<20).map { Data("round \(round) writer \($0)".utf8) }
                let statuses = try await withThrowingTaskGroup(of: (Int, Int).self) { group in
                    for (index, content) in contents.enumerated() {
                        group.addTask { [head] in
                            let client = index % 2 == 0 ? a : b
                            let reply = try await client.send(
                                .POST, "/v1/upload?uploadType=media&fileId=\(file.id)", body: content, headers: ["If-Match": "\"\(head)\""])
                            return (index, reply.status)
                        }
                    }
                    return try await group.reduce(into: [Int: Int]()) { $0[$1.0] = $1.1 }
                }
                let winners = statuses.filter { $0.value == 201 }.map(\.key)
                #expect(winners.count == 1, "round \(round): \(statuses.values.sorted())")
                #expect(statuses.values.allSatisfy { $0 == 201 || $0 == 409 })
                if let winner = winners.first { #expect(try await b.content(file.id) == contents[winner]) }
                let current: File = try await a.get("/v1/files/\(file.id)").decode()
                head = try #require(current.revisionId)
            }
            let revisions: RevisionList = try await b.get("/v1/files/\(file.id)/revisions").decode()
            #expect(revisions.revisions.count == 4)
        }
    }

    @Test("kill -9 of a replica in the middle of uploads loses nothing acknowledged; every listed file's content is whole")
    func killedReplica() async throws {
        try await Self.withReplicas { replicas in
            let a = replicas.client(replicas.a), b = replicas.client(replicas.b)
            let acknowledged = NIOLockedValueBox<[String: String]>([:])  // file id → checksum
            let stop = NIOLockedValueBox(false)
            try await withThrowingTaskGroup(of: Void.self) { group in
                for writer in 0..<6 {
                    group.addTask {
                        var n = 0
                        while !stop.withLockedValue({ $0 }) {
                            n += 1
                            // Small files stay in the database; bigger ones are blocks in S3.
                            let size = writer % 2 == 0 ? 3000 : 200_000 + n
                            let content = Data((0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ n &* 7 &+ writer) })
                            let client = writer < 3 ? a : b
                            // A short deadline: AsyncHTTPClient keeps retrying a refused connection until it.
                            guard
                                let reply = try? await client.send(
                                    .POST, "/v1/upload?uploadType=media&name=w\(writer)-\(n).bin", body: content, timeout: .seconds(3))
                            else {
                                try await Task.sleep(for: .milliseconds(50))  // the replica is down
                                continue
                            }
                            if reply.status == 201, let file = try? reply.decode(File.self) {
                                acknowledged.withLockedValue { $0[file.id] = sha256(content) }
                            }
                        }
                    }
                }
                try await Task.sleep(for: .seconds(2))
                replicas.a.kill()
                try await Task.sleep(for: .seconds(1))
                stop.withLockedValue { $0 = true }
                try await group.waitForAll()
            }
            replicas.a = try ChildServer(data: replicas.dataA, arguments: replicas.arguments)
            let restarted = replicas.client(replicas.a)
            let saved = acknowledged.withLockedValue { $0 }
            let checkStarted = Date()
            defer { print("replica kill test: \(saved.count) acknowledged uploads checked in \(Int(Date().timeIntervalSince(checkStarted))) s") }
            #expect(saved.count > 10, "the writers got some work done: \(saved.count)")
            var listed: [File] = []
            var page = 1
            while true {
                let list = try await restarted.list(query: "limit=100&page=\(page)")
                listed += list.files
                if list.files.count < 100 { break }
                page += 1
            }
            let byId = Dictionary(uniqueKeysWithValues: listed.map { ($0.id, $0) })
            for (id, checksum) in saved {
                #expect(byId[id]?.checksum == checksum, "acknowledged file \(id) is listed with its checksum")
            }
            for file in listed {
                let bytes = try await (file.name.hasPrefix("w1") ? b : restarted).content(file.id)
                #expect(sha256(bytes) == file.checksum, "\(file.name): every block of a listed file is in the store")
            }
        }
    }
}
