import Crypto
import Foundation
import NimbusAPI
@testable import NimbusSync
import NimbusTestSupport
import Testing

/// A library encrypted at rest, against the real server: what is on the device's disk, what is refused.
@Suite("Encrypted library")
struct EncryptedLibraryTests {
    /// Every file under `folder` (the database, its WAL, content, staged uploads, partial downloads, the key file).
    static func storeBytes(_ folder: URL) -> [(name: String, data: Data)] {
        guard let files = FileManager.default.enumerator(at: folder, includingPropertiesForKeys: nil) else { return [] }
        return files.compactMap { ($0 as? URL).flatMap { url in (try? Data(contentsOf: url)).map { (url.lastPathComponent, $0) } } }
    }

    /// Fails the test for every needle found in the store, naming it and the file.
    static func expectNothingReadable(_ folder: URL, names: [String], contents: [Data], _ when: String) {
        let files = storeBytes(folder)
        #expect(!files.isEmpty)
        for (file, data) in files {
            for name in names where data.range(of: Data(name.utf8)) != nil {
                Issue.record("\(when): the name '\(name)' is readable in \(file)")
            }
            for (index, content) in contents.enumerated() where data.range(of: content) != nil {
                Issue.record("\(when): content \(index) is readable in \(file)")
            }
        }
    }

