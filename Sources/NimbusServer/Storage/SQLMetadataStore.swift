import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NimbusAPI

/// ``MetadataStore`` on a ``SQLDatabase``: every domain verb — name clashes, quota, revision retention, trash,
/// login lockout, block accounting — written once, over SQL that SQLite and PostgreSQL both accept. A second
/// back-end is only a ``SQLDatabase`` (a connection and its schema).
///
/// Writers of one user's rows are serialized (``SQLTransaction/lockUser(_:)``; SQLite has one writer), so a
/// check and the change it guards never interleave with another request of the same user.
final class SQLMetadataStore: MetadataStore {
    let database: any SQLDatabase
    let blobs: any BlobStore
    let notifier: any ChangeNotifier
    let revisionRetention: RevisionRetention
    /// Space set aside on the embedded database's disk: given up when a write finds the disk full, so signing in,
    /// deleting and emptying the trash still work on a disk something else filled.
    let reserve: DiskReserve?
    /// When this process first freed blocks (their last reference went) that no sweep has taken yet: the maintenance
    /// service sweeps once they are past the freed-space grace period, instead of waiting for its next full pass.
    let freedSince = NIOLockedValueBox<Date?>(nil)

    init(
        database: any SQLDatabase, blobs: any BlobStore, notifier: any ChangeNotifier, revisionRetention: RevisionRetention,
        reserve: DiskReserve? = nil
    ) {
        self.database = database
        self.blobs = blobs
        self.notifier = notifier
        self.revisionRetention = revisionRetention
        self.reserve = reserve
    }

    /// The embedded store: a SQLite file.
    convenience init(
        path: String, blobs: any BlobStore, notifier: any ChangeNotifier, revisionRetention: RevisionRetention, reserve: DiskReserve? = nil
    ) throws {
        self.init(
            database: try SQLiteDatabase(path: path), blobs: blobs, notifier: notifier, revisionRetention: revisionRetention, reserve: reserve)
    }

    /// Runs one write transaction, then wakes the change-feed listeners of every user it changed.
    /// `user` (when given) is locked first: every write that touches one user's tree names it (other keys that
    /// need their writers serialized, a refresh token or a login key, are locked the same way under a prefix).
    @discardableResult
    func write<T: Sendable>(user: String? = nil, _ body: @escaping @Sendable (any SQLTransaction, inout Effects) throws -> T) async throws -> T {
        let actor = Acting.current?.principal
        let transaction: @Sendable (any SQLTransaction) throws -> (T, Effects) = { db in
            if let user { try db.lockUser(user) }
            var effects = Effects()
            effects.actor = actor
            let value = try body(db, &effects)
            try Self.applyDeferred(db, &effects)
            return (value, effects)
        }
        let value: T
        let effects: Effects
        do {
            (value, effects) = try await database.write(transaction)
        } catch where DiskSpace.isFull(error) && reserve?.release() == true {
            // The disk filled up (not by our uploads: they stop at the reserve). Its reserve file is gone now; once.
            (value, effects) = try await database.write(transaction)
        }
        for (user, seq) in effects.changed {
            notifier.notify(userId: user, seq: seq)
        }
        return value
    }

    /// What a write transaction changed, and the row updates it defers to its end: each user's `last_seq` and
    /// `used_bytes` and each touched folder's version are written once per transaction, not once per file. (A batch
    /// of 1,000 files updating one row 2,000 times left PostgreSQL 2,000 row versions to walk on every later read
    /// of it: quadratic.) Inside a savepoint, work on a copy and keep it only if the savepoint is kept.
    struct Effects: Sendable {
        /// User → the newest change-feed sequence this transaction wrote (read at its end: 0 until then).
        var changed: [String: Int64] = [:]
        /// User → the last of the user's own change numbers this transaction handed out (`users.change_count`).
        var userSeqs: [String: Int64] = [:]
        /// User → bytes charged (+) or freed (−) by blocks this transaction adopted or orphaned.
        var usedBytes: [String: Int64] = [:]
        /// Folders whose listing changed: their version (`ETag`) moves once at the end.
        var touchedFolders: Set<String> = []
        /// Files this transaction recorded a change of: their folders, and every folder above, get a new tree version
        /// (the WebDAV collection `ETag`, which moves whenever anything beneath it does) once at the end.
        var changedFiles: Set<String> = []
        /// Files made by this transaction that have no revision and no change-feed row yet (their first change row
        /// takes them out: a batch may give one new file a second revision).
        var inserted: Set<String> = []
        /// New files whose row is written with their first revision (one INSERT, head included): id → requestId.
        var unplaced: [String: Unplaced] = [:]
        /// User → quota limit and `used_bytes` as stored, read once per transaction (neither column is written
        /// before ``applyDeferred(_:_:)``).
        var quota: [String: Quota] = [:]
        /// Folders a content commit found live in this transaction. Content commits never trash, move or delete a
        /// folder, so one a batch entry checked stays live for the next entry in the same folder.
        var liveFolders: [String: FileRecord] = [:]
        /// Owner → whether any of their grants is accepted (their changes then reach grantees' feeds), read once.
        var sharing: [String: Bool] = [:]
        /// What a batch read up front, kept up to date by its own commits (a key not here: ask the database). Only
        /// content commits run while these are set; whatever else changes a name, a request id or a block's state
        /// in the same transaction must forget the key.
        var knownChildren: [ChildKey: Known<FileRecord>] = [:]
        var knownRequests: [String: Known<FileRecord>] = [:]
        var knownBlocks: [String: BlockState] = [:]
        /// Who the transaction acts for (the request's principal; nil: the server itself), for the activity history.
        var actor: Principal?
        /// What the transaction did, a row each for the activity history (an item's first action in it only).
        var activity: [ActivityNote] = []
        /// The items `activity` has a row for.
        var noted: Set<String> = []
    }

