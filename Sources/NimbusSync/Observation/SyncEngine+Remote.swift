import Foundation
import GRDB
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
        guard let cursor = try await database.pool.read({ db in try db.meta("cursor") }) else { return try await relist(provider) }
        do {
            var page = try await provider.changes(since: cursor)
            let rootId = try await database.pool.read { db in try ItemRow.fetch(db, luid: ItemID.root.rawValue)?.fileId }
            while true {
                if let rootId, page.changes.contains(.remove(id: rootId)) { try await checkRootStillThere(provider, rootId) }
                // The next page is fetched (and decoded) while this one is applied.
                let changes = page.changes
                let next = page.cursor
                let more = page.hasMore
                async let following = more ? provider.changes(since: next) : nil
                try await database.pool.write { db in
                    var parents: [String: String] = [:]
                    for change in changes { try self.applyChange(db, change, parents: &parents) }
                    try db.setMeta("cursor", next)
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
            try await database.pool.write { db in try db.setMeta(Self.rootMissingKey, "1") }
            throw missing
        }
        // Made again at the same place, where the provider can tell (seen missing or not): linked anew as well. The
        // same folder back (a share mounted again, a folder put back from the trash) is synced as before: what was
        // deleted there meanwhile was deleted, and an edit here stays an edit (not a conflict with its old self).
        let identity = provider.features.rootIdentity
        let (missing, known) = try await database.pool.read { db in (try db.meta(Self.rootMissingKey), try db.meta(Self.rootIdentityKey)) }
        let replaced = identity != nil && known != nil && identity != known
        let sameFolder = identity != nil && identity == known
        if missing != nil || (identity != nil && identity != known) {
            try await database.pool.write { db in
                if replaced || (missing != nil && !sameFolder) { try self.relinkAfterRootReturned(db) }
                try db.setMeta(Self.rootMissingKey, nil)
                if let identity { try db.setMeta(Self.rootIdentityKey, identity) }
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
    nonisolated func relinkAfterRootReturned(_ db: Database) throws {
        // (In a library, no folder on disk, a file whose content is not here comes back from the listing if it is there.)
        try Self.forgetRemoteAndSynced(db, droppingContentless: disk == nil)
    }

    /// Forgets the remote and synced trees, keeping what is here: every item here is then new to the remote (linked
    /// where the same name and content is there). Items not here go (what is there of them comes back as new), and,
    /// `droppingContentless`, files whose content is not here (they cannot be sent).
    nonisolated static func forgetRemoteAndSynced(_ db: Database, droppingContentless: Bool) throws {
        try db.setMeta("cursor", nil)
        try db.execute(sql: "DELETE FROM failures")
        try db.execute(sql: "DELETE FROM listed_folders")
        try db.execute(sql: "DELETE FROM items WHERE l_present = 0 AND luid != 'root'")
        try db.execute(
            sql: """
                UPDATE items SET file_id = NULL, r_present = 0, r_parent = NULL, r_name = NULL, r_revision = NULL, r_checksum = NULL,
                s_present = 0, s_parent = NULL, s_name = NULL, s_checksum = NULL, s_revision = NULL, flag = NULL, create_sent = 0,
                upload_request = NULL, source_revision = NULL, create_request = lower(hex(randomblob(16)))
                WHERE luid != 'root'
                """)
        if droppingContentless { try db.execute(sql: "DELETE FROM items WHERE is_folder = 0 AND content_path IS NULL AND luid != 'root'") }
    }

    /// Makes sure the root LUID is the remote's root folder.
    func mapRoot(_ provider: any RemoteProvider) async throws {
        let mapped = try await database.pool.read { db in try ItemRow.fetch(db, luid: ItemID.root.rawValue)?.fileId }
        guard mapped == nil else { return }
        let root = try await currentRoot(provider)
        try await database.pool.write { db in
            if let stale = try ItemRow.fetch(db, fileId: root.id), stale.luid != ItemID.root.rawValue {
                try self.merge(db, from: stale.luid, into: ItemID.root.rawValue)
            }
            guard let stored = try ItemRow.fetch(db, luid: ItemID.root.rawValue) else { return }
            var row = stored
            row.setRemote(root, parentLuid: nil)
            row.rParent = nil
            row.rName = ""
            row.syncRemote()
            row.lPresent = true
            row.lName = ""
            try row.update(db, from: stored)
        }
    }

    /// Lists the whole remote tree from its root and takes it as the remote tree; what was known and is not
    /// listed is gone there. With a change feed, the cursor is taken first, so what changes meanwhile comes next.
    func relist(_ provider: any RemoteProvider) async throws {
        let cursor = provider.features.changeFeed ? try await provider.startCursor() : nil
        let root = try await currentRoot(provider)
        let versioned = provider.features.treeVersions && cursor == nil
        let before = versioned ? try await database.pool.read { db in try Self.listedFolders(db) } : [:]
        let listing = try await listTree(provider, from: root, listedBefore: before)
        let items = listing.items
        try await database.pool.write { db in
            // What is under a skipped folder is as the stored remote tree has it: seen, not gone.
            let seen = Set(items.map(\.id)).union([root.id]).union(try Self.knownBeneath(db, folders: listing.skipped))
            if versioned { try Self.recordListedFolders(db, listing.versions, seen: seen) }
            // Files that left one place and appeared at another with the same content (moved there, by a provider
            // whose ids are paths) keep their identity: a move, not a deletion and a new file.
            if cursor == nil { try self.recognizeMoves(db, listed: items, seen: seen) }
            // Parents come before children in `listed`, so each parent's LUID exists when a child needs it (and is
            // looked up once per folder, not once per item).
            var parents: [String: String] = [:]
            for item in items { try self.applyChange(db, .upsert(item), parents: &parents) }
            let known = try String.fetchAll(db, sql: "SELECT file_id FROM items WHERE file_id IS NOT NULL AND r_present = 1 AND luid != 'root'")
                .map { try db.openedId($0) }
            for fileId in known where !seen.contains(fileId) {
                // (With a change feed the whole account is known; only what was under this remote's root and is
                // not listed any more is gone.)
                if cursor != nil, !(try self.isUnderRoot(db, fileId: fileId)) { continue }
                try self.applyChange(db, .remove(id: fileId))
            }
            if let cursor { try db.setMeta("cursor", cursor) }
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

    /// The folders' revisions as the last listing saw them (``ProviderFeatures/treeVersions``), of folders the
    /// stored remote tree still has (one this device deleted there is never skipped, even if its revision comes back).
    nonisolated static func listedFolders(_ db: Database) throws -> [String: String] {
        var result: [String: String] = [:]
        for row in try Row.fetchAll(
            db,
            sql: """
                SELECT l.file_id, l.revision FROM listed_folders l
                WHERE EXISTS (SELECT 1 FROM items i WHERE i.file_id = l.file_id AND i.r_present = 1 AND i.is_folder = 1)
                """)
        {
            result[try db.openedId(row[0])] = row[1] as String
        }
        return result
    }

    /// Keeps what this listing saw of each folder's revision, and forgets folders no longer there.
    nonisolated static func recordListedFolders(_ db: Database, _ versions: [String: String], seen: Set<String>) throws {
        for stored in try String.fetchAll(db, sql: "SELECT file_id FROM listed_folders") where !seen.contains(try db.openedId(stored)) {
            try db.execute(sql: "DELETE FROM listed_folders WHERE file_id = ?", arguments: [stored])
        }
        let upsert = try db.cachedStatement(
            sql: "INSERT INTO listed_folders (file_id, revision) VALUES (?, ?) ON CONFLICT(file_id) DO UPDATE SET revision = excluded.revision")
        for (fileId, revision) in versions { try upsert.execute(arguments: [db.storedId(fileId), revision]) }
    }

    /// The file ids of everything the stored remote tree has beneath `folders`, at any depth.
    nonisolated static func knownBeneath(_ db: Database, folders: [String]) throws -> Set<String> {
        var result: Set<String> = []
        for folder in folders {
            result.formUnion(
                try String.fetchAll(
                    db,
                    sql: """
                        WITH RECURSIVE sub(luid) AS (
                            SELECT luid FROM items WHERE file_id = ?
                            UNION SELECT i.luid FROM items i JOIN sub ON i.r_parent = sub.luid WHERE i.r_present = 1
                        ) SELECT file_id FROM items WHERE luid IN (SELECT luid FROM sub) AND file_id IS NOT NULL
                        """, arguments: [db.storedId(folder)]
                ).map { try db.openedId($0) })
        }
        return result
    }

    /// A known file missing from a listing whose content (size and SHA-256) is that of exactly one new file in it,
    /// and of no other missing file, moved there: the new id is taken by its row.
    nonisolated func recognizeMoves(_ db: Database, listed: [RemoteItem], seen: Set<String>) throws {
        var new: [String: [RemoteItem]] = [:]
        for item in listed where !item.isFolder {
            guard let checksum = item.checksum, try ItemRow.luid(db, fileId: item.id) == nil else { continue }
            new["\(checksum) \(item.size)", default: []].append(item)
        }
        guard !new.isEmpty else { return }
        var gone: [String: [String]] = [:]
        for row in try Row.fetchAll(
            db, sql: "SELECT file_id, r_checksum, r_size FROM items WHERE file_id IS NOT NULL AND r_present = 1 AND is_folder = 0 AND r_checksum IS NOT NULL")
        {
            let fileId = try db.openedId(row[0])
            guard !seen.contains(fileId) else { continue }
            gone["\(row[1] as String) \(row[2] as Int64? ?? 0)", default: []].append(fileId)
        }
        for (content, before) in gone {
            guard before.count == 1, let after = new[content], after.count == 1 else { continue }
            try db.execute(sql: "UPDATE items SET file_id = ? WHERE file_id = ?", arguments: [db.storedId(after[0].id), db.storedId(before[0])])
        }
    }

    /// Whether the remote item is under the root (its remote parents lead there).
    nonisolated func isUnderRoot(_ db: Database, fileId: String) throws -> Bool {
        var current = try ItemRow.luid(db, fileId: fileId)
        var steps = 0
        while let luid = current, steps < 10_000 {
            if luid == ItemID.root.rawValue { return true }
            current = try String.fetchOne(db.cachedStatement(sql: "SELECT r_parent FROM items WHERE luid = ?"), arguments: [luid])
            steps += 1
        }
        return false
    }

    /// Takes one remote change into the remote tree (nothing else).
    nonisolated func applyChange(_ db: Database, _ change: RemoteChange) throws {
        var parents: [String: String] = [:]
        try applyChange(db, change, parents: &parents)
    }

    /// ``applyChange(_:_:)`` with the LUIDs of parent folders met so far (a page of a feed has a few folders for
    /// many files).
    nonisolated func applyChange(_ db: Database, _ change: RemoteChange, parents: inout [String: String]) throws {
        switch change {
        case .remove(let fileId):
            guard let stored = try ItemRow.fetch(db, fileId: fileId), stored.luid != ItemID.root.rawValue, stored.rPresent else { return }
            var row = stored
            row.rPresent = false
            try row.update(db, from: stored)
        case .upsert(let item):
            let rootId = try String.fetchOne(db.cachedStatement(sql: "SELECT file_id FROM items WHERE luid = 'root'")).map { try db.openedId($0) }
            if item.id == rootId { return }
            let parent: String?
            if let parentId = item.parentId, let known = parents[parentId] {
                parent = known
            } else {
                parent = try parentLuid(db, item.parentId)
                if let parentId = item.parentId, let parent { parents[parentId] = parent }
            }
            // Most of a feed after this device's own uploads is what the remote tree already holds: checked on a few
            // columns, without decoding the row. The modification time alone, under the same revision, is not a
            // change: an S3 upload's answer has the client's clock where a listing has the store's `LastModified`
            // (taking it wrote all 10,000 rows of the listing after sending 10,000 files: 0.9 s, now 0.7).
            // Everywhere else a new time comes with a new revision.
            if let known = try Row.fetchOne(
                db.cachedStatement(
                    sql: "SELECT r_present, r_parent, r_name, r_revision, r_checksum, r_size, r_mime, r_modified, is_folder FROM items WHERE file_id = ?"),
                arguments: [db.storedId(item.id)]),
                known[0] as Bool, known[1] as String? == parent, known[2] as String? == (db.storeCipher?.sealName(item.name) ?? item.name),
                known[3] as String? == item.revision,
                item.checksum == nil || known[4] as String? == item.checksum, known[5] as Int64? == item.size, known[6] as String? == item.mimeType,
                known[7] as Int64? == item.modifiedAt.millis || item.revision != nil, known[8] as Bool == item.isFolder
            {
                return
            }
            let stored = try ItemRow.fetch(db, fileId: item.id)
            var row = stored ?? ItemRow.empty(ItemID.make().rawValue, isFolder: item.isFolder)
            var item = item
            // A provider that keeps no checksum reports none: what this side learned of the same version stays.
            if item.checksum == nil, let stored, stored.rRevision == item.revision { item.checksum = stored.rChecksum }
            row.setRemote(item, parentLuid: parent)
            if let stored { try row.update(db, from: stored) } else { try row.save(db) }
        }
    }

    /// The LUID of a remote folder, with a placeholder row for a folder not seen yet (filled when it comes).
    nonisolated func parentLuid(_ db: Database, _ parentId: String?) throws -> String? {
        guard let parentId else { return nil }
        if let luid = try ItemRow.luid(db, fileId: parentId) { return luid }
        var placeholder = ItemRow.empty(ItemID.make().rawValue, isFolder: true)
        placeholder.fileId = parentId
        try placeholder.save(db)
        return placeholder.luid
    }

    /// Folds row `from` into `into`: its remote identity and state, and the references to it.
    nonisolated func merge(_ db: Database, from: String, into: String) throws {
        guard let source = try ItemRow.fetch(db, luid: from), let stored = try ItemRow.fetch(db, luid: into) else { return }
        try db.execute(sql: "UPDATE items SET r_parent = ? WHERE r_parent = ?", arguments: [into, from])
        try db.execute(sql: "UPDATE items SET s_parent = ? WHERE s_parent = ?", arguments: [into, from])
        try db.execute(sql: "UPDATE items SET l_parent = ? WHERE l_parent = ?", arguments: [into, from])
        try ItemRow.delete(db, luid: from)
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
        try row.update(db, from: stored)
    }

    /// Replaces the saved cursor (tests use this to force a full listing; `nil` lists everything next time).
    public func forgetCursor(replacingWith cursor: String? = nil) async throws {
        try await database.pool.write { db in try db.setMeta("cursor", cursor) }
    }

    /// Signing into a different account: keep what is here, forget the old account's references (the new account
    /// gets what it lacks; what it already has under the same name with the same content is linked, not sent).
    func switchAccount(to key: String) async throws {
        try await database.pool.write { db in
            try db.setMeta("account", key)
            try db.execute(sql: "DELETE FROM provider_state")
            try db.execute(sql: "DELETE FROM block_index")
            // Files whose content is not here cannot be sent: they go (the old account keeps them).
            try Self.forgetRemoteAndSynced(db, droppingContentless: true)
            try db.execute(
                sql: "UPDATE items SET file_id = NULL, r_present = 0, s_present = 0, s_name = NULL, s_parent = NULL WHERE luid = 'root'")
        }
    }
}

extension SyncEngine {
    /// Applies one page of a change feed as a pull would (for benchmarks and tools that feed the engine without
    /// a server).
    @_spi(Benchmarks)
    public func applyFeedPage(_ changes: [Change], cursor: String) async throws {
        try await database.pool.write { db in
            for change in changes {
                if change.type == .upsert, let file = change.file, !file.trashed {
                    try self.applyChange(db, .upsert(NimbusProvider.item(file)))
                } else {
                    try self.applyChange(db, .remove(id: change.fileId))
                }
            }
            try db.setMeta("cursor", cursor)
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
        try database.pool.read { db in
            let pages = try Int64.fetchOne(db, sql: "PRAGMA page_count") ?? 0
            let free = try Int64.fetchOne(db, sql: "PRAGMA freelist_count") ?? 0
            let size = try Int64.fetchOne(db, sql: "PRAGMA page_size") ?? 4096
            return (pages - free) * size
        }
    }

    /// Evicts cached metadata until the database fits `metadataCacheLimit` (with 10% headroom). Only rows that
    /// can be fetched again go: synced files with nothing pending, no content here, not pinned, not waiting for
    /// the user. Their folder is marked so that listing it fetches them again. Returns how many rows went.
    @discardableResult
    public func enforceMetadataLimit() throws -> Int {
        let limit = configuration.metadataCacheLimit
        guard disk == nil, try metadataSize() > limit else { return 0 }
        // Cached revision lists go first: they are always fetched again on demand.
        try database.pool.write { db in try db.execute(sql: "DELETE FROM revisions") }
        var evicted = 0
        while try metadataSize() > limit * 9 / 10 {
            let removed = try database.pool.write { db -> Int in
                let folders = try String.fetchAll(
                    db,
                    sql: """
                        SELECT f.luid FROM items f WHERE f.is_folder = 1 AND f.children_evicted = 0
                        AND EXISTS (SELECT 1 FROM items c WHERE c.r_parent = f.luid AND c.is_folder = 0)
                        ORDER BY f.last_access LIMIT 20
                        """)
                var count = 0
                for folder in folders {
                    try db.execute(
                        sql: """
                            DELETE FROM items WHERE r_parent = ? AND is_folder = 0 AND pinned = 0 AND flag IS NULL AND content_path IS NULL
                            AND file_id IS NOT NULL AND luid NOT IN (SELECT luid FROM failures) AND r_present = 1 AND s_present = 1 AND l_present = 1
                            AND l_parent IS r_parent AND l_name IS r_name AND s_parent IS r_parent AND s_name IS r_name
                            AND l_checksum IS r_checksum AND s_revision IS r_revision AND l_state IS NULL
                            """,
                        arguments: [folder])
                    count += db.changesCount
                    try db.execute(sql: "UPDATE items SET children_evicted = 1 WHERE luid = ?", arguments: [folder])
                }
                return count
            }
            evicted += removed
            if removed == 0 {
                let remaining = try database.pool.read { db in
                    try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM items WHERE is_folder = 1 AND children_evicted = 0") ?? 0
                }
                if remaining == 0 { break }
            }
        }
        if evicted > 0 { trace("evicted \(evicted) cached items to fit \(limit) bytes") }
        return evicted
    }

    /// Whether a folder's listing is complete here (its children were not evicted from the cache).
    public func isListingComplete(_ folder: ItemID) throws -> Bool {
        try database.pool.read { db in
            try Bool.fetchOne(db, sql: "SELECT children_evicted = 0 FROM items WHERE luid = ?", arguments: [folder.rawValue]) ?? true
        }
    }

    /// Fetches a folder's children from the remote again (after eviction) and takes them into the cache.
    public func refreshFolder(_ folder: ItemID) async throws {
        let provider = try requireProvider()
        guard let fileId = try await database.pool.read({ db in try ItemRow.fetch(db, luid: folder.rawValue)?.fileId }) else { return }
        let listed: [RemoteItem]
        do { listed = try await provider.children(of: fileId) } catch let error as ProviderError { throw SyncError(error) }
        let now = self.now
        try await database.pool.write { db in
            for item in listed where try ItemRow.fetch(db, fileId: item.id) == nil {
                try self.applyChange(db, .upsert(item))
            }
            try db.execute(
                sql: "UPDATE items SET children_evicted = 0, refresh_requested = 0, last_access = ? WHERE luid = ?",
                arguments: [now.millis, folder.rawValue])
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
        let folders = try await database.pool.read { db in
            try String.fetchAll(db, sql: "SELECT luid FROM items WHERE refresh_requested = 1 AND children_evicted = 1")
        }
        for folder in folders { try await refreshFolder(ItemID(folder)) }
    }
}
