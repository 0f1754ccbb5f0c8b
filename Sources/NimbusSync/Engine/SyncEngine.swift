import Foundation
import GRDB
import GRDBSQLite
import NimbusAPI

/// The local-first sync engine: one control actor over a local database that holds three trees — remote,
/// synced (the merge base) and local — and a pure planner (`Planner`) that decides, from them alone, what to
/// do. The engine observes (the provider's changes, the folder on disk), plans, carries the plan out through a
/// ``RemoteProvider`` and the local side, records each outcome in the trees, and plans again.
///
/// As the app's data layer (``LocalSide/appStore``): every user action (``createFolder(named:in:)``,
/// ``upload(from:named:in:mimeType:copy:checksum:)``, ``rename(_:to:)``…) changes the local tree and returns at
/// once; the view the app shows (``items(in:)``) is the local tree. As a synced folder (``FolderSync``), the local
/// tree is the folder on disk. ``run(interval:)`` keeps the engine in sync; ``syncOnce()`` does one full round.
public actor SyncEngine {
    /// How the engine was set up.
    public nonisolated let configuration: SyncConfiguration
    let database: LocalDatabase
    let contentDirectory: URL
    let stagingDirectory: URL
    /// Content sealed at rest (an encrypted library, ``SyncConfiguration/encryption``); nil: plain files.
    let sealing: ContentSealing?
    /// The database's label, under which its cipher is registered (``StoreCipher``).
    let databaseLabel: String
    let tokenStore: any TokenStore
    /// Created once per library and kept across sign-out and account switches.
    public nonisolated let libraryId: String
    let stateStore: DatabaseStateStore
    /// The signed-in Nimbus account (the app library's remote).
    var client: ServerClient?
    var provider: (any RemoteProvider)?
    /// The folder on disk, for a synced folder.
    let disk: DiskFolder?
    var phase: EngineStatus.Phase
    /// Transfers in progress (written by providers' progress callbacks, off the actor).
    let progressBox = LockedBox([String: ItemState]())
    var progress: [String: ItemState] { progressBox.withLock { $0 } }
    /// The last things the engine did, newest last (diagnostics).
    private(set) var recentActivity: [String] = []
    /// Items a step is running for now.
    var running: Set<String> = []
    /// The items with a retry schedule (a `failures` row), as of the last plan's admission and kept up by
    /// ``failed(_:_:)``; nil until read. A step that succeeds for an item not in it has no row to delete: no write.
    var knownFailures: Set<String>?
    var random: SeededRandom
    let observers = LockedBox([UUID: Observer]())
    let signal = Signal()
    /// Deletions here (from deletions there) allowed past the mass-deletion guard, once.
    var massDeletionConfirmed = false
    /// What the last scan of a synced folder found.
    var lastScan = DiskFolder.Scan()
    /// A step found the disk changed since the last scan: scan again before the next plan.
    var needsScan = false
    /// Deletions held by the mass-deletion guards: here (from deletions there) and there (from deletions here).
    var heldDeletions = 0
    var heldLocalDeletions = 0
    /// A synced folder may delete many items there at once (the user confirmed).
    var confirmsLocalDeletions = false
    /// The steps carried out since the last ``takeRoundReport()`` (with the path of what was deleted or forked,
    /// taken before it went); kept for a synced folder's report only.
    var done: [(step: PlannedOperation, path: String?)] = []
    /// How many steps there have succeeded (a round that sent something takes in its own changes afterwards).
    var sent = 0
    /// Errors of those steps, by item.
    var stepErrors: [String: String] = [:]
    /// How many steps have failed because the remote could not be reached: a batch of steps stops starting new ones
    /// when this grows (an outage would otherwise try — and wait for — every one of 10,000 queued uploads).
    var unreachableFailures = 0

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
        Self.removeLeftoverPlaintext(in: stagingDirectory)
        databaseLabel = "nimbus-library-" + UUID.random().uuidString.lowercased()
        database = try LocalDatabase(path: directory.appending(path: "sync.sqlite").path, label: databaseLabel)
        // Encrypted at rest: unlocked before anything is read (a wrong key is an error here, never an empty view).
        let (isNew, encrypted, check) = try database.pool.read { db in
            (try db.meta("libraryId") == nil, try db.meta("encryption") != nil, try db.meta("keyCheck"))
        }
        let dataKey = try StoreKey.unlock(directory: directory, encryption: configuration.encryption, encrypted: encrypted, isNew: isNew, check: check)
        let cipher = dataKey.map(StoreCipher.init(dataKey:))
        StoreCipher.register(cipher, label: databaseLabel)
        if let cipher, let blob = try database.pool.read({ db in try db.meta(StoreCipher.cacheMetaKey) }) {
            cipher.loadNameCache(blob)
        }
        sealing = cipher.map { ContentSealing($0.content) }
        Self.removeOrphans(in: stagingDirectory, database)
        stateStore = DatabaseStateStore(pool: database.pool)
        tokenStore = configuration.tokenStore ?? FileTokenStore(url: directory.appending(path: "account.json"))
        random = SeededRandom(seed: configuration.randomSeed ?? UInt64.random(in: 0...UInt64.max))
        if case .folder(let root, let fileSystem, let settleTime) = configuration.local {
            disk = DiskFolder(root: root.standardizedFileURL, fileSystem: fileSystem, settleTime: settleTime)
        } else {
            disk = nil
        }
        let now = configuration.clock.now()
        libraryId = try database.pool.write { db in
            if let id = try db.meta("libraryId") { return id }
            let id = UUID.random().uuidString.lowercased()
            if let cipher {
                try db.setMeta("encryption", "aes-256-gcm-v1")
                try db.setMeta("keyCheck", cipher.check)
            }
            try db.setMeta("libraryId", id)
            var root = ItemRow.empty(ItemID.root.rawValue, isFolder: true)
            root.lPresent = true
            root.lName = ""
            root.lModified = now.millis
            try root.save(db)
            return id
        }
        if let makeProvider = configuration.provider {
            provider = makeProvider(stateStore)
            phase = .idle
        } else if let account = try tokenStore.load() {
            let client = ServerClient(transport: Self.transport(for: account.server, configuration), tokenStore: tokenStore)
            self.client = client
            provider = Self.nimbusProvider(client, stateStore, configuration)
            phase = .idle
        } else {
            phase = .signedOut
        }
    }

    deinit {
        // The keys leave memory with the engine.
        StoreCipher.register(nil, label: databaseLabel)
    }

    /// Whether this library is encrypted at rest.
    public nonisolated var isEncrypted: Bool { sealing != nil }

    static func transport(for server: URL, _ configuration: SyncConfiguration) -> any Transport {
        configuration.transportFactory?(server) ?? AsyncHTTPClientTransport(baseURL: server)
    }

    static func nimbusProvider(_ client: ServerClient, _ state: any ProviderStateStore, _ configuration: SyncConfiguration) -> NimbusProvider {
        NimbusProvider(
            client: client, state: state, simpleUploadLimit: configuration.simpleUploadLimit,
            batchLimits: (configuration.batchFileLimit, configuration.maxBatchFiles, configuration.maxBatchBytes), blockUploads: configuration.blockUploads)
    }

    nonisolated var now: Date { configuration.clock.now() }

    /// `NIMBUS_TRACE=1` prints every step and its outcome on stderr.
    static let tracing = ProcessInfo.processInfo.environment["NIMBUS_TRACE"] != nil

    /// The planner's policy for this engine: a synced folder keeps and sends again what was deleted there but
    /// changed here; the app library holds it for the user (`unsynced`). Whether the remote keeps revisions is its
    /// feature (the account's server, before a provider is made, does).
    var policy: PlannerPolicy {
        PlannerPolicy(
            conflictStrategy: configuration.conflictStrategy, keepsDeletedThere: disk != nil, deviceName: configuration.deviceName, date: now,
            remoteKeepsRevisions: provider.map { $0.features.revisions != nil } ?? true)
    }

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
        provider = Self.nimbusProvider(client, stateStore, configuration)
        phase = .idle
        try? await database.pool.write { db in
            // Steps that stopped on a 401 may go again.
            try db.execute(sql: "UPDATE failures SET next_attempt_at = 0 WHERE failed = 0")
        }
        notifyChanged()
    }

    /// Signs out. Local items stay, and local changes keep being recorded; they are sent after the next sign-in.
    public func signOut() async {
        await client?.logOut()
        client = nil
        provider = nil
        phase = .signedOut
        notifyChanged()
    }

    /// Signs out and, with `wipingKeys`, destroys this library's key: the key file or the key store's key
    /// is deleted, the cipher leaves the process's registry, and the sealed content is removed — what was encrypted
    /// can no longer be read by anyone. Drop the engine afterwards (the library's folder may then be deleted).
    /// Refused while changes wait to be sent, unless `discardingPending`: they would be lost.
    public func signOut(wipingKeys: Bool, discardingPending: Bool = false) async throws {
        guard wipingKeys else { return await signOut() }
        let status = try status()
        if !discardingPending, status.pending + status.failed + status.conflicts + status.unsynced > 0 {
            throw SyncError.invalid("Changes on this device have not been sent yet; sync first, or discard them to wipe the keys.")
        }
        await signOut()
        StoreCipher.register(nil, label: databaseLabel)
        if case .keyStore(let store) = configuration.encryption { try store.deleteKey() }
        let keyFile = configuration.directory.appending(path: StoreKey.fileName)
        if FileManager.default.fileExists(atPath: keyFile.path) { try FileManager.default.removeItem(at: keyFile) }
        for folder in [contentDirectory, stagingDirectory] {
            for name in (try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? [] {
                try? FileManager.default.removeItem(at: folder.appending(path: name))
            }
        }
    }

    /// Changes the passphrase of the encrypted library in `directory` (``StoreEncryption/passphrase(_:)``): its data
    /// key is re-wrapped under the new one; nothing else is re-encrypted. ``EncryptionError/wrongPassphrase`` if
    /// `old` is not the passphrase (nothing changes then).
    public static func changePassphrase(in directory: URL, from old: String, to new: String) throws {
        let keyFile = directory.appending(path: StoreKey.fileName)
        guard let data = try? Data(contentsOf: keyFile) else {
            throw EncryptionError.keyMissing("\(directory.path) has no passphrase-wrapped key (\(StoreKey.fileName)).")
        }
        let wrapped: WrappedKey
        do { wrapped = try JSONDecoder().decode(WrappedKey.self, from: data) } catch {
            throw EncryptionError.tampered("\(keyFile.path) is not a key file")
        }
        try StoreKey.write(try wrapped.rewrapped(from: old, to: new), to: keyFile)
    }

    func requireProvider() throws -> any RemoteProvider {
        guard let provider else { throw SyncError.notSignedIn }
        return provider
    }

    /// The signed-in server, for calls outside the engine's model (trash, account details).
    public func server() throws -> ServerClient {
        guard let client else { throw SyncError.notSignedIn }
        return client
    }

    // MARK: Reading the view

    /// The merged view of a folder, now. Listing marks the folder as recently used (the metadata cache evicts
    /// the least recently listed first); if its children were evicted, the next sync round fetches them again
    /// (``isListingComplete(_:)`` tells, ``refreshFolder(_:)`` does it now).
    public func listing(in folder: ItemID = .root) throws -> [SyncItem] {
        let failures = try failureStates()
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
        return try database.pool.read { db in try self.children(db, of: folder.rawValue, failures: failures) }
    }

    /// A folder's children in the view, folders first, then by name. Reads only the columns a ``SyncItem``
    /// shows, by index, with a cached statement: this is the hot path of big folders (100,000 children).
    nonisolated func children(
        _ db: Database, of folder: String, failures: [String: ItemState], offset: Int = 0, limit: Int? = nil
    ) throws -> [SyncItem] {
        let statement = try db.cachedStatement(
            sql: """
                SELECT luid, file_id, l_name, l_mime, is_folder, l_size, l_checksum, r_revision, l_modified, flag, pinned,
                    content_path IS NOT NULL AND content_checksum IS l_checksum, \(ItemRow.pendingExpression)
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
        // Sealed names do not sort as their names do: an encrypted store orders (and windows) the listing here.
        let cipher = db.storeCipher
        if let limit, cipher == nil { items.reserveCapacity(limit) }
        let rows = try Row.fetchCursor(statement, arguments: cipher == nil ? [folder, limit ?? -1, max(0, offset)] : [folder, -1, 0])
        while try rows.next() != nil {
            let luid = text(0) ?? ""
            let isFolder = integer(4) != 0
            let state = Self.state(luid: luid, hold: text(9), pending: integer(12) != 0, failures: failures)
            let name = try cipher.map { try $0.openName(text(2) ?? "") } ?? text(2) ?? ""
            items.append(
                SyncItem(
                    id: ItemID(luid), fileId: try cipher.map { cipher in try text(1).map { try cipher.openId($0) } } ?? text(1), parentId: parent, name: name,
                    mimeType: text(3) ?? (isFolder ? folderMimeType : "application/octet-stream"), isFolder: isFolder,
                    size: integer(5), checksum: text(6), revisionId: text(7), modifiedAt: Date(millis: integer(8)), state: state,
                    isPinned: integer(10) != 0, isAvailableOffline: integer(11) != 0))
        }
        guard cipher != nil else { return items }
        items.sort { $0.isFolder != $1.isFolder ? $0.isFolder : Self.namePrecedes($0.name, $1.name) }
        let start = min(items.count, max(0, offset))
        let end = limit.map { min(items.count, start + $0) } ?? items.count
        return Array(items[start..<end])
    }

    /// SQLite's order of names (its BINARY collation: UTF-8 bytes), for listings ordered in memory.
    nonisolated static func namePrecedes(_ a: String, _ b: String) -> Bool { a.utf8.lexicographicallyPrecedes(b.utf8) }

    /// A window of a folder's listing (same order as ``listing(in:)``): what a list on screen shows first.
    /// The first screenful of a 100,000-item folder comes in about a millisecond; scroll with `offset`.
    public func listing(in folder: ItemID, offset: Int, limit: Int) throws -> [SyncItem] {
        let failures = try failureStates()
        return try database.pool.read { db in
            try self.children(db, of: folder.rawValue, failures: failures, offset: offset, limit: max(0, limit))
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
        let failures = try failureStates()
        return try database.pool.read { db in
            guard let row = try ItemRow.fetch(db, luid: id.rawValue), row.lPresent else { return nil }
            return self.makeItem(row, failures: failures)
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
                        db, sql: "SELECT luid FROM items WHERE l_parent = ? AND l_name = ? AND l_present = 1",
                        arguments: [current.rawValue, db.storeCipher?.sealName(name) ?? name])
                })
            else { return nil }
            current = ItemID(luid)
        }
        return try item(current)
    }

    /// The path of an item in the view (`/Work/report.pdf`).
    public func path(of id: ItemID) throws -> String? {
        try database.pool.read { db in try self.localPath(db, id.rawValue).map { "/" + $0 } }
    }

    /// The path of an item in the local tree, relative to the root (`Work/report.pdf`; the root is "").
    nonisolated func localPath(_ db: Database, _ luid: String) throws -> String? {
        try treePath(db, luid, sql: "SELECT l_parent, l_name, l_present FROM items WHERE luid = ?")
    }

    /// An item's path in one tree, walking up with `sql` (parent, name, present of a row): nil if it or a folder
    /// above it is not in that tree.
    nonisolated func treePath(_ db: Database, _ luid: String, sql: String) throws -> String? {
        var names: [String] = []
        var current: String? = luid
        var guardCount = 0
        let cipher = db.storeCipher
        while let id = current, id != ItemID.root.rawValue, guardCount < 10_000 {
            guard let row = try Row.fetchOne(db.cachedStatement(sql: sql), arguments: [id]), row[2] as Bool, let name = row[1] as String? else {
                return nil
            }
            names.append(try cipher?.openName(name) ?? name)
            current = row[0]
            guardCount += 1
        }
        return names.reversed().joined(separator: "/")
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

    /// Counts for a status line. `pending` counts items with something to send or to bring here.
    public func status() throws -> EngineStatus {
        try database.pool.read { db in
            func count(_ sql: String) throws -> Int { try Int.fetchOne(db, sql: sql) ?? 0 }
            return EngineStatus(
                phase: phase,
                pending: try count(
                    """
                    SELECT COUNT(*) FROM items WHERE luid != 'root' AND flag IS NULL AND (\(ItemRow.pendingExpression)
                    OR (r_present = 1 AND s_present = 1 AND (r_parent IS NOT s_parent OR (r_name IS NOT s_name AND nimbus_names_differ(r_name, s_name)) OR r_revision IS NOT s_revision))
                    OR (r_present = 1 AND s_present = 0 AND \(disk == nil))
                    OR (r_present = 0 AND s_present = 1))
                    AND luid NOT IN (SELECT luid FROM failures WHERE failed = 1)
                    """),
                uploading: progress.values.filter { if case .uploading = $0 { true } else { false } }.count,
                downloading: progress.values.filter { if case .downloading = $0 { true } else { false } }.count,
                conflicts: try count("SELECT COUNT(*) FROM items WHERE flag = 'conflict'"),
                unsynced: try count("SELECT COUNT(*) FROM items WHERE flag = 'unsynced'"),
                failed: try count("SELECT COUNT(*) FROM failures WHERE failed = 1"))
        }
    }

    /// Items that need the user: conflicts, unsynced items and items whose steps failed for good.
    public func itemsNeedingAttention() throws -> [SyncItem] {
        let failures = try failureStates()
        return try database.pool.read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT \(ItemRow.columns) FROM items WHERE flag IS NOT NULL
                    OR luid IN (SELECT luid FROM failures WHERE failed = 1)
                    """
            ).map { self.makeItem(try ItemRow.decode($0, db), failures: failures) }
            .sorted { Self.namePrecedes($0.name, $1.name) }
        }
    }

    /// Where the item's current content is on this device, if it is. Nil in an encrypted library (its files are
    /// sealed): use ``readContent(of:)`` or ``exportContent(of:to:)``, which work for both.
    public func contentURL(of id: ItemID) throws -> URL? {
        guard sealing == nil else { return nil }
        return try database.pool.read { db in
            guard let row = try ItemRow.fetch(db, luid: id.rawValue), let path = row.contentPath, row.contentChecksum == row.lChecksum else {
                return nil
            }
            return URL(fileURLWithPath: path)
        }
    }

    // MARK: Building view items

    /// Items whose steps failed for good, and those being transferred now.
    func failureStates() throws -> [String: ItemState] {
        var result: [String: ItemState] = [:]
        let failed = try database.pool.read { db in
            let cipher = db.storeCipher
            return try Row.fetchAll(db, sql: "SELECT luid, last_error FROM failures WHERE failed = 1").map { row -> (String, String?) in
                let stored: String? = row[1]
                return (row[0], try cipher.map { cipher in try stored.map { try cipher.openText($0) } } ?? stored)
            }
        }
        for (luid, message) in failed {
            result[luid] = .failed(.server(status: 0, code: .other("failed"), message: message ?? "failed", retryAfter: nil))
        }
        for (luid, state) in progress where result[luid] == nil { result[luid] = state }
        return result
    }

    /// What an item shows: waiting for the user (its hold) before failed or in transfer, before pending.
    nonisolated static func state(luid: String, hold: String?, pending: Bool, failures: [String: ItemState]) -> ItemState {
        switch hold {
        case "conflict": return .conflict
        case "unsynced": return .unsynced
        default:
            if let state = failures[luid] { return state }
            return pending ? .pending : .synced
        }
    }

    nonisolated func makeItem(_ row: ItemRow, failures: [String: ItemState]) -> SyncItem {
        let pending = row.lPresent != row.sPresent || row.lParent != row.sParent || row.lName != row.sName
            || (!row.isFolder && row.lChecksum != row.sChecksum) || row.lChanging
        let state = Self.state(luid: row.luid, hold: row.hold?.rawValue, pending: pending, failures: failures)
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
        let failures = (try? failureStates()) ?? [:]
        let status = try? status()
        for observer in current.values {
            if let folder = observer.folder, let continuation = observer.continuation {
                let listing = try? database.pool.read { db in try self.children(db, of: folder, failures: failures) }
                if let listing { continuation.yield(listing) }
            }
            if let status, let continuation = observer.status { continuation.yield(status) }
        }
    }

    func wake() {
        signal.fire()
    }

    /// What the remote can do (where no provider is set yet, the Nimbus account's: a change feed, a trash) — how
    /// often a watch polls it, whether a deletion there can be undone (``FolderSyncReport/remoteKeepsTrash``).
    var remoteFeatures: ProviderFeatures { provider?.features ?? ProviderFeatures(changeFeed: true, trash: true) }

    /// Removes what a process killed in the middle of a download left in `staging`: the plain copy of a file about to
    /// go into a synced folder (`plain-…`; an encrypted store must not keep one). Only files untouched for a minute:
    /// another process syncing the same folder may be writing one now.
    static func removeLeftoverPlaintext(in staging: URL, olderThan age: TimeInterval = 60) {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: staging.path) else { return }
        let now = Date()
        for name in names where name.hasPrefix(plainPrefix) {
            let path = staging.appending(path: name).path
            if untouched(path, for: age, now: now) { try? FileManager.default.removeItem(atPath: path) }
        }
    }

    /// Whether the file at `path` was last modified more than `age` before `now` (false if it cannot be told).
    static func untouched(_ path: String, for age: TimeInterval, now: Date) -> Bool {
        guard let modified = (try? FileManager.default.attributesOfItem(atPath: path))?[.modificationDate] as? Date else { return false }
        return now.timeIntervalSince(modified) > age
    }

    /// Removes what a process killed while it copied a file in left in `staging` (a big `nimbus put -`, any file put into
    /// an encrypted library): a copy no item names, untouched for a day — and a partial download untouched for a week
    /// (its revision is long replaced, or fetched again from the start). Space only: a copy an item names is its content.
    static func removeOrphans(in staging: URL, _ database: LocalDatabase, olderThan age: TimeInterval = 86_400) {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: staging.path) else { return }
        let now = Date()
        let old = names.map { (name: $0, path: staging.appending(path: $0).path) }.filter { entry in
            entry.name.hasPrefix("download-") && entry.name.hasSuffix(".partial") ? untouched(entry.path, for: 7 * age, now: now)
                : !entry.name.hasPrefix(plainPrefix) && untouched(entry.path, for: age, now: now)
        }
        // (By name: a home moved since keeps its rows' old paths; the names are unique.)
        guard !old.isEmpty,
            let named = try? database.pool.read({ db in
                Set(try String.fetchAll(db, sql: "SELECT content_path FROM items WHERE content_path IS NOT NULL").map { ($0 as NSString).lastPathComponent })
            })
        else { return }
        for entry in old where !named.contains(entry.name) { try? FileManager.default.removeItem(atPath: entry.path) }
    }

    /// The prefix of the plain copies ``removeLeftoverPlaintext(in:olderThan:)`` removes.
    static let plainPrefix = "plain-"

    /// Notes a step that succeeded.
    func noteDone(_ step: PlannedOperation, path: String? = nil) {
        if step.isRemote { sent += 1 }
        if disk != nil { done.append((step, path)) }
    }

    func trace(_ line: String) {
        if Self.tracing {
            let stamp = String(format: "%.3f", Date().timeIntervalSince1970.truncatingRemainder(dividingBy: 1000))
            FileHandle.standardError.write(Data("\(stamp) [\(configuration.deviceName)] \(line.prefix(300))\n".utf8))
        }
        recentActivity.append(line)
        if recentActivity.count > 80 { recentActivity.removeFirst(recentActivity.count - 80) }
    }
}

