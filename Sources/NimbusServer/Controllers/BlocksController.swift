import Crypto
import Foundation
import Hummingbird
import NIOCore
import NIOFoundationCompat
import NimbusAPI

/// Reads the `application/x-nimbus-blocks` framing: `<sha256 hex> <length>\n` then the bytes, again and again.
struct BlockBatchParser {
    enum Event {
        case start(hash: String, length: Int)
        case bytes(ByteBuffer)
        case end(hash: String)
    }

    let maxBlock: Int
    private var line: [UInt8] = []
    private var current: (hash: String, remaining: Int)?

    init(maxBlock: Int) { self.maxBlock = maxBlock }

    /// Consumes the whole buffer; what it held, in order.
    mutating func feed(_ buffer: inout ByteBuffer) throws -> [Event] {
        var events: [Event] = []
        while buffer.readableBytes > 0 {
            if let block = current {
                let take = min(block.remaining, buffer.readableBytes)
                guard let slice = buffer.readSlice(length: take) else { break }
                events.append(.bytes(slice))
                if take == block.remaining {
                    events.append(.end(hash: block.hash))
                    current = nil
                } else {
                    current = (block.hash, block.remaining - take)
                }
                continue
            }
            guard let byte = buffer.readInteger(as: UInt8.self) else { break }
            guard byte == UInt8(ascii: "\n") else {
                line.append(byte)
                guard line.count <= 100 else { throw DriveError.badRequest("A block's header line is longer than '<sha256 hex> <length>'.") }
                continue
            }
            let text = String(decoding: line, as: UTF8.self)
            line.removeAll(keepingCapacity: true)
            let parts = text.split(separator: " ", omittingEmptySubsequences: false)
            guard parts.count == 2, String(parts[0]).isBlockHash, let length = Int(parts[1]), length >= 1 else {
                throw DriveError.badRequest("Each block starts with a line '<sha256 hex> <length>'; '\(text.prefix(100))' is not one.")
            }
            guard length <= maxBlock else { throw DriveError.tooLarge("A block can be at most \(maxBlock) bytes; one is \(length).") }
            current = (String(parts[0]), length)
            events.append(.start(hash: String(parts[0]), length: length))
        }
        return events
    }

    /// At the end of the body: a block cut short or a dangling header line is an error.
    func finish() throws {
        guard current == nil, line.isEmpty else { throw DriveError.badRequest("The body ends in the middle of a block.") }
    }
}

/// Block-level sync: `POST /v1/blocks/missing`, `PUT|GET /v1/blocks/{sha256}`, `POST /v1/blocks/commit`,
/// `GET /v1/files/{id}/blocks`. Blocks are the user's own (the store's per-user namespace); a block sent and never
/// committed is swept after the grace period like any other unreferenced block.
struct BlocksController: Sendable {
    let dependencies: Dependencies

    /// A commit's JSON: 160,000 blocks (a 10 GiB file of 64 KiB chunks) as hashes is about 11 MB.
    static let maxCommitBytes = 32 * 1024 * 1024

    func register(_ routes: inout RouteTable) {
        routes.on(Routes.putBlocks, use: putMany)
        routes.on(Routes.missingBlocks, use: missing)
        routes.on(Routes.commitBlocks, use: commit)
        routes.on(Routes.putBlock, use: put)
        routes.on(Routes.block, use: get)
        routes.on(Routes.manifest, use: manifest)
    }

    static func validHash(_ raw: String, what: String = "The block's hash") throws -> String {
        guard raw.isBlockHash else { throw DriveError.badRequest("\(what) must be a SHA-256 as 64 lowercase hex digits; '\(raw.prefix(80))' is not.") }
        return raw
    }