    /// One action for the activity history, written at the end of the transaction.
    struct ActivityNote: Sendable {
        var ownerId: String
        var fileId: String
        var action: ActivityEvent.Action
        var name: String
        var mimeType: String
        var isFolder: Bool
        var at: Date
    }

    /// Notes `action` on `file` for the activity history, unless the transaction noted the item already (restoring a
    /// version commits a revision: the history says "restored a version", not "edited").
    static func noteActivity(_ effects: inout Effects, _ action: ActivityEvent.Action, _ file: FileRecord, at now: Date) {
        guard effects.noted.insert(file.id).inserted else { return }
        effects.activity.append(
            ActivityNote(
                ownerId: file.userId, fileId: file.id, action: action, name: file.name, mimeType: file.mimeType, isFolder: file.isFolder, at: now))
    }

    struct ChildKey: Hashable, Sendable {
        var parentId: String
        var name: String
    }

    enum Known<Value: Sendable>: Sendable {
        case absent
        case present(Value)
    }

    enum BlockState: Sendable {
        case missing, orphaned, live
    }

    struct Unplaced: Sendable {
        var requestId: String?
    }

    struct Quota: Sendable {
        var limit: Int64?
        var used: Int64
    }

    /// Writes what ``Effects`` deferred (and reads each changed user's newest sequence number into
    /// `effects.changed`), then tells other processes about the new changes.
    static func applyDeferred(_ db: any SQLTransaction, _ effects: inout Effects) throws {
        guard effects.unplaced.isEmpty else { throw DriveError.internalError("A new file was never written.") }
        for userId in Set(effects.changed.keys).union(effects.usedBytes.keys).sorted() {
            let delta = effects.usedBytes[userId] ?? 0
            if effects.changed[userId] != nil {
                // The change rows this transaction added are the user's newest: the sequence hands out growing numbers.
                effects.changed[userId] =
                    try db.value(
                        """
                        UPDATE users SET last_seq = COALESCE((SELECT MAX(seq) FROM changes WHERE user_id = ?), last_seq),
                            used_bytes = CASE WHEN used_bytes + ? > 0 THEN used_bytes + ? ELSE 0 END,
                            change_count = CASE WHEN ? > change_count THEN ? ELSE change_count END
                        WHERE id = ? RETURNING last_seq
                        """, [userId, delta, delta, effects.userSeqs[userId] ?? 0, effects.userSeqs[userId] ?? 0, userId], as: Int64.self) ?? 0
            } else {
                try db.perform(
                    "UPDATE users SET used_bytes = CASE WHEN used_bytes + ? > 0 THEN used_bytes + ? ELSE 0 END WHERE id = ?",
                    [delta, delta, userId])
            }
        }
        for folderId in effects.touchedFolders.sorted() {
            try db.perform("UPDATE files SET version = version + 1 WHERE id = ?", [folderId])
        }
        try bumpTreeVersions(db, effects)
        // Someone with a public link has no account: the row names the link (as its device), and no user.
        let actorId = effects.actor.flatMap { $0.deviceId.hasPrefix(Principal.linkPrefix) ? nil : $0.userId }
        for note in effects.activity {
            try db.insert(
                into: "activity", ["user_id", "file_id", "action", "at", "actor_id", "device_id", "name", "mime_type", "is_folder"],
                [
                    note.ownerId, note.fileId, note.action.rawValue, note.at.millis, actorId, effects.actor?.deviceId, note.name, note.mimeType,
                    note.isFolder,
                ])
        }
        for (userId, seq) in effects.changed { try db.announce(userId: userId, seq: seq) }
    }
}

