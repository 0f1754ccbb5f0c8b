import Foundation

/// The metadata schema, written once for both databases: one list of migrations whose statements name their types
/// by role — `{int}` (INTEGER / BIGINT), `{bytes}` (BLOB / BYTEA), `{name}` (TEXT, byte-wise `COLLATE "C"` on
/// PostgreSQL so listings sort and compare as on SQLite), `{serial}` (an auto-numbered primary key) — and each
/// dialect's type map renders them. Timestamps are integer milliseconds (UTC). Every table is keyed or indexed by
/// user first, which is what a Citus deployment distributes on.
///
/// Migrations are history: once shipped, never edited — add the next. Each runs once, in a transaction, recorded in
/// `nimbus_migrations`. Databases made before this list carry the history each dialect had then
/// (``LegacySQLiteSchema``, ``LegacyPostgresSchema``, frozen): run to its end, it is exactly `schema-1`, which is then
/// recorded as applied; `SchemaParityTests` opens both kinds of database on both dialects and compares their tables,
/// columns and indexes.
enum SchemaMigrations {
    enum Dialect: Sendable {
        case sqlite, postgres
    }

    struct Migration: Sendable {
        var id: String
        var statements: [String]
        /// Statements one dialect alone runs, after `statements`: what the other does another way (a search index).
        var sqliteOnly: [String] = []
        var postgresOnly: [String] = []

        /// What `dialect` runs, in order, its placeholders still to render.
        func statements(for dialect: Dialect) -> [String] {
            statements + (dialect == .sqlite ? sqliteOnly : postgresOnly)
        }
    }

    /// The id a database made before this list reaches once its legacy history has run to the end.
    static let base = "schema-1"

    /// The statements of `sql` in `dialect`: its type placeholders replaced.
    static func render(_ sql: String, for dialect: Dialect) -> String {
        let types: [(String, String)] =
            switch dialect {
            case .sqlite: [("{int}", "INTEGER"), ("{bytes}", "BLOB"), ("{name}", "TEXT"), ("{serial}", "INTEGER PRIMARY KEY AUTOINCREMENT")]
            case .postgres: [("{int}", "BIGINT"), ("{bytes}", "BYTEA"), ("{name}", "TEXT COLLATE \"C\""), ("{serial}", "BIGSERIAL PRIMARY KEY")]
            }
        return types.reduce(sql) { $0.replacingOccurrences(of: $1.0, with: $1.1) }
    }

    /// The migrations a database that has `applied` still needs, in order. `legacyComplete`: the database carries the
    /// history from before this list, run to its end (so it is at ``base``).
    static func pending(applied: Set<String>, legacyComplete: Bool) -> [Migration] {
        let done = legacyComplete ? applied.union([base]) : applied
        return all.filter { !done.contains($0.id) }
    }

