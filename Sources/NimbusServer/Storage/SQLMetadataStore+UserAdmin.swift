import Foundation
import NimbusAPI

/// An account as the operator sees it (`nimbus user list`).
public struct UserSummary: Sendable, Codable, Equatable {
    public var id: String
    public var username: String
    /// Bytes; nil: unlimited.
    public var quota: Int64?
    public var used: Int64
    /// Devices signed in now (not signed out).
    public var devices: Int
    public var appPasswords: Int
    /// The latest time a device refreshed its tokens or an app password signed in (nil: never since it was made).
    public var lastSeen: Date?
    public var createdAt: Date
    public var disabled: Bool
}

/// The operator's account commands: list, disable and enable, remove. They run on the store a server may be
/// running on at the same time (another process on the same SQLite file, or another client of the same PostgreSQL):
/// every effect is in the database, which the server reads on each request.
extension SQLMetadataStore {
    /// Every account by name, or the one with `id`.
    func userSummaries(id: String? = nil) async throws -> [UserSummary] {
        try await database.read { db in
            try db.fetchAll(
                """
                SELECT users.*,
                    (SELECT COUNT(*) FROM devices WHERE devices.user_id = users.id AND devices.revoked_at IS NULL) AS live_devices,
                    (SELECT MAX(last_used_at) FROM devices WHERE devices.user_id = users.id) AS device_seen,
                    (SELECT COUNT(*) FROM app_passwords WHERE app_passwords.user_id = users.id) AS app_passwords,
                    (SELECT MAX(last_used_at) FROM app_passwords WHERE app_passwords.user_id = users.id) AS app_seen
                FROM users \(id == nil ? "" : "WHERE id = ? ")ORDER BY username
                """, id.map { [$0] } ?? []
            ).map { row in
                let user = try Self.user(row)
                let seen = [try row.get("device_seen", as: Int64?.self), try row.get("app_seen", as: Int64?.self)].compactMap { $0 }.max()
                return UserSummary(
                    id: user.id, username: user.username, quota: user.quotaLimit, used: user.usedBytes,
                    devices: Int(try row.get("live_devices", as: Int64.self)), appPasswords: Int(try row.get("app_passwords", as: Int64.self)),
                    lastSeen: seen.map(Date.init(millis:)), createdAt: user.createdAt, disabled: user.disabledAt != nil)
            }
        }
    }

    /// Disables (`disabled`) or enables the account. Its devices and app passwords stay as they are: refused while
    /// it is disabled (each request reads the flag with its device), working again once it is enabled. Returns
    /// whether anything changed.
    func setDisabled(userId: String, _ disabled: Bool, now: Date) async throws -> Bool {
        try await write(user: userId) { db, _ in
            try db.execute(
                disabled ? "UPDATE users SET disabled_at = ? WHERE id = ? AND disabled_at IS NULL" : "UPDATE users SET disabled_at = NULL WHERE id = ? AND disabled_at IS NOT NULL",
                disabled ? [now.millis, userId] : [userId]) > 0
        }
    }

    /// Removes the account and everything it holds: its files, revisions, trash, feed, devices, app passwords, links
    /// and shares (grantees of its shares see them go, in their feeds, as when a share ends; shares it had accepted
    /// leave its tree with it). Its blocks are freed, and the sweep deletes them and their packs after the usual
    /// grace period. Returns how many of its files and folders went.
    func removeUser(userId: String, now: Date) async throws -> Int {
        try await write(user: userId) { db, effects in
            for grant in try db.fetchAll("SELECT * FROM grants WHERE owner_id = ? OR grantee_id = ?", [userId, userId]).map(Self.grant) {
                try db.lockUser(grant.ownerId == userId ? grant.granteeId : grant.ownerId)
                if grant.ownerId == userId {
                    try Self.unmount(db, &effects, grantId: grant.id, now: now)
                } else {
                    try db.perform("DELETE FROM mounts WHERE grant_id = ?", [grant.id])
                }
                try db.perform("DELETE FROM grants WHERE id = ?", [grant.id])
            }
            let items = try db.value("SELECT COUNT(*) FROM files WHERE user_id = ? AND parent_id IS NOT NULL", [userId], as: Int64.self) ?? 0
            try db.perform("UPDATE blocks SET orphaned_at = ?, freed = 1 WHERE user_id = ? AND orphaned_at IS NULL", [now.millis, userId])
            // Others' stars and "opened" marks on its files (a grantee's), then its own rows.
            for table in ["stars", "opened"] {
                try db.perform("DELETE FROM \(table) WHERE file_id IN (SELECT id FROM files WHERE user_id = ?)", [userId])
            }
            for table in Self.userTables {
                try db.perform("DELETE FROM \(table) WHERE user_id = ?", [userId])
            }
            try db.perform("DELETE FROM links WHERE owner_id = ?", [userId])
            try db.perform("DELETE FROM users WHERE id = ?", [userId])
            effects.changed[userId] = nil
            effects.userSeqs[userId] = nil
            effects.usedBytes[userId] = nil
            return Int(items)
        }
    }

    /// The tables whose rows belong to one user by `user_id` (children before what they name). `blocks` and `packs`
    /// are not here: the sweep deletes them with their bytes.
    static let userTables = [
        "revision_blocks", "upload_blocks", "thumbnails", "revisions", "changes", "uploads", "dav_upload_chunks", "dav_uploads", "dav_locks",
        "dav_properties", "deletion_log", "deletion_guard", "stars", "opened", "activity", "mounts", "app_passwords", "devices", "login_flows",
        "files",
    ]
}
