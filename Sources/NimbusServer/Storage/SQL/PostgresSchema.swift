/// The PostgreSQL schema's history from before the one list of migrations (``SchemaMigrations``), frozen: a database
/// made then runs it to its end, which is exactly ``SchemaMigrations/base``, and goes on with the one list. Never
/// edited, never extended.
enum LegacyPostgresSchema {
    static let migrations: [(id: String, sql: [String])] = [
        (
            "1-initial",
            [
                """
                CREATE TABLE users (
                    id TEXT PRIMARY KEY,
                    username TEXT COLLATE "C" NOT NULL UNIQUE,
                    password_hash TEXT NOT NULL,
                    quota_limit BIGINT,
                    used_bytes BIGINT NOT NULL DEFAULT 0,
                    root_id TEXT NOT NULL,
                    last_seq BIGINT NOT NULL DEFAULT 0,
                    changes_floor BIGINT NOT NULL DEFAULT 0,
                    created_at BIGINT NOT NULL
                )
                """,
                """
                CREATE TABLE devices (
                    id TEXT PRIMARY KEY,
                    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                    name TEXT NOT NULL,
                    refresh_hash TEXT NOT NULL UNIQUE,
                    previous_refresh_hash TEXT,
                    created_at BIGINT NOT NULL,
                    last_used_at BIGINT NOT NULL,
                    revoked_at BIGINT
                )
                """,
                "CREATE INDEX devices_previous ON devices(previous_refresh_hash)",
                """
                CREATE TABLE login_failures (
                    key TEXT PRIMARY KEY,
                    failures BIGINT NOT NULL,
                    window_start BIGINT NOT NULL,
                    locked_until BIGINT
                )
                """,
                """
                CREATE TABLE files (
                    id TEXT PRIMARY KEY,
                    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                    parent_id TEXT,
                    name TEXT COLLATE "C" NOT NULL,
                    mime_type TEXT NOT NULL,
                    is_folder BIGINT NOT NULL,
                    size BIGINT NOT NULL DEFAULT 0,
                    checksum TEXT,
                    head_revision_id TEXT,
                    version BIGINT NOT NULL DEFAULT 1,
                    trash_root TEXT,
                    trashed_at BIGINT,
                    created_at BIGINT NOT NULL,
                    modified_at BIGINT NOT NULL,
                    request_id TEXT
                )
                """,
                "CREATE UNIQUE INDEX files_live_name ON files(user_id, parent_id, name) WHERE trash_root IS NULL",
                "CREATE INDEX files_children ON files(parent_id, is_folder DESC, name, user_id) WHERE trash_root IS NULL",
                "CREATE INDEX files_parent ON files(parent_id)",
                "CREATE UNIQUE INDEX files_request ON files(user_id, request_id) WHERE request_id IS NOT NULL",
                "CREATE INDEX files_trash ON files(user_id, trash_root, trashed_at)",
                """
                CREATE TABLE revisions (
                    id TEXT PRIMARY KEY,
                    file_id TEXT NOT NULL,
                    user_id TEXT NOT NULL,
                    mime_type TEXT NOT NULL,
                    size BIGINT NOT NULL,
                    checksum TEXT NOT NULL,
                    created_at BIGINT NOT NULL,
                    ordinal BIGINT NOT NULL
                )
                """,
                "CREATE INDEX revisions_file ON revisions(file_id, ordinal)",
                """
                CREATE TABLE revision_blocks (
                    revision_id TEXT NOT NULL,
                    idx BIGINT NOT NULL,
                    user_id TEXT NOT NULL,
                    hash TEXT NOT NULL,
                    size BIGINT NOT NULL,
                    PRIMARY KEY (revision_id, idx)
                )
                """,
                "CREATE INDEX revision_blocks_hash ON revision_blocks(user_id, hash)",
                """
                CREATE TABLE blocks (
                    user_id TEXT NOT NULL,
                    hash TEXT NOT NULL,
                    size BIGINT NOT NULL,
                    created_at BIGINT NOT NULL,
                    data BYTEA,
                    orphaned_at BIGINT,
                    PRIMARY KEY (user_id, hash)
                )
                """,
                "CREATE INDEX blocks_orphaned ON blocks(orphaned_at) WHERE orphaned_at IS NOT NULL",
                """
                CREATE TABLE changes (
                    seq BIGSERIAL PRIMARY KEY,
                    user_id TEXT NOT NULL,
                    file_id TEXT NOT NULL,
                    kind TEXT NOT NULL,
                    at BIGINT NOT NULL
                )
                """,
                "CREATE INDEX changes_user ON changes(user_id, seq)",
                "CREATE INDEX changes_file ON changes(user_id, file_id)",
                "CREATE INDEX changes_kind ON changes(kind, at)",
                """
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
                    size BIGINT NOT NULL,
                    checksum TEXT,
                    chunk_size BIGINT NOT NULL,
                    total_chunks BIGINT NOT NULL,
                    chunks_processed BIGINT NOT NULL DEFAULT 0,
                    created_at BIGINT NOT NULL,
                    expires_at BIGINT NOT NULL,
                    completed_file_id TEXT,
                    state TEXT NOT NULL DEFAULT 'active'
                )
                """,
                "CREATE UNIQUE INDEX uploads_request ON uploads(user_id, request_id)",
                "CREATE INDEX uploads_expiry ON uploads(expires_at)",
                """
                CREATE TABLE upload_blocks (
                    upload_id TEXT NOT NULL,
                    chunk BIGINT NOT NULL,
                    idx BIGINT NOT NULL,
                    user_id TEXT NOT NULL,
                    hash TEXT NOT NULL,
                    size BIGINT NOT NULL,
                    PRIMARY KEY (upload_id, chunk, idx)
                )
                """,
                "CREATE INDEX upload_blocks_hash ON upload_blocks(user_id, hash)",
                // Settings every replica shares (the token signing key).
                "CREATE TABLE settings (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
            ]
        ),
        (
            "2-app-passwords",
            [
                """
                CREATE TABLE app_passwords (
                    id TEXT PRIMARY KEY,
                    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                    label TEXT NOT NULL,
                    password_hash TEXT NOT NULL UNIQUE,
                    created_at BIGINT NOT NULL,
                    last_used_at BIGINT
                )
                """,
                "CREATE INDEX app_passwords_user ON app_passwords(user_id, created_at)",
            ]
        ),
        (
            "3-dav-properties",
            [
                """
                CREATE TABLE dav_properties (
                    user_id TEXT NOT NULL,
                    file_id TEXT NOT NULL,
                    namespace TEXT NOT NULL,
                    name TEXT NOT NULL,
                    value TEXT NOT NULL,
                    PRIMARY KEY (file_id, namespace, name)
                )
                """,
                "CREATE INDEX dav_properties_user ON dav_properties(user_id, file_id)",
            ]
        ),
        (
            "4-dav-locks",
            [
                """
                CREATE TABLE dav_locks (
                    token TEXT PRIMARY KEY,
                    user_id TEXT NOT NULL,
                    path TEXT NOT NULL,
                    infinite BIGINT NOT NULL,
                    exclusive BIGINT NOT NULL,
                    owner TEXT NOT NULL,
                    timeout_seconds BIGINT NOT NULL,
                    expires_at BIGINT NOT NULL
                )
                """,
                "CREATE INDEX dav_locks_user ON dav_locks(user_id, expires_at)",
            ]
        ),
        (
            "5-user-change-numbers",
            [
                "ALTER TABLE users ADD COLUMN change_count BIGINT NOT NULL DEFAULT 0",
                "ALTER TABLE changes ADD COLUMN user_seq BIGINT NOT NULL DEFAULT 0",
                """
                UPDATE changes SET user_seq = n.rn
                    FROM (SELECT seq AS s, ROW_NUMBER() OVER (PARTITION BY user_id ORDER BY seq) AS rn FROM changes) AS n
                    WHERE changes.seq = n.s
                """,
                "UPDATE users SET change_count = COALESCE((SELECT MAX(user_seq) FROM changes WHERE changes.user_id = users.id), 0)",
            ]
        ),
        (
            "6-mass-deletion",
            [
                """
                CREATE TABLE deletion_log (
                    user_id TEXT NOT NULL,
                    device_id TEXT NOT NULL,
                    at BIGINT NOT NULL,
                    items BIGINT NOT NULL
                )
                """,
                "CREATE INDEX deletion_log_device ON deletion_log(user_id, device_id, at)",
                "CREATE INDEX deletion_log_at ON deletion_log(at)",
                """
                CREATE TABLE deletion_guard (
                    user_id TEXT NOT NULL,
                    device_id TEXT NOT NULL,
                    paused_at BIGINT,
                    paused_items BIGINT NOT NULL DEFAULT 0,
                    confirmed_until BIGINT,
                    PRIMARY KEY (user_id, device_id)
                )
                """,
            ]
        ),
        (
            // A folder's tree version: the WebDAV collection ETag, moved by any change beneath it.
            "7-tree-versions",
            ["ALTER TABLE files ADD COLUMN tree_version BIGINT NOT NULL DEFAULT 0"]
        ),
        (
            // Blocks written together live in one pack (see `PackWriter`); NULL pack: the block is its own object.
            "8-packs",
            [
                "ALTER TABLE blocks ADD COLUMN pack TEXT",
                "ALTER TABLE blocks ADD COLUMN pack_offset BIGINT",
                "ALTER TABLE blocks ADD COLUMN pack_stored BIGINT",
                "CREATE INDEX blocks_pack ON blocks(user_id, pack) WHERE pack IS NOT NULL",
                "CREATE TABLE packs (user_id TEXT NOT NULL, id TEXT NOT NULL, created_at BIGINT NOT NULL, PRIMARY KEY (user_id, id))",
            ]
        ),
        (
            // A pack's length, so the sweep can tell how much of it is dead (compaction); NULL: unknown.
            "9-pack-size",
            ["ALTER TABLE packs ADD COLUMN size BIGINT"]
        ),
        (
            // Nextcloud's chunked uploads: a folder of chunks per upload, their blocks in `upload_blocks`.
            "10-dav-uploads",
            [
                """
                CREATE TABLE dav_uploads (
                    user_id TEXT NOT NULL,
                    name TEXT NOT NULL,
                    destination TEXT,
                    created_at BIGINT NOT NULL,
                    expires_at BIGINT NOT NULL,
                    PRIMARY KEY (user_id, name)
                )
                """,
                "CREATE INDEX dav_uploads_expiry ON dav_uploads(expires_at)",
                """
                CREATE TABLE dav_upload_chunks (
                    user_id TEXT NOT NULL,
                    upload TEXT NOT NULL,
                    ord BIGINT NOT NULL,
                    name TEXT NOT NULL,
                    size BIGINT NOT NULL,
                    PRIMARY KEY (user_id, upload, ord)
                )
                """,
            ]
        ),
        (
            // 1: orphaned because its last reference went (not sent and never committed): swept after the short
            // freed-space grace period.
            "11-freed-blocks",
            ["ALTER TABLE blocks ADD COLUMN freed BIGINT NOT NULL DEFAULT 0"]
        ),
    ]
}

