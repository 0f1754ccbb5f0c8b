import CompressNIO
import Crypto
import Foundation
import NIOCore
import NIOPosix
import NimbusAPI

/// One content-addressed block of a file: its SHA-256 (lowercase hex) and length, its bytes when the
/// metadata database keeps them (small blocks, see ``StagedContent/inlineLimit``), and its place when it lives in
/// a pack (``PackWriter``; nil: the block is its own file or object).
struct BlockRef: Sendable, Hashable, Codable {
    var hash: String
    var size: Int64
    var inline: [UInt8]? = nil
    var pack: PackLocation? = nil
}

/// A block ready to become part of the store: bytes durably in a local staging file (`path`: the block's own, or
/// the staged pack its ``BlockRef/pack`` names), or, for a small block, in memory (`data`), to be kept in the
/// metadata database by the transaction that commits it.
struct StagedBlock: Sendable, Hashable {
    var ref: BlockRef
    var path: String
    var data: [UInt8]? = nil
}

/// Content storage: blocks addressed by SHA-256, one namespace per user (never shared across users).
///
/// The contract that keeps "nothing acknowledged is lost" true with deduplicated blocks, many writers (replicas)
/// and a remote store:
/// - ``put(_:user:)`` runs **before** the metadata commit that references the blocks, outside any transaction;
///   it is idempotent, always writes (so a block's age is its latest put) and is durable when it returns.
/// - The commit adopts each block under the user's write lock: a block whose metadata row is missing or marked
///   orphaned is checked with ``containsBlocking(_:user:)`` there, so a sweep that deleted it meanwhile is seen.
/// - Nothing is deleted when the last reference goes: the row is marked orphaned. A sweep, under the same lock,
///   deletes (``deleteBlocking(_:user:)``) blocks orphaned for longer than a grace period, then their rows. Open
///   upload sessions reference their blocks, so they are never orphaned.
/// - Staging files are request-scoped and local (`tmp/` of the replica that received the bytes); a resumable
///   session's chunks are in the store and the database, so any replica accepts the next chunk.
///
/// The `…Blocking` calls run inside a metadata transaction, on a thread that may block (never on Swift's
/// cooperative pool).
protocol BlobStore: Sendable {
    /// Size of the blocks a stager cuts content into.
    var blockSize: Int { get }
    /// A stager whose running whole-content hash starts from `runningHash` (to continue across chunks).
    func makeStager(runningHash: SHA256) -> BlockStager
    /// Stores staged blocks (inline ones are skipped: the database keeps them) and removes their staging files.
    /// Durable when it returns; idempotent.
    func put(_ blocks: [StagedBlock], user: String) async throws
    /// Whether the store holds the block's bytes as its own file or object.
    func containsBlocking(_ hash: String, user: String) throws -> Bool
    /// Deletes blocks kept as their own files or objects; absent ones are fine.
    func deleteBlocking(_ hashes: [String], user: String) throws
    /// A writer of packs in this store's staging folder (see ``PackWriter``).
    func makePackWriter() -> PackWriter
    /// Whether the store holds the pack.
    func containsPackBlocking(_ id: String, user: String) throws -> Bool
    /// Deletes packs; absent ones are fine.
    func deletePacksBlocking(_ ids: [String], user: String) throws
    /// Drops staging files of blocks that will not be put (failed or duplicate uploads).
    func discard(_ blocks: [StagedBlock])
    /// Reads `range` (offsets within the whole content) of content made of `blocks`, in pieces.
    func read(_ blocks: [BlockRef], user: String, range: Range<Int64>, into body: (ByteBuffer) async throws -> Void) async throws
    /// The SHA-256 (hex) of the content made of `blocks`, read back from the store.
    func checksum(of blocks: [BlockRef], user: String) async throws -> String
    /// Removes this replica's staging files (left over from a crash); called once at start.
    func clearStaging() throws
    /// Answers when the store can be reached (for `/healthz`); throws with the reason when it cannot.
    func checkReachable() async throws
    /// How many files or objects the store holds, all users together: blocks kept on their own, and packs (tests
    /// and `nimbus admin`).
    func storedBlockCount() async throws -> Int
}

/// Blocks kept compressed at rest, in the local store: a block of the block API whose bytes shrink by a
/// tenth or more under zlib (RFC 1950, level 1: text, documents, source code — not photos, video or archives) is
/// written into its pack as that zlib stream; its row's `pack_stored` (fewer bytes than its size) says so. (Blocks
/// kept as their own files before packs: a file shorter than its block is compressed.)
enum StoredBlockCodec {
    static let algorithm = CompressionAlgorithm.zlib(configuration: ZlibConfiguration(compressionLevel: 1))

