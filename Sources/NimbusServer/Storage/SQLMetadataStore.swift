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
        let transaction: @Sendable (any SQLTransaction) throws -> (T, Effects) = { db in
            if let user { try db.lockUser(user) }
            var effects = Effects()
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
        /// What a batch read up front, kept up to date by its own commits (a key not here: ask the database). Only
        /// content commits run while these are set; whatever else changes a name, a request id or a block's state
        /// in the same transaction must forget the key.
        var knownChildren: [ChildKey: Known<FileRecord>] = [:]
        var knownRequests: [String: Known<FileRecord>] = [:]
        var knownBlocks: [String: BlockState] = [:]
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
        for (userId, seq) in effects.changed { try db.announce(userId: userId, seq: seq) }
    }

    // MARK: Users and devices

    func createUser(username: String, passwordHash: String, quota: Int64?, now: Date) async throws -> UserRecord {
        try await write { db, effects in
            if try db.fetchOne("SELECT 1 FROM users WHERE username = ?", [username]) != nil {
                throw DriveError.conflict("The username '\(username)' is taken.", code: .usernameTaken)
            }
            let user = UserRecord(
                id: "u" + randomToken(), username: username, passwordHash: passwordHash, quotaLimit: quota, usedBytes: 0,
                rootId: "f" + randomToken(), createdAt: now)
            try db.perform("INSERT INTO users (id, username, password_hash, quota_limit, root_id, created_at) VALUES (?, ?, ?, ?, ?, ?)", [user.id, username, passwordHash, quota, user.rootId, now.millis])
            try db.perform("""
                    INSERT INTO files (id, user_id, parent_id, name, mime_type, is_folder, created_at, modified_at)
                    VALUES (?, ?, NULL, 'My Drive', ?, 1, ?, ?)
                    """, [user.rootId, user.id, folderMimeType, now.millis, now.millis])
            try Self.recordChange(db, &effects, userId: user.id, fileId: user.rootId, kind: .upsert, now: now)
            return user
        }
    }

    func user(id: String) async throws -> UserRecord? {
        try await database.read { db in
            try db.fetchOne("SELECT * FROM users WHERE id = ?", [id]).map(Self.user)
        }
    }

    func user(username: String) async throws -> UserRecord? {
        try await database.read { db in
            try db.fetchOne("SELECT * FROM users WHERE username = ?", [username]).map(Self.user)
        }
    }

    func setQuota(userId: String, quota: Int64?) async throws {
        try await write(user: userId) { db, _ in
            try db.perform("UPDATE users SET quota_limit = ? WHERE id = ?", [quota, userId])
        }
    }

    func setPassword(userId: String, passwordHash: String) async throws {
        try await write(user: userId) { db, _ in
            try db.perform("UPDATE users SET password_hash = ? WHERE id = ?", [passwordHash, userId])
            try db.perform("UPDATE devices SET revoked_at = ? WHERE user_id = ? AND revoked_at IS NULL", [Date().millis, userId])
            // A new password is a fresh start: app passwords made with the old one go too.
            try db.perform("DELETE FROM app_passwords WHERE user_id = ?", [userId])
        }
    }

    func createDevice(userId: String, name: String, refreshHash: String, now: Date) async throws -> DeviceRecord {
        try await write(user: userId) { db, _ in
            let device = DeviceRecord(id: "d" + randomToken(), userId: userId, name: name, refreshHash: refreshHash, lastUsedAt: now, revokedAt: nil)
            try db.perform("INSERT INTO devices (id, user_id, name, refresh_hash, created_at, last_used_at) VALUES (?, ?, ?, ?, ?, ?)", [device.id, userId, name, refreshHash, now.millis, now.millis])
            return device
        }
    }

    func device(id: String) async throws -> DeviceRecord? {
        try await database.read { db in
            try db.fetchOne("SELECT * FROM devices WHERE id = ?", [id]).map(Self.device)
        }
    }

    func rotateRefreshToken(presentedHash: String, newHash: String, now: Date, maxIdle: TimeInterval, grace: TimeInterval) async throws -> DeviceRecord {
        // Locked on the token: two replicas refreshing the same token at once serialize, so the second sees it
        // rotated away (a replay) exactly as on one replica.
        let rotated = try await write(user: "refresh:" + presentedHash) { db, _ -> DeviceRecord? in
            if let row = try db.fetchOne("SELECT * FROM devices WHERE refresh_hash = ?", [presentedHash]) {
                var device = try Self.device(row)
                guard device.revokedAt == nil else { throw DriveError.unauthorized("This device was signed out; log in again.") }
                guard now.timeIntervalSince(device.lastUsedAt) <= maxIdle else {
                    throw DriveError.unauthorized("The refresh token expired; log in again.")
                }
                try db.perform("UPDATE devices SET previous_refresh_hash = refresh_hash, refresh_hash = ?, last_used_at = ? WHERE id = ?", [newHash, now.millis, device.id])
                device.refreshHash = newHash
                device.lastUsedAt = now
                return device
            }
            if let row = try db.fetchOne("SELECT * FROM devices WHERE previous_refresh_hash = ?", [presentedHash]) {
                let device = try Self.device(row)
                // The same exchange retried moments later (its answer lost, or refreshes racing): the successor it
                // asks for is still the current token, so it gets that token again.
                if device.revokedAt == nil, device.refreshHash == newHash, now.timeIntervalSince(device.lastUsedAt) <= grace {
                    return device
                }
                // A token that was already exchanged is being replayed: someone else has it. Sign the device out.
                let id = device.id
                try db.perform("UPDATE devices SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", [now.millis, id])
                return nil as DeviceRecord?
            }
            throw DriveError.unauthorized("Unknown refresh token; log in again.")
        }
        // Thrown after the transaction so that the revocation above is committed.
        guard let device = rotated else {
            throw DriveError.unauthorized("This refresh token was already used, so the device has been signed out; log in again.")
        }
        return device
    }

    func revokeDevice(id: String, now: Date) async throws {
        try await write { db, _ in
            try db.perform("UPDATE devices SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", [now.millis, id])
        }
    }

    func loginLockout(key: String, now: Date) async throws -> Int? {
        try await database.read { db in
            guard let row = try db.fetchOne("SELECT locked_until FROM login_failures WHERE key = ?", [key]),
                let until = try row.get("locked_until", as: Int64?.self)
            else { return nil }
            let remaining = until - now.millis
            return remaining > 0 ? Int((remaining + 999) / 1000) : nil
        }
    }

    func recordLoginFailure(key: String, now: Date, allowed: Int, lockout: TimeInterval) async throws {
        // Locked on the key: failures counted by several replicas at once all count.
        try await write(user: "login:" + key) { db, _ in
            let window: Int64 = 15 * 60 * 1000
            let row = try db.fetchOne("SELECT failures, window_start FROM login_failures WHERE key = ?", [key])
            var failures = 1
            var windowStart = now.millis
            if let row, now.millis - (try row.get("window_start", as: Int64.self)) < window {
                failures = (try row.get("failures", as: Int.self)) + 1
                windowStart = try row.get("window_start")
            }
            // Each failure past the allowance doubles the lock (capped at an hour).
            var lockedUntil: Int64?
            if failures >= allowed {
                let factor = Double(1 << min(failures - allowed, 6))
                lockedUntil = now.millis + Int64(min(lockout * factor, 3600) * 1000)
            }
            try db.perform("""
                    INSERT INTO login_failures (key, failures, window_start, locked_until) VALUES (?, ?, ?, ?)
                    ON CONFLICT (key) DO UPDATE SET failures = excluded.failures, window_start = excluded.window_start,
                    locked_until = excluded.locked_until
                    """, [key, failures, windowStart, lockedUntil])
        }
    }

    func clearLoginFailures(key: String) async throws {
        try await write { db, _ in
            try db.perform("DELETE FROM login_failures WHERE key = ?", [key])
        }
    }

    func deadProperties(userId: String, fileIds: [String]) async throws -> [String: [DeadProperty]] {
        guard !fileIds.isEmpty else { return [:] }
        return try await database.read { db in
            var result: [String: [DeadProperty]] = [:]
            for start in stride(from: 0, to: fileIds.count, by: 500) {
                let slice = Array(fileIds[start..<min(start + 500, fileIds.count)])
                let marks = Array(repeating: "?", count: slice.count).joined(separator: ", ")
                let rows = try db.fetchAll(
                    "SELECT file_id, namespace, name, value FROM dav_properties WHERE user_id = ? AND file_id IN (\(marks)) ORDER BY namespace, name",
                    [userId] + slice)
                for row in rows {
                    result[try row.get("file_id"), default: []].append(
                        DeadProperty(namespace: try row.get("namespace"), name: try row.get("name"), value: try row.get("value")))
                }
            }
            return result
        }
    }

    func patchDeadProperties(userId: String, fileId: String, set: [DeadProperty], remove: [DeadProperty]) async throws {
        try await write(user: userId) { db, _ in
            _ = try Self.file(db, id: fileId, userId: userId)
            for property in remove {
                try db.perform("DELETE FROM dav_properties WHERE file_id = ? AND namespace = ? AND name = ?", [fileId, property.namespace, property.name])
            }
            for property in set {
                try db.perform("""
                    INSERT INTO dav_properties (user_id, file_id, namespace, name, value) VALUES (?, ?, ?, ?, ?)
                    ON CONFLICT (file_id, namespace, name) DO UPDATE SET value = excluded.value
                    """, [userId, fileId, property.namespace, property.name, property.value])
            }
            let count = try db.value("SELECT COUNT(*) FROM dav_properties WHERE file_id = ?", [fileId], as: Int64.self) ?? 0
            guard count <= Self.deadPropertyLimit else {
                throw DriveError.tooLarge("An item keeps at most \(Self.deadPropertyLimit) properties; nothing was changed.")
            }
        }
    }

    static let deadPropertyLimit = 200

    func davLocks(userId: String, now: Date) async throws -> [DAVLock] {
        try await database.read { db in
            try db.fetchAll("SELECT * FROM dav_locks WHERE user_id = ? AND expires_at > ?", [userId, now.millis]).map(Self.davLock)
        }
    }

    func acquireDAVLock(_ lock: DAVLock, now: Date) async throws -> Bool {
        try await write(user: lock.userId) { db, _ in
            try db.perform("DELETE FROM dav_locks WHERE user_id = ? AND expires_at <= ?", [lock.userId, now.millis])
            let held = try db.fetchAll("SELECT * FROM dav_locks WHERE user_id = ?", [lock.userId]).map(Self.davLock)
            let conflicting = held.contains { other in
                (other.exclusive || lock.exclusive) && (other.covers(lock.path) || lock.covers(other.path))
            }
            guard !conflicting else { return false }
            guard held.count < 10_000 else { throw DriveError.conflict("This account holds 10,000 WebDAV locks; unlock some first.") }
            try db.perform(
                "INSERT INTO dav_locks (token, user_id, path, infinite, exclusive, owner, timeout_seconds, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [lock.token, lock.userId, lock.path, lock.infinite, lock.exclusive, lock.owner, lock.timeoutSeconds, lock.expiresAt.millis])
            return true
        }
    }

    func refreshDAVLock(userId: String, token: String, now: Date) async throws -> DAVLock? {
        try await write(user: userId) { db, _ in
            guard var lock = try db.fetchOne("SELECT * FROM dav_locks WHERE token = ? AND user_id = ? AND expires_at > ?", [token, userId, now.millis])
                .map(Self.davLock)
            else { return nil }
            lock.expiresAt = now.addingTimeInterval(TimeInterval(lock.timeoutSeconds))
            try db.perform("UPDATE dav_locks SET expires_at = ? WHERE token = ?", [lock.expiresAt.millis, token])
            return lock
        }
    }

    @discardableResult
    func releaseDAVLocks(userId: String, tokens: [String]) async throws -> Int {
        guard !tokens.isEmpty else { return 0 }
        return try await write(user: userId) { db, _ in
            var count = 0
            for token in tokens { count += try db.execute("DELETE FROM dav_locks WHERE token = ? AND user_id = ?", [token, userId]) }
            return count
        }
    }

    static func davLock(_ row: SQLRow) throws -> DAVLock {
        DAVLock(
            token: try row.get("token"), userId: try row.get("user_id"), path: try row.get("path"), infinite: try row.get("infinite"),
            exclusive: try row.get("exclusive"), owner: try row.get("owner"), timeoutSeconds: try row.get("timeout_seconds"),
            expiresAt: Date(millis: try row.get("expires_at")))
    }

    static let appPasswordLimit = 100

    func createAppPassword(userId: String, label: String, passwordHash: String, now: Date) async throws -> AppPasswordRecord {
        try await write(user: userId) { db, _ in
            let count = try db.value("SELECT COUNT(*) FROM app_passwords WHERE user_id = ?", [userId], as: Int64.self) ?? 0
            guard count < Self.appPasswordLimit else {
                throw DriveError.conflict("This account has \(Self.appPasswordLimit) app passwords; revoke one you no longer use first.")
            }
            let record = AppPasswordRecord(id: "ap" + randomToken(), userId: userId, label: label, passwordHash: passwordHash, createdAt: now)
            try db.perform(
                "INSERT INTO app_passwords (id, user_id, label, password_hash, created_at) VALUES (?, ?, ?, ?, ?)",
                [record.id, userId, label, passwordHash, now.millis])
            return record
        }
    }

    func appPasswords(userId: String) async throws -> [AppPasswordRecord] {
        try await database.read { db in
            try db.fetchAll("SELECT * FROM app_passwords WHERE user_id = ? ORDER BY created_at DESC, id", [userId]).map(Self.appPassword)
        }
    }

    func revokeAppPassword(userId: String, id: String) async throws {
        try await write(user: userId) { db, _ in
            guard try db.execute("DELETE FROM app_passwords WHERE id = ? AND user_id = ?", [id, userId]) > 0 else {
                throw DriveError.notFound("No such app password.")
            }
        }
    }

    func useAppPassword(passwordHash: String, now: Date) async throws -> AppPasswordRecord? {
        guard var record = try await database.read({ db in
            try db.fetchOne("SELECT * FROM app_passwords WHERE password_hash = ?", [passwordHash]).map(Self.appPassword)
        }) else { return nil }
        // Written at most once a minute: a WebDAV client signs every request.
        if record.lastUsedAt.map({ now.timeIntervalSince($0) >= 60 }) ?? true {
            let id = record.id
            try await write(user: record.userId) { db, _ in
                try db.perform("UPDATE app_passwords SET last_used_at = ? WHERE id = ?", [now.millis, id])
            }
            record.lastUsedAt = now
        }
        return record
    }

    static func appPassword(_ row: SQLRow) throws -> AppPasswordRecord {
        AppPasswordRecord(
            id: try row.get("id"), userId: try row.get("user_id"), label: try row.get("label"), passwordHash: try row.get("password_hash"),
            createdAt: Date(millis: try row.get("created_at")), lastUsedAt: (try row.get("last_used_at", as: Int64?.self)).map(Date.init(millis:)))
    }

    func sharedSetting(_ key: String, orStore value: String) async throws -> String {
        try await write { db, _ in
            try db.perform("INSERT INTO settings (key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING", [key, value])
            return try db.value("SELECT value FROM settings WHERE key = ?", [key], as: String.self) ?? value
        }
    }

    // MARK: Files and folders

    func item(id: String) async throws -> FileRecord? {
        try await database.read { db in try db.fetchOne("SELECT * FROM files WHERE id = ?", [id]).map(Self.file) }
    }

    func file(id: String, userId: String) async throws -> FileRecord {
        try await database.read { db in try Self.file(db, id: id, userId: userId) }
    }

    func children(of parentId: String, userId: String, paging: Paging) async throws -> (files: [FileRecord], total: Int) {
        try await database.read { db in
            let parent = try Self.file(db, id: parentId, userId: userId)
            guard parent.isFolder else { throw DriveError.badRequest("'\(parent.name)' is a file, not a folder.", code: .notAFolder) }
            // Inside a trashed folder, list what went to the trash with it; elsewhere, only live items.
            let trashFilter = parent.isTrashed ? "trash_root IS NOT NULL" : "trash_root IS NULL"
            try db.preferIndexOrder()
            let total = try db.value("SELECT COUNT(*) FROM files WHERE parent_id = ? AND user_id = ? AND \(trashFilter)", [parentId, userId], as: Int.self) ?? 0
            let rows = try db.fetchAll("""
                    SELECT * FROM files WHERE parent_id = ? AND user_id = ? AND \(trashFilter)
                    ORDER BY is_folder DESC, name ASC LIMIT ? OFFSET ?
                    """, [parentId, userId, paging.limit, paging.offset])
            return (try rows.map(Self.file), total)
        }
    }

    func child(named name: String, in parentId: String, userId: String) async throws -> FileRecord? {
        try await database.read { db in
            try db.fetchOne("SELECT * FROM files WHERE parent_id = ? AND user_id = ? AND name = ? AND trash_root IS NULL", [parentId, userId, name])
                .map(Self.file)
        }
    }

    func trashed(userId: String, paging: Paging) async throws -> (files: [FileRecord], total: Int) {
        try await database.read { db in
            let total = try db.value("SELECT COUNT(*) FROM files WHERE user_id = ? AND trash_root = id", [userId], as: Int.self) ?? 0
            let rows = try db.fetchAll("SELECT * FROM files WHERE user_id = ? AND trash_root = id ORDER BY trashed_at DESC, name ASC LIMIT ? OFFSET ?", [userId, paging.limit, paging.offset])
            return (try rows.map(Self.file), total)
        }
    }

    func create(
        userId: String, parentId: String, name: String, mimeType: String, policy: ConflictPolicy, requestId: String?,
        now: Date
    ) async throws -> (file: FileRecord, created: Bool) {
        try await write(user: userId) { db, effects in
            try self.create(db, &effects, userId: userId, parentId: parentId, name: name, mimeType: mimeType, policy: policy, requestId: requestId, now: now)
        }
    }

    /// A folder or an empty file in a transaction (see ``create(userId:parentId:name:mimeType:policy:requestId:now:)``).
    func create(
        _ db: any SQLTransaction, _ effects: inout Effects, userId: String, parentId: String, name: String, mimeType: String, policy: ConflictPolicy,
        requestId: String?, now: Date
    ) throws -> (file: FileRecord, created: Bool) {
        let isFolder = mimeType == folderMimeType
        if let earlier = try Self.fileMade(db, by: requestId, userId: userId) {
            // A retry answers with what the request made; a requestId that made something else (a file, for
            // a folder; content, for an empty file) was reused: 409, as uploads answer.
            guard earlier.isFolder == isFolder else {
                throw DriveError.requestIdReused(
                    "This requestId already made a \(earlier.isFolder ? "folder" : "file") (id \(earlier.id)); use a new requestId.",
                    existingId: earlier.id)
            }
            if !isFolder, let made = try Self.retried(db, requestId, userId: userId, checksum: emptyChecksum, known: .present(earlier)) {
                return (made, false)
            }
            return (earlier, false)
        }
        let parent = try Self.liveFolder(db, id: parentId, userId: userId)
        var finalName = name
        let existing = try Self.liveChild(db, parentId: parent.id, name: name, userId: userId)
        switch try NameClashRule.resolve(name, held: existing, policy: policy, isFolder: isFolder) {
        case .free: break
        case .renamed: finalName = try Self.freeName(db, parentId: parent.id, name: name, userId: userId)
        case .replace(let existing):
            let file = try self.commitRevision(
                db, &effects, file: existing, blocks: [], checksum: emptyChecksum, size: 0, mimeType: mimeType, now: now)
            return (file, true)
        }
        var file: FileRecord
        if !isFolder {
            file = Self.newFile(&effects, userId: userId, parentId: parent.id, name: finalName, mimeType: mimeType, requestId: requestId, now: now)
            file = try self.commitRevision(db, &effects, file: file, blocks: [], checksum: emptyChecksum, size: 0, mimeType: mimeType, now: now)
        } else {
            file = try Self.insertFile(
                db, &effects, userId: userId, parentId: parent.id, name: finalName, mimeType: mimeType, isFolder: true, requestId: requestId, now: now)
            try Self.recordChange(db, &effects, userId: userId, fileId: file.id, kind: .upsert, now: now)
        }
        Self.touchFolder(&effects, parent.id)
        return (file, true)
    }

    /// WebDAV's `COPY` in one transaction: `sourceId` (with what it holds, when `deep`) copied as `name` into `parentId`.
    /// The copy shares the source's blocks (nothing is read or stored again) and takes its dead properties. Onto a file
    /// (`replacing`, the source a file too) the copy is a new revision of that file, so its history stays; onto anything
    /// else the item there goes to the trash first (`deleter` held to the breaker). All of it happens, or none.
    func copy(
        userId: String, sourceId: String, parentId: String, name: String, replacing existingId: String?, deep: Bool, now: Date, by deleter: Deleter?
    ) async throws -> FileRecord {
        try await write(user: userId) { db, effects -> Guarded<FileRecord> in
            let source = try Self.file(db, id: sourceId, userId: userId)
            var over: FileRecord?
            if let existingId {
                let existing = try Self.file(db, id: existingId, userId: userId)
                if existing.isFolder || source.isFolder {
                    if case .paused(let message) = try self.trash(db, &effects, userId: userId, fileId: existing.id, now: now, by: deleter) {
                        return .paused(message)
                    }
                } else {
                    over = existing
                }
            }
            return .done(try self.copy(db, &effects, userId: userId, source: source, parentId: parentId, name: name, over: over, deep: deep, now: now))
        }.get()
    }

    func copy(
        _ db: any SQLTransaction, _ effects: inout Effects, userId: String, source: FileRecord, parentId: String, name: String, over existing: FileRecord?,
        deep: Bool, now: Date
    ) throws -> FileRecord {
        let copied: FileRecord
        if source.isFolder {
            copied = try create(db, &effects, userId: userId, parentId: parentId, name: name, mimeType: folderMimeType, policy: .fail, requestId: nil, now: now).file
        } else if let revisionId = source.headRevisionId {
            guard let row = try db.fetchOne("SELECT * FROM revisions WHERE id = ? AND user_id = ?", [revisionId, userId]) else {
                throw DriveError.notFound("No such revision.")
            }
            let revision = try Self.revision(row)
            let blocks = try Self.blocks(db, ofRevision: revision.id)
            let content = StagedContent(
                blocks: blocks.map { StagedBlock(ref: BlockRef(hash: $0.hash, size: $0.size), path: "", data: $0.inline) },
                checksum: revision.checksum, size: revision.size, mimeType: revision.mimeType)
            let target: ContentTarget = existing.map { .existing(fileId: $0.id, ifMatch: nil) } ?? .new(parentId: parentId, name: name, policy: .fail)
            copied = try commit(db, &effects, userId: userId, target: target, content: content, now: now).file
        } else {
            copied = try create(db, &effects, userId: userId, parentId: parentId, name: name, mimeType: source.mimeType, policy: .fail, requestId: nil, now: now).file
        }
        try db.perform(
            """
            INSERT INTO dav_properties (user_id, file_id, namespace, name, value)
            SELECT user_id, ?, namespace, name, value FROM dav_properties WHERE file_id = ?
            ON CONFLICT (file_id, namespace, name) DO UPDATE SET value = excluded.value
            """, [copied.id, source.id])
        guard source.isFolder, deep else { return copied }
        let children = try db.fetchAll("SELECT * FROM files WHERE parent_id = ? AND user_id = ? AND trash_root IS NULL ORDER BY name", [source.id, userId])
        for child in try children.map(Self.file) {
            _ = try copy(db, &effects, userId: userId, source: child, parentId: copied.id, name: child.name, over: nil, deep: true, now: now)
        }
        return copied
    }

    func update(userId: String, fileId: String, name: String?, parentId: String?, ifMatch: String?, now: Date) async throws -> FileRecord {
        try await write(user: userId) { db, effects in
            try self.move(db, &effects, userId: userId, fileId: fileId, name: name, parentId: parentId, ifMatch: ifMatch, now: now)
        }
    }

    /// A rename or move onto a name another item holds, which goes to the trash in the same transaction (WebDAV's
    /// `MOVE` with `Overwrite: T`): both happen, or neither — the breaker pausing `deleter`, a clash with a third item.
    func move(
        userId: String, fileId: String, name: String, parentId: String, replacing existingId: String, now: Date, by deleter: Deleter?
    ) async throws -> FileRecord {
        try await write(user: userId) { db, effects -> Guarded<FileRecord> in
            if case .paused(let message) = try self.trash(db, &effects, userId: userId, fileId: existingId, now: now, by: deleter) {
                return .paused(message)
            }
            return .done(try self.move(db, &effects, userId: userId, fileId: fileId, name: name, parentId: parentId, ifMatch: nil, now: now))
        }.get()
    }

    /// Renames and/or moves an item (a folder with all it holds) in a transaction.
    func move(
        _ db: any SQLTransaction, _ effects: inout Effects, userId: String, fileId: String, name: String?, parentId: String?, ifMatch: String?, now: Date
    ) throws -> FileRecord {
        let file = try Self.file(db, id: fileId, userId: userId)
        if let ifMatch, !ETag.matches(ifMatch, file.etag) {
            throw DriveError.preconditionFailed("The file changed since you read it (its ETag is now \"\(file.etag)\"); fetch it and retry.", current: file.api)
        }
        guard let oldParent = file.parentId else { throw DriveError.badRequest("The root folder cannot be renamed or moved.") }
        guard !file.isTrashed else { throw DriveError.badRequest("'\(file.name)' is in the trash; restore it first.", code: .trashed) }
        let newName = name ?? file.name
        var newParent = oldParent
        if let parentId, parentId != oldParent {
            let parent = try Self.liveFolder(db, id: parentId, userId: userId)
            if file.isFolder {
                // Walk up from the destination: meeting the moved folder means a cycle.
                var cursor: String? = parent.id
                while let current = cursor {
                    if current == file.id {
                        throw DriveError.badRequest("A folder cannot be moved into itself or one of its subfolders.", code: .invalidMove)
                    }
                    cursor = try db.value("SELECT parent_id FROM files WHERE id = ?", [current], as: String.self)
                }
            }
            newParent = parent.id
        }
        if newName == file.name && newParent == oldParent { return file }
        let existing = try Self.liveChild(db, parentId: newParent, name: newName, userId: userId)
        _ = try NameClashRule.resolve(newName, held: existing, policy: .fail, isFolder: file.isFolder, itself: file.id)
        // A file keeps the time of its content's last change (a rename or move is not one: WebDAV clients,
        // rclone and Nextcloud expect a MOVE to keep a file's time); a folder's time is its last change.
        try db.perform(
            "UPDATE files SET name = ?, parent_id = ?, version = version + 1, modified_at = ? WHERE id = ?",
            [newName, newParent, file.isFolder ? now.millis : file.modifiedAt.millis, file.id])
        try Self.recordChange(db, &effects, userId: userId, fileId: file.id, kind: .upsert, now: now)
        Self.touchFolder(&effects, oldParent)
        if newParent != oldParent { Self.touchFolder(&effects, newParent) }
        return try Self.file(db, id: file.id, userId: userId)
    }

    func trash(userId: String, fileId: String, now: Date, by deleter: Deleter?) async throws -> FileRecord {
        try await write(user: userId) { db, effects -> Guarded<FileRecord> in
            try self.trash(db, &effects, userId: userId, fileId: fileId, now: now, by: deleter)
        }.get()
    }

    /// Moves an item and what is in it to the trash in a transaction, unless the breaker pauses `deleter`.
    func trash(_ db: any SQLTransaction, _ effects: inout Effects, userId: String, fileId: String, now: Date, by deleter: Deleter?) throws -> Guarded<FileRecord> {
        let file = try Self.file(db, id: fileId, userId: userId)
        guard let parentId = file.parentId else { throw DriveError.badRequest("The root folder cannot be deleted.") }
        guard !file.isTrashed else { return .done(file) }
        let ids = try Self.subtree(db, rootId: file.id).filter { id in
            try db.value("SELECT trash_root FROM files WHERE id = ?", [id], as: String.self) == nil
        }
        if let refusal = try Self.admitDeletion(db, userId: userId, deleter: deleter, items: ids.count, now: now) { return .paused(refusal) }
        for id in ids {
            try db.perform("UPDATE files SET trash_root = ?, trashed_at = ?, version = version + 1 WHERE id = ?", [file.id, now.millis, id])
            try Self.recordChange(db, &effects, userId: userId, fileId: id, kind: .upsert, now: now)
        }
        Self.touchFolder(&effects, parentId)
        return .done(try Self.file(db, id: file.id, userId: userId))
    }

    func untrash(userId: String, fileId: String, now: Date) async throws -> FileRecord {
        try await write(user: userId) { db, effects in
            try self.untrash(db, &effects, userId: userId, fileId: fileId, now: now).file
        }
    }

    /// Puts a trashed item and what was trashed with it back (where it was if that folder is live, otherwise into
    /// the root folder; under a free name if its own is taken meanwhile). An item not in the trash is left alone.
    func untrash(_ db: any SQLTransaction, _ effects: inout Effects, userId: String, fileId: String, now: Date) throws -> (file: FileRecord, items: Int) {
        let file = try Self.file(db, id: fileId, userId: userId)
        guard let trashRoot = file.trashRoot, let oldParent = file.parentId else { return (file, 0) }
        var parentId = oldParent
        let parent = try Self.existingFile(db, id: oldParent, userId: userId)
        if parent == nil || parent!.isTrashed {
            parentId = try db.value("SELECT root_id FROM users WHERE id = ?", [userId], as: String.self) ?? oldParent
        }
        // Restoring never fails on a name: a taken one gives way to `name (1)`.
        var name = file.name
        let clash = try Self.liveChild(db, parentId: parentId, name: name, userId: userId)
        if case .renamed = try NameClashRule.resolve(name, held: clash, policy: .rename, isFolder: file.isFolder) {
            name = try Self.freeName(db, parentId: parentId, name: name, userId: userId)
        }
        let ids = try Self.subtree(db, rootId: file.id).filter { id in
            try db.value("SELECT trash_root FROM files WHERE id = ?", [id], as: String.self) == trashRoot
        }
        // Name and place first, while the row is still trashed and outside the live-name index.
        try db.perform("UPDATE files SET name = ?, parent_id = ? WHERE id = ?", [name, parentId, file.id])
        for id in ids {
            try db.perform("UPDATE files SET trash_root = NULL, trashed_at = NULL, version = version + 1 WHERE id = ?", [id])
            try Self.recordChange(db, &effects, userId: userId, fileId: id, kind: .upsert, now: now)
        }
        Self.touchFolder(&effects, parentId)
        return (try Self.file(db, id: file.id, userId: userId), ids.count)
    }

    func deletePermanently(userId: String, fileId: String, now: Date, by deleter: Deleter?) async throws {
        try await write(user: userId) { db, effects -> Guarded<Void> in
            let file = try Self.file(db, id: fileId, userId: userId)
            guard let parentId = file.parentId else { throw DriveError.badRequest("The root folder cannot be deleted.") }
            if deleter != nil {
                let items = try Self.subtree(db, rootId: file.id).count
                if let refusal = try Self.admitDeletion(db, userId: userId, deleter: deleter, items: items, now: now) { return .paused(refusal) }
            }
            try self.purge(db, &effects, userId: userId, rootId: file.id, now: now)
            Self.touchFolder(&effects, parentId)
            return .done(())
        }.get()
    }

    // MARK: Content and revisions

    func commitContent(userId: String, target: ContentTarget, content: StagedContent, now: Date) async throws -> FileRecord {
        do {
            try await putBlocks(content.blocks, userId: userId, now: now)
            let (file, _) = try await write(user: userId) { db, effects in
                try self.commit(db, &effects, userId: userId, target: target, content: content, now: now)
            }
            return file
        } catch {
            blobs.discard(content.blocks)
            throw error
        }
    }

    func commitBatch(userId: String, entries: [BatchEntry], now: Date) async throws -> [Result<(file: FileRecord, created: Bool), DriveError>] {
        let outcomes: [Result<(file: FileRecord, created: Bool), DriveError>]
        do {
            try await putBlocks(entries.flatMap(\.content.blocks), userId: userId, now: now)
            outcomes = try await write(user: userId) { base, effects in
                var outcomes: [Result<(file: FileRecord, created: Bool), DriveError>] = []
                outcomes.reserveCapacity(entries.count)
                // A few queries answer every entry's checks, and the entries' rows go out as multi-row inserts: a
                // batch of 1,000 small files is a handful of statements, not thousands of round trips.
                try self.prefetch(base, &effects, userId: userId, entries: entries)
                let db = CoalescingTransaction(base)
                defer { effects.knownChildren = [:]; effects.knownRequests = [:]; effects.knownBlocks = [:] }
                // Each entry is checked before anything of it is written, so one that breaks a rule leaves nothing
                // behind and needs no savepoint; a failure while writing fails the whole batch (and is retried).
                for entry in entries {
                    let plan: CommitPlan
                    do {
                        plan = try self.prepareCommit(db, &effects, userId: userId, target: entry.target, content: entry.content)
                    } catch let error as DriveError {
                        outcomes.append(.failure(error))
                        continue
                    }
                    outcomes.append(.success(try self.applyCommit(db, &effects, userId: userId, plan: plan, content: entry.content, now: now)))
                }
                try db.flush()
                return outcomes
            }
        } catch {
            for entry in entries { blobs.discard(entry.content.blocks) }
            throw error
        }
        return outcomes
    }

    /// Reads what a batch's checks will ask, a few statements for all entries: the live children under the names
    /// new files take, the files made under their request ids, and the state of every block they reference.
    func prefetch(_ db: any SQLTransaction, _ effects: inout Effects, userId: String, entries: [BatchEntry]) throws {
        var namesByFolder: [String: Set<String>] = [:]
        var requestIds: Set<String> = []
        var root: String?
        for entry in entries {
            guard case .new(let parentId, let name, _, let requestId) = entry.target else { continue }
            if parentId == nil, root == nil {
                root = try db.value("SELECT root_id FROM users WHERE id = ?", [userId], as: String.self)
            }
            guard let folder = parentId ?? root else { continue }
            namesByFolder[folder, default: []].insert(name)
            if let requestId { requestIds.insert(requestId) }
        }
        for (folder, names) in namesByFolder {
            let names = Array(names)
            for key in names { effects.knownChildren[ChildKey(parentId: folder, name: key)] = .absent }
            for row in try Self.fetchAll(
                db, "SELECT * FROM files WHERE user_id = ? AND parent_id = ? AND trash_root IS NULL AND name IN", [userId, folder], names)
            {
                let file = try Self.file(row)
                effects.knownChildren[ChildKey(parentId: folder, name: file.name)] = .present(file)
            }
        }
        let ids = Array(requestIds)
        for id in ids { effects.knownRequests[id] = .absent }
        for row in try Self.fetchAll(db, "SELECT * FROM files WHERE user_id = ? AND request_id IN", [userId], ids) {
            if let id = try row.get("request_id", as: String?.self) { effects.knownRequests[id] = .present(try Self.file(row)) }
        }
        let hashes = Array(Set(entries.flatMap { $0.content.blocks.map(\.ref.hash) }))
        for hash in hashes { effects.knownBlocks[hash] = .missing }
        for row in try Self.fetchAll(db, "SELECT hash, orphaned_at FROM blocks WHERE user_id = ? AND hash IN", [userId], hashes) {
            effects.knownBlocks[try row.get("hash")] = try row.get("orphaned_at", as: Int64?.self) == nil ? .live : .orphaned
        }
    }

    /// `sql` (ending in `IN`) run for `keys` in chunks of 500, `(?, ?, …)` appended; every chunk's rows.
    static func fetchAll(_ db: any SQLTransaction, _ sql: String, _ arguments: [any SQLArgument], _ keys: [String]) throws -> [SQLRow] {
        var rows: [SQLRow] = []
        for start in stride(from: 0, to: keys.count, by: 500) {
            let part = Array(keys[start..<min(start + 500, keys.count)])
            rows += try db.fetchAll("\(sql) (\(sqlPlaceholders(part.count)))", arguments + part)
        }
        return rows
    }

    /// The file a creation with `requestId` made before (a retry), if any.
    static func fileMade(_ db: any SQLTransaction, by requestId: String?, userId: String) throws -> FileRecord? {
        guard let requestId else { return nil }
        return try db.fetchOne("SELECT * FROM files WHERE user_id = ? AND request_id = ?", [userId, requestId]).map(Self.file)
    }

    /// The file an upload under `requestId` already made with these bytes (a retry), or `nil` if none did; a
    /// file it made with other bytes means the id was reused: 409 `request_id_reused`.
    static func retried(
        _ db: any SQLTransaction, _ requestId: String?, userId: String, checksum: String, known: Known<FileRecord>? = nil
    ) throws -> FileRecord? {
        let earlier: FileRecord?
        switch known {
        case .absent?: earlier = nil
        case .present(let file)?: earlier = file
        case nil: earlier = try fileMade(db, by: requestId, userId: userId)
        }
        guard let earlier else { return nil }
        // The answer is the file as the request made it: the (first) revision with the request's bytes, even when
        // the file has newer ones since (another device's version). A client that lost the first answer must not
        // take someone else's version for the one it sent — with no checksum to compare (a provider that keeps
        // none), it could not tell, and would believe its own bytes are that version.
        guard
            let made = try db.fetchOne(
                "SELECT id, size FROM revisions WHERE file_id = ? AND checksum = ? ORDER BY ordinal LIMIT 1", [earlier.id, checksum])
        else {
            throw DriveError.requestIdReused("This requestId already made a file with different content (id \(earlier.id)); use a new requestId.", existingId: earlier.id)
        }
        var answer = earlier
        answer.headRevisionId = try made.get("id", as: String.self)
        answer.size = try made.get("size", as: Int64.self)
        answer.checksum = checksum
        return answer
    }

    /// One content commit inside a write transaction: a retried `requestId` returns its first file
    /// (`created == false`), else the target is resolved, quota checked, blocks adopted (put before, by
    /// ``putBlocks(_:userId:now:)``) and a head revision added.
    func commit(
        _ db: any SQLTransaction, _ effects: inout Effects, userId: String, target: ContentTarget, content: StagedContent, now: Date
    ) throws -> (file: FileRecord, created: Bool) {
        let plan = try prepareCommit(db, &effects, userId: userId, target: target, content: content)
        return try applyCommit(db, &effects, userId: userId, plan: plan, content: content, now: now)
    }

    /// What a content commit will write, decided by reading only.
    enum CommitPlan {
        /// A retry of an upload that landed: that file, nothing new.
        case retry(FileRecord)
        case commit(target: TargetPlan, adoptions: [Adoption])
    }

    /// Every check of a content commit (retry, target, `If-Match`, name clash, quota, blocks present), writing
    /// nothing: a ``DriveError`` from here leaves the transaction as it was.
    func prepareCommit(
        _ db: any SQLTransaction, _ effects: inout Effects, userId: String, target: ContentTarget, content: StagedContent
    ) throws -> CommitPlan {
        if case .new(_, _, _, let requestId) = target,
            let earlier = try Self.retried(
                db, requestId, userId: userId, checksum: content.checksum, known: requestId.flatMap { effects.knownRequests[$0] })
        {
            return .retry(earlier)
        }
        let placement = try Self.planTarget(db, &effects, userId: userId, target: target)
        let adoptions = try planAdoption(db, effects, userId: userId, blocks: content.blocks)
        try checkQuota(db, &effects, userId: userId, adding: adoptions)
        try verifyStored(db, adoptions, userId: userId)
        return .commit(target: placement, adoptions: adoptions)
    }

    /// Writes a prepared commit; it breaks no rule any more, so an error here is the database's.
    func applyCommit(
        _ db: any SQLTransaction, _ effects: inout Effects, userId: String, plan: CommitPlan, content: StagedContent, now: Date
    ) throws -> (file: FileRecord, created: Bool) {
        switch plan {
        case .retry(let earlier):
            return (earlier, false)
        case .commit(let target, let adoptions):
            let file = try Self.placeTarget(db, &effects, userId: userId, plan: target, mimeType: content.mimeType, now: now)
            try applyAdoption(db, &effects, userId: userId, adoptions, now: now)
            let head = try commitRevision(
                db, &effects, file: file, blocks: content.blocks.map(\.ref), checksum: content.checksum, size: content.size,
                mimeType: content.mimeType, now: now, modifiedAt: content.modifiedAt)
            if let parentId = head.parentId, case .present? = effects.knownChildren[ChildKey(parentId: parentId, name: head.name)] {
                effects.knownChildren[ChildKey(parentId: parentId, name: head.name)] = .present(head)
            }
            return (head, true)
        }
    }

    func revisions(userId: String, fileId: String, paging: Paging) async throws -> (revisions: [RevisionRecord], total: Int) {
        try await database.read { db in
            _ = try Self.file(db, id: fileId, userId: userId)
            let total = try db.value("SELECT COUNT(*) FROM revisions WHERE file_id = ?", [fileId], as: Int.self) ?? 0
            let rows = try db.fetchAll("SELECT * FROM revisions WHERE file_id = ? ORDER BY ordinal DESC LIMIT ? OFFSET ?", [fileId, paging.limit, paging.offset])
            return (try rows.map(Self.revision), total)
        }
    }

    func revision(userId: String, fileId: String, revisionId: String) async throws -> RevisionRecord {
        try await database.read { db in
            guard
                let row = try db.fetchOne("SELECT * FROM revisions WHERE id = ? AND file_id = ? AND user_id = ?", [revisionId, fileId, userId])
            else { throw DriveError.notFound("No such revision.") }
            return try Self.revision(row)
        }
    }

    func blocks(ofRevision revisionId: String) async throws -> [BlockRef] {
        try await database.read { db in try Self.blocks(db, ofRevision: revisionId) }
    }

    /// A revision's blocks in order, with where each one's bytes are.
    static func blocks(_ db: any SQLTransaction, ofRevision revisionId: String) throws -> [BlockRef] {
        try db.fetchAll("""
                SELECT r.hash, r.size, b.data, b.pack, b.pack_offset, b.pack_stored FROM revision_blocks r
                LEFT JOIN blocks b ON b.user_id = r.user_id AND b.hash = r.hash
                WHERE r.revision_id = ? ORDER BY r.idx
                """, [revisionId]
        ).map { BlockRef(hash: try $0.get("hash"), size: try $0.get("size"), inline: try $0.get("data", as: [UInt8]?.self), pack: try Self.packLocation($0)) }
    }

    func restore(userId: String, fileId: String, revisionId: String, now: Date) async throws -> FileRecord {
        try await write(user: userId) { db, effects in
            let file = try Self.file(db, id: fileId, userId: userId)
            guard !file.isTrashed else { throw DriveError.badRequest("'\(file.name)' is in the trash; restore it first.", code: .trashed) }
            guard
                let row = try db.fetchOne("SELECT * FROM revisions WHERE id = ? AND file_id = ? AND user_id = ?", [revisionId, fileId, userId])
            else { throw DriveError.notFound("No such revision.") }
            let revision = try Self.revision(row)
            let blocks = try db.fetchAll("SELECT hash, size FROM revision_blocks WHERE revision_id = ? ORDER BY idx", [revisionId]
            ).map { BlockRef(hash: try $0.get("hash"), size: try $0.get("size")) }
            return try self.commitRevision(
                db, &effects, file: file, blocks: blocks, checksum: revision.checksum, size: revision.size, mimeType: revision.mimeType, now: now)
        }
    }

    // MARK: Change feed

    func latestSeq(userId: String) async throws -> Int64 {
        try await database.read { db in
            try db.value("SELECT last_seq FROM users WHERE id = ?", [userId], as: Int64.self) ?? 0
        }
    }

    func changes(userId: String, after seq: Int64, limit: Int) async throws -> (changes: [ChangeRecord], hasMore: Bool)? {
        try await database.read { db in
            guard let user = try db.fetchOne("SELECT last_seq, changes_floor FROM users WHERE id = ?", [userId]) else {
                return nil
            }
            let last: Int64 = try user.get("last_seq")
            let floor: Int64 = try user.get("changes_floor")
            guard seq >= floor, seq <= last else { return nil }
            let rows = try db.fetchAll("""
                    SELECT c.seq AS c_seq, c.user_seq AS c_user_seq, c.kind AS c_kind, c.file_id AS c_file_id, f.*
                    FROM changes c LEFT JOIN files f ON f.id = c.file_id AND c.kind = 'upsert'
                    WHERE c.user_id = ? AND c.seq > ? ORDER BY c.seq LIMIT ?
                    """, [userId, seq, limit + 1])
            let changes = try rows.prefix(limit).map { row in
                let kind = Change.Kind(rawValue: try row.get("c_kind")) ?? .upsert
                let file: FileRecord? = try row.get("id", as: String?.self) == nil ? nil : try Self.file(row)
                return ChangeRecord(
                    seq: try row.get("c_seq"), userSeq: try row.get("c_user_seq"), kind: file == nil ? .delete : kind, fileId: try row.get("c_file_id"),
                    file: file)
            }
            return (Array(changes), rows.count > limit)
        }
    }

    // MARK: Maintenance

    func purgeTrash(trashedBefore before: Date, now: Date) async throws -> Int {
        let candidates = try await database.read { db in
            try db.fetchAll("SELECT id, user_id FROM files WHERE trash_root = id AND trashed_at < ? LIMIT 500", [before.millis])
                .map { (id: try $0.get("id", as: String.self), userId: try $0.get("user_id", as: String.self)) }
        }
        var purged = 0
        // One transaction per item, under its user's lock; the item is checked again there (it may have been
        // restored or purged since it was listed).
        for candidate in candidates {
            purged += try await write(user: candidate.userId) { db, effects in
                guard let row = try db.fetchOne("SELECT parent_id FROM files WHERE id = ? AND trash_root = id AND trashed_at < ?", [candidate.id, before.millis])
                else { return 0 }
                let count = try self.purge(db, &effects, userId: candidate.userId, rootId: candidate.id, now: now)
                if let parentId = try row.get("parent_id", as: String?.self) { Self.touchFolder(&effects, parentId) }
                return count
            }
        }
        return purged
    }

    func compactChanges(before: Date) async throws -> Int {
        let users = try await database.read { db in
            try db.values("SELECT DISTINCT user_id FROM changes WHERE kind = 'delete' AND at < ?", [before.millis], as: String.self)
        }
        var removed = 0
        for userId in users {
            removed += try await write(user: userId) { db, _ in
                guard let top = try db.value("SELECT MAX(seq) FROM changes WHERE user_id = ? AND kind = 'delete' AND at < ?", [userId, before.millis], as: Int64.self)
                else { return 0 }
                let count = try db.execute("DELETE FROM changes WHERE user_id = ? AND kind = 'delete' AND seq <= ?", [userId, top])
                try db.perform("UPDATE users SET changes_floor = ? WHERE id = ? AND changes_floor < ?", [top, userId, top])
                return count
            }
        }
        return removed
    }
}

