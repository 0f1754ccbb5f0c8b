import Foundation
import NimbusAPI
@testable import NimbusServer
import NimbusTestSupport
import Testing

/// The data folder on a small filesystem (a tmpfs the test mounts; the tests run as root in CI): a full disk is a
/// clean 507, never a 500, and never stops a user from signing in and freeing space.
@Suite("A full disk", .serialized, .enabled(if: !TestServices.scaledOut, "the embedded store's disk (the scaled-out run uses PostgreSQL and S3)"))
struct DiskFullTests {
    /// Mounts a tmpfs of `megabytes` for `body`, and unmounts it after.
    static func withSmallDisk(megabytes: Int, _ body: (URL) async throws -> Void) async throws {
        let mount = FileManager.default.temporaryDirectory.appending(path: "nimbus-small-disk-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: mount) }
        let disk = try SmallDisk.mount(at: mount, megabytes: megabytes)
        defer { disk.unmount() }
        try await body(mount)
    }

    /// Uploads 2 MiB files until one is refused (at most 40): those stored, with their content, and the refusal.
    static func fill(_ client: APIClient) async throws -> (stored: [(file: File, content: Data)], refused: APIClient.Reply?) {
        var stored: [(file: File, content: Data)] = []
        for index in 0..<40 {
            let content = randomData(2 << 20)
            let reply = try await client.uploadReply("f\(index).bin", content)
            guard reply.status == 201 else { return (stored, reply) }
            stored.append((try reply.decode(File.self), content))
        }
        return (stored, nil)
    }

    @Test("uploads that do not fit are 507 with the JSON error (simple, resumable, batch, blocks, WebDAV); nothing partial stays; reads and sign-ins work; freeing space makes uploads work again")
    func fullDisk() async throws {
        try await Self.withSmallDisk(megabytes: 24) { mount in
            try await TestServer.run(configure: {
                $0.dataDirectory = mount.appending(path: "data")
                $0.minimumFreeSpace = 4 << 20
                $0.blockGracePeriod = .seconds(60)
            }) { server in
                let name = "full" + UUID().uuidString.prefix(4).lowercased()
                let alice = try await server.signUp(name)
                let app: AppPassword = try await alice.send(.POST, "/v1/auth/app-passwords", json: AppPasswordRequest(label: "dav")).decode()
                let (stored, refused) = try await Self.fill(alice)
                let full = try #require(refused, "40 × 2 MiB never filled a 24 MiB disk")
                #expect(full.status == 507, "\(full.status) \(full.text)")
                #expect(full.errorCode == "insufficient_storage")
                #expect(stored.count >= 3, "\(stored.count) files fit")

                // Every other way in says the same, and stores nothing.
                let resumable = try await alice.send(
                    .POST, "/v1/upload?uploadType=resumable",
                    json: UploadRequest(requestId: "big-1", name: "big.bin", mimeType: "application/octet-stream", parentId: nil, size: 20 << 20))
                #expect(resumable.status == 507 && resumable.errorCode == "insufficient_storage", "\(resumable.text)")
                let batch = try await alice.send(
                    .POST, "/v1/upload?uploadType=batch",
                    json: BatchUploadRequest(files: [.init(name: "b.bin", parentId: "root", requestId: "b-1", content: randomData(6 << 20))]))
                #expect(batch.status == 507, "\(batch.status)")
                let block = randomData(1 << 20)
                let put = try await alice.send(.PUT, "/v1/blocks/\(sha256(block))", body: block)
                #expect(put.status == 507 || put.status == 201, "\(put.status)")
                let basic = "Basic " + Data("\(name):\(try #require(app.password))".utf8).base64EncodedString()
                let dav = try await APIClient(baseURL: server.baseURL).send(.PUT, "/dav/dav.bin", body: randomData(6 << 20), headers: ["Authorization": basic])
                #expect(dav.status == 507, "\(dav.status) \(dav.text)")
                let names = try await alice.list(query: "limit=1000").files.map(\.name)
                #expect(Set(names) == Set(stored.map(\.file.name)), "no partial file is visible: \(names)")

                // Reads work, and so does signing in (a new device row) on the full disk.
                #expect(try await alice.content(stored[0].file.id) == stored[0].content)
                let laptop = try await server.logIn(name, device: "laptop")
                #expect(try await laptop.list().files.count == stored.count)

                // No staging bytes left behind once maintenance has run.
                await server.parts.runMaintenance()
                let staging = mount.appending(path: "data/tmp")
                let leftovers = (try? FileManager.default.contentsOfDirectory(atPath: staging.path)) ?? []
                #expect(leftovers.isEmpty, "staging holds \(leftovers)")

                // Delete, empty the trash, let the grace period pass: uploads work again, no restart.
                for entry in stored.dropFirst() {
                    #expect(try await laptop.send(.DELETE, "/v1/files/\(entry.file.id)?permanent=true").status == 204)
                }
                server.clock.advance(by: 120)
                await server.parts.runMaintenance()
                let again = try await alice.uploadReply("after.bin", randomData(2 << 20))
                #expect(again.status == 201, "\(again.status) \(again.text)")
            }
        }
    }

    @Test("space freed by permanent deletions is usable again within minutes: the service sweeps freed blocks a minute after, without waiting for the day-long grace of blocks sent and not committed")
    func freedSpaceComesBackSoon() async throws {
        try await Self.withSmallDisk(megabytes: 24) { mount in
            try await TestServer.run(configure: {
                $0.dataDirectory = mount.appending(path: "data")
                $0.minimumFreeSpace = 4 << 20
            }) { server in
                let name = "soon" + UUID().uuidString.prefix(4).lowercased()
                let alice = try await server.signUp(name)
                let (stored, refused) = try await Self.fill(alice)
                #expect(refused?.status == 507, "\(refused?.status ?? 0) \(refused?.text ?? "")")
                #expect(stored.count >= 3, "\(stored.count) files fit")
                // Into the trash, then emptied: the user freed the space.
                for (file, _) in stored {
                    #expect(try await alice.send(.DELETE, "/v1/files/\(file.id)").status == 204)
                    #expect(try await alice.send(.DELETE, "/v1/files/\(file.id)?permanent=true").status == 204)
                }
                #expect(try await alice.uploadReply("too-soon.bin", randomData(2 << 20)).status == 507, "not before the short grace period")
                // A minute later the maintenance service (its own loop, no call from here) gives the space back.
                server.clock.advance(by: 61)
                let deadline = Date().addingTimeInterval(30)
                var last: APIClient.Reply?
                while Date() < deadline {
                    last = try await alice.uploadReply("after.bin", randomData(2 << 20))
                    if last?.status == 201 { break }
                    try await Task.sleep(for: .milliseconds(250))
                }
                #expect(last?.status == 201, "\(last?.status ?? 0) \(last?.text ?? "")")
            }
        }
    }

    @Test("a disk filled by something else: signing in still works (the reserve is given up), uploads are 507, deleting frees space")
    func filledFromOutside() async throws {
        try await Self.withSmallDisk(megabytes: 24) { mount in
            try await TestServer.run(configure: {
                $0.dataDirectory = mount.appending(path: "data")
                $0.minimumFreeSpace = 4 << 20
            }) { server in
                let name = "outside" + UUID().uuidString.prefix(4).lowercased()
                let alice = try await server.signUp(name)
                let kept = try await alice.upload("kept.txt", Data("kept".utf8))
                #expect(FileManager.default.fileExists(atPath: mount.appending(path: "data/reserve").path), "the reserve is made at start")
                // Fill the disk to the last byte from outside the server.
                let filler = mount.appending(path: "filler")
                _ = FileManager.default.createFile(atPath: filler.path, contents: nil)
                let handle = try FileHandle(forWritingTo: filler)
                let chunk = Data(repeating: 7, count: 1 << 20)
                while (try? handle.write(contentsOf: chunk)) != nil {}
                let small = Data(repeating: 7, count: 4096)
                while (try? handle.write(contentsOf: small)) != nil {}
                try? handle.close()
                #expect((DiskSpace.available(at: mount.path) ?? 0) < 64 << 10)

                let upload = try await alice.uploadReply("more.bin", randomData(100_000))
                #expect(upload.status == 507 && upload.errorCode == "insufficient_storage", "\(upload.status) \(upload.text)")
                let phone = try await server.logIn(name, device: "phone")
                #expect(!FileManager.default.fileExists(atPath: mount.appending(path: "data/reserve").path), "given up to let the sign-in write")
                #expect(try await phone.content(kept.id) == Data("kept".utf8))
                #expect(try await phone.send(.DELETE, "/v1/files/\(kept.id)").status == 204)
                // Truncated before it is removed: a process another test spawns meanwhile can inherit the open
                // handle (Foundation's FileHandle is not close-on-exec), and would keep a removed file's space.
                #expect(truncate(filler.path, 0) == 0)
                try FileManager.default.removeItem(at: filler)
                let after = try await phone.uploadReply("after.bin", randomData(100_000))
                #expect(after.status == 201, "\(after.status) \(after.text)")
            }
        }
    }
}