/// The provider's small state (resumable sessions) and the device's block index, in the engine's database.
final class DatabaseStateStore: ProviderStateStore, BlockIndexStore, @unchecked Sendable {
    let pool: DatabasePool

    init(pool: DatabasePool) { self.pool = pool }

    func value(for key: String) throws -> String? {
        try pool.read { db in
            let stored = try String.fetchOne(db, sql: "SELECT value FROM provider_state WHERE key = ?", arguments: [db.storedKey(key)])
            return try db.storeCipher.map { cipher in try stored.map { try cipher.openText($0) } } ?? stored
        }
    }

    func setValue(_ value: String?, for key: String) throws { try setValues([key: value]) }

    func values(withPrefix prefix: String) throws -> [String: String]? {
        try pool.read { db in
            let rows = try Row.fetchAll(
                db, sql: "SELECT key, value FROM provider_state WHERE key >= ? AND key < ?", arguments: [prefix, prefix + "\u{10FFFF}"])
            let cipher = db.storeCipher
            return Dictionary(try rows.map { (try db.openedKey($0[0]), try cipher?.openText($0[1]) ?? $0[1]) }, uniquingKeysWith: { $1 })
        }
    }

    func setBlocks(_ blocks: [BlockManifest.Block], of fileId: String, revision: String) throws {
        try pool.write { db in
            let fileId = db.storedId(fileId)
            try db.execute(sql: "DELETE FROM block_index WHERE file_id = ?", arguments: [fileId])
            let insert = try db.cachedStatement(
                sql: "INSERT INTO block_index (file_id, position, revision, hash, offset, size) VALUES (?, ?, ?, ?, ?, ?)")
            // All or nothing: positions name the server's blocks by index (a base revision's runs).
            let hashes = blocks.compactMap { [UInt8](hex: $0.hash).map { Data($0) } }
            guard hashes.count == blocks.count else { return }
            var offset: Int64 = 0
            for (position, (block, hash)) in zip(blocks, hashes).enumerated() {
                try insert.execute(arguments: [fileId, position, revision, hash, offset, block.size])
                offset += block.size
            }
        }
    }

