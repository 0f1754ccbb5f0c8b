import AsyncHTTPClient
import Crypto
import Foundation
import NIOCore
import NIOFoundationCompat
import NIOHTTP1
import NimbusAPI

/// What the path-named providers (local folder, WebDAV, S3) share: ids are paths below the remote's root (`/` is
/// the root, `a/b.txt` a file in folder `a`), so a move there changes the id.
enum ProviderPath {
    static let root = "/"

    static func child(_ name: String, in parentId: String) -> String { parentId == root ? name : parentId + "/" + name }

    static func parent(of id: String) -> String? {
        guard id != root else { return nil }
        guard let slash = id.lastIndex(of: "/") else { return root }
        return String(id[..<slash])
    }

    static func name(of id: String) -> String {
        guard id != root else { return "" }
        return id.lastIndex(of: "/").map { String(id[id.index(after: $0)...]) } ?? id
    }

    /// Whether `id` is `folder` or inside it.
    static func isWithin(_ id: String, _ folder: String) -> Bool { folder == root || id == folder || id.hasPrefix(folder + "/") }

    static func validated(_ name: String) throws -> String {
        do { return try FileName.validated(name) } catch {
            throw ProviderError.invalid(error.description)
        }
    }
}

/// SHA-256s of a provider's files that the provider itself cannot give, kept in the ``ProviderStateStore`` by id
/// and version (ETag): learned when this device uploads or downloads the bytes (or hashes them once to link a
/// folder), and trusted only while the version is unchanged. Read once into memory (a listing asks for every
/// file); written behind, 256 at a time and when the provider goes — it is a cache: what a crash loses is learned
/// again (S3 keeps the hash with the object; the engine keeps what it knew while a version is unchanged).
final class ChecksumMemory: @unchecked Sendable {
    let state: any ProviderStateStore
    let prefix: String
    private let lock = NSLock()
    /// Everything stored, once read (nil: not read yet, or a store that cannot read by prefix).
    private var known: [String: String]?
    private var readWhole = false
    private var pending: [String: String?] = [:]

    init(state: any ProviderStateStore, prefix: String) {
        self.state = state
        self.prefix = prefix
    }

    deinit { flush() }

    /// Reads the store whole the first time (where it can).
    private func load() {
        guard !readWhole else { return }
        readWhole = true
        known = (try? state.values(withPrefix: prefix)) ?? nil
    }

    func checksum(of id: String, revision: String?) -> String? {
        guard let revision else { return nil }
        let key = prefix + id
        let stored: String? = lock.withLock {
            load()
            if let known { return known[key] }
            if let waiting = pending[key] { return waiting }
            return try? state.value(for: key)  // a store without prefix reads: one key at a time
        }
        guard let stored, stored.hasPrefix(revision + " ") else { return nil }
        return String(stored.dropFirst(revision.count + 1))
    }

    func remember(_ checksum: String, of id: String, revision: String?) {
        guard let revision else { return }
        set(revision + " " + checksum, for: prefix + id)
    }

    func forget(_ id: String) { set(nil, for: prefix + id) }

    private func set(_ value: String?, for key: String) {
        let full: Bool = lock.withLock {
            load()
            known?[key] = value
            pending[key] = .some(value)
            return pending.count >= 256
        }
        if full { flush() }
    }

    /// Writes what was learned since the last write.
    func flush() {
        let batch: [String: String?] = lock.withLock {
            defer { pending = [:] }
            return pending
        }
        if !batch.isEmpty { try? state.setValues(batch) }
    }
}

/// Where a provider that writes a file under a hidden name first (WebDAV, a local folder) puts an upload: named after
/// the engine's request id (kept with the upload, the same after a restart) and the folder, so an upload
/// taken up again after a crash or `kill -9` writes over what the killed one left instead of leaving it there for
/// good. Such files left longer than ``stalePartialAge`` (an upload given up: the file changed or went meanwhile)
/// are removed when their folder is listed.
@_spi(Testing) public enum PartialUploads {
    public static let prefix = ".nimbus-partial-"
    /// How old a hidden upload must be before a listing removes it.
    public static let stalePartialAge: TimeInterval = 24 * 3600

    /// `nimbus-` and 32 hex digits (also the name of a Nextcloud chunked upload's folder).
    static func transferName(requestId: String, checksum: String, parentId: String) -> String {
        "nimbus-" + Hex.encode(SHA256.hash(data: Data("\(requestId)\n\(checksum)\n\(parentId)".utf8))).prefix(32)
    }

