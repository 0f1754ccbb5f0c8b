import Foundation
import NimbusAPI

extension SQLMetadataStore {
    func createUpload(_ upload: UploadRecord, now: Date) async throws -> (upload: UploadRecord, created: Bool) {
        try await write(user: upload.userId) { db, _ in
            if let row = try db.fetchOne("SELECT * FROM uploads WHERE user_id = ? AND request_id = ?", [upload.userId, upload.requestId])
            {
                let existing = try Self.upload(row)
                guard existing.size == upload.size, existing.name == upload.name, existing.fileId == upload.fileId,
                    existing.parentId == upload.parentId, existing.checksum == upload.checksum
                else {
                    throw DriveError.conflict(
                        "This requestId already started an upload of a different file; use a new requestId.", code: .requestIdReused)
                }
                return (existing, false)
            }
            // Check what can be checked now, so a doomed upload fails before any byte is sent.
            switch upload.fileId {
            case .some(let fileId):
                try Self.checkWritable(try Self.file(db, id: fileId, userId: upload.userId), ifMatch: upload.ifMatch)
            case .none:
                let root = try db.value("SELECT root_id FROM users WHERE id = ?", [upload.userId], as: String.self) ?? ""
                let parent = try Self.liveFolder(db, id: upload.parentId ?? root, userId: upload.userId)
                // Settled again at the commit (the name may be taken or freed meanwhile); `fail` is refused at once.
                if upload.policy == .fail {
                    let clash = try Self.liveChild(db, parentId: parent.id, name: upload.name, userId: upload.userId)
                    _ = try NameClashRule.resolve(upload.name, held: clash, policy: .fail, isFolder: false)
                }
            }
            if let row = try db.fetchOne("SELECT quota_limit, used_bytes FROM users WHERE id = ?", [upload.userId]) {
                try QuotaRule.check(adding: upload.size, used: try row.get("used_bytes"), limit: try row.get("quota_limit", as: Int64?.self))
            }
            try db.perform("""
                    INSERT INTO uploads (id, user_id, request_id, name, mime_type, parent_id, file_id, if_match, on_conflict, size,
                        checksum, chunk_size, total_chunks, chunks_processed, created_at, expires_at)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?)
                    """, [
                    upload.id, upload.userId, upload.requestId, upload.name, upload.mimeType, upload.parentId, upload.fileId, upload.ifMatch,
                    upload.policy.rawValue, upload.size, upload.checksum, upload.chunkSize, upload.totalChunks, now.millis,
                    upload.expiresAt.millis,
                ])
            return (upload, true)
        }
    }

    func uploadSession(id: String) async throws -> UploadRecord? {
        try await database.read { db in try db.fetchOne("SELECT * FROM uploads WHERE id = ?", [id]).map(Self.upload) }
    }

    func upload(id: String, userId: String) async throws -> UploadRecord {
        try await database.read { db in try Self.upload(db, id: id, userId: userId) }
    }

    func storeChunk(userId: String, uploadId: String, chunk: Int, blocks: [StagedBlock], now: Date, expiresAt: Date) async throws
        -> (upload: UploadRecord, stored: Bool)
    {
        do {
            try await putBlocks(blocks, userId: userId, now: now)
            let result = try await write(user: userId) { db, effects in
                var upload = try Self.upload(db, id: uploadId, userId: userId)
                try Self.checkActive(upload, now: now)
                guard upload.chunksProcessed == chunk, upload.completedFileId == nil else {
                    return (upload, false)
                }
                let adoptions = try self.planAdoption(db, effects, userId: userId, blocks: blocks)
                try self.checkQuota(db, &effects, userId: userId, adding: adoptions)
                try self.verifyStored(db, adoptions, userId: userId)
                try self.applyAdoption(db, &effects, userId: userId, adoptions, now: now)
                for (index, block) in blocks.enumerated() {
                    try db.perform("INSERT INTO upload_blocks (upload_id, chunk, idx, user_id, hash, size) VALUES (?, ?, ?, ?, ?, ?)", [uploadId, chunk, index, userId, block.ref.hash, block.ref.size])
                }
                upload.chunksProcessed += 1
                upload.expiresAt = max(upload.expiresAt, expiresAt)
                try db.perform("UPDATE uploads SET chunks_processed = ?, expires_at = ? WHERE id = ?", [upload.chunksProcessed, upload.expiresAt.millis, uploadId])
                return (upload, true)
            }
            return result
        } catch {
            blobs.discard(blocks)
            throw error
        }
    }

    func uploadBlocks(uploadId: String) async throws -> [BlockRef] {
        try await database.read { db in try Self.uploadBlocks(db, uploadId: uploadId) }
    }

