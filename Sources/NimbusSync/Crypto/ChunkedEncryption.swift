import Crypto
import Foundation
import NimbusAPI
import _CryptoExtras

/// Content for an untrusted remote that still syncs by blocks (crypt remotes): the plaintext is cut into
/// content-defined chunks (FastCDC, ~64 KiB) and each chunk sealed on its own, deterministically (AES-256-GCM-SIV
/// under a fixed nonce: the same chunk always seals to the same bytes), the sealed chunks written back to back with no
/// framing. A small edit changes a few chunks, so the sealed file changes in a few places only, and a block-level
/// upload of it (the Nimbus provider re-chunks what it sends) sends little. The chunks' lengths and hashes, the
/// plaintext size and the padding are in a sealed index (AES-256-GCM, random nonce, bound to the caller's context),
/// found through a sealed footer at the very end: chunks swapped, dropped, repeated or taken from another file fail it.
/// Padding (keystream of a per-file key: random-looking, the same for every version of the file) brings the file to a
/// size bucket (at most 1/16 more), so exact sizes do not show. What leaks: which chunks are equal (within the key's
/// data), and — to whoever diffs two versions — where they differ. Format: docs/encryption.md.
///
/// Streams both ways in bounded memory (an 8 MiB window; 32 bytes per chunk for the index).
public enum ChunkedEncryption {
    static let magic = Array("NIMBUSC2".utf8)
    /// An index page ends after an entry whose sealed chunk's hash starts with a 16-bit number ≡ 63 (mod 64) — about
    /// 64 entries a page, cut by content, so an insert changes the pages around it only — or after 256 entries.
    static let pageMask: UInt16 = 63
    static let pageMaximum = 256
    static let footerSize = 12 + 12 + 16

    struct Keys: Sendable {
        let chunk: SymmetricKey
        let index: SymmetricKey
        let padding: SymmetricKey
        init(_ dataKey: SymmetricKey, context: String) {
            chunk = HKDF<SHA256>.deriveKey(inputKeyMaterial: dataKey, info: Array("nimbus-chunks-v1".utf8), outputByteCount: 32)
            index = HKDF<SHA256>.deriveKey(inputKeyMaterial: dataKey, info: Array("nimbus-chunk-index-v1".utf8), outputByteCount: 32)
            padding = HKDF<SHA256>.deriveKey(
                inputKeyMaterial: dataKey, info: Array("nimbus-padding-v1".utf8) + [0] + Array(context.utf8), outputByteCount: 32)
        }
    }

    /// The size a sealed file of `size` bytes is padded to: 4 KiB at least, then a multiple of 1/16 of the largest
    /// power of two not above it.
    public static func bucket(_ size: Int64) -> Int64 {
        guard size > 4096 else { return 4096 }
        let step = Int64(1) << max(0, 63 - size.leadingZeroBitCount - 4)
        return (size + step - 1) / step * step
    }

    static let zeroNonce: [UInt8] = [UInt8](repeating: 0, count: 12)

    /// What sealing or opening a file found: the sealed size, and the plaintext's size and SHA-256 (lowercase hex).
    public struct Digest: Sendable, Equatable {
        /// The sealed file's size.
        public var sealedSize: Int64
        /// The plaintext's size.
        public var plainSize: Int64
        /// The plaintext's SHA-256, lowercase hex.
        public var checksum: String
        /// Where the sealed file's parts end (sealing only): each sealed chunk (the first with the magic), each index
        /// page, the index head, each 64 KiB of padding, the footer. A provider that stores blocks cut there stores an
        /// edit as the few parts it changed.
        public var boundaries: [Int64] = []
        /// SHA-256 of the sealed file (sealing only), hashed as it was written: no second read to send it.
        public var sealedChecksum: String?
    }

    /// Seals `source` into `destination` (replaced); returns the sealed size.
    @discardableResult
    public static func seal(_ source: URL, to destination: URL, key: SymmetricKey, context: String) throws -> Int64 {
        try sealReporting(source, to: destination, key: key, context: context).sealedSize
    }