    @Test("names and contents never reach the disk in the clear — staged, synced, cached, on a second device — and read back whole")
    func nothingInTheClear() async throws {
        try await SyncWorld.run { world in
            try await world.register("ana")
            let a = try world.device("A") { $0.encryption = .passphrase("a long passphrase for A") }.engine
            #expect(a.isEncrypted)
            try await a.signIn(server: world.server, username: "ana", password: "correct horse")
            let names = ["Confidential-Acquisitions", "secret-merger-plans.txt", "naïve-ファイル-résumé.md", "quarterly-forecast.bin"]
            let memo = Data("The merger closes on the first of March; tell nobody at all.".utf8)
            let notes = Data("Ünïcode notes: ファイル, résumé, naïve — and a password hint: hunter2-hunter2".utf8)
            let big = randomBytes(3_000_000, seed: 7)  // sent as blocks; cached as 46 sealed segments
            // Pieces of the big file: any 64 bytes of it would give it away.
            let pieces = stride(from: 0, to: big.count - 64, by: 187_531).map { big.subdata(in: $0..<$0 + 64) }
            let folder = try await a.createFolder(named: names[0])
            let memoId = try await a.upload(from: try world.file(names[1], memo), in: folder)
            let notesId = try await a.upload(from: try world.file(names[2], notes), in: folder, copy: false)  // copied all the same
            let bigId = try await a.upload(from: try world.file(names[3], big), in: folder)
            #expect(try await a.readContent(of: bigId) == big)
            // Queued, not sent: the staged copies and the database.
            Self.expectNothingReadable(world.root.appending(path: "device-A"), names: names, contents: [memo, notes] + pieces, "staged")
            #expect(try await a.readContent(of: memoId) == memo)
            #expect(try await a.contentURL(of: memoId) == nil, "an encrypted library hands out no path to a sealed file")

            try await a.syncOnce()
            try await a.update(memoId, from: try world.file("v2", memo + Data(" (Signed.)".utf8)))
            try await a.rename(notesId, to: "renamed-notes-ファイル.md")
            try await a.syncOnce()
            #expect(try await a.status().pending == 0)
            #expect(try await a.store.read { try $0.nameCache() } != nil, "the opened names kept, sealed, for the next run")
            let checker = try await world.api("ana")
            let serverTree = try await checker.tree()
            #expect(serverTree["/\(names[0])/\(names[3])"] == sha256(big))
            #expect(serverTree["/\(names[0])/renamed-notes-ファイル.md"] == sha256(notes))

            // A second device, another passphrase: it pulls, keeps everything offline, reads it back.
            let b = try world.device("B") { $0.encryption = .passphrase("B's own passphrase") }.engine
            try await b.signIn(server: world.server, username: "ana", password: "correct horse")
            try await b.syncOnce()
            #expect(try await b.tree() == serverTree)
            for path in serverTree.keys where serverTree[path] != "folder" {
                let item = try #require(try await b.item(atPath: path))
                try await b.download(item.id)
            }
            try await b.syncOnce()
            let bigOnB = try #require(try await b.item(atPath: "/\(names[0])/\(names[3])"))
            #expect(bigOnB.isAvailableOffline)
            #expect(try await b.readContent(of: bigOnB.id) == big)
            let reader = try #require(try await b.openContent(of: bigOnB.id))
            #expect(try reader.read(offset: 1_234_567, length: 100_000) == big.subdata(in: 1_234_567..<1_334_567))
            #expect(try reader.read(offset: 2_999_990, length: 10) == big.suffix(10))
            reader.close()
            let exported = world.root.appending(path: "exported.bin")
            #expect(try await b.exportContent(of: bigOnB.id, to: exported))
            #expect(try Data(contentsOf: exported) == big)
            #expect(try await b.listing(in: try #require(try await b.item(atPath: "/\(names[0])")).id).map(\.name)
                == [names[3], "renamed-notes-ファイル.md", names[1]].sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) })

            let all = names + ["renamed-notes-ファイル.md"]
            Self.expectNothingReadable(world.root.appending(path: "device-A"), names: all, contents: [memo, notes] + pieces, "after sync (A)")
            Self.expectNothingReadable(world.root.appending(path: "device-B"), names: all, contents: [memo, notes] + pieces, "after download (B)")

            // Handing a file over gives the plain bytes, outside the store.
            let taken = try #require(try await b.takeContent(of: bigOnB.id))
            #expect(!taken.path.hasPrefix(world.root.appending(path: "device-B").path))
            #expect(try Data(contentsOf: taken) == big)
            try? FileManager.default.removeItem(at: taken)
        }
    }

    @Test("a missing or wrong passphrase or key is a typed error, never an empty view; re-wrapping keeps the data; a flipped byte is reported; wiping the key")
    func refusals() async throws {
        try await SyncWorld.run { world in
            try await world.register("bo")
            let directory = world.root.appending(path: "device-E")
            var engine: SyncEngine? = try world.device("E", directory: directory) { $0.encryption = .passphrase("first passphrase") }.engine
            let id = try await engine!.upload(from: try world.file("ledger-2026.csv", Data("amount,1200\n".utf8)))
            engine = nil

            func open(_ encryption: StoreEncryption?) throws -> SyncEngine {
                try world.device("E", directory: directory) { $0.encryption = encryption }.engine
            }
            #expect(throws: EncryptionError.keyMissing("the library in \(directory.path) is encrypted; give its passphrase or key to open it.")) {
                try open(nil)
            }
            #expect(throws: EncryptionError.wrongPassphrase) { try open(.passphrase("not it")) }
            // A plain library is not taken for an encrypted one either.
            let plainDirectory = world.root.appending(path: "device-P")
            _ = try world.device("P", directory: plainDirectory).engine
            #expect(throws: EncryptionError.self) { try world.device("P", directory: plainDirectory) { $0.encryption = .passphrase("x") } }

            // A new passphrase: the same key re-wrapped, the data as it was.
            #expect(throws: EncryptionError.wrongPassphrase) { try SyncEngine.changePassphrase(in: directory, from: "nope", to: "second") }
            try SyncEngine.changePassphrase(in: directory, from: "first passphrase", to: "second passphrase")
            #expect(throws: EncryptionError.wrongPassphrase) { try open(.passphrase("first passphrase")) }
            let reopened = try open(.passphrase("second passphrase"))
            #expect(try await reopened.readContent(of: id) == Data("amount,1200\n".utf8))
            #expect(try await reopened.item(atPath: "/ledger-2026.csv")?.id == id)

            // A flipped byte in the sealed staged copy: reported, not returned.
            let staged = try #require(FileManager.default.contentsOfDirectory(atPath: directory.appending(path: "staged").path).first)
            let stagedURL = directory.appending(path: "staged").appending(path: staged)
            var bytes = try Data(contentsOf: stagedURL)
            bytes[bytes.count - 20] ^= 0x01
            try bytes.write(to: stagedURL)
            await #expect(throws: EncryptionError.self) { try await reopened.readContent(of: id) }
            try await reopened.signIn(server: world.server, username: "bo", password: "correct horse")
            try await reopened.syncOnce()
            #expect(try await world.api("bo").tree()["/ledger-2026.csv"] == nil, "a tampered staged file is never sent")
            #expect(try await reopened.item(id)?.state != .synced)

            // Wiping the key: refused while changes wait, then the key file is gone and the library cannot be opened.
            await #expect(throws: SyncError.self) { try await reopened.signOut(wipingKeys: true) }
            try await reopened.signOut(wipingKeys: true, discardingPending: true)
            #expect(!FileManager.default.fileExists(atPath: directory.appending(path: "store-key.json").path))
            #expect(throws: EncryptionError.self) { try open(.passphrase("second passphrase")) }
        }
    }

    @Test("a download whose last byte came before a crash is taken as it is, not refused (plain and encrypted)", arguments: [false, true])
    func completePartial(encrypted: Bool) async throws {
        try await SyncWorld.run { world in
            try await world.register("cy")
            let a = try world.device("A").engine
            try await a.signIn(server: world.server, username: "cy", password: "correct horse")
            let content = randomBytes(700_000, seed: 9)
            _ = try await a.upload(from: try world.file("whole.bin", content))
            try await a.syncOnce()
            let directory = world.root.appending(path: "device-C\(encrypted)")
            let c = try world.device("C", directory: directory) { if encrypted { $0.encryption = .passphrase("partial passphrase") } }.engine
            try await c.signIn(server: world.server, username: "cy", password: "correct horse")
            try await c.syncOnce()
            let item = try #require(try await c.item(atPath: "/whole.bin"))
            // The whole download is in the partial file (as the engine writes it), and then the process died.
            let key = sha256(Data("\(try #require(item.fileId))\n\(try #require(item.revisionId))".utf8)).prefix(32)
            let partial = directory.appending(path: "staged/download-\(key).partial")
            let writer = try DownloadTarget(url: partial, sealing: await c.sealing).open()
            try writer.write(contentsOf: content)
            try writer.close()
            try await c.download(item.id)
            #expect(try await c.readContent(of: item.id) == content)
        }
    }

    @Test("a key store holds the key; a different key in it is refused")
    func keyStores() async throws {
        try await SyncWorld.run { world in
            let keyFile = world.root.appending(path: "device.key")
            let directory = world.root.appending(path: "device-K")
            try FileManager.default.createDirectory(at: world.root, withIntermediateDirectories: true)
            var engine: SyncEngine? = try world.device("K", directory: directory) { $0.encryption = .keyStore(FileKeyStore(url: keyFile)) }.engine
            let id = try await engine!.upload(from: try world.file("k.txt", Data("kept".utf8)))
            engine = nil
            #expect(try FileManager.default.attributesOfItem(atPath: keyFile.path)[.posixPermissions] as? Int == 0o600)
            let again = try world.device("K", directory: directory) { $0.encryption = .keyStore(FileKeyStore(url: keyFile)) }.engine
            #expect(try await again.readContent(of: id) == Data("kept".utf8))
            let other = world.root.appending(path: "other.key")
            try FileKeyStore(url: other).storeKey(SymmetricKey(size: .bits256))
            #expect(throws: EncryptionError.wrongPassphrase) {
                try world.device("K2", directory: directory) { $0.encryption = .keyStore(FileKeyStore(url: other)) }
            }
        }
    }

    @Test("docs/encryption.md's Python recipes open a name from the database and a staged content file of an encrypted library")
    func pythonRecovers() async throws {
        try await SyncWorld.run { world in
            try FileManager.default.createDirectory(at: world.root, withIntermediateDirectories: true)
            let keyFile = world.root.appending(path: "py.key")
            let dataKey = SymmetricKey(size: .bits256)
            try FileKeyStore(url: keyFile).storeKey(dataKey)
            let directory = world.root.appending(path: "device-Y")
            let engine = try world.device("Y", directory: directory) { $0.encryption = .keyStore(FileKeyStore(url: keyFile)) }.engine
            let content = randomBytes(150_000, seed: 5)
            _ = try await engine.upload(from: try world.file("Ünïcode plan 🌧.txt", content))
            let staged = try #require(try FileManager.default.contentsOfDirectory(atPath: directory.appending(path: "staged").path).first)
            let doc = try String(
                contentsOf: URL(fileURLWithPath: #filePath).deletingLastPathComponent().appending(path: "../../docs/encryption.md"), encoding: .utf8)
            let blocks = doc.components(separatedBy: "```python\n").dropFirst().compactMap { $0.components(separatedBy: "```").first }
            let segments = try #require(blocks.first { $0.contains("def decrypt(data") })
            let store = try #require(blocks.first { $0.contains("def open_store_name") })
            let script = segments + store + """
                import sys, sqlite3, hashlib
                key = base64.b64decode(sys.argv[1])
                db = sqlite3.connect(sys.argv[2])
                stored = db.execute("SELECT l_name FROM items WHERE luid != 'root'").fetchone()[0]
                plain = decrypt(open(sys.argv[3], "rb").read(), store_key(key, "nimbus-store-content-v1"), "nimbus-store")
                print(open_store_name(stored, key))
                print(hashlib.sha256(plain).hexdigest())
                """
            let (status, data, _) = try Spawned.run(
                "/usr/bin/env",
                [
                    "python3", "-c", script, dataKey.withUnsafeBytes { Data($0).base64EncodedString() },
                    directory.appending(path: "sync.sqlite").path, directory.appending(path: "staged").appending(path: staged).path,
                ])
            #expect(status == 0, "python3 with the cryptography package is needed (pip install cryptography; moto brings it)")
            #expect(String(decoding: data, as: UTF8.self).split(separator: "\n").map(String.init) == ["Ünïcode plan 🌧.txt", sha256(content)])
        }
    }
}

@Suite("Sealed files written as they come")
struct ContentWriterTests {
    func folder() throws -> URL {
        let url = FileManager.default.temporaryDirectory.appending(path: "nimbus-writer-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    @Test("a sealed partial download resumes after a close and after a torn tail, and reads back exactly what was written")
    func resumes() throws {
        let root = try folder()
        defer { try? FileManager.default.removeItem(at: root) }
        let sealing = ContentSealing(SegmentedEncryption(key: SymmetricKey(size: .bits256)))
        let data = randomBytes(300_000, seed: 3)
        let target = DownloadTarget(url: root.appending(path: "partial"), sealing: sealing)
        // In three sittings, each closed (as a provider does on an error), none at a segment's edge.
        var writer = try target.open()
        try writer.write(contentsOf: data.prefix(100_000))
        try writer.close()
        #expect(target.existingSize == 100_000)
        writer = try target.open()
        #expect(try writer.seekToEnd() == 100_000)
        try writer.write(contentsOf: data.subdata(in: 100_000..<131_072))
        try writer.synchronize()
        try writer.write(contentsOf: data.subdata(in: 131_072..<200_000))  // written to after a synchronize
        try writer.close()
        writer = try target.open()
        try writer.write(contentsOf: data.suffix(from: 200_000))
        try writer.close()
        #expect(try target.hash() == (sha256(data), Int64(data.count)))
        let stored = try Data(contentsOf: target.url)
        #expect(stored.range(of: data.subdata(in: 1000..<1064)) == nil)

        // Torn by a crash mid-segment: cut back to whole segments that authenticate; the download goes on from there.
        let handle = try FileHandle(forUpdating: target.url)
        try handle.truncate(atOffset: UInt64(32 + 3 * (65_536 + 28) + 500))
        try handle.close()
        writer = try target.open()
        let kept = try writer.seekToEnd()
        #expect(kept == 3 * 65_536)
        try writer.write(contentsOf: data.suffix(from: Int(kept)))
        try writer.close()
        #expect(try target.hash() == (sha256(data), Int64(data.count)))

        // Starting over, and an empty file.
        writer = try target.open()
        try writer.truncate(atOffset: 0)
        try writer.close()
        #expect(try target.hash() == (sha256(Data()), 0))
        // The same bytes, read at any offset.
        let reader = try ContentReader(url: root.appending(path: "partial"), sealing: sealing)
        #expect(try reader.read(upToCount: 10)?.isEmpty ?? true)
        reader.close()
    }
}