    /// Whether a block starting with `sample` (its first 4 KiB) may be worth compressing: the bytes' order-0
    /// entropy is under 7 bits a byte. Random, encrypted and already-compressed data (photos, video, archives) is
    /// near 8 and is not read a second time; this costs microseconds, a trial compression a millisecond.
    static func worthTrying(_ sample: [UInt8]) -> Bool {
        guard sample.count >= 1024 else { return false }
        var counts = [Int](repeating: 0, count: 256)
        for byte in sample { counts[Int(byte)] += 1 }
        let total = Double(sample.count)
        var entropy = 0.0
        for count in counts where count > 0 {
            let p = Double(count) / total
            entropy -= p * log2(p)
        }
        return entropy < 7
    }

    /// `bytes` compressed, or nil when that does not save a tenth.
    static func compress(_ bytes: [UInt8]) -> [UInt8]? {
        BodyEncoding.compressIfWorthIt(ByteBuffer(bytes: bytes), with: algorithm, minimumSize: 4096).map { Array(buffer: $0) }
    }

    /// The block's bytes from what the store holds for it (`size` is the block's length); ``DamagedBlock`` (its user
    /// still to be filled in) when they do not expand to that length.
    static func expand(_ stored: [UInt8], size: Int64, hash: String) throws -> [UInt8] {
        if stored.count == Int(size) { return stored }
        guard stored.count < Int(size) else { throw DamagedBlock(user: "", hash: hash) }
        var buffer = ByteBuffer(bytes: stored)
        guard let expanded = try? buffer.decompress(with: algorithm, maxSize: Int(size)), expanded.readableBytes == Int(size) else {
            throw DamagedBlock(user: "", hash: hash)
        }
        return Array(buffer: expanded)
    }
}

/// A store's inline blocks and ranges, shared by every implementation.
extension BlobStore {
    /// Whether the store holds the block's bytes: its pack, or its own file or object.
    func containsBlocking(_ block: BlockRef, user: String) throws -> Bool {
        if let pack = block.pack { return try containsPackBlocking(pack.pack, user: user) }
        return try containsBlocking(block.hash, user: user)
    }

    /// The packs that `blocks` were staged in, each once, with its staging file.
    static func stagedPacks(_ blocks: [StagedBlock]) -> [(id: String, path: String)] {
        var seen: Set<String> = []
        return blocks.compactMap { block in
            guard block.data == nil, let pack = block.ref.pack, seen.insert(pack.pack).inserted else { return nil }
            return (pack.pack, block.path)
        }
    }

    /// Through ``read(_:user:range:into:)``: right for any store (a remote one reads over the network anyway).
    /// Hashes from the last point a checksum of the same first blocks reached (``PrefixDigests``).
    func checksum(of blocks: [BlockRef], user: String) async throws -> String {
        var walk = PrefixDigests.shared.walk(blocks, user: user)
        let rest = Array(blocks[walk.from...])
        let total = rest.reduce(Int64(0)) { $0 + $1.size }
        var index = walk.from
        var left = index < blocks.count ? blocks[index].size : 0
        if rest.isEmpty { return walk.checksum }
        try await read(rest, user: user, range: 0..<total) { buffer in
            // The pieces do not follow the blocks' ends: split at them, to know the state after each block.
            var piece = buffer
            while piece.readableBytes > 0 {
                let take = Int(min(Int64(piece.readableBytes), left))
                piece.readSlice(length: take)?.withUnsafeReadableBytes { walk.digest.update(bufferPointer: $0) }
                left -= Int64(take)
                while left == 0, index < blocks.count {
                    walk.passed(index)
                    index += 1
                    left = index < blocks.count ? blocks[index].size : 0
                }
            }
        }
        return walk.checksum
    }

}

/// Descriptors opened during one read, closed together at its end.
final class OpenFiles {
    let threadPool: NIOThreadPool
    private var files: [String: Int32] = [:]

    init(threadPool: NIOThreadPool) { self.threadPool = threadPool }

    func open(_ path: String) async throws -> Int32 {
        if let fd = files[path] { return fd }
        let fd = try await threadPool.runIfActive { try POSIXFile.openForReading(path) }
        files[path] = fd
        return fd
    }

