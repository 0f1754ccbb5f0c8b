import Foundation
import GRDB
import NimbusAPI

/// The library's database behind domain verbs: the only place NimbusSync's SQL lives, and with it the at-rest
/// encryption of names and ids (an encrypted store's rows are sealed and opened here, ``StoreCipher``).
///
/// The engine, the executor and observation never see a database: they open a transaction (``read(_:)``,
/// ``write(_:)``) and speak to it in verbs — read an item or the trees, record what a step did, hold, fail,
/// evict. `scripts/test` fails if SQL or GRDB appears in `Engine/`, `Executor/`, `Observation/` or `Folder/`.
struct SyncStore: Sendable {
    let database: LocalDatabase

    /// Opens (or creates, and migrates) the database at `path`; `label` names its connections (an encrypted
    /// library's cipher is registered under it, ``StoreCipher``).
    init(path: String, label: String) throws { database = try LocalDatabase(path: path, label: label) }

    // (Each transaction runs on the database's own thread: the caller's ``IdentitySource`` goes along, so ids made
    // inside one come from the same sequence.)

    func read<T>(_ body: (StoreTransaction) throws -> T) throws -> T {
        let source = IdentitySource.seeded
        return try database.pool.read { db in try IdentitySource.$seeded.withValue(source) { try body(StoreTransaction(db)) } }
    }

    func write<T>(_ body: (StoreTransaction) throws -> T) throws -> T {
        let source = IdentitySource.seeded
        return try database.pool.write { db in try IdentitySource.$seeded.withValue(source) { try body(StoreTransaction(db)) } }
    }

    func read<T: Sendable>(_ body: @escaping @Sendable (StoreTransaction) throws -> T) async throws -> T {
        let source = IdentitySource.seeded
        return try await database.pool.read { db in try IdentitySource.$seeded.withValue(source) { try body(StoreTransaction(db)) } }
    }

    func write<T: Sendable>(_ body: @escaping @Sendable (StoreTransaction) throws -> T) async throws -> T {
        let source = IdentitySource.seeded
        return try await database.pool.write { db in try IdentitySource.$seeded.withValue(source) { try body(StoreTransaction(db)) } }
    }
}

/// One transaction on the library's database (see ``SyncStore``). Its verbs are grouped by who asks: items and the
/// trees here; the view (SyncStore+View), observation's (SyncStore+Observation), the plan's and the retry schedule's
/// (SyncStore+Plan), the provider's small state (ProviderState).
struct StoreTransaction {
    let db: Database

    fileprivate init(_ db: Database) { self.db = db }

    // MARK: Items

    /// The item `luid`, its names and id opened.
    func item(_ luid: String) throws -> ItemRow? { try ItemRow.fetch(db, luid: luid) }

    /// The item that is provider item `fileId`.
    func item(fileId: String) throws -> ItemRow? { try ItemRow.fetch(db, fileId: fileId) }

    /// The LUID of provider item `fileId`, without reading the row.
    func luid(fileId: String) throws -> String? { try ItemRow.luid(db, fileId: fileId) }

    /// Every item (the root too), as the planner reads the trees.
    func allItems() throws -> [ItemRow] { try ItemRow.fetchAll(db) }

    /// These items (those that exist).
    func items(_ luids: [String]) throws -> [ItemRow] {
        guard !luids.isEmpty else { return [] }
        return try ItemRow.fetchAll(db, where: "luid IN (\(databaseQuestionMarks(count: luids.count)))", arguments: StatementArguments(luids))
    }

    /// The items in the local tree (the root too).
    func itemsHere() throws -> [ItemRow] { try ItemRow.fetchAll(db, where: "l_present = 1") }

    /// A new item, or one rewritten whole.
    func insert(_ row: ItemRow) throws { try row.save(db) }

    /// Records what changed in `row` since it was read as `original`: nothing when nothing did.
    func update(_ row: ItemRow, from original: ItemRow) throws { try row.update(db, from: original) }

    /// `row` as it is now: an update of what changed since `original`, or a new row when there was none.
    func record(_ row: ItemRow, from original: ItemRow?) throws {
        if let original { try row.update(db, from: original) } else { try row.save(db) }
    }

    /// Forgets an item, and its retry schedule.
    func delete(_ luid: String) throws { try ItemRow.delete(db, luid: luid) }

    /// The provider's id of the item `luid`, without reading the row.
    func fileId(of luid: String) throws -> String? {
        try String.fetchOne(db.cachedStatement(sql: "SELECT file_id FROM items WHERE luid = ?"), arguments: [luid]).map { try db.openedId($0) }
    }

    /// The item's parent in the local tree.
    func localParent(of luid: String) throws -> String? {
        try String.fetchOne(db.cachedStatement(sql: "SELECT l_parent FROM items WHERE luid = ?"), arguments: [luid])
    }

    /// The item's parent in the remote tree.
    func remoteParent(of luid: String) throws -> String? {
        try String.fetchOne(db.cachedStatement(sql: "SELECT r_parent FROM items WHERE luid = ?"), arguments: [luid])
    }

    /// The item named `name` in local folder `parent`, if any.
    func luid(named name: String, inLocal parent: String) throws -> String? {
        try String.fetchOne(
            db.cachedStatement(sql: "SELECT luid FROM items WHERE l_parent = ? AND l_name = ? AND l_present = 1"),
            arguments: [parent, db.storeCipher?.sealName(name) ?? name])
    }

    /// The item and everything under it in the local tree, the item first.
    func localSubtree(_ luid: String) throws -> [String] { try subtree(luid, tree: "l") }

