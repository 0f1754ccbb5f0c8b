import Foundation
import GRDB
import NimbusAPI

/// The executor: runs queued operations in order, a few transfers at once, with dependencies, retries and backoff.
extension SyncEngine {
    /// What running an operation came to.
    enum Outcome {
        /// Done on the server; the operation stays (replayed in the view) until a pull confirms it.
        case applied
        /// Nothing more to do (e.g. a download, or deleting what is already gone).
        case finished
        /// Try again now with a changed payload (conflict handling), without counting an attempt.
        case again
        /// Held for the user (conflict, unsynced): the operation stays parked.
        case parked
    }

    /// The next operation that may run now: pending, due, and with nothing it depends on still queued.
    /// Operations others wait for (`blocking`) go first, then the oldest. The walk follows the
    /// `operations_runnable` index in that order and stops at the first that qualifies, so a pick costs what it
    /// skips, not the queue's length. (`CROSS JOIN` pins the dependency check's join order to the indexes.)
    func nextRunnable() throws -> OperationRow? {
        let arguments = try runnableArguments()
        return try database.pool.read { db in
            try Row.fetchOne(
                db.cachedStatement(
                    sql: "SELECT o.* FROM operations o INDEXED BY operations_runnable WHERE \(Self.runnable) ORDER BY o.blocking DESC, o.seq LIMIT 1"),
                arguments: arguments
            ).map(OperationRow.init(row:))
        }
    }

    /// What makes operation `o` runnable now (``runnableArguments()`` binds it): pending, due, not running, and
    /// nothing it depends on still queued.
    static let runnable = """
        o.state = 'pending' AND o.next_attempt_at <= ? AND o.id NOT IN (SELECT value FROM json_each(?))
        AND NOT EXISTS (
            SELECT 1 FROM operation_dependencies x CROSS JOIN operations d ON d.id = x.depends_on
            WHERE x.operation_id = o.id AND d.state IN ('pending', 'parked', 'failed'))
        """

    /// Now, and the operations running, for ``runnable``.
    func runnableArguments() throws -> StatementArguments {
        [now.millis, String(decoding: try JSONEncoder().encode(Array(inFlight)), as: UTF8.self)]
    }

    /// When the earliest waiting operation becomes due (for the run loop's sleep).
    func nextDueDate() throws -> Date? {
        try database.pool.read { db in
            try Int64.fetchOne(db, sql: "SELECT MIN(next_attempt_at) FROM operations WHERE state = 'pending'").map(Date.init(millis:))
        }
    }

    /// Runs one operation if one is runnable; `false` if there was nothing to do.
    @discardableResult
    public func runNextOperation() async throws -> Bool {
        let client = try requireClient()
        guard mayRun, let operation = try nextRunnable() else { return false }
        claim(operation)
        try await run(operation, client)
        return true
    }

    /// Whether the phase lets operations run (not signed out, not waiting for a sign-in or a confirmation).
    var mayRun: Bool {
        switch phase {
        case .idle, .syncing, .offline: true
        default: false
        }
    }

    /// Runs every operation that can run now, up to ``SyncConfiguration/maxConcurrentOperations`` at once;
    /// `true` if any ran. The order is the queue's (blockers first, then by age); a transfer starts beside
    /// other transfers, but never beside another operation on its item or beside a change to names and folders,
    /// and such a change waits until nothing else runs. So overlapping never reorders what order means.
    func runOperations() async throws -> Bool {
        let width = max(1, configuration.maxConcurrentOperations)
        let client = try requireClient()
        var ran = false
        try await withThrowingTaskGroup(of: Void.self) { group in
            var running = 0
            while true {
                while running < width, mayRun, let operation = try nextRunnable(), canStart(operation) {
                    let batch = try batchable(with: operation)
                    for member in batch { claim(member) }
                    running += 1
                    ran = true
                    if batch.count > 1 {
                        group.addTask { try await self.runBatch(batch, client) }
                    } else {
                        group.addTask { try await self.run(operation, client) }
                    }
                }
                guard running > 0 else { break }
                try await group.next()
                running -= 1
            }
        }
        return ran
    }