    func closeAll() {
        for fd in files.values { POSIXFile.closeFile(fd) }
        files = [:]
    }
}

/// Whole blocks next to each other in one file or object, each with the part of it a read wants
/// (``BlobStore/readCoalesced(_:user:range:into:place:expand:readRun:)``).
private struct Run {
    var key: String
    var start: Int64
    var length: Int64
    var parts: [(block: BlockRef, from: Int64, to: Int64)]
}

extension BlobStore {
    /// Reads `range` of the content made of `blocks`, joining blocks that lie next to each other in the same pack
    /// (a file's blocks usually do: written in order) into runs read in pieces of up to 1 MiB. ~64 KiB blocks read
    /// one by one cost a thread-pool hop and a `pread` each locally (downloads ran at a fifth of the speed), and a
    /// `GET` each from S3. `place` says where a block's bytes are (file or object, offset, stored length); a block
    /// stored compressed (fewer bytes than its size) comes whole from `expand`; `readRun` reads a piece of a run.
    ///
    /// Every block is read whole and checked against its SHA-256 (``BlockCheck``) before any of its bytes reach
    /// `body` — a range too (at most a block more at each end). A block that fails throws ``DamagedBlock``.
    func readCoalesced(
        _ blocks: [BlockRef], user: String, range: Range<Int64>, into body: (ByteBuffer) async throws -> Void,
        place: (BlockRef) async throws -> (key: String, offset: Int64, stored: Int64),
        expand: (BlockRef, String, Int64, Int64) async throws -> [UInt8],
        readRun: (String, Int64, Int64) async throws -> ByteBuffer
    ) async throws {
        func emit(_ whole: ByteBuffer, _ part: (block: BlockRef, from: Int64, to: Int64)) async throws {
            try BlockCheck.verify(whole, part.block, user: user)
            guard let wanted = whole.getSlice(at: whole.readerIndex + Int(part.from), length: Int(part.to - part.from)) else { return }
            try await body(wanted)
        }
        func send(_ pending: Run?) async throws {
            guard let pending else { return }
            var offset = pending.start
            let end = pending.start + pending.length
            var index = 0
            var partial = ByteBuffer()  // the start of parts[index], when a piece ended inside it
            while offset < end {
                let count = min(Int64(1 << 20), end - offset)
                var piece = try await readRun(pending.key, offset, count)
                guard piece.readableBytes == Int(count) else { throw DamagedBlock(user: user, hash: pending.parts[index].block.hash) }
                offset += count
                while piece.readableBytes > 0, index < pending.parts.count {
                    let part = pending.parts[index]
                    let missing = Int(part.block.size) - partial.readableBytes
                    if partial.readableBytes == 0, piece.readableBytes >= missing, let whole = piece.readSlice(length: missing) {
                        try await emit(whole, part)  // the whole block in this piece: checked in place
                    } else {
                        guard var some = piece.readSlice(length: min(missing, piece.readableBytes)) else { break }
                        partial.writeBuffer(&some)
                        guard partial.readableBytes == Int(part.block.size) else { continue }
                        try await emit(partial, part)
                        partial = ByteBuffer()
                    }
                    index += 1
                }
            }
        }
        var run: Run? = nil
        var blockStart: Int64 = 0
        for block in blocks {
            let blockEnd = blockStart + block.size
            defer { blockStart = blockEnd }
            guard blockEnd > range.lowerBound, blockStart < range.upperBound else { continue }
            let from = max(range.lowerBound, blockStart) - blockStart
            let to = min(range.upperBound, blockEnd) - blockStart
            if let inline = block.inline {
                try BlockCheck.verify(inline, block, user: user)
                try await send(run)
                run = nil
                try await body(ByteBuffer(bytes: inline[Int(from)..<Int(to)]))
                continue
            }
            let (key, offset, stored) = try await place(block)
            if stored < block.size {
                let whole: [UInt8]
                do { whole = try await expand(block, key, offset, stored) } catch var damaged as DamagedBlock {
                    damaged.user = user
                    throw damaged
                }
                try BlockCheck.verify(whole, block, user: user)
                try await send(run)
                run = nil
                try await body(ByteBuffer(bytes: whole[Int(from)..<Int(to)]))
                continue
            }
            if var current = run, current.key == key, current.start + current.length == offset {
                current.length += block.size
                current.parts.append((block, from, to))
                run = current
            } else {
                try await send(run)
                run = Run(key: key, start: offset, length: block.size, parts: [(block, from, to)])
            }
        }
        try await send(run)
    }
}

