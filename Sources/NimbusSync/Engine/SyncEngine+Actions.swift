import Foundation
import GRDB
import NimbusAPI

/// The user's actions: each commits locally in one transaction and returns; the network happens later.
extension SyncEngine {
    /// Creates a folder in `parent` and returns its id.
    @discardableResult
    public func createFolder(named rawName: String, in parent: ItemID = .root) throws -> ItemID {
        let name = try Self.validName(rawName)
        let id = ItemID.make()
        let now = self.now
        try database.pool.write { db in
            let parentRow = try self.liveFolder(db, parent)
            try self.checkFree(db, name: name, in: parentRow.luid, except: nil)
            var row = ItemRow.empty(id.rawValue, isFolder: true)
            row.lPresent = true
            row.lParent = parentRow.luid
            row.lName = name
            row.lMime = folderMimeType
            row.lSize = 0
            row.lModified = now.millis
            row.lastAccess = now.millis
            try row.save(db)
            _ = try OperationRow.insert(
                db, luid: id.rawValue, kind: .createFolder, payload: OperationPayload(name: name, parent: parentRow.luid),
                dependsOn: try self.creatorDependency(db, parentRow), now: now)
        }
        notifyChanged()
        return id
    }

    /// Adds a file to `folder`. With `copy` (the default) the bytes are copied into the engine's store first, so
    /// the upload is unaffected by later changes to `fileURL`; without, the upload reads `fileURL` itself.
    @discardableResult
    public func upload(
        from fileURL: URL, named rawName: String? = nil, in folder: ItemID = .root, mimeType: String? = nil, copy: Bool = true,
        checksum: String? = nil
    ) throws -> ItemID {
        let name = try Self.validName(rawName ?? fileURL.lastPathComponent)
        let staged = try stage(fileURL, copy: copy, checksum: checksum)
        let id = ItemID.make()
        let now = self.now
        do {
            try database.pool.write { db in
                let parentRow = try self.liveFolder(db, folder)
                try self.insertUpload(
                    db, id: id, name: name, folder: (parentRow, try self.creatorDependency(db, parentRow)), mimeType: mimeType, staged: staged,
                    copy: copy, now: now)
            }
        } catch {
            if copy { try? FileManager.default.removeItem(at: staged.url) }
            throw error
        }
        notifyChanged()
        return id
    }

    /// A new file for ``upload(_:)``.
    public struct NewUpload: Sendable {
        public var fileURL: URL
        public var name: String?
        public var folder: ItemID
        public var mimeType: String?
        /// The content's SHA-256 if the caller has it (it is trusted: the upload is checked against it).
        public var checksum: String?

        public init(fileURL: URL, name: String? = nil, folder: ItemID = .root, mimeType: String? = nil, checksum: String? = nil) {
            self.fileURL = fileURL
            self.name = name
            self.folder = folder
            self.mimeType = mimeType
            self.checksum = checksum
        }
    }

    /// Adds many files at once in one local transaction (a folder sync meeting a new tree): each as
    /// ``upload(from:named:in:mimeType:copy:checksum:)`` without `copy` would, in order; each succeeds or fails
    /// on its own.
    public func upload(_ files: [NewUpload]) throws -> [Result<ItemID, SyncError>] {
        var results = [Result<ItemID, SyncError>](repeating: .failure(.invalid("not queued")), count: files.count)
        var prepared: [(index: Int, name: String, staged: (url: URL, checksum: String, size: Int64))] = []
        for (index, file) in files.enumerated() {
            do {
                prepared.append((index, try Self.validName(file.name ?? file.fileURL.lastPathComponent), try stage(file.fileURL, copy: false, checksum: file.checksum)))
            } catch {
                results[index] = .failure(error as? SyncError ?? .localFile("\(error)"))
            }
        }
        let now = self.now
        try database.pool.write { db in
            // One lookup per folder, not per file: a new tree has many files per folder.
            var folders: [ItemID: (row: ItemRow, dependency: [String])] = [:]
            for entry in prepared {
                let file = files[entry.index]
                let id = ItemID.make()
                do {
                    let folder: (row: ItemRow, dependency: [String])
                    if let known = folders[file.folder] {
                        folder = known
                    } else {
                        let row = try self.liveFolder(db, file.folder)
                        folder = (row, try self.creatorDependency(db, row))
                        folders[file.folder] = folder
                    }
                    // No savepoint per file: insertUpload refuses (a SyncError) before its first write, so a refused
                    // file leaves nothing behind; any other error ends the whole transaction.
                    try self.insertUpload(
                        db, id: id, name: entry.name, folder: folder, mimeType: file.mimeType, staged: entry.staged, copy: false, now: now)
                    results[entry.index] = .success(id)
                } catch let error as SyncError {
                    results[entry.index] = .failure(error)
                }
            }
        }
        notifyChanged()
        return results
    }