    /// An item and everything under it in the remote tree, the item first.
    func remoteSubtree(_ luid: String) throws -> [String] { try subtree(luid, tree: "r") }

    /// An item and everything under it in one tree (its columns' prefix: `l` or `r`), the item first.
    private func subtree(_ luid: String, tree: String) throws -> [String] {
        try String.fetchAll(
            db.cachedStatement(
                sql: """
                    WITH RECURSIVE tree(luid) AS (
                        SELECT ? UNION ALL SELECT i.luid FROM items i JOIN tree t ON i.\(tree)_parent = t.luid WHERE i.\(tree)_present = 1
                    ) SELECT luid FROM tree
                    """),
            arguments: [luid])
    }

    /// An item's path in the local tree, relative to the root (`Work/report.pdf`; the root is ""): nil if it or a
    /// folder above it is not there.
    func localPath(_ luid: String) throws -> String? {
        try treePath(luid, sql: "SELECT l_parent, l_name, l_present FROM items WHERE luid = ?")
    }

    /// An item's path in the remote tree (as ``localPath(_:)``).
    func remotePath(_ luid: String) throws -> String? {
        try treePath(luid, sql: "SELECT r_parent, r_name, r_present FROM items WHERE luid = ?")
    }

    /// An item's path in one tree, walking up with `sql` (parent, name, present of a row).
    private func treePath(_ luid: String, sql: String) throws -> String? {
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

    // MARK: Small state

    /// The change feed's cursor (nil: list the whole tree).
    func cursor() throws -> String? { try db.meta("cursor") }

    func setCursor(_ cursor: String?) throws { try db.setMeta("cursor", cursor) }

    /// The account this library's remote state belongs to (`server|userId`).
    func account() throws -> String? { try db.meta("account") }

    func setAccount(_ key: String) throws { try db.setMeta("account", key) }

    /// A value of the library's small key-value state (what observation remembers about the remote's root).
    func meta(_ key: String) throws -> String? { try db.meta(key) }

    func setMeta(_ key: String, _ value: String?) throws { try db.setMeta(key, value) }

    /// A synced folder's selective sync (``SyncSelection``), as JSON in `meta` — sealed in an encrypted library (its
    /// paths are names).
    func selection() throws -> SyncSelection {
        guard let stored = try db.meta("selection") else { return SyncSelection() }
        let text = try db.storeCipher.map { try $0.openText(stored) } ?? stored
        return (try? JSONDecoder().decode(SyncSelection.self, from: Data(text.utf8))) ?? SyncSelection()
    }

    func setSelection(_ selection: SyncSelection) throws {
        let text = String(decoding: try JSONEncoder().encode(selection), as: UTF8.self)
        try db.setMeta("selection", selection == SyncSelection() ? nil : db.storeCipher.map { $0.sealText(text) } ?? text)
    }
}

extension StoreTransaction {
    // MARK: Holds and revisions

    /// Puts an item on hold for the user (or, nil, releases it) without reading its row.
    func setHold(_ luid: String, _ hold: Hold?) throws {
        try db.execute(sql: "UPDATE items SET flag = ? WHERE luid = ?", arguments: [hold?.rawValue, luid])
    }

    /// Keeps the revision list of provider file `fileId` (newest first) for when the remote cannot be asked.
    func cacheRevisions(_ revisions: [FileRevision], of fileId: String) throws {
        try db.execute(sql: "DELETE FROM revisions WHERE file_id = ?", arguments: [db.storedId(fileId)])
        for (position, revision) in revisions.enumerated() {
            try db.execute(
                sql: "INSERT INTO revisions (file_id, position, revision) VALUES (?, ?, ?)",
                arguments: [db.storedId(fileId), position, db.sealedText(String(decoding: try JSONEncoder.nimbus.encode(revision), as: UTF8.self))])
        }
    }

    /// The revision list last kept for `fileId` (empty if none).
    func cachedRevisions(of fileId: String) throws -> [FileRevision] {
        try String.fetchAll(db, sql: "SELECT revision FROM revisions WHERE file_id = ? ORDER BY position", arguments: [db.storedId(fileId)])
            .compactMap { try? JSONDecoder.nimbus.decode(FileRevision.self, from: Data(try db.openedText($0).utf8)) }
    }
}

extension StoreTransaction {
    // MARK: More of the trees

    /// Pinned files of the view whose current content is not here and is the remote's.
    func pinnedWithoutContent() throws -> [ItemRow] {
        try ItemRow.fetchAll(
            db,
            where: """
                pinned = 1 AND l_present = 1 AND is_folder = 0 AND file_id IS NOT NULL
                AND (content_path IS NULL OR content_checksum IS NOT l_checksum) AND l_checksum IS r_checksum
                """)
    }

    /// Every item's place in the local tree (parent and name, nil where it is not there) and in the remote tree: what
    /// paths are made of, in one read.
    func places() throws -> [(luid: String, local: (String?, String?), remote: (String?, String?))] {
        let cipher = db.storeCipher
        return try Row.fetchAll(db, sql: "SELECT luid, l_present, l_parent, l_name, r_present, r_parent, r_name FROM items").map {
            (
                luid: $0[0] as String, local: ($0[1] as Bool) ? ($0[2] as String?, try cipher?.openName($0[3] as String?) ?? $0[3] as String?) : (nil, nil),
                remote: ($0[4] as Bool) ? ($0[5] as String?, try cipher?.openName($0[6] as String?) ?? $0[6] as String?) : (nil, nil)
            )
        }
    }
}
