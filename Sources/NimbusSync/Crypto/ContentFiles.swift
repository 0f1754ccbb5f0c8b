import Crypto
import Foundation

/// How content files of a library are kept: plain, or sealed at rest (``SegmentedEncryption``). Uploads
/// are read and downloads written through it (``UploadSource/open()``, ``DownloadTarget/open()``), so an encrypted
/// library's staged uploads, partial downloads and cache never hold plaintext on disk.
public struct ContentSealing: Sendable {
    let cipher: SegmentedEncryption
    /// Bound into every segment with the file's random id: segments cannot move between files or places.
    static let context = "nimbus-store"

    init(_ cipher: SegmentedEncryption) { self.cipher = cipher }

    /// The plaintext size of the sealed file at `path`; nil when there is none (or it is not one).
    func plainSize(_ path: String) -> Int64? {
        guard let stored = FileHasher.regularFileSize(path) else { return nil }
        return try? SegmentedEncryption.plainSize(ofEncrypted: stored)
    }
}

/// The bytes of a file, read in order or at any offset: a plain file, or one sealed at rest, opened segment by
/// segment (each authenticated before any of its bytes is returned).
public final class ContentReader: @unchecked Sendable {
    enum Backing {
        case plain(FileHandle)
        case sealed(SegmentedEncryption.Reader)
    }

    let backing: Backing
    var position: Int64 = 0

    init(url: URL, sealing: ContentSealing?) throws {
        if let sealing {
            backing = .sealed(try SegmentedEncryption.Reader(url: url, key: sealing.cipher.key, context: ContentSealing.context))
        } else {
            backing = .plain(try FileHandle(forReadingFrom: url))
        }
    }

    /// Up to `count` bytes from the current position; empty (or nil) at the end, as `FileHandle`'s.
    public func read(upToCount count: Int) throws -> Data? {
        switch backing {
        case .plain(let handle): return try handle.read(upToCount: count)
        case .sealed(let reader):
            let data = try reader.read(offset: position, length: count)
            position += Int64(data.count)
            return data
        }
    }

    /// Moves the read position to `offset` of the plaintext.
    public func seek(toOffset offset: UInt64) throws {
        switch backing {
        case .plain(let handle): try handle.seek(toOffset: offset)
        case .sealed: position = Int64(offset)
        }
    }

    /// `length` bytes at `offset`, or nil when the file is shorter.
    public func read(offset: Int64, length: Int) throws -> Data? {
        try seek(toOffset: UInt64(offset))
        guard let data = try read(upToCount: length), data.count == length else { return nil }
        return data
    }

    /// Fills `buffer` with the bytes at `offset`; false when the file ends first. A plain file is read straight into
    /// it (`pread`: no `Data` in between, and the read position is left alone).
    public func read(offset: Int64, into buffer: UnsafeMutableRawBufferPointer) throws -> Bool {
        switch backing {
        case .plain(let handle):
            guard let count = FileHasher.fill(handle.fileDescriptor, buffer, at: offset) else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
            return count == buffer.count
        case .sealed:
            guard let data = try read(offset: offset, length: buffer.count) else { return false }
            data.copyBytes(to: buffer)
            return true
        }
    }

    /// Everything, for small files.
    public func readToEnd() throws -> Data {
        var all = Data()
        while let data = try read(upToCount: 1 << 20), !data.isEmpty { all.append(data) }
        return all
    }

    /// Closes the file.
    public func close() {
        switch backing {
        case .plain(let handle): try? handle.close()
        case .sealed(let reader): reader.close()
        }
    }
}

/// Where a download is written, in order, resuming after what is there: a plain file, or one sealed at rest.
public struct DownloadTarget: Sendable {
    /// The file written.
    public var url: URL
    let sealing: ContentSealing?
    /// Whether ``ContentWriter/synchronize()`` makes the bytes durable (fsync). Not for a sealed partial that is
    /// opened into a plain file (a synced folder's download): that copy is made durable instead, one fsync per file.
    let durable: Bool
    /// A download kept in memory (a small file an encrypted library opens straight into a synced folder: no sealed
    /// partial to write and delete, no plaintext on disk before its place). `url` names nothing then.
    let buffer: LockedBox<Data>?