    /// The local commit of a new file in a live folder (its row, and the operation its upload must wait for):
    /// its item row and its upload operation.
    func insertUpload(
        _ db: Database, id: ItemID, name: String, folder: (row: ItemRow, dependency: [String]), mimeType: String?,
        staged: (url: URL, checksum: String, size: Int64), copy: Bool, now: Date
    ) throws {
        let parentRow = folder.row
        try checkFree(db, name: name, in: parentRow.luid, except: nil)  // the only refusal, before any write
        var row = ItemRow.empty(id.rawValue, isFolder: false)
        row.lPresent = true
        row.lParent = parentRow.luid
        row.lName = name
        row.lMime = mimeType ?? MimeType.guess(forName: name)
        row.setLocalContent(staged, copy: copy, now: now)
        try row.save(db)
        let payload = OperationPayload(
            name: name, parent: parentRow.luid, mimeType: row.lMime, sourcePath: staged.url.path, ownsSource: copy,
            checksum: staged.checksum, size: staged.size)
        _ = try OperationRow.insert(db, luid: id.rawValue, kind: .upload, payload: payload, dependsOn: folder.dependency, now: now)
    }

    /// Replaces a file's content with `fileURL`'s: a new version, based on the revision this device knows
    /// (or `baseRevision`, the one the new bytes were derived from, when the caller knows better — a synced
    /// folder does). A not-yet-sent new version is replaced rather than queued behind.
    public func update(_ id: ItemID, from fileURL: URL, copy: Bool = true, baseRevision: String? = nil, checksum: String? = nil) throws {
        let staged = try stage(fileURL, copy: copy, checksum: checksum)
        let now = self.now
        let busy = inFlight
        var discard: [String] = []
        do {
            discard = try database.pool.write { db -> [String] in
                var row = try self.liveItem(db, id)
                guard !row.isFolder else { throw SyncError.invalid("'\(row.lName ?? "")' is a folder.") }
                var candidates: [String] = []
                if let old = row.contentPath, old.hasPrefix(self.stagingDirectory.path) { candidates.append(old) }
                row.setLocalContent(staged, copy: copy, now: now)
                try row.save(db)
                let waiting = try OperationRow.forItem(db, id.rawValue).last {
                    $0.kind == .upload && [.pending, .parked, .failed].contains($0.state) && !busy.contains($0.id)
                }
                if var waiting {
                    // Coalesce: the queued upload sends the newest bytes, still based on the same revision.
                    if waiting.payload.ownsSource == true, let old = waiting.payload.sourcePath { candidates.append(old) }
                    waiting.payload.sourcePath = staged.url.path
                    waiting.payload.ownsSource = copy
                    waiting.payload.checksum = staged.checksum
                    waiting.payload.size = staged.size
                    // New bytes, new request: the server must not take them for a retry of the old ones.
                    waiting.payload.requestId = UUID.random().uuidString.lowercased()
                    try OperationRow.updatePayload(db, id: waiting.id, waiting.payload)
                    try db.execute(
                        sql: "UPDATE operations SET state = CASE WHEN state = 'failed' THEN 'pending' ELSE state END, attempts = 0 WHERE id = ?",
                        arguments: [waiting.id])
                    try db.execute(sql: "DELETE FROM upload_sessions WHERE operation_id = ?", arguments: [waiting.id])
                } else {
                    // These bytes came from this device's previous version. If that one already reached the server
                    // (applied, not yet confirmed by a pull) and the caller named the revision it was based on, the
                    // new one is based on what it made; one still being sent passes its revision on when it lands
                    // (see `uploaded`). Otherwise quick successive edits would conflict with themselves.
                    var base = baseRevision ?? row.rRevision
                    if let previous = try OperationRow.forItem(db, id.rawValue).last(where: { $0.kind == .upload && $0.state == .applied }),
                        previous.payload.baseRevision == base, let head = row.rRevision
                    {
                        base = head
                    }
                    let payload = OperationPayload(
                        name: row.lName, parent: row.lParent, mimeType: row.lMime, sourcePath: staged.url.path, ownsSource: copy,
                        checksum: staged.checksum, size: staged.size, baseRevision: base)
                    _ = try OperationRow.insert(db, luid: id.rawValue, kind: .upload, payload: payload, dependsOn: try self.creatorDependency(db, row), now: now)
                }
                // Older staged copies go, unless an operation still sends them.
                return try Set(candidates).filter { try $0 != staged.url.path && !self.isStagedSourceInUse(db, $0) }
            }
        } catch {
            if copy { try? FileManager.default.removeItem(at: staged.url) }
            throw error
        }
        for path in discard { try? FileManager.default.removeItem(atPath: path) }
        notifyChanged()
    }

