import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NimbusAPI

/// Accounts and devices: users, devices and their refresh tokens, login failures, app passwords, shared settings.
extension SQLMetadataStore {
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
            try db.fetchOne(Self.deviceWithUser + "WHERE devices.id = ?", [id]).map(Self.device)
        }
    }

    /// A device row with its user's `disabled_at` as `user_disabled_at` (then a WHERE on `devices.`).
    static let deviceWithUser = "SELECT devices.*, users.disabled_at AS user_disabled_at FROM devices JOIN users ON users.id = devices.user_id "

    func rotateRefreshToken(presentedHash: String, newHash: String, now: Date, maxIdle: TimeInterval, grace: TimeInterval) async throws -> DeviceRecord {
        // Locked on the token: two replicas refreshing the same token at once serialize, so the second sees it
        // rotated away (a replay) exactly as on one replica.
        let rotated = try await write(user: "refresh:" + presentedHash) { db, _ -> DeviceRecord? in
            if let row = try db.fetchOne(Self.deviceWithUser + "WHERE devices.refresh_hash = ?", [presentedHash]) {
                var device = try Self.device(row)
                guard device.revokedAt == nil else { throw DriveError.unauthorized("This device was signed out; log in again.") }
                guard !device.userDisabled else { throw DriveError.accountDisabled }
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

    static let appPasswordLimit = 100

    func createAppPassword(userId: String, label: String, passwordHash: String, now: Date) async throws -> AppPasswordRecord {
        try await write(user: userId) { db, _ in
            try Self.insertAppPassword(db, userId: userId, label: label, passwordHash: passwordHash, now: now)
        }
    }

    /// A new app password row, within the per-user limit (409 beyond it).
    static func insertAppPassword(_ db: any SQLTransaction, userId: String, label: String, passwordHash: String, now: Date) throws -> AppPasswordRecord {
        let count = try db.value("SELECT COUNT(*) FROM app_passwords WHERE user_id = ?", [userId], as: Int64.self) ?? 0
        guard count < appPasswordLimit else {
            throw DriveError.conflict("This account has \(appPasswordLimit) app passwords; revoke one you no longer use first (Settings in the web app).")
        }
        let record = AppPasswordRecord(id: "ap" + randomToken(), userId: userId, label: label, passwordHash: passwordHash, createdAt: now)
        try db.perform(
            "INSERT INTO app_passwords (id, user_id, label, password_hash, created_at) VALUES (?, ?, ?, ?, ?)",
            [record.id, userId, label, passwordHash, now.millis])
        return record
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
}
