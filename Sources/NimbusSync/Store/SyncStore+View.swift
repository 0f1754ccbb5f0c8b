import Foundation
import GRDB
import GRDBSQLite
import NimbusAPI

/// What the app's view asks of the store: a folder's children (the hot path of big folders), counts for a status
/// line, the items that need the user; and what opening a library reads and writes.
extension StoreTransaction {
    /// A folder's children in the view, folders first, then by name. Reads only the columns a ``SyncItem``
    /// shows, by index, with a cached statement: this is the hot path of big folders (100,000 children).
    func children(of folder: String, failures: [String: ItemState], offset: Int = 0, limit: Int? = nil) throws -> [SyncItem] {
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
            let state = ItemRow.viewState(luid: luid, hold: text(9).flatMap(Hold.init(rawValue:)), pending: integer(12) != 0, failures: failures)
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
    static func namePrecedes(_ a: String, _ b: String) -> Bool { a.utf8.lexicographicallyPrecedes(b.utf8) }

    /// How many items a folder has in the view.
    func childCount(of folder: String) throws -> Int {
        try Int.fetchOne(
            db.cachedStatement(sql: "SELECT COUNT(*) FROM items WHERE l_parent = ? AND l_present = 1 AND luid != 'root'"), arguments: [folder]) ?? 0
    }

    /// Counts for a status line: items with something to send or to bring here (`remoteAddsArePending`: an item new
    /// there counts — the app's view, where it is brought in; a synced folder downloads it as part of a round), and
    /// the items waiting for the user or failed for good.
    func statusCounts(remoteAddsArePending: Bool) throws -> (pending: Int, conflicts: Int, unsynced: Int, failed: Int) {
        func count(_ sql: String) throws -> Int { try Int.fetchOne(db, sql: sql) ?? 0 }
        return (
            try count(
                """
                SELECT COUNT(*) FROM items WHERE luid != 'root' AND flag IS NULL AND (\(ItemRow.pendingExpression)
                OR (r_present = 1 AND s_present = 1 AND (r_parent IS NOT s_parent OR (r_name IS NOT s_name AND nimbus_names_differ(r_name, s_name)) OR r_revision IS NOT s_revision))
                OR (r_present = 1 AND s_present = 0 AND \(remoteAddsArePending))
                OR (r_present = 0 AND s_present = 1))
                AND luid NOT IN (SELECT luid FROM failures WHERE failed = 1)
                """),
            try count("SELECT COUNT(*) FROM items WHERE flag = '\(Hold.conflict.rawValue)'"),
            try count("SELECT COUNT(*) FROM items WHERE flag = '\(Hold.unsynced.rawValue)'"),
            try count("SELECT COUNT(*) FROM failures WHERE failed = 1"))
    }

    /// The items with a change here the merge base lacks, by ``ItemRow/pendingExpression`` (``ItemRow/isPending``
    /// in SQL; a test holds the two to each other through this).
    func pendingItems() throws -> Set<String> {
        Set(try String.fetchAll(db, sql: "SELECT luid FROM items WHERE \(ItemRow.pendingExpression)"))
    }

    /// Items that wait for the user (held) or whose steps failed for good.
    func itemsNeedingAttention() throws -> [ItemRow] {
        try ItemRow.fetchAll(db, where: "flag IS NOT NULL OR luid IN (SELECT luid FROM failures WHERE failed = 1)")
    }

    /// The file names of every content file an item names (what a staging clean-up must keep).
    func contentFileNames() throws -> Set<String> {
        Set(try String.fetchAll(db, sql: "SELECT content_path FROM items WHERE content_path IS NOT NULL").map { ($0 as NSString).lastPathComponent })
    }

    // MARK: Opening a library

    /// What opening a library must know before it reads anything: whether it is new, whether it is encrypted, and
    /// its key check.
    func libraryState() throws -> (isNew: Bool, encrypted: Bool, keyCheck: String?) {
        (try db.meta("libraryId") == nil, try db.meta("encryption") != nil, try db.meta("keyCheck"))
    }

    /// The library's id; a new library is made (its root, its id, and with `cipher`, its encryption) when it has none.
    func libraryId(creatingWith cipher: StoreCipher?, at now: Date) throws -> String {
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

    /// The names an encrypted library opened last time (``StoreCipher/nameCacheBlob()``).
    func nameCache() throws -> String? { try db.meta(StoreCipher.cacheMetaKey) }

    func setNameCache(_ blob: String) throws { try db.setMeta(StoreCipher.cacheMetaKey, blob) }
}
