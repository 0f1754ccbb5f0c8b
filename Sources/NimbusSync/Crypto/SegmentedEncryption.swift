import Crypto
import Foundation

/// Why encrypted data could not be read or a key could not be had. Never garbage, never an empty view:
/// every failure is one of these, with what to do.
public enum EncryptionError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The passphrase does not unwrap the data key.
    case wrongPassphrase
    /// The store is encrypted and no key or passphrase was given.
    case keyMissing(String)
    /// A segment (or the header) does not authenticate: changed, swapped, moved from another file, or cut off.
    case tampered(String)
    /// Not in the format (wrong magic or version).
    case notEncrypted(String)
    /// A name too long to seal (``NameCipher/maximumNameBytes`` UTF-8 bytes at most), or empty.
    case nameTooLong(Int)

    /// What went wrong and what to do, in words for the user.
    public var description: String {
        switch self {
        case .wrongPassphrase: "The passphrase is wrong: it does not unlock this store's key. Nothing was read or changed."
        case .keyMissing(let what): "This store is encrypted and no key was given: \(what)"
        case .tampered(let what): "Encrypted data failed its integrity check (\(what)); it was changed or damaged, and is not returned."
        case .notEncrypted(let what): "Not Nimbus encrypted data: \(what)"
        case .nameTooLong(let bytes):
            "A name of \(bytes) bytes cannot be sealed: encrypted remotes take names of 1 to \(NameCipher.maximumNameBytes) UTF-8 bytes."
        }
    }
}

/// Content encrypted at rest, readable at any offset: AES-256-GCM in segments of 64 KiB of plaintext.
///
/// Format (`docs/encryption.md` has it in full, to recover data without Nimbus):
/// - a 32-byte header: `NIMBUSE1` (8 bytes), a random 16-byte file id, the segment size (UInt32, big-endian), 4
///   bytes zero;
/// - then segments: a random 96-bit nonce, the ciphertext of up to 64 KiB, the 16-byte tag. Every segment but the
///   last holds exactly 64 KiB; the last holds the rest (possibly nothing: an empty file is one empty segment).
/// - Each segment's associated data binds it to its place: the caller's context (the item's id), the header's file
///   id, the segment's index (UInt64, big-endian) and a last-segment flag — so segments cannot be swapped,
///   reordered, moved between files or versions, and a file cut short at a segment boundary is detected.
public struct SegmentedEncryption: Sendable {
    /// Plaintext bytes per segment.
    public static let segmentSize = 64 * 1024
    static let magic = Array("NIMBUSE1".utf8)
    static let headerSize = 32
    static let overhead = 12 + 16

    let key: SymmetricKey

    /// Encryption under `key` (AES-256).
    public init(key: SymmetricKey) { self.key = key }

    /// The size of the ciphertext file for `plainSize` bytes.
    public static func encryptedSize(ofPlain plainSize: Int64) -> Int64 {
        let segments = max(1, (plainSize + Int64(segmentSize) - 1) / Int64(segmentSize))
        return Int64(headerSize) + plainSize + segments * Int64(overhead)
    }

    /// The plaintext size of an encrypted file of `encryptedSize` bytes.
    static func plainSize(ofEncrypted encryptedSize: Int64) throws -> Int64 {
        let body = encryptedSize - Int64(headerSize)
        let full = Int64(segmentSize + overhead)
        guard body >= Int64(overhead) else { throw EncryptionError.tampered("the file is shorter than one segment") }
        var segments = body / full
        var rest = body % full
        if rest == 0 {
            // Ends on a full segment: that one is the last.
            rest = full
            segments -= 1
        }
        guard rest >= Int64(overhead) else { throw EncryptionError.tampered("the last segment is cut short") }
        return segments * Int64(segmentSize) + rest - Int64(overhead)
    }

    static func associatedData(context: String, fileId: [UInt8], index: UInt64, last: Bool) -> [UInt8] {
        var data = Array(context.utf8)
        data.append(0)
        data += fileId
        withUnsafeBytes(of: index.bigEndian) { data += $0 }
        data.append(last ? 1 : 0)
        return data
    }

