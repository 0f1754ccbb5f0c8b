import Foundation
import NimbusAPI

/// The remote tree: kept up to date from the provider's change feed (from the saved cursor) or, for a provider
/// without one (or an expired cursor), from a full listing compared with what was known.
extension SyncEngine {
    /// Brings in what changed there: the remote tree is brought up to date and the steps the planner asks for
    /// here are carried out (the view shows the changes); nothing is sent.
    public func pull() async throws {
        let provider = try requireProvider()
        do {
            try await refreshRemote(provider)
        } catch let error as ProviderError {
            throw SyncError(error)
        }
        try await observeLocal()
        try await runPlans(provider, including: { !$0.isRemote })
        try await hydratePinned(provider)
        notifyChanged()
    }

    func refreshRemote(_ provider: any RemoteProvider) async throws {
        try await mapRoot(provider)
        guard provider.features.changeFeed else { return try await relist(provider) }
        guard let cursor = try await store.read({ tx in try tx.cursor() }) else { return try await relist(provider) }
        do {
            var page = try await provider.changes(since: cursor)
            let rootId = try await store.read { tx in try tx.item(ItemID.root.rawValue)?.fileId }
            while true {
                if let rootId, page.changes.contains(.remove(id: rootId)) { try await checkRootStillThere(provider, rootId) }
                // The next page is fetched (and decoded) while this one is applied.
                let changes = page.changes
                let next = page.cursor
                let more = page.hasMore
                async let following = more ? provider.changes(since: next) : nil
                try await store.write { tx in
                    var parents: [String: String] = [:]
                    for change in changes { try self.applyChange(tx, change, parents: &parents) }
                    try tx.setCursor(next)
                }
                guard let more = try await following else { break }
                page = more
            }
        } catch ProviderError.gone {
            try await relist(provider)
        }
    }

    /// The feed says the remote's root folder went (trashed from a web UI): unless it is back already, nothing of
    /// that page is taken in (its removals would empty this side) and the round stops with ``ProviderError/rootMissing(_:)``.
    func checkRootStillThere(_ provider: any RemoteProvider, _ rootId: String) async throws {
        let found: RemoteItem?
        do { found = try await provider.item(rootId) } catch ProviderError.notFound { found = nil }
        if let found, found.isFolder, !found.isDeleted { return }
        throw ProviderError.rootMissing("The remote folder this syncs with was deleted there (or moved to its trash).")
    }

    /// The remote's root folder, or ``ProviderError/rootMissing(_:)`` when it is not there. A root seen missing and then there
    /// again, or another folder at its place (``ProviderFeatures/rootIdentity``), is linked anew (``relinkAfterRootReturned(_:)``)
    /// before anything of it is taken in.
    func currentRoot(_ provider: any RemoteProvider) async throws -> RemoteItem {
        let root: RemoteItem
        do {
            root = try await provider.root()
        } catch let error as ProviderError {
            let missing: ProviderError
            switch error {
            case .notFound:
                missing = .rootMissing("The remote folder this syncs with is not there (deleted, or moved).")
            case .rootMissing: missing = error
            default: throw error
            }
            try await store.write { tx in try tx.setMeta(Self.rootMissingKey, "1") }
            throw missing
        }
        // Made again at the same place, where the provider can tell (seen missing or not): linked anew as well. The
        // same folder back (a share mounted again, a folder put back from the trash) is synced as before: what was
        // deleted there meanwhile was deleted, and an edit here stays an edit (not a conflict with its old self).
        let identity = provider.features.rootIdentity
        let (missing, known) = try await store.read { tx in (try tx.meta(Self.rootMissingKey), try tx.meta(Self.rootIdentityKey)) }
        let replaced = identity != nil && known != nil && identity != known
        let sameFolder = identity != nil && identity == known
        if missing != nil || (identity != nil && identity != known) {
            try await store.write { tx in
                if replaced || (missing != nil && !sameFolder) { try self.relinkAfterRootReturned(tx) }
                try tx.setMeta(Self.rootMissingKey, nil)
                if let identity { try tx.setMeta(Self.rootIdentityKey, identity) }
            }
        }
        return root
    }

    /// Set while the remote's root folder was found missing (the round paused), until it is there again.
    static let rootMissingKey = "remote_root_missing"
    /// The root's ``ProviderFeatures/rootIdentity`` as last seen.
    static let rootIdentityKey = "remote_root_identity"