/// Blocks as files: `blobs/<userId>/<sha256>`, packs as `packs/<userId>/<id>`, staging in `tmp/`, on one file system
/// so rename is atomic.
/// A store whose staging files live in a local folder (request-scoped, this replica's): both stores so far.
protocol LocallyStaged: BlobStore {
    var stagingDirectory: String { get }
    var threadPool: NIOThreadPool { get }
}

extension LocallyStaged {
    func discard(_ blocks: [StagedBlock]) {
        for path in Set(blocks.filter { $0.data == nil }.map(\.path)) {
            try? POSIXFile.remove(path)
        }
    }

    func makePackWriter() -> PackWriter {
        PackWriter(stagingDirectory: stagingDirectory, threadPool: threadPool, compresses: false)
    }

    /// Whole uploads are not compressed at rest: ranged reads of video must stay cheap, and most big files do not
    /// shrink (photos, video, archives).
    func makeStager(runningHash: SHA256) -> BlockStager {
        BlockStager(writer: PackWriter(stagingDirectory: stagingDirectory, threadPool: threadPool, compresses: false), runningHash: runningHash)
    }

    func clearStaging() throws {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: stagingDirectory)) ?? []
        for name in names {
            try POSIXFile.remove(stagingDirectory + "/" + name)
        }
    }
}

struct LocalBlobStore: LocallyStaged {
    let root: URL
    let blockSize: Int
    let threadPool: NIOThreadPool

    /// The folders, as paths made once (building them from `root` per block was 2 % of a big upload's server CPU).
    let blobsDirectory: String
    let stagingDirectory: String
    let packsDirectory: String

    init(root: URL, blockSize: Int = 4 * 1024 * 1024, threadPool: NIOThreadPool = .singleton) throws {
        self.root = root
        self.blockSize = blockSize
        self.threadPool = threadPool
        blobsDirectory = root.appending(path: "blobs").path
        stagingDirectory = root.appending(path: "tmp").path
        packsDirectory = root.appending(path: "packs").path
        try POSIXFile.makeDirectory(root.path)
        try POSIXFile.makeDirectory(blobsDirectory)
        try POSIXFile.makeDirectory(stagingDirectory)
        try POSIXFile.makeDirectory(packsDirectory)
    }

    /// Blocks of the block API that shrink by a tenth are kept compressed at rest (see ``StoredBlockCodec``).
    func makePackWriter() -> PackWriter {
        PackWriter(stagingDirectory: stagingDirectory, threadPool: threadPool, compresses: true)
    }

    func packPath(_ id: String, user: String) -> String { packsDirectory + "/" + user + "/" + id }

    func containsPackBlocking(_ id: String, user: String) throws -> Bool { POSIXFile.exists(packPath(id, user: user)) }

    func deletePacksBlocking(_ ids: [String], user: String) throws {
        for id in ids { try POSIXFile.remove(packPath(id, user: user)) }
    }

    /// Where a block kept as its own file is (its length says whether it is kept compressed). The caller closes the
    /// descriptor.
    func open(_ block: BlockRef, user: String) throws -> (fd: Int32, path: String, offset: Int64, stored: Int64) {
        let path = path(of: block.hash, user: user)
        let fd = try POSIXFile.openForReading(path)
        do {
            return (fd, path, 0, try POSIXFile.size(fd, path: path))
        } catch {
            POSIXFile.closeFile(fd)
            throw error
        }
    }

    func userDirectory(_ user: String) -> String { blobsDirectory + "/" + user }

    func path(of hash: String, user: String) -> String { userDirectory(user) + "/" + hash }

    func put(_ blocks: [StagedBlock], user: String) async throws {
        let packs = Self.stagedPacks(blocks)
        if !packs.isEmpty {
            let directory = packsDirectory + "/" + user
            try await threadPool.runIfActive {
                try POSIXFile.makeDirectory(directory)
                for pack in packs { try POSIXFile.move(pack.path, to: packPath(pack.id, user: user)) }
                try POSIXFile.syncDirectory(directory)
            }
        }
        let stored = blocks.filter { $0.data == nil && $0.ref.pack == nil }
        guard !stored.isEmpty else { return }
        let directory = userDirectory(user)
        try await threadPool.runIfActive {
            try POSIXFile.makeDirectory(directory)
            var seen: Set<String> = []
            for block in stored {
                if seen.insert(block.ref.hash).inserted {
                    // Rename over an existing copy: same bytes, and the block's age is now.
                    try POSIXFile.move(block.path, to: path(of: block.ref.hash, user: user))
                } else {
                    try POSIXFile.remove(block.path)
                }
            }
            try POSIXFile.syncDirectory(directory)
        }
    }