    /// Encrypts `source` into a new file at `destination` (0600), 64 KiB at a time; `context` is the item's id.
    public func encryptFile(at source: URL, to destination: URL, context: String) throws {
        let input = try FileHandle(forReadingFrom: source)
        defer { try? input.close() }
        let writer = try Writer(creating: destination, key: key, context: context)
        do {
            while let data = try input.read(upToCount: 1 << 20), !data.isEmpty { try writer.append(data) }
            try writer.finish()
        } catch {
            writer.abandon()
            throw error
        }
    }

    /// Decrypts the file at `source` into a new plain file at `destination`, checking every segment.
    public func decryptFile(at source: URL, to destination: URL, context: String) throws {
        let reader = try Reader(url: source, key: key, context: context)
        defer { reader.close() }
        _ = FileManager.default.createFile(atPath: destination.path, contents: nil, attributes: [.posixPermissions: 0o600])
        let output = try FileHandle(forWritingTo: destination)
        defer { try? output.close() }
        do {
            var index: Int64 = 0
            while index < reader.segmentCount {
                try output.write(contentsOf: try reader.segment(index))
                index += 1
            }
        } catch {
            try? output.close()
            try? FileManager.default.removeItem(at: destination)
            throw error
        }
    }

    /// `length` bytes of plaintext at `offset` (fewer at the end), decrypting only the segments they are in.
    public func read(_ url: URL, context: String, offset: Int64, length: Int) throws -> Data {
        let reader = try Reader(url: url, key: key, context: context)
        defer { reader.close() }
        return try reader.read(offset: offset, length: length)
    }

    /// The plaintext size of the encrypted file at `url` (its header checked, no segment decrypted).
    public func plainSize(of url: URL) throws -> Int64 {
        let reader = try Reader(url: url, key: key, context: "")
        defer { reader.close() }
        return reader.plainSize
    }

    /// Writes an encrypted file as plaintext comes, in order (downloads, staged uploads): bounded memory, one
    /// segment buffered. Calls from several threads are serialized (a lock), not interleaved.
    public final class Writer: @unchecked Sendable {
        private let lock = NSLock()
        let handle: FileHandle
        let url: URL
        let key: SymmetricKey
        let context: String
        let fileId: [UInt8]
        var pending = Data()
        var index: UInt64 = 0