    /// ``seal(_:to:key:context:)``, hashing the plaintext on the way (one read of it).
    public static func sealReporting(
        _ source: URL, to destination: URL, key: SymmetricKey, context: String, sealing: ContentSealing? = nil
    ) throws -> Digest {
        let keys = Keys(key, context: context)
        var hasher = SHA256()
        let input = try ContentReader(url: source, sealing: sealing)
        defer { input.close() }
        guard FileManager.default.createFile(atPath: destination.path, contents: nil) else {
            throw SyncError.localFile("Cannot write \(destination.path).")
        }
        let output = try FileHandle(forWritingTo: destination)
        defer { try? output.close() }
        var written = Int64(magic.count)
        var sealedHasher = SHA256()
        /// Everything written goes through here (hashed on the way).
        func put(_ data: Data) throws {
            sealedHasher.update(data: data)
            try output.write(contentsOf: data)
        }
        try put(Data(magic))
        var entries = Data()  // per record: its length (UInt32 BE) ‖ its SHA-256
        var boundaries: [Int64] = []
        var count: UInt32 = 0
        var plainSize: Int64 = 0
        var scanner = FastCDC.Scanner()
        var carry = Data()
        var cuts: [Int] = []
        let nonce = try AES.GCM._SIV.Nonce(data: zeroNonce)
        func emit(_ chunk: Data) throws {
            hasher.update(data: chunk)
            let box = try AES.GCM._SIV.seal(chunk, using: keys.chunk, nonce: nonce)
            let record = box.ciphertext + box.tag
            appendInteger(UInt32(record.count), to: &entries)
            entries.append(contentsOf: SHA256.hash(data: record))
            count += 1
            try put(record)
            written += Int64(record.count)
            boundaries.append(written)
            plainSize += Int64(chunk.count)
        }
        while let data = try input.read(upToCount: 8 << 20), !data.isEmpty {
            cuts.removeAll(keepingCapacity: true)
            data.withUnsafeBytes { scanner.scan($0, cuts: &cuts) }
            var window = carry
            window.append(data)
            var from = 0
            for cut in cuts {
                try emit(window.subdata(in: from..<carry.count + cut))
                from = carry.count + cut
            }
            carry = window.subdata(in: from..<window.count)
        }
        if !carry.isEmpty { try emit(carry) }
        // The index: pages of entries (cut by content), then a head (sizes, and each page's length and hash), then
        // padding, then the footer that says where the head is.
        var pages: [Data] = []
        var page = Data()
        var inPage = 0
        for at in stride(from: 0, to: entries.count, by: 36) {
            page.append(entries[entries.startIndex + at..<entries.startIndex + at + 36])
            inPage += 1
            let mark = UInt16(entries[entries.startIndex + at + 4]) << 8 | UInt16(entries[entries.startIndex + at + 5])
            if mark % (pageMask + 1) == pageMask || inPage == pageMaximum {
                pages.append(page)
                page = Data()
                inPage = 0
            }
        }
        if !page.isEmpty { pages.append(page) }
        var head = Data()
        var pageRecords = Data()
        for payload in pages {
            let box = try sealed(payload, keys.index, context + "\u{0}page")
            try put(box)
            written += Int64(box.count)
            boundaries.append(written)
            appendInteger(UInt32(box.count), to: &pageRecords)
            pageRecords.append(contentsOf: SHA256.hash(data: box))
        }
        let headOffset = written
        let headSize = Int64(12 + 8 + 4 + 8 + 4 + pageRecords.count + 16)
        let padding = bucket(headOffset + headSize + Int64(footerSize)) - (headOffset + headSize + Int64(footerSize))
        appendInteger(UInt64(plainSize), to: &head)
        appendInteger(count, to: &head)
        appendInteger(UInt64(padding), to: &head)
        appendInteger(UInt32(pages.count), to: &head)
        head.append(pageRecords)
        try put(try sealed(head, keys.index, context))
        boundaries.append(headOffset + headSize)
        try writePadding(padding, key: keys.padding, to: put)
        // Padding in 64 KiB parts from its start: a version whose padding is longer or shorter shares all but the last.
        var piece: Int64 = 64 << 10
        while piece < padding {
            boundaries.append(headOffset + headSize + piece)
            piece += 64 << 10
        }
        if padding > 0 { boundaries.append(headOffset + headSize + padding) }
        var where_ = Data()
        appendInteger(UInt64(headOffset), to: &where_)
        appendInteger(UInt32(headSize), to: &where_)
        try put(try sealed(where_, keys.index, context + "\u{0}footer"))
        let total = headOffset + headSize + padding + Int64(footerSize)
        boundaries.append(total)
        try output.synchronize()
        return Digest(
            sealedSize: total, plainSize: plainSize, checksum: FileHasher.hex(hasher.finalize()), boundaries: boundaries,
            sealedChecksum: FileHasher.hex(sealedHasher.finalize()))
    }