// MARK: - Transaction helpers (run inside a write or read)

let emptyChecksum = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

extension SQLMetadataStore {
    /// Appends a change-feed row for a file, replacing the file's older rows (the feed carries the latest state).
    static func recordChange(_ db: any SQLTransaction, _ effects: inout Effects, userId: String, fileId: String, kind: Change.Kind, now: Date) throws {
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
        try db.insert(into: "changes", ["user_id", "file_id", "kind", "at", "user_seq"], [userId, fileId, kind.rawValue, now.millis, userSeq])
        effects.changed[userId] = 0  // the sequence number, and users.last_seq, at the end (applyDeferred)
    }

    /// The file a content commit lands in: the existing one (checked against `If-Match`: 409 if its head
    /// moved) or a new row in the parent folder, with a name clash settled by the policy.
    static func resolveTarget(_ db: any SQLTransaction, _ effects: inout Effects, userId: String, target: ContentTarget, mimeType: String, now: Date) throws -> FileRecord {
        let plan = try planTarget(db, &effects, userId: userId, target: target)
        return try placeTarget(db, &effects, userId: userId, plan: plan, mimeType: mimeType, now: now)
    }

    /// Where a content commit lands, decided without writing: an existing file, or a new one under this name.
    enum TargetPlan {
        case existing(FileRecord)
        case new(parentId: String, name: String, requestId: String?)
    }

