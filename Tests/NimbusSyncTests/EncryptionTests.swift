import Crypto
import Foundation
import NimbusAPI
@_spi(Testing) @testable import NimbusSync
import NimbusTestSupport
import Testing

/// Encryption at rest: segmented AES-256-GCM content and passphrase-wrapped data keys.
@Suite("Encryption at rest")
struct EncryptionTests {
    let directory: URL

    init() throws {
        directory = FileManager.default.temporaryDirectory.appending(path: "nimbus-crypto-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    func plainFile(_ data: Data) throws -> URL {
        let url = directory.appending(path: "plain-\(UUID().uuidString)")
        try data.write(to: url)
        return url
    }

    @Test("content round-trips at every size around segment edges, reads at any offset, and never shows its plaintext")
    func roundTrip() throws {
        let cipher = SegmentedEncryption(key: WrappedKey.newDataKey())
        let segment = SegmentedEncryption.segmentSize
        for size in [0, 1, segment - 1, segment, segment + 1, 3 * segment, 3 * segment + 17] {
            let plain = randomBytes(size)
            let encrypted = directory.appending(path: "enc-\(size)")
            try cipher.encryptFile(at: try plainFile(plain), to: encrypted, context: "item-\(size)")
            let stored = try Data(contentsOf: encrypted)
            #expect(Int64(stored.count) == SegmentedEncryption.encryptedSize(ofPlain: Int64(size)), "size \(size)")
            #expect(try cipher.plainSize(of: encrypted) == Int64(size))
            if size >= 64 { #expect(stored.range(of: plain.prefix(64)) == nil, "no plaintext in the file") }
            let back = directory.appending(path: "dec-\(size)")
            try cipher.decryptFile(at: encrypted, to: back, context: "item-\(size)")
            #expect(try Data(contentsOf: back) == plain, "size \(size)")
            if size > 10 {
                for (offset, length) in [(0, 10), (size / 2, segment), (size - 5, 100), (max(0, segment - 3), 6)] where offset < size {
                    let part = try cipher.read(encrypted, context: "item-\(size)", offset: Int64(offset), length: length)
                    #expect(part == plain.subdata(in: offset..<min(size, offset + length)), "size \(size) at \(offset)")
                }
            }
        }
        // Written as it comes, in pieces of every size (a download): the same file format.
        for pieces in [[1000, 64_536, 1, 70_000, 131_072, 5], [65_536, 65_536], [65_535, 1, 65_536, 0, 3]] {
            let plain = randomBytes(pieces.reduce(0, +))
            let url = directory.appending(path: "pieces-\(UUID().uuidString)")
            let writer = try SegmentedEncryption.Writer(creating: url, key: cipher.key, context: "streamed")
            var offset = 0
            for piece in pieces {
                try writer.append(plain.subdata(in: offset..<offset + piece))
                offset += piece
            }
            try writer.finish()
            #expect(try cipher.read(url, context: "streamed", offset: 0, length: plain.count) == plain, "\(pieces)")
            #expect(Int64(try Data(contentsOf: url).count) == SegmentedEncryption.encryptedSize(ofPlain: Int64(plain.count)))
        }
        // The same content twice encrypts differently (random file id and nonces).
        let plain = randomBytes(1000)
        let one = directory.appending(path: "one"), two = directory.appending(path: "two")
        try cipher.encryptFile(at: try plainFile(plain), to: one, context: "x")
        try cipher.encryptFile(at: try plainFile(plain), to: two, context: "x")
        #expect(try Data(contentsOf: one) != Data(contentsOf: two))
    }

    @Test("a flipped byte, swapped or reordered segments, a file cut short, another item's context or another key: reported, never returned")
    func tampering() throws {
        let key = WrappedKey.newDataKey()
        let cipher = SegmentedEncryption(key: key)
        let segment = SegmentedEncryption.segmentSize
        let plain = randomBytes(3 * segment + 100)
        let encrypted = directory.appending(path: "enc")
        try cipher.encryptFile(at: try plainFile(plain), to: encrypted, context: "item-1")
        let stored = try Data(contentsOf: encrypted)
        let header = SegmentedEncryption.headerSize, full = segment + SegmentedEncryption.overhead

        func expectTampered(_ bytes: Data, context: String = "item-1", with cipher: SegmentedEncryption? = nil, _ what: String) throws {
            let url = directory.appending(path: "bad-\(UUID().uuidString)")
            try bytes.write(to: url)
            let out = directory.appending(path: "out-\(UUID().uuidString)")
            #expect(throws: EncryptionError.self, "\(what)") { try (cipher ?? SegmentedEncryption(key: key)).decryptFile(at: url, to: out, context: context) }
            #expect(!FileManager.default.fileExists(atPath: out.path), "nothing half-decrypted is left: \(what)")
        }
        var flipped = stored
        flipped[header + full + 500] ^= 0x01
        try expectTampered(flipped, "a flipped byte in segment 1")
        #expect(throws: EncryptionError.tampered("segment 1")) {
            let url = directory.appending(path: "flipped")
            try flipped.write(to: url)
            _ = try cipher.read(url, context: "item-1", offset: Int64(segment) + 10, length: 10)
        }
        // Reading elsewhere still works: segments are independent.
        let url = directory.appending(path: "flipped-ok")
        try flipped.write(to: url)
        #expect(try cipher.read(url, context: "item-1", offset: 0, length: 100) == plain.prefix(100))

        var swapped = stored
        let first = stored.subdata(in: header..<header + full), second = stored.subdata(in: header + full..<header + 2 * full)
        swapped.replaceSubrange(header..<header + full, with: second)
        swapped.replaceSubrange(header + full..<header + 2 * full, with: first)
        try expectTampered(swapped, "segments 0 and 1 swapped")
        try expectTampered(stored.prefix(header + 3 * full), "cut at a segment boundary (the last segment dropped)")
        try expectTampered(stored.prefix(stored.count - 7), "cut inside the last segment")
        try expectTampered(stored, context: "item-2", "another item's context")
        try expectTampered(stored, with: SegmentedEncryption(key: WrappedKey.newDataKey()), "another key")
        // A segment from another file of the same item (its previous version) does not fit either.
        let other = directory.appending(path: "other")
        try cipher.encryptFile(at: try plainFile(plain), to: other, context: "item-1")
        var mixed = stored
        mixed.replaceSubrange(header..<header + full, with: try Data(contentsOf: other).subdata(in: header..<header + full))
        try expectTampered(mixed, "segment 0 from another version")
        #expect(throws: EncryptionError.self) {
            let plainURL = try plainFile(plain)
            _ = try cipher.plainSize(of: plainURL)
        }
    }