// MARK: - Transaction helpers (run inside a write or read)

let emptyChecksum = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

extension SQLMetadataStore {
    /// Appends a change-feed row for a file, replacing the file's older rows (the feed carries the latest state), and
    /// one for each grantee who sees it through a mount (``recordForGrantees(_:_:ownerId:fileId:kind:now:formerParent:)``;
    /// `formerParent`: where a move took it from). `mountId`: the row is a grantee's, for an item of the share mounted so.
    static func recordChange(
        _ db: any SQLTransaction, _ effects: inout Effects, userId: String, fileId: String, kind: Change.Kind, now: Date, mountId: String? = nil,
        formerParent: String? = nil
    ) throws {
        // A file made by this transaction has no change row yet; once it has one, it is like any other.
        if effects.inserted.remove(fileId) == nil {
            try db.perform("DELETE FROM changes WHERE user_id = ? AND file_id = ?", [userId, fileId])
        }
        // The user's own numbering (what the API shows as `seq`): counted here, written to users.change_count once at
        // the end of the transaction (applyDeferred), like last_seq.
        let userSeq: Int64
        if let last = effects.userSeqs[userId] {
            userSeq = last + 1
        } else {
            userSeq = (try db.value("SELECT change_count FROM users WHERE id = ?", [userId], as: Int64.self) ?? 0) + 1
        }
        effects.userSeqs[userId] = userSeq
        effects.changedFiles.insert(fileId)
        try db.insert(into: "changes", ["user_id", "file_id", "kind", "at", "user_seq", "mount_id"], [userId, fileId, kind.rawValue, now.millis, userSeq, mountId])
        effects.changed[userId] = 0  // the sequence number, and users.last_seq, at the end (applyDeferred)
        if mountId == nil {
            try recordForGrantees(db, &effects, ownerId: userId, fileId: fileId, kind: kind, now: now, formerParent: formerParent)
        }
    }

    static func file(_ db: any SQLTransaction, id: String, userId: String) throws -> FileRecord {
        guard let found = try existingFile(db, id: id, userId: userId) else { throw DriveError.notFound() }
        return found
    }

    /// The user's item with this id, or `nil` (a database error is thrown, never taken for "no such item").
    static func existingFile(_ db: any SQLTransaction, id: String, userId: String) throws -> FileRecord? {
        try db.fetchOne("SELECT * FROM files WHERE id = ? AND user_id = ?", [id, userId]).map(file)
    }

    /// A folder that can receive items: exists, is this user's, is a folder, is not trashed.
    static func liveFolder(_ db: any SQLTransaction, id: String, userId: String) throws -> FileRecord {
        guard let folder = try existingFile(db, id: id, userId: userId) else {
            throw DriveError.notFound("No such parent folder.")
        }
        guard folder.isFolder else { throw DriveError.badRequest("'\(folder.name)' is a file, not a folder.", code: .notAFolder) }
        guard !folder.isTrashed else { throw DriveError.badRequest("The folder '\(folder.name)' is in the trash.", code: .trashed) }
        return folder
    }

    /// The live item holding `name` in the folder: one of the user's, or a share mounted there (``mountedFile(_:)``).
    static func liveChild(_ db: any SQLTransaction, parentId: String, name: String, userId: String) throws -> FileRecord? {
        if let own = try db.fetchOne("SELECT * FROM files WHERE user_id = ? AND parent_id = ? AND name = ? AND trash_root IS NULL", [userId, parentId, name]) {
            return try file(own)
        }
        return try db.fetchOne(
            "SELECT \(mountColumns) FROM mounts m JOIN files f ON f.id = m.item_id WHERE m.user_id = ? AND m.parent_id = ? AND m.name = ?",
            [userId, parentId, name]
        ).map(mountedFile)
    }

    /// The first of `name (1).ext`, `name (2).ext`, ... that is free in the folder.
    static func freeName(_ db: any SQLTransaction, parentId: String, name: String, userId: String) throws -> String {
        try NameClashRule.freeName(for: name) { try liveChild(db, parentId: parentId, name: $0, userId: userId) != nil }
    }

    /// The ids of a folder and everything under it (trashed or not), root first.
    static func subtree(_ db: any SQLTransaction, rootId: String) throws -> [String] {
        try db.values("""
                WITH RECURSIVE tree(id) AS (
                    SELECT id FROM files WHERE id = ?
                    UNION ALL SELECT f.id FROM files f JOIN tree t ON f.parent_id = t.id
                ) SELECT id FROM tree
                """, [rootId], as: String.self)
    }