    /// The hidden file of a whole upload: named after the request and the folder, not the content (an encrypted
    /// remote seals the same file differently at each attempt; each attempt writes the file from its start anyway).
    public static func name(requestId: String, parentId: String) -> String {
        prefix + transferName(requestId: requestId, checksum: "whole", parentId: parentId)
    }

    /// Whether a listed file is an upload's hidden file left long enough to be given up.
    static func isStale(_ name: String, modifiedAt: Date, now: Date = Date()) -> Bool {
        name.hasPrefix(prefix) && now.timeIntervalSince(modifiedAt) > stalePartialAge
    }
}

extension ContentReader {
    /// Up to `count` bytes from the current position as a buffer for an HTTP body; empty at the end. A plain file is
    /// read straight into the buffer (a big upload's bytes are not copied once more through `Data`).
    func readBuffer(upToCount count: Int) throws -> ByteBuffer? {
        guard case .plain(let handle) = backing else { return try read(upToCount: count).map { ByteBuffer(data: $0) } }
        var buffer = ByteBufferAllocator().buffer(capacity: count)
        var done = false
        while !done, buffer.readableBytes < count {
            let wanted = count - buffer.readableBytes
            let got = try buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: wanted) { pointer -> Int in
                while true {
                    let result = Foundation.read(handle.fileDescriptor, pointer.baseAddress, wanted)
                    if result >= 0 { return result }
                    if errno != EINTR { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
                }
            }
            done = got == 0
        }
        return buffer
    }
}

extension UploadSource {
    /// The whole content (a small file), if it is still what the engine froze — its size and SHA-256; else
    /// ``ProviderError/checksumMismatch`` (the file changed since: the engine scans it again).
    func readChecked() throws -> Data {
        let bytes: Data
        do {
            let input = try open()
            defer { input.close() }
            bytes = try input.readToEnd()
        } catch {
            throw ProviderError.checksumMismatch
        }
        guard Int64(bytes.count) == size, FileHasher.hex(SHA256.hash(data: bytes)) == checksum else { throw ProviderError.checksumMismatch }
        return bytes
    }
}

/// A file read in pieces for an HTTP body: hashed on the way, progress reported per piece. The body is checked
/// against the expected checksum by the caller once it is sent (``digest``). A piece is read only when the HTTP
/// client asks for the next one, so memory stays at a piece or two whatever the file's size (a pushing stream
/// read a page-cached 1 GiB file into memory faster than a server took it).
final class HashingFileBody: @unchecked Sendable {
    let source: UploadSource
    let progress: @Sendable (Int64) -> Void
    static let pieceSize = 1 << 20
    private let lock = NSLock()
    private var hasher = SHA256()
    private var sentBytes: Int64 = 0
    /// The upload limit of the task that made the body (the pieces are asked for elsewhere).
    let limiter = BandwidthLimits.current.up

    init(_ source: UploadSource, progress: @escaping @Sendable (Int64) -> Void) {
        self.source = source
        self.progress = progress
    }

    private var reader: Reader?

    /// The pieces of the file, 1 MiB at a time, each read when asked for.
    func stream() throws -> Pieces {
        let handle: ContentReader
        do { handle = try source.open() } catch { throw ProviderError.checksumMismatch }
        let reader = Reader(handle, size: source.size, pieceSize: limiter?.pieceSize ?? Self.pieceSize)
        lock.withLock { self.reader = reader }
        return Pieces(body: self, reader: reader)
    }

    /// Whether the file held more than its scanned size when the last piece was read (it grew since: refused as
    /// changed, so the engine scans it again and sends all of it in the same run).
    var grew: Bool { lock.withLock { reader }?.grew ?? false }

    /// Reads no more than the size the request announced (a file that grew since it was scanned would overrun
    /// its `Content-Length`; whether it did is ``grew``). Closes the file when the last piece has been asked for, or
    /// when the request lets go of it.
    final class Reader: @unchecked Sendable {
        private let lock = NSLock()
        private var handle: ContentReader?
        private var left: Int64
        private let pieceSize: Int
        /// The file ended before the size the request announced (it shrank since it was scanned).
        private var ended = false
        private var more = false
        var grew: Bool { lock.withLock { more } }