    @Test("a wrapped key opens with its passphrase only; re-wrapping keeps the data key; key stores keep it 0600")
    func wrappedKeys() throws {
        let dataKey = WrappedKey.newDataKey()
        let wrapped = try WrappedKey.wrap(dataKey, passphrase: "correct horse battery", iterations: WrappedKey.minimumIterations)
        #expect(wrapped.iterations == WrappedKey.minimumIterations)
        let opened = try wrapped.unwrap(passphrase: "correct horse battery")
        #expect(opened == dataKey)
        #expect(throws: EncryptionError.wrongPassphrase) { try wrapped.unwrap(passphrase: "correct horse batterY") }
        // JSON round trip, and a changed passphrase: the same data key, the old passphrase refused.
        let stored = try JSONDecoder().decode(WrappedKey.self, from: try JSONEncoder().encode(wrapped))
        let moved = try stored.rewrapped(from: "correct horse battery", to: "new phrase", iterations: WrappedKey.minimumIterations)
        #expect(try moved.unwrap(passphrase: "new phrase") == dataKey)
        #expect(throws: EncryptionError.wrongPassphrase) { try moved.unwrap(passphrase: "correct horse battery") }
        // A key file lowered to few rounds is refused, not tried.
        var weak = wrapped
        weak.iterations = 1000
        #expect(throws: EncryptionError.self) { try weak.unwrap(passphrase: "correct horse battery") }
        #expect(WrappedKey.defaultIterations >= 600_000)

        let file = FileKeyStore(url: directory.appending(path: "data.key"))
        #expect(try file.loadKey() == nil)
        try file.storeKey(dataKey)
        #expect(try file.loadKey() == dataKey)
        let mode = try FileManager.default.attributesOfItem(atPath: file.url.path)[.posixPermissions] as? Int
        #expect(mode == 0o600)
        try file.deleteKey()
        #expect(try file.loadKey() == nil)
        let environment = EnvironmentKeyStore(environment: ["NIMBUS_DATA_KEY": dataKey.withUnsafeBytes { Data($0).base64EncodedString() }])
        #expect(try environment.loadKey() == dataKey)
        #expect(throws: EncryptionError.self) { try EnvironmentKeyStore(environment: ["NIMBUS_DATA_KEY": "short"]).loadKey() }
    }

