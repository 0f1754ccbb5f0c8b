import Foundation
import GRDB

/// The synced tree of a folder pair: for each path, the state on which disk and the engine's view last
/// agreed (the merge base). A path changed on disk since is a local change; an item changed in the view since
/// is a remote change; both is a conflict.
struct FolderIndex: Sendable {
    struct Entry: Sendable, Equatable {
        var path: String
        var luid: String
        var isDirectory: Bool
        var inode: UInt64
        var size: Int64
        var mtime: Int64
        var checksum: String?
        var revision: String?
        /// `conflict` when the `ask` policy left it for the user.
        var flag: String?
    }

    let pool: DatabasePool

    init(path: String) throws {
        var configuration = Configuration()
        configuration.busyMode = .timeout(30)
        configuration.prepareDatabase { db in try db.execute(sql: "PRAGMA synchronous = FULL") }
        pool = try DatabasePool(path: path, configuration: configuration)
        var migrator = DatabaseMigrator()
        migrator.registerMigration("1-initial") { db in
            try db.execute(
                sql: """
                    CREATE TABLE pair (key TEXT PRIMARY KEY, value TEXT NOT NULL);
                    CREATE TABLE entries (
                        path TEXT PRIMARY KEY,
                        luid TEXT NOT NULL,
                        is_directory INTEGER NOT NULL,
                        inode INTEGER NOT NULL,
                        size INTEGER NOT NULL,
                        mtime INTEGER NOT NULL,
                        checksum TEXT,
                        revision TEXT,
                        flag TEXT
                    );
                    CREATE INDEX entries_luid ON entries(luid);
                    CREATE INDEX entries_inode ON entries(inode);
                    """)
        }
        try migrator.migrate(pool)
    }

    func all() throws -> [String: Entry] {
        try pool.read { db in
            var result: [String: Entry] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT * FROM entries") {
                let entry = Entry(
                    path: row["path"], luid: row["luid"], isDirectory: row["is_directory"], inode: UInt64(bitPattern: row["inode"]),
                    size: row["size"], mtime: row["mtime"], checksum: row["checksum"], revision: row["revision"], flag: row["flag"])
                result[entry.path] = entry
            }
            return result
        }
    }

    func value(_ key: String) throws -> String? {
        try pool.read { db in try String.fetchOne(db, sql: "SELECT value FROM pair WHERE key = ?", arguments: [key]) }
    }

    func setValue(_ key: String, _ value: String) throws {
        try pool.write { db in
            try db.execute(
                sql: "INSERT INTO pair (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value", arguments: [key, value])
        }
    }

    /// Writes the changes of one sync cycle in one transaction.
    func apply(upserts: [Entry], removals: [String]) throws {
        guard !upserts.isEmpty || !removals.isEmpty else { return }
        try pool.write { db in
            for path in removals { try db.execute(sql: "DELETE FROM entries WHERE path = ?", arguments: [path]) }
            for entry in upserts {
                try db.cachedStatement(
                    sql: """
                        INSERT INTO entries (path, luid, is_directory, inode, size, mtime, checksum, revision, flag)
                        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                        ON CONFLICT (path) DO UPDATE SET luid = excluded.luid, is_directory = excluded.is_directory, inode = excluded.inode,
                        size = excluded.size, mtime = excluded.mtime, checksum = excluded.checksum, revision = excluded.revision, flag = excluded.flag
                        """
                ).execute(arguments: [
                    entry.path, entry.luid, entry.isDirectory, Int64(bitPattern: entry.inode), entry.size, entry.mtime, entry.checksum,
                    entry.revision, entry.flag,
                ])
            }
        }
    }
}
