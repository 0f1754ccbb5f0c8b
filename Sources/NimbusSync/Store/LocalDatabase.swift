import Foundation
import GRDB

/// The engine's SQLite database (GRDB, WAL): the three trees of every item, retry schedules, the provider's
/// small state (resumable sessions) and a little key-value state.
///
/// Each item row carries three versions of itself (Nucleus' three trees, as columns):
/// - `r_*` — **remote**: the server's state as the change feed last told it (a cache);
/// - `s_*` — **synced**: the last state both sides agreed on (the merge base that tells "deleted here"
///   from "created there");
/// - `l_*` — **local**: what is here — the app's view (its actions change it at once) or, for a synced folder,
///   the folder on disk as last scanned (with inode and modification time, and `l_state = 'changing'` for a file
///   still being written).
///
/// Nothing else says what is pending: the planner (``Planner``) compares the three trees.
///
/// Migrations are history: never edit one that shipped; add the next.
struct LocalDatabase: Sendable {
    let pool: DatabasePool

    /// `label` names the database's connections; an encrypted library's cipher is registered under it
    /// (``StoreCipher``).
    init(path: String, label: String? = nil) throws {
        var configuration = Configuration()
        configuration.label = label
        configuration.busyMode = .timeout(30)
        let traced = ProcessInfo.processInfo.environment["NIMBUS_SQL_TRACE"] != nil
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = FULL")
            // Big folders list from memory-mapped pages rather than through SQLite's small default page cache.
            try db.execute(sql: "PRAGMA mmap_size = 268435456")
            if traced { db.trace { FileHandle.standardError.write(Data("SQL \($0.expandedDescription.prefix(90))\n".utf8)) } }
            db.add(function: DatabaseFunction("nimbus_names_differ", argumentCount: 2, pure: true) { values in
                Self.namesDiffer(values[0], values[1], label: label)
            })
        }
        pool = try DatabasePool(path: path, configuration: configuration)
        try Self.migrator.migrate(pool)
    }

    /// Whether two stored names are different names, as the planner compares them (Swift's `==`: canonical
    /// equivalence, so `naïve` in NFD — as macOS apps and archives often write it — and in NFC are one name). SQL's
    /// `IS NOT` compares bytes; SQL that tells what is pending asks this where the bytes differ, so a file whose name
    /// is NFD on disk and NFC on the remote is not "pending" forever. Sealed names (an encrypted store) are opened
    /// first; one that does not open differs.
    static func namesDiffer(_ a: DatabaseValue, _ b: DatabaseValue, label: String?) -> Bool {
        guard var x = String.fromDatabaseValue(a), var y = String.fromDatabaseValue(b) else { return a != b }
        if let cipher = StoreCipher.registered(label: label) {
            guard let openedX = try? cipher.openName(x), let openedY = try? cipher.openName(y) else { return true }
            (x, y) = (openedX, openedY)
        }
        return x != y
    }

    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("1-initial") { db in
            try db.execute(
                sql: """
                    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
                    CREATE TABLE items (
                        luid TEXT PRIMARY KEY,
                        file_id TEXT UNIQUE,
                        is_folder INTEGER NOT NULL DEFAULT 0,
                        r_present INTEGER NOT NULL DEFAULT 0,
                        r_parent TEXT,
                        r_name TEXT,
                        r_mime TEXT,
                        r_size INTEGER,
                        r_checksum TEXT,
                        r_revision TEXT,
                        r_modified INTEGER,
                        s_present INTEGER NOT NULL DEFAULT 0,
                        s_parent TEXT,
                        s_name TEXT,
                        s_checksum TEXT,
                        s_revision TEXT,
                        l_present INTEGER NOT NULL DEFAULT 0,
                        l_parent TEXT,
                        l_name TEXT,
                        l_mime TEXT,
                        l_size INTEGER,
                        l_checksum TEXT,
                        l_modified INTEGER,
                        content_path TEXT,
                        content_checksum TEXT,
                        pinned INTEGER NOT NULL DEFAULT 0,
                        flag TEXT,
                        last_access INTEGER NOT NULL DEFAULT 0
                    );
                    CREATE INDEX items_local_children ON items(l_parent, is_folder DESC, l_name) WHERE l_present = 1;
                    CREATE INDEX items_remote_children ON items(r_parent);
                    CREATE INDEX items_lru ON items(last_access);
                    CREATE INDEX items_flag ON items(flag) WHERE flag IS NOT NULL;
                    CREATE TABLE operations (
                        seq INTEGER PRIMARY KEY AUTOINCREMENT,
                        id TEXT NOT NULL UNIQUE,
                        luid TEXT NOT NULL,
                        kind TEXT NOT NULL,
                        payload TEXT NOT NULL,
                        depends_on TEXT,
                        state TEXT NOT NULL DEFAULT 'pending',
                        attempts INTEGER NOT NULL DEFAULT 0,
                        next_attempt_at INTEGER NOT NULL DEFAULT 0,
                        last_error TEXT,
                        applied_generation INTEGER,
                        created_at INTEGER NOT NULL
                    );
                    CREATE INDEX operations_luid ON operations(luid);
                    CREATE INDEX operations_state ON operations(state, next_attempt_at);
                    CREATE TABLE operation_dependencies (
                        operation_id TEXT NOT NULL,
                        depends_on TEXT NOT NULL,
                        PRIMARY KEY (operation_id, depends_on)
                    );
                    CREATE INDEX operation_dependencies_target ON operation_dependencies(depends_on);
                    CREATE TRIGGER operations_gone AFTER DELETE ON operations BEGIN
                        DELETE FROM operation_dependencies WHERE operation_id = OLD.id;
                    END;
                    CREATE TABLE remote_deletions (file_id TEXT PRIMARY KEY);
                    CREATE TABLE upload_sessions (
                        operation_id TEXT PRIMARY KEY,
                        response TEXT NOT NULL
                    );
                    """)
        }
        migrator.registerMigration("2-metadata-eviction") { db in
            // A folder whose children were evicted from the cache lists incompletely until refreshed.
            try db.execute(
                sql: """
                    ALTER TABLE items ADD COLUMN children_evicted INTEGER NOT NULL DEFAULT 0;
                    ALTER TABLE items ADD COLUMN refresh_requested INTEGER NOT NULL DEFAULT 0;
                    """)
        }
        migrator.registerMigration("3-listing-indexes") { db in
            // Listing a folder reads only this index (it covers every column a listing shows): 100,000 children
            // list without touching the table. Looking a name up in a folder gets its own index (the listing
            // one has `is_folder` before the name).
            try db.execute(
                sql: """
                    DROP INDEX items_local_children;
                    CREATE INDEX items_local_children ON items(
                        l_parent, is_folder DESC, l_name, luid, file_id, l_mime, l_size, l_checksum, r_revision, l_modified, flag, pinned,
                        content_path, content_checksum, l_present) WHERE l_present = 1;
                    CREATE INDEX items_local_names ON items(l_parent, l_name) WHERE l_present = 1;
                    """)
        }
        migrator.registerMigration("4-operation-blocking") { db in
            // "Operations others wait for go first" as a column the executor's index is ordered by: deciding it
            // per candidate (an EXISTS over the dependencies of every pending operation) made each pick O(queue),
            // and a 10,000-file upload quadratic.
            try db.execute(
                sql: """
                    ALTER TABLE operations ADD COLUMN blocking INTEGER NOT NULL DEFAULT 0;
                    UPDATE operations SET blocking = 1 WHERE id IN (SELECT depends_on FROM operation_dependencies);
                    CREATE INDEX operations_runnable ON operations(state, blocking DESC, seq);
                    """)
        }
        migrator.registerMigration("5-revisions-cache") { db in
            // The last revision list fetched per file, newest first: shown offline, dropped first when the
            // metadata cache is over its cap (it can always be fetched again).
            try db.execute(
                sql: """
                    CREATE TABLE revisions (
                        file_id TEXT NOT NULL,
                        position INTEGER NOT NULL,
                        revision TEXT NOT NULL,
                        PRIMARY KEY (file_id, position)
                    );
                    """)
        }
        migrator.registerMigration("6-planner") { db in
            // The re-founded engine: no operation queue — the planner derives what to do from the three trees, so
            // everything pending is in the item rows. The queue's content moves into them here.
            try db.execute(
                sql: """
                    ALTER TABLE items ADD COLUMN l_state TEXT;
                    ALTER TABLE items ADD COLUMN l_inode INTEGER;
                    ALTER TABLE items ADD COLUMN l_mtime INTEGER;
                    ALTER TABLE items ADD COLUMN create_request TEXT;
                    ALTER TABLE items ADD COLUMN create_sent INTEGER NOT NULL DEFAULT 0;
                    ALTER TABLE items ADD COLUMN upload_request TEXT;
                    ALTER TABLE items ADD COLUMN content_owned INTEGER NOT NULL DEFAULT 1;
                    ALTER TABLE items ADD COLUMN source_revision TEXT;
                    CREATE TABLE failures (
                        luid TEXT PRIMARY KEY,
                        kind TEXT NOT NULL,
                        attempts INTEGER NOT NULL,
                        next_attempt_at INTEGER NOT NULL,
                        last_error TEXT,
                        failed INTEGER NOT NULL DEFAULT 0
                    );
                    CREATE TABLE provider_state (key TEXT PRIMARY KEY, value TEXT NOT NULL);
                    """)
            try LegacyQueue.migrate(db)
            try db.execute(
                sql: """
                    DROP TABLE operation_dependencies;
                    DROP TABLE operations;
                    DROP TABLE upload_sessions;
                    DROP TABLE remote_deletions;
                    DROP INDEX items_local_children;
                    CREATE INDEX items_local_children ON items(
                        l_parent, is_folder DESC, l_name, luid, file_id, l_mime, l_size, l_checksum, r_revision, l_modified, flag, pinned,
                        content_path, content_checksum, l_present, s_present, s_parent, s_name, s_checksum, l_state) WHERE l_present = 1;
                    CREATE INDEX items_file_id ON items(file_id);
                    """)
        }
        migrator.registerMigration("7-block-index") { db in
            // The device's block index: the content-defined chunks of every file this device sent or
            // fetched as blocks, by file and by hash, so a download takes what any synced file here already holds.
            // It replaces the per-file lists kept in provider_state until now.
            try db.execute(
                sql: """
                    CREATE TABLE block_index (
                        file_id TEXT NOT NULL,
                        position INTEGER NOT NULL,
                        revision TEXT NOT NULL,
                        hash BLOB NOT NULL,
                        offset INTEGER NOT NULL,
                        size INTEGER NOT NULL,
                        PRIMARY KEY (file_id, position)
                    ) WITHOUT ROWID;
                    CREATE INDEX block_index_hash ON block_index(hash);
                    DELETE FROM provider_state WHERE key >= 'nimbus.blocks.' AND key < 'nimbus.blocks/';
                    """)
        }
        migrator.registerMigration("8-listed-folders") { db in
            // Each folder's revision as the last listing saw it, before listing what is in it, for providers whose
            // folder revisions change with anything beneath (``ProviderFeatures/treeVersions``): a subtree whose
            // folder still has that revision is not listed again.
            try db.execute(sql: "CREATE TABLE listed_folders (file_id TEXT PRIMARY KEY, revision TEXT NOT NULL) WITHOUT ROWID")
        }
        migrator.registerMigration("9-remote-access") { db in
            // What the user may not do with an item there (a share someone gave them, in a role that does not allow
            // it), as the remote tree last saw it and as the merge base recorded it (``RemoteAccess``).
            try db.execute(
                sql: """
                    ALTER TABLE items ADD COLUMN r_access INTEGER NOT NULL DEFAULT 0;
                    ALTER TABLE items ADD COLUMN s_access INTEGER NOT NULL DEFAULT 0;
                    """)
        }
        return migrator
    }
}