        init(_ handle: ContentReader, size: Int64, pieceSize: Int) {
            self.handle = handle
            left = size
            self.pieceSize = pieceSize
        }
        deinit { handle?.close() }

        /// The next piece; nil at the end (the file is closed then).
        func next() throws -> ByteBuffer? {
            try lock.withLock {
                guard let handle else { return nil }
                let want = Int(min(Int64(pieceSize), left))
                if left > 0, !ended, let buffer = try handle.readBuffer(upToCount: want), buffer.readableBytes > 0 {
                    left -= Int64(buffer.readableBytes)
                    return buffer
                }
                if left > 0 {
                    // The file shrank: zeros make up the announced length, so the request ends as a whole one (a
                    // request cut short can still be written by the server after the DELETE that follows it). The
                    // checksum then differs and the file is deleted, never moved into place.
                    ended = true
                    left -= Int64(want)
                    return ByteBuffer(repeating: 0, count: want)
                }
                if !ended, let extra = try? handle.read(upToCount: 1), !extra.isEmpty { more = true }
                handle.close()
                self.handle = nil
                return nil
            }
        }
    }

    struct Pieces: AsyncSequence, Sendable {
        typealias Element = ByteBuffer
        let body: HashingFileBody
        let reader: Reader

        struct AsyncIterator: AsyncIteratorProtocol {
            let body: HashingFileBody
            let reader: Reader

            mutating func next() async throws -> ByteBuffer? {
                try Task.checkCancellation()
                guard let buffer = try reader.next() else { return nil }
                try await body.limiter?.take(buffer.readableBytes)
                let sent = body.lock.withLock {
                    buffer.withUnsafeReadableBytes { body.hasher.update(bufferPointer: $0) }
                    body.sentBytes += Int64(buffer.readableBytes)
                    return body.sentBytes
                }
                body.progress(sent)
                return buffer
            }
        }

        func makeAsyncIterator() -> AsyncIterator { AsyncIterator(body: body, reader: reader) }
    }

    /// How many bytes the request has taken so far.
    var sent: Int64 { lock.withLock { sentBytes } }

    /// The size and SHA-256 of what was read.
    var digest: (size: Int64, checksum: String) {
        lock.withLock { (sentBytes, FileHasher.hex(hasher.finalize())) }
    }
}

/// Runs `operation` (a request sending `total` bytes), and gives it up — cancelled, ``ProviderError/network(_:)`` —
/// when `sent()` has not moved for `limit` before all was sent: a server that stopped taking the body would otherwise
/// hold the request until its deadline (a day, for a big upload). Once all is sent, the wait for the answer is the
/// request's own.
func cancellingWhenStalled<T: Sendable>(
    after limit: Duration, sent: @escaping @Sendable () -> Int64, total: Int64, _ operation: @escaping @Sendable () async throws -> T
) async throws -> T {
    try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await operation() }
        group.addTask {
            let clock = ContinuousClock()
            var last = sent()
            var since = clock.now
            while last < total {
                try await Task.sleep(for: min(limit / 4, .seconds(5)))
                let now = sent()
                if now != last {
                    (last, since) = (now, clock.now)
                } else if clock.now - since >= limit {
                    throw ProviderError.network("the server took nothing more of the upload for \(limit.components.seconds) s (stalled)")
                }
            }
            return nil  // all sent: the answer is waited for as long as the request allows
        }
        while let next = try await group.next() {
            if let result = next {
                group.cancelAll()
                return result
            }
        }
        throw ProviderError.network("the upload ended without an answer")
    }
}

extension HTTPClientResponse {
    /// The body's first `limit` bytes (errors and listings are small).
    func text(limit: Int = 16 << 20) async throws -> Data { Data(buffer: try await body.collect(upTo: limit)) }
}

/// Writes a response body to the end of a file (a download resuming after what is there), then fsyncs it.
func appendBody(_ response: HTTPClientResponse, to handle: ContentWriter, from offset: Int64, progress: @escaping @Sendable (Int64) -> Void) async throws {
    var written = offset
    let limiter = BandwidthLimits.current.down
    for try await buffer in response.body {
        try await limiter?.take(buffer.readableBytes)
        try handle.write(contentsOf: buffer.readableBytesView)
        written += Int64(buffer.readableBytes)
        progress(written)
    }
    try handle.synchronize()
}

extension URL {
    /// Whether the host is this machine (Basic auth over plain HTTP is allowed only there).
    var isLoopback: Bool {
        guard let host = host?.lowercased() else { return false }
        return host == "localhost" || host == "::1" || host == "[::1]" || host.hasPrefix("127.")
    }
}