    /// Opens a sealed file into `destination`: written to a `.partial` beside it and moved into place only when
    /// every chunk and the index check out — otherwise ``EncryptionError/tampered(_:)`` and nothing is left.
    public static func open(_ source: URL, to destination: URL, key: SymmetricKey, context: String) throws {
        _ = try openReporting(source, to: destination, key: key, context: context)
    }

    /// ``open(_:to:key:context:)``, hashing the plaintext on the way; `sealing` seals what is written (an encrypted
    /// library's download).
    @discardableResult
    public static func openReporting(
        _ source: URL, to destination: URL, key: SymmetricKey, context: String, sealing: ContentSealing? = nil
    ) throws -> Digest {
        let partial = destination.appendingPathExtension("partial")
        guard FileManager.default.createFile(atPath: partial.path, contents: nil) else {
            throw SyncError.localFile("Cannot write \(partial.path).")
        }
        let digest: Digest
        do {
            let output = try ContentWriter(url: partial, sealing: sealing)
            defer { try? output.close() }
            digest = try openReporting(source, into: output, key: key, context: context)
        } catch {
            try? FileManager.default.removeItem(at: partial)
            throw error
        }
        _ = try? FileManager.default.removeItem(at: destination)
        try FileManager.default.moveItem(at: partial, to: destination)
        return digest
    }

    /// The plaintext of the sealed file `source` written to `output` (from where it is), checked as it goes; on an
    /// error, what was written is not the content (the caller drops it).
    static func openReporting(_ source: URL, into output: ContentWriter, key: SymmetricKey, context: String) throws -> Digest {
        let keys = Keys(key, context: context)
        var hasher = SHA256()
        var sealedSize: Int64 = 0
        let input = try FileHandle(forReadingFrom: source)
        defer { try? input.close() }
        guard let start = try input.read(upToCount: magic.count), Array(start) == magic else {
            throw EncryptionError.notEncrypted("not a Nimbus chunk-encrypted file")
        }
        let total = try input.seekToEnd()
        sealedSize = Int64(total)
        guard total >= UInt64(magic.count + footerSize) else { throw EncryptionError.tampered("the file is cut short") }
        try input.seek(toOffset: total - UInt64(footerSize))
        let footer = try opened(try input.read(upToCount: footerSize) ?? Data(), keys.index, context + "\u{0}footer", what: "the footer")
        guard footer.count == 12 else { throw EncryptionError.tampered("the footer is malformed") }
        let headOffset = integer(footer, 0..<8, as: UInt64.self)
        let headSize = Int(integer(footer, 8..<12, as: UInt32.self))
        guard headOffset >= UInt64(magic.count), headOffset + UInt64(headSize) + UInt64(footerSize) <= total else {
            throw EncryptionError.tampered("the footer points outside the file")
        }
        try input.seek(toOffset: headOffset)
        let head = try opened(try input.read(upToCount: headSize) ?? Data(), keys.index, context, what: "the index")
        guard head.count >= 24 else { throw EncryptionError.tampered("the index is malformed") }
        let size = integer(head, 0..<8, as: UInt64.self)
        let count = Int(integer(head, 8..<12, as: UInt32.self))
        let padding = integer(head, 12..<20, as: UInt64.self)
        let pageCount = Int(integer(head, 20..<24, as: UInt32.self))
        guard head.count == 24 + pageCount * 36 else { throw EncryptionError.tampered("the index is malformed") }
        guard headOffset + UInt64(headSize) + padding + UInt64(footerSize) == total else {
            throw EncryptionError.tampered("the file's length is wrong")
        }
        // The pages, just before the head, each checked against the head's hash of it.
        var pageLengths: [Int] = []
        for page in 0..<pageCount { pageLengths.append(Int(integer(head, 24 + page * 36..<28 + page * 36, as: UInt32.self))) }
        let pagesSize = UInt64(pageLengths.reduce(0, +))
        guard pagesSize + UInt64(magic.count) <= headOffset else { throw EncryptionError.tampered("the index pages point outside the file") }
        let recordsEnd = headOffset - pagesSize
        try input.seek(toOffset: recordsEnd)
        var entries = Data()
        for (page, length) in pageLengths.enumerated() {
            let at = 28 + page * 36
            guard let box = try input.read(upToCount: length), box.count == length,
                Data(SHA256.hash(data: box)) == head.subdata(in: head.startIndex + at..<head.startIndex + at + 32)
            else { throw EncryptionError.tampered("index page \(page) is changed, missing or out of place") }
            entries.append(try opened(box, keys.index, context + "\u{0}page", what: "index page \(page)"))
        }
        guard entries.count == count * 36 else { throw EncryptionError.tampered("the index is malformed") }
        let payload = entries
        try input.seek(toOffset: UInt64(magic.count))
        let nonce = try AES.GCM._SIV.Nonce(data: zeroNonce)
        var offset = UInt64(magic.count)
        var plainSize: UInt64 = 0
        for index in 0..<count {
            let at = index * 36
            let length = Int(integer(payload, at..<at + 4, as: UInt32.self))
            guard length >= 16, length <= FastCDC.Parameters.standard.maximum + 16, offset + UInt64(length) <= recordsEnd,
                let record = try input.read(upToCount: length), record.count == length,
                Data(SHA256.hash(data: record)) == payload.subdata(in: payload.startIndex + at + 4..<payload.startIndex + at + 36)
            else { throw EncryptionError.tampered("chunk \(index) is changed, missing or out of place") }
            let plain: Data
            do {
                plain = try AES.GCM._SIV.open(
                    AES.GCM._SIV.SealedBox(nonce: nonce, ciphertext: record.prefix(length - 16), tag: record.suffix(16)), using: keys.chunk)
            } catch {
                throw EncryptionError.tampered("chunk \(index) does not authenticate")
            }
            hasher.update(data: plain)
            try output.write(contentsOf: plain)
            offset += UInt64(length)
            plainSize += UInt64(plain.count)
        }
        guard offset == recordsEnd, plainSize == size else { throw EncryptionError.tampered("chunks are missing or repeated") }
        try output.synchronize()
        return Digest(sealedSize: sealedSize, plainSize: Int64(plainSize), checksum: FileHasher.hex(hasher.finalize()))
    }

