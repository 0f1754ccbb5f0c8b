import CompressNIO
import Crypto
import Foundation
import NIOCore
import NIOFoundationCompat
import NimbusAPI

/// A provider that can build a download from content this device already has (``DeltaDownloadProvider``).
public protocol DeltaDownloadProvider: RemoteProvider {
    /// Downloads at least this big are worth a manifest request.
    var deltaMinimum: Int64 { get }
    /// As ``RemoteProvider/download(_:revision:to:progress:)``, taking every block some local file already holds —
    /// `seeds` (files that may hold much of the same content, such as the version being replaced), and files of
    /// this device that the block index says hold one (`locate` gives the local copy of a file by id, or nil) —
    /// each checked by its SHA-256, and fetching only the rest.
    func download(
        _ id: String, revision: String?, to destination: DownloadTarget, reusing seeds: [URL], locate: @escaping @Sendable (String) async -> URL?,
        progress: @escaping @Sendable (Int64) -> Void
    ) async throws
}

/// One content-defined chunk of a local file.
struct LocalChunk: Sendable, Hashable {
    var offset: Int64
    var length: Int
    var hash: String
}

enum LocalChunking {
    /// The file's FastCDC chunks with their SHA-256, and its size: read 8 MiB at a time, the chunks of each window
    /// hashed on every core (the cut points, at 2 GB/s, are found on one).
    static func chunks(of url: URL, sealing: ContentSealing? = nil) throws -> (chunks: [LocalChunk], size: Int64) {
        var reader = try Reader(url: url, sealing: sealing)
        defer { reader.close() }
        var chunks: [LocalChunk] = []
        while let window = try reader.next() { chunks += window }
        return (chunks, reader.size)
    }

    /// The chunks of a file, window by window (8 MiB read at a time): so an upload can send the first chunks while
    /// the rest of the file is still being cut.
    struct Reader {
        private let handle: ContentReader
        private var cutter = Cutter()
        private var ended = false
        /// The bytes read so far (the file's size once ``next()`` has returned nil).
        var size: Int64 { cutter.size }

        init(url: URL, sealing: ContentSealing?) throws {
            handle = try ContentReader(url: url, sealing: sealing)
        }

        func close() { handle.close() }

        /// The chunks that end in the next window (possibly none), or nil at the end of the file.
        mutating func next() throws -> [LocalChunk]? {
            guard !ended else { return nil }
            guard let data = try handle.read(upToCount: 8 << 20), !data.isEmpty else {
                ended = true
                return cutter.finish()
            }
            return cutter.take(data)
        }
    }

    /// FastCDC over bytes given window by window: the chunks that end in each, with their SHA-256 (hashed on every
    /// core), and the last one at the end. One buffer holds the chunk going on and the new window, reused (a fresh
    /// 8 MiB buffer per window cost a page fault per 4 KiB).
    struct Cutter {
        private var scanner = FastCDC.Scanner()
        private var window: [UInt8] = []  // the chunk going on, then the bytes taken since
        private var windowStart: Int64 = 0  // where `window` starts in the file
        private var cuts: [Int] = []
        private var ranges: [Range<Int>] = []  // the chunks the last cut found, in `window`
        /// The bytes taken so far.
        var size: Int64 { windowStart + Int64(window.count) }

        mutating func take(_ data: Data) -> [LocalChunk] {
            data.withUnsafeBytes { cut($0) }
            return hashed()
        }

        /// Finds the chunks that end in `data`; ``hashed()`` gives them, and must be asked before the next cut.
        mutating func cut(_ data: UnsafeRawBufferPointer) {
            dropHashed()
            let carried = window.count
            cuts.removeAll(keepingCapacity: true)
            scanner.scan(data, cuts: &cuts)
            window.append(contentsOf: data)
            var from = 0
            for cut in cuts {
                ranges.append(from..<carried + cut)
                from = carried + cut
            }
        }

