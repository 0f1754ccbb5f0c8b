import Crypto
import Foundation
import GRDB
import NIOCore
import NIOFoundationCompat
import NimbusAPI
@_spi(Testing) @testable import NimbusSync
import Testing

@Suite("Hashing and ids")
struct SupportTests {
    @Test("a file's SHA-256 and size, for empty, small and multi-piece files (big ones read on a thread of their own, at sizes around its pieces); a missing file is a read error")
    func hashing() throws {
        let folder = FileManager.default.temporaryDirectory.appending(path: "nimbus-hash-\(UUID.random().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let big = FileHasher.overlapMinimum
        // A pattern of a prime length, repeated: no two 4 MiB pieces are alike (pieces hashed out of order would show).
        let pattern = Data((0..<1_000_003).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) })
        for size in [0, 1, 4096, (1 << 20) + 7, 3 << 20, big - 1, big, big + 1, big + (4 << 20), big + (4 << 20) * 3 + 12_345] {
            var bytes = Data(capacity: size)
            while bytes.count < size { bytes.append(pattern.prefix(size - bytes.count)) }
            let url = folder.appending(path: "f\(size)")
            try bytes.write(to: url)
            let (checksum, measured) = try FileHasher.sha256(of: url)
            #expect(measured == Int64(size))
            #expect(checksum == SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined())
            #expect(FileHasher.regularFileSize(url.path) == Int64(size))
        }
        #expect(FileHasher.regularFileSize(folder.path) == nil)
        #expect(FileHasher.regularFileSize(folder.appending(path: "missing").path) == nil)
        #expect(throws: CocoaError.self) { try FileHasher.sha256(of: folder.appending(path: "missing")) }
    }

    @Test("a download's check takes the hash made while it was written, only while the file is what was closed; a resumed or rewritten one is read back")
    func writtenHashes() throws {
        let folder = FileManager.default.temporaryDirectory.appending(path: "written-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let first = Data((0..<3_000_000).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        func download(_ name: String, _ pieces: [Data], truncateAfterFirst: Bool = false) throws -> DownloadTarget {
            let target = DownloadTarget(url: folder.appending(path: name))
            let writer = try target.open()
            try writer.seekToEnd()
            for (index, piece) in pieces.enumerated() {
                try writer.write(contentsOf: piece)
                if truncateAfterFirst && index == 0 { try writer.truncate(atOffset: 0) }
            }
            try writer.close()
            return target
        }
        // Written in one go: the kept hash, taken once.
        let whole = try download("a.bin", [first.prefix(1_000_000), first.dropFirst(1_000_000)])
        #expect(WrittenHashes.take(whole.url.path)?.checksum == sha256(first))
        #expect(WrittenHashes.take(whole.url.path) == nil, "taken once")
        // Started over (truncated to 0): the hash restarts with it.
        let restarted = try download("b.bin", [Data("thrown away".utf8), first], truncateAfterFirst: true)
        #expect(try restarted.hash().checksum == sha256(first))
        // Changed after it was closed (same size, other bytes): read back, never the kept hash.
        let changed = try download("c.bin", [first])
        var other = first
        other[0] ^= 0xFF
        try other.write(to: changed.url)
        #expect(try changed.hash().checksum == sha256(other))
        // Resumed after bytes already there: nothing kept, the whole file is read.
        try first.prefix(10).write(to: folder.appending(path: "d.bin"))
        let resumed = try download("d.bin", [first.dropFirst(10)])
        #expect(WrittenHashes.take(resumed.url.path) == nil)
        #expect(try resumed.hash().checksum == sha256(first))
    }

    @Test("an upload's body reads a piece only when the HTTP client asks for it, and hashes all it sent")
    func uploadBodyPulls() async throws {
        let folder = FileManager.default.temporaryDirectory.appending(path: "nimbus-body-\(UUID.random().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let bytes = Data((0..<(5 << 20) + 3).map { UInt8(truncatingIfNeeded: $0 &* 131 &+ 1) })
        let url = folder.appending(path: "big")
        try bytes.write(to: url)
        let checksum = FileHasher.hex(SHA256.hash(data: bytes))
        let body = HashingFileBody(UploadSource(url: url, size: Int64(bytes.count), checksum: checksum)) { _ in }
        var pieces = try body.stream().makeAsyncIterator()
        let first = try await pieces.next()
        #expect(first?.readableBytes == HashingFileBody.pieceSize)
        // Nothing read ahead: a 10 GiB file is not pulled into memory faster than the server takes it.
        try await Task.sleep(for: .milliseconds(50))
        #expect(body.digest.size == Int64(HashingFileBody.pieceSize))
        var sent = first.map { Data(buffer: $0) } ?? Data()
        while let piece = try await pieces.next() { sent.append(Data(buffer: piece)) }
        #expect(sent == bytes)
        #expect(try await pieces.next() == nil)
        let fresh = HashingFileBody(UploadSource(url: url, size: Int64(bytes.count), checksum: checksum)) { _ in }
        for try await _ in try fresh.stream() {}
        #expect(fresh.digest.size == Int64(bytes.count) && fresh.digest.checksum == checksum)
    }

    @Test("a plain copy a killed download left in the store goes at the next start; one being written now, and staged uploads, stay")
    func leftoverPlaintext() throws {
        let staging = FileManager.default.temporaryDirectory.appending(path: "nimbus-staging-\(UUID.random().uuidString)")
        try FileManager.default.createDirectory(at: staging, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: staging) }
        let old = staging.appending(path: SyncEngine.plainPrefix + "killed")
        let fresh = staging.appending(path: SyncEngine.plainPrefix + "under-way")
        let staged = staging.appending(path: UUID.random().uuidString.lowercased())
        for url in [old, fresh, staged] { try Data("secret memo".utf8).write(to: url) }
        for url in [old, staged] {
            try FileManager.default.setAttributes([.modificationDate: Date().addingTimeInterval(-3600)], ofItemAtPath: url.path)
        }
        SyncEngine.removeLeftoverPlaintext(in: staging)
        #expect(!FileManager.default.fileExists(atPath: old.path))
        #expect(FileManager.default.fileExists(atPath: fresh.path), "another process may be writing it")
        #expect(FileManager.default.fileExists(atPath: staged.path), "a staged upload is the queue's")
    }

    @Test("a copy a killed put left in the store (no item names it) goes after a day; a named one, a fresh one and a partial download of this week stay")
    func orphanedCopies() throws {
        let folder = FileManager.default.temporaryDirectory.appending(path: "nimbus-orphans-\(UUID.random().uuidString)")
        let staging = folder.appending(path: "staged")
        try FileManager.default.createDirectory(at: staging, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let store = try SyncStore(path: folder.appending(path: "sync.sqlite").path, label: "orphans-test")
        let orphan = staging.appending(path: UUID.random().uuidString.lowercased())
        let named = staging.appending(path: UUID.random().uuidString.lowercased())
        let fresh = staging.appending(path: UUID.random().uuidString.lowercased())
        let partial = staging.appending(path: "download-0123abcd.partial")
        let stalePartial = staging.appending(path: "download-4567cdef.partial")
        for url in [orphan, named, fresh, partial, stalePartial] { try Data("bytes".utf8).write(to: url) }
        for (url, age) in [(orphan, 2.0), (named, 30), (partial, 3), (stalePartial, 8)] {
            try FileManager.default.setAttributes([.modificationDate: Date().addingTimeInterval(-age * 86_400)], ofItemAtPath: url.path)
        }
        try store.write { tx in
            var row = ItemRow.empty("item-1", isFolder: false)
            // Named from a home that has moved since: the name is what counts.
            row.contentPath = "/somewhere/else/staged/" + named.lastPathComponent
            try tx.insert(row)
        }
        SyncEngine.removeOrphans(in: staging, store)
        #expect(!FileManager.default.fileExists(atPath: orphan.path))
        #expect(!FileManager.default.fileExists(atPath: stalePartial.path))
        #expect(FileManager.default.fileExists(atPath: named.path), "an item's content")
        #expect(FileManager.default.fileExists(atPath: fresh.path), "a copy under way")
        #expect(FileManager.default.fileExists(atPath: partial.path), "a download to resume")
    }

    @Test("a watch looks at a remote without a change feed every 15 s where one request tells, every 30 s where the tree is walked")
    func pollIntervals() {
        #expect(FolderSync.pollInterval(for: ProviderFeatures(changeFeed: true, trash: true)) == .seconds(60), "the feed announces changes")
        #expect(FolderSync.pollInterval(for: ProviderFeatures(treeVersions: true)) == .seconds(15))
        #expect(FolderSync.pollInterval(for: ProviderFeatures(idempotentCreate: true, checksums: true)) == .seconds(30))
    }

    @Test("random UUIDs are version 4, RFC 4122 variant, and differ")
    func uuids() {
        let ids = (0..<1000).map { _ in UUID.random() }
        #expect(Set(ids).count == ids.count)
        for id in ids {
            #expect(id.uuid.6 >> 4 == 4)
            #expect(id.uuid.8 >> 6 == 2)
        }
    }

    @Test("a row update writes only what changed, and nothing when nothing did")
    func rowUpdate() throws {
        let folder = FileManager.default.temporaryDirectory.appending(path: "nimbus-rows-\(UUID.random().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let database = try LocalDatabase(path: folder.appending(path: "sync.sqlite").path)
        try database.pool.write { db in
            var original = ItemRow.empty("item1", isFolder: false)
            original.lPresent = true
            original.lParent = "root"
            original.lName = "a.txt"
            try original.save(db)
            let before = db.totalChangesCount
            try original.update(db, from: original)
            #expect(db.totalChangesCount == before)

            var changed = original
            changed.fileId = "F1"
            changed.rPresent = true
            changed.rName = "a.txt"
            changed.lName = "b.txt"
            changed.pinned = true
            try changed.update(db, from: original)
            #expect(db.totalChangesCount == before + 1)
            #expect(try ItemRow.fetch(db, luid: "item1") == changed)
            #expect(try ItemRow.luid(db, fileId: "F1") == "item1")
        }
    }

    @Test("'pending' is one rule: the Swift definition and its SQL form agree on random rows (names in NFC and NFD, content changing or unread), in a plain store and an encrypted one")
    func pendingDefinedOnce() throws {
        var random = SeededRandom(seed: 42)
        func pick<T>(_ values: [T]) -> T { values[Int(random.next() % UInt64(values.count))] }
        for encrypted in [false, true] {
            let folder = FileManager.default.temporaryDirectory.appending(path: "nimbus-pending-\(UUID.random().uuidString)")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: folder) }
            let label = "pending-test-\(UUID.random().uuidString)"
            if encrypted { StoreCipher.register(StoreCipher(dataKey: SymmetricKey(size: .bits256)), label: label) }
            defer { StoreCipher.register(nil, label: label) }
            let store = try SyncStore(path: folder.appending(path: "sync.sqlite").path, label: label)
            var rows: [ItemRow] = []
            let names: [String?] = [nil, "a.txt", "b.txt", "na\u{00EF}ve.txt", "nai\u{0308}ve.txt"]
            for index in 0..<2_000 {
                var row = ItemRow.empty("item\(index)", isFolder: pick([false, false, true]))
                row.lPresent = pick([false, true])
                row.sPresent = pick([false, true])
                row.lParent = pick([nil, "root", "f1"])
                row.sParent = pick([nil, "root", "f1"])
                row.lName = pick(names)
                row.sName = pick(names)
                row.lChecksum = pick([nil, "c1", "c2"])
                row.sChecksum = pick([nil, "c1", "c2"])
                row.lChanging = pick([false, false, true])
                row.lUnhashed = pick([false, true])
                rows.append(row)
            }
            let fromSQL = try store.write { tx in
                for row in rows { try tx.insert(row) }
                return try tx.pendingItems()
            }
            let fromSwift = Set(rows.filter(\.isPending).map(\.luid))
            let differing = fromSQL.symmetricDifference(fromSwift)
            #expect(differing.isEmpty, "encrypted \(encrypted): \(differing.count) rows differ, e.g. \(differing.sorted().prefix(3))")
            #expect(fromSwift.count > 200 && fromSwift.count < 1_900, "both kinds of row were tried: \(fromSwift.count) pending")
        }
    }
}