    func finalizeUpload(userId: String, uploadId: String, checksum: String, now: Date) async throws -> (upload: UploadRecord, file: FileRecord) {
        try await write(user: userId) { db, effects in
            var upload = try Self.upload(db, id: uploadId, userId: userId)
            if let fileId = upload.completedFileId {
                return (upload, try Self.file(db, id: fileId, userId: userId))
            }
            try Self.checkActive(upload, now: now)
            guard upload.chunksProcessed == upload.totalChunks else {
                throw DriveError.badRequest("The upload still misses chunks.", code: .uploadIncomplete)
            }
            // A new file remembers its requestId, as simple and batch uploads' files do: a later simple upload under
            // the same id (after this session is long forgotten) returns this file instead of making a second.
            let target: ContentTarget =
                upload.fileId.map { .existing(fileId: $0, ifMatch: upload.ifMatch) }
                ?? .new(parentId: upload.parentId, name: upload.name, policy: upload.policy, requestId: upload.requestId)
            if upload.fileId == nil, let earlier = try Self.retried(db, upload.requestId, userId: userId, checksum: checksum) {
                // A simple or batch upload under this requestId landed first: that file is this session's result.
                try self.dropUploadBlocks(db, &effects, uploadId: uploadId, userId: userId, now: now)
                try db.perform("UPDATE uploads SET completed_file_id = ? WHERE id = ?", [earlier.id, uploadId])
                upload.completedFileId = earlier.id
                return (upload, earlier)
            }
            let destination = try Self.resolveTarget(db, &effects, userId: userId, target: target, mimeType: upload.mimeType, now: now)
            let blocks = try Self.uploadBlocks(db, uploadId: uploadId)
            let file = try self.commitRevision(
                db, &effects, file: destination, blocks: blocks, checksum: checksum, size: upload.size, mimeType: upload.mimeType, now: now)
            // The revision now references the blocks; the session's own references go.
            try db.perform("DELETE FROM upload_blocks WHERE upload_id = ?", [uploadId])
            try db.perform("UPDATE uploads SET completed_file_id = ? WHERE id = ?", [file.id, uploadId])
            upload.completedFileId = file.id
            return (upload, file)
        }
    }

    func deleteUpload(userId: String, uploadId: String, now: Date) async throws {
        try await write(user: userId) { db, effects in
            _ = try Self.upload(db, id: uploadId, userId: userId)
            try self.dropUploadBlocks(db, &effects, uploadId: uploadId, userId: userId, now: now)
            try db.perform("DELETE FROM uploads WHERE id = ?", [uploadId])
        }
    }

    func expireUploads(now: Date, forgetAfter: TimeInterval) async throws -> Int {
        let expired = try await database.read { db in
            try db.fetchAll("SELECT id, user_id FROM uploads WHERE state = 'active' AND expires_at <= ? LIMIT 1000", [now.millis])
                .map { (id: try $0.get("id", as: String.self), userId: try $0.get("user_id", as: String.self)) }
        }
        var count = 0
        for upload in expired {
            count += try await write(user: upload.userId) { db, effects in
                // Checked again under the user's lock: a chunk may have slid the expiry since.
                guard try db.fetchOne("SELECT 1 FROM uploads WHERE id = ? AND state = 'active' AND expires_at <= ?", [upload.id, now.millis]) != nil
                else { return 0 }
                try self.dropUploadBlocks(db, &effects, uploadId: upload.id, userId: upload.userId, now: now)
                try db.perform("UPDATE uploads SET state = 'expired' WHERE id = ?", [upload.id])
                return 1
            }
        }
        try await write { db, _ in
            try db.perform("DELETE FROM uploads WHERE state = 'expired' AND expires_at <= ?", [now.millis - Int64(forgetAfter * 1000)])
        }
        return count + (try await expireDAVUploads(now: now))
    }

    // MARK: helpers

    func dropUploadBlocks(_ db: any SQLTransaction, _ effects: inout Effects, uploadId: String, userId: String, now: Date) throws {
        let hashes = Set(try db.values("SELECT hash FROM upload_blocks WHERE upload_id = ?", [uploadId], as: String.self))
        try db.perform("DELETE FROM upload_blocks WHERE upload_id = ?", [uploadId])
        try collectGarbage(db, &effects, userId: userId, hashes: hashes, now: now)
    }

    static func checkActive(_ upload: UploadRecord, now: Date) throws {
        if upload.state == .expired || (upload.completedFileId == nil && upload.expiresAt <= now) {
            throw DriveError.gone("This upload session expired; start a new upload.", code: .uploadExpired)
        }
    }

    static func upload(_ db: any SQLTransaction, id: String, userId: String) throws -> UploadRecord {
        guard let row = try db.fetchOne("SELECT * FROM uploads WHERE id = ? AND user_id = ?", [id, userId]) else {
            throw DriveError.notFound("No such upload session.")
        }
        return try upload(row)
    }

    static func uploadBlocks(_ db: any SQLTransaction, uploadId: String) throws -> [BlockRef] {
        try db.fetchAll(
            """
            SELECT u.hash, u.size, b.pack, b.pack_offset, b.pack_stored FROM upload_blocks u
            LEFT JOIN blocks b ON b.user_id = u.user_id AND b.hash = u.hash WHERE u.upload_id = ? ORDER BY u.chunk, u.idx
            """, [uploadId]
        ).map { BlockRef(hash: try $0.get("hash"), size: try $0.get("size"), pack: try packLocation($0)) }
    }

    static func upload(_ row: SQLRow) throws -> UploadRecord {
        UploadRecord(
            id: try row.get("id"), userId: try row.get("user_id"), requestId: try row.get("request_id"), name: try row.get("name"), mimeType: try row.get("mime_type"),
            parentId: try row.get("parent_id"), fileId: try row.get("file_id"), ifMatch: try row.get("if_match"),
            policy: ConflictPolicy(rawValue: try row.get("on_conflict")) ?? .fail, size: try row.get("size"), checksum: try row.get("checksum"),
            chunkSize: try row.get("chunk_size"), totalChunks: try row.get("total_chunks"), chunksProcessed: try row.get("chunks_processed"),
            createdAt: Date(millis: try row.get("created_at")), expiresAt: Date(millis: try row.get("expires_at")),
            completedFileId: try row.get("completed_file_id"), state: UploadRecord.State(rawValue: try row.get("state")) ?? .active)
    }
}