    static let all: [Migration] = [
        Migration(
            id: base,
            statements: [
                """
                CREATE TABLE users (
                    id TEXT PRIMARY KEY,
                    username {name} NOT NULL UNIQUE,
                    password_hash TEXT NOT NULL,
                    quota_limit {int},
                    used_bytes {int} NOT NULL DEFAULT 0,
                    root_id TEXT NOT NULL,
                    last_seq {int} NOT NULL DEFAULT 0,
                    changes_floor {int} NOT NULL DEFAULT 0,
                    created_at {int} NOT NULL,
                    change_count {int} NOT NULL DEFAULT 0
                )
                """,
                """
                CREATE TABLE devices (
                    id TEXT PRIMARY KEY,
                    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                    name TEXT NOT NULL,
                    refresh_hash TEXT NOT NULL UNIQUE,
                    previous_refresh_hash TEXT,
                    created_at {int} NOT NULL,
                    last_used_at {int} NOT NULL,
                    revoked_at {int}
                )
                """,
                "CREATE INDEX devices_previous ON devices(previous_refresh_hash)",
                """
                CREATE TABLE login_failures (
                    key TEXT PRIMARY KEY,
                    failures {int} NOT NULL,
                    window_start {int} NOT NULL,
                    locked_until {int}
                )
                """,
                """
                CREATE TABLE files (
                    id TEXT PRIMARY KEY,
                    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                    parent_id TEXT,
                    name {name} NOT NULL,
                    mime_type TEXT NOT NULL,
                    is_folder {int} NOT NULL,
                    size {int} NOT NULL DEFAULT 0,
                    checksum TEXT,
                    head_revision_id TEXT,
                    version {int} NOT NULL DEFAULT 1,
                    trash_root TEXT,
                    trashed_at {int},
                    created_at {int} NOT NULL,
                    modified_at {int} NOT NULL,
                    request_id TEXT,
                    tree_version {int} NOT NULL DEFAULT 0
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
                    size {int} NOT NULL,
                    checksum TEXT NOT NULL,
                    created_at {int} NOT NULL,
                    ordinal {int} NOT NULL
                )
                """,
                "CREATE INDEX revisions_file ON revisions(file_id, ordinal)",
                """
                CREATE TABLE revision_blocks (
                    revision_id TEXT NOT NULL,
                    idx {int} NOT NULL,
                    user_id TEXT NOT NULL,
                    hash TEXT NOT NULL,
                    size {int} NOT NULL,
                    PRIMARY KEY (revision_id, idx)
                )
                """,
                "CREATE INDEX revision_blocks_hash ON revision_blocks(user_id, hash)",
                // A block's bytes: kept in the row (`data`, small content), or at `pack_offset` in pack `pack`
                // (`pack_stored` bytes there: fewer than `size` = compressed), or in a file of its own (pack NULL).
                // `orphaned_at`: nothing references it since then; `freed` 1: its last reference went (swept after
                // the short freed-space grace), 0: sent and never committed (swept after the block grace period).
                """
                CREATE TABLE blocks (
                    user_id TEXT NOT NULL,
                    hash TEXT NOT NULL,
                    size {int} NOT NULL,
                    created_at {int} NOT NULL,
                    data {bytes},
                    orphaned_at {int},
                    pack TEXT,
                    pack_offset {int},
                    pack_stored {int},
                    freed {int} NOT NULL DEFAULT 0,
                    PRIMARY KEY (user_id, hash)
                )
                """,
                "CREATE INDEX blocks_orphaned ON blocks(orphaned_at) WHERE orphaned_at IS NOT NULL",
                "CREATE INDEX blocks_pack ON blocks(user_id, pack) WHERE pack IS NOT NULL",
                """
                CREATE TABLE packs (
                    user_id TEXT NOT NULL,
                    id TEXT NOT NULL,
                    created_at {int} NOT NULL,
                    size {int},
                    PRIMARY KEY (user_id, id)
                )
                """,
                // The change feed: one row per item (its latest state); `user_seq` is the user's own change number.
                """
                CREATE TABLE changes (
                    seq {serial},
                    user_id TEXT NOT NULL,
                    file_id TEXT NOT NULL,
                    kind TEXT NOT NULL,
                    at {int} NOT NULL,
                    user_seq {int} NOT NULL DEFAULT 0
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
                    size {int} NOT NULL,
                    checksum TEXT,
                    chunk_size {int} NOT NULL,
                    total_chunks {int} NOT NULL,
                    chunks_processed {int} NOT NULL DEFAULT 0,
                    created_at {int} NOT NULL,
                    expires_at {int} NOT NULL,
                    completed_file_id TEXT,
                    state TEXT NOT NULL DEFAULT 'active'
                )
                """,
                "CREATE UNIQUE INDEX uploads_request ON uploads(user_id, request_id)",
                "CREATE INDEX uploads_expiry ON uploads(expires_at)",
                """
                CREATE TABLE upload_blocks (
                    upload_id TEXT NOT NULL,
                    chunk {int} NOT NULL,
                    idx {int} NOT NULL,
                    user_id TEXT NOT NULL,
                    hash TEXT NOT NULL,
                    size {int} NOT NULL,
                    PRIMARY KEY (upload_id, chunk, idx)
                )
                """,
                "CREATE INDEX upload_blocks_hash ON upload_blocks(user_id, hash)",
                // Settings every replica shares (the token signing key).
                "CREATE TABLE settings (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
                """
                CREATE TABLE app_passwords (
                    id TEXT PRIMARY KEY,
                    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                    label TEXT NOT NULL,
                    password_hash TEXT NOT NULL UNIQUE,
                    created_at {int} NOT NULL,
                    last_used_at {int}
                )
                """,
                "CREATE INDEX app_passwords_user ON app_passwords(user_id, created_at)",
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
                """
                CREATE TABLE dav_locks (
                    token TEXT PRIMARY KEY,
                    user_id TEXT NOT NULL,
                    path TEXT NOT NULL,
                    infinite {int} NOT NULL,
                    exclusive {int} NOT NULL,
                    owner TEXT NOT NULL,
                    timeout_seconds {int} NOT NULL,
                    expires_at {int} NOT NULL
                )
                """,
                "CREATE INDEX dav_locks_user ON dav_locks(user_id, expires_at)",
                """
                CREATE TABLE dav_uploads (
                    user_id TEXT NOT NULL,
                    name TEXT NOT NULL,
                    destination TEXT,
                    created_at {int} NOT NULL,
                    expires_at {int} NOT NULL,
                    PRIMARY KEY (user_id, name)
                )
                """,
                "CREATE INDEX dav_uploads_expiry ON dav_uploads(expires_at)",
                """
                CREATE TABLE dav_upload_chunks (
                    user_id TEXT NOT NULL,
                    upload TEXT NOT NULL,
                    ord {int} NOT NULL,
                    name TEXT NOT NULL,
                    size {int} NOT NULL,
                    PRIMARY KEY (user_id, upload, ord)
                )
                """,
                """
                CREATE TABLE deletion_log (
                    user_id TEXT NOT NULL,
                    device_id TEXT NOT NULL,
                    at {int} NOT NULL,
                    items {int} NOT NULL
                )
                """,
                "CREATE INDEX deletion_log_device ON deletion_log(user_id, device_id, at)",
                "CREATE INDEX deletion_log_at ON deletion_log(at)",
                """
                CREATE TABLE deletion_guard (
                    user_id TEXT NOT NULL,
                    device_id TEXT NOT NULL,
                    paused_at {int},
                    paused_items {int} NOT NULL DEFAULT 0,
                    confirmed_until {int},
                    PRIMARY KEY (user_id, device_id)
                )
                """,
            ]
        ),
        Migration(
            id: "schema-2-login-flows",
            statements: [
                // Sign-ins of Nextcloud's apps in progress (Login Flow v2, and v1's page): short-lived, not yet any
                // user's until the page signs in, so keyed by the login token rather than by user.
                """
                CREATE TABLE login_flows (
                    login_token TEXT PRIMARY KEY,
                    poll_hash TEXT UNIQUE,
                    client_name TEXT NOT NULL,
                    user_id TEXT REFERENCES users(id) ON DELETE CASCADE,
                    grant_hash TEXT,
                    sealed {bytes},
                    login_name TEXT,
                    created_at {int} NOT NULL,
                    expires_at {int} NOT NULL
                )
                """,
                "CREATE INDEX login_flows_expiry ON login_flows(expires_at)",
            ]
        ),
        Migration(
            id: "schema-3-sharing",
            statements: [
                // A role on an item (and everything under it) for another user: offered (`pending`), `accepted` (then a
                // mount places it in the grantee's tree) or `declined`. One grant per item and grantee.
                """
                CREATE TABLE grants (
                    id TEXT PRIMARY KEY,
                    owner_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                    item_id TEXT NOT NULL,
                    grantee_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                    role TEXT NOT NULL,
                    state TEXT NOT NULL,
                    created_at {int} NOT NULL,
                    expires_at {int}
                )
                """,
                "CREATE UNIQUE INDEX grants_item ON grants(owner_id, item_id, grantee_id)",
                "CREATE INDEX grants_grantee ON grants(grantee_id, state)",
                // Where an accepted grant sits in the grantee's tree: a name in one of their folders. The shared item
                // keeps its owner's id; the mount only gives it a place (and its own name) for this user.
                """
                CREATE TABLE mounts (
                    id TEXT PRIMARY KEY,
                    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                    grant_id TEXT NOT NULL UNIQUE,
                    item_id TEXT NOT NULL,
                    parent_id TEXT NOT NULL,
                    name {name} NOT NULL,
                    created_at {int} NOT NULL
                )
                """,
                "CREATE UNIQUE INDEX mounts_name ON mounts(user_id, parent_id, name)",
                "CREATE INDEX mounts_item ON mounts(item_id)",
                // A grantee's feed row for an item of a share they mounted: which mount it reaches them through.
                "ALTER TABLE changes ADD COLUMN mount_id TEXT",
            ]
        ),
        Migration(
            id: "schema-4-links",
            statements: [
                // Public links: found by the SHA-256 of their token (the token itself is never stored; the server
                // derives it from the link id and its secret). A revoked link keeps its row, so it answers 410.
                """
                CREATE TABLE links (
                    id TEXT PRIMARY KEY,
                    owner_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
                    item_id TEXT NOT NULL,
                    token_hash TEXT NOT NULL UNIQUE,
                    access TEXT NOT NULL,
                    password_hash TEXT,
                    expires_at {int},
                    max_downloads {int},
                    downloads {int} NOT NULL DEFAULT 0,
                    created_at {int} NOT NULL,
                    revoked_at {int}
                )
                """,
                "CREATE INDEX links_item ON links(owner_id, item_id)",
            ]
        ),
        Migration(
            id: "schema-5-finding",
            statements: [
                // The name as search compares it: case, accents and width folded (`SearchText.fold`, in Swift, so both
                // databases find the same), compared byte-wise on both. NULL until written (and for a root folder): rows
                // from before it are folded when the store opens.
                "ALTER TABLE files ADD COLUMN search_name {name}",
                // Names that start with a text: a range of this index, in name order, counted from the index alone
                // (one- and two-character searches). Not partial: a partial one on live rows turned SQLite's plan for
                // a batch's name lookups into a scan.
                "CREATE INDEX files_search_prefix ON files(user_id, search_name, trash_root)",
                // A user's stars on items they see (their own, or a share's).
                """
                CREATE TABLE stars (
                    user_id TEXT NOT NULL,
                    file_id TEXT NOT NULL,
                    created_at {int} NOT NULL,
                    PRIMARY KEY (user_id, file_id)
                )
                """,
                "CREATE INDEX stars_file ON stars(file_id)",
                // Who did what to which item, in the tree's owner's history: one row per action a person took (a
                // folder trashed is one row, not one per item in it), with the item's name and kind as they were,
                // so a row outlives its item. `device_id`: the device or app password that did it (NULL: the server).
                """
                CREATE TABLE activity (
                    seq {serial},
                    user_id TEXT NOT NULL,
                    file_id TEXT NOT NULL,
                    action TEXT NOT NULL,
                    at {int} NOT NULL,
                    actor_id TEXT,
                    device_id TEXT,
                    name TEXT NOT NULL,
                    mime_type TEXT NOT NULL,
                    is_folder {int} NOT NULL
                )
                """,
                "CREATE INDEX activity_user ON activity(user_id, seq)",
                "CREATE INDEX activity_actor ON activity(actor_id, seq)",
                "CREATE INDEX activity_file ON activity(file_id)",
                "CREATE INDEX activity_at ON activity(at)",
                // When the user last opened a file (a preview, a download for viewing): with what they changed, "recent".
                """
                CREATE TABLE opened (
                    user_id TEXT NOT NULL,
                    file_id TEXT NOT NULL,
                    at {int} NOT NULL,
                    PRIMARY KEY (user_id, file_id)
                )
                """,
                "CREATE INDEX opened_user ON opened(user_id, at)",
                // Thumbnails, per revision and size: the image (`data`), or NULL when none can be made (the worker
                // failed or the type has none), so a hostile file costs one attempt. Removed with their revision.
                """
                CREATE TABLE thumbnails (
                    revision_id TEXT NOT NULL,
                    size {int} NOT NULL,
                    user_id TEXT NOT NULL,
                    mime_type TEXT,
                    data {bytes},
                    created_at {int} NOT NULL,
                    PRIMARY KEY (revision_id, size)
                )
                """,
            ],
            // SQLite: an FTS5 trigram index over the folded names (substring search of three characters or more),
            // kept by triggers; its rows are `files`' rowids (`files` is never VACUUMed: that renumbers rowids — after
            // one, `INSERT INTO files_search(files_search) VALUES ('rebuild')` makes it whole again).
            sqliteOnly: [
                "CREATE VIRTUAL TABLE files_search USING fts5(search_name, content='files', content_rowid='rowid', tokenize='trigram')",
                """
                CREATE TRIGGER files_search_insert AFTER INSERT ON files WHEN new.search_name IS NOT NULL BEGIN
                    INSERT INTO files_search(rowid, search_name) VALUES (new.rowid, new.search_name);
                END
                """,
                """
                CREATE TRIGGER files_search_delete AFTER DELETE ON files WHEN old.search_name IS NOT NULL BEGIN
                    INSERT INTO files_search(files_search, rowid, search_name) VALUES ('delete', old.rowid, old.search_name);
                END
                """,
                """
                CREATE TRIGGER files_search_update AFTER UPDATE OF search_name ON files BEGIN
                    INSERT INTO files_search(files_search, rowid, search_name) SELECT 'delete', old.rowid, old.search_name WHERE old.search_name IS NOT NULL;
                    INSERT INTO files_search(rowid, search_name) SELECT new.rowid, new.search_name WHERE new.search_name IS NOT NULL;
                END
                """,
            ],
            // PostgreSQL: pg_trgm's GIN index, which serves `LIKE '%text%'` (the extension in `public`, where every
            // schema of the database finds its operator class).
            postgresOnly: [
                "CREATE EXTENSION IF NOT EXISTS pg_trgm SCHEMA public",
                "CREATE INDEX files_search ON files USING gin (search_name public.gin_trgm_ops)",
            ]
        ),
        Migration(
            id: "schema-6-operating",
            statements: [
                // When the operator disabled the account (`nimbus user disable`): sign-in, tokens and app passwords are
                // refused while it is set; the account's data is kept.
                "ALTER TABLE users ADD COLUMN disabled_at {int}",
                // When a read or the scrub found the block's stored bytes no longer hash to its name (bit rot): it is
                // served to no one and reported missing, so the next upload of the same content stores it again.
                "ALTER TABLE blocks ADD COLUMN damaged_at {int}",
                // When a damaged block was stored again (healed), until `nimbus admin verify` or the scrub has said so.
                "ALTER TABLE blocks ADD COLUMN healed_at {int}",
                "CREATE INDEX blocks_damaged ON blocks(user_id) WHERE damaged_at IS NOT NULL",
            ]
        ),
    ]
}