    func containsBlocking(_ hash: String, user: String) throws -> Bool { POSIXFile.exists(path(of: hash, user: user)) }

    func deleteBlocking(_ hashes: [String], user: String) throws {
        for hash in hashes {
            try POSIXFile.remove(path(of: hash, user: user))
        }
    }

    func read(_ blocks: [BlockRef], user: String, range: Range<Int64>, into body: (ByteBuffer) async throws -> Void) async throws {
        let files = OpenFiles(threadPool: threadPool)
        defer { files.closeAll() }
        try await readCoalesced(
            blocks, user: user, range: range, into: body,
            place: { block in
                if let pack = block.pack { return (packPath(pack.pack, user: user), pack.offset, pack.stored) }
                let path = path(of: block.hash, user: user)
                return (path, 0, try POSIXFile.size(try await files.open(path), path: path))
            },
            expand: { block, path, offset, stored in
                let fd = try await files.open(path)
                return try await threadPool.runIfActive { try Self.expanded(fd, block, path: path, at: offset, stored: stored) } ?? []
            },
            readRun: { path, start, length in
                let fd = try await files.open(path)
                let count = Int(length)
                return try await threadPool.runIfActive {
                    var buffer = ByteBufferAllocator().buffer(capacity: count)
                    try buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: count) { raw in
                        guard let base = raw.baseAddress else { return 0 }
                        return try POSIXFile.readInto(fd, base, count: count, at: start, path: path)
                    }
                    return buffer
                }
            })
    }

    /// One blocking loop on a thread-pool thread, one buffer for every block, each pack opened once: a commit of a
    /// 256 MiB file's 3,600 blocks read this way took half the time of the piece-by-piece async reads. Hashes from
    /// the last point a checksum of the same first blocks reached (``PrefixDigests``).
    func checksum(of blocks: [BlockRef], user: String) async throws -> String {
        try await threadPool.runIfActive {
            var walk = PrefixDigests.shared.walk(blocks, user: user)
            var buffer = [UInt8](repeating: 0, count: 1 << 20)
            var packs: [String: Int32] = [:]
            defer { for fd in packs.values { POSIXFile.closeFile(fd) } }
            for (index, block) in blocks.enumerated().dropFirst(walk.from) {
                defer { walk.passed(index) }
                if let bytes = block.inline {
                    walk.digest.update(data: bytes)
                    continue
                }
                let (fd, path, base, stored): (Int32, String, Int64, Int64)
                if let pack = block.pack {
                    path = packPath(pack.pack, user: user)
                    if let open = packs[path] {
                        fd = open
                    } else {
                        fd = try POSIXFile.openForReading(path)
                        packs[path] = fd
                    }
                    (base, stored) = (pack.offset, pack.stored)
                } else {
                    (fd, path, base, stored) = try open(block, user: user)
                }
                defer { if block.pack == nil { POSIXFile.closeFile(fd) } }
                if let whole = try Self.expanded(fd, block, path: path, at: base, stored: stored) {
                    walk.digest.update(data: whole)
                    continue
                }
                var done: Int64 = 0
                while done < block.size {
                    let want = Int(min(Int64(buffer.count), block.size - done))
                    let got = try buffer.withUnsafeMutableBytes { raw in
                        try POSIXFile.readInto(fd, raw.baseAddress!, count: want, at: base + done, path: path)
                    }
                    guard got == want else { throw DriveError.internalError("Block \(block.hash) is shorter than its manifest says.") }
                    buffer.withUnsafeBytes { walk.digest.update(bufferPointer: UnsafeRawBufferPointer(rebasing: $0[..<got])) }
                    done += Int64(got)
                }
            }
            return walk.checksum
        }
    }

    func storedBlockCount() async throws -> Int {
        (FileManager.default.subpaths(atPath: blobsDirectory) ?? []).filter { $0.contains("/") }.count
            + (FileManager.default.subpaths(atPath: packsDirectory) ?? []).filter { $0.contains("/") }.count
    }

    /// The block's bytes when they are kept compressed (`stored` bytes at `offset`, fewer than the block's size);
    /// nil when they are kept as they are (read them in place).
    static func expanded(_ fd: Int32, _ block: BlockRef, path: String, at offset: Int64, stored: Int64) throws -> [UInt8]? {
        guard stored < block.size else { return nil }
        let bytes = try POSIXFile.read(fd, count: Int(stored), at: offset, path: path)
        return try StoredBlockCodec.expand(bytes, size: block.size, hash: block.hash)
    }

    func checkReachable() async throws {
        guard POSIXFile.exists(blobsDirectory) else { throw DriveError.unavailable("The blob folder \(blobsDirectory) is missing.") }
    }
}