    /// Whether a queued upload still reads this file.
    nonisolated func isStagedSourceInUse(_ db: Database, _ path: String) throws -> Bool {
        let payloads = try String.fetchAll(db, sql: "SELECT payload FROM operations WHERE kind = 'upload'")
        return payloads.contains { text in
            (try? JSONDecoder().decode(OperationPayload.self, from: Data(text.utf8)))?.sourcePath == path
        }
    }

    public func rename(_ id: ItemID, to rawName: String) throws {
        let name = try Self.validName(rawName)
        let now = self.now
        try database.pool.write { db in
            var row = try self.liveItem(db, id)
            guard id != .root else { throw SyncError.invalid("The root folder cannot be renamed.") }
            guard row.lName != name else { return }
            try self.checkFree(db, name: name, in: row.lParent ?? "", except: row.luid)
            row.lName = name
            row.lModified = now.millis
            try row.save(db)
            _ = try OperationRow.insert(
                db, luid: id.rawValue, kind: .rename, payload: OperationPayload(name: name), dependsOn: try self.creatorDependency(db, row), now: now)
        }
        notifyChanged()
    }

    public func move(_ id: ItemID, to folder: ItemID) throws {
        let now = self.now
        try database.pool.write { db in
            var row = try self.liveItem(db, id)
            guard id != .root else { throw SyncError.invalid("The root folder cannot be moved.") }
            let target = try self.liveFolder(db, folder)
            guard row.lParent != target.luid else { return }
            var cursor: String? = target.luid
            while let current = cursor {
                if current == row.luid { throw SyncError.invalid("A folder cannot be moved into itself or one of its subfolders.") }
                cursor = try String.fetchOne(db, sql: "SELECT l_parent FROM items WHERE luid = ?", arguments: [current])
            }
            try self.checkFree(db, name: row.lName ?? "", in: target.luid, except: row.luid)
            row.lParent = target.luid
            row.lModified = now.millis
            try row.save(db)
            let dependencies = try self.creatorDependency(db, row) + self.creatorDependency(db, target)
            _ = try OperationRow.insert(
                db, luid: id.rawValue, kind: .move, payload: OperationPayload(parent: target.luid), dependsOn: dependencies, now: now)
        }
        notifyChanged()
    }

    /// Moves an item (and a folder's contents) to the server's trash.
    public func delete(_ id: ItemID) throws {
        let now = self.now
        let busy = inFlight
        var discard: [String] = []
        try database.pool.write { db in
            let row = try self.liveItem(db, id)
            guard id != .root else { throw SyncError.invalid("The root folder cannot be deleted.") }
            let subtree = try self.localSubtree(db, row.luid)
            for luid in subtree {
                guard var item = try ItemRow.fetch(db, luid: luid) else { continue }
                item.lPresent = false
                item.flag = nil
                if item.fileId == nil {
                    // Never reached the server: its queued operations simply go (unless one is being sent).
                    let operations = try OperationRow.forItem(db, luid)
                    for operation in operations where !busy.contains(operation.id) {
                        if operation.payload.ownsSource == true, let path = operation.payload.sourcePath { discard.append(path) }
                        try db.execute(sql: "DELETE FROM operations WHERE id = ?", arguments: [operation.id])
                        try db.execute(sql: "DELETE FROM upload_sessions WHERE operation_id = ?", arguments: [operation.id])
                    }
                }
                try item.save(db)
            }
            if try row.fileId != nil || OperationRow.creator(db, of: row.luid) != nil {
                _ = try OperationRow.insert(db, luid: id.rawValue, kind: .delete, payload: OperationPayload(), dependsOn: try self.creatorDependency(db, row), now: now)
            }
        }
        for path in discard { try? FileManager.default.removeItem(atPath: path) }
        notifyChanged()
    }

