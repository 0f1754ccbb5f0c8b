import Crypto
import Dispatch
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import NimbusS3

/// Blocks as objects in an S3-compatible bucket: `<prefix>blocks/<userId>/<sha256>`, packs of blocks (see
/// ``PackWriter``) as `<prefix>packs/<userId>/<id>`. Staging stays local to the replica that receives the bytes
/// (`tmp/` under `--data`), for the length of one request.
///
/// A block or a pack is one PUT (blocks are at most ``blockSize``, 4 MiB, packs 16 MiB, under S3's 5 GiB single-PUT
/// limit), so no multipart upload is needed here. An unreachable or throttling store is ``DriveError/unavailable(_:retryAfter:)``: 503
/// with `Retry-After`, never a hang (requests time out after `timeout`).
struct S3BlobStore: LocallyStaged {
    let client: S3Client
    let prefix: String
    let stagingDirectory: String
    let blockSize: Int
    let threadPool: NIOThreadPool
    /// Blocks put or read at once by one request.
    let width = 4
    /// After a failure that says the store is down, calls fail at once (503) until this time: requests fail fast
    /// instead of each waiting for its own timeout.
    let downUntil = NIOLockedValueBox<Date?>(nil)

    init(client: S3Client, prefix: String, stagingRoot: URL, blockSize: Int = 4 * 1024 * 1024, threadPool: NIOThreadPool = .singleton) throws {
        self.client = client
        self.prefix = prefix.isEmpty || prefix.hasSuffix("/") ? prefix : prefix + "/"
        self.stagingDirectory = stagingRoot.appending(path: "tmp").path
        self.blockSize = blockSize
        self.threadPool = threadPool
        try POSIXFile.makeDirectory(stagingRoot.path)
        try POSIXFile.makeDirectory(stagingDirectory)
    }

    func key(of hash: String, user: String) -> String { "\(prefix)blocks/\(user)/\(hash)" }

    func packKey(_ id: String, user: String) -> String { "\(prefix)packs/\(user)/\(id)" }

    /// Where a block's bytes are: its pack's object at its offset, or its own object.
    func location(_ block: BlockRef, user: String) -> (key: String, offset: Int64, stored: Int64) {
        guard let pack = block.pack else { return (key(of: block.hash, user: user), 0, block.size) }
        return (packKey(pack.pack, user: user), pack.offset, pack.stored)
    }

    func put(_ blocks: [StagedBlock], user: String) async throws {
        try await Self.forEach(Self.stagedPacks(blocks).map { [$0.id, $0.path] }, width: width) { pack in
            let path = pack[1]
            let bytes = try await threadPool.runIfActive { try POSIXFile.readAll(path) }
            try await mapped { try await client.put(packKey(pack[0], user: user), body: ByteBuffer(bytes: bytes)) }
        }
        var seen: Set<String> = []
        let stored = blocks.filter { $0.data == nil && $0.ref.pack == nil && seen.insert($0.ref.hash).inserted }
        try await Self.forEach(stored, width: width) { block in
            let path = block.path
            let bytes = try await threadPool.runIfActive { try POSIXFile.readAll(path) }
            guard bytes.count == block.ref.size else {
                throw DriveError.internalError("The staged block \(block.ref.hash) is \(bytes.count) bytes, not \(block.ref.size).")
            }
            try await mapped { try await client.put(key(of: block.ref.hash, user: user), body: ByteBuffer(bytes: bytes)) }
        }
        discard(blocks)
    }

    func containsBlocking(_ hash: String, user: String) throws -> Bool {
        try Self.blocking { try await mapped { try await client.exists(key(of: hash, user: user)) } }
    }

    func deleteBlocking(_ hashes: [String], user: String) throws {
        try Self.blocking {
            try await Self.forEach(hashes, width: width) { hash in try await mapped { try await client.delete(key(of: hash, user: user)) } }
        }
    }