        /// Creates the file at `url` (mode 0600) and writes its header; `context` binds it to its item.
        public init(creating url: URL, key: SymmetricKey, context: String) throws {
            guard FileManager.default.createFile(atPath: url.path, contents: nil, attributes: [.posixPermissions: 0o600]) else {
                throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: url.path])
            }
            handle = try FileHandle(forWritingTo: url)
            self.url = url
            self.key = key
            self.context = context
            var id = [UInt8](repeating: 0, count: 16)
            var generator = SystemRandomNumberGenerator()
            for position in id.indices { id[position] = generator.next() }
            fileId = id
            var header = SegmentedEncryption.magic + id
            withUnsafeBytes(of: UInt32(SegmentedEncryption.segmentSize).bigEndian) { header += $0 }
            header += [0, 0, 0, 0]
            try handle.write(contentsOf: header)
        }

        /// Appends plaintext; full segments are sealed and written as they fill.
        public func append(_ data: Data) throws {
            lock.lock()
            defer { lock.unlock() }
            let size = SegmentedEncryption.segmentSize
            var rest = data[...]
            if !pending.isEmpty {
                let take = min(size - pending.count, rest.count)
                pending.append(rest.prefix(take))
                rest = rest.dropFirst(take)
                // A full segment with more to come is not the last: sealed now.
                guard pending.count == size, !rest.isEmpty else { return }
                try seal(pending[...], last: false)
                pending.removeAll(keepingCapacity: true)
            }
            while rest.count > size {
                try seal(rest.prefix(size), last: false)
                rest = rest.dropFirst(size)
            }
            pending.append(rest)
        }

        /// Seals the last segment (what is buffered, maybe nothing), fsyncs and closes.
        public func finish() throws {
            lock.lock()
            defer { lock.unlock() }
            try seal(pending[...], last: true)
            pending = Data()
            try handle.synchronize()
            try handle.close()
        }

        /// Closes and deletes what was written.
        public func abandon() {
            try? handle.close()
            try? FileManager.default.removeItem(at: url)
        }

        func seal(_ plain: Data.SubSequence, last: Bool) throws {
            let aad = SegmentedEncryption.associatedData(context: context, fileId: fileId, index: index, last: last)
            let box = try AES.GCM.seal(plain, using: key, nonce: AES.GCM.Nonce(), authenticating: aad)
            guard let combined = box.combined else { throw EncryptionError.tampered("sealing failed") }
            try handle.write(contentsOf: combined)
            index += 1
        }
    }

    /// Reads segments of an encrypted file, each authenticated before any of its bytes is returned. Reads from
    /// several threads are serialized (one file offset, behind a lock).
    public final class Reader: @unchecked Sendable {
        private let lock = NSLock()
        let handle: FileHandle
        let key: SymmetricKey
        let context: String
        let fileId: [UInt8]
        /// The plaintext's size.
        public let plainSize: Int64
        let segmentCount: Int64

        /// Opens the encrypted file at `url`, checking its header; `context` must be the one it was written with.
        public init(url: URL, key: SymmetricKey, context: String) throws {
            handle = try FileHandle(forReadingFrom: url)
            self.key = key
            self.context = context
            do {
                let header = try handle.read(upToCount: SegmentedEncryption.headerSize) ?? Data()
                guard header.count == SegmentedEncryption.headerSize, Array(header.prefix(8)) == SegmentedEncryption.magic else {
                    throw EncryptionError.notEncrypted(url.lastPathComponent)
                }
                let segment = header[header.startIndex + 24..<header.startIndex + 28].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
                guard segment == UInt32(SegmentedEncryption.segmentSize) else {
                    throw EncryptionError.notEncrypted("\(url.lastPathComponent): segment size \(segment)")
                }
                fileId = Array(header[header.startIndex + 8..<header.startIndex + 24])
                let size = try handle.seekToEnd()
                plainSize = try SegmentedEncryption.plainSize(ofEncrypted: Int64(size))
                segmentCount = max(1, (plainSize + Int64(SegmentedEncryption.segmentSize) - 1) / Int64(SegmentedEncryption.segmentSize))
            } catch {
                try? handle.close()
                throw error
            }
        }

        /// Closes the file.
        public func close() { try? handle.close() }

        /// Segment `index`'s plaintext, authenticated.
        func segment(_ index: Int64) throws -> Data {
            let last = index == segmentCount - 1
            let plainLength = last ? Int(plainSize - index * Int64(SegmentedEncryption.segmentSize)) : SegmentedEncryption.segmentSize
            let offset = UInt64(SegmentedEncryption.headerSize) + UInt64(index) * UInt64(SegmentedEncryption.segmentSize + SegmentedEncryption.overhead)
            let stored = try lock.withLock {
                try handle.seek(toOffset: offset)
                return try handle.read(upToCount: plainLength + SegmentedEncryption.overhead) ?? Data()
            }
            guard stored.count == plainLength + SegmentedEncryption.overhead else { throw EncryptionError.tampered("segment \(index) is cut short") }
            let aad = SegmentedEncryption.associatedData(context: context, fileId: fileId, index: UInt64(index), last: last)
            do {
                return try AES.GCM.open(try AES.GCM.SealedBox(combined: stored), using: key, authenticating: aad)
            } catch {
                throw EncryptionError.tampered("segment \(index)")
            }
        }

        /// `length` bytes at `offset` (fewer at the end of the content).
        public func read(offset: Int64, length: Int) throws -> Data {
            guard offset < plainSize, length > 0 else { return Data() }
            let end = min(plainSize, offset + Int64(length))
            var result = Data()
            result.reserveCapacity(Int(end - offset))
            var index = offset / Int64(SegmentedEncryption.segmentSize)
            while index * Int64(SegmentedEncryption.segmentSize) < end {
                let plain = try segment(index)
                let start = index * Int64(SegmentedEncryption.segmentSize)
                let from = Int(max(offset, start) - start)
                let to = Int(min(end, start + Int64(plain.count)) - start)
                result.append(plain[plain.startIndex + from..<plain.startIndex + to])
                index += 1
            }
            return result
        }
    }
}