/// Cuts a stream of bytes into content-defined chunks (FastCDC, the same cuts the block API's clients make:
/// ``FastCDC/Parameters/standard``, ~64 KiB) written one after another into packs (``PackWriter``), so that a file
/// uploaded whole (simple, batch, resumable, WebDAV) is made of the same blocks as one sent by blocks, and an
/// edit of it sent later by blocks finds most of them on the server. Each call's content is its own stream: a
/// resumable upload's chunks are cut separately (a forced cut at each chunk's end; FastCDC finds the common cuts
/// again within a block or two after it).
///
/// Memory stays bounded (the chunk being cut, ≤ 256 KiB, and the pack writer's 1 MiB buffer) whatever the content
/// size. Disk writes and fsyncs run on the NIO thread pool, not on Swift's cooperative threads; every block is
/// durable when ``finish()`` returns. Call ``abandon()`` if the upload fails.
struct BlockStager {
    private var writer: PackWriter
    private var scanner = FastCDC.Scanner()
    private var whole: SHA256
    /// Bytes of the chunk not yet ended (from the last cut).
    private var pending: [UInt8] = []
    private var cuts: [Int] = []
    private(set) var totalSize: Int64 = 0

    init(writer: PackWriter, runningHash: SHA256 = SHA256()) {
        self.writer = writer
        self.whole = runningHash
        pending.reserveCapacity(FastCDC.Parameters.standard.maximum)
    }

    mutating func append(_ buffer: ByteBuffer) async throws {
        var chunks: [ArraySlice<UInt8>] = []
        buffer.withUnsafeReadableBytes { raw in
            whole.update(bufferPointer: raw)
            cuts.removeAll(keepingCapacity: true)
            scanner.scan(raw, cuts: &cuts)
            var from = 0
            for cut in cuts {
                pending.append(contentsOf: UnsafeRawBufferPointer(rebasing: raw[from..<cut]))
                chunks.append(pending[...])
                pending = []
                pending.reserveCapacity(FastCDC.Parameters.standard.maximum)
                from = cut
            }
            pending.append(contentsOf: UnsafeRawBufferPointer(rebasing: raw[from...]))
        }
        totalSize += Int64(buffer.readableBytes)
        for chunk in chunks {
            try await writer.add(chunk, hash: nil)  // hashed on the thread pool while this task hashes the whole
        }
    }

    /// Ends the last block and returns the staged blocks (durable), the SHA-256 of everything hashed (including
    /// what the running hash started with), the running hash itself, and the size staged here.
    mutating func finish() async throws -> (blocks: [StagedBlock], checksum: String, runningHash: SHA256, size: Int64) {
        if !pending.isEmpty {
            let chunk = pending
            pending = []
            scanner.reset()
            try await writer.add(chunk, hash: nil)
        }
        let blocks = try await writer.finish()
        let running = whole
        return (blocks, whole.finalize().hexString, running, totalSize)
    }

    /// Deletes every staged file this stager wrote.
    mutating func abandon() async {
        await writer.abandon()
        pending = []
    }
}

extension Digest {
    var hexString: String {
        Hex.encode(self)
    }
}

/// A random token for ids and file names: 20 characters of [0-9a-z] (about 103 bits).
func randomToken(length: Int = 20) -> String {
    // Eight bytes of system randomness per 12 characters (each `next()` is a system call; one per character
    // was 60 calls per upload). 32 symbols = 5 bits each, so no modulo bias.
    let alphabet = Array("0123456789abcdefghijklmnopqrstuv")
    var generator = SystemRandomNumberGenerator()
    var characters: [Character] = []
    characters.reserveCapacity(length)
    var bits: UInt64 = 0
    for index in 0..<length {
        if index % 12 == 0 { bits = generator.next() }
        characters.append(alphabet[Int(bits & 31)])
        bits >>= 5
    }
    return String(characters)
}