        /// What ended at the last cut leaves the buffer; the chunk going on moves to its start.
        private mutating func dropHashed() {
            guard let last = ranges.last else { return }
            windowStart += Int64(last.upperBound)
            window.removeSubrange(0..<last.upperBound)
            ranges.removeAll(keepingCapacity: true)
        }

        /// The chunks the last ``cut(_:)`` found, with their SHA-256, hashed on every core.
        func hashed() -> [LocalChunk] {
            window.withUnsafeBytes { bytes in
                zip(ranges, LocalChunking.hashes(of: bytes, ranges)).map { range, hash in
                    LocalChunk(offset: windowStart + Int64(range.lowerBound), length: range.count, hash: hash)
                }
            }
        }

        /// The last chunk (nil when the bytes ended on a cut, or there were none).
        mutating func finish() -> [LocalChunk]? {
            dropHashed()
            guard !window.isEmpty else { return nil }
            let chunk = LocalChunk(offset: windowStart, length: window.count, hash: FileHasher.hex(SHA256.hash(data: window)))
            windowStart += Int64(window.count)
            window = []
            return [chunk]
        }
    }

    // MARK: Cut while the scan hashes

    /// The smallest file a scan cuts (a new version of 1 MiB or more goes up by blocks).
    static let cutMinimum: Int64 = 1 << 20
    /// Chunks cut by scans, by the content's SHA-256 (a few files' worth; taken by the upload that uses them).
    static let precut = LockedBox([String: (size: Int64, chunks: [LocalChunk])]())
    static let precutLimit = 8

    /// The chunks a scan cut of content with this checksum and size, once.
    static func takePrecut(checksum: String, size: Int64) -> [LocalChunk]? {
        precut.withLock { cache in
            guard let entry = cache.removeValue(forKey: checksum), entry.size == size else { return nil }
            return entry.chunks
        }
    }

    /// The file's SHA-256 and size, as ``FileHasher/sha256(of:)`` — and, read in the same pass, its chunks, kept for
    /// the upload (``takePrecut(checksum:size:)``): the whole-content hash on one core, the cut and the chunks' hashes
    /// beside it. A scan that found a big file changed used to read it for its hash, then the upload read and cut it
    /// again; the chunks' hashes are checked by the server as blocks arrive, so a file changed between the two fails
    /// there (422) and is scanned again.
    static func hashAndCut(_ url: URL) throws -> (checksum: String, size: Int64) {
        final class Work: @unchecked Sendable {  // each of the two threads touches its own fields
            var whole = SHA256()
            var cutter = Cutter()
            var buffer = [UInt8](repeating: 0, count: 8 << 20)
            var count = 0
        }
        let descriptor = open(url.path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw FileHasher.readError(url) }
        defer { close(descriptor) }
        let work = Work()
        var chunks: [LocalChunk] = []
        while true {
            // A whole window, as a Reader reads it.
            guard let count = work.buffer.withUnsafeMutableBytes({ FileHasher.fill(descriptor, $0) }) else { throw FileHasher.readError(url) }
            guard count > 0 else { break }
            work.count = count
            // The whole-content hash beside the cut points (each ~2 GB/s on one core), then the chunks' hashes on both.
            DispatchQueue.concurrentPerform(iterations: 2) { side in
                work.buffer.withUnsafeBytes { bytes in
                    let data = UnsafeRawBufferPointer(rebasing: bytes[..<work.count])
                    if side == 0 { work.whole.update(bufferPointer: data) } else { work.cutter.cut(data) }
                }
            }
            chunks += work.cutter.hashed()
            if count < work.buffer.count { break }
        }
        chunks += work.cutter.finish() ?? []
        let checksum = FileHasher.hex(work.whole.finalize())
        let size = work.cutter.size
        precut.withLock { cache in
            if cache.count >= precutLimit { cache.removeAll() }
            cache[checksum] = (size, chunks)
        }
        return (checksum, size)
    }

