import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NimbusAPI

/// WebDAV's own state: dead properties (`PROPPATCH`) and locks, kept in the database so every replica sees them.
extension SQLMetadataStore {
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
}
