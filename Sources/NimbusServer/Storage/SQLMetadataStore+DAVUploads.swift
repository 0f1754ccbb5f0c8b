import Foundation
import NimbusAPI

/// A Nextcloud chunked upload as stored: a named folder of chunks, assembled in the order of their names.
struct DAVUploadRecord: Sendable, Equatable {
    struct Chunk: Sendable, Equatable {
        /// Where it goes: the number its name starts with (`00042`, or `000000000000000-000010485759` — Nextcloud's
        /// older naming by byte range).
        var order: Int64
        var name: String
        var size: Int64
    }

    var userId: String
    var name: String
    /// The `Destination` the upload was started with (chunked upload v2), if any.
    var destination: String?
    var createdAt: Date
    var expiresAt: Date
    var chunks: [Chunk]

    /// Its chunks' blocks are held in `upload_blocks` under this id, so the sweep keeps them while it is open.
    static func blocksId(userId: String, name: String) -> String { "dav:\(userId):\(name)" }
}

/// Nextcloud's chunked uploads (see `DAVRequest`'s uploads): chunks are put and adopted as a resumable upload's are,
/// held by `upload_blocks` until the upload is assembled into a file (in one transaction with the commit), deleted,
/// or expires.
extension SQLMetadataStore {
    /// Starts an upload; false if one of that name is open already.
    func createDAVUpload(userId: String, name: String, destination: String?, now: Date, expiresAt: Date) async throws -> Bool {
        try await write(user: userId) { db, _ in
            if try db.fetchOne("SELECT 1 FROM dav_uploads WHERE user_id = ? AND name = ?", [userId, name]) != nil { return false }
            try db.perform(
                "INSERT INTO dav_uploads (user_id, name, destination, created_at, expires_at) VALUES (?, ?, ?, ?, ?)",
                [userId, name, destination, now.millis, expiresAt.millis])
            return true
        }
    }

    /// The user's open uploads (chunks not listed), or the one named, with its chunks in order.
    func davUploads(userId: String, name: String?, now: Date) async throws -> [DAVUploadRecord] {
        try await database.read { db in
            let rows = try name.map {
                try db.fetchAll("SELECT * FROM dav_uploads WHERE user_id = ? AND name = ? AND expires_at > ?", [userId, $0, now.millis])
            } ?? db.fetchAll("SELECT * FROM dav_uploads WHERE user_id = ? AND expires_at > ? ORDER BY name", [userId, now.millis])
            return try rows.map { row in
                let upload: String = try row.get("name")
                let chunks = name == nil ? [] : try db.fetchAll(
                    "SELECT ord, name, size FROM dav_upload_chunks WHERE user_id = ? AND upload = ? ORDER BY ord", [userId, upload]
                ).map { DAVUploadRecord.Chunk(order: try $0.get("ord"), name: try $0.get("name"), size: try $0.get("size")) }
                return DAVUploadRecord(
                    userId: userId, name: upload, destination: try row.get("destination"), createdAt: Date(millis: try row.get("created_at")),
                    expiresAt: Date(millis: try row.get("expires_at")), chunks: chunks)
            }
        }
    }

    /// Stores a chunk (replacing one of the same order: a chunk sent again), adopting its blocks as an upload's
    /// chunk does (counted in the quota), and slides the upload's expiry. 404 if the upload is not open.
    func storeDAVChunk(userId: String, upload: String, chunk: DAVUploadRecord.Chunk, blocks: [StagedBlock], now: Date, expiresAt: Date) async throws {
        do {
            try await putBlocks(blocks, userId: userId, now: now)
            try await write(user: userId) { db, effects in
                try Self.requireOpenDAVUpload(db, userId: userId, name: upload, now: now)
                let id = DAVUploadRecord.blocksId(userId: userId, name: upload)
                let replaced = Set(try db.values("SELECT hash FROM upload_blocks WHERE upload_id = ? AND chunk = ?", [id, chunk.order], as: String.self))
                try db.perform("DELETE FROM upload_blocks WHERE upload_id = ? AND chunk = ?", [id, chunk.order])
                try db.perform("DELETE FROM dav_upload_chunks WHERE user_id = ? AND upload = ? AND ord = ?", [userId, upload, chunk.order])
                try self.collectGarbage(db, &effects, userId: userId, hashes: replaced, now: now)
                let adoptions = try self.planAdoption(db, effects, userId: userId, blocks: blocks)
                try self.checkQuota(db, &effects, userId: userId, adding: adoptions)
                try self.verifyStored(db, adoptions, userId: userId)
                try self.applyAdoption(db, &effects, userId: userId, adoptions, now: now)
                for (index, block) in blocks.enumerated() {
                    try db.perform(
                        "INSERT INTO upload_blocks (upload_id, chunk, idx, user_id, hash, size) VALUES (?, ?, ?, ?, ?, ?)",
                        [id, chunk.order, index, userId, block.ref.hash, block.ref.size])
                }
                try db.perform(
                    "INSERT INTO dav_upload_chunks (user_id, upload, ord, name, size) VALUES (?, ?, ?, ?, ?)",
                    [userId, upload, chunk.order, chunk.name, chunk.size])
                try db.perform("UPDATE dav_uploads SET expires_at = ? WHERE user_id = ? AND name = ?", [expiresAt.millis, userId, upload])
            }
        } catch {
            blobs.discard(blocks)
            throw error
        }
    }

