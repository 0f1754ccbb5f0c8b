import Foundation
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
    /// The library's database, behind its verbs.
    let store: SyncStore
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
    /// A synced folder's selective sync (kept in the library, read again at each round: `nimbus select` may change it
    /// while a sync runs).
    var selection = SyncSelection()
    /// A synced folder's cache limit (``PlannerPolicy/cacheLimit``).
    var cacheLimit: Int64?
    /// The network policy, who tells the network's state (nil: no constraints), and what it let run at the last look.
    var networkPolicy = NetworkPolicy()
    var constraintsProvider: (any NetworkConstraintsProvider)?
    var allowance = NetworkAllowance.everything
    /// The policy's bandwidth limits, kept across rounds (a limiter remembers what it let pass).
    var bandwidth = BandwidthLimits()
    var lastConstraints: NetworkConstraints?
    /// Content transfers the last admission held for the network.
    var waitingForNetwork = 0

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
        databaseLabel = "nimbus-library-" + UUID().uuidString.lowercased()  // process-wide unique (never seeded)
        store = try SyncStore(path: directory.appending(path: "sync.sqlite").path, label: databaseLabel)
        // Encrypted at rest: unlocked before anything is read (a wrong key is an error here, never an empty view).
        let (isNew, encrypted, check) = try store.read { tx in try tx.libraryState() }
        let dataKey = try StoreKey.unlock(directory: directory, encryption: configuration.encryption, encrypted: encrypted, isNew: isNew, check: check)
        let cipher = dataKey.map(StoreCipher.init(dataKey:))
        StoreCipher.register(cipher, label: databaseLabel)
        if let cipher, let blob = try store.read({ tx in try tx.nameCache() }) {
            cipher.loadNameCache(blob)
        }
        sealing = cipher.map { ContentSealing($0.content) }
        Self.removeOrphans(in: stagingDirectory, store)
        stateStore = DatabaseStateStore(store)
        tokenStore = configuration.tokenStore ?? FileTokenStore(url: directory.appending(path: "account.json"))
        random = SeededRandom(seed: configuration.randomSeed ?? UInt64.random(in: 0...UInt64.max))
        if case .folder(let root, let fileSystem, let settleTime) = configuration.local {
            disk = DiskFolder(root: root.standardizedFileURL, fileSystem: fileSystem, settleTime: settleTime)
        } else {
            disk = nil
        }
        let now = configuration.clock.now()
        libraryId = try store.write { tx in try tx.libraryId(creatingWith: cipher, at: now) }
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
            remoteKeepsRevisions: provider.map { $0.features.revisions != nil } ?? true, selection: disk == nil ? SyncSelection() : selection,
            cacheLimit: disk == nil ? nil : cacheLimit)
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
        let previous = try await store.read { tx in try tx.account() }
        if let previous, previous != key {
            try await switchAccount(to: key)
        } else if previous == nil {
            try await store.write { tx in try tx.setAccount(key) }
        }
        self.client = client
        provider = Self.nimbusProvider(client, stateStore, configuration)
        phase = .idle
        try? await store.write { tx in
            // Steps that stopped on a 401 may go again.
            try tx.retryWaitingNow()
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
        if try store.read({ tx in try tx.shouldMarkListed(folder.rawValue, at: now) }) {
            try store.write { tx in try tx.markListed(folder.rawValue, at: now) }
        }
        return try store.read { tx in try tx.children(of: folder.rawValue, failures: failures) }
    }

    /// A window of a folder's listing (same order as ``listing(in:)``): what a list on screen shows first.
    /// The first screenful of a 100,000-item folder comes in about a millisecond; scroll with `offset`.
    public func listing(in folder: ItemID, offset: Int, limit: Int) throws -> [SyncItem] {
        let failures = try failureStates()
        return try store.read { tx in
            try tx.children(of: folder.rawValue, failures: failures, offset: offset, limit: max(0, limit))
        }
    }

    /// How many items a folder has in the view (for a list's scroll bar, with the windowed listing).
    public func childCount(in folder: ItemID) throws -> Int {
        try store.read { tx in try tx.childCount(of: folder.rawValue) }
    }

    /// One item of the view; `nil` if it is not (or no longer) there.
    public func item(_ id: ItemID) throws -> SyncItem? {
        let failures = try failureStates()
        return try store.read { tx in
            guard let row = try tx.item(id.rawValue), row.lPresent else { return nil }
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
                let luid = try store.read({ tx in try tx.luid(named: name, inLocal: current.rawValue) })
            else { return nil }
            current = ItemID(luid)
        }
        return try item(current)
    }

    /// The path of an item in the view (`/Work/report.pdf`).
    public func path(of id: ItemID) throws -> String? {
        try store.read { tx in try tx.localPath(id.rawValue).map { "/" + $0 } }
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
        let counts = try store.read { tx in try tx.statusCounts(remoteAddsArePending: disk == nil) }
        return EngineStatus(
            phase: phase, pending: counts.pending,
            uploading: progress.values.filter { if case .uploading = $0 { true } else { false } }.count,
            downloading: progress.values.filter { if case .downloading = $0 { true } else { false } }.count,
            conflicts: counts.conflicts, unsynced: counts.unsynced, failed: counts.failed)
    }

    /// Items that need the user: conflicts, unsynced items and items whose steps failed for good.
    public func itemsNeedingAttention() throws -> [SyncItem] {
        let failures = try failureStates()
        return try store.read { tx in try tx.itemsNeedingAttention() }.map { makeItem($0, failures: failures) }
            .sorted { StoreTransaction.namePrecedes($0.name, $1.name) }
    }

    /// Where the item's current content is on this device, if it is. Nil in an encrypted library (its files are
    /// sealed): use ``readContent(of:)`` or ``exportContent(of:to:)``, which work for both.
    public func contentURL(of id: ItemID) throws -> URL? {
        guard sealing == nil else { return nil }
        return try store.read { tx in
            guard let row = try tx.item(id.rawValue), let path = row.contentPath, row.contentChecksum == row.lChecksum else {
                return nil
            }
            return URL(fileURLWithPath: path)
        }
    }

    // MARK: Building view items

    /// Items whose steps failed for good, and those being transferred now.
    func failureStates() throws -> [String: ItemState] {
        var result: [String: ItemState] = [:]
        let failed = try store.read { tx in try tx.failedForGood() }
        for (luid, message) in failed {
            result[luid] = .failed(.server(status: 0, code: .other("failed"), message: message ?? "failed", retryAfter: nil))
        }
        for (luid, state) in progress where result[luid] == nil { result[luid] = state }
        return result
    }

    nonisolated func makeItem(_ row: ItemRow, failures: [String: ItemState]) -> SyncItem {
        let state = ItemRow.viewState(luid: row.luid, hold: row.hold, pending: row.isPending, failures: failures)
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
                let listing = try? store.read { tx in try tx.children(of: folder, failures: failures) }
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
    static func removeOrphans(in staging: URL, _ store: SyncStore, olderThan age: TimeInterval = 86_400) {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: staging.path) else { return }
        let now = Date()
        let old = names.map { (name: $0, path: staging.appending(path: $0).path) }.filter { entry in
            entry.name.hasPrefix("download-") && entry.name.hasSuffix(".partial") ? untouched(entry.path, for: 7 * age, now: now)
                : !entry.name.hasPrefix(plainPrefix) && untouched(entry.path, for: age, now: now)
        }
        // (By name: a home moved since keeps its rows' old paths; the names are unique.)
        guard !old.isEmpty,
            let named = try? store.read({ tx in try tx.contentFileNames() })
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
