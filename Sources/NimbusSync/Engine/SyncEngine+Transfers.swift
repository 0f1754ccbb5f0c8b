import Crypto
import Foundation
import GRDB
import NimbusAPI

/// Transfers: resumable uploads (persisted sessions, resumed on launch) and resumable, verified downloads.
extension SyncEngine {
    func upload(_ operation: OperationRow, _ row: ItemRow, _ client: ServerClient) async throws -> Outcome {
        guard row.lPresent else { return .finished }
        var payload = operation.payload
        guard let sourcePath = payload.sourcePath, let size = payload.size, let checksum = payload.checksum else {
            return .finished
        }
        if row.fileId != nil, row.rPresent, row.rChecksum == checksum, row.rSize == size {
            // The server already has exactly these bytes there (adopted, or a retry that already landed).
            return try await uploadedAlready(operation, row)
        }
        guard FileManager.default.fileExists(atPath: sourcePath) else {
            throw SyncError.localFile("The file to upload is gone (\(sourcePath)).")
        }
        let isNew = !(row.fileId != nil && (payload.baseRevision != nil || row.rPresent))
        if size <= configuration.simpleUploadLimit,
            try await database.pool.read({ db in
                try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM upload_sessions WHERE operation_id = ?)", arguments: [operation.id])
            }) == false
        {
            return try await simpleUpload(operation, row, client, sourcePath: sourcePath, size: size, checksum: checksum, isNew: isNew)
        }
        var session = try await savedSession(operation.id, client)
        if session == nil {
            let started = try await startUpload(operation, row, client)
            switch started {
            case .session(let response):
                session = response
                try await saveSession(response, for: operation.id)
            case .done(let file):
                return try await uploaded(file, operation, row)
            case .outcome(let outcome):
                return outcome
            }
        }
        guard var session else { return .finished }
        let handle: FileHandle
        do { handle = try FileHandle(forReadingFrom: URL(fileURLWithPath: sourcePath)) } catch {
            throw SyncError.localFile("Could not read \(sourcePath): \(error.localizedDescription)")
        }
        defer { try? handle.close() }
        while true {
            // All chunks stored but no file yet (a crash before the commit): sending the last one again commits.
            let k = min(session.chunksProcessed, max(session.totalChunks - 1, 0))
            let start = Int64(k) * session.chunkSize
            let end = min(start + session.chunkSize, size)
            progress[row.luid] = .uploading(progress: size == 0 ? 0 : Double(start) / Double(size))
            notifyChanged()
            try handle.seek(toOffset: UInt64(start))
            let bytes = try handle.read(upToCount: Int(end - start)) ?? Data()
            guard Int64(bytes.count) == end - start else {
                payload.sourcePath = sourcePath
                throw SyncError.localFile("\(sourcePath) changed size during the upload; it will be sent again.")
            }
            let (head, data) = try await client.authorized(
                TransportRequest(
                    method: "PUT", path: session.uploadUrl, headers: ["Content-Range": "bytes \(start)-\(end - 1)/\(size)"], body: bytes))
            switch head.status {
            case 308:
                session = try ServerClient.decode(UploadResponse.self, data)
                guard session.chunksProcessed <= session.totalChunks else { return try await restartUpload(operation) }
                // Not saved again per chunk (a local transaction each): a resume only needs the session's id,
                // and asks the server where it stands (`savedSession`).
            case 201:
                let done = try ServerClient.decode(UploadResponse.self, data)
                guard let file = done.file else { return try await restartUpload(operation) }
                return try await uploaded(file, operation, row)
            case 404, 410:
                return try await restartUpload(operation)
            case 400, 416:
                // Our idea of the session is off: ask where it stands.
                guard let fresh = try await savedSession(operation.id, client) else { return try await restartUpload(operation) }
                session = fresh
            case 409:
                return try await conflicted(operation, row, client, error: ServerClient.errorBody(data))
            case 422:
                return try await sourceChanged(operation, sourcePath: sourcePath)
            default:
                try ServerClient.check(head, data)
                return .again
            }
        }
    }

    /// The bytes changed while they were sent: hash again and send the new content (under a new request id).
    func sourceChanged(_ operation: OperationRow, sourcePath: String) async throws -> Outcome {
        var payload = operation.payload
        let (newChecksum, newSize) = try FileHasher.sha256(of: URL(fileURLWithPath: sourcePath))
        guard newChecksum != payload.checksum || newSize != payload.size else { return try await restartUpload(operation) }
        payload.checksum = newChecksum
        payload.size = newSize
        payload.requestId = UUID.random().uuidString.lowercased()
        let updated = payload
        try await database.pool.write { db in
            try OperationRow.updatePayload(db, id: operation.id, updated)
            try db.execute(sql: "DELETE FROM upload_sessions WHERE operation_id = ?", arguments: [operation.id])
        }
        return .again
    }

    /// A small file in one request (`uploadType=media`), with the checksum (bytes that changed since they were
    /// hashed are refused, 422). A new file carries the request id: a retry after a lost answer gets the same file
    /// back. A new version carries `If-Match`: a retry after a lost answer meets its own head, with its checksum,
    /// which ``conflicted(_:_:_:error:)`` recognises as done.
    func simpleUpload(
        _ operation: OperationRow, _ row: ItemRow, _ client: ServerClient, sourcePath: String, size: Int64, checksum: String, isNew: Bool
    ) async throws -> Outcome {
        let payload = operation.payload
        let bytes: Data
        do { bytes = try Data(contentsOf: URL(fileURLWithPath: sourcePath)) } catch {
            throw SyncError.localFile("Could not read \(sourcePath): \(error.localizedDescription)")
        }
        guard Int64(bytes.count) == size else { return try await sourceChanged(operation, sourcePath: sourcePath) }
        let mimeType = payload.mimeType ?? row.lMime ?? "application/octet-stream"
        var path = "/v1/upload?uploadType=media&mimeType=\(mimeType.queryEscaped)&checksum=\(checksum)"
        var headers = ["Content-Type": "application/octet-stream"]
        if isNew {
            let parentId = try await serverId(payload.parent ?? row.lParent)
            let name = payload.name ?? row.lName ?? "file"
            path += "&name=\(name.queryEscaped)&parentId=\(parentId.queryEscaped)&requestId=\((payload.requestId ?? operation.id).queryEscaped)"
            if payload.replace == true { path += "&onConflict=replace" }
        } else if let fileId = row.fileId {
            path += "&fileId=\(fileId.queryEscaped)"
            if let base = payload.baseRevision { headers["If-Match"] = "\"\(base)\"" }
        }
        progress[row.luid] = .uploading(progress: 0)
        let (head, data) = try await client.authorized(TransportRequest(method: "POST", path: path, headers: headers, body: bytes))
        switch head.status {
        case 404 where !isNew:
            // The file is gone from the server: keep the content here, as unsynced, for the user to decide.
            try await markUnsynced(row.luid)
            return .parked
        case 201:
            return try await uploaded(try ServerClient.decode(File.self, data), operation, row)
        case 409 where ServerClient.errorBody(data)?.error.code == "request_id_reused":
            // Another content went up under this id before (it cannot be this one): send under a new id.
            var renewed = payload
            renewed.requestId = UUID.random().uuidString.lowercased()
            let updated = renewed
            try await database.pool.write { db in try OperationRow.updatePayload(db, id: operation.id, updated) }
            return .again
        case 409:
            return try await conflicted(operation, row, client, error: ServerClient.errorBody(data))
        case 422:
            return try await sourceChanged(operation, sourcePath: sourcePath)
        default:
            try ServerClient.check(head, data)
            return .again
        }
    }

    enum UploadStart {
        case session(UploadResponse)
        case done(File)
        case outcome(Outcome)
    }

    /// Opens the session (idempotent: the operation's id is the request id, so a retry gets the same session).
    func startUpload(_ operation: OperationRow, _ row: ItemRow, _ client: ServerClient) async throws -> UploadStart {
        let payload = operation.payload
        var headers: [String: String] = [:]
        var fileId: String?
        var parentId: String?
        if let id = row.fileId, payload.baseRevision != nil || row.rPresent {
            fileId = id
            if let base = payload.baseRevision { headers["If-Match"] = "\"\(base)\"" }
        } else {
            parentId = try await serverId(payload.parent ?? row.lParent)
        }
        let request = UploadRequest(
            requestId: payload.requestId ?? operation.id, name: payload.name ?? row.lName ?? "file", mimeType: payload.mimeType ?? row.lMime ?? "application/octet-stream",
            parentId: parentId, size: payload.size ?? 0, fileId: fileId, checksum: payload.checksum)
        let query = payload.replace == true ? "&onConflict=replace" : ""
        let (head, data) = try await client.authorized(
            TransportRequest(
                method: "POST", path: "/v1/upload?uploadType=resumable" + query, headers: headers, body: try JSONEncoder.nimbus.encode(request)),
            json: true)
        switch head.status {
        case 200:
            let session = try ServerClient.decode(UploadResponse.self, data)
            if let file = session.file { return .done(file) }
            return .session(session)
        case 201:
            let session = try ServerClient.decode(UploadResponse.self, data)
            guard let file = session.file else { return .outcome(.again) }
            return .done(file)
        case 409:
            return .outcome(try await conflicted(operation, row, client, error: ServerClient.errorBody(data)))
        case 404 where fileId != nil:
            // The file is gone from the server: keep the content here, as unsynced, for the user to decide.
            try await markUnsynced(row.luid)
            return .outcome(.parked)
        default:
            try ServerClient.check(head, data)
            return .outcome(.again)
        }
    }

    /// The persisted session of an upload, refreshed from the server; `nil` if there is none or it is gone.
    func savedSession(_ operationId: String, _ client: ServerClient) async throws -> UploadResponse? {
        guard let text = try await database.pool.read({ db in
            try String.fetchOne(db, sql: "SELECT response FROM upload_sessions WHERE operation_id = ?", arguments: [operationId])
        }), let saved = try? JSONDecoder.nimbus.decode(UploadResponse.self, from: Data(text.utf8)) else { return nil }
        let (head, data) = try await client.authorized(TransportRequest(method: "GET", path: "/v1/upload/\(saved.uploadId)"))
        guard head.status == 200, let fresh = try? JSONDecoder.nimbus.decode(UploadResponse.self, from: data),
            fresh.chunksProcessed <= fresh.totalChunks, fresh.chunkSize == saved.chunkSize
        else {
            if head.status == 404 || head.status == 410 || head.status == 200 {
                try await database.pool.write { db in try db.execute(sql: "DELETE FROM upload_sessions WHERE operation_id = ?", arguments: [operationId]) }
                return nil
            }
            try ServerClient.check(head, data)
            return nil
        }
        return fresh
    }

    func saveSession(_ session: UploadResponse, for operationId: String) async throws {
        let text = String(decoding: try JSONEncoder.nimbus.encode(session), as: UTF8.self)
        try await database.pool.write { db in
            try db.execute(
                sql: "INSERT INTO upload_sessions (operation_id, response) VALUES (?, ?) ON CONFLICT (operation_id) DO UPDATE SET response = excluded.response",
                arguments: [operationId, text])
        }
    }

    /// Forgets the session (expired or inconsistent) so the next attempt starts from scratch.
    func restartUpload(_ operation: OperationRow) async throws -> Outcome {
        try await database.pool.write { db in
            try db.execute(sql: "DELETE FROM upload_sessions WHERE operation_id = ?", arguments: [operation.id])
        }
        return .again
    }

    /// The server's head is already this content: nothing to send; the staged copy becomes the offline copy.
    func uploadedAlready(_ operation: OperationRow, _ row: ItemRow) async throws -> Outcome {
        guard let fileId = row.fileId else { return .finished }
        let payload = operation.payload
        try await database.pool.write { db in
            guard var item = try ItemRow.fetch(db, luid: row.luid) else { return }
            if payload.ownsSource == true, let source = payload.sourcePath, item.contentPath == source {
                let destination = self.contentDirectory.appending(path: fileId).path
                try? FileManager.default.removeItem(atPath: destination)
                if (try? FileManager.default.moveItem(atPath: source, toPath: destination)) != nil {
                    item.contentPath = destination
                    item.contentChecksum = payload.checksum
                    try item.save(db)
                }
            }
        }
        return .applied
    }

    /// The server has the content: the item is that file; an owned staged copy becomes the offline copy.
    func uploaded(_ file: File, _ operation: OperationRow, _ row: ItemRow) async throws -> Outcome {
        let discard = try await database.pool.write { db in try self.recordUploaded(db, file, operation, luid: row.luid) }
        if let discard { try? FileManager.default.removeItem(atPath: discard) }
        return .applied
    }

    /// Records in `db` that `operation` made `file`: the item claims it, versions queued behind are rebased onto
    /// it, and a private copy of the bytes becomes the cached content. Returns a source file to delete afterwards.
    nonisolated func recordUploaded(_ db: Database, _ file: File, _ operation: OperationRow, luid: String) throws -> String? {
        let payload = operation.payload
        try claim(db, file, for: luid)  // one transaction with what follows
        // Versions queued behind this one while it was sent were made from it: they are based on what it made.
        let queuedBehind = try Row.fetchAll(
            db.cachedStatement(sql: "SELECT * FROM operations WHERE luid = ? AND kind = 'upload' AND seq > ? AND state != 'applied' ORDER BY seq"),
            arguments: [luid, operation.seq]
        ).map(OperationRow.init(row:))
        for later in queuedBehind where later.payload.baseRevision == payload.baseRevision {
            var rebased = later.payload
            rebased.baseRevision = file.revisionId
            try OperationRow.updatePayload(db, id: later.id, rebased)
        }
        // The caller's own file (ownsSource false) stays where it is; a private copy becomes the cached content.
        guard payload.ownsSource == true, let source = payload.sourcePath else { return nil }
        guard var item = try ItemRow.fetch(db, luid: luid) else { return nil }
        var discard: String?
        if item.contentPath == source {
            let destination = contentDirectory.appending(path: file.id).path
            try? FileManager.default.removeItem(atPath: destination)
            do {
                try FileManager.default.moveItem(atPath: source, toPath: destination)
                item.contentPath = destination
                item.contentChecksum = file.checksum
            } catch {
                item.contentPath = nil
                item.contentChecksum = nil
            }
        } else {
            discard = source
        }
        try item.save(db)
        return discard
    }

    // MARK: Conflicts

    /// A 409 from the server: a version conflict (another device committed first) or a name clash.
    func conflicted(_ operation: OperationRow, _ row: ItemRow, _ client: ServerClient, error: APIErrorBody?) async throws -> Outcome {
        try await database.pool.write { db in try db.execute(sql: "DELETE FROM upload_sessions WHERE operation_id = ?", arguments: [operation.id]) }
        let code = error?.error.code
        if code == "version_conflict", let head = error?.error.file, !head.isFolder, head.checksum == operation.payload.checksum {
            // The head is already these bytes: this upload landed before (its answer was lost), or another
            // device sent the very same content. Either way nothing is in conflict.
            return try await uploaded(head, operation, row)
        }
        if code == "name_conflict", let existingId = error?.error.existingId {
            let existing: File = try await client.call("GET", "/v1/files/\(existingId)")
            if !existing.isFolder && existing.checksum == operation.payload.checksum {
                // The same content is already there under that name: it is this item.
                try await claim(existing, for: row.luid)
                if operation.payload.ownsSource == true, let source = operation.payload.sourcePath {
                    try await database.pool.write { db in
                        guard var item = try ItemRow.fetch(db, luid: row.luid) else { return }
                        if item.contentPath == source {
                            let destination = self.contentDirectory.appending(path: existing.id).path
                            if (try? FileManager.default.moveItem(atPath: source, toPath: destination)) != nil {
                                item.contentPath = destination
                                item.contentChecksum = existing.checksum
                            }
                        }
                        try item.save(db)
                    }
                }
                return .applied
            }
        }
        let current: File? =
            if let file = error?.error.file { file } else if let id = row.fileId { try? await client.call("GET", "/v1/files/\(id)") } else { nil }
        switch configuration.conflictStrategy {
        case .ask:
            try await database.pool.write { db in
                guard var item = try ItemRow.fetch(db, luid: row.luid) else { return }
                item.flag = "conflict"
                if let current { item.setRemote(current, parentLuid: try self.parentLuid(db, current)) }
                try item.save(db)
            }
            return .parked
        case .lastWriterWins:
            try await settle(operation, row, resolution: .keepLocal, current: current, nameClash: code == "name_conflict")
            return .again
        case .keepBoth:
            try await settle(operation, row, resolution: .keepBoth, current: current, nameClash: code == "name_conflict")
            return .again
        }
    }

    /// Applies a resolution to a conflicted upload `operation`.
    func settle(_ operation: OperationRow, _ row: ItemRow, resolution: ConflictResolution, current: File?, nameClash: Bool) async throws {
        let now = self.now
        let device = configuration.deviceName
        var copied: (url: URL, checksum: String, size: Int64)?
        if resolution == .keepBoth, operation.payload.ownsSource != true, let source = operation.payload.sourcePath {
            // The bytes are the caller's file (a synced folder's): the copy takes a private copy of them, so what
            // later happens to that file (the other version put in its place) cannot change what the copy sends.
            copied = try stage(URL(fileURLWithPath: source), copy: true)
        }
        let staged = copied
        try await database.pool.write { db in
            guard var item = try ItemRow.fetch(db, luid: row.luid) else { return }
            var payload = operation.payload
            if let staged {
                payload.sourcePath = staged.url.path
                payload.ownsSource = true
                payload.checksum = staged.checksum
                payload.size = staged.size
            }
            payload.requestId = UUID.random().uuidString.lowercased()
            item.flag = nil
            switch resolution {
            case .keepLocal:
                // Becomes the head; the other version stays a revision.
                if nameClash {
                    payload.replace = true
                } else {
                    payload.baseRevision = current?.revisionId
                }
                try OperationRow.updatePayload(db, id: operation.id, payload)
                try db.execute(sql: "UPDATE operations SET state = 'pending' WHERE id = ?", arguments: [operation.id])
                if let current, !nameClash { item.setRemote(current, parentLuid: try self.parentLuid(db, current)) }
                try item.save(db)
            case .keepRemote:
                // This version becomes a revision, then the other is restored on top: both stay reachable.
                if nameClash {
                    payload.replace = true
                } else {
                    payload.baseRevision = current?.revisionId
                }
                try OperationRow.updatePayload(db, id: operation.id, payload)
                try db.execute(sql: "UPDATE operations SET state = 'pending' WHERE id = ?", arguments: [operation.id])
                if let revision = current?.revisionId {
                    _ = try OperationRow.insert(
                        db, luid: row.luid, kind: .restore, payload: OperationPayload(revisionId: revision), dependsOn: [operation.id], now: now)
                }
                if let current {
                    item.setRemote(current, parentLuid: try self.parentLuid(db, current))
                    item.lChecksum = current.checksum
                    item.lSize = current.size
                }
                try item.save(db)
            case .keepBoth:
                // This version becomes a new item, "name (conflict from DEVICE date).ext", beside the other.
                let copy = ItemID.make().rawValue
                var copyRow = ItemRow.empty(copy, isFolder: false)
                copyRow.lPresent = true
                copyRow.lParent = item.lParent
                let name = try self.freeName(db, FileName.conflictCopy(item.lName ?? payload.name ?? "file", device: device, date: now), in: item.lParent ?? "")
                copyRow.lName = name
                copyRow.lMime = item.lMime
                copyRow.lSize = payload.size
                copyRow.lChecksum = payload.checksum
                copyRow.lModified = now.millis
                if staged != nil {
                    copyRow.contentPath = payload.sourcePath
                    copyRow.contentChecksum = payload.checksum
                } else if payload.ownsSource == true, item.contentPath == payload.sourcePath {
                    copyRow.contentPath = payload.sourcePath
                    copyRow.contentChecksum = payload.checksum
                    item.contentPath = nil
                    item.contentChecksum = nil
                }
                try copyRow.save(db)
                payload.name = name
                payload.baseRevision = nil
                payload.replace = nil
                payload.parent = item.lParent
                try db.execute(sql: "UPDATE operations SET luid = ?, state = 'pending' WHERE id = ?", arguments: [copy, operation.id])
                try OperationRow.updatePayload(db, id: operation.id, payload)
                if nameClash {
                    // The original item never reached the server; the name's holder is another item.
                    item.lPresent = false
                } else if let current {
                    item.setRemote(current, parentLuid: try self.parentLuid(db, current))
                    if try OperationRow.forItem(db, item.luid).filter({ $0.id != operation.id }).isEmpty { item.adoptRemote() }
                }
                try item.save(db)
            }
        }
    }

    /// The user's answer to a parked conflict.
    func settleConflict(_ row: ItemRow, resolution: ConflictResolution, current: File?) async throws {
        let parked = try await database.pool.read { db in
            try OperationRow.forItem(db, row.luid).last { $0.state == .parked && $0.kind == .upload }
        }
        guard let parked else {
            try await database.pool.write { db in try db.execute(sql: "UPDATE items SET flag = NULL WHERE luid = ?", arguments: [row.luid]) }
            return
        }
        let nameClash = row.fileId == nil
        try await settle(parked, row, resolution: resolution, current: current, nameClash: nameClash)
    }

    func markUnsynced(_ luid: String) async throws {
        try await database.pool.write { db in
            try db.execute(sql: "UPDATE items SET flag = 'unsynced', r_present = 0 WHERE luid = ?", arguments: [luid])
            try db.execute(sql: "UPDATE operations SET state = 'parked' WHERE luid = ? AND state = 'pending' AND kind = 'upload'", arguments: [luid])
        }
    }

    // MARK: Downloads

    /// Downloads the item's current revision into `content/<fileId>`: resumed with `Range` from a partial
    /// file, checked against the checksum, then renamed into place (never a half file under the final name).
    func download(_ operation: OperationRow, _ row: ItemRow, _ client: ServerClient) async throws -> Outcome {
        guard let fileId = row.fileId, row.rPresent, let revision = row.rRevision, let checksum = row.rChecksum else { return .finished }
        if row.contentChecksum == checksum, row.contentPath != nil { return .finished }
        let size = row.rSize ?? 0
        let final = contentDirectory.appending(path: fileId)
        let partial = contentDirectory.appending(path: "\(fileId).\(revision).partial")
        var offset: Int64 = 0
        if let attributes = try? FileManager.default.attributesOfItem(atPath: partial.path), let length = attributes[.size] as? Int64 {
            offset = min(length, size)
        } else {
            _ = FileManager.default.createFile(atPath: partial.path, contents: nil, attributes: [.posixPermissions: 0o600])
        }
        let available = Self.freeSpace(at: contentDirectory)
        if let available, available < size - offset {
            throw SyncError.insufficientSpace(needed: size - offset, available: available)
        }
        let handle = try FileHandle(forWritingTo: partial)
        defer { try? handle.close() }
        try handle.truncate(atOffset: UInt64(offset))
        try handle.seekToEnd()
        var headers: [String: String] = ["If-Range": "\"\(revision)\""]
        if offset > 0 && offset < size { headers["Range"] = "bytes=\(offset)-" }
        let luid = row.luid
        let written = LockedBox(offset)
        let engine = self
        if offset < size || size == 0 {
            let head = try await client.authorizedStream(
                TransportRequest(method: "GET", path: "/v1/files/\(fileId)/revisions/\(revision)/content", headers: headers)
            ) { data in
                try handle.write(contentsOf: data)
                let total = written.withLock { value -> Int64 in
                    value += Int64(data.count)
                    return value
                }
                await engine.reportDownload(luid, Double(total) / Double(max(size, 1)))
            }
            if head.status == 200 && offset > 0 {
                // The server sent everything (the range was not honoured): start the file over.
                throw SyncError.network("download restarted")
            }
        }
        try handle.synchronize()
        let (actual, actualSize) = try FileHasher.sha256(of: partial)
        guard actual == checksum, actualSize == size else {
            try? FileManager.default.removeItem(at: partial)
            throw SyncError.checksumMismatch(expected: checksum, actual: actual)
        }
        try? FileManager.default.removeItem(at: final)
        try FileManager.default.moveItem(at: partial, to: final)
        try await database.pool.write { db in
            guard var item = try ItemRow.fetch(db, luid: luid) else { return }
            item.contentPath = final.path
            item.contentChecksum = checksum
            try item.save(db)
        }
        return .finished
    }

    func reportDownload(_ luid: String, _ fraction: Double) {
        progress[luid] = .downloading(progress: min(fraction, 1))
    }

    static func freeSpace(at url: URL) -> Int64? {
        guard let attributes = try? FileManager.default.attributesOfFileSystem(forPath: url.path),
            let free = attributes[.systemFreeSize] as? NSNumber
        else { return nil }
        return free.int64Value
    }
}