    func containsPackBlocking(_ id: String, user: String) throws -> Bool {
        try Self.blocking { try await mapped { try await client.exists(packKey(id, user: user)) } }
    }

    func deletePacksBlocking(_ ids: [String], user: String) throws {
        try Self.blocking {
            try await Self.forEach(ids, width: width) { id in try await mapped { try await client.delete(packKey(id, user: user)) } }
        }
    }

    func read(_ blocks: [BlockRef], user: String, range: Range<Int64>, into body: (ByteBuffer) async throws -> Void) async throws {
        try await readCoalesced(
            blocks, user: user, range: range, into: body,
            place: { location($0, user: user) },
            expand: { block, key, offset, stored in
                // Kept compressed (a pack the local store wrote, moved here by `nimbus admin migrate`): whole.
                let bytes = try await mapped { try await client.get(key, range: offset..<(offset + stored)) }
                return try StoredBlockCodec.expand(Array(buffer: bytes), size: block.size, hash: block.hash)
            },
            readRun: { key, start, length in
                try await mapped { try await client.get(key, range: start..<(start + length)) }
            })
    }

    func checkReachable() async throws {
        _ = try await mapped { try await client.list(prefix: prefix + "blocks/", maxKeys: 1) }
    }

    /// Makes the bucket if the store does not have it yet (an empty MinIO, SeaweedFS or moto); an existing one is
    /// left as it is.
    func ensureBucket() async throws {
        do {
            _ = try await client.list(prefix: prefix + "blocks/", maxKeys: 1)
        } catch let error as S3Error where error.code == "NoSuchBucket" || error.status == 404 {
            try await mapped { try await client.createBucket() }
        } catch let error as S3Error {
            _ = try await mapped { () async throws -> Int in throw error }
        }
    }

    func storedBlockCount() async throws -> Int {
        try await mapped { try await client.listAll(prefix: prefix + "blocks/").count + client.listAll(prefix: prefix + "packs/").count }
    }

    @discardableResult
    /// Runs an S3 call, turning "unreachable / throttled / failing" into 503 and anything else into 500. Every call
    /// the store makes is idempotent (put by hash, head, get, delete), so one that fails quickly on a retryable
    /// error (a pooled connection the server had closed, a 503 or `SlowDown`) is tried twice more after 50 and
    /// 200 ms, as the S3 SDKs do; one that took its time is not, so a store that hangs still fails within its timeout.
    func mapped<T>(_ operation: () async throws -> T) async throws -> T {
        if let until = downUntil.withLockedValue({ $0 }), until > Date() {
            throw DriveError.unavailable("The blob store did not answer a moment ago; try again shortly.", retryAfter: max(1, Int(until.timeIntervalSinceNow.rounded(.up))))
        }
        var attempt = 0
        while true {
            attempt += 1
            let start = ContinuousClock.now
            do {
                let value = try await operation()
                downUntil.withLockedValue { $0 = nil }
                return value
            } catch let error as S3Error where error.isRetryable && attempt < 3 && ContinuousClock.now - start < .seconds(2) {
                try await Task.sleep(for: .milliseconds(attempt == 1 ? 50 : 200))
                continue
            } catch {
                return try fail(error)
            }
        }
    }

    private func fail<T>(_ error: any Error) throws -> T {
        do {
            throw error
        } catch let error as S3Error where error.isRetryable {
            let wait = error.retryAfter ?? 5
            if error.status == 0 { downUntil.withLockedValue { $0 = Date().addingTimeInterval(TimeInterval(wait)) } }
            throw DriveError.unavailable("The blob store is unavailable (\(error)); try again shortly.", retryAfter: wait)
        } catch let error as S3Error {
            throw DriveError.internalError("The blob store refused a request: \(error)")
        }
    }