    func blocks(of fileId: String) throws -> (revision: String, blocks: [BlockManifest.Block])? {
        try pool.read { db in
            let rows = try Row.fetchAll(
                db, sql: "SELECT revision, hash, size FROM block_index WHERE file_id = ? ORDER BY position", arguments: [db.storedId(fileId)])
            guard let revision = rows.first?[0] as String? else { return nil }
            return (revision, rows.map { BlockManifest.Block(hash: FileHasher.hex($0[1] as Data), size: $0[2]) })
        }
    }

    func locations(of hashes: Set<String>) throws -> [String: [BlockLocation]] {
        try pool.read { db in
            var found: [String: [BlockLocation]] = [:]
            let statement = try db.cachedStatement(sql: "SELECT file_id, offset, size FROM block_index WHERE hash = ? LIMIT 4")
            for hash in hashes {
                guard let key = [UInt8](hex: hash).map({ Data($0) }) else { continue }
                let rows = try Row.fetchAll(statement, arguments: [key])
                if !rows.isEmpty { found[hash] = try rows.map { BlockLocation(fileId: try db.openedId($0[0]), offset: $0[1], size: $0[2]) } }
            }
            return found
        }
    }

    func setValues(_ values: [String: String?]) throws {
        try pool.write { db in
            let cipher = db.storeCipher
            for (key, value) in values {
                if let value {
                    try db.execute(
                        sql: "INSERT INTO provider_state (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                        arguments: [db.storedKey(key), cipher?.sealText(value) ?? value])
                } else {
                    try db.execute(sql: "DELETE FROM provider_state WHERE key = ?", arguments: [db.storedKey(key)])
                }
            }
        }
    }
}