/// The operation queue of libraries made before the planner, folded into their item rows (migration 6).
enum LegacyQueue {
    struct Payload: Decodable {
        var sourcePath: String?
        var ownsSource: Bool?
        var checksum: String?
        var size: Int64?
        var revisionId: String?
        var requestId: String?
    }

    static func migrate(_ db: Database) throws {
        for fileId in try String.fetchAll(db, sql: "SELECT file_id FROM remote_deletions") {
            try db.execute(sql: "UPDATE items SET r_present = 0 WHERE file_id = ?", arguments: [fileId])
        }
        let sessions = Dictionary(
            try Row.fetchAll(db, sql: "SELECT operation_id, response FROM upload_sessions").map { ($0[0] as String, $0[1] as String) },
            uniquingKeysWith: { first, _ in first })
        for row in try Row.fetchAll(db, sql: "SELECT id, luid, kind, payload, state, attempts, last_error FROM operations ORDER BY seq") {
            let id: String = row[0]
            let luid: String = row[1]
            let kind: String = row[2]
            let state: String = row[4]
            let attempts: Int = row[5]
            let payload = try? JSONDecoder().decode(Payload.self, from: Data((row[3] as String).utf8))
            guard state != "applied" else { continue }
            switch kind {
            case "createFolder":
                try db.execute(
                    sql: "UPDATE items SET create_request = ?, create_sent = ? WHERE luid = ? AND file_id IS NULL", arguments: [id, attempts > 0, luid])
            case "upload":
                let requestId = payload?.requestId ?? id
                if let source = payload?.sourcePath, FileManager.default.fileExists(atPath: source) {
                    try db.execute(
                        sql: "UPDATE items SET content_path = ?, content_checksum = ?, content_owned = ?, l_checksum = COALESCE(?, l_checksum) WHERE luid = ?",
                        arguments: [source, payload?.checksum, payload?.ownsSource ?? false, payload?.checksum, luid])
                }
                try db.execute(
                    sql: "UPDATE items SET create_request = ?, create_sent = ? WHERE luid = ? AND file_id IS NULL", arguments: [requestId, attempts > 0, luid])
                if let checksum = payload?.checksum {
                    try db.execute(sql: "UPDATE items SET upload_request = ? WHERE luid = ? AND file_id IS NOT NULL", arguments: ["\(checksum) \(requestId)", luid])
                }
                if let session = sessions[id] {
                    try db.execute(
                        sql: "INSERT INTO provider_state (key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING",
                        arguments: ["nimbus.upload.\(requestId)", session])
                }
            case "restore":
                try db.execute(sql: "UPDATE items SET source_revision = ? WHERE luid = ?", arguments: [payload?.revisionId, luid])
            default:
                break
            }
            if state == "failed" {
                try db.execute(
                    sql: "INSERT INTO failures (luid, kind, attempts, next_attempt_at, last_error, failed) VALUES (?, ?, ?, 0, ?, 1) ON CONFLICT DO NOTHING",
                    arguments: [luid, kind, attempts, row[6] as String?])
            }
        }
    }
}

extension Database {
    func meta(_ key: String) throws -> String? {
        try String.fetchOne(self, sql: "SELECT value FROM meta WHERE key = ?", arguments: [key])
    }

    func setMeta(_ key: String, _ value: String?) throws {
        if let value {
            try execute(
                sql: "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                arguments: [key, value])
        } else {
            try execute(sql: "DELETE FROM meta WHERE key = ?", arguments: [key])
        }
    }
}

extension Date {
    var millis: Int64 { Int64((timeIntervalSince1970 * 1000).rounded()) }
    init(millis: Int64) { self.init(timeIntervalSince1970: TimeInterval(millis) / 1000) }
}