    static func planTarget(_ db: any SQLTransaction, _ effects: inout Effects, userId: String, target: ContentTarget) throws -> TargetPlan {
        switch target {
        case .existing(let fileId, let ifMatch):
            let existing = try file(db, id: fileId, userId: userId)
            try checkWritable(existing, ifMatch: ifMatch)
            return .existing(existing)
        case .new(let parentId, let name, let policy, let requestId):
            let folderId = try parentId ?? db.value("SELECT root_id FROM users WHERE id = ?", [userId], as: String.self) ?? ""
            let parent = try effects.liveFolders[folderId] ?? liveFolder(db, id: folderId, userId: userId)
            effects.liveFolders[folderId] = parent
            let clash: FileRecord?
            switch effects.knownChildren[ChildKey(parentId: parent.id, name: name)] {
            case .absent?: clash = nil
            case .present(let file)?: clash = file
            case nil: clash = try liveChild(db, parentId: parent.id, name: name, userId: userId)
            }
            switch try NameClashRule.resolve(name, held: clash, policy: policy, isFolder: false) {
            case .free: return .new(parentId: parent.id, name: name, requestId: requestId)
            case .renamed: return .new(parentId: parent.id, name: try freeName(db, parentId: parent.id, name: name, userId: userId), requestId: requestId)
            case .replace(let existing): return .existing(existing)
            }
        }
    }