    /// The remote's root folder is there again after it was found missing: deleted from a web UI and made again
    /// (what the pause asks the user to do), a disk mounted again. What it holds now is not what the synced tree says
    /// it held, so nothing of that tree is taken as "deleted there" — a folder made again empty would otherwise delete
    /// here every file a mass-deletion guard lets through (all of them, in a small tree). The pair is linked as a new
    /// one (`switchAccount`'s way, the account kept): the same name and content there → linked, no transfer;
    /// different → both kept; only here → sent; only there → brought here.
    nonisolated func relinkAfterRootReturned(_ tx: StoreTransaction) throws {
        // (In a library, no folder on disk, a file whose content is not here comes back from the listing if it is there.)
        try tx.forgetRemoteAndSynced(droppingContentless: disk == nil)
    }

    /// Makes sure the root LUID is the remote's root folder.
    func mapRoot(_ provider: any RemoteProvider) async throws {
        let mapped = try await store.read { tx in try tx.item(ItemID.root.rawValue)?.fileId }
        guard mapped == nil else { return }
        let root = try await currentRoot(provider)
        try await store.write { tx in
            if let stale = try tx.item(fileId: root.id), stale.luid != ItemID.root.rawValue {
                try self.merge(tx, from: stale.luid, into: ItemID.root.rawValue)
            }
            guard let stored = try tx.item(ItemID.root.rawValue) else { return }
            var row = stored
            row.setRemote(root, parentLuid: nil)
            row.rParent = nil
            row.rName = ""
            row.syncRemote()
            row.lPresent = true
            row.lName = ""
            try tx.update(row, from: stored)
        }
    }

    /// Lists the whole remote tree from its root and takes it as the remote tree; what was known and is not
    /// listed is gone there. With a change feed, the cursor is taken first, so what changes meanwhile comes next.
    func relist(_ provider: any RemoteProvider) async throws {
        let cursor = provider.features.changeFeed ? try await provider.startCursor() : nil
        let root = try await currentRoot(provider)
        let versioned = provider.features.treeVersions && cursor == nil
        let before = versioned ? try await store.read { tx in try tx.listedFolders() } : [:]
        let listing = try await listTree(provider, from: root, listedBefore: before)
        let items = listing.items
        try await store.write { tx in
            // What is under a skipped folder is as the stored remote tree has it: seen, not gone.
            let seen = Set(items.map(\.id)).union([root.id]).union(try tx.knownBeneath(folders: listing.skipped))
            if versioned { try tx.recordListedFolders(listing.versions, seen: seen) }
            // Files that left one place and appeared at another with the same content (moved there, by a provider
            // whose ids are paths) keep their identity: a move, not a deletion and a new file.
            if cursor == nil { try self.recognizeMoves(tx, listed: items, seen: seen) }
            // Parents come before children in `listed`, so each parent's LUID exists when a child needs it (and is
            // looked up once per folder, not once per item).
            var parents: [String: String] = [:]
            for item in items { try self.applyChange(tx, .upsert(item), parents: &parents) }
            for fileId in try tx.remoteFileIds() where !seen.contains(fileId) {
                // (With a change feed the whole account is known; only what was under this remote's root and is
                // not listed any more is gone.)
                if cursor != nil, !(try self.isUnderRoot(tx, fileId: fileId)) { continue }
                try self.applyChange(tx, .remove(id: fileId))
            }
            if let cursor { try tx.setCursor(cursor) }
        }
    }

    /// A tree listing: what was listed (parents before their children), the folders not listed because their
    /// revision is the one `listedBefore` has (their subtrees unchanged), and each folder's revision as seen before
    /// listing it (``ProviderFeatures/treeVersions`` only).
    struct Listing {
        var items: [RemoteItem] = []
        var skipped: [String] = []
        var versions: [String: String] = [:]
    }

    /// Every item under `root`, parents before their children: in one go where the provider can
    /// (``TreeListingProvider``), else folder by folder, a few folders at a time, skipping the subtrees of folders
    /// whose revision is the one in `listedBefore` (``ProviderFeatures/treeVersions``). Folder revisions are
    /// taken out of the items (the remote tree keeps none).
    func listTree(_ provider: any RemoteProvider, from root: RemoteItem, listedBefore: [String: String] = [:]) async throws -> Listing {
        let features = provider.features
        if let tree = features.treeListing { return Listing(items: try await tree.listTree()) }
        let versioned = features.treeVersions
        var listing = Listing()
        /// Whether a folder's subtree must be listed (recording the revision it had before).
        func mustList(_ folder: RemoteItem) -> Bool {
            guard versioned, let revision = folder.revision else { return true }
            listing.versions[folder.id] = revision
            if listedBefore[folder.id] == revision {
                listing.skipped.append(folder.id)
                return false
            }
            return true
        }
        var level = mustList(root) ? [root.id] : []
        while !level.isEmpty {
            // Eight at a time, the next one started as soon as one is done; kept in the level's order.
            let found = try await inOrder(level, width: 8) { folder in try await provider.children(of: folder) }.flatMap { $0 }
            listing.items += found.map { item in
                var item = item
                if item.isFolder { item.revision = nil }
                return item
            }
            level = found.filter { $0.isFolder && mustList($0) }.map(\.id)
        }
        return listing
    }