    /// Which of the given hashes the user's store lacks, in the order asked, each once.
    @Sendable func missing(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        // The user's own blocks: their namespace, through the access decision on their root.
        let owner = try await dependencies.root(for: me, .read).userId
        let asked = try await request.decodeJSON(
            MissingBlocksRequest.self, limit: MissingBlocksRequest.maxHashes * 80 + 1024,
            tooLarge: "Ask about at most \(MissingBlocksRequest.maxHashes) blocks at a time.")
        guard asked.hashes.count <= MissingBlocksRequest.maxHashes else {
            throw DriveError.badRequest("Ask about at most \(MissingBlocksRequest.maxHashes) blocks at a time; this request has \(asked.hashes.count).")
        }
        for hash in asked.hashes { _ = try Self.validHash(hash) }
        let stored = try await dependencies.content.storedBlocks(userId: owner, hashes: asked.hashes)
        var seen: Set<String> = []
        let missing = asked.hashes.filter { stored[$0] == nil && seen.insert($0).inserted }
        return try JSONResponse.make(MissingBlocksResponse(missing: missing))
    }

    /// Stores one block: its bytes must hash to the path's SHA-256 (422 otherwise, nothing kept). Idempotent:
    /// 201 when stored now, 200 when the user's store already had it.
    @Sendable func put(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        // The user's own blocks: their namespace, through the access decision on their root.
        let owner = try await dependencies.root(for: me, .write).userId
        let hash = try Self.validHash(try context.parameter("hash"))
        let limit = dependencies.blobs.blockSize
        if let declared = request.headers[.contentLength].flatMap({ Int($0) }), declared > limit + Self.encodingSlack {
            throw DriveError.tooLarge("A block can be at most \(limit) bytes; this one is \(declared).")
        }
        try dependencies.intake.admit(bytes: request.headers[.contentLength].flatMap { Int64($0) } ?? Int64(limit))
        if let encoding = request.headers[.contentEncoding], encoding.lowercased() != "identity" {
            let decoded = try await Self.decoded(request, encoding: encoding, maxSize: limit)
            return try await put(hash, body: Self.stream(decoded), userId: owner, limit: limit)
        }
        return try await put(hash, body: request.body, userId: owner, limit: limit)
    }

    /// A compressed body (`Content-Encoding: gzip` or `deflate`), decoded: at most `maxSize` bytes once decoded.
    static func decoded(_ request: Request, encoding: String, maxSize: Int) async throws -> ByteBuffer {
        guard BodyEncoding.algorithm(encoding) != nil else {
            throw DriveError.unsupportedEncoding("Content-Encoding: \(encoding) is not taken here; send gzip, deflate or identity.")
        }
        let body: ByteBuffer
        do { body = try await request.body.collect(upTo: maxSize + encodingSlack) } catch {
            throw DriveError.tooLarge("The body can be at most \(maxSize) bytes.")
        }
        return try BodyEncoding.decode(body, encoding: encoding, maxSize: maxSize)
    }

    /// Incompressible bytes grow a little when compressed: room for that.
    static let encodingSlack = 64 * 1024

    static func stream(_ buffer: ByteBuffer) -> AsyncThrowingStream<ByteBuffer, any Error> {
        AsyncThrowingStream { continuation in
            continuation.yield(buffer)
            continuation.finish()
        }
    }

    func put(_ hash: String, body: some AsyncSequence<ByteBuffer, any Error>, userId: String, limit: Int) async throws -> Response {
        let known = try await dependencies.content.storedBlocks(userId: userId, hashes: [hash])[hash]
        if let known, known.live {
            // Already kept: the body is read (and checked) so the connection stays usable, then dropped.
            var digest = SHA256()
            var size = 0
            for try await buffer in body {
                size += buffer.readableBytes
                guard size <= limit else { throw DriveError.tooLarge("A block can be at most \(limit) bytes.") }
                buffer.withUnsafeReadableBytes { digest.update(bufferPointer: $0) }
            }
            let actual = digest.finalize().hexString
            guard actual == hash else { throw DriveError.checksumMismatch(expected: hash, actual: actual) }
            return try JSONResponse.make(StoredBlock(hash: hash, size: known.block.size))
        }
        // At most `limit` (4 MiB) in memory, then written as a pack of one (compressed at rest where that saves a
        // tenth, in the local store).
        var bytes: [UInt8] = []
        var digest = SHA256()
        for try await buffer in body {
            guard bytes.count + buffer.readableBytes <= limit else { throw DriveError.tooLarge("A block can be at most \(limit) bytes.") }
            buffer.withUnsafeReadableBytes { digest.update(bufferPointer: $0) }
            bytes += buffer.readableBytesView
        }
        guard !bytes.isEmpty else { throw DriveError.badRequest("A block holds at least one byte.") }
        let actual = digest.finalize().hexString
        guard actual == hash else { throw DriveError.checksumMismatch(expected: hash, actual: actual) }
        var writer = dependencies.blobs.makePackWriter()
        do {
            try await writer.add(bytes, hash: hash)
            let blocks = try await writer.finish()
            try await dependencies.content.putBlocks(blocks, userId: userId, now: dependencies.now)
        } catch {
            await writer.abandon()
            throw error
        }
        return try JSONResponse.make(StoredBlock(hash: hash, size: Int64(bytes.count)), status: known == nil ? .created : .ok)
    }

