import Foundation
import GRDB
import NimbusAPI

/// Pulling: the change feed from the saved cursor into the remote tree; a full resync when the cursor is gone.
extension SyncEngine {
    /// Applies everything new on the server. Operations that were applied before this pull started are
    /// confirmed by it and leave the queue (Carousel's rule: an operation stays in the view until the server
    /// state shows its effect).
    public func pull() async throws {
        let client = try requireClient()
        try await mapRoot(client)
        let generation = try await database.pool.write { db -> Int64 in
            let next = try self.pullGeneration(db) + 1
            try db.setMeta("pullGeneration", String(next))
            return next
        }
        let cursor = try await database.pool.read { db in try db.meta("cursor") } ?? "0"
        // The next page is fetched while this one is applied (the server lists while we write).
        @Sendable func fetch(_ cursor: String) async throws -> (TransportResponseHead, Data) {
            try await client.authorized(TransportRequest(method: "GET", path: "/v1/changes?cursor=\(cursor.queryEscaped)&limit=1000"))
        }
        var next = Task { try await fetch(cursor) }
        defer { next.cancel() }
        while true {
            let (head, data) = try await next.value
            if head.status == 410 {
                try await resync(client)
                break
            }
            try ServerClient.check(head, data)
            let page = try ServerClient.decode(ChangeList.self, data)
            let nextCursor = page.cursor
            if page.hasMore { next = Task { try await fetch(nextCursor) } }
            try await database.pool.write { db in
                for change in page.changes { try self.apply(db, change) }
                try db.setMeta("cursor", nextCursor)
            }
            if !page.hasMore { break }
        }
        try await applyRemoteDeletions(force: false)
        try await confirmOperations(before: generation)
        notifyChanged()
    }

    /// Replaces the saved cursor (tests use this to force a resync; `nil` starts from the beginning).
    public func forgetCursor(replacingWith cursor: String? = nil) async throws {
        try await database.pool.write { db in try db.setMeta("cursor", cursor) }
    }

    /// Every child of a folder on the server, all pages.
    func children(ofServerFolder fileId: String, _ client: ServerClient) async throws -> [File] {
        var files: [File] = []
        var page = 1
        while true {
            let list: FileList = try await client.call("GET", "/v1/files?parentId=\(fileId)&page=\(page)&limit=1000")
            files += list.files
            guard let next = list.pagination.nextPage else { return files }
            page = next
        }
    }

    /// Makes sure the root LUID points at the account's root folder.
    func mapRoot(_ client: ServerClient) async throws {
        let mapped = try await database.pool.read { db in try ItemRow.fetch(db, luid: ItemID.root.rawValue)?.fileId }
        guard mapped == nil else { return }
        let root: File = try await client.call("GET", "/v1/files/root")
        try await database.pool.write { db in
            if var stale = try ItemRow.fetch(db, fileId: root.id), stale.luid != ItemID.root.rawValue {
                stale.fileId = nil
                try stale.save(db)
            }
            var row = try ItemRow.fetch(db, luid: ItemID.root.rawValue) ?? ItemRow.empty(ItemID.root.rawValue, isFolder: true)
            row.setRemote(root, parentLuid: nil)
            row.adoptRemote()
            row.lName = ""
            try row.save(db)
        }
    }

