import Crypto
import Foundation
import NIOCore
import NIOPosix

/// Where a block lives inside a pack: the pack's id, the offset of the block's bytes there, and how many bytes they
/// take (fewer than the block's size: kept compressed, see ``StoredBlockCodec``).
struct PackLocation: Sendable, Hashable, Codable {
    var pack: String
    var offset: Int64
    var stored: Int64
}

/// Blocks written one after another into pack files of up to ``maxPackSize`` bytes, instead of a file (or an
/// object) each: ~16,000 blocks of ~64 KiB per GiB cost the local store more in file creation, fsyncs and renames
/// (kernel time) than in writing their bytes. A pack is staged in the store's staging folder, fsynced when it is
/// closed, and put whole by ``BlobStore/put(_:user:)``; each ``StagedBlock`` names its pack and place
/// (``BlockRef/pack``), and the metadata database keeps that place in the block's row. A pack no block row names
/// any more is deleted by the sweep (``SQLMetadataStore/sweepBlocks(orphanedBefore:freedBefore:now:)``); a pack whose blocks the
/// user already had is never put. A pack the sweep leaves more than half dead is compacted (its live blocks written
/// again by a new writer: ``SQLMetadataStore/compactPack(_:userId:now:)``).
struct PackWriter {
    static let maxPackSize: Int64 = 16 * 1024 * 1024
    let stagingDirectory: String
    let threadPool: NIOThreadPool
    /// Whether a block that shrinks by a tenth under zlib is written compressed (the local store's choice).
    var compresses: Bool
    private var current: (fd: Int32, path: String, id: String, size: Int64)?
    /// Bytes added since the last flush, and the blocks among them whose hash is still to be computed (index in
    /// ``blocks``, range in `pending`).
    private var pending: [UInt8] = []
    private var unhashed: [(index: Int, range: Range<Int>)] = []
    /// The last flush: its bytes being hashed and written on the thread pool while the caller goes on receiving
    /// (two cores: the request's task hashes the whole content, this the blocks). At most one at a time.
    private var inFlight: Task<[(Int, String)], any Error>?
    private var paths: [String] = []
    private(set) var blocks: [StagedBlock] = []

    init(stagingDirectory: String, threadPool: NIOThreadPool, compresses: Bool) {
        self.stagingDirectory = stagingDirectory
        self.threadPool = threadPool
        self.compresses = compresses
    }

    /// Appends one whole block. With its `hash` (the caller computed it from `bytes`), or without: then it is
    /// computed on the thread pool, with the write, and filled in by the time ``finish()`` returns.
    mutating func add(_ bytes: some Collection<UInt8>, hash: String?) async throws {
        var stored: [UInt8]? = nil
        if compresses, bytes.count >= 4096, StoredBlockCodec.worthTrying(Array(bytes.prefix(4096))) {
            stored = StoredBlockCodec.compress(Array(bytes))
        }
        let length = Int64(stored?.count ?? bytes.count)
        if let open = current, open.size > 0, open.size + length > Self.maxPackSize {
            try await close()
        }
        if current == nil {
            let id = "p" + randomToken()
            let path = stagingDirectory + "/" + id + ".pack"
            let fd = try await threadPool.runIfActive { try POSIXFile.openForWriting(path) }
            current = (fd, path, id, 0)
            paths.append(path)
        }
        guard var open = current else { return }
        if hash == nil { unhashed.append((blocks.count, pending.count..<pending.count + Int(length))) }
        blocks.append(
            StagedBlock(
                ref: BlockRef(hash: hash ?? "", size: Int64(bytes.count), pack: PackLocation(pack: open.id, offset: open.size, stored: length)),
                path: open.path))
        if let stored { pending += stored } else { pending += bytes }
        open.size += length
        current = open
        if pending.count >= 1 << 20 { try await flush() }
    }

    /// Closes (and fsyncs) the last pack; every block added is then durable and hashed. Returns them, in order.
    mutating func finish() async throws -> [StagedBlock] {
        try await close()
        return blocks
    }

    /// Deletes every pack this writer staged (after the write under way, if any, has ended).
    mutating func abandon() async {
        _ = try? await inFlight?.value
        inFlight = nil
        if let current { POSIXFile.closeFile(current.fd) }
        current = nil
        for path in paths { try? POSIXFile.remove(path) }
        paths = []
        blocks = []
        pending = []
        unhashed = []
    }

    /// Waits for the write under way and fills in the hashes it computed.
    private mutating func settle() async throws {
        guard let job = inFlight else { return }
        inFlight = nil
        for (index, hash) in try await job.value { blocks[index].ref.hash = hash }
    }

    private mutating func flush() async throws {
        try await settle()
        guard let open = current, !pending.isEmpty else { return }
        let bytes = pending
        let toHash = unhashed
        pending = []
        pending.reserveCapacity(1 << 20 + 256 * 1024)
        unhashed = []
        let pool = threadPool
        inFlight = Task {
            try await pool.runIfActive {
                let hashes = toHash.map { ($0.index, SHA256.hash(data: bytes[$0.range]).hexString) }
                try bytes.withUnsafeBytes { try POSIXFile.writeAll(open.fd, $0, path: open.path) }
                return hashes
            }
        }
    }

    private mutating func close() async throws {
        try await flush()
        try await settle()
        guard let open = current else { return }
        current = nil
        defer { POSIXFile.closeFile(open.fd) }
        try await threadPool.runIfActive { try POSIXFile.sync(open.fd, path: open.path) }
    }
}
