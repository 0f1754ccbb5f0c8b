import GRDB

/// The SQLite schema's history from before the one list of migrations (``SchemaMigrations``), frozen: a database made
/// then runs it to its end (``last``), which is exactly ``SchemaMigrations/base``, and goes on with the one list. Never
/// edited, never extended.
enum LegacySQLiteSchema {
    /// The last migration of this history.
    static let last = "14-freed-blocks"

    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("1-initial") { db in
            try db.execute(
                sql: """
                    CREATE TABLE users (
                        id TEXT PRIMARY KEY,
                        username TEXT NOT NULL UNIQUE,
                        password_hash TEXT NOT NULL,
                        quota_limit INTEGER,
                        used_bytes INTEGER NOT NULL DEFAULT 0,
                        root_id TEXT NOT NULL,
                        last_seq INTEGER NOT NULL DEFAULT 0,
                        changes_floor INTEGER NOT NULL DEFAULT 0,
                        created_at INTEGER NOT NULL
                    );
                    CREATE TABLE devices (
                        id TEXT PRIMARY KEY,
                        user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                        name TEXT NOT NULL,
                        refresh_hash TEXT NOT NULL UNIQUE,
                        previous_refresh_hash TEXT,
                        created_at INTEGER NOT NULL,
                        last_used_at INTEGER NOT NULL,
                        revoked_at INTEGER
                    );
                    CREATE INDEX devices_previous ON devices(previous_refresh_hash);
                    CREATE TABLE login_failures (
                        key TEXT PRIMARY KEY,
                        failures INTEGER NOT NULL,
                        window_start INTEGER NOT NULL,
                        locked_until INTEGER
                    );
                    CREATE TABLE files (
                        id TEXT PRIMARY KEY,
                        user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                        parent_id TEXT,
                        name TEXT NOT NULL,
                        mime_type TEXT NOT NULL,
                        is_folder INTEGER NOT NULL,
                        size INTEGER NOT NULL DEFAULT 0,
                        checksum TEXT,
                        head_revision_id TEXT,
                        version INTEGER NOT NULL DEFAULT 1,
                        trash_root TEXT,
                        trashed_at INTEGER,
                        created_at INTEGER NOT NULL,
                        modified_at INTEGER NOT NULL,
                        request_id TEXT
                    );
                    CREATE UNIQUE INDEX files_live_name ON files(user_id, parent_id, name) WHERE trash_root IS NULL;
                    CREATE INDEX files_children ON files(parent_id, is_folder DESC, name, user_id) WHERE trash_root IS NULL;
                    CREATE INDEX files_parent ON files(parent_id);
                    CREATE UNIQUE INDEX files_request ON files(user_id, request_id) WHERE request_id IS NOT NULL;
                    CREATE INDEX files_trash ON files(user_id, trash_root, trashed_at);
                    CREATE TABLE revisions (
                        id TEXT PRIMARY KEY,
                        file_id TEXT NOT NULL,
                        user_id TEXT NOT NULL,
                        mime_type TEXT NOT NULL,
                        size INTEGER NOT NULL,
                        checksum TEXT NOT NULL,
                        created_at INTEGER NOT NULL,
                        ordinal INTEGER NOT NULL
                    );
                    CREATE INDEX revisions_file ON revisions(file_id, ordinal);
                    CREATE TABLE revision_blocks (
                        revision_id TEXT NOT NULL,
                        idx INTEGER NOT NULL,
                        user_id TEXT NOT NULL,
                        hash TEXT NOT NULL,
                        size INTEGER NOT NULL,
                        PRIMARY KEY (revision_id, idx)
                    );
                    CREATE INDEX revision_blocks_hash ON revision_blocks(user_id, hash);
                    CREATE TABLE blocks (
                        user_id TEXT NOT NULL,
                        hash TEXT NOT NULL,
                        size INTEGER NOT NULL,
                        created_at INTEGER NOT NULL,
                        PRIMARY KEY (user_id, hash)
                    );
                    CREATE TABLE changes (
                        seq INTEGER PRIMARY KEY AUTOINCREMENT,
                        user_id TEXT NOT NULL,
                        file_id TEXT NOT NULL,
                        kind TEXT NOT NULL,
                        at INTEGER NOT NULL
                    );
                    CREATE INDEX changes_user ON changes(user_id, seq);
                    CREATE INDEX changes_file ON changes(user_id, file_id);
                    CREATE INDEX changes_kind ON changes(kind, at);
                    CREATE TABLE uploads (
                        id TEXT PRIMARY KEY,
                        user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                        request_id TEXT NOT NULL,
                        name TEXT NOT NULL,
                        mime_type TEXT NOT NULL,
                        parent_id TEXT,
                        file_id TEXT,
                        if_match TEXT,
                        on_conflict TEXT NOT NULL,
                        size INTEGER NOT NULL,
                        checksum TEXT,
                        chunk_size INTEGER NOT NULL,
                        total_chunks INTEGER NOT NULL,
                        chunks_processed INTEGER NOT NULL DEFAULT 0,
                        created_at INTEGER NOT NULL,
                        expires_at INTEGER NOT NULL,
                        completed_file_id TEXT,
                        state TEXT NOT NULL DEFAULT 'active'
                    );
                    CREATE UNIQUE INDEX uploads_request ON uploads(user_id, request_id);
                    CREATE INDEX uploads_expiry ON uploads(expires_at);
                    CREATE TABLE upload_blocks (
                        upload_id TEXT NOT NULL,
                        chunk INTEGER NOT NULL,
                        idx INTEGER NOT NULL,
                        user_id TEXT NOT NULL,
                        hash TEXT NOT NULL,
                        size INTEGER NOT NULL,
                        PRIMARY KEY (upload_id, chunk, idx)
                    );
                    CREATE INDEX upload_blocks_hash ON upload_blocks(user_id, hash);
                    """)
        }
        migrator.registerMigration("2-inline-blocks") { db in
            // Small blocks keep their bytes here (NULL: the block is a file in the blob store).
            try db.execute(sql: "ALTER TABLE blocks ADD COLUMN data BLOB")
        }
        migrator.registerMigration("3-deferred-block-deletion") { db in
            // A block nothing references any more is marked here and deleted from the blob store by a sweep once
            // the grace period has passed (never inside the commit that dropped the last reference).
            try db.execute(sql: "ALTER TABLE blocks ADD COLUMN orphaned_at INTEGER")
            try db.execute(sql: "CREATE INDEX blocks_orphaned ON blocks(orphaned_at) WHERE orphaned_at IS NOT NULL")
        }
        migrator.registerMigration("4-settings") { db in
            // Settings every process of a deployment shares (PostgreSQL keeps the token signing key here; the
            // embedded store keeps it in the `jwt-secret` file, as before).
            try db.execute(sql: "CREATE TABLE settings (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        }
        migrator.registerMigration("5-app-passwords") { db in
            // Per-device passwords for Basic auth (WebDAV), kept as SHA-256 hashes; revoked ones are deleted.
            try db.execute(
                sql: """
                    CREATE TABLE app_passwords (
                        id TEXT PRIMARY KEY,
                        user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                        label TEXT NOT NULL,
                        password_hash TEXT NOT NULL UNIQUE,
                        created_at INTEGER NOT NULL,
                        last_used_at INTEGER
                    );
                    CREATE INDEX app_passwords_user ON app_passwords(user_id, created_at);
                    """)
        }
        migrator.registerMigration("6-dav-properties") { db in
            // WebDAV dead properties (PROPPATCH): kept with the item through moves, gone when it is purged.
            try db.execute(
                sql: """
                    CREATE TABLE dav_properties (
                        user_id TEXT NOT NULL,
                        file_id TEXT NOT NULL,
                        namespace TEXT NOT NULL,
                        name TEXT NOT NULL,
                        value TEXT NOT NULL,
                        PRIMARY KEY (file_id, namespace, name)
                    );
                    CREATE INDEX dav_properties_user ON dav_properties(user_id, file_id);
                    """)
        }
        migrator.registerMigration("7-dav-locks") { db in
            // WebDAV write locks (class 2), by path from the user's root: every replica sees the same locks.
            try db.execute(
                sql: """
                    CREATE TABLE dav_locks (
                        token TEXT PRIMARY KEY,
                        user_id TEXT NOT NULL,
                        path TEXT NOT NULL,
                        infinite INTEGER NOT NULL,
                        exclusive INTEGER NOT NULL,
                        owner TEXT NOT NULL,
                        timeout_seconds INTEGER NOT NULL,
                        expires_at INTEGER NOT NULL
                    );
                    CREATE INDEX dav_locks_user ON dav_locks(user_id, expires_at);
                    """)
        }
        migrator.registerMigration("8-user-change-numbers") { db in
            // Each user's changes numbered on their own (the API's `seq`), so a feed says nothing of other users.
            try db.execute(
                sql: """
                    ALTER TABLE users ADD COLUMN change_count INTEGER NOT NULL DEFAULT 0;
                    ALTER TABLE changes ADD COLUMN user_seq INTEGER NOT NULL DEFAULT 0;
                    UPDATE changes SET user_seq = n.rn
                        FROM (SELECT seq AS s, ROW_NUMBER() OVER (PARTITION BY user_id ORDER BY seq) AS rn FROM changes) AS n
                        WHERE changes.seq = n.s;
                    UPDATE users SET change_count = COALESCE((SELECT MAX(user_seq) FROM changes WHERE changes.user_id = users.id), 0);
                    """)
        }
        migrator.registerMigration("9-mass-deletion") { db in
            // The mass-deletion breaker: each device's recent deletions (pruned after the window) and its pauses.
            try db.execute(
                sql: """
                    CREATE TABLE deletion_log (
                        user_id TEXT NOT NULL,
                        device_id TEXT NOT NULL,
                        at INTEGER NOT NULL,
                        items INTEGER NOT NULL
                    );
                    CREATE INDEX deletion_log_device ON deletion_log(user_id, device_id, at);
                    CREATE INDEX deletion_log_at ON deletion_log(at);
                    CREATE TABLE deletion_guard (
                        user_id TEXT NOT NULL,
                        device_id TEXT NOT NULL,
                        paused_at INTEGER,
                        paused_items INTEGER NOT NULL DEFAULT 0,
                        confirmed_until INTEGER,
                        PRIMARY KEY (user_id, device_id)
                    );
                    """)
        }
        migrator.registerMigration("10-tree-versions") { db in
            // A folder's tree version: the WebDAV collection ETag, moved by any change beneath it.
            try db.execute(sql: "ALTER TABLE files ADD COLUMN tree_version INTEGER NOT NULL DEFAULT 0")
        }
        migrator.registerMigration("11-packs") { db in
            // Blocks written together live in one pack file (see `PackWriter`): where in it, and how many bytes
            // there (fewer than `size`: kept compressed). NULL pack: the block is its own file, as before.
            try db.execute(sql: """
                    ALTER TABLE blocks ADD COLUMN pack TEXT;
                    ALTER TABLE blocks ADD COLUMN pack_offset INTEGER;
                    ALTER TABLE blocks ADD COLUMN pack_stored INTEGER;
                    CREATE INDEX blocks_pack ON blocks(user_id, pack) WHERE pack IS NOT NULL;
                    CREATE TABLE packs (
                        user_id TEXT NOT NULL,
                        id TEXT NOT NULL,
                        created_at INTEGER NOT NULL,
                        PRIMARY KEY (user_id, id)
                    );
                    """)
        }
        migrator.registerMigration("12-pack-size") { db in
            // A pack's length, so the sweep can tell how much of it is dead (compaction). NULL: unknown (a pack
            // from before this column; never compacted).
            try db.execute(sql: "ALTER TABLE packs ADD COLUMN size INTEGER")
        }
        migrator.registerMigration("13-dav-uploads") { db in
            // Nextcloud's chunked uploads (`/remote.php/dav/uploads/USER/NAME/CHUNK`): a folder of chunks per upload,
            // each chunk's blocks held in `upload_blocks` (upload_id `dav:USER:NAME`, chunk = its order).
            try db.execute(sql: """
                    CREATE TABLE dav_uploads (
                        user_id TEXT NOT NULL,
                        name TEXT NOT NULL,
                        destination TEXT,
                        created_at INTEGER NOT NULL,
                        expires_at INTEGER NOT NULL,
                        PRIMARY KEY (user_id, name)
                    );
                    CREATE INDEX dav_uploads_expiry ON dav_uploads(expires_at);
                    CREATE TABLE dav_upload_chunks (
                        user_id TEXT NOT NULL,
                        upload TEXT NOT NULL,
                        ord INTEGER NOT NULL,
                        name TEXT NOT NULL,
                        size INTEGER NOT NULL,
                        PRIMARY KEY (user_id, upload, ord)
                    );
                    """)
        }
        migrator.registerMigration("14-freed-blocks") { db in
            // 1: the block was orphaned because its last reference went (a file purged, a revision pruned, an upload
            // cancelled), not sent and never committed: the sweep takes it after the short freed-space grace period.
            try db.execute(sql: "ALTER TABLE blocks ADD COLUMN freed INTEGER NOT NULL DEFAULT 0")
        }
        return migrator
    }
}