    /// A plain file.
    public init(url: URL) {
        self.url = url
        sealing = nil
        durable = true
        buffer = nil
    }

    /// A download into memory.
    init(memoryNamed url: URL) {
        self.url = url
        sealing = nil
        durable = true
        buffer = LockedBox(Data())
    }

    /// Whether the download goes to memory, not to `url`.
    public var isInMemory: Bool { buffer != nil }

    init(url: URL, sealing: ContentSealing?, durable: Bool = true) {
        self.url = url
        self.sealing = sealing
        self.durable = durable
        buffer = nil
    }

    /// Opens (or creates, 0600) the file for appending.
    public func open() throws -> ContentWriter {
        if let buffer { return ContentWriter(buffer: buffer) }
        if !FileManager.default.fileExists(atPath: url.path) {
            _ = FileManager.default.createFile(atPath: url.path, contents: nil, attributes: [.posixPermissions: 0o600])
        }
        return try ContentWriter(url: url, sealing: sealing, durable: durable)
    }

    /// How many bytes of content are there already (a partial download).
    public var existingSize: Int64 {
        if let buffer { return Int64(buffer.withLock { $0.count }) }
        guard let sealing else { return FileHasher.regularFileSize(url.path) ?? 0 }
        return (try? ContentWriter(url: url, sealing: sealing, readOnly: true).size) ?? 0
    }

    /// SHA-256 and size of the content written: as hashed while it was written (``WrittenHashes``), when the file is
    /// still what that writer closed; else read back.
    func hash() throws -> (checksum: String, size: Int64) {
        if let buffer { return buffer.withLock { (FileHasher.hex(SHA256.hash(data: $0)), Int64($0.count)) } }
        guard sealing != nil else { return try WrittenHashes.take(url.path) ?? FileHasher.sha256(of: url) }
        let reader = try ContentReader(url: url, sealing: sealing)
        defer { reader.close() }
        var hasher = SHA256()
        var size: Int64 = 0
        while let data = try reader.read(upToCount: 1 << 20), !data.isEmpty {
            hasher.update(data: data)
            size += Int64(data.count)
        }
        return (FileHasher.hex(hasher.finalize()), size)
    }
}

/// Appends to a file as a download comes: plain bytes, or segments sealed at rest. A sealed file is complete and
/// readable whenever it is closed (its last segment sealed as the last); opening it again reopens that segment to go
/// on after it, and a tail torn by a crash is cut back to the last whole segment.
public final class ContentWriter: @unchecked Sendable {
    private let fileHandle: FileHandle?
    let buffer: LockedBox<Data>?
    /// The file (every writer but a memory one has it).
    private var handle: FileHandle {
        get throws {
            guard let fileHandle else { throw CocoaError(.fileNoSuchFile) }
            return fileHandle
        }
    }
    let url: URL
    let sealing: ContentSealing?
    let durable: Bool
    // Sealed: the file's id, the next segment's index, the plaintext not yet sealed, whether the file ends with a
    // segment sealed as the last (then it is reopened before anything more is written).
    var fileId: [UInt8] = []
    var index: UInt64 = 0
    var pending = Data()
    var tailSealed = false
    /// A plain file written from its first byte on, in order: its hash so far (nil once that is not so).
    private var written: (hasher: SHA256, size: Int64)?

    init(buffer: LockedBox<Data>) {
        self.buffer = buffer
        fileHandle = nil
        url = URL(fileURLWithPath: "/dev/null")
        sealing = nil
        durable = false
    }