    /// Padding that looks random, the same for every version of one file (its context), so re-sealing an edited
    /// file leaves it alike and it costs nothing in a block upload: AES-GCM's keystream over zeros, a piece per MiB.
    static func writePadding(_ length: Int64, key: SymmetricKey, to output: (Data) throws -> Void) throws {
        var left = length
        var piece: UInt64 = 0
        while left > 0 {
            let count = Int(min(left, 1 << 20))
            var nonce = Data(count: 4)
            appendInteger(piece, to: &nonce)
            try output(try AES.GCM.seal(Data(count: count), using: key, nonce: AES.GCM.Nonce(data: nonce)).ciphertext)
            left -= Int64(count)
            piece += 1
        }
    }

    /// The index and footer, sealed with AES-256-GCM under a nonce derived from what they hold (HMAC-SHA256 of it
    /// under a key of its own): the same file seals to the same bytes every time (a retried upload is the same
    /// upload), and two different payloads never share a nonce.
    static func sealed(_ payload: Data, _ key: SymmetricKey, _ context: String) throws -> Data {
        let nonceKey = HKDF<SHA256>.deriveKey(inputKeyMaterial: key, info: Array("nimbus-index-nonce-v1".utf8), outputByteCount: 32)
        var mac = HMAC<SHA256>(key: nonceKey)
        mac.update(data: indexAAD(context))
        mac.update(data: payload)
        let nonce = try AES.GCM.Nonce(data: Data(mac.finalize()).prefix(12))
        guard let combined = try AES.GCM.seal(payload, using: key, nonce: nonce, authenticating: indexAAD(context)).combined else {
            throw EncryptionError.tampered("sealing failed")
        }
        return combined
    }

    static func opened(_ box: Data, _ key: SymmetricKey, _ context: String, what: String) throws -> Data {
        do {
            return try AES.GCM.open(AES.GCM.SealedBox(combined: box), using: key, authenticating: indexAAD(context))
        } catch {
            throw EncryptionError.tampered("\(what) does not authenticate (changed, cut, or another file's)")
        }
    }

    static func appendInteger<T: FixedWidthInteger>(_ value: T, to data: inout Data) {
        var big = value.bigEndian
        withUnsafeBytes(of: &big) { data.append(contentsOf: $0) }
    }

    static func integer<T: FixedWidthInteger>(_ data: Data, _ range: Range<Int>, as: T.Type) -> T {
        data[data.startIndex + range.lowerBound..<data.startIndex + range.upperBound].reduce(T(0)) { $0 << 8 | T($1) }
    }

    static func indexAAD(_ context: String) -> [UInt8] { Array("nimbus-crypt-index-v1".utf8) + [0] + Array(context.utf8) }
}