    static func placeTarget(_ db: any SQLTransaction, _ effects: inout Effects, userId: String, plan: TargetPlan, mimeType: String, now: Date) throws -> FileRecord {
        switch plan {
        case .existing(let file):
            return file
        case .new(let parentId, let name, let requestId):
            let file = newFile(&effects, userId: userId, parentId: parentId, name: name, mimeType: mimeType, requestId: requestId, now: now)
            touchFolder(&effects, parentId)
            effects.knownChildren[ChildKey(parentId: parentId, name: name)] = .present(file)
            if let requestId { effects.knownRequests[requestId] = .present(file) }
            return file
        }
    }

    /// A new file, not written yet: ``SQLMetadataStore/commitRevision(_:_:file:blocks:checksum:size:mimeType:now:)``
    /// writes its row together with its first revision.
    static func newFile(
        _ effects: inout Effects, userId: String, parentId: String, name: String, mimeType: String, requestId: String?, now: Date
    ) -> FileRecord {
        let id = "f" + randomToken()
        effects.inserted.insert(id)
        effects.unplaced[id] = Unplaced(requestId: requestId)
        return FileRecord(
            id: id, userId: userId, parentId: parentId, name: name, mimeType: mimeType, isFolder: false, size: 0, checksum: nil,
            headRevisionId: nil, version: 1, trashRoot: nil, trashedAt: nil, createdAt: Date(millis: now.millis),
            modifiedAt: Date(millis: now.millis))
    }