    /// Keeps the item's content on this device (`pinned`), downloading it if needed; unpinning lets it go.
    public func makeAvailableOffline(_ id: ItemID, pinned: Bool = true) throws {
        let now = self.now
        try database.pool.write { db in
            var row = try self.liveItem(db, id)
            guard !row.isFolder else { throw SyncError.invalid("'\(row.lName ?? "")' is a folder; pin its files.") }
            row.pinned = pinned
            row.lastAccess = now.millis
            try row.save(db)
            if pinned { try self.scheduleDownloadIfNeeded(db, row, now: now) }
        }
        notifyChanged()
    }

    /// Downloads the item's current content (once), without pinning it.
    public func download(_ id: ItemID) throws {
        let now = self.now
        try database.pool.write { db in
            let row = try self.liveItem(db, id)
            guard !row.isFolder else { throw SyncError.invalid("'\(row.lName ?? "")' is a folder.") }
            try self.scheduleDownloadIfNeeded(db, row, now: now)
        }
        notifyChanged()
    }

    /// Makes `revisionId`'s content the file's new head (history keeps everything).
    public func restore(_ id: ItemID, revision revisionId: String) throws {
        let now = self.now
        try database.pool.write { db in
            let row = try self.liveItem(db, id)
            _ = try OperationRow.insert(
                db, luid: id.rawValue, kind: .restore, payload: OperationPayload(revisionId: revisionId), dependsOn: try self.creatorDependency(db, row),
                now: now)
        }
        notifyChanged()
    }

    /// The file's revisions, newest first (asks the server).
    public func revisions(of id: ItemID) async throws -> [FileRevision] {
        guard let fileId = try await database.pool.read({ db in try ItemRow.fetch(db, luid: id.rawValue)?.fileId }) else {
            throw SyncError.invalid("This item has not reached the server yet; it has no revisions.")
        }
        var result: [FileRevision] = []
        do {
            let client = try requireClient()
            var page = 1
            while true {
                let list: RevisionList = try await client.call("GET", "/v1/files/\(fileId)/revisions?page=\(page)&limit=1000")
                result += list.revisions
                guard let next = list.pagination.nextPage else { break }
                page = next
            }
        } catch let error as SyncError where error.isRetryable || error == .notSignedIn {
            // Offline (or signed out): the list fetched last time, if there is one.
            let cached = try cachedRevisions(of: id)
            if cached.isEmpty { throw error }
            return cached
        }
        let fetched = result
        try await database.pool.write { db in
            try db.execute(sql: "DELETE FROM revisions WHERE file_id = ?", arguments: [fileId])
            for (position, revision) in fetched.enumerated() {
                try db.execute(
                    sql: "INSERT INTO revisions (file_id, position, revision) VALUES (?, ?, ?)",
                    arguments: [fileId, position, String(decoding: try JSONEncoder.nimbus.encode(revision), as: UTF8.self)])
            }
        }
        return result
    }

    /// The revisions of an item as ``revisions(of:)`` last fetched them (newest first), without the network;
    /// empty if never fetched (or dropped by the metadata cache's cap).
    public func cachedRevisions(of id: ItemID) throws -> [FileRevision] {
        try database.pool.read { db in
            guard let fileId = try ItemRow.fetch(db, luid: id.rawValue)?.fileId else { return [] }
            return try String.fetchAll(db, sql: "SELECT revision FROM revisions WHERE file_id = ? ORDER BY position", arguments: [fileId])
                .compactMap { try? JSONDecoder.nimbus.decode(FileRevision.self, from: Data($0.utf8)) }
        }
    }