    /// Whether `operation` (the next in queue order) may start beside those running now.
    func canStart(_ operation: OperationRow) -> Bool {
        guard !running.isEmpty else { return true }
        guard operation.kind.isTransfer else { return false }
        return !running.values.contains { !$0.isTransfer || $0.luid == operation.luid }
    }

    func claim(_ operation: OperationRow) {
        running[operation.id] = RunningOperation(luid: operation.luid, isTransfer: operation.kind.isTransfer)
    }

    func run(_ operation: OperationRow, _ client: ServerClient) async throws {
        defer {
            running[operation.id] = nil
            progress[operation.luid] = nil
        }
        do {
            var outcome = try await execute(operation, client)
            var rounds = 0
            while case .again = outcome, rounds < 5 {
                rounds += 1
                guard let fresh = try await database.pool.read({ db in
                    try Row.fetchOne(db, sql: "SELECT * FROM operations WHERE id = ?", arguments: [operation.id]).map(OperationRow.init(row:))
                }), fresh.state == .pending else { outcome = .finished; break }
                outcome = try await execute(fresh, client)
            }
            try await finish(operation, outcome)
            trace("\(operation.kind) \(operation.id.prefix(6)) \(operation.luid.prefix(8)) → \(outcome)")
            if case .offline = phase { phase = .idle }
        } catch let error as SyncError {
            trace("\(operation.kind) \(operation.luid.prefix(8)) → \(error)")
            try await failed(operation, error)
        } catch is CancellationError {
            throw CancellationError()
        } catch {
            try await failed(operation, .localFile("\(error)"))
        }
        notifyChanged()
    }

    func finish(_ operation: OperationRow, _ outcome: Outcome) async throws {
        try await database.pool.write { db in
            switch outcome {
            case .applied:
                try self.markApplied(db, operation.id, generation: try self.pullGeneration(db))
            case .finished, .again:
                try db.execute(sql: "DELETE FROM operations WHERE id = ?", arguments: [operation.id])
                try self.reconcile(db, operation.luid)
            case .parked:
                try db.execute(sql: "UPDATE operations SET state = 'parked' WHERE id = ?", arguments: [operation.id])
            }
            try db.execute(sql: "DELETE FROM upload_sessions WHERE operation_id = ?", arguments: [operation.id])
        }
    }

    /// The pull round an operation applied now must be older than to be confirmed (see ``confirmOperations``).
    nonisolated func pullGeneration(_ db: Database) throws -> Int64 { Int64(try db.meta("pullGeneration") ?? "0") ?? 0 }

    /// Done on the server: kept, replayed in the view, until a pull after `generation` confirms it.
    nonisolated func markApplied(_ db: Database, _ operationId: String, generation: Int64) throws {
        try db.cachedStatement(sql: "UPDATE operations SET state = 'applied', applied_generation = ?, last_error = NULL WHERE id = ?")
            .execute(arguments: [generation, operationId])
    }

    /// A failure: retried later with backoff if it can succeed by itself, else the operation goes to `failed`.
    /// A 401 pauses everything until the user signs in again.
    func failed(_ operation: OperationRow, _ error: SyncError) async throws {
        if case .unauthorized = error {
            phase = .needsSignIn
            return
        }
        if case .network = error { phase = .offline }
        let attempts = operation.attempts + 1
        var retryAfter: Int?
        if case .server(_, _, _, let after) = error { retryAfter = after }
        let delay = Backoff.delay(
            attempt: attempts - 1, base: configuration.backoffBase, cap: configuration.backoffCap, retryAfter: retryAfter, random: &random)
        let giveUp = !error.isRetryable || attempts >= configuration.maxAttempts
        let next = now.addingTimeInterval(delay).millis
        try await database.pool.write { db in
            try db.execute(
                sql: "UPDATE operations SET attempts = ?, next_attempt_at = ?, last_error = ?, state = ? WHERE id = ?",
                arguments: [attempts, next, error.description, giveUp ? "failed" : "pending", operation.id])
        }
    }

