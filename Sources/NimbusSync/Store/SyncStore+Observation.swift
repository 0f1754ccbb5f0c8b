import Foundation
import GRDB

/// What observation asks of the store: the remote tree as listings and the change feed record it, the folders a
/// listing may skip, a pair linked anew, and the metadata cache's eviction.
extension StoreTransaction {
    /// The remote root folder's provider id, once mapped.
    func rootFileId() throws -> String? {
        try String.fetchOne(db.cachedStatement(sql: "SELECT file_id FROM items WHERE luid = 'root'")).map { try db.openedId($0) }
    }

    /// Whether the remote tree already holds `item` as it is, at `parent` (checked on a few columns, without decoding
    /// the row: most of a feed after this device's own uploads is what the remote tree has). The modification time
    /// alone, under the same revision, is not a change: an S3 upload's answer has the client's clock where a listing
    /// has the store's `LastModified`; everywhere else a new time comes with a new revision.
    func remoteTreeHolds(_ item: RemoteItem, at parent: String?) throws -> Bool {
        guard
            let known = try Row.fetchOne(
                db.cachedStatement(
                    sql: "SELECT r_present, r_parent, r_name, r_revision, r_checksum, r_size, r_mime, r_modified, is_folder, r_access FROM items WHERE file_id = ?"),
                arguments: [db.storedId(item.id)])
        else { return false }
        return known[0] as Bool && known[1] as String? == parent && known[2] as String? == (db.storeCipher?.sealName(item.name) ?? item.name)
            && known[3] as String? == item.revision
            && (item.checksum == nil || known[4] as String? == item.checksum) && known[5] as Int64? == item.size && known[6] as String? == item.mimeType
            && (known[7] as Int64? == item.modifiedAt.millis || item.revision != nil) && known[8] as Bool == item.isFolder
            && known[9] as Int == item.access.rawValue
    }

    /// The provider ids of everything in the remote tree (the root aside).
    func remoteFileIds() throws -> [String] {
        try String.fetchAll(db, sql: "SELECT file_id FROM items WHERE file_id IS NOT NULL AND r_present = 1 AND luid != 'root'")
            .map { try db.openedId($0) }
    }

    /// The remote tree's files with a checksum: id, checksum and size (what tells a file moved by its content).
    func remoteFileContents() throws -> [(fileId: String, checksum: String, size: Int64)] {
        try Row.fetchAll(
            db, sql: "SELECT file_id, r_checksum, r_size FROM items WHERE file_id IS NOT NULL AND r_present = 1 AND is_folder = 0 AND r_checksum IS NOT NULL"
        ).map { (try db.openedId($0[0]), $0[1], $0[2] as Int64? ?? 0) }
    }

    /// The row of provider item `old` is provider item `new` from now on (a file that moved where ids are paths).
    func changeFileId(from old: String, to new: String) throws {
        try db.execute(sql: "UPDATE items SET file_id = ? WHERE file_id = ?", arguments: [db.storedId(new), db.storedId(old)])
    }

    /// Points every reference to item `from` (as a parent, in each tree) at item `into`.
    func reparentAll(from: String, into: String) throws {
        try db.execute(sql: "UPDATE items SET r_parent = ? WHERE r_parent = ?", arguments: [into, from])
        try db.execute(sql: "UPDATE items SET s_parent = ? WHERE s_parent = ?", arguments: [into, from])
        try db.execute(sql: "UPDATE items SET l_parent = ? WHERE l_parent = ?", arguments: [into, from])
    }

    // MARK: Listed folders (treeVersions)

