import Foundation
import GRDB
import GRDBSQLite
import NimbusAPI

/// The local-first sync engine: one control actor over a local database.
///
/// Every user action (``createFolder(named:in:)``, ``upload(from:named:in:mimeType:copy:)``, ``rename(_:to:)``…)
/// commits locally and returns at once; it becomes a persisted operation that the executor sends later,
/// in order and with retries. The view the app shows (``items(in:)``) is the cached server state with the
/// pending operations applied. ``run()`` keeps the engine in sync (pulls woken by the server's events, then
/// executes the queue); ``syncOnce()`` does one full round; ``step()`` one unit of work (for simulations).
public actor SyncEngine {
    public nonisolated let configuration: SyncConfiguration
    let database: LocalDatabase
    let contentDirectory: URL
    let stagingDirectory: URL
    let tokenStore: any TokenStore
    /// Created once per library and kept across sign-out and account switches.
    public nonisolated let libraryId: String
    var client: ServerClient?
    var phase: EngineStatus.Phase
    var progress: [String: ItemState] = [:]
    /// The last things the executor did, newest last (diagnostics).
    private(set) var recentActivity: [String] = []
    let traceBuffer = LockedBox([String]())
    /// The operations running now, by id (see ``runOperations()``).
    var running: [String: RunningOperation] = [:]
    /// Ids of the operations being executed right now (their payloads must not change underneath).
    var inFlight: Set<String> { Set(running.keys) }
    var random: SeededRandom
    let observers = LockedBox([UUID: Observer]())
    let signal = Signal()

    struct Observer {
        var folder: String?
        var continuation: AsyncStream<[SyncItem]>.Continuation?
        var status: AsyncStream<EngineStatus>.Continuation?
    }

    /// Opens (or creates) the library in `configuration.directory`.
    public init(configuration: SyncConfiguration) throws {
        self.configuration = configuration
        let directory = configuration.directory
        contentDirectory = directory.appending(path: "content")
        stagingDirectory = directory.appending(path: "staged")
        for url in [directory, contentDirectory, stagingDirectory] {
            try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        }
        database = try LocalDatabase(path: directory.appending(path: "sync.sqlite").path)
        tokenStore = configuration.tokenStore ?? FileTokenStore(url: directory.appending(path: "account.json"))
        random = SeededRandom(seed: configuration.randomSeed ?? UInt64.random(in: 0...UInt64.max))
        let now = configuration.clock.now()
        libraryId = try database.pool.write { db in
            if let id = try db.meta("libraryId") { return id }
            let id = UUID.random().uuidString.lowercased()
            try db.setMeta("libraryId", id)
            var root = ItemRow.empty(ItemID.root.rawValue, isFolder: true)
            root.lPresent = true
            root.lName = ""
            root.lModified = now.millis
            try root.save(db)
            return id
        }
        if let account = try tokenStore.load() {
            client = ServerClient(transport: Self.transport(for: account.server, configuration), tokenStore: tokenStore)
            phase = .idle
        } else {
            phase = .signedOut
        }
    }

    static func transport(for server: URL, _ configuration: SyncConfiguration) -> any Transport {
        configuration.transportFactory?(server) ?? AsyncHTTPClientTransport(baseURL: server)
    }

    nonisolated var now: Date { configuration.clock.now() }

    // MARK: Account

    /// The signed-in account, if any.
    public var account: Account? {
        get async { await client?.credentials }
    }

    /// Signs in. The same account resumes where it stopped; a different one keeps this library's local
    /// items, drops the old account's references and re-uploads what the new account lacks.
    public func signIn(server: URL, username: String, password: String) async throws {
        let client = ServerClient(transport: Self.transport(for: server, configuration), tokenStore: tokenStore)
        let account = try await client.logIn(server: server, username: username, password: password, deviceName: configuration.deviceName)
        let key = "\(server.absoluteString)|\(account.userId)"
        let previous = try await database.pool.read { db in try db.meta("account") }
        if let previous, previous != key {
            try await switchAccount(to: key)
        } else if previous == nil {
            try await database.pool.write { db in try db.setMeta("account", key) }
        }
        self.client = client
        phase = .idle
        try? await database.pool.write { db in
            // Operations that stopped on a 401 may go again.
            try db.execute(sql: "UPDATE operations SET next_attempt_at = 0 WHERE state = 'pending'")
        }
        notifyChanged()
    }

    /// Signs out. Local items stay, and local changes keep being recorded; they are sent after the next sign-in.
    public func signOut() async {
        await client?.logOut()
        client = nil
        phase = .signedOut
        notifyChanged()
    }

    func requireClient() throws -> ServerClient {
        guard let client else { throw SyncError.notSignedIn }
        return client
    }

    // MARK: Reading the view

    /// The merged view of a folder, now. Listing marks the folder as recently used (the metadata cache evicts
    /// the least recently listed first); if its children were evicted, the next sync round fetches them again
    /// (``isListingComplete(_:)`` tells, ``refreshFolder(_:)`` does it now).
    public func listing(in folder: ItemID = .root) throws -> [SyncItem] {
        let operations = try operationStates()
        let now = self.now.millis
        let touch = try database.pool.read { db in
            try Row.fetchOne(db, sql: "SELECT last_access, children_evicted FROM items WHERE luid = ?", arguments: [folder.rawValue])
        }
        // At most one write a minute per folder: listing stays a read.
        if let touch, (touch["children_evicted"] as Bool) || now - (touch["last_access"] as Int64) > 60_000 {
            try database.pool.write { db in
                try db.execute(
                    sql: "UPDATE items SET last_access = ?, refresh_requested = children_evicted WHERE luid = ?", arguments: [now, folder.rawValue])
            }
        }
        return try database.pool.read { db in try self.children(db, of: folder.rawValue, operations: operations) }
    }

    /// A folder's children in the view, folders first, then by name. Reads only the columns a ``SyncItem``
    /// shows, by index, with a cached statement: this is the hot path of big folders (100,000 children).
    nonisolated func children(
        _ db: Database, of folder: String, operations: [String: ItemState], offset: Int = 0, limit: Int? = nil
    ) throws -> [SyncItem] {
        let statement = try db.cachedStatement(
            sql: """
                SELECT luid, file_id, l_name, l_mime, is_folder, l_size, l_checksum, r_revision, l_modified, flag, pinned,
                    content_path IS NOT NULL AND content_checksum IS l_checksum
                FROM items WHERE l_parent = ? AND l_present = 1 AND luid != 'root' ORDER BY is_folder DESC, l_name LIMIT ? OFFSET ?
                """)
        let parent = ItemID(folder)
        let sqlite = statement.sqliteStatement
        /// Columns straight from SQLite, with their byte counts (GRDB's decoding measures and validates each
        /// string again: a third of the listing's time).
        func text(_ column: Int32) -> String? {
            guard let bytes = sqlite3_column_text(sqlite, column) else { return nil }
            return String(decoding: UnsafeBufferPointer(start: bytes, count: Int(sqlite3_column_bytes(sqlite, column))), as: UTF8.self)
        }
        func integer(_ column: Int32) -> Int64 { sqlite3_column_int64(sqlite, column) }
        var items: [SyncItem] = []
        if let limit { items.reserveCapacity(limit) }
        let rows = try Row.fetchCursor(statement, arguments: [folder, limit ?? -1, max(0, offset)])
        while try rows.next() != nil {
            let luid = text(0) ?? ""
            let isFolder = integer(4) != 0
            let state = Self.state(luid: luid, flag: text(9), operations: operations)
            items.append(
                SyncItem(
                    id: ItemID(luid), fileId: text(1), parentId: parent, name: text(2) ?? "",
                    mimeType: text(3) ?? (isFolder ? folderMimeType : "application/octet-stream"), isFolder: isFolder,
                    size: integer(5), checksum: text(6), revisionId: text(7), modifiedAt: Date(millis: integer(8)), state: state,
                    isPinned: integer(10) != 0, isAvailableOffline: integer(11) != 0))
        }
        return items
    }

    /// A window of a folder's listing (same order as ``listing(in:)``): what a list on screen shows first.
    /// The first screenful of a 100,000-item folder comes in about a millisecond; scroll with `offset`.
    public func listing(in folder: ItemID, offset: Int, limit: Int) throws -> [SyncItem] {
        let operations = try operationStates()
        return try database.pool.read { db in
            try self.children(db, of: folder.rawValue, operations: operations, offset: offset, limit: max(0, limit))
        }
    }

    /// How many items a folder has in the view (for a list's scroll bar, with the windowed listing).
    public func childCount(in folder: ItemID) throws -> Int {
        try database.pool.read { db in
            try Int.fetchOne(
                db.cachedStatement(sql: "SELECT COUNT(*) FROM items WHERE l_parent = ? AND l_present = 1 AND luid != 'root'"),
                arguments: [folder.rawValue]) ?? 0
        }
    }

    /// One item of the view; `nil` if it is not (or no longer) there.
    public func item(_ id: ItemID) throws -> SyncItem? {
        let operations = try operationStates(luid: id.rawValue)
        return try database.pool.read { db in
            guard let row = try ItemRow.fetch(db, luid: id.rawValue), row.lPresent else { return nil }
            return self.makeItem(row, operations: operations)
        }
    }

    /// The server's revision and checksum of each of `ids` that the server has (for a caller that keeps its own
    /// index of what was synced, such as a folder sync after sending a tree), in one read.
    public func serverRevisions(of ids: [ItemID]) throws -> [ItemID: (revision: String, checksum: String?)] {
        try database.pool.read { db in
            var found: [ItemID: (revision: String, checksum: String?)] = [:]
            for start in stride(from: 0, to: ids.count, by: 500) {
                let slice = ids[start..<min(start + 500, ids.count)].map(\.rawValue)
                let rows = try Row.fetchAll(
                    db, sql: "SELECT luid, r_revision, r_checksum FROM items WHERE r_revision IS NOT NULL AND luid IN (\(databaseQuestionMarks(count: slice.count)))",
                    arguments: StatementArguments(slice))
                for row in rows { found[ItemID(row[0])] = (row[1], row[2]) }
            }
            return found
        }
    }

    /// The item at a slash-separated path from the root (`/Work/report.pdf`), in the view.
    public func item(atPath path: String) throws -> SyncItem? {
        let parts = path.split(separator: "/").map(String.init)
        guard !parts.isEmpty else { return try item(.root) }
        var current = ItemID.root
        for part in parts {
            let name = (try? FileName.validated(part)) ?? part
            guard
                let luid = try database.pool.read({ db in
                    try String.fetchOne(
                        db, sql: "SELECT luid FROM items WHERE l_parent = ? AND l_name = ? AND l_present = 1", arguments: [current.rawValue, name])
                })
            else { return nil }
            current = ItemID(luid)
        }
        return try item(current)
    }

    /// The path of an item in the view (`/Work/report.pdf`).
    public func path(of id: ItemID) throws -> String? {
        try database.pool.read { db in
            var names: [String] = []
            var current: String? = id.rawValue
            var guardCount = 0
            while let luid = current, luid != ItemID.root.rawValue, guardCount < 10_000 {
                guard let row = try ItemRow.fetch(db, luid: luid), row.lPresent, let name = row.lName else { return nil }
                names.append(name)
                current = row.lParent
                guardCount += 1
            }
            return "/" + names.reversed().joined(separator: "/")
        }
    }

    /// A live view of a folder: the current listing at once, then a new one after every change.
    public func items(in folder: ItemID = .root) -> AsyncStream<[SyncItem]> {
        let (stream, continuation) = AsyncStream.makeStream(of: [SyncItem].self, bufferingPolicy: .bufferingNewest(1))
        let id = UUID()
        observers.withLock { $0[id] = Observer(folder: folder.rawValue, continuation: continuation, status: nil) }
        continuation.onTermination = { [observers] _ in observers.withLock { _ = $0.removeValue(forKey: id) } }
        if let listing = try? listing(in: folder) { continuation.yield(listing) }
        return stream
    }

    /// The engine status now, and after every change.
    public func statusUpdates() -> AsyncStream<EngineStatus> {
        let (stream, continuation) = AsyncStream.makeStream(of: EngineStatus.self, bufferingPolicy: .bufferingNewest(1))
        let id = UUID()
        observers.withLock { $0[id] = Observer(folder: nil, continuation: nil, status: continuation) }
        continuation.onTermination = { [observers] _ in observers.withLock { _ = $0.removeValue(forKey: id) } }
        if let status = try? status() { continuation.yield(status) }
        return stream
    }

    /// Counts for a status line.
    public func status() throws -> EngineStatus {
        try database.pool.read { db in
            func count(_ sql: String) throws -> Int { try Int.fetchOne(db, sql: sql) ?? 0 }
            return EngineStatus(
                phase: phase,
                pending: try count("SELECT COUNT(*) FROM operations WHERE state = 'pending'"),
                uploading: progress.values.filter { if case .uploading = $0 { true } else { false } }.count,
                downloading: progress.values.filter { if case .downloading = $0 { true } else { false } }.count,
                conflicts: try count("SELECT COUNT(*) FROM items WHERE flag = 'conflict'"),
                unsynced: try count("SELECT COUNT(*) FROM items WHERE flag = 'unsynced'"),
                failed: try count("SELECT COUNT(*) FROM operations WHERE state = 'failed'"))
        }
    }

    /// Items that need the user: conflicts, unsynced items and failed operations.
    public func itemsNeedingAttention() throws -> [SyncItem] {
        let operations = try operationStates()
        return try database.pool.read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT \(ItemRow.columns) FROM items WHERE flag IS NOT NULL
                    OR luid IN (SELECT luid FROM operations WHERE state = 'failed') ORDER BY l_name
                    """
            ).map { self.makeItem(ItemRow(row: $0), operations: operations) }
        }
    }

    /// Where the item's current content is on this device, if it is.
    public func contentURL(of id: ItemID) throws -> URL? {
        try database.pool.read { db in
            guard let row = try ItemRow.fetch(db, luid: id.rawValue), let path = row.contentPath, row.contentChecksum == row.lChecksum else {
                return nil
            }
            return URL(fileURLWithPath: path)
        }
    }

    // MARK: Building view items

    /// Per item, the most telling operation state: failed > uploading/downloading > pending.
    func operationStates(luid: String? = nil) throws -> [String: ItemState] {
        let rows = try database.pool.read { db in
            try Row.fetchAll(
                db,
                sql: "SELECT luid, state, last_error, kind FROM operations WHERE state IN ('pending', 'failed')"
                    + (luid == nil ? "" : " AND luid = ?"),
                arguments: luid.map { [$0] } ?? [])
        }
        var result: [String: ItemState] = [:]
        for row in rows {
            let luid: String = row["luid"]
            if row["state"] as String == "failed" {
                result[luid] = .failed(.server(status: 0, code: "failed", message: row["last_error"] ?? "failed", retryAfter: nil))
            } else if result[luid] == nil {
                result[luid] = .pending
            }
        }
        for (luid, state) in progress where result[luid] == .pending || result[luid] == nil {
            result[luid] = state
        }
        return result
    }

    /// What an item shows: waiting for the user (its flag) before whatever its operations say.
    nonisolated static func state(luid: String, flag: String?, operations: [String: ItemState]) -> ItemState {
        switch flag {
        case "conflict": .conflict
        case "unsynced": .unsynced
        default: operations.isEmpty ? .synced : operations[luid] ?? .synced
        }
    }

    nonisolated func makeItem(_ row: ItemRow, operations: [String: ItemState]) -> SyncItem {
        let state = Self.state(luid: row.luid, flag: row.flag, operations: operations)
        return SyncItem(
            id: ItemID(row.luid), fileId: row.fileId, parentId: row.lParent.map(ItemID.init), name: row.lName ?? "",
            mimeType: row.lMime ?? (row.isFolder ? folderMimeType : "application/octet-stream"), isFolder: row.isFolder,
            size: row.lSize ?? 0, checksum: row.lChecksum, revisionId: row.rRevision, modifiedAt: Date(millis: row.lModified ?? 0),
            state: state, isPinned: row.pinned, isAvailableOffline: row.contentPath != nil && row.contentChecksum == row.lChecksum)
    }

    // MARK: Notifications

    /// Tells observers that things changed and wakes the run loop.
    func notifyChanged() {
        wake()
        let current = observers.withLock { $0 }
        guard !current.isEmpty else { return }
        let operations = (try? operationStates()) ?? [:]
        let status = try? status()
        for observer in current.values {
            if let folder = observer.folder, let continuation = observer.continuation {
                let listing = try? database.pool.read { db in try self.children(db, of: folder, operations: operations) }
                if let listing { continuation.yield(listing) }
            }
            if let status, let continuation = observer.status { continuation.yield(status) }
        }
        wake()
    }

    func wake() {
        signal.fire()
    }

    /// For use inside database transactions (off the actor).
    nonisolated func traceSync(_ line: String) {
        traceBuffer.withLock { $0.append(line) }
    }

    func trace(_ line: String) {
        recentActivity.append(contentsOf: traceBuffer.withLock { lines in defer { lines = [] }; return lines })
        recentActivity.append(line)
        if recentActivity.count > 50 { recentActivity.removeFirst(recentActivity.count - 50) }
    }
}

/// A queued operation, for status displays and diagnostics.
public struct OperationSummary: Sendable, Equatable, CustomStringConvertible {
    public var id: String
    public var item: ItemID
    public var kind: String
    public var state: String
    public var attempts: Int
    public var nextAttemptAt: Date
    public var lastError: String?
    public var dependsOn: [String]

    public var description: String {
        "\(kind) \(item) [\(state), \(attempts) attempts\(dependsOn.isEmpty ? "" : ", after \(dependsOn)")\(lastError.map { ": \($0)" } ?? "")]"
    }
}

extension SyncEngine {
    /// Everything in the queue, oldest first.
    public func operations() throws -> [OperationSummary] {
        try database.pool.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM operations ORDER BY seq").map(OperationRow.init(row:)).map {
                OperationSummary(
                    id: $0.id, item: ItemID($0.luid), kind: $0.kind.rawValue, state: $0.state.rawValue, attempts: $0.attempts,
                    nextAttemptAt: Date(millis: $0.nextAttemptAt), lastError: $0.lastError, dependsOn: $0.dependsOn)
            }
        }
    }
}