    /// Drops the item's queued operations that have not been sent; the item shows the server's state again
    /// (an item that never reached the server disappears).
    public func cancel(_ id: ItemID) async throws {
        let busy = inFlight
        let (discard, sessions) = try await database.pool.write { db -> ([String], [String]) in
            var discard: [String] = []
            var sessions: [String] = []
            guard var row = try ItemRow.fetch(db, luid: id.rawValue) else { return ([], []) }
            for operation in try OperationRow.forItem(db, id.rawValue) where operation.state != .applied && !busy.contains(operation.id) {
                if operation.payload.ownsSource == true, let path = operation.payload.sourcePath, path != row.contentPath || row.fileId == nil {
                    discard.append(path)
                }
                if let data = try String.fetchOne(db, sql: "SELECT response FROM upload_sessions WHERE operation_id = ?", arguments: [operation.id]),
                    let session = try? JSONDecoder.nimbus.decode(UploadResponse.self, from: Data(data.utf8))
                {
                    sessions.append(session.uploadId)
                }
                try db.execute(sql: "DELETE FROM upload_sessions WHERE operation_id = ?", arguments: [operation.id])
                try db.execute(sql: "DELETE FROM operations WHERE id = ?", arguments: [operation.id])
            }
            row.flag = nil
            if try !OperationRow.any(db, for: id.rawValue) {
                if row.fileId == nil { row.lPresent = false } else { row.adoptRemote() }
                if row.contentChecksum != row.lChecksum, let path = row.contentPath, path.hasPrefix(self.stagingDirectory.path) {
                    row.contentPath = nil
                    row.contentChecksum = nil
                }
            }
            try row.save(db)
            return (discard, sessions)
        }
        for path in discard { try? FileManager.default.removeItem(atPath: path) }
        if let client {
            for uploadId in sessions { _ = try? await client.callWithoutResult("DELETE", "/v1/upload/\(uploadId)") }
        }
        notifyChanged()
    }

    /// Tries the item's failed operations again.
    public func retry(_ id: ItemID) throws {
        try database.pool.write { db in
            try db.execute(
                sql: "UPDATE operations SET state = 'pending', attempts = 0, next_attempt_at = 0, last_error = NULL WHERE luid = ? AND state = 'failed'",
                arguments: [id.rawValue])
        }
        notifyChanged()
    }

    /// Settles a conflict the `ask` strategy left for the user. Nothing is lost whatever the answer: the
    /// losing version stays a revision (or, with `keepBoth`, a copy).
    public func resolveConflict(_ id: ItemID, keeping resolution: ConflictResolution) async throws {
        let client = try requireClient()
        guard let row = try await database.pool.read({ db in try ItemRow.fetch(db, luid: id.rawValue) }), row.flag == "conflict" else {
            throw SyncError.invalid("This item is not in conflict.")
        }
        var current: File?
        if let fileId = row.fileId { current = try await client.call("GET", "/v1/files/\(fileId)") }
        try await settleConflict(row, resolution: resolution, current: current)
        notifyChanged()
    }

    /// The user accepts the server's deletion of an `unsynced` item: the local copy goes.
    public func confirmDeletion(_ id: ItemID) throws {
        var discard: [String] = []
        try database.pool.write { db in
            guard var row = try ItemRow.fetch(db, luid: id.rawValue), row.flag == "unsynced" else {
                throw SyncError.invalid("This item is not waiting for a deletion decision.")
            }
            for luid in try self.localSubtree(db, row.luid) {
                guard var item = try ItemRow.fetch(db, luid: luid) else { continue }
                for operation in try OperationRow.forItem(db, luid) {
                    if operation.payload.ownsSource == true, let path = operation.payload.sourcePath { discard.append(path) }
                    try db.execute(sql: "DELETE FROM operations WHERE id = ?", arguments: [operation.id])
                }
                if let path = item.contentPath { discard.append(path) }
                item.contentPath = nil
                item.contentChecksum = nil
                item.lPresent = false
                item.flag = nil
                try item.save(db)
            }
            row = try ItemRow.fetch(db, luid: id.rawValue) ?? row
        }
        for path in Set(discard) { try? FileManager.default.removeItem(atPath: path) }
        notifyChanged()
    }

    /// The user keeps an `unsynced` item: it is uploaded again as a new item (with its folder, if needed).
    public func keepLocalCopy(_ id: ItemID) throws {
        let now = self.now
        try database.pool.write { db in
            guard let row = try ItemRow.fetch(db, luid: id.rawValue), row.flag == "unsynced" else {
                throw SyncError.invalid("This item is not waiting for a deletion decision.")
            }
            try self.recreate(db, row.luid, now: now)
        }
        notifyChanged()
    }

    /// Applies deletions that were held because there were so many.
    public func confirmMassDeletion() async throws {
        try await applyRemoteDeletions(force: true)
        if case .awaitingDeletionConfirmation = phase { phase = .idle }
        notifyChanged()
    }