    /// Applies one feed entry to the remote tree, and to the local tree where nothing is pending.
    nonisolated func apply(_ db: Database, _ change: Change) throws {
        guard change.type == .upsert, let file = change.file, !file.trashed else {
            if try ItemRow.fetch(db, fileId: change.fileId) != nil {
                try db.execute(sql: "INSERT INTO remote_deletions (file_id) VALUES (?) ON CONFLICT DO NOTHING", arguments: [change.fileId])
            }
            if let file = change.file, var row = try ItemRow.fetch(db, fileId: file.id) {
                row.setRemote(file, parentLuid: try parentLuid(db, file))
                try row.save(db)
            }
            return
        }
        try db.cachedStatement(sql: "DELETE FROM remote_deletions WHERE file_id = ?").execute(arguments: [file.id])
        if file.parentId == nil {
            // The root folder.
            if var root = try ItemRow.fetch(db, luid: ItemID.root.rawValue) {
                root.setRemote(file, parentLuid: nil)
                root.adoptRemote()
                root.lName = ""
                try root.save(db)
            }
            return
        }
        let parent = try parentLuid(db, file)
        let stored = try ItemRow.fetch(db, fileId: file.id) ?? pendingCreation(db, of: file, in: parent)
        var row = stored ?? ItemRow.empty(ItemID.make().rawValue, isFolder: file.isFolder)
        row.setRemote(file, parentLuid: parent)
        let queued = try OperationRow.any(db, for: row.luid)
        if row.flag == "unsynced" {
            traceSync("\(file.name) is back on the server: unsynced → pending")
            // The deletion was undone on the server: the item is in sync again; held uploads go ahead.
            row.flag = nil
            try db.execute(sql: "UPDATE operations SET state = 'pending' WHERE luid = ? AND state = 'parked'", arguments: [row.luid])
        }
        if !queued && row.flag == nil {
            row.adoptRemote()
            try refreshContent(db, &row)
        }
        if let stored { try row.update(db, from: stored) } else { try row.save(db) }
    }

    /// The local item whose queued creation this new server item is: same folder, same name as sent, and for a
    /// file the same content. It happens when the answer to our create was lost (the server has it, we do not
    /// know its id yet); without this the item would show twice until the retry told us.
    nonisolated func pendingCreation(_ db: Database, of file: File, in parent: String?) throws -> ItemRow? {
        let candidates = try Row.fetchAll(
            db.cachedStatement(
                sql: """
                    SELECT o.luid, o.kind, o.payload FROM operations o JOIN items i ON i.luid = o.luid
                    WHERE i.file_id IS NULL AND o.kind IN ('createFolder', 'upload') AND o.state IN ('pending', 'failed', 'parked')
                    ORDER BY o.seq
                    """))
        for candidate in candidates {
            guard let payload = try? JSONDecoder().decode(OperationPayload.self, from: Data((candidate["payload"] as String).utf8)),
                payload.parent == parent, payload.name == file.name
            else { continue }
            let kind: String = candidate["kind"]
            if file.isFolder ? kind == "createFolder" : (kind == "upload" && payload.checksum == file.checksum) {
                return try ItemRow.fetch(db, luid: candidate["luid"])
            }
        }
        return nil
    }

    /// The LUID of a file's parent, creating a placeholder row for a parent not seen yet.
    nonisolated func parentLuid(_ db: Database, _ file: File) throws -> String? {
        guard let parentId = file.parentId else { return nil }
        if let luid = try ItemRow.luid(db, fileId: parentId) { return luid }
        var placeholder = ItemRow.empty(ItemID.make().rawValue, isFolder: true)
        placeholder.fileId = parentId
        try placeholder.save(db)
        return placeholder.luid
    }

    /// After the remote content changed: a pinned item downloads the new content; a cached copy that is now
    /// stale is dropped (it is only a copy of an older revision, which the server keeps).
    nonisolated func refreshContent(_ db: Database, _ row: inout ItemRow) throws {
        guard !row.isFolder, row.rChecksum != row.contentChecksum else { return }
        if let path = row.contentPath, row.contentChecksum != nil {
            if path.hasPrefix(contentDirectory.path) || path.hasPrefix(stagingDirectory.path) { try? FileManager.default.removeItem(atPath: path) }
            row.contentPath = nil
            row.contentChecksum = nil
        }
        if row.pinned { try scheduleDownloadIfNeeded(db, row, now: now) }
    }