    /// The folders' revisions as the last listing saw them, of folders the stored remote tree still has (one this
    /// device deleted there is never skipped, even if its revision comes back).
    func listedFolders() throws -> [String: String] {
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

    /// Keeps what a listing saw of each folder's revision, and forgets folders no longer there.
    func recordListedFolders(_ versions: [String: String], seen: Set<String>) throws {
        for stored in try String.fetchAll(db, sql: "SELECT file_id FROM listed_folders") where !seen.contains(try db.openedId(stored)) {
            try db.execute(sql: "DELETE FROM listed_folders WHERE file_id = ?", arguments: [stored])
        }
        let upsert = try db.cachedStatement(
            sql: "INSERT INTO listed_folders (file_id, revision) VALUES (?, ?) ON CONFLICT(file_id) DO UPDATE SET revision = excluded.revision")
        for (fileId, revision) in versions { try upsert.execute(arguments: [db.storedId(fileId), revision]) }
    }

    /// Forgets the listed revisions of the folders `luids` (those that have one): listed again next time.
    func forgetListedVersions(of luids: Set<String>) throws {
        let forget = try db.cachedStatement(sql: "DELETE FROM listed_folders WHERE file_id = (SELECT file_id FROM items WHERE luid = ?)")
        for luid in luids { try forget.execute(arguments: [luid]) }
    }

    /// A folder's provider id changed (a move where ids are paths): its listed revision follows it.
    func renameListedFolder(from old: String, to new: String) throws {
        try db.execute(sql: "UPDATE listed_folders SET file_id = ? WHERE file_id = ?", arguments: [db.storedId(new), db.storedId(old)])
    }

    /// The file ids of everything the stored remote tree has beneath `folders`, at any depth.
    func knownBeneath(folders: [String]) throws -> Set<String> {
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

    // MARK: A pair linked anew

    /// Forgets the remote and synced trees, keeping what is here: every item here is then new to the remote (linked
    /// where the same name and content is there). Items not here go (what is there of them comes back as new), and,
    /// `droppingContentless`, files whose content is not here (they cannot be sent).
    func forgetRemoteAndSynced(droppingContentless: Bool) throws {
        try setCursor(nil)
        try db.execute(sql: "DELETE FROM failures")
        try db.execute(sql: "DELETE FROM listed_folders")
        try db.execute(sql: "DELETE FROM items WHERE l_present = 0 AND luid != 'root'")
        try db.execute(
            sql: """
                UPDATE items SET file_id = NULL, r_present = 0, r_parent = NULL, r_name = NULL, r_revision = NULL, r_checksum = NULL, r_access = 0,
                s_present = 0, s_parent = NULL, s_name = NULL, s_checksum = NULL, s_revision = NULL, s_access = 0, flag = NULL, create_sent = 0,
                upload_request = NULL, source_revision = NULL, create_request = lower(hex(randomblob(16)))
                WHERE luid != 'root'
                """)
        if droppingContentless { try db.execute(sql: "DELETE FROM items WHERE is_folder = 0 AND content_path IS NULL AND luid != 'root'") }
    }

    /// Signing into a different account: the old account's provider state and block index go, and the root is
    /// unmapped (after ``forgetRemoteAndSynced(droppingContentless:)``).
    func forgetAccount(switchingTo key: String) throws {
        try setAccount(key)
        try db.execute(sql: "DELETE FROM provider_state")
        try db.execute(sql: "DELETE FROM block_index")
        // Files whose content is not here cannot be sent: they go (the old account keeps them).
        try forgetRemoteAndSynced(droppingContentless: true)
        try db.execute(sql: "UPDATE items SET file_id = NULL, r_present = 0, s_present = 0, s_name = NULL, s_parent = NULL WHERE luid = 'root'")
    }

    // MARK: The metadata cache

    /// Bytes the database uses (pages in use, not counting free ones).
    func databaseSize() throws -> Int64 {
        let pages = try Int64.fetchOne(db, sql: "PRAGMA page_count") ?? 0
        let free = try Int64.fetchOne(db, sql: "PRAGMA freelist_count") ?? 0
        let size = try Int64.fetchOne(db, sql: "PRAGMA page_size") ?? 4096
        return (pages - free) * size
    }

    /// Forgets every cached revision list (always fetched again on demand).
    func dropCachedRevisions() throws { try db.execute(sql: "DELETE FROM revisions") }

    /// Evicts the children of up to 20 least recently listed folders that can be fetched again: synced files with
    /// nothing pending, no content here, not pinned, not waiting for the user; each folder is marked so that listing
    /// it fetches them again. Returns how many rows went.
    func evictLeastRecentlyListed() throws -> Int {
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

    /// How many folders still have all their children here.
    func foldersNotEvicted() throws -> Int {
        try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM items WHERE is_folder = 1 AND children_evicted = 0") ?? 0
    }

    /// Whether a folder's children are all here (none evicted).
    func isListingComplete(_ folder: String) throws -> Bool {
        try Bool.fetchOne(db, sql: "SELECT children_evicted = 0 FROM items WHERE luid = ?", arguments: [folder]) ?? true
    }

    /// A folder's children were fetched again: complete, and just used.
    func markRefreshed(_ folder: String, at now: Date) throws {
        try db.execute(
            sql: "UPDATE items SET children_evicted = 0, refresh_requested = 0, last_access = ? WHERE luid = ?", arguments: [now.millis, folder])
    }

    /// Evicted folders someone listed since.
    func foldersToRefresh() throws -> [String] {
        try String.fetchAll(db, sql: "SELECT luid FROM items WHERE refresh_requested = 1 AND children_evicted = 1")
    }

    /// Whether a listing of `folder` in the view now is to be recorded (``markListed(_:at:)``): at most once a minute
    /// per folder (listing stays a read), and always when its children were evicted (they are asked for again).
    func shouldMarkListed(_ folder: String, at now: Int64) throws -> Bool {
        guard let touch = try Row.fetchOne(db, sql: "SELECT last_access, children_evicted FROM items WHERE luid = ?", arguments: [folder]) else {
            return false
        }
        return (touch["children_evicted"] as Bool) || now - (touch["last_access"] as Int64) > 60_000
    }

    /// Records a listing of `folder`: it becomes recently used, and evicted children are asked for again.
    func markListed(_ folder: String, at now: Int64) throws {
        try db.execute(sql: "UPDATE items SET last_access = ?, refresh_requested = children_evicted WHERE luid = ?", arguments: [now, folder])
    }
}
