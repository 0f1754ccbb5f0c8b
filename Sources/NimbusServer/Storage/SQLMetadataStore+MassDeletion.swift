import Foundation
import NimbusAPI

/// Who asks for a deletion, and the breaker's limits for it (`nil` where no device asks: the trash's retention).
struct Deleter: Sendable {
    var deviceId: String
    var limits: MassDeletionLimits
}

/// The mass-deletion breaker (``MassDeletionLimits``), checked inside the deletion's own transaction under the
/// user's lock, so parallel requests of one device cannot slip past it together. A refused request changes
/// nothing but the pause it records.
extension SQLMetadataStore {
    /// What a guarded deletion's transaction came to: done, or refused with the breaker's message.
    enum Guarded<T: Sendable>: Sendable {
        case done(T)
        case paused(String)

        func get() throws -> T {
            switch self {
            case .done(let value): return value
            case .paused(let message): throw DriveError.conflict(message, code: .massDeletionPaused)
            }
        }
    }

    /// Admits `items` deletions by `deleter` (recording them) or pauses the device and says why.
    static func admitDeletion(_ db: any SQLTransaction, userId: String, deleter: Deleter?, items: Int, now: Date) throws -> String? {
        guard let deleter, deleter.limits.enabled, items > 0 else { return nil }
        let limits = deleter.limits
        let state = try db.fetchOne(
            "SELECT paused_at, confirmed_until FROM deletion_guard WHERE user_id = ? AND device_id = ?", [userId, deleter.deviceId])
        let confirmedUntil = try state?.get("confirmed_until", as: Int64?.self)
        if (confirmedUntil.map { $0 <= now.millis }) ?? true {
            if try state?.get("paused_at", as: Int64?.self) != nil {
                return Self.pausedMessage
            }
            let since = now.addingTimeInterval(-limits.window.timeInterval).millis
            let recent = try db.value(
                "SELECT CAST(COALESCE(SUM(items), 0) AS BIGINT) FROM deletion_log WHERE user_id = ? AND device_id = ? AND at > ?", [userId, deleter.deviceId, since],
                as: Int64.self) ?? 0
            let deleted = Int(recent) + items
            // Counting the user's items costs a scan of their rows: only done once the count could matter.
            if limits.mayTrip(deleted: deleted) {
                let live = try db.value(
                    "SELECT COUNT(*) FROM files WHERE user_id = ? AND trash_root IS NULL AND parent_id IS NOT NULL", [userId], as: Int64.self) ?? 0
                if limits.trips(deleted: deleted, before: Int(live + recent)) {
                    try db.perform(
                        """
                        INSERT INTO deletion_guard (user_id, device_id, paused_at, paused_items, confirmed_until) VALUES (?, ?, ?, ?, NULL)
                        ON CONFLICT (user_id, device_id) DO UPDATE SET paused_at = excluded.paused_at, paused_items = excluded.paused_items,
                            confirmed_until = NULL
                        """, [userId, deleter.deviceId, now.millis, deleted])
                    return Self.pausedMessage
                }
            }
        }
        try db.perform("INSERT INTO deletion_log (user_id, device_id, at, items) VALUES (?, ?, ?, ?)", [userId, deleter.deviceId, now.millis, items])
        return nil
    }

    static let pausedMessage =
        "This device deleted many of your files in a short time, so the server paused its deletions (nothing more was deleted). "
        + "If that was meant, confirm with 'nimbus trash confirm' or in the web app's Trash; otherwise restore what went with "
        + "'nimbus untrash --since TIME'."

    func deletionPauses(userId: String) async throws -> [DeletionPause] {
        try await database.read { db in try Self.pauses(db, userId: userId) }
    }

    static func pauses(_ db: any SQLTransaction, userId: String) throws -> [DeletionPause] {
        try db.fetchAll(
            "SELECT device_id, paused_at, paused_items FROM deletion_guard WHERE user_id = ? AND paused_at IS NOT NULL ORDER BY paused_at, device_id",
            [userId]
        ).map { row in
            let deviceId = try row.get("device_id", as: String.self)
            var name: String?
            if let passwordId = Principal.appPasswordId(deviceId) {
                name = try db.value("SELECT label FROM app_passwords WHERE id = ? AND user_id = ?", [passwordId, userId], as: String.self)
            } else {
                name = try db.value("SELECT name FROM devices WHERE id = ? AND user_id = ?", [deviceId, userId], as: String.self)
            }
            return DeletionPause(
                deviceId: deviceId, deviceName: name, deletions: try row.get("paused_items"), pausedAt: Date(millis: try row.get("paused_at")))
        }
    }

    /// Lets every paused device of the user go on, each for one more window; returns the pauses lifted.
    func confirmDeletions(userId: String, window: Duration, now: Date) async throws -> [DeletionPause] {
        try await write(user: userId) { db, _ in
            let paused = try Self.pauses(db, userId: userId)
            for pause in paused {
                try db.perform(
                    "UPDATE deletion_guard SET paused_at = NULL, paused_items = 0, confirmed_until = ? WHERE user_id = ? AND device_id = ?",
                    [now.addingTimeInterval(window.timeInterval).millis, userId, pause.deviceId])
                try db.perform("DELETE FROM deletion_log WHERE user_id = ? AND device_id = ?", [userId, pause.deviceId])
            }
            return paused
        }
    }

    /// Restores every item trashed at or after `since` (the latest first, so a folder is back before what was
    /// trashed from it earlier returns into it), in transactions of a few hundred.
    func untrashAll(userId: String, since: Date, now: Date) async throws -> (restored: Int, items: Int) {
        var restored = 0
        var items = 0
        while true {
            let batch = try await write(user: userId) { db, effects -> (restored: Int, items: Int) in
                let roots = try db.values(
                    "SELECT id FROM files WHERE user_id = ? AND trash_root = id AND trashed_at >= ? ORDER BY trashed_at DESC, id LIMIT 200",
                    [userId, since.millis], as: String.self)
                var count = 0
                for id in roots { count += try self.untrash(db, &effects, userId: userId, fileId: id, now: now).items }
                return (roots.count, count)
            }
            restored += batch.restored
            items += batch.items
            if batch.restored < 200 { return (restored, items) }
        }
    }

    /// Forgets deletions older than every window.
    func pruneDeletionLog(before: Date) async throws -> Int {
        try await write { db, _ in
            try db.execute("DELETE FROM deletion_log WHERE at < ?", [before.millis])
                + db.execute("DELETE FROM deletion_guard WHERE paused_at IS NULL AND (confirmed_until IS NULL OR confirmed_until < ?)", [before.millis])
        }
    }
}