    /// Applies the deletions collected by pulls. Items with changes that exist only here are not deleted:
    /// they become `unsynced`. Too many deletions at once wait for ``confirmMassDeletion()``.
    func applyRemoteDeletions(force: Bool) async throws {
        let count = try await database.pool.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM remote_deletions") ?? 0 }
        guard count > 0 else { return }
        // Counting the whole tree is only worth it when something is to be deleted (it scans every row).
        let total = try await database.pool.read { db in
            try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM items WHERE s_present = 1 OR r_present = 1") ?? 0
        }
        let fraction = Double(count) / Double(max(total, 1))
        if !force
            && (count > configuration.massDeletionAbsolute
                || (count >= configuration.massDeletionMinimum && fraction > configuration.massDeletionFraction))
        {
            phase = .awaitingDeletionConfirmation(count: count)
            return
        }
        let discard = try await database.pool.write { db -> [String] in
            var discard: [String] = []
            let fileIds = try String.fetchAll(db, sql: "SELECT file_id FROM remote_deletions")
            for fileId in fileIds {
                guard var row = try ItemRow.fetch(db, fileId: fileId) else { continue }
                self.traceSync("remote deletion of \(fileId) (\(row.lName ?? "?"))")
                row.rPresent = false
                row.sPresent = false
                if try self.hasLocalOnlyChanges(db, row) {
                    self.traceSync("  kept as unsynced")
                    row.flag = "unsynced"
                    try db.execute(
                        sql: "UPDATE operations SET state = 'parked' WHERE luid = ? AND state IN ('pending', 'failed') AND kind IN ('upload', 'createFolder')",
                        arguments: [row.luid])
                    self.traceSync("  ops now: \(try OperationRow.forItem(db, row.luid).map { "\($0.kind)/\($0.state)/\($0.id.prefix(6))" }) luid \(row.luid.prefix(8))")
                } else {
                    try db.execute(sql: "DELETE FROM operations WHERE luid = ? AND state != 'applied'", arguments: [row.luid])
                    row.lPresent = false
                    row.flag = nil
                    if let path = row.contentPath { discard.append(path) }
                    row.contentPath = nil
                    row.contentChecksum = nil
                }
                try row.save(db)
            }
            try db.execute(sql: "DELETE FROM remote_deletions")
            return discard
        }
        for path in discard { try? FileManager.default.removeItem(atPath: path) }
    }

    /// Whether deleting the item here would lose something the server never had: a queued upload, or (for a
    /// folder) anything under it that is not on the server.
    nonisolated func hasLocalOnlyChanges(_ db: Database, _ row: ItemRow) throws -> Bool {
        let uploads = try Int.fetchOne(
            db, sql: "SELECT COUNT(*) FROM operations WHERE luid = ? AND kind = 'upload' AND state != 'applied'", arguments: [row.luid]) ?? 0
        if uploads > 0 { return true }
        guard row.isFolder else { return false }
        for luid in try localSubtree(db, row.luid) where luid != row.luid {
            let pending = try Int.fetchOne(
                db, sql: "SELECT COUNT(*) FROM operations WHERE luid = ? AND kind IN ('upload', 'createFolder') AND state != 'applied'",
                arguments: [luid]) ?? 0
            if pending > 0 { return true }
        }
        return false
    }

    /// Removes operations applied before pull `generation` started, and shows those items as the server has them.
    func confirmOperations(before generation: Int64) async throws {
        try await database.pool.write { db in
            let luids = try String.fetchAll(
                db, sql: "SELECT DISTINCT luid FROM operations WHERE state = 'applied' AND applied_generation < ?", arguments: [generation])
            try db.execute(sql: "DELETE FROM operations WHERE state = 'applied' AND applied_generation < ?", arguments: [generation])
            for luid in luids { try self.reconcile(db, luid) }
        }
    }