    /// Runs `operation` on up to `width` elements at once.
    static func forEach<T: Sendable>(_ items: [T], width: Int, _ operation: @escaping @Sendable (T) async throws -> Void) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            var iterator = items.makeIterator()
            for _ in 0..<width {
                guard let item = iterator.next() else { break }
                group.addTask { try await operation(item) }
            }
            while try await group.next() != nil {
                if let item = iterator.next() { group.addTask { try await operation(item) } }
            }
        }
    }

    /// Waits on the calling thread for an async operation: for the `…Blocking` calls, which run inside a metadata
    /// transaction on a database thread (GRDB's writer queue, the PostgreSQL store's thread pool), never on
    /// Swift's cooperative pool, whose threads this would starve.
    static func blocking<T: Sendable>(_ operation: @escaping @Sendable () async throws -> T) throws -> T {
        let semaphore = DispatchSemaphore(value: 0)
        let outcome = NIOLockedValueBox<Result<T, any Error>?>(nil)
        Task {
            let result: Result<T, any Error>
            do { result = .success(try await operation()) } catch { result = .failure(error) }
            outcome.withLockedValue { $0 = result }
            semaphore.signal()
        }
        semaphore.wait()
        guard let result = outcome.withLockedValue({ $0 }) else { throw DriveError.internalError("A blob store call ended without a result.") }
        return try result.get()
    }
}

/// Where blocks live: `--blobs` on the command line.
enum BlobLocation: Sendable, Equatable {
    /// `blobs/` under the data folder (the default).
    case local
    /// `s3://BUCKET[/PREFIX]?endpoint=URL&region=R[&timeout=SECONDS]`; keys from `AWS_ACCESS_KEY_ID` /
    /// `AWS_SECRET_ACCESS_KEY`. `timeout` bounds each request (default 30 s).
    case s3(bucket: String, prefix: String, endpoint: URL, region: String, timeout: Int)

    /// Parses `--blobs`: `local`, or an `s3://` URL.
    static func parse(_ text: String) throws -> BlobLocation {
        if text == "local" || text.isEmpty { return .local }
        guard let components = URLComponents(string: text), components.scheme == "s3", let bucket = components.host, !bucket.isEmpty else {
            throw DriveError.badRequest("--blobs must be 'local' or s3://BUCKET[/PREFIX]?endpoint=URL&region=REGION, not '\(text)'.")
        }
        let query = Dictionary((components.queryItems ?? []).map { ($0.name, $0.value ?? "") }, uniquingKeysWith: { $1 })
        let endpointText = query["endpoint"] ?? "https://s3.\(query["region"] ?? "us-east-1").amazonaws.com"
        guard let endpoint = URL(string: endpointText), endpoint.scheme == "http" || endpoint.scheme == "https" else {
            throw DriveError.badRequest("--blobs: endpoint must be an http:// or https:// URL, not '\(endpointText)'.")
        }
        let prefix = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        guard let timeout = Int(query["timeout"] ?? "30"), timeout > 0 else {
            throw DriveError.badRequest("--blobs: timeout must be a whole number of seconds.")
        }
        return .s3(bucket: bucket, prefix: prefix, endpoint: endpoint, region: query["region"] ?? "us-east-1", timeout: timeout)
    }

    /// Opens the store; staging (request-scoped) stays under `data`.
    func open(data: URL, environment: [String: String] = ProcessInfo.processInfo.environment) throws -> any BlobStore {
        switch self {
        case .local:
            return try LocalBlobStore(root: data)
        case .s3(let bucket, let prefix, let endpoint, let region, let timeout):
            guard let access = environment["AWS_ACCESS_KEY_ID"], let secret = environment["AWS_SECRET_ACCESS_KEY"] else {
                throw DriveError.badRequest("--blobs s3://… needs AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment.")
            }
            let client = S3Client(
                endpoint: endpoint, bucket: bucket, signer: SigV4Signer(accessKey: access, secretKey: secret, region: region),
                timeout: .seconds(Int64(timeout)))
            return try S3BlobStore(client: client, prefix: prefix, stagingRoot: data)
        }
    }
}