    /// Many blocks in one request (`Content-Type: application/x-nimbus-blocks`): for each, a line
    /// `<sha256 hex> <length>\n` then its bytes. Every block is checked before any is kept: one whose bytes do not
    /// hash to its line's SHA-256 fails the request (422) and none of them is stored. Up to ``maxBatchBlocks``
    /// blocks and ``maxBatchBytes`` bytes a request; answers 200 with the blocks stored, in order. The body may come
    /// compressed (`Content-Encoding: gzip` or `deflate`).
    @Sendable func putMany(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        // The user's own blocks: their namespace, through the access decision on their root.
        let owner = try await dependencies.root(for: me, .write).userId
        let framed = Self.maxBatchBytes + Self.maxBatchBlocks * 80
        if let declared = request.headers[.contentLength].flatMap({ Int($0) }), declared > framed + Self.encodingSlack {
            throw DriveError.tooLarge("A request can carry at most \(Self.maxBatchBytes) bytes of blocks; send the rest in another.")
        }
        try dependencies.intake.admit(bytes: request.headers[.contentLength].flatMap { Int64($0) } ?? Int64(Self.maxBatchBytes))
        if let encoding = request.headers[.contentEncoding], encoding.lowercased() != "identity" {
            let decoded = try await Self.decoded(request, encoding: encoding, maxSize: framed)
            return try await putMany(Self.stream(decoded), userId: owner)
        }
        return try await putMany(request.body, userId: owner)
    }

    func putMany(_ body: some AsyncSequence<ByteBuffer, any Error>, userId: String) async throws -> Response {
        let limit = dependencies.blobs.blockSize
        var parser = BlockBatchParser(maxBlock: limit)
        var staged: [StagedBlock] = []
        // The request's blocks one after another in packs (one fsync each), the block being read in memory (≤ 4 MiB).
        var writer = dependencies.blobs.makePackWriter()
        var current: (bytes: [UInt8], digest: SHA256)?
        var total = 0
        do {
            for try await buffer in body {
                var buffer = buffer
                for event in try parser.feed(&buffer) {
                    switch event {
                    case .start(_, let length):
                        guard staged.count < Self.maxBatchBlocks else {
                            throw DriveError.tooLarge("A request can carry at most \(Self.maxBatchBlocks) blocks; send the rest in another.")
                        }
                        total += length
                        guard total <= Self.maxBatchBytes else {
                            throw DriveError.tooLarge("A request can carry at most \(Self.maxBatchBytes) bytes of blocks; send the rest in another.")
                        }
                        current = ([], SHA256())
                        current?.bytes.reserveCapacity(length)
                    case .bytes(let slice):
                        slice.withUnsafeReadableBytes { current?.digest.update(bufferPointer: $0) }
                        current?.bytes += slice.readableBytesView
                    case .end(let hash):
                        guard let block = current else { continue }
                        current = nil
                        let checksum = block.digest.finalize().hexString
                        guard checksum == hash else { throw DriveError.checksumMismatch(expected: hash, actual: checksum) }
                        try await writer.add(block.bytes, hash: hash)
                    }
                }
            }
            try parser.finish()
            staged = try await writer.finish()
            guard !staged.isEmpty else { throw DriveError.badRequest("Send at least one block.") }
            try await dependencies.content.putBlocks(staged, userId: userId, now: dependencies.now)
        } catch {
            await writer.abandon()
            throw error
        }
        return try JSONResponse.make(StoredBlocks(stored: staged.map { StoredBlock(hash: $0.ref.hash, size: $0.ref.size) }))
    }

