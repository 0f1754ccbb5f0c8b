import Crypto
import Foundation
import Metrics
import NIOCore

/// The stores' figures on `/metrics` (Prometheus), so an operator sees which of the two shared services is slow:
///
/// - `nimbus_db_transaction_seconds{database,kind}` — a transaction from asking for it to its commit (`kind`:
///   `read` or `write`), waiting for a connection (or SQLite's writer) included;
/// - `nimbus_db_pool_wait_seconds{database}` — waiting for a free connection (PostgreSQL);
/// - `nimbus_db_pool_connections{database,state}` — connections `in_use` and the pool's `size` (PostgreSQL);
/// - `nimbus_db_retries_total{database}` — transactions run again after a serialization failure, deadlock or
///   concurrent insert; `nimbus_db_errors_total{database}` — transactions that failed on a database error;
/// - `nimbus_blob_seconds{store,op}` — `put`, `contains`, `delete`, and `read` up to its first bytes;
///   `nimbus_blob_errors_total{store,op}` — operations that failed;
/// - `nimbus_blocks_damaged_total{store}` — blocks a read found damaged (their bytes no longer hash to their name).
enum StoreMetrics {
    static func transaction(_ database: String, kind: String) -> Metrics.Timer {
        Metrics.Timer(label: "nimbus_db_transaction_seconds", dimensions: [("database", database), ("kind", kind)], preferredDisplayUnit: .seconds)
    }

    static func poolWait(_ database: String) -> Metrics.Timer {
        Metrics.Timer(label: "nimbus_db_pool_wait_seconds", dimensions: [("database", database)], preferredDisplayUnit: .seconds)
    }

    static func poolConnections(_ database: String, state: String) -> Gauge {
        Gauge(label: "nimbus_db_pool_connections", dimensions: [("database", database), ("state", state)])
    }

    static func retries(_ database: String) -> Counter {
        Counter(label: "nimbus_db_retries_total", dimensions: [("database", database)])
    }

    static func errors(_ database: String) -> Counter {
        Counter(label: "nimbus_db_errors_total", dimensions: [("database", database)])
    }
}

/// A ``BlobStore`` that times every operation of the store it wraps (``StoreMetrics``), and hands every damaged block
/// a read finds (``DamagedBlock``) to `damage` — counted in `nimbus_blocks_damaged_total{store}` — before the read
/// fails; nothing else changes.
struct MeteredBlobStore: BlobStore {
    let base: any BlobStore
    let name: String
    let damage: DamageReports
    private let timers: [String: Metrics.Timer]
    private let failures: [String: Counter]
    private let damaged: Counter

    init(_ base: any BlobStore, name: String, damage: DamageReports = DamageReports()) {
        self.base = base
        self.name = name
        self.damage = damage
        damaged = Counter(label: "nimbus_blocks_damaged_total", dimensions: [("store", name)])
        let operations = ["put", "contains", "delete", "read"]
        timers = Dictionary(uniqueKeysWithValues: operations.map {
            ($0, Metrics.Timer(label: "nimbus_blob_seconds", dimensions: [("store", name), ("op", $0)], preferredDisplayUnit: .seconds))
        })
        failures = Dictionary(uniqueKeysWithValues: operations.map {
            ($0, Counter(label: "nimbus_blob_errors_total", dimensions: [("store", name), ("op", $0)]))
        })
    }

    var blockSize: Int { base.blockSize }

    func makeStager(runningHash: SHA256) -> BlockStager { base.makeStager(runningHash: runningHash) }

    func put(_ blocks: [StagedBlock], user: String) async throws {
        let start = ContinuousClock.now
        do {
            try await base.put(blocks, user: user)
            record("put", since: start)
        } catch {
            failures["put"]?.increment()
            throw error
        }
    }

    func containsBlocking(_ hash: String, user: String) throws -> Bool {
        try measure("contains") { try base.containsBlocking(hash, user: user) }
    }

    func deleteBlocking(_ hashes: [String], user: String) throws {
        try measure("delete") { try base.deleteBlocking(hashes, user: user) }
    }

    func makePackWriter() -> PackWriter { base.makePackWriter() }

    func containsPackBlocking(_ id: String, user: String) throws -> Bool {
        try measure("contains") { try base.containsPackBlocking(id, user: user) }
    }

    func deletePacksBlocking(_ ids: [String], user: String) throws {
        try measure("delete") { try base.deletePacksBlocking(ids, user: user) }
    }

    func discard(_ blocks: [StagedBlock]) { base.discard(blocks) }

    func checksum(of blocks: [BlockRef], user: String) async throws -> String { try await base.checksum(of: blocks, user: user) }

    func read(_ blocks: [BlockRef], user: String, range: Range<Int64>, into body: (ByteBuffer) async throws -> Void) async throws {
        let start = ContinuousClock.now
        var first = true
        do {
            // Up to the first bytes only: after that the time is the client's to read them.
            try await base.read(blocks, user: user, range: range) { piece in
                if first {
                    first = false
                    record("read", since: start)
                }
                try await body(piece)
            }
        } catch let error as DamagedBlock {
            damaged.increment()
            await damage.report(error)
            throw error
        } catch {
            if first { failures["read"]?.increment() }
            throw error
        }
    }

    func clearStaging() throws { try base.clearStaging() }
    func checkReachable() async throws { try await base.checkReachable() }
    func storedBlockCount() async throws -> Int { try await base.storedBlockCount() }

    private func measure<T>(_ operation: String, _ body: () throws -> T) throws -> T {
        let start = ContinuousClock.now
        do {
            let value = try body()
            record(operation, since: start)
            return value
        } catch {
            failures[operation]?.increment()
            throw error
        }
    }

    private func record(_ operation: String, since start: ContinuousClock.Instant) {
        timers[operation]?.recordNanoseconds((ContinuousClock.now - start).nanoseconds)
    }
}

extension Duration {
    var nanoseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }
}