@Suite("Chunks cut while hashing")
struct HashAndCutTests {
    @Test("a scan's pass gives the file's SHA-256 and the same chunks as reading it for an upload, at sizes around the window's edges; the upload takes them once")
    func sameAsTheReader() throws {
        let folder = FileManager.default.temporaryDirectory.appending(path: "nimbus-cut-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        var generator = SeededRandom(seed: 11)
        let window = 8 << 20
        for size in [0, 1, 5_000, 1 << 20, window - 1, window, window + 1, 2 * window + 123_457, 21 << 20] {
            let words = (0..<(size + 7) / 8).map { _ in generator.next() }
            let bytes = words.withUnsafeBytes { Data($0.prefix(size)) }
            let url = folder.appending(path: "f\(size)")
            try bytes.write(to: url)
            let (checksum, hashedSize) = try LocalChunking.hashAndCut(url)
            #expect(checksum == FileHasher.hex(SHA256.hash(data: bytes)))
            #expect(hashedSize == Int64(size))
            let read = try LocalChunking.chunks(of: url)
            let cut = LocalChunking.takePrecut(checksum: checksum, size: Int64(size))
            #expect(cut == read.chunks, "size \(size)")
            #expect(LocalChunking.takePrecut(checksum: checksum, size: Int64(size)) == nil, "taken once")
            // Both against FastCDC over the whole content at once, and each chunk's hash against its bytes.
            let lengths = bytes.withUnsafeBytes { FastCDC.lengths(of: $0) }
            #expect(read.chunks.map(\.length) == lengths, "size \(size)")
            var offset = 0
            for chunk in read.chunks {
                #expect(chunk.offset == Int64(offset))
                #expect(chunk.hash == FileHasher.hex(SHA256.hash(data: bytes.subdata(in: offset..<offset + chunk.length))))
                offset += chunk.length
            }
            #expect(offset == size)
        }
    }
}