    // MARK: Executing each kind

    func execute(_ operation: OperationRow, _ client: ServerClient) async throws -> Outcome {
        guard let row = try await database.pool.read({ db in try ItemRow.fetch(db, luid: operation.luid) }) else { return .finished }
        switch operation.kind {
        case .createFolder: return try await createFolder(operation, row, client)
        case .upload: return try await upload(operation, row, client)
        case .rename, .move: return try await patch(operation, row, client)
        case .delete: return try await trash(operation, row, client)
        case .restore: return try await restoreRevision(operation, row, client)
        case .download: return try await download(operation, row, client)
        }
    }

    /// The server id of an item the operation needs (its parent, say); the dependency order guarantees it
    /// unless that item was since deleted.
    func serverId(_ luid: String?) async throws -> String {
        guard let luid else { throw SyncError.invalid("Missing folder.") }
        if luid == ItemID.root.rawValue, let client {
            try await mapRoot(client)
        }
        guard let fileId = try await database.pool.read({ db in try ItemRow.fetch(db, luid: luid)?.fileId }) else {
            throw SyncError.invalid("A folder this change needs is not on the server (it may have been deleted).")
        }
        return fileId
    }

    func createFolder(_ operation: OperationRow, _ row: ItemRow, _ client: ServerClient) async throws -> Outcome {
        guard row.lPresent else { return .finished }
        if row.fileId != nil, row.rPresent { return .applied }  // adopted from the feed: it exists already
        let parentId = try await serverId(operation.payload.parent)
        let name = operation.payload.name ?? row.lName ?? "Folder"
        let body = CreateFileRequest(name: name, mimeType: folderMimeType, parentId: parentId, requestId: operation.id)
        let (head, data) = try await client.authorized(
            TransportRequest(method: "POST", path: "/v1/files", body: try JSONEncoder.nimbus.encode(body)), json: true)
        if head.status == 409, let existingId = ServerClient.errorBody(data)?.error.existingId {
            let existing: File = try await client.call("GET", "/v1/files/\(existingId)")
            if existing.isFolder {
                // Two devices made the same folder: they are one folder.
                try await claim(existing, for: row.luid)
                return .applied
            }
            try await renameLocally(row.luid, operation, to: FileName.conflictCopy(name, device: configuration.deviceName, date: now))
            return .again
        }
        try ServerClient.check(head, data)
        try await claim(try ServerClient.decode(File.self, data), for: row.luid)
        return .applied
    }

    func patch(_ operation: OperationRow, _ row: ItemRow, _ client: ServerClient) async throws -> Outcome {
        guard let fileId = row.fileId, row.lPresent || row.flag != nil else { return .finished }
        var body = UpdateFileRequest()
        if operation.kind == .rename {
            body.name = operation.payload.name
        } else {
            body.parentId = try await serverId(operation.payload.parent)
            body.name = operation.payload.name  // set when a name clash there made it take a new name
        }
        let (head, data) = try await client.authorized(
            TransportRequest(method: "PATCH", path: "/v1/files/\(fileId)", body: try JSONEncoder.nimbus.encode(body)), json: true)
        trace("PATCH \(fileId) \(body) → \(head.status) \(String(decoding: data.prefix(120), as: UTF8.self))")
        switch head.status {
        case 404:
            return .finished  // deleted elsewhere: the pull decides what the item becomes
        case 400 where ServerClient.errorBody(data)?.error.code == "invalid_move":
            return .finished  // another device's move made this one a cycle: theirs stands
        case 400 where ServerClient.errorBody(data)?.error.code == "trashed":
            return .finished
        case 409:
            // The name is taken there: keep both, under a numbered name.
            let name = operation.kind == .rename ? (operation.payload.name ?? "") : (row.lName ?? "")
            try await renameLocally(row.luid, operation, to: FileName.numbered(name, operation.attempts + 1))
            return .again
        default:
            try ServerClient.check(head, data)
            try await recordRemote(try ServerClient.decode(File.self, data), for: row.luid)
            return .applied
        }
    }