    /// Whether given part ends can be blocks: growing, none over 4 MiB long, the last the file's end.
    static func usable(_ ends: [Int64], size: Int64) -> Bool {
        var previous: Int64 = 0
        for end in ends {
            guard end > previous, end - previous <= 4 << 20 else { return false }
            previous = end
        }
        return previous == size
    }

    /// The file's parts ending at `ends` (``usable(_:size:)``), with their SHA-256, and its size.
    static func chunks(of url: URL, endingAt ends: [Int64], sealing: ContentSealing? = nil) throws -> (chunks: [LocalChunk], size: Int64) {
        let handle = try ContentReader(url: url, sealing: sealing)
        defer { handle.close() }
        var chunks: [LocalChunk] = []
        chunks.reserveCapacity(ends.count)
        var start: Int64 = 0
        var next = 0
        while next < ends.count {
            // About 8 MiB of parts at a time, hashed on every core.
            var last = next
            while last + 1 < ends.count, ends[last + 1] - start <= 8 << 20 { last += 1 }
            let windowEnd = ends[last]
            guard let window = try handle.read(upToCount: Int(windowEnd - start)), window.count == Int(windowEnd - start) else {
                throw ProviderError.checksumMismatch
            }
            var ranges: [Range<Int>] = []
            var from = start
            for index in next...last {
                ranges.append(Int(from - start)..<Int(ends[index] - start))
                from = ends[index]
            }
            for (range, hash) in zip(ranges, hashes(of: window, ranges)) {
                chunks.append(LocalChunk(offset: start + Int64(range.lowerBound), length: range.count, hash: hash))
            }
            start = windowEnd
            next = last + 1
        }
        guard try handle.read(upToCount: 1)?.isEmpty ?? true else { throw ProviderError.checksumMismatch }
        return (chunks, start)
    }

    /// The SHA-256 of each range of `window`, on every core.
    static func hashes(of window: UnsafeRawBufferPointer, _ ranges: [Range<Int>]) -> [String] {
        /// Pointers the worker threads share: each writes its own slot, all read the same window.
        struct Shared<T>: @unchecked Sendable { let value: T }
        var results = [String](repeating: "", count: ranges.count)
        results.withUnsafeMutableBufferPointer { out in
            let source = Shared(value: window), target = Shared(value: out)
            DispatchQueue.concurrentPerform(iterations: ranges.count) { index in
                target.value[index] = FileHasher.hex(SHA256.hash(data: UnsafeRawBufferPointer(rebasing: source.value[ranges[index]])))
            }
        }
        return results
    }

    static func hashes(of window: Data, _ ranges: [Range<Int>]) -> [String] {
        window.withUnsafeBytes { hashes(of: $0, ranges) }
    }

    /// `length` bytes of `url` at `offset`, or nil when the file no longer has them.
    static func read(_ url: URL, offset: Int64, length: Int) -> Data? {
        guard let handle = try? FileHandle(forReadingFrom: url) else { return nil }
        defer { try? handle.close() }
        guard (try? handle.seek(toOffset: UInt64(offset))) != nil, let data = try? handle.read(upToCount: length), data.count == length else { return nil }
        return data
    }
}

/// Block-level transfers against the server's `/v1/blocks/…` API: a new version or a big new file is
/// cut into content-defined chunks, only the chunks the server lacks are sent, then the file is committed as the
/// list of its chunks — runs of the base revision's chunks by index, so a small edit of a big file commits a short
/// list. Resumable by nature: chunks sent before a crash are still there (for the grace period) and are not sent
/// again. A server without the block API (404) is remembered, and uploads go the whole-file way.
extension DeltaDownloadProvider {
    /// The delta download into a plain file.
    public func download(
        _ id: String, revision: String?, to url: URL, reusing seeds: [URL], locate: @escaping @Sendable (String) async -> URL?,
        progress: @escaping @Sendable (Int64) -> Void
    ) async throws {
        try await download(id, revision: revision, to: DownloadTarget(url: url), reusing: seeds, locate: locate, progress: progress)
    }
}