    /// Moves the tree version of every folder holding something this transaction changed, up to the user's root,
    /// each folder once (per 500 starting folders; a second bump is harmless): a WebDAV client that finds a collection's `ETag` unchanged can skip its whole subtree
    /// (as Nextcloud's and ownCloud's clients do). Folders a move or a deletion left are in `touchedFolders`.
    static func bumpTreeVersions(_ db: any SQLTransaction, _ effects: Effects) throws {
        guard !effects.changedFiles.isEmpty || !effects.touchedFolders.isEmpty else { return }
        var start = effects.touchedFolders
        for row in try fetchAll(db, "SELECT DISTINCT parent_id FROM files WHERE parent_id IS NOT NULL AND id IN", [], effects.changedFiles.sorted()) {
            start.insert(try row.get("parent_id", as: String.self))
        }
        let folders = start.sorted()
        for first in stride(from: 0, to: folders.count, by: 500) {
            let part = Array(folders[first..<min(first + 500, folders.count)])
            try db.perform(
                """
                WITH RECURSIVE up(id) AS (
                    SELECT id FROM files WHERE id IN (\(sqlPlaceholders(part.count)))
                    UNION SELECT f.parent_id FROM files f JOIN up ON f.id = up.id WHERE f.parent_id IS NOT NULL
                ) UPDATE files SET tree_version = tree_version + 1 WHERE id IN (SELECT id FROM up)
                """, part)
        }
    }

    /// A folder's metadata version moves when its listing changes (its `ETag`).
    static func touchFolder(_ effects: inout Effects, _ id: String) {
        effects.touchedFolders.insert(id)
    }

    // MARK: Row mapping

    static func user(_ row: SQLRow) throws -> UserRecord {
        UserRecord(
            id: try row.get("id"), username: try row.get("username"), passwordHash: try row.get("password_hash"), quotaLimit: try row.get("quota_limit"),
            usedBytes: try row.get("used_bytes"), rootId: try row.get("root_id"), createdAt: Date(millis: try row.get("created_at")),
            disabledAt: (try row.get("disabled_at", as: Int64?.self)).map(Date.init(millis:)))
    }

    static func device(_ row: SQLRow) throws -> DeviceRecord {
        DeviceRecord(
            id: try row.get("id"), userId: try row.get("user_id"), name: try row.get("name"), refreshHash: try row.get("refresh_hash"),
            lastUsedAt: Date(millis: try row.get("last_used_at")), revokedAt: (try row.get("revoked_at", as: Int64?.self)).map(Date.init(millis:)),
            userDisabled: try row.has("user_disabled_at") && row.get("user_disabled_at", as: Int64?.self) != nil)
    }

    static func file(_ row: SQLRow) throws -> FileRecord {
        FileRecord(
            id: try row.get("id"), userId: try row.get("user_id"), parentId: try row.get("parent_id"), name: try row.get("name"), mimeType: try row.get("mime_type"),
            isFolder: try row.get("is_folder"), size: try row.get("size"), checksum: try row.get("checksum"), headRevisionId: try row.get("head_revision_id"),
            version: try row.get("version"), treeVersion: try row.get("tree_version"), trashRoot: try row.get("trash_root"), trashedAt: (try row.get("trashed_at", as: Int64?.self)).map(Date.init(millis:)),
            createdAt: Date(millis: try row.get("created_at")), modifiedAt: Date(millis: try row.get("modified_at")))
    }

    /// The columns ``mountedFile(_:)`` reads: a shared item (`f`) and its mount (`m`).
    static let mountColumns = "f.*, m.id AS m_id, m.parent_id AS m_parent_id, m.name AS m_name"

    /// A share's root as its grantee sees it: the owner's item, under the mount's name and in the mount's folder.
    static func mountedFile(_ row: SQLRow) throws -> FileRecord {
        var record = try file(row)
        record.mountId = try row.get("m_id")
        record.parentId = try row.get("m_parent_id")
        record.name = try row.get("m_name")
        return record
    }

    static func revision(_ row: SQLRow) throws -> RevisionRecord {
        RevisionRecord(
            id: try row.get("id"), fileId: try row.get("file_id"), userId: try row.get("user_id"), mimeType: try row.get("mime_type"), size: try row.get("size"),
            checksum: try row.get("checksum"), createdAt: Date(millis: try row.get("created_at")))
    }
}

extension Date {
    var millis: Int64 { Int64((timeIntervalSince1970 * 1000).rounded()) }
    init(millis: Int64) { self.init(timeIntervalSince1970: TimeInterval(millis) / 1000) }
}

extension SQLMetadataStore {
    var unsweptFreeingSince: Date? { freedSince.withLockedValue { $0 } }
}