    /// With nothing pending for it, an item shows the remote state.
    nonisolated func reconcile(_ db: Database, _ luid: String) throws {
        guard let stored = try ItemRow.fetch(db, luid: luid), stored.flag == nil, luid != ItemID.root.rawValue else { return }
        guard try !OperationRow.any(db, for: luid) else { return }
        guard stored.fileId != nil else { return }
        var row = stored
        row.adoptRemote()
        if stored.contentChecksum != row.rChecksum { try refreshContent(db, &row) }
        try row.update(db, from: stored)
    }

    /// After a 410: lists the whole tree again, takes it as the remote state, and treats what is gone as deleted.
    func resync(_ client: ServerClient) async throws {
        let start: ChangeCursor = try await client.call("GET", "/v1/changes/start")
        var seen: Set<String> = []
        var folders = ["root"]
        var files: [File] = []
        while let folder = folders.popLast() {
            for file in try await children(ofServerFolder: folder, client) {
                files.append(file)
                seen.insert(file.id)
                if file.isFolder { folders.append(file.id) }
            }
        }
        let listed = files
        let seenIds = seen
        try await database.pool.write { db in
            // Parents come before children in `files`, so each parent's LUID exists when a child needs it.
            for file in listed { try self.apply(db, Change(seq: 0, type: .upsert, fileId: file.id, file: file)) }
            let known = try String.fetchAll(db, sql: "SELECT file_id FROM items WHERE file_id IS NOT NULL AND r_present = 1 AND luid != 'root'")
            for fileId in known where !seenIds.contains(fileId) {
                try db.execute(sql: "INSERT INTO remote_deletions (file_id) VALUES (?) ON CONFLICT DO NOTHING", arguments: [fileId])
            }
            try db.setMeta("cursor", start.cursor)
        }
    }

    /// Signing into a different account: keep what is local, forget the old account's references, and queue
    /// what the new account must receive. Uploads that find the same content already there adopt it.
    func switchAccount(to key: String) async throws {
        let now = self.now
        try await database.pool.write { db in
            try db.setMeta("account", key)
            try db.setMeta("cursor", nil)
            try db.execute(sql: "DELETE FROM remote_deletions")
            try db.execute(sql: "DELETE FROM upload_sessions")
            // Keep: files with content here or queued uploads, folders created here, and the folders above them.
            var keep: Set<String> = [ItemID.root.rawValue]
            let local = try String.fetchAll(
                db,
                sql: """
                    SELECT luid FROM items WHERE l_present = 1 AND (content_path IS NOT NULL
                    OR luid IN (SELECT luid FROM operations WHERE kind IN ('upload', 'createFolder') AND state != 'applied'))
                    """)
            for luid in local {
                var current: String? = luid
                while let id = current, !keep.contains(id) {
                    keep.insert(id)
                    current = try String.fetchOne(db, sql: "SELECT l_parent FROM items WHERE luid = ?", arguments: [id])
                }
            }
            let uploads = try Row.fetchAll(db, sql: "SELECT luid, payload FROM operations WHERE kind = 'upload' AND state != 'applied' ORDER BY seq")
            var sources: [String: OperationPayload] = [:]
            for upload in uploads {
                sources[upload["luid"]] = try? JSONDecoder().decode(OperationPayload.self, from: Data((upload["payload"] as String).utf8))
            }
            try db.execute(sql: "DELETE FROM operations")
            let all = try String.fetchAll(db, sql: "SELECT luid FROM items")
            for luid in all where !keep.contains(luid) {
                if let path = try String.fetchOne(db, sql: "SELECT content_path FROM items WHERE luid = ?", arguments: [luid]) {
                    try? FileManager.default.removeItem(atPath: path)
                }
                try db.execute(sql: "DELETE FROM items WHERE luid = ?", arguments: [luid])
            }
            try db.execute(
                sql: """
                    UPDATE items SET file_id = NULL, r_present = 0, r_parent = NULL, r_name = NULL, r_revision = NULL, r_checksum = NULL,
                    s_present = 0, s_parent = NULL, s_name = NULL, s_checksum = NULL, s_revision = NULL, flag = NULL
                    """)
            // Queue in tree order so parents are created first.
            var queue = [ItemID.root.rawValue]
            var created: [String: String] = [:]
            while !queue.isEmpty {
                let parent = queue.removeFirst()
                let children = try Row.fetchAll(db, sql: "SELECT \(ItemRow.columns) FROM items WHERE l_parent = ? AND l_present = 1", arguments: [parent])
                    .map(ItemRow.init(row:))
                for child in children {
                    let dependencies = created[parent].map { [$0] } ?? []
                    if child.isFolder {
                        created[child.luid] = try OperationRow.insert(
                            db, luid: child.luid, kind: .createFolder, payload: OperationPayload(name: child.lName, parent: parent),
                            dependsOn: dependencies, now: now)
                        queue.append(child.luid)
                    } else {
                        var payload = sources[child.luid]
                            ?? OperationPayload(sourcePath: child.contentPath, ownsSource: false, checksum: child.contentChecksum, size: child.lSize)
                        payload.name = child.lName
                        payload.parent = parent
                        payload.mimeType = child.lMime
                        payload.baseRevision = nil
                        guard payload.sourcePath != nil else { continue }
                        _ = try OperationRow.insert(db, luid: child.luid, kind: .upload, payload: payload, dependsOn: dependencies, now: now)
                    }
                }
            }
        }
    }
}