    init(url: URL, sealing: ContentSealing?, readOnly: Bool = false, durable: Bool = true) throws {
        self.url = url
        self.sealing = sealing
        self.durable = durable
        buffer = nil
        fileHandle = readOnly ? try FileHandle(forReadingFrom: url) : try FileHandle(forUpdating: url)
        guard sealing != nil else {
            if !readOnly, FileHasher.regularFileSize(url.path) == 0 { written = (SHA256(), 0) }
            return
        }
        do {
            try resume(write: !readOnly)
        } catch {
            try? handle.close()
            throw error
        }
    }

    static var segment: Int { SegmentedEncryption.segmentSize }
    static var full: Int64 { Int64(SegmentedEncryption.segmentSize + SegmentedEncryption.overhead) }
    static var header: Int64 { Int64(SegmentedEncryption.headerSize) }

    /// Content bytes in the file (sealed and pending).
    var size: Int64 { Int64(index) * Int64(Self.segment) + Int64(pending.count) }

    /// Reads the header and the tail of a sealed file: everything authenticated is kept, the rest cut off.
    private func resume(write: Bool) throws {
        let stored = Int64(try handle.seekToEnd())
        try handle.seek(toOffset: 0)
        let header = try handle.read(upToCount: Int(Self.header)) ?? Data()
        guard header.count == Int(Self.header), Array(header.prefix(8)) == SegmentedEncryption.magic else {
            if write { try restart() }
            return
        }
        fileId = Array(header[header.startIndex + 8..<header.startIndex + 24])
        let body = stored - Self.header
        var whole = body / Self.full
        let rest = body % Self.full
        // A tail sealed as the last: a short one after the whole segments, or the last whole one.
        if rest >= Int64(SegmentedEncryption.overhead), let plain = try open(index: whole, length: Int(rest), last: true) {
            index = UInt64(whole)
            pending = plain
        } else if rest == 0, whole > 0, let plain = try open(index: whole - 1, length: Int(Self.full), last: true) {
            whole -= 1
            index = UInt64(whole)
            pending = plain
        } else {
            // Torn by a crash: the whole segments before the tear, if the last of them is sound.
            while whole > 0, try open(index: whole - 1, length: Int(Self.full), last: false) == nil { whole -= 1 }
            index = UInt64(whole)
        }
        if write {
            try handle.truncate(atOffset: UInt64(Self.header + Int64(index) * Self.full))
            try handle.seekToEnd()
        }
    }

    private func open(index: Int64, length: Int, last: Bool) throws -> Data? {
        guard let sealing else { return nil }
        try handle.seek(toOffset: UInt64(Self.header + index * Self.full))
        guard let stored = try handle.read(upToCount: length), stored.count == length else { return nil }
        let aad = SegmentedEncryption.associatedData(context: ContentSealing.context, fileId: fileId, index: UInt64(index), last: last)
        guard let box = try? AES.GCM.SealedBox(combined: stored) else { return nil }
        return try? AES.GCM.open(box, using: sealing.cipher.key, authenticating: aad)
    }

    /// Empties the file and starts a new sealed one (a new id).
    private func restart() throws {
        try handle.truncate(atOffset: 0)
        var id = [UInt8](repeating: 0, count: 16)
        var generator = SystemRandomNumberGenerator()
        for position in id.indices { id[position] = generator.next() }
        fileId = id
        index = 0
        pending = Data()
        tailSealed = false
        var header = SegmentedEncryption.magic + id
        withUnsafeBytes(of: UInt32(SegmentedEncryption.segmentSize).bigEndian) { header += $0 }
        header += [0, 0, 0, 0]
        try handle.write(contentsOf: header)
    }

    /// The bytes already there: where the next write goes.
    @discardableResult
    public func seekToEnd() throws -> UInt64 {
        if let buffer { return UInt64(buffer.withLock { $0.count }) }
        guard sealing != nil else {
            let end = try handle.seekToEnd()
            if let written, UInt64(written.size) != end { self.written = nil }
            return end
        }
        return UInt64(size)
    }