    /// Inserts a new live item and returns it as reading the row back would give (the schema's defaults for the
    /// rest: no content yet, version 1).
    static func insertFile(
        _ db: any SQLTransaction, _ effects: inout Effects, userId: String, parentId: String, name: String, mimeType: String, isFolder: Bool, requestId: String?, now: Date
    ) throws -> FileRecord {
        let id = "f" + randomToken()
        try db.perform("""
                INSERT INTO files (id, user_id, parent_id, name, mime_type, is_folder, created_at, modified_at, request_id)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                """, [id, userId, parentId, name, mimeType, isFolder, now.millis, now.millis, requestId])
        effects.inserted.insert(id)
        return FileRecord(
            id: id, userId: userId, parentId: parentId, name: name, mimeType: mimeType, isFolder: isFolder, size: 0, checksum: nil,
            headRevisionId: nil, version: 1, trashRoot: nil, trashedAt: nil, createdAt: Date(millis: now.millis),
            modifiedAt: Date(millis: now.millis))
    }

    /// A file can take a new revision: not a folder, not trashed, and its head is what `If-Match` names.
    static func checkWritable(_ existing: FileRecord, ifMatch: String?) throws {
        guard !existing.isFolder else { throw DriveError.badRequest("'\(existing.name)' is a folder; it has no content.", code: .isAFolder) }
        guard !existing.isTrashed else { throw DriveError.badRequest("'\(existing.name)' is in the trash; restore it first.", code: .trashed) }
        if let ifMatch, !ETag.matches(ifMatch, existing.etag) {
            throw DriveError.versionConflict(
                "'\(existing.name)' has a newer version (\(existing.etag)) than the one this upload was based on; nothing was changed.",
                current: existing.api)
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

    static func liveChild(_ db: any SQLTransaction, parentId: String, name: String, userId: String) throws -> FileRecord? {
        try db.fetchOne("SELECT * FROM files WHERE user_id = ? AND parent_id = ? AND name = ? AND trash_root IS NULL", [userId, parentId, name]
        ).map(file)
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

    /// 507 if adopting these blocks would take the user over quota (blocks already live cost nothing).
    func checkQuota(_ db: any SQLTransaction, _ effects: inout Effects, userId: String, adding adoptions: [Adoption]) throws {
        let needed = adoptions.reduce(Int64(0)) { $0 + $1.block.ref.size }
        guard needed > 0 else { return }
        if effects.quota[userId] == nil {
            guard let row = try db.fetchOne("SELECT quota_limit, used_bytes FROM users WHERE id = ?", [userId]) else { return }
            effects.quota[userId] = Quota(limit: try row.get("quota_limit"), used: try row.get("used_bytes"))
        }
        guard let stored = effects.quota[userId] else { return }
        try QuotaRule.check(adding: needed, used: stored.used + (effects.usedBytes[userId] ?? 0), limit: stored.limit)
    }

    // MARK: Blocks: put before commit, adopt in the commit, orphan when unreferenced, sweep after a grace period

    /// Puts staged blocks in the blob store, before the transaction that will adopt them. Their rows are written
    /// first, marked orphaned (or an orphaned row's age refreshed, and its place made the new copy's), so that a
    /// crash or a failed commit leaves nothing the sweep does not find; a live row stays as it is. A pack none of
    /// whose blocks a row names (the user had them all) is not put at all; the others get a `packs` row, which the
    /// sweep deletes with the pack once no block names it.
    func putBlocks(_ blocks: [StagedBlock], userId: String, now: Date) async throws {
        let stored = blocks.filter { $0.data == nil }
        guard !stored.isEmpty else { return }
        let staged = Set(stored.compactMap(\.ref.pack?.pack))
        let (kept, replaced) = try await write(user: userId) { db, _ -> (Set<String>, [String]) in
            // Orphaned blocks kept as their own files that now move into a pack: their files go once it is put.
            var replaced: [String] = []
            let packed = stored.filter { $0.ref.pack != nil }.map(\.ref.hash)
            for row in try Self.fetchAll(db, "SELECT hash FROM blocks WHERE pack IS NULL AND orphaned_at IS NOT NULL AND user_id = ? AND hash IN", [userId], packed) {
                replaced.append(try row.get("hash"))
            }
            for block in stored {
                let pack = block.ref.pack
                try db.perform(
                    """
                    INSERT INTO blocks (user_id, hash, size, created_at, orphaned_at, pack, pack_offset, pack_stored) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT (user_id, hash) DO UPDATE SET orphaned_at = excluded.orphaned_at, freed = 0, pack = excluded.pack,
                        pack_offset = excluded.pack_offset, pack_stored = excluded.pack_stored
                    WHERE blocks.orphaned_at IS NOT NULL
                    """, [userId, block.ref.hash, block.ref.size, now.millis, now.millis, pack?.pack, pack?.offset, pack?.stored])
            }
            guard !staged.isEmpty else { return ([], replaced) }
            let kept = Set(try Self.fetchAll(db, "SELECT DISTINCT pack FROM blocks WHERE user_id = ? AND pack IN", [userId], staged.sorted())
                .map { try $0.get("pack", as: String.self) })
            let sizes = Self.packSizes(stored)
            for id in kept.sorted() {
                try db.perform("INSERT INTO packs (user_id, id, created_at, size) VALUES (?, ?, ?, ?)", [userId, id, now.millis, sizes[id]])
            }
            return (kept, replaced)
        }
        let unused = stored.filter { $0.ref.pack.map { !kept.contains($0.pack) } ?? false }
        blobs.discard(unused)
        try await blobs.put(stored.filter { $0.ref.pack.map { kept.contains($0.pack) } ?? true }, user: userId)
        if !replaced.isEmpty {
            try await write(user: userId) { db, _ in
                let still = try Self.fetchAll(db, "SELECT hash FROM blocks WHERE pack IS NOT NULL AND user_id = ? AND hash IN", [userId], replaced)
                try self.blobs.deleteBlocking(try still.map { try $0.get("hash", as: String.self) }, user: userId)
            }
        }
    }

    /// Adoption makes the blocks a commit references live and charges the new ones to the user. A live row means
    /// the bytes are kept (inline in the row, or in the blob store). A stored block whose row is orphaned or missing
    /// is checked in the blob store, under the user's lock, where no sweep can run; an inline block brings its
    /// bytes and needs no blob store at all. In three steps, so that every check comes before any write:
    /// ``planAdoption(_:userId:blocks:)`` (which blocks are not live yet: what the quota is charged),
    /// ``verifyStored(_:_:userId:)`` (the blob store has them), then ``applyAdoption(_:_:userId:_:now:)``.
    ///
    /// A block a commit makes live: new to the user (no row) or orphaned (a row).
    struct Adoption: Sendable {
        var block: StagedBlock
        var hasRow: Bool
    }

    func planAdoption(_ db: any SQLTransaction, _ effects: Effects, userId: String, blocks: [StagedBlock]) throws -> [Adoption] {
        var seen: Set<String> = []
        var adoptions: [Adoption] = []
        for block in blocks where seen.insert(block.ref.hash).inserted {
            switch effects.knownBlocks[block.ref.hash] {
            case .live?: continue
            case .orphaned?:
                adoptions.append(Adoption(block: block, hasRow: true))
                continue
            case .missing?:
                adoptions.append(Adoption(block: block, hasRow: false))
                continue
            case nil: break
            }
            let row = try db.fetchOne("SELECT orphaned_at FROM blocks WHERE user_id = ? AND hash = ?", [userId, block.ref.hash])
            if let row, try row.get("orphaned_at", as: Int64?.self) == nil { continue }
            adoptions.append(Adoption(block: block, hasRow: row != nil))
        }
        return adoptions
    }

    func verifyStored(_ db: any SQLTransaction, _ adoptions: [Adoption], userId: String) throws {
        for adoption in adoptions where adoption.block.data == nil {
            var block = adoption.block.ref
            if adoption.hasRow, let row = try db.fetchOne("SELECT pack, pack_offset, pack_stored FROM blocks WHERE user_id = ? AND hash = ?", [userId, block.hash]) {
                block.pack = try Self.packLocation(row)  // where the row says the bytes are
            }
            if try !blobs.containsBlocking(block, user: userId) {
                throw DriveError.unavailable("A block of this upload is missing from the blob store; nothing was changed, upload again.", retryAfter: 1)
            }
        }
    }

    func applyAdoption(_ db: any SQLTransaction, _ effects: inout Effects, userId: String, _ adoptions: [Adoption], now: Date) throws {
        for adoption in adoptions {
            let block = adoption.block
            if !adoption.hasRow {
                let pack = block.data == nil ? block.ref.pack : nil
                try db.insert(
                    into: "blocks", ["user_id", "hash", "size", "created_at", "data", "pack", "pack_offset", "pack_stored"],
                    [userId, block.ref.hash, block.ref.size, now.millis, block.data, pack?.pack, pack?.offset, pack?.stored])
            } else {
                try db.perform(
                    "UPDATE blocks SET orphaned_at = NULL, freed = 0, data = CASE WHEN data IS NULL THEN ? ELSE data END WHERE user_id = ? AND hash = ?",
                    [block.data, userId, block.ref.hash])
            }
            effects.usedBytes[userId, default: 0] += block.ref.size
            if effects.knownBlocks[block.ref.hash] != nil { effects.knownBlocks[block.ref.hash] = .live }
        }
    }

    /// Among `hashes`, the blocks no revision or upload references any more stop counting against the quota and
    /// are marked orphaned and *freed*: the sweep deletes them (row, bytes kept inline, copy in the blob store) after
    /// the freed-space grace period (a minute on the local store), unless a commit adopts them again first — so space
    /// a user frees (a file purged, the trash emptied) is usable again within minutes, not a day later.
    func collectGarbage(_ db: any SQLTransaction, _ effects: inout Effects, userId: String, hashes: Set<String>, now: Date) throws {
        for hash in hashes {
            effects.knownBlocks[hash] = nil  // may be orphaned now: ask the database next time
            let used = try db.fetchOne(
                """
                SELECT 1 FROM revision_blocks WHERE user_id = ? AND hash = ?
                UNION ALL SELECT 1 FROM upload_blocks WHERE user_id = ? AND hash = ? LIMIT 1
                """, [userId, hash, userId, hash])
            guard used == nil,
                let size = try db.value("SELECT size FROM blocks WHERE user_id = ? AND hash = ? AND orphaned_at IS NULL", [userId, hash], as: Int64.self)
            else { continue }
            try db.perform("UPDATE blocks SET orphaned_at = ?, freed = 1 WHERE user_id = ? AND hash = ?", [now.millis, userId, hash])
            effects.usedBytes[userId, default: 0] -= size
            freedSince.withLockedValue { $0 = min($0 ?? now, now) }
        }
    }

    /// Deletes from the blob store the blocks orphaned before `before` (sent, never committed) and those freed before
    /// `freedBefore` (their last reference went), then their rows, then the packs made before `freedBefore` that no
    /// block names any more; one transaction per user, under its lock, so no commit can adopt a block while it goes.
    /// Returns how many blocks went.
    func sweepBlocks(orphanedBefore before: Date, freedBefore: Date, now: Date) async throws -> Int {
        // `freedBefore` is the later time: the index on orphaned_at finds both kinds.
        let latest = max(before, freedBefore).millis
        let due = "orphaned_at IS NOT NULL AND orphaned_at < ? AND (orphaned_at < ? OR freed = 1)"
        let unreferencedPacks = """
            SELECT id FROM packs WHERE user_id = ? AND created_at < ?
            AND NOT EXISTS (SELECT 1 FROM blocks WHERE blocks.user_id = packs.user_id AND blocks.pack = packs.id) LIMIT 1000
            """
        freedSince.withLockedValue { if let since = $0, since < freedBefore { $0 = nil } }
        let users = try await database.read { db in
            Set(try db.values("SELECT DISTINCT user_id FROM blocks WHERE \(due) LIMIT 1000", [latest, before.millis], as: String.self))
                .union(
                    try db.values(
                        """
                        SELECT DISTINCT user_id FROM packs WHERE created_at < ?
                        AND NOT EXISTS (SELECT 1 FROM blocks WHERE blocks.user_id = packs.user_id AND blocks.pack = packs.id) LIMIT 1000
                        """, [freedBefore.millis], as: String.self))
        }
        var swept = 0
        for userId in users.sorted() {
            let (count, touched) = try await write(user: userId) { db, _ -> (Int, Set<String>) in
                let rows = try db.fetchAll("SELECT hash, pack FROM blocks WHERE user_id = ? AND \(due) LIMIT 1000", [userId, latest, before.millis])
                let hashes = try rows.map { try $0.get("hash", as: String.self) }
                let touched = Set(try rows.compactMap { try $0.get("pack", as: String?.self) })
                let own = try rows.filter { try $0.get("pack", as: String?.self) == nil }.map { try $0.get("hash", as: String.self) }
                try self.blobs.deleteBlocking(own, user: userId)
                for hash in hashes {
                    try db.perform("DELETE FROM blocks WHERE user_id = ? AND hash = ? AND orphaned_at IS NOT NULL", [userId, hash])
                }
                let packs = try db.values(unreferencedPacks, [userId, freedBefore.millis], as: String.self)
                try self.blobs.deletePacksBlocking(packs, user: userId)
                for id in packs {
                    try db.perform("DELETE FROM packs WHERE user_id = ? AND id = ?", [userId, id])
                }
                return (hashes.count, touched.subtracting(packs))
            }
            swept += count
            for pack in touched.sorted() {
                do {
                    try await compactPack(pack, userId: userId, now: now)
                } catch {
                    // Compaction only saves space: a failure leaves the old pack as it was (and the new one, if put,
                    // to the sweep), and is tried again when more of its blocks die.
                }
            }
        }
        return swept
    }

    /// Each pack's size in bytes as the staged blocks written into it reach (the end of its last block).
    static func packSizes(_ blocks: [StagedBlock]) -> [String: Int64] {
        blocks.reduce(into: [:]) { sizes, block in
            if let pack = block.ref.pack { sizes[pack.pack] = max(sizes[pack.pack] ?? 0, pack.offset + pack.stored) }
        }
    }

    /// Compaction: a pack more than half of whose bytes belong to no live block any more (their rows were swept)
    /// has its live blocks copied into a new pack, their rows moved there, and the old pack left for the sweep —
    /// with its `created_at` set to now, so it is deleted only after the grace period: a download that read a
    /// block's old place just before the move still finds the bytes. Order, as for uploads: the new pack's row
    /// (naming no block: the sweep takes it if this stops half-way), then its bytes, then the move. A block whose
    /// row changed meanwhile (sent again into another pack) keeps its new place.
    func compactPack(_ id: String, userId: String, now: Date) async throws {
        let found = try await database.read { db -> (size: Int64?, live: [(ref: BlockRef, offset: Int64)])? in
            guard let pack = try db.fetchOne("SELECT size FROM packs WHERE user_id = ? AND id = ?", [userId, id]) else { return nil }
            let rows = try db.fetchAll(
                "SELECT hash, size, pack, pack_offset, pack_stored FROM blocks WHERE user_id = ? AND pack = ? ORDER BY pack_offset", [userId, id])
            return (
                try pack.get("size", as: Int64?.self),
                try rows.map { row in
                    let location = try Self.packLocation(row)
                    return (BlockRef(hash: try row.get("hash"), size: try row.get("size"), pack: location), location?.offset ?? 0)
                }
            )
        }
        guard let found, let size = found.size, !found.live.isEmpty else { return }
        let liveBytes = found.live.reduce(Int64(0)) { $0 + ($1.ref.pack?.stored ?? 0) }
        guard liveBytes * 2 < size else { return }
        // Read the live blocks (whole, expanded) and write them into a new pack.
        var writer = blobs.makePackWriter()
        let staged: [StagedBlock]
        do {
            for entry in found.live {
                var bytes: [UInt8] = []
                bytes.reserveCapacity(Int(entry.ref.size))
                try await blobs.read([entry.ref], user: userId, range: 0..<entry.ref.size) { piece in bytes += piece.readableBytesView }
                try await writer.add(bytes, hash: entry.ref.hash)
            }
            staged = try await writer.finish()
        } catch {
            await writer.abandon()
            throw error
        }
        let newPacks = Set(staged.compactMap(\.ref.pack?.pack))
        let sizes = Self.packSizes(staged)
        let stamp = now.millis
        try await write(user: userId) { db, _ in
            for pack in newPacks.sorted() {
                try db.perform("INSERT INTO packs (user_id, id, created_at, size) VALUES (?, ?, ?, ?)", [userId, pack, stamp, sizes[pack]])
            }
        }
        do {
            try await blobs.put(staged, user: userId)
        } catch {
            blobs.discard(staged)
            throw error
        }
        try await write(user: userId) { db, _ in
            for (block, old) in zip(staged, found.live) {
                guard let place = block.ref.pack else { continue }
                try db.perform(
                    "UPDATE blocks SET pack = ?, pack_offset = ?, pack_stored = ? WHERE user_id = ? AND hash = ? AND pack = ? AND pack_offset = ?",
                    [place.pack, place.offset, place.stored, userId, block.ref.hash, id, old.offset])
            }
            try db.perform("UPDATE packs SET created_at = ? WHERE user_id = ? AND id = ?", [stamp, userId, id])
        }
    }

    /// A block row's place in a pack (nil: the block is its own file or object, or kept in the row).
    static func packLocation(_ row: SQLRow) throws -> PackLocation? {
        guard let pack = try row.get("pack", as: String?.self) else { return nil }
        return PackLocation(pack: pack, offset: try row.get("pack_offset"), stored: try row.get("pack_stored"))
    }

    /// Adds a head revision made of `blocks` (already placed) and prunes revisions past retention.
    func commitRevision(
        _ db: any SQLTransaction, _ effects: inout Effects, file: FileRecord, blocks: [BlockRef], checksum: String, size: Int64, mimeType: String,
        now: Date, modifiedAt: Date? = nil
    ) throws -> FileRecord {
        let revisionId = "r" + randomToken()
        // The file's modification time: the client's when it gave one (WebDAV's X-OC-Mtime), else the commit's.
        let modified = modifiedAt ?? now
        let ordinal =
            effects.inserted.contains(file.id)
            ? 1 : (try db.value("SELECT MAX(ordinal) FROM revisions WHERE file_id = ?", [file.id], as: Int64.self) ?? 0) + 1
        try db.insert(
            into: "revisions", ["id", "file_id", "user_id", "mime_type", "size", "checksum", "created_at", "ordinal"],
            [revisionId, file.id, file.userId, mimeType, size, checksum, now.millis, ordinal])
        for (index, block) in blocks.enumerated() {
            try db.insert(into: "revision_blocks", ["revision_id", "idx", "user_id", "hash", "size"], [revisionId, index, file.userId, block.hash, block.size])
        }
        if let unplaced = effects.unplaced.removeValue(forKey: file.id) {
            // A new file: its row, written once, is what inserting it (version 1) and then updating its head gave.
            try db.insert(
                into: "files",
                [
                    "id", "user_id", "parent_id", "name", "mime_type", "is_folder", "size", "checksum", "head_revision_id", "version", "created_at",
                    "modified_at", "request_id",
                ],
                [
                    file.id, file.userId, file.parentId, file.name, mimeType, false, size, checksum, revisionId, file.version + 1,
                    file.createdAt.millis, modified.millis, unplaced.requestId,
                ])
        } else {
            try db.perform("""
                    UPDATE files SET head_revision_id = ?, size = ?, checksum = ?, mime_type = ?, version = version + 1, modified_at = ?
                    WHERE id = ?
                    """, [revisionId, size, checksum, mimeType, modified.millis, file.id])
        }
        try Self.recordChange(db, &effects, userId: file.userId, fileId: file.id, kind: .upsert, now: now)
        // Revisions are only ever removed, and ordinals only grow: a file whose newest ordinal is within
        // `keepLast` has nothing to prune.
        if ordinal > Int64(revisionRetention.keepLast) { try pruneRevisions(db, &effects, fileId: file.id, userId: file.userId, now: now) }
        // `file` was read (or made) in this transaction: the row now is it with the UPDATE above applied.
        var updated = file
        updated.headRevisionId = revisionId
        updated.size = size
        updated.checksum = checksum
        updated.mimeType = mimeType
        updated.version += 1
        updated.modifiedAt = Date(millis: modified.millis)
        return updated
    }

    func pruneRevisions(_ db: any SQLTransaction, _ effects: inout Effects, fileId: String, userId: String, now: Date) throws {
        let all = try db.fetchAll("SELECT id, created_at FROM revisions WHERE file_id = ? ORDER BY ordinal DESC", [fileId])
            .map { (id: try $0.get("id", as: String.self), date: Date(millis: try $0.get("created_at"))) }
        guard all.count > revisionRetention.keepLast else { return }
        let doomed = revisionRetention.prunable(all, now: now, date: \.date).map(\.id)
        guard !doomed.isEmpty else { return }
        var hashes: Set<String> = []
        for id in doomed {
            hashes.formUnion(try db.values("SELECT hash FROM revision_blocks WHERE revision_id = ?", [id], as: String.self))
            try db.perform("DELETE FROM revision_blocks WHERE revision_id = ?", [id])
            try db.perform("DELETE FROM revisions WHERE id = ?", [id])
        }
        try collectGarbage(db, &effects, userId: userId, hashes: hashes, now: now)
    }

    /// Deletes a subtree for good: rows, revisions, unreferenced blocks; a `delete` change per item.
    @discardableResult
    func purge(_ db: any SQLTransaction, _ effects: inout Effects, userId: String, rootId: String, now: Date) throws -> Int {
        let ids = try Self.subtree(db, rootId: rootId)
        var hashes: Set<String> = []
        for id in ids {
            let revisionIds = try db.values("SELECT id FROM revisions WHERE file_id = ?", [id], as: String.self)
            for revisionId in revisionIds {
                hashes.formUnion(try db.values("SELECT hash FROM revision_blocks WHERE revision_id = ?", [revisionId], as: String.self))
                try db.perform("DELETE FROM revision_blocks WHERE revision_id = ?", [revisionId])
            }
            try db.perform("DELETE FROM revisions WHERE file_id = ?", [id])
            try db.perform("DELETE FROM dav_properties WHERE file_id = ?", [id])
            try db.perform("DELETE FROM files WHERE id = ?", [id])
            try Self.recordChange(db, &effects, userId: userId, fileId: id, kind: .delete, now: now)
        }
        try collectGarbage(db, &effects, userId: userId, hashes: hashes, now: now)
        return ids.count
    }

    // MARK: Row mapping

    static func user(_ row: SQLRow) throws -> UserRecord {
        UserRecord(
            id: try row.get("id"), username: try row.get("username"), passwordHash: try row.get("password_hash"), quotaLimit: try row.get("quota_limit"),
            usedBytes: try row.get("used_bytes"), rootId: try row.get("root_id"), createdAt: Date(millis: try row.get("created_at")))
    }

    static func device(_ row: SQLRow) throws -> DeviceRecord {
        DeviceRecord(
            id: try row.get("id"), userId: try row.get("user_id"), name: try row.get("name"), refreshHash: try row.get("refresh_hash"),
            lastUsedAt: Date(millis: try row.get("last_used_at")), revokedAt: (try row.get("revoked_at", as: Int64?.self)).map(Date.init(millis:)))
    }

    static func file(_ row: SQLRow) throws -> FileRecord {
        FileRecord(
            id: try row.get("id"), userId: try row.get("user_id"), parentId: try row.get("parent_id"), name: try row.get("name"), mimeType: try row.get("mime_type"),
            isFolder: try row.get("is_folder"), size: try row.get("size"), checksum: try row.get("checksum"), headRevisionId: try row.get("head_revision_id"),
            version: try row.get("version"), treeVersion: try row.get("tree_version"), trashRoot: try row.get("trash_root"), trashedAt: (try row.get("trashed_at", as: Int64?.self)).map(Date.init(millis:)),
            createdAt: Date(millis: try row.get("created_at")), modifiedAt: Date(millis: try row.get("modified_at")))
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