    /// Refuses held deletions: the items stay here, marked `unsynced`, for the user to decide one by one.
    public func rejectMassDeletion() async throws {
        try await database.pool.write { db in
            for fileId in try String.fetchAll(db, sql: "SELECT file_id FROM remote_deletions") {
                guard var row = try ItemRow.fetch(db, fileId: fileId) else { continue }
                row.flag = row.lPresent ? "unsynced" : nil
                try row.save(db)
            }
            try db.execute(sql: "DELETE FROM remote_deletions")
        }
        if case .awaitingDeletionConfirmation = phase { phase = .idle }
        notifyChanged()
    }

    // MARK: Helpers (inside transactions)

    static func validName(_ raw: String) throws -> String {
        do { return try FileName.validated(raw) } catch { throw SyncError.invalid(error.description) }
    }

    nonisolated func liveItem(_ db: Database, _ id: ItemID) throws -> ItemRow {
        guard let row = try ItemRow.fetch(db, luid: id.rawValue), row.lPresent else { throw SyncError.invalid("No such item.") }
        return row
    }

    nonisolated func liveFolder(_ db: Database, _ id: ItemID) throws -> ItemRow {
        let row = try liveItem(db, id)
        guard row.isFolder else { throw SyncError.invalid("'\(row.lName ?? "")' is not a folder.") }
        return row
    }

    nonisolated func checkFree(_ db: Database, name: String, in parent: String, except luid: String?) throws {
        if let other = try String.fetchOne(
            db.cachedStatement(sql: "SELECT luid FROM items WHERE l_parent = ? AND l_name = ? AND l_present = 1"), arguments: [parent, name]),
            other != luid
        {
            throw SyncError.invalid("'\(name)' already exists in that folder.")
        }
    }

    /// `name`, or `name (1)`, `name (2)`… — the first that nothing in folder `parent` of the view holds.
    nonisolated func freeName(_ db: Database, _ name: String, in parent: String) throws -> String {
        var candidate = name
        var attempt = 1
        while try String.fetchOne(
            db.cachedStatement(sql: "SELECT luid FROM items WHERE l_parent = ? AND l_name = ? AND l_present = 1"), arguments: [parent, candidate]) != nil,
            attempt < 10_000
        {
            candidate = FileName.numbered(name, attempt)
            attempt += 1
        }
        return candidate
    }

    /// The operation an action on `row` must wait for: the one that creates it on the server, if still queued.
    nonisolated func creatorDependency(_ db: Database, _ row: ItemRow) throws -> [String] {
        guard row.fileId == nil else { return [] }
        return try OperationRow.creator(db, of: row.luid).map { [$0] } ?? []
    }

    /// An item and everything under it in the view, parents first.
    nonisolated func localSubtree(_ db: Database, _ luid: String) throws -> [String] {
        try String.fetchAll(
            db,
            sql: """
                WITH RECURSIVE tree(luid) AS (
                    SELECT ? UNION ALL SELECT i.luid FROM items i JOIN tree t ON i.l_parent = t.luid WHERE i.l_present = 1
                ) SELECT luid FROM tree
                """,
            arguments: [luid])
    }

    nonisolated func scheduleDownloadIfNeeded(_ db: Database, _ row: ItemRow, now: Date) throws {
        guard try row.fileId != nil || OperationRow.creator(db, of: row.luid) != nil else { return }
        if row.contentPath != nil && row.contentChecksum == row.lChecksum { return }
        let queued = try OperationRow.forItem(db, row.luid).contains { $0.kind == .download && $0.state == .pending }
        if !queued {
            _ = try OperationRow.insert(db, luid: row.luid, kind: .download, payload: OperationPayload(), dependsOn: try creatorDependency(db, row), now: now)
        }
    }