    func trash(_ operation: OperationRow, _ row: ItemRow, _ client: ServerClient) async throws -> Outcome {
        guard let fileId = row.fileId else { return .finished }
        let (head, data) = try await client.authorized(TransportRequest(method: "DELETE", path: "/v1/files/\(fileId)"))
        if head.status == 404 { return .finished }
        try ServerClient.check(head, data)
        return .applied
    }

    func restoreRevision(_ operation: OperationRow, _ row: ItemRow, _ client: ServerClient) async throws -> Outcome {
        guard let fileId = row.fileId, let revisionId = operation.payload.revisionId else { return .finished }
        let file: File = try await client.call("POST", "/v1/files/\(fileId)/revisions/\(revisionId)/restore")
        try await recordRemote(file, for: row.luid)
        try await database.pool.write { db in
            guard var item = try ItemRow.fetch(db, luid: row.luid) else { return }
            item.lChecksum = file.checksum
            item.lSize = file.size
            item.lModified = file.modifiedAt.millis
            try item.save(db)
        }
        return .applied
    }

    // MARK: Local consequences

    /// Records that `luid` is the server's `file`: sets the id (merging a duplicate row the feed may have
    /// made for it, e.g. after a crash between the server's commit and ours) and the remote state.
    func claim(_ file: File, for luid: String) async throws {
        try await database.pool.write { db in try self.claim(db, file, for: luid) }
    }

    nonisolated func claim(_ db: Database, _ file: File, for luid: String) throws {
        if let other = try ItemRow.luid(db, fileId: file.id), other != luid {
            try merge(db, from: other, into: luid)
        }
        guard let stored = try ItemRow.fetch(db, luid: luid) else { return }
        var row = stored
        row.setRemote(file, parentLuid: try parentLuid(db, file))
        try row.update(db, from: stored)
    }

    func recordRemote(_ file: File, for luid: String) async throws {
        try await database.pool.write { db in
            guard var row = try ItemRow.fetch(db, luid: luid) else { return }
            row.setRemote(file, parentLuid: try self.parentLuid(db, file))
            try row.save(db)
        }
    }

    /// Folds row `from` into `into`: children, operations and references move over; `from` goes.
    nonisolated func merge(_ db: Database, from: String, into: String) throws {
        try db.execute(sql: "UPDATE items SET l_parent = ? WHERE l_parent = ?", arguments: [into, from])
        try db.execute(sql: "UPDATE items SET r_parent = ? WHERE r_parent = ?", arguments: [into, from])
        try db.execute(sql: "UPDATE items SET s_parent = ? WHERE s_parent = ?", arguments: [into, from])
        try db.execute(sql: "UPDATE operations SET luid = ? WHERE luid = ?", arguments: [into, from])
        try db.execute(sql: "UPDATE operations SET payload = REPLACE(payload, ?, ?)", arguments: ["\"\(from)\"", "\"\(into)\""])
        if let path = try String.fetchOne(db, sql: "SELECT content_path FROM items WHERE luid = ?", arguments: [from]),
            try String.fetchOne(db, sql: "SELECT content_path FROM items WHERE luid = ?", arguments: [into]) == nil
        {
            try db.execute(
                sql: "UPDATE items SET content_path = ?, content_checksum = (SELECT content_checksum FROM items WHERE luid = ?) WHERE luid = ?",
                arguments: [path, from, into])
        }
        try db.execute(sql: "DELETE FROM items WHERE luid = ?", arguments: [from])
    }

    /// Gives an item a new name in the view and in the operation that will create or rename it.
    func renameLocally(_ luid: String, _ operation: OperationRow, to name: String) async throws {
        try await database.pool.write { db in
            guard var row = try ItemRow.fetch(db, luid: luid) else { return }
            row.lName = name
            try row.save(db)
            var payload = operation.payload
            payload.name = name
            try OperationRow.updatePayload(db, id: operation.id, payload)
        }
    }
}