    /// A known file missing from a listing whose content (size and SHA-256) is that of exactly one new file in it,
    /// and of no other missing file, moved there: the new id is taken by its row. (The observation rule the planner's
    /// doc states: identity by content only here, only where ids are paths, only when unambiguous.)
    nonisolated func recognizeMoves(_ tx: StoreTransaction, listed: [RemoteItem], seen: Set<String>) throws {
        var new: [String: [RemoteItem]] = [:]
        for item in listed where !item.isFolder {
            guard let checksum = item.checksum, try tx.luid(fileId: item.id) == nil else { continue }
            new["\(checksum) \(item.size)", default: []].append(item)
        }
        guard !new.isEmpty else { return }
        var gone: [String: [String]] = [:]
        for file in try tx.remoteFileContents() where !seen.contains(file.fileId) {
            gone["\(file.checksum) \(file.size)", default: []].append(file.fileId)
        }
        for (content, before) in gone {
            guard before.count == 1, let after = new[content], after.count == 1 else { continue }
            try tx.changeFileId(from: before[0], to: after[0].id)
        }
    }

    /// Whether the remote item is under the root (its remote parents lead there).
    nonisolated func isUnderRoot(_ tx: StoreTransaction, fileId: String) throws -> Bool {
        var current = try tx.luid(fileId: fileId)
        var steps = 0
        while let luid = current, steps < 10_000 {
            if luid == ItemID.root.rawValue { return true }
            current = try tx.remoteParent(of: luid)
            steps += 1
        }
        return false
    }

    /// Takes one remote change into the remote tree (nothing else).
    nonisolated func applyChange(_ tx: StoreTransaction, _ change: RemoteChange) throws {
        var parents: [String: String] = [:]
        try applyChange(tx, change, parents: &parents)
    }

    /// ``applyChange(_:_:)`` with the LUIDs of parent folders met so far (a page of a feed has a few folders for
    /// many files).
    nonisolated func applyChange(_ tx: StoreTransaction, _ change: RemoteChange, parents: inout [String: String]) throws {
        switch change {
        case .remove(let fileId):
            guard let stored = try tx.item(fileId: fileId), stored.luid != ItemID.root.rawValue, stored.rPresent else { return }
            var row = stored
            row.rPresent = false
            try tx.update(row, from: stored)
        case .upsert(let item):
            if item.id == (try tx.rootFileId()) { return }
            let parent: String?
            if let parentId = item.parentId, let known = parents[parentId] {
                parent = known
            } else {
                parent = try parentLuid(tx, item.parentId)
                if let parentId = item.parentId, let parent { parents[parentId] = parent }
            }
            // Most of a feed after this device's own uploads is what the remote tree already holds (taking it anyway
            // wrote all 10,000 rows of the listing after sending 10,000 files: 0.9 s, now 0.7).
            if try tx.remoteTreeHolds(item, at: parent) { return }
            let stored = try tx.item(fileId: item.id)
            var row = stored ?? ItemRow.empty(ItemID.make().rawValue, isFolder: item.isFolder)
            var item = item
            // A provider that keeps no checksum reports none: what this side learned of the same version stays.
            if item.checksum == nil, let stored, stored.rRevision == item.revision { item.checksum = stored.rChecksum }
            row.setRemote(item, parentLuid: parent)
            try tx.record(row, from: stored)
        }
    }

    /// The LUID of a remote folder, with a placeholder row for a folder not seen yet (filled when it comes).
    nonisolated func parentLuid(_ tx: StoreTransaction, _ parentId: String?) throws -> String? {
        guard let parentId else { return nil }
        if let luid = try tx.luid(fileId: parentId) { return luid }
        var placeholder = ItemRow.empty(ItemID.make().rawValue, isFolder: true)
        placeholder.fileId = parentId
        try tx.insert(placeholder)
        return placeholder.luid
    }

    /// Folds row `from` into `into`: its remote identity and state, and the references to it.
    nonisolated func merge(_ tx: StoreTransaction, from: String, into: String) throws {
        guard let source = try tx.item(from), let stored = try tx.item(into) else { return }
        try tx.reparentAll(from: from, into: into)
        try tx.delete(from)
        var row = stored
        row.fileId = source.fileId
        row.rPresent = source.rPresent
        row.rParent = source.rParent
        row.rName = source.rName
        row.rMime = source.rMime
        row.rSize = source.rSize
        row.rChecksum = source.rChecksum
        row.rRevision = source.rRevision
        row.rModified = source.rModified
        try tx.update(row, from: stored)
    }