    /// Queues an item (and any of its folders the server no longer has) to be created again as new items.
    nonisolated func recreate(_ db: Database, _ luid: String, now: Date) throws {
        guard var row = try ItemRow.fetch(db, luid: luid) else { return }
        if let parent = row.lParent, let parentRow = try ItemRow.fetch(db, luid: parent), parent != ItemID.root.rawValue,
            parentRow.fileId == nil || !parentRow.rPresent, try OperationRow.creator(db, of: parent) == nil
        {
            try recreate(db, parent, now: now)
        }
        let parentRow = try row.lParent.flatMap { try ItemRow.fetch(db, luid: $0) }
        let dependencies = try parentRow.map { try creatorDependency(db, $0) } ?? []
        row.fileId = nil
        row.rPresent = false
        row.rRevision = nil
        row.sPresent = false
        row.flag = nil
        row.lPresent = true
        try row.save(db)
        let existing = try OperationRow.forItem(db, luid)
        if row.isFolder {
            try db.execute(sql: "DELETE FROM operations WHERE luid = ? AND state != 'applied'", arguments: [luid])
            _ = try OperationRow.insert(
                db, luid: luid, kind: .createFolder, payload: OperationPayload(name: row.lName, parent: row.lParent), dependsOn: dependencies, now: now)
            return
        }
        var source = existing.last { $0.kind == .upload }?.payload
        if source == nil, let path = row.contentPath {
            source = OperationPayload(sourcePath: path, ownsSource: false, checksum: row.contentChecksum, size: row.lSize)
        }
        try db.execute(sql: "DELETE FROM operations WHERE luid = ? AND state != 'applied'", arguments: [luid])
        guard var payload = source else { return }
        payload.name = row.lName
        payload.parent = row.lParent
        payload.mimeType = row.lMime
        payload.baseRevision = nil
        payload.replace = nil
        _ = try OperationRow.insert(db, luid: luid, kind: .upload, payload: payload, dependsOn: dependencies, now: now)
    }

    /// Copies (or just hashes) a file to upload.
    /// The file to send: copied into the staging area (hashed on the way), or used where it is. A caller that
    /// has just hashed an uncopied file may pass its `checksum` (a synced folder does): it is not read again, and
    /// if the bytes change before they are sent the server refuses them (422) and they are hashed again.
    func stage(_ fileURL: URL, copy: Bool, checksum known: String? = nil) throws -> (url: URL, checksum: String, size: Int64) {
        guard let size = FileHasher.regularFileSize(fileURL.path) else {
            throw SyncError.localFile("\(fileURL.path) is not a readable file.")
        }
        do {
            if copy {
                let destination = stagingDirectory.appending(path: UUID.random().uuidString.lowercased())
                let (checksum, size) = try FileHasher.copy(fileURL, to: destination)
                return (destination, checksum, size)
            }
            if let known { return (fileURL, known, size) }
            let (checksum, size) = try FileHasher.sha256(of: fileURL)
            return (fileURL, checksum, size)
        } catch let error as SyncError {
            throw error
        } catch {
            throw SyncError.localFile("Could not read \(fileURL.path): \(error.localizedDescription)")
        }
    }
}

extension SyncEngine {
    /// Hands the item's downloaded content file over to the caller (who moves it where it belongs); the
    /// engine forgets it. `nil` if the current content is not here.
    public func takeContent(of id: ItemID) throws -> URL? {
        try database.pool.write { db in
            guard var row = try ItemRow.fetch(db, luid: id.rawValue), let path = row.contentPath, row.contentChecksum == row.lChecksum,
                path.hasPrefix(self.contentDirectory.path)
            else { return nil }
            row.contentPath = nil
            row.contentChecksum = nil
            try row.save(db)
            return URL(fileURLWithPath: path)
        }
    }

    /// The files queued uploads will read (a caller must not change or replace them until they are sent).
    public func pendingUploadSources() throws -> Set<String> {
        try database.pool.read { db in
            let payloads = try String.fetchAll(db, sql: "SELECT payload FROM operations WHERE kind = 'upload' AND state != 'applied'")
            return Set(payloads.compactMap { (try? JSONDecoder().decode(OperationPayload.self, from: Data($0.utf8)))?.sourcePath })
        }
    }

    /// The signed-in server, for calls outside the engine's model (trash, account details).
    public func server() throws -> ServerClient { try requireClient() }

    /// Runs rounds until nothing is queued (or only operations that failed for good, or that wait for the
    /// user), sleeping through retry delays; gives up after `timeout`.
    public func drain(timeout: Duration = .seconds(3600)) async throws {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            try Task.checkCancellation()
            try await syncOnce()
            let pending = try await database.pool.read { db in
                try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM operations WHERE state = 'pending'") ?? 0
            }
            if pending == 0 { return }
            if phase == .needsSignIn { throw SyncError.unauthorized("sign in again") }
            let wait = max(0.05, min(5, (try nextDueDate()?.timeIntervalSince(now)) ?? 0.05))
            try await Task.sleep(for: .milliseconds(Int64(wait * 1000)))
        }
    }
}