extension NimbusProvider: DeltaDownloadProvider {
    func shouldUploadBlocks(_ source: UploadSource, _ target: UploadTarget) -> Bool {
        guard blockUploads, blocksSupported.withLock({ $0 }) != false else { return false }
        switch target {
        case .new: return source.size > simpleUploadLimit
        case .version(_, let base): return base != nil ? source.size >= deltaMinimum : source.size > simpleUploadLimit
        }
    }

    /// A revision's blocks; nil when the server has no block API.
    func manifest(_ fileId: String, revision: String?) async throws -> BlockManifest? {
        let (head, data) = try await send(TransportRequest(Routes.manifest, fileId, query: ["revisionId": revision]))
        if head.status == 404 { return nil }
        try Self.check(head, data)
        return try Self.decode(BlockManifest.self, data)
    }

    /// The blocks of the last revision of `fileId` this device sent or fetched as blocks — in the device's block
    /// index when the state store keeps one (the engine's does), else one state entry per file: a new version based
    /// on it needs neither its manifest (hundreds of KiB for a big file) nor to ask about the blocks it already has.
    func rememberedBlocks(_ fileId: String, revision: String) -> [BlockManifest.Block]? {
        if let index = state as? any BlockIndexStore {
            guard let known = try? index.blocks(of: fileId), known.revision == revision else { return nil }
            return known.blocks
        }
        guard let text = try? state.value(for: "nimbus.blocks.\(fileId)") else { return nil }
        var lines = text.split(separator: "\n")
        guard lines.first.map(String.init) == revision else { return nil }
        lines.removeFirst()
        var blocks: [BlockManifest.Block] = []
        blocks.reserveCapacity(lines.count)
        for line in lines {
            let parts = line.split(separator: " ")
            guard parts.count == 2, let size = Int64(parts[1]) else { return nil }
            blocks.append(BlockManifest.Block(hash: String(parts[0]), size: size))
        }
        return blocks
    }

    func rememberBlocks(_ fileId: String, revision: String?, _ blocks: [BlockManifest.Block]) {
        guard let revision else { return }
        if let index = state as? any BlockIndexStore {
            try? index.setBlocks(blocks, of: fileId, revision: revision)
            return
        }
        var text = revision
        text.reserveCapacity(revision.count + blocks.count * 72)
        for block in blocks { text += "\n\(block.hash) \(block.size)" }
        try? state.setValue(text, for: "nimbus.blocks.\(fileId)")
    }

    /// The hashes among `hashes` that the server lacks; nil when it has no block API.
    func missingBlocks(_ hashes: [String]) async throws -> Set<String>? {
        var missing: Set<String> = []
        for start in stride(from: 0, to: hashes.count, by: MissingBlocksRequest.maxHashes) {
            let part = Array(hashes[start..<min(start + MissingBlocksRequest.maxHashes, hashes.count)])
            let (head, data) = try await send(
                TransportRequest(Routes.missingBlocks, body: try JSONEncoder.nimbus.encode(MissingBlocksRequest(hashes: part))),
                json: true)
            if head.status == 404 || head.status == 405 {
                blocksSupported.withLock { $0 = false }
                return nil
            }
            try Self.check(head, data)
            missing.formUnion(try Self.decode(MissingBlocksResponse.self, data).missing)
        }
        blocksSupported.withLock { $0 = true }
        return missing
    }

    /// Sends the chunks (read again from the file; the server checks each hash, so a file changed meanwhile is a
    /// checksum mismatch, never a wrong block): many to a request (`POST /v1/blocks`, up to 8 MiB or 128 blocks),
    /// three requests at a time.
    func sendBlocks(_ chunks: [LocalChunk], from source: UploadSource, sent: LockedBox<Int64>, progress: @escaping @Sendable (Int64) -> Void) async throws {
        var requests = BlockRequests()
        var batches = chunks.compactMap { requests.add($0) }
        if let last = requests.rest() { batches.append(last) }
        try await withThrowingTaskGroup(of: Void.self) { group in
            var running = 0
            for batch in batches {
                try await launch(batch, in: &group, running: &running, from: source, sent: sent, progress: progress)
            }
            try await group.waitForAll()
        }
        bytesSent.withLock { $0 += chunks.reduce(0) { $0 + Int64($1.length) } }
    }

