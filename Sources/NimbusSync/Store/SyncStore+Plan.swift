import Foundation
import GRDB

/// What planning and its admission ask of the store: the retry schedule (``FailureRow``), creations in doubt and
/// creations marked as sent.
extension StoreTransaction {
    // MARK: The retry schedule

    /// Every item's retry schedule, by LUID.
    func failures() throws -> [String: FailureRow] { try FailureRow.all(db) }

    /// How many times each of `luids` has failed so far (absent: never).
    func attempts(of luids: [String]) throws -> [String: Int] { try FailureRow.attempts(db, of: luids) }

    func recordFailures(_ failures: [FailureRow]) throws {
        for failure in failures { try failure.save(db) }
    }

    /// The retry schedules of these items are over (their steps succeeded, or are moot).
    func clearFailures(_ luids: [String]) throws {
        let statement = try db.cachedStatement(sql: "DELETE FROM failures WHERE luid = ?")
        for luid in luids { try statement.execute(arguments: [luid]) }
    }

    /// An item failed for good may go again (the user changed it); a step waiting out a backoff keeps waiting.
    func clearFailedForGood(_ luid: String) throws {
        try db.execute(sql: "DELETE FROM failures WHERE luid = ? AND failed = 1", arguments: [luid])
    }

    /// Forgets every retry schedule; returns how many there were.
    func clearAllFailures() throws -> Int {
        try db.execute(sql: "DELETE FROM failures")
        return db.changesCount
    }

    /// Every step waiting out a backoff is due now (what made them fail, a sign-in, is over).
    func retryWaitingNow() throws {
        try db.execute(sql: "UPDATE failures SET next_attempt_at = 0 WHERE failed = 0")
    }

    /// Steps waiting out a backoff (not failed for good): how many, and when the first is due.
    func waitingRetries() throws -> (count: Int, next: Date?) {
        let row = try Row.fetchOne(db, sql: "SELECT COUNT(*), MIN(next_attempt_at) FROM failures WHERE failed = 0")
        return (row?[0] ?? 0, (row?[1] as Int64?).map(Date.init(millis:)))
    }

    /// The items whose steps failed for good, with the last error.
    func failedForGood() throws -> [(luid: String, message: String?)] {
        let cipher = db.storeCipher
        return try Row.fetchAll(db, sql: "SELECT luid, last_error FROM failures WHERE failed = 1").map { row in
            let stored: String? = row[1]
            return (row[0], try cipher.map { cipher in try stored.map { try cipher.openText($0) } } ?? stored)
        }
    }

    // MARK: Creations

    /// Whether anything at or under `luid` in the local tree has a change to send (``ItemRow/pendingExpression``).
    func hasChangesHere(under luid: String) throws -> Bool {
        try Bool.fetchOne(
            db,
            sql: """
                WITH RECURSIVE tree(luid) AS (
                    SELECT ? UNION ALL SELECT items.luid FROM items JOIN tree ON items.l_parent = tree.luid WHERE items.l_present = 1)
                SELECT EXISTS(SELECT 1 FROM items JOIN tree ON items.luid = tree.luid WHERE \(ItemRow.pendingExpression))
                """,
            arguments: [luid]) ?? false
    }

    /// Marks these creations as sent, each with a request id (its own, or a new one from `newRequestId`).
    func markCreationsSent(_ luids: [String], newRequestId: () -> String) throws {
        let statement = try db.cachedStatement(
            sql: """
                UPDATE items SET create_request = COALESCE(create_request, ?), create_sent = 1
                WHERE luid = ? AND file_id IS NULL AND source_revision IS NULL
                """)
        for luid in luids { try statement.execute(arguments: [newRequestId(), luid]) }
    }

    /// Marks one creation as sent with `request`.
    func markCreationSent(_ luid: String, request: String) throws {
        try db.cachedStatement(sql: "UPDATE items SET create_request = ?, create_sent = 1 WHERE luid = ?").execute(arguments: [request, luid])
    }

    /// A creation found not to have been made: not sent, and, with `request`, under a new request id.
    func markCreationUnsent(_ luid: String, request: String? = nil) throws {
        if let request {
            try db.execute(sql: "UPDATE items SET create_request = ?, create_sent = 0 WHERE luid = ?", arguments: [request, luid])
        } else {
            try db.execute(sql: "UPDATE items SET create_sent = 0 WHERE luid = ?", arguments: [luid])
        }
    }

    /// The new version being sent of `luid` (`<checksum> <request id>`: a resumable session is found again by it).
    func markUploadRequest(_ luid: String, _ request: String) throws {
        try db.execute(sql: "UPDATE items SET upload_request = ? WHERE luid = ?", arguments: [request, luid])
    }

    /// New files that could go in a batch: size and local parent of each of `luids` that is a plain new file (no
    /// id there, not a restore).
    func newFileSizes(_ luids: [String]) throws -> [String: (size: Int64, parent: String)] {
        var small: [String: (size: Int64, parent: String)] = [:]
        let statement = try db.cachedStatement(sql: "SELECT l_size, l_parent FROM items WHERE luid = ? AND source_revision IS NULL AND file_id IS NULL")
        for luid in luids {
            if let row = try Row.fetchOne(statement, arguments: [luid]), let size = row[0] as Int64? {
                small[luid] = (size, row[1] as String? ?? "")
            }
        }
        return small
    }

    /// The items waiting for the user (or with the user's answer not yet carried out), with their hold.
    func holds() throws -> [(luid: String, hold: Hold)] {
        try Row.fetchAll(db, sql: "SELECT luid, flag FROM items WHERE flag IS NOT NULL").compactMap { row in
            Hold(rawValue: row[1] as String).map { (row[0] as String, $0) }
        }
    }

    /// Every item but the root (diagnostics).
    func itemsButRoot() throws -> [ItemRow] { try ItemRow.fetchAll(db, where: "luid != 'root'") }
}