    static let maxBatchBlocks = 1000
    /// 16 MiB: a compressed request is decoded in memory.
    static let maxBatchBytes = 16 * 1024 * 1024

    /// A block's bytes (the user's own, part of a live file, revision, trashed item or upload).
    @Sendable func get(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        // The user's own blocks: their namespace, through the access decision on their root.
        let owner = try await dependencies.root(for: me, .read).userId
        let hash = try Self.validHash(try context.parameter("hash"))
        guard let found = try await dependencies.content.storedBlocks(userId: owner, hashes: [hash])[hash], found.live else {
            throw DriveError.notFound("No such block.")
        }
        var headers: HTTPFields = [
            .eTag: "\"\(hash)\"", .contentType: "application/octet-stream", .contentLength: String(found.block.size),
            .cacheControl: "private, max-age=31536000, immutable", .vary: "Accept-Encoding",
        ]
        if let condition = request.headers[.ifNoneMatch], ETag.matches(condition, hash) {
            return Response(status: .notModified, headers: headers)
        }
        let blobs = dependencies.blobs
        let userId = owner
        if let encoding = BodyEncoding.accepted(request.headers[.acceptEncoding]) {
            // Compressed on the wire when that saves a tenth (text, not photos): the block is read whole (≤ 4 MiB).
            var whole = ByteBuffer()
            try await blobs.read([found.block], user: userId, range: 0..<found.block.size) { piece in
                var piece = piece
                whole.writeBuffer(&piece)
            }
            if let encoded = BodyEncoding.encode(whole, as: encoding) {
                headers[.contentEncoding] = encoding
                headers[.contentLength] = String(encoded.readableBytes)
                return Response(status: .ok, headers: headers, body: ResponseBody(byteBuffer: encoded))
            }
            return Response(status: .ok, headers: headers, body: ResponseBody(byteBuffer: whole))
        }
        let body = ResponseBody(contentLength: Int(found.block.size)) { writer in
            try await blobs.read([found.block], user: userId, range: 0..<found.block.size) { try await writer.write($0) }
            try await writer.finish(nil)
        }
        return Response(status: .ok, headers: headers, body: body)
    }

    /// The blocks of a file's head revision, or of `?revisionId=`, in order.
    @Sendable func manifest(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        let file = try await dependencies.item(try context.parameter("fileId"), for: me, .read)
        guard !file.isFolder, let head = file.headRevisionId else {
            throw DriveError.badRequest("'\(file.name)' is a folder; it has no content.", code: .isAFolder)
        }
        let (revision, blocks) = try await dependencies.content.revisionWithBlocks(userId: file.userId, revisionId: request.query("revisionId") ?? head)
        guard revision.fileId == file.id else { throw DriveError.notFound("No such revision.") }
        let manifest = BlockManifest(
            fileId: file.id, revisionId: revision.id, size: revision.size, checksum: revision.checksum,
            blocks: blocks.map { BlockManifest.Block(hash: $0.hash, size: $0.size) })
        return try JSONResponse.make(manifest, etag: revision.id)
    }