/// Requests that may run together (shared) and ones that must run alone (exclusive): a WebDAV `MOVE` of a folder.
/// `rclone serve webdav` (1.75) updates the parent folder's table of a folder it renames under the moved folder's lock
/// only, so a request that looks into that parent meanwhile — any request below it — can crash the whole server
/// ("concurrent map iteration and map write", seen with new folders moved into place while their neighbours were
/// filled). A folder's `MOVE` waits until nothing of this provider is in flight, and nothing starts until it is done;
/// requests waiting for one go first after it (a stream of new ones cannot hold it back for ever).
final class RequestGate: Sendable {
    private struct State {
        var shared = 0
        var exclusive = false
        var waitingShared: [CheckedContinuation<Void, Never>] = []
        var waitingExclusive: [CheckedContinuation<Void, Never>] = []

        /// Lets a request in if it may run now.
        mutating func admit(exclusive: Bool) -> Bool {
            guard !self.exclusive, waitingExclusive.isEmpty, !exclusive || shared == 0 else { return false }
            if exclusive { self.exclusive = true } else { shared += 1 }
            return true
        }
    }
    private let state = LockedBox(State())

    func enter(exclusive: Bool) async {
        // (Tried before the continuation too: most requests go straight in, without one.)
        if state.withLock({ $0.admit(exclusive: exclusive) }) { return }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { state -> Bool in
                if state.admit(exclusive: exclusive) { return true }
                if exclusive { state.waitingExclusive.append(continuation) } else { state.waitingShared.append(continuation) }
                return false
            }
            if now { continuation.resume() }
        }
    }

    func leave(exclusive: Bool) {
        let resumed = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            if exclusive { state.exclusive = false } else { state.shared -= 1 }
            guard !state.exclusive, state.shared == 0 else { return [] }
            if exclusive, !state.waitingShared.isEmpty {
                // Those that waited for this one go first, before the next folder.
                let waiting = state.waitingShared
                state.waitingShared = []
                state.shared = waiting.count
                return waiting
            }
            if !state.waitingExclusive.isEmpty {
                state.exclusive = true
                return [state.waitingExclusive.removeFirst()]
            }
            let waiting = state.waitingShared
            state.waitingShared = []
            state.shared = waiting.count
            return waiting
        }
        for continuation in resumed { continuation.resume() }
    }
}

/// Folders filled with their files (short) and streamed uploads (long) kept apart: a folder's `MOVE` waits for every
/// request in flight (``RequestGate``), so one behind a streamed upload of gigabytes would hold everything else for as
/// long. A fill is not begun while a stream runs or waits (the folder then goes the usual way); a stream waits for the
/// fills already begun (a second or so).
@_spi(Testing) public final class FillsAndStreams: Sendable {
    private struct State {
        var fills = 0
        var streams = 0
        var streamsWaiting: [CheckedContinuation<Void, Never>] = []

        /// Lets a stream in if no fill runs.
        mutating func admitStream() -> Bool {
            guard fills == 0 else { return false }
            streams += 1
            return true
        }
    }
    private let state = LockedBox(State())

    /// A gate with nothing running.
    public init() {}

    /// Streams waiting for fills to end (for tests).
    public var streamsWaiting: Int { state.withLock { $0.streamsWaiting.count } }

    /// Whether a fill may begin now (then ``endFill()`` after it).
    public func beginFill() -> Bool {
        state.withLock { state in
            guard state.streams == 0, state.streamsWaiting.isEmpty else { return false }
            state.fills += 1
            return true
        }
    }

    /// A fill ended: streams waiting for the last one go in.
    public func endFill() {
        let resumed = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.fills -= 1
            guard state.fills == 0 else { return [] }
            let waiting = state.streamsWaiting
            state.streamsWaiting = []
            state.streams += waiting.count
            return waiting
        }
        for continuation in resumed { continuation.resume() }
    }

    /// Waits until no fill runs, then lets a streamed upload in (``endStream()`` after it).
    public func beginStream() async {
        if state.withLock({ $0.admitStream() }) { return }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { state -> Bool in
                if state.admitStream() { return true }
                state.streamsWaiting.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }

    /// A streamed upload ended.
    public func endStream() {
        state.withLock { $0.streams -= 1 }
    }
}