    /// The blocks of an upload's chunks, in order.
    func davUploadBlocks(userId: String, upload: String) async throws -> [BlockRef] {
        try await database.read { db in try Self.uploadBlocks(db, uploadId: DAVUploadRecord.blocksId(userId: userId, name: upload)) }
    }

    /// Assembles the upload into a file or a new revision (`target`'s checks, as every commit) and closes it, in one
    /// transaction: a `MOVE` answered or not, the upload is either still whole or gone with the file made.
    /// `blocks` are the ones the checksum was computed over: if a chunk was replaced since, nothing happens (409).
    func finishDAVUpload(
        userId: String, upload: String, target: ContentTarget, blocks: [BlockRef], checksum: String, size: Int64, mimeType: String,
        modifiedAt: Date?, now: Date
    ) async throws -> FileRecord {
        try await write(user: userId) { db, effects in
            try Self.requireOpenDAVUpload(db, userId: userId, name: upload, now: now)
            let id = DAVUploadRecord.blocksId(userId: userId, name: upload)
            guard try Self.uploadBlocks(db, uploadId: id).map(\.hash) == blocks.map(\.hash) else {
                throw DriveError.conflict("The upload's chunks changed while it was being assembled; assemble it again.")
            }
            let destination = try Self.resolveTarget(db, &effects, userId: userId, target: target, mimeType: mimeType, now: now)
            let file = try self.commitRevision(
                db, &effects, file: destination, blocks: blocks, checksum: checksum, size: size, mimeType: mimeType, now: now, modifiedAt: modifiedAt)
            // The revision holds the blocks now; the upload's own references go with it.
            try db.perform("DELETE FROM upload_blocks WHERE upload_id = ?", [id])
            try Self.forgetDAVUpload(db, userId: userId, name: upload)
            return file
        }
    }

    /// Deletes an upload, or one chunk of it; its blocks no longer count against the quota. False: nothing there.
    func deleteDAVUpload(userId: String, upload: String, chunk: Int64?, now: Date) async throws -> Bool {
        try await write(user: userId) { db, effects in
            guard try db.fetchOne("SELECT 1 FROM dav_uploads WHERE user_id = ? AND name = ?", [userId, upload]) != nil else { return false }
            let id = DAVUploadRecord.blocksId(userId: userId, name: upload)
            guard let chunk else {
                try self.dropUploadBlocks(db, &effects, uploadId: id, userId: userId, now: now)
                try Self.forgetDAVUpload(db, userId: userId, name: upload)
                return true
            }
            let hashes = Set(try db.values("SELECT hash FROM upload_blocks WHERE upload_id = ? AND chunk = ?", [id, chunk], as: String.self))
            try db.perform("DELETE FROM upload_blocks WHERE upload_id = ? AND chunk = ?", [id, chunk])
            let deleted = try db.execute("DELETE FROM dav_upload_chunks WHERE user_id = ? AND upload = ? AND ord = ?", [userId, upload, chunk])
            try self.collectGarbage(db, &effects, userId: userId, hashes: hashes, now: now)
            return deleted > 0
        }
    }

    /// Deletes the uploads past their expiry (untouched for the upload expiry, 24 h by default), freeing their bytes.
    func expireDAVUploads(now: Date) async throws -> Int {
        let expired = try await database.read { db in
            try db.fetchAll("SELECT user_id, name FROM dav_uploads WHERE expires_at <= ? LIMIT 1000", [now.millis])
                .map { (userId: try $0.get("user_id", as: String.self), name: try $0.get("name", as: String.self)) }
        }
        var count = 0
        for upload in expired {
            count += try await write(user: upload.userId) { db, effects in
                // Checked again under the user's lock: a chunk may have slid the expiry since.
                guard try db.fetchOne(
                    "SELECT 1 FROM dav_uploads WHERE user_id = ? AND name = ? AND expires_at <= ?", [upload.userId, upload.name, now.millis]) != nil
                else { return 0 }
                try self.dropUploadBlocks(db, &effects, uploadId: DAVUploadRecord.blocksId(userId: upload.userId, name: upload.name), userId: upload.userId, now: now)
                try Self.forgetDAVUpload(db, userId: upload.userId, name: upload.name)
                return 1
            }
        }
        return count
    }

    /// 404 unless the upload is open (started, not finished, deleted or expired).
    static func requireOpenDAVUpload(_ db: any SQLTransaction, userId: String, name: String, now: Date) throws {
        guard try db.fetchOne("SELECT 1 FROM dav_uploads WHERE user_id = ? AND name = ? AND expires_at > ?", [userId, name, now.millis]) != nil
        else { throw DriveError.notFound("No such upload: start it with MKCOL.") }
    }

    static func forgetDAVUpload(_ db: any SQLTransaction, userId: String, name: String) throws {
        try db.perform("DELETE FROM dav_upload_chunks WHERE user_id = ? AND upload = ?", [userId, name])
        try db.perform("DELETE FROM dav_uploads WHERE user_id = ? AND name = ?", [userId, name])
    }
}