    /// Chunks gathered into requests of up to 8 MiB or 128 blocks.
    struct BlockRequests {
        private var batch: [LocalChunk] = []
        private var bytes = 0

        /// Adds a chunk; returns the request it closed (the chunk starts the next), if any.
        mutating func add(_ chunk: LocalChunk) -> [LocalChunk]? {
            var closed: [LocalChunk]?
            if !batch.isEmpty && (bytes + chunk.length > 8 << 20 || batch.count == 128) {
                closed = batch
                (batch, bytes) = ([], 0)
            }
            batch.append(chunk)
            bytes += chunk.length
            return closed
        }

        /// The last request, not full (nil when empty).
        mutating func rest() -> [LocalChunk]? {
            defer { (batch, bytes) = ([], 0) }
            return batch.isEmpty ? nil : batch
        }
    }

    /// Sends `batch` in `group`, first waiting for one of three requests in flight to end.
    func launch(
        _ batch: [LocalChunk], in group: inout ThrowingTaskGroup<Void, any Error>, running: inout Int, from source: UploadSource,
        sent: LockedBox<Int64>, progress: @escaping @Sendable (Int64) -> Void
    ) async throws {
        if running == 3 { (_, running) = (try await group.next(), running - 1) }
        group.addTask { try await self.sendBatch(batch, from: source, sent: sent, progress: progress) }
        running += 1
        // A simulation's turns: one request at a time (this batch ends before anything else is asked).
        if Turns.serial { (_, running) = (try await group.next(), running - 1) }
    }

    /// One `POST /v1/blocks` of `batch`'s chunks, read from the file (compressed when that helps).
    func sendBatch(_ batch: [LocalChunk], from source: UploadSource, sent: LockedBox<Int64>, progress: @escaping @Sendable (Int64) -> Void) async throws {
        guard var request = try? Self.framedBlocks(batch, from: source), let body = request.body else { throw ProviderError.checksumMismatch }
        if self.compressesBlocks.withLock({ $0 }) != false, let encoded = BlockCompression.deflate(body, sample: batch.first?.length ?? 0) {
            request.body = encoded
            request.headers["Content-Encoding"] = "deflate"
        }
        var (head, data) = try await self.send(request)
        if head.status == 415, request.headers["Content-Encoding"] != nil {
            // A server that takes blocks only as they are: never compress for it again.
            self.compressesBlocks.withLock { $0 = false }
            request.body = body
            request.headers["Content-Encoding"] = nil
            (head, data) = try await self.send(request)
        }
        try Self.check(head, data)
        self.bytesOnWire.withLock { $0 += Int64(request.body?.count ?? 0) }
        let length = batch.reduce(Int64(0)) { $0 + Int64($1.length) }
        progress(sent.withLock { $0 += length; return $0 })
    }

    /// `POST /v1/blocks` of `batch`'s chunks in the `application/x-nimbus-blocks` framing, each read from the file
    /// straight into its place in one buffer (no buffer per chunk, no copy). Throws when the file is shorter than a
    /// chunk's end.
    static func framedBlocks(_ batch: [LocalChunk], from source: UploadSource) throws -> TransportRequest {
        let headers = batch.map { Array("\($0.hash) \($0.length)\n".utf8) }
        let count = zip(batch, headers).reduce(0) { $0 + $1.0.length + $1.1.count }
        let reader = try source.open()
        defer { reader.close() }
        return try TransportRequest(method: Routes.putBlocks.method, path: Routes.putBlocks.path(), headers: ["Content-Type": StoredBlocks.contentType], bodyOf: count) { raw in
            var at = 0
            for (chunk, header) in zip(batch, headers) {
                raw[at..<at + header.count].copyBytes(from: header)
                at += header.count
                let place = UnsafeMutableRawBufferPointer(rebasing: raw[at..<at + chunk.length])
                guard try reader.read(offset: Int64(chunk.offset), into: place) else { throw ProviderError.checksumMismatch }
                at += chunk.length
            }
        }
    }