    /// Replaces the saved cursor (tests use this to force a full listing; `nil` lists everything next time).
    public func forgetCursor(replacingWith cursor: String? = nil) async throws {
        try await store.write { tx in try tx.setCursor(cursor) }
    }

    /// Signing into a different account: keep what is here, forget the old account's references (the new account
    /// gets what it lacks; what it already has under the same name with the same content is linked, not sent).
    func switchAccount(to key: String) async throws {
        try await store.write { tx in try tx.forgetAccount(switchingTo: key) }
    }
}

extension SyncEngine {
    /// Applies one page of a change feed as a pull would (for benchmarks and tools that feed the engine without
    /// a server).
    @_spi(Benchmarks)
    public func applyFeedPage(_ changes: [Change], cursor: String) async throws {
        try await store.write { tx in
            for change in changes {
                if change.type == .upsert, let file = change.file, !file.trashed {
                    try self.applyChange(tx, .upsert(NimbusProvider.item(file)))
                } else {
                    try self.applyChange(tx, .remove(id: change.fileId))
                }
            }
            try tx.setCursor(cursor)
        }
        let plan = try await currentPlan().filter { !$0.isRemote && isDatabaseOnly($0) }
        _ = try await performDatabaseSteps(plan)
        _ = takeRoundReport()
    }

    /// Whether the engine has a step ready (for benchmarks: the executor is ready once it has one).
    @_spi(Benchmarks)
    public func nextOperationReady() async throws -> Bool {
        try await !currentPlan().isEmpty
    }
}

/// The metadata cache's size cap: least recently listed folders give up their children's rows first.
extension SyncEngine {
    /// Bytes the database uses (pages in use, not counting free ones).
    public func metadataSize() throws -> Int64 {
        try store.read { tx in try tx.databaseSize() }
    }

    /// Evicts cached metadata until the database fits `metadataCacheLimit` (with 10% headroom). Only rows that
    /// can be fetched again go: synced files with nothing pending, no content here, not pinned, not waiting for
    /// the user. Their folder is marked so that listing it fetches them again. Returns how many rows went.
    @discardableResult
    public func enforceMetadataLimit() throws -> Int {
        let limit = configuration.metadataCacheLimit
        guard disk == nil, try metadataSize() > limit else { return 0 }
        // Cached revision lists go first: they are always fetched again on demand.
        try store.write { tx in try tx.dropCachedRevisions() }
        var evicted = 0
        while try metadataSize() > limit * 9 / 10 {
            let removed = try store.write { tx in try tx.evictLeastRecentlyListed() }
            evicted += removed
            if removed == 0 {
                if try store.read({ tx in try tx.foldersNotEvicted() }) == 0 { break }
            }
        }
        if evicted > 0 { trace("evicted \(evicted) cached items to fit \(limit) bytes") }
        return evicted
    }

    /// Whether a folder's listing is complete here (its children were not evicted from the cache).
    public func isListingComplete(_ folder: ItemID) throws -> Bool {
        try store.read { tx in try tx.isListingComplete(folder.rawValue) }
    }

    /// Fetches a folder's children from the remote again (after eviction) and takes them into the cache.
    public func refreshFolder(_ folder: ItemID) async throws {
        let provider = try requireProvider()
        guard let fileId = try await store.read({ tx in try tx.item(folder.rawValue)?.fileId }) else { return }
        let listed: [RemoteItem]
        do { listed = try await provider.children(of: fileId) } catch let error as ProviderError { throw SyncError(error) }
        let now = self.now
        try await store.write { tx in
            for item in listed where try tx.item(fileId: item.id) == nil {
                try self.applyChange(tx, .upsert(item))
            }
            try tx.markRefreshed(folder.rawValue, at: now)
        }
        // What came back is as it was: synced (the planner brings it into the view).
        try await syncOnceIfSignedIn()
        notifyChanged()
    }

    func syncOnceIfSignedIn() async throws {
        guard provider != nil else { return }
        try await runPlans(try requireProvider(), including: { !$0.isRemote })
    }

    /// Refreshes the evicted folders someone listed since (run by each sync round).
    func refreshRequestedFolders() async throws {
        let folders = try await store.read { tx in try tx.foldersToRefresh() }
        for folder in folders { try await refreshFolder(ItemID(folder)) }
    }
}