extension SyncEngine {
    /// Applies one page of the change feed as a pull would (for benchmarks and tools that feed the engine
    /// without a server).
    @_spi(Benchmarks)
    public func applyFeedPage(_ changes: [Change], cursor: String) async throws {
        try await database.pool.write { db in
            for change in changes { try self.apply(db, change) }
            try db.setMeta("cursor", cursor)
        }
        try await applyRemoteDeletions(force: false)
    }

    /// The next operation the executor would run (for benchmarks: the executor is ready once it has one).
    @_spi(Benchmarks)
    public func nextOperationReady() throws -> Bool {
        try nextRunnable() != nil
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
    /// can be fetched again go: files with nothing pending, no content here, not pinned, not waiting for the
    /// user. Their folder is marked so that listing it fetches them again. Returns how many rows went.
    @discardableResult
    public func enforceMetadataLimit() throws -> Int {
        let limit = configuration.metadataCacheLimit
        guard try metadataSize() > limit else { return 0 }
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
                            AND file_id IS NOT NULL AND luid NOT IN (SELECT luid FROM operations)
                            AND l_parent IS r_parent AND l_name IS r_name AND l_present = r_present
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

    /// Fetches a folder's children from the server again (after eviction) and takes them into the cache.
    public func refreshFolder(_ folder: ItemID) async throws {
        let client = try requireClient()
        guard let fileId = try await database.pool.read({ db in try ItemRow.fetch(db, luid: folder.rawValue)?.fileId }) else { return }
        let listed = try await children(ofServerFolder: fileId, client)
        let now = self.now
        try await database.pool.write { db in
            for file in listed where try ItemRow.fetch(db, fileId: file.id) == nil {
                try self.apply(db, Change(seq: 0, type: .upsert, fileId: file.id, file: file))
            }
            try db.execute(
                sql: "UPDATE items SET children_evicted = 0, refresh_requested = 0, last_access = ? WHERE luid = ?",
                arguments: [now.millis, folder.rawValue])
        }
        notifyChanged()
    }

    /// Refreshes the evicted folders someone listed since (run by each sync round).
    func refreshRequestedFolders() async throws {
        let folders = try await database.pool.read { db in
            try String.fetchAll(db, sql: "SELECT luid FROM items WHERE refresh_requested = 1 AND children_evicted = 1")
        }
        for folder in folders { try await refreshFolder(ItemID(folder)) }
    }
}