    /// The upload as blocks; nil when the server turns out to have no block API (the caller sends the file whole).
    func blockUpload(
        _ source: UploadSource, to target: UploadTarget, requestId: String, progress: @escaping @Sendable (Int64) -> Void
    ) async throws -> RemoteItem? {
        // No whole-file hash here (one SHA-256 pass per byte, not two): the server hashes the committed blocks and
        // refuses a checksum they do not have (422 → checksumMismatch), so a file changed since it was scanned
        // cannot be committed under the old checksum.
        // The base revision's blocks: what the server surely has, and what the list can name by index.
        var baseRevision: String?
        var baseBlocks: [BlockManifest.Block] = []
        if case .version(let fileId, let revision?) = target {
            if let known = rememberedBlocks(fileId, revision: revision) {
                (baseRevision, baseBlocks) = (revision, known)
            } else if let fetched = try? await manifest(fileId, revision: revision) {
                (baseRevision, baseBlocks) = (fetched.revisionId, fetched.blocks)
            }
        }
        var baseIndex: [String: Int] = [:]
        for (index, block) in baseBlocks.enumerated() where baseIndex[block.hash] == nil { baseIndex[block.hash] = index }

        // The file cut window by window (8 MiB), each window's new chunks asked about and the missing ones sent —
        // three requests at a time — while the next windows are cut: the first bytes go before the file is read to
        // its end. (The crypt remote gives its parts' ends: all at once.)
        var reader: LocalChunking.Reader?
        var given: [LocalChunk]?
        do {
            if let boundaries = source.boundaries, LocalChunking.usable(boundaries, size: source.size) {
                given = try LocalChunking.chunks(of: source.url, endingAt: boundaries, sealing: source.sealing).chunks
            } else if source.sealing == nil, let cut = LocalChunking.takePrecut(checksum: source.checksum, size: source.size) {
                given = cut  // cut by the scan that hashed it
            } else {
                reader = try LocalChunking.Reader(url: source.url, sealing: source.sealing)
            }
        } catch { throw ProviderError.checksumMismatch }
        defer { reader?.close() }
        var local: [LocalChunk] = []
        var seen: Set<String> = []
        var queued: Set<String> = []
        let sent = LockedBox(Int64(0))
        let supported = try await withThrowingTaskGroup(of: Void.self) { group -> Bool in
            var running = 0
            var requests = BlockRequests()
            var finished = false
            while !finished {
                var window: [LocalChunk]?
                do {
                    if reader != nil { window = try reader?.next() } else { (window, given) = (given, nil) }
                } catch { throw ProviderError.checksumMismatch }
                var ready: [[LocalChunk]] = []
                if let window {
                    local += window
                    let asked = window.map(\.hash).filter { baseIndex[$0] == nil && seen.insert($0).inserted }
                    var missing: Set<String> = []
                    if !asked.isEmpty {
                        guard let found = try await missingBlocks(asked) else { return false }  // no block API here
                        missing = found
                    }
                    var skipped: Int64 = 0
                    for chunk in window {
                        guard missing.contains(chunk.hash), queued.insert(chunk.hash).inserted else {
                            skipped += Int64(chunk.length)
                            continue
                        }
                        if let closed = requests.add(chunk) { ready.append(closed) }
                    }
                    if skipped > 0 { progress(sent.withLock { $0 += skipped; return $0 }) }
                } else {
                    finished = true
                    if let last = requests.rest() { ready.append(last) }
                }
                for toSend in ready {
                    try await launch(toSend, in: &group, running: &running, from: source, sent: sent, progress: progress)
                }
            }
            try await group.waitForAll()
            return true
        }
        guard supported else { return nil }
        bytesSent.withLock { $0 += local.filter { queued.contains($0.hash) }.reduce(0) { $0 + Int64($1.length) } }
        guard local.reduce(Int64(0), { $0 + Int64($1.length) }) == source.size else { throw ProviderError.checksumMismatch }
        /// The file's chunks with these hashes, each once.
        func chunks(among hashes: Set<String>) -> [LocalChunk] {
            var queued: Set<String> = []
            return local.filter { hashes.contains($0.hash) && queued.insert($0.hash).inserted }
        }

        // The list: runs of the base's blocks where the content follows the base, hashes elsewhere.
        var entries: [BlockListEntry] = []
        var index = 0
        while index < local.count {
            if let at = baseIndex[local[index].hash] {
                var count = 1
                while index + count < local.count, at + count < baseBlocks.count, baseBlocks[at + count].hash == local[index + count].hash {
                    count += 1
                }
                entries.append(.base(from: at, count: count))
                index += count
            } else {
                entries.append(.block(local[index].hash))
                index += 1
            }
        }
        var request = BlockCommitRequest(
            baseRevisionId: baseRevision, size: source.size, checksum: source.checksum, blocks: entries, modifiedAt: source.modified)
        var headers: [String: String] = [:]
        switch target {
        case .new(let parentId, let name, let mimeType):
            request.name = name
            request.parentId = parentId
            request.mimeType = mimeType ?? MimeType.guess(forName: name)
            request.requestId = requestId
        case .version(let fileId, let revision):
            request.fileId = fileId
            if let revision { headers["If-Match"] = "\"\(revision)\"" }
        }
        for attempt in 0..<2 {
            let (head, data) = try await send(
                TransportRequest(Routes.commitBlocks, headers: headers, body: try JSONEncoder.nimbus.encode(request)), json: true)
            if attempt == 0, let failure = ServerFailure(head, data), failure.status == 409, failure.code == .api(.blocksMissing),
                let lacking = failure.missing
            {
                // Swept between the question and the commit (a day-old upload taken up again): send them, once.
                try await sendBlocks(chunks(among: Set(lacking)), from: source, sent: LockedBox(0)) { _ in }
                continue
            }
            try Self.check(head, data)
            progress(source.size)
            let file = try Self.decode(File.self, data)
            if file.checksum == source.checksum {
                rememberBlocks(file.id, revision: file.revisionId, local.map { BlockManifest.Block(hash: $0.hash, size: Int64($0.length)) })
            }
            return Self.item(file)
        }
        throw ProviderError.server(status: 409, code: .api(.blocksMissing), message: "The server kept losing the blocks just sent.")
    }