enum PostgresSchema {
    /// Creates the schema if needed and runs the migrations not yet recorded, under a transaction-wide lock so
    /// replicas starting together migrate once: a database made before the one list first finishes its legacy history.
    static func migrate(_ db: any SQLTransaction, schema: String) throws {
        try db.execute("SELECT pg_advisory_xact_lock(7207650)", [])
        try db.execute("CREATE SCHEMA IF NOT EXISTS \"\(schema)\"", [])
        try db.execute("SET LOCAL search_path TO \"\(schema)\"", [])
        try db.execute("CREATE TABLE IF NOT EXISTS nimbus_migrations (id TEXT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())", [])
        var applied = Set(try db.values("SELECT id FROM nimbus_migrations", [], as: String.self))
        let legacy = LegacyPostgresSchema.migrations
        let legacyStarted = legacy.first.map { applied.contains($0.id) } ?? false
        if legacyStarted {
            for migration in legacy where !applied.contains(migration.id) {
                for statement in migration.sql { try db.execute(statement, []) }
                try db.execute("INSERT INTO nimbus_migrations (id) VALUES (?)", [migration.id])
                applied.insert(migration.id)
            }
            if !applied.contains(SchemaMigrations.base) {
                try db.execute("INSERT INTO nimbus_migrations (id) VALUES (?)", [SchemaMigrations.base])
            }
        }
        for migration in SchemaMigrations.pending(applied: applied, legacyComplete: legacyStarted) {
            for statement in migration.statements(for: .postgres) { try db.execute(SchemaMigrations.render(statement, for: .postgres), []) }
            try db.execute("INSERT INTO nimbus_migrations (id) VALUES (?)", [migration.id])
        }
    }
}