    /// Appends `bytes` (sealed in segments as they fill, in a sealed target).
    public func write<Bytes: DataProtocol>(contentsOf bytes: Bytes) throws {
        if let buffer { return buffer.withLock { $0.append(contentsOf: bytes) } }
        guard sealing != nil else {
            try handle.write(contentsOf: bytes)
            if written != nil {
                for region in bytes.regions { region.withUnsafeBytes { written?.hasher.update(bufferPointer: $0) } }
                written?.size += Int64(bytes.count)
            }
            return
        }
        let data = bytes as? Data ?? Data(bytes)
        if tailSealed {
            // Written to after a synchronize: the last segment is opened again.
            try resume(write: true)
            tailSealed = false
        }
        var rest = data[...]
        let size = Self.segment
        while !rest.isEmpty {
            if pending.count == size {
                try seal(pending[...], last: false)
                pending.removeAll(keepingCapacity: true)
            }
            let take = min(size - pending.count, rest.count)
            pending.append(rest.prefix(take))
            rest = rest.dropFirst(take)
        }
    }

    /// Only a restart (offset 0) for a sealed file.
    public func truncate(atOffset offset: UInt64) throws {
        if let buffer { return buffer.withLock { $0 = $0.prefix(Int(offset)) } }
        guard sealing != nil else {
            try handle.truncate(atOffset: offset)  // (the position moves there too)
            written = offset == 0 ? (SHA256(), 0) : nil
            return
        }
        guard offset == 0 else { throw EncryptionError.tampered("a sealed download can only start over") }
        try restart()
    }

    /// Makes what was written durable (a sealed file: complete, its last segment sealed).
    public func synchronize() throws {
        if buffer != nil { return }
        if sealing != nil, !tailSealed {
            try seal(pending[...], last: true)
            tailSealed = true
        }
        if durable { try handle.synchronize() }
    }

    /// Seals what is left and closes the file.
    public func close() throws {
        if buffer != nil { return }
        if sealing != nil, !tailSealed {
            try seal(pending[...], last: true)
            tailSealed = true
        }
        try handle.close()
        if let written {
            WrittenHashes.keep(url.path, checksum: FileHasher.hex(written.hasher.finalize()), size: written.size)
            self.written = nil
        }
    }

    private func seal(_ plain: Data.SubSequence, last: Bool) throws {
        guard let sealing else { return }
        if fileId.isEmpty { try restart() }
        let aad = SegmentedEncryption.associatedData(context: ContentSealing.context, fileId: fileId, index: index, last: last)
        let box = try AES.GCM.seal(plain, using: sealing.cipher.key, nonce: AES.GCM.Nonce(), authenticating: aad)
        guard let combined = box.combined else { throw EncryptionError.tampered("sealing failed") }
        try handle.write(contentsOf: combined)
        if !last { index += 1 }
    }
}

/// The SHA-256 of plain downloads as their ``ContentWriter`` wrote them, first byte to last, by path: the check that
/// follows a download (``DownloadTarget/hash()``) takes it instead of reading the whole file back — a third of the
/// client's CPU for a big download. Taken only while the file is what the writer closed (same inode, size and
/// modification time, `lstat`); otherwise, or once taken, the file is read. A few entries (a download's check comes
/// right after it).
enum WrittenHashes {
    private static let kept = LockedBox([String: (checksum: String, stat: FileStat)]())

    static func keep(_ path: String, checksum: String, size: Int64) {
        guard let stat = POSIXFileSystem().stat(path), stat.kind == .file, stat.size == size else { return }
        kept.withLock { entries in
            if entries.count >= 64 { entries.removeAll() }
            entries[path] = (checksum, stat)
        }
    }

    /// The hash kept for `path`, if the file is unchanged since; forgotten either way.
    static func take(_ path: String) -> (checksum: String, size: Int64)? {
        guard let entry = kept.withLock({ $0.removeValue(forKey: path) }), POSIXFileSystem().stat(path) == entry.stat else { return nil }
        return (entry.checksum, entry.stat.size)
    }
}