    public func download(
        _ id: String, revision: String?, to destination: DownloadTarget, reusing seeds: [URL], locate: @escaping @Sendable (String) async -> URL?,
        progress: @escaping @Sendable (Int64) -> Void
    ) async throws {
        // A partial download goes on the usual way (Range).
        let existing = destination.existingSize
        guard existing == 0, blocksSupported.withLock({ $0 }) != false, let manifest = try await manifest(id, revision: revision) else {
            return try await download(id, revision: revision, to: destination, progress: progress)
        }
        var wanted = Set(manifest.blocks.map(\.hash))
        var local: [String: (url: URL, offset: Int64, length: Int)] = [:]
        // Files the index knows to hold some of the blocks (one local copy asked for per file)…
        if let index = state as? any BlockIndexStore, let found = try? index.locations(of: wanted) {
            var copies: [String: URL?] = [:]
            for (hash, places) in found {
                for place in places {
                    if copies[place.fileId] == nil { copies[place.fileId] = .some(await locate(place.fileId)) }
                    guard let url = copies[place.fileId] ?? nil else { continue }
                    local[hash] = (url, place.offset, Int(place.size))
                    break
                }
            }
            wanted.subtract(local.keys)
        }
        // …then the seeds, cut into chunks here, for what is still wanted.
        for seed in seeds where !wanted.isEmpty {
            guard let chunks = try? LocalChunking.chunks(of: seed).chunks else { continue }
            for chunk in chunks where wanted.contains(chunk.hash) {
                local[chunk.hash] = (seed, chunk.offset, chunk.length)
                wanted.remove(chunk.hash)
            }
        }
        guard !local.isEmpty else {
            try await download(id, revision: manifest.revisionId, to: destination, progress: progress)
            rememberBlocks(id, revision: manifest.revisionId, manifest.blocks)
            return
        }

        let handle = try destination.open()
        defer { try? handle.close() }
        let contentPath = Routes.revisionContent.path(id, manifest.revisionId)
        var written: Int64 = 0
        var index = 0
        do {
            while index < manifest.blocks.count {
                let block = manifest.blocks[index]
                if let found = local[block.hash], let bytes = LocalChunking.read(found.url, offset: found.offset, length: found.length),
                    FileHasher.hex(SHA256.hash(data: bytes)) == block.hash
                {
                    try handle.write(contentsOf: bytes)
                    written += Int64(bytes.count)
                    index += 1
                    progress(written)
                    continue
                }
                // A run of blocks not here: one ranged request for all of them, each block checked as it comes.
                var end = index + 1
                while end < manifest.blocks.count, local[manifest.blocks[end].hash] == nil { end += 1 }
                let run = Array(manifest.blocks[index..<end])
                let length = run.reduce(Int64(0)) { $0 + $1.size }
                let verifier = LockedBox(RunVerifier(blocks: run))
                let start = written
                let head = try await client.authorizedStream(
                    TransportRequest(method: "GET", path: contentPath, headers: ["Range": "bytes=\(start)-\(start + length - 1)", "If-Range": "\"\(manifest.revisionId)\""])
                ) { data in
                    try verifier.withLock { try $0.take(data) }
                    try handle.write(contentsOf: data)
                    progress(start + verifier.withLock { $0.received })
                }
                guard head.status == 206 || (head.status == 200 && start == 0 && length == manifest.size) else {
                    throw ProviderError.network("the server did not send the range asked for (HTTP \(head.status))")
                }
                guard try verifier.withLock({ try $0.finish() }) == length else { throw ProviderError.network("a block's range ended early") }
                bytesReceived.withLock { $0 += length }
                written += length
                index = end
            }
        } catch let error as SyncError {
            try? handle.truncate(atOffset: 0)
            throw Self.providerError(error)
        } catch {
            try? handle.truncate(atOffset: 0)
            throw error
        }
        try handle.synchronize()
        rememberBlocks(id, revision: manifest.revisionId, manifest.blocks)
    }
}

/// Checks a stream of bytes against the blocks it should be, block by block.
struct RunVerifier {
    let blocks: [BlockManifest.Block]
    var current = 0
    var inBlock: Int64 = 0
    var hasher = SHA256()
    var received: Int64 = 0

    init(blocks: [BlockManifest.Block]) { self.blocks = blocks }

    mutating func take(_ data: Data) throws {
        var rest = data[...]
        while !rest.isEmpty {
            guard current < blocks.count else { throw ProviderError.checksumMismatch }
            let take = Int(min(Int64(rest.count), blocks[current].size - inBlock))
            hasher.update(data: rest.prefix(take))
            rest = rest.dropFirst(take)
            inBlock += Int64(take)
            received += Int64(take)
            if inBlock == blocks[current].size {
                guard FileHasher.hex(hasher.finalize()) == blocks[current].hash else { throw ProviderError.checksumMismatch }
                hasher = SHA256()
                inBlock = 0
                current += 1
            }
        }
    }

    /// The bytes received, once every block came whole.
    func finish() throws -> Int64 {
        guard current == blocks.count else { throw ProviderError.checksumMismatch }
        return received
    }
}