    @Test("the store's cache of opened names is kept as one sealed blob: another run of the same key opens names from it; another key, a flipped byte or a cut blob: ignored")
    func nameCacheBlob() throws {
        let dataKey = WrappedKey.newDataKey()
        let first = StoreCipher(dataKey: dataKey)
        let names = ["quarterly-forecast.bin", "naïve-ファイル-résumé.md", "line\nbreak", "a", String(repeating: "é", count: 100)]
        let ids = ["f_0123456789abcdef", "/Photos/2026/holiday.jpg"]
        let sealedNames = names.map { first.sealName($0) }
        let sealedIds = ids.map { first.sealId($0) }
        let blob = try #require(first.nameCacheBlob())
        #expect(first.nameCacheBlob() == nil, "nothing learnt since: nothing to save")
        let raw = try #require(Data(base64Encoded: blob))
        for text in names + ids where text.utf8.count >= 8 { #expect(raw.range(of: Data(text.utf8)) == nil, "'\(text)' readable in the blob") }

        let second = StoreCipher(dataKey: dataKey)
        second.loadNameCache(blob)
        #expect(second.cachedCount == names.count + ids.count)
        for (name, sealed) in zip(names, sealedNames) {
            #expect(try second.openName(sealed) == name)
            #expect(second.sealName(name) == sealed)
        }
        for (id, sealed) in zip(ids, sealedIds) { #expect(try second.openId(sealed) == id) }
        #expect(second.nameCacheBlob() == nil, "loaded, nothing new")
        _ = second.sealName("one more")
        #expect(second.nameCacheBlob() != nil)

        var flipped = raw
        flipped[flipped.count / 2] ^= 0x01
        for bad in [flipped.base64EncodedString(), raw.prefix(raw.count - 5).base64EncodedString(), "not base64 at all", ""] {
            let cipher = StoreCipher(dataKey: dataKey)
            cipher.loadNameCache(bad)
            #expect(cipher.cachedCount == 0)
            #expect(try cipher.openName(sealedNames[1]) == names[1], "opened from the row as without a cache")
        }
        let stranger = StoreCipher(dataKey: WrappedKey.newDataKey())
        stranger.loadNameCache(blob)
        #expect(stranger.cachedCount == 0)
        #expect(throws: EncryptionError.self) { try stranger.openName(sealedNames[0]) }
    }

    @Test("the table of opened names finds each sealed form by its bytes, exactly: none for a prefix, an extension or one byte changed")
    func sealedTable() {
        var random = SeededRandom(seed: 15)
        var table = SealedTable()
        var entries: [(String, String)] = [("", "empty")]
        for index in 0..<20_000 {
            let length = 1 + Int(random.next() % 90)
            let sealed = String((0..<length).map { _ in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=".randomElement(using: &random)! })
            entries.append((sealed, "plain \(index)"))
        }
        for (sealed, plain) in entries { table.insert(sealed, plain: plain) }
        let distinct = Dictionary(entries, uniquingKeysWith: { first, _ in first })
        #expect(table.count == distinct.count)
        table.insert(entries[5].0, plain: "another")
        #expect(table.count == distinct.count, "a sealed form already there is not added again")
        for (sealed, plain) in distinct {
            #expect(table.plain(sealed) == plain)
            var copy = sealed
            copy.withUTF8 { #expect(table.plain(UnsafeRawBufferPointer($0)) == plain) }
            if distinct[sealed + "x"] == nil { #expect(table.plain(sealed + "x") == nil) }
            if !sealed.isEmpty, distinct[String(sealed.dropLast())] == nil { #expect(table.plain(String(sealed.dropLast())) == nil) }
            if let first = sealed.first, case let changed = (first == "A" ? "B" : "A") + sealed.dropFirst(), distinct[changed] == nil {
                #expect(table.plain(changed) == nil)
            }
        }
        var seen: [String: String] = [:]
        table.forEach { sealed, plain in seen[String(decoding: sealed, as: UTF8.self)] = plain }
        #expect(seen == distinct)
    }
}

/// Sealed names for encrypted remotes: deterministic, per folder, length-hiding, authenticated.
@Suite("Sealed names")
struct NameCipherTests {
    let cipher = NameCipher(dataKey: SymmetricKey(size: .bits256))

    @Test("names round-trip (unicode, every length up to 127 bytes); the same name in the same folder seals the same, elsewhere differently")
    func roundTrip() throws {
        for name in ["a", "report.pdf", "Ünïcödé 🌧 résumé.docx", ".hidden", "name with  spaces ", String(repeating: "x", count: 127)] {
            let sealed = try cipher.seal(name, in: "folder-a")
            #expect(try cipher.open(sealed, in: "folder-a") == name)
            #expect(try cipher.seal(name, in: "folder-a") == sealed, "deterministic")
            #expect(try cipher.seal(name, in: "folder-b") != sealed, "another folder seals it differently")
            #expect(sealed.utf8.count <= 255)
            #expect(sealed.allSatisfy { "abcdefghijklmnopqrstuvwxyz234567".contains($0) }, "\(sealed)")
            #expect(!sealed.contains(name.lowercased()) || name.count < 3)
        }
        for length in 1...127 {
            let name = String(repeating: "é", count: length / 2) + String(repeating: "a", count: length % 2)
            #expect(try cipher.open(try cipher.seal(name), in: "") == name)
        }
        // Exact lengths are hidden: every name of 1 to 15 bytes seals to the same length.
        let lengths = try (1...15).map { try cipher.seal(String(repeating: "n", count: $0)).count }
        #expect(Set(lengths).count == 1)
        let other = try NameCipher(dataKey: SymmetricKey(size: .bits256)).seal("report.pdf")
        #expect(try other != cipher.seal("report.pdf"), "another key")
    }

    @Test("too long or empty names are refused; a changed, foreign-folder, non-canonical or foreign-key sealed name is tampered, never garbage")
    func refusals() throws {
        #expect(throws: EncryptionError.nameTooLong(128)) { try cipher.seal(String(repeating: "x", count: 128)) }
        #expect(throws: EncryptionError.nameTooLong(0)) { try cipher.seal("") }
        let sealed = try cipher.seal("secret plan.txt", in: "top")
        var flipped = Array(sealed)
        flipped[5] = flipped[5] == "a" ? "b" : "a"
        for bad in [String(flipped), String(sealed.dropLast(2)), sealed + "a", sealed.uppercased(), "not base32!", "aaaa"] {
            #expect(throws: EncryptionError.self) { try cipher.open(bad, in: "top") }
        }
        #expect(throws: EncryptionError.self) { try cipher.open(sealed, in: "elsewhere") }
        #expect(throws: EncryptionError.self) { try NameCipher(dataKey: SymmetricKey(size: .bits256)).open(sealed, in: "top") }
    }

    @Test("docs/encryption.md's Python recipe (the `cryptography` package) opens names Nimbus sealed")
    func pythonRecovers() throws {
        let dataKey = SymmetricKey(size: .bits256)
        let cipher = NameCipher(dataKey: dataKey)
        let names = ["report.pdf", "Ünïcödé 🌧.txt", String(repeating: "z", count: 127), "sixteen bytes!!!"]
        let sealed = try names.map { try cipher.seal($0, in: "c2VhbGVk") }
        let doc = try String(contentsOf: URL(fileURLWithPath: #filePath).deletingLastPathComponent().appending(path: "../../docs/encryption.md"), encoding: .utf8)
        let recipe = try #require(doc.components(separatedBy: "```python\n").last?.components(separatedBy: "```").first)
        let key = dataKey.withUnsafeBytes { Data($0).base64EncodedString() }
        let script = recipe + """
            import sys, json
            key = base64.b64decode(sys.argv[1])
            print(json.dumps([open_name(s, key, "c2VhbGVk") for s in sys.argv[2:]]))
            """
        let (status, data, _) = try Spawned.run("/usr/bin/env", ["python3", "-c", script, key] + sealed)
        #expect(status == 0, "python3 with the cryptography package is needed (pip install cryptography; moto brings it)")
        #expect(try JSONDecoder().decode([String].self, from: data) == names)
    }

    @Test("base32 is RFC 4648's (lowercase, unpadded)")
    func base32() {
        // RFC 4648 §10 test vectors.
        for (plain, encoded) in [("", ""), ("f", "my"), ("fo", "mzxq"), ("foo", "mzxw6"), ("foob", "mzxw6yq"), ("fooba", "mzxw6ytb"), ("foobar", "mzxw6ytboi")] {
            #expect(Base32.encode(Array(plain.utf8)) == encoded)
            #expect(Base32.decode(encoded) == Array(plain.utf8))
        }
    }
}

/// Chunk-encrypted content for crypt remotes: deterministic per chunk, so edits stay small when sealed.
@Suite("Chunk-encrypted content")
struct ChunkedEncryptionTests {
    let directory: URL
    /// Fixed, so the sealed bytes — and what re-chunking them finds new — are the same on every run.
    let key = SymmetricKey(data: SHA256.hash(data: Data("chunked encryption tests".utf8)))

    init() throws {
        directory = FileManager.default.temporaryDirectory.appending(path: "nimbus-chunked-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    func file(_ name: String, _ data: Data) throws -> URL {
        let url = directory.appending(path: name)
        try data.write(to: url)
        return url
    }

    func sealed(_ data: Data, context: String = "f1") throws -> URL {
        let plain = try file(UUID().uuidString, data)
        let out = directory.appending(path: UUID().uuidString + ".sealed")
        try ChunkedEncryption.seal(plain, to: out, key: key, context: context)
        return out
    }

    func opened(_ sealed: URL, key: SymmetricKey? = nil, context: String = "f1") throws -> Data {
        let out = directory.appending(path: UUID().uuidString)
        try ChunkedEncryption.open(sealed, to: out, key: key ?? self.key, context: context)
        return try Data(contentsOf: out)
    }

    @Test("round trips at many sizes; the sealed size is a bucket; no plaintext shows")
    func roundTrip() throws {
        for size in [0, 1, 4095, 4096, 100_000, 3 << 20] {
            let data = randomBytes(size, seed: UInt64(size))
            let out = try sealed(data)
            #expect(try opened(out) == data, "\(size)")
            let sealedSize = try Int64(Data(contentsOf: out).count)
            #expect(sealedSize == ChunkedEncryption.bucket(sealedSize), "padded to a bucket: \(sealedSize)")
            #expect(sealedSize <= max(4096, Int64(Double(size) * 1.07) + 4096))
        }
        let text = Data(String(repeating: "the quick brown fox jumps over the lazy dog, again and again. ", count: 20_000).utf8)
        let out = try sealed(text)
        #expect(try opened(out) == text)
        #expect(try Data(contentsOf: out).range(of: Data("the quick brown fox".utf8)) == nil)
        #expect(ChunkedEncryption.bucket(4097) == 4352 && ChunkedEncryption.bucket(1 << 20) == 1 << 20 && ChunkedEncryption.bucket((1 << 20) + 1) == (1 << 20) + 65536)
    }

    @Test("a 64 KiB insert into 8 MiB changes a few chunks of the sealed file: re-chunked as the server does, under 1 MiB is new")
    func smallEditsStaySmall() throws {
        let original = randomBytes(8 << 20, seed: 7)
        var edited = original
        edited.insert(contentsOf: randomBytes(64 << 10, seed: 8), at: 4 << 20)
        let before = try Data(contentsOf: try sealed(original))
        let after = try Data(contentsOf: try sealed(edited))
        func chunks(_ data: Data) -> [Data] {
            var chunks: [Data] = []
            var offset = 0
            for length in data.withUnsafeBytes({ FastCDC.lengths(of: $0) }) {
                chunks.append(data.subdata(in: offset..<offset + length))
                offset += length
            }
            return chunks
        }
        let known = Set(chunks(before))
        let new = chunks(after).filter { !known.contains($0) }.reduce(0) { $0 + $1.count }
        #expect(new < 1 << 20, "new sealed bytes after a 64 KiB insert: \(new)")
        #expect(new > 64 << 10, "the insert itself is new")
        // (With random keys this ranged from 547 to 861 KB: where the server's cut points fall in the sealed bytes.)
        print("a 64 KiB insert into 8 MiB, re-chunked as the server does: \(new) sealed bytes new")
    }

    @Test("cut where the sealed file's parts end, an edit changes few parts: a flipped byte one chunk, a page and the head; an insert its chunks and a few pages")
    func partsOfAnEdit() throws {
        let original = randomBytes(8 << 20, seed: 17)
        func parts(_ data: Data) throws -> (parts: [Data], size: Int64) {
            let plain = try file(UUID().uuidString, data)
            let out = directory.appending(path: UUID().uuidString + ".sealed")
            let digest = try ChunkedEncryption.sealReporting(plain, to: out, key: key, context: "f1")
            let sealed = try Data(contentsOf: out)
            #expect(digest.sealedSize == Int64(sealed.count) && digest.boundaries.last == digest.sealedSize)
            #expect(digest.checksum == sha256(data) && digest.plainSize == Int64(data.count))
            #expect(digest.sealedChecksum == sha256(sealed), "the sealed file's hash, taken as it was written")
            var result: [Data] = []
            var start = 0
            for end in digest.boundaries {
                #expect(Int(end) > start && Int(end) - start <= 4 << 20)
                result.append(sealed.subdata(in: start..<Int(end)))
                start = Int(end)
            }
            return (result, digest.sealedSize)
        }
        func newBytes(_ before: Data, _ after: Data) throws -> Int {
            let known = Set(try parts(before).parts)
            return try parts(after).parts.filter { !known.contains($0) }.reduce(0) { $0 + $1.count }
        }
        var flipped = original
        flipped[3_000_000] ^= 0xFF
        let flip = try newBytes(original, flipped)
        #expect(flip < 256 << 10 + 16 + 9_300 + 8_000, "one chunk, one page, the head: \(flip)")
        var inserted = original
        inserted.insert(contentsOf: randomBytes(64 << 10, seed: 18), at: 4 << 20)
        let insert = try newBytes(original, inserted)
        // The plaintext's own chunks around the insert (FastCDC takes two or three chunks to fall back in step: 450 KB
        // of these bytes' plaintext chunks are new), a page or two, the head, the padding's last part.
        #expect(insert > 64 << 10 && insert < 768 << 10, "the insert, its neighbours, a few pages, the head: \(insert)")
        print("parts of an edit (8 MiB): flip \(flip) bytes new, 64 KiB insert \(insert) bytes new")
    }

    @Test("docs/encryption.md's Python recipe opens content Nimbus sealed")
    func pythonRecovers() throws {
        let data = randomBytes(700_000, seed: 11)
        let out = try sealed(data, context: "file-42")
        let doc = try String(contentsOf: URL(fileURLWithPath: #filePath).deletingLastPathComponent().appending(path: "../../docs/encryption.md"), encoding: .utf8)
        let recipe = try #require(doc.components(separatedBy: "```python\n").first { $0.contains("def open_content") }?.components(separatedBy: "```").first)
        let script = recipe + """
            import sys, base64
            plain = open_content(open(sys.argv[2], "rb").read(), base64.b64decode(sys.argv[1]), "file-42")
            open(sys.argv[3], "wb").write(plain)
            """
        let result = directory.appending(path: "python-opened")
        let (status, _, _) = try Spawned.run(
            "/usr/bin/env", ["python3", "-c", script, key.withUnsafeBytes { Data($0).base64EncodedString() }, out.path, result.path])
        #expect(status == 0, "python3 with the cryptography package is needed")
        #expect(try Data(contentsOf: result) == data)
    }

    @Test("a flipped byte, swapped, dropped or repeated chunks, another context or key, a cut or a longer file: tampered, and nothing is left")
    func tampering() throws {
        let data = randomBytes(1 << 20, seed: 3)
        let good = try Data(contentsOf: try sealed(data))
        // The sealed chunks, back to back after the 8-byte magic: each its plaintext chunk's length + 16.
        var records: [Range<Int>] = []
        var offset = 8
        for length in data.withUnsafeBytes({ FastCDC.lengths(of: $0) }) {
            records.append(offset..<offset + length + 16)
            offset += length + 16
        }
        #expect(records.count > 4)
        func check(_ bad: Data, _ what: String, key: SymmetricKey? = nil, context: String = "f1") throws {
            let url = try file(UUID().uuidString, bad)
            let destination = directory.appending(path: "out-\(UUID().uuidString)")
            #expect(throws: EncryptionError.self, "\(what)") { try ChunkedEncryption.open(url, to: destination, key: key ?? self.key, context: context) }
            #expect(!FileManager.default.fileExists(atPath: destination.path), "\(what): nothing left")
            #expect(!FileManager.default.fileExists(atPath: destination.appendingPathExtension("partial").path), "\(what): no partial")
        }
        var flipped = good
        flipped[records[2].lowerBound + 10] ^= 1
        try check(flipped, "flipped byte")
        var swapped = good
        let (a, b) = (records[1], records[2])
        swapped.replaceSubrange(a.lowerBound..<b.upperBound, with: good[b] + good[a])
        try check(swapped, "swapped chunks")
        var dropped = good
        dropped.removeSubrange(records[3])
        try check(dropped, "dropped chunk")
        var repeated = good
        repeated.insert(contentsOf: good[records[1]], at: records[1].upperBound)
        try check(repeated, "repeated chunk")
        try check(good, "other context", context: "f2")
        try check(good, "other key", key: SymmetricKey(size: .bits256))
        try check(good.prefix(good.count - 1), "cut by one byte")
        try check(good + Data([0]), "one byte more")
        try check(good.prefix(records[3].lowerBound + 7), "cut inside a chunk")
        try check(Data("hello".utf8), "not sealed")
        #expect(try opened(try file("ok", good)) == data, "the original still opens")
    }
}