    /// A new file or version from an ordered block list. Every block must be stored (409 `blocks_missing` names
    /// the others), their sizes must add up to `size` and their bytes hash to `checksum` (422), then the commit
    /// follows the rules of every upload (name clash, `If-Match`, quota, 10 GiB, `requestId`).
    @Sendable func commit(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        let body = try await request.decodeJSON(
            BlockCommitRequest.self, limit: Self.maxCommitBytes, tooLarge: "A commit's JSON can be at most \(Self.maxCommitBytes) bytes.")
        let checksum = try Self.validHash(body.checksum, what: "'checksum'")
        let modifiedAt = try FilesController.validModifiedAt(body.modifiedAt)
        let max = dependencies.configuration.maxUploadSize
        guard body.size >= 0 else { throw DriveError.badRequest("'size' must be the content's length in bytes.") }
        guard body.size <= max else { throw DriveError.tooLarge("Files can be at most \(max) bytes; this one is \(body.size).") }

        // The target, checked as a simple upload checks it (a folder or trashed file is refused by the commit).
        if body.fileId != nil, body.requestId != nil || body.name != nil || body.parentId != nil {
            throw DriveError.badRequest("A new version names only 'fileId' (guarded by If-Match); 'name', 'parentId' and 'requestId' are for a new file.")
        }
        let (target, mimeType, owner) = try await UploadController.target(
            dependencies, for: me, request: request, fileId: body.fileId, name: body.name, parentId: body.parentId,
            requestId: try FilesController.validRequestId(body.requestId), sentType: body.mimeType)

        // The block list, with the base revision's runs expanded.
        var base: [BlockRef] = []
        if let baseRevisionId = body.baseRevisionId {
            base = try await dependencies.content.revisionWithBlocks(userId: owner, revisionId: baseRevisionId).blocks
        }
        var hashes: [String] = []
        for entry in body.blocks {
            if case .block(let hash) = entry { hashes.append(try Self.validHash(hash)) }
        }
        let stored = try await dependencies.content.storedBlocks(userId: owner, hashes: hashes)
        // Into a share someone gave the asker: the blocks they sent are in their own store (blocks are kept per
        // user), the file is the owner's. Those are copied into the owner's store at the commit (below).
        let theirs = owner == me.userId ? [:] : try await dependencies.content.storedBlocks(userId: me.userId, hashes: hashes.filter { stored[$0] == nil })
        var missing: [String] = []
        var seenMissing: Set<String> = []
        var blocks: [BlockRef] = []
        var sources: [String] = []
        var fromBase: [String] = []
        blocks.reserveCapacity(body.blocks.count)
        for entry in body.blocks {
            switch entry {
            case .block(let hash):
                if let found = stored[hash] {
                    blocks.append(found.block)
                    sources.append(owner)
                } else if let found = theirs[hash] {
                    blocks.append(found.block)
                    sources.append(me.userId)
                } else if seenMissing.insert(hash).inserted {
                    missing.append(hash)
                }
            case .base(let from, let count):
                guard body.baseRevisionId != nil else { throw DriveError.badRequest("A {from, count} entry takes blocks of 'baseRevisionId'; name it.") }
                guard from >= 0, count >= 1, from <= base.count - count else {
                    throw DriveError.badRequest("The entry {from: \(from), count: \(count)} is outside the base revision's \(base.count) blocks.")
                }
                blocks += base[from..<from + count]
                sources += Array(repeating: owner, count: count)
                fromBase += base[from..<from + count].map(\.hash)
            }
        }
        // A base block found damaged since (bit rot) is missing too: the client has its bytes, and sending them heals it.
        let damaged = fromBase.isEmpty ? [] : try await dependencies.content.damagedBlocks(userId: owner, hashes: fromBase)
        for hash in damaged.sorted() where seenMissing.insert(hash).inserted {
            missing.append(hash)
        }
        guard missing.isEmpty else { throw DriveError.blocksMissing(missing) }
        let total = blocks.reduce(Int64(0)) { $0 + $1.size }
        guard total == body.size else {
            throw DriveError.badRequest("The blocks add up to \(total) bytes, not the 'size' of \(body.size); nothing was changed.")
        }
        if sources.contains(me.userId), owner != me.userId {
            // Some blocks are the asker's: the bytes are staged anew for the owner; the client's checksum is checked on them.
            var content = try await dependencies.intake.restage(blocks, from: sources, for: owner, mimeType: mimeType)
            try dependencies.intake.verify(content, expected: checksum)
            content.modifiedAt = modifiedAt
            let file = try await dependencies.intake.commit(content, to: target, owner: owner)
            return try JSONResponse.make(try await dependencies.present(file, for: me), status: .created, etag: file.etag)
        }
        // The content must be what the client says: its bytes are read back once and hashed.
        let actual = try await dependencies.blobs.checksum(of: blocks, user: owner)
        guard actual == checksum else { throw DriveError.checksumMismatch(expected: checksum, actual: actual) }

        var content = StagedContent(
            blocks: blocks.map { StagedBlock(ref: BlockRef(hash: $0.hash, size: $0.size), path: "", data: $0.inline) },
            checksum: checksum, size: total, mimeType: mimeType)
        content.modifiedAt = modifiedAt
        let file = try await dependencies.content.commitStoredContent(userId: owner, target: target, content: content, now: dependencies.now)
        return try JSONResponse.make(try await dependencies.present(file, for: me), status: .created, etag: file.etag)
    }
}
