import Crypto
import Foundation
import Hummingbird
import NIOConcurrencyHelpers
import NimbusAPI

/// The seed's resumable upload protocol: initiate, `PUT` chunks in order, `GET` status, `DELETE` cancel.
///
/// A chunk is acknowledged only after its blocks are fsynced, placed and recorded in one transaction, so after a
/// crash `GET` reports exactly the chunks that are safe, and the client resumes from there.
struct ResumableUploadController: Sendable {
    let drive: Drive
    let hashes: RunningHashes

    func register(_ routes: inout RouteTable) {
        routes.on(.get, "/v1/upload/{uploadId}", use: status)
        routes.on(.delete, "/v1/upload/{uploadId}", use: cancel)
        routes.on(.put, "/v1/upload/{uploadId}/chunk", use: chunk)
    }

    func initiate(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await drive.identity(request)
        let body = try await request.decode(as: UploadRequest.self, context: context)
        let configuration = drive.configuration
        try FilesController.validRequestId(body.requestId)
        guard body.size >= 0 else { throw DriveError.badRequest("'size' cannot be negative.") }
        guard body.size <= configuration.maxUploadSize else {
            throw DriveError.tooLarge("Files can be at most \(configuration.maxUploadSize) bytes; this one is \(body.size).")
        }
        if let checksum = body.checksum, checksum.count != 64 || !checksum.allSatisfy(\.isHexDigit) {
            throw DriveError.badRequest("'checksum' must be the 64 hex digits of the content's SHA-256.")
        }
        let name = try FilesController.validName(body.name)
        let mimeType = try FilesController.validContentMimeType(body.mimeType)
        try drive.ensureRoom(for: body.size)
        let fileId = try await body.fileId.asyncMap { try await drive.resolve($0, for: me) }
        let parentId = try await drive.resolve(body.parentId ?? "root", for: me)
        let now = drive.now
        let chunkSize = configuration.chunkSize
        let session = UploadRecord(
            id: "up" + randomToken(), userId: me.userId, requestId: body.requestId, name: name, mimeType: mimeType,
            parentId: fileId == nil ? parentId : nil, fileId: fileId, ifMatch: request.headers[.ifMatch],
            policy: try FilesController.policy(request), size: body.size, checksum: body.checksum?.lowercased(), chunkSize: chunkSize,
            totalChunks: Int((body.size + chunkSize - 1) / chunkSize), chunksProcessed: 0, createdAt: now,
            expiresAt: now.addingTimeInterval(configuration.uploadExpiry.timeInterval), completedFileId: nil, state: .active)
        let (upload, _) = try await drive.store.createUpload(session, now: now)
        if upload.totalChunks == 0 {
            // Nothing to send: an empty file is complete at once.
            return try await finish(upload, userId: me.userId)
        }
        let file = try await upload.completedFileId.asyncMap { try await drive.store.file(id: $0, userId: me.userId) }
        return try JSONResponse.make(upload.api(file: file), status: file == nil ? .ok : .created)
    }

    @Sendable func status(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await drive.identity(request)
        let upload = try await drive.store.upload(id: try context.parameter("uploadId"), userId: me.userId)
        try SQLMetadataStore.checkActive(upload, now: drive.now)
        let file = try await upload.completedFileId.asyncMap { try await drive.store.file(id: $0, userId: me.userId) }
        return try JSONResponse.make(upload.api(file: file))
    }

    @Sendable func cancel(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await drive.identity(request)
        let id = try context.parameter("uploadId")
        try await drive.store.deleteUpload(userId: me.userId, uploadId: id, now: drive.now)
        hashes.forget(id)
        return Response(status: .noContent)
    }

    @Sendable func chunk(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await drive.identity(request)
        let id = try context.parameter("uploadId")
        var upload = try await drive.store.upload(id: id, userId: me.userId)
        try SQLMetadataStore.checkActive(upload, now: drive.now)
        guard let range = ContentRange.parse(request.headers[.contentRange]) else {
            throw DriveError.badRequest("Send 'Content-Range: bytes start-end/total' with each chunk.", code: .invalidChunk)
        }
        guard range.total == upload.size else {
            throw DriveError.badRequest("Content-Range total \(range.total) is not the upload's size \(upload.size).", code: .invalidChunk)
        }
        guard range.first < upload.size, range.first % upload.chunkSize == 0 else {
            throw DriveError.rangeNotSatisfiable(
                "A chunk must start at a multiple of \(upload.chunkSize) below \(upload.size); next is chunk \(upload.chunksProcessed).",
                size: upload.size)
        }
        try drive.ensureRoom(for: range.last + 1 - range.first)
        let k = Int(range.first / upload.chunkSize)
        let expected = upload.range(ofChunk: k)
        guard range.last + 1 == expected.upperBound else {
            throw DriveError.badRequest(
                "Chunk \(k) covers bytes \(expected.lowerBound)-\(expected.upperBound - 1), not \(range.first)-\(range.last).",
                code: .invalidChunk)
        }
        if let length = request.headers[.contentLength].flatMap(Int64.init), length != expected.length {
            throw DriveError.badRequest("Content-Length \(length) does not match the chunk's \(expected.length) bytes.", code: .invalidChunk)
        }
        if k > upload.chunksProcessed {
            throw DriveError.rangeNotSatisfiable(
                "Chunks go in order: the next one is chunk \(upload.chunksProcessed) (bytes from \(Int64(upload.chunksProcessed) * upload.chunkSize)).",
                size: upload.size)
        }
        if k < upload.chunksProcessed || upload.completedFileId != nil {
            // Already stored: acknowledge again without storing (the client missed our answer).
            for try await _ in request.body {}
            return try await acknowledge(upload, userId: me.userId)
        }
        let previous = hashes.state(for: id, beforeChunk: k)
        let staged = try await UploadController.stage(
            request.body, blobs: drive.blobs, max: expected.length, mimeType: upload.mimeType, expectedSize: expected.length,
            runningHash: previous)
        guard staged.content.size == expected.length else {
            drive.blobs.discard(staged.content.blocks)
            throw DriveError.badRequest(
                "Chunk \(k) must be \(expected.length) bytes; \(staged.content.size) arrived. Nothing was stored; send it again.",
                code: .invalidChunk)
        }
        let (stored, wasStored) = try await drive.store.storeChunk(
            userId: me.userId, uploadId: id, chunk: k, blocks: staged.content.blocks, now: drive.now,
            expiresAt: drive.now.addingTimeInterval(drive.configuration.uploadExpiry.timeInterval))
        if wasStored, previous != nil || k == 0 {
            hashes.record(id, afterChunk: k, state: staged.runningHash)
        }
        upload = stored
        return try await acknowledge(upload, userId: me.userId)
    }

    /// 308 while chunks remain; once all are in, commits the file and answers 201 with it.
    func acknowledge(_ upload: UploadRecord, userId: String) async throws -> Response {
        if upload.completedFileId == nil && upload.chunksProcessed < upload.totalChunks {
            var response = try JSONResponse.make(upload.api(), status: .permanentRedirect)
            response.headers[.range] = "bytes=0-\(Int64(upload.chunksProcessed) * upload.chunkSize - 1)"
            return response
        }
        return try await finish(upload, userId: userId)
    }

    func finish(_ upload: UploadRecord, userId: String) async throws -> Response {
        if let fileId = upload.completedFileId {
            let file = try await drive.store.file(id: fileId, userId: userId)
            return try JSONResponse.make(upload.api(file: file), status: .created, etag: file.etag)
        }
        let checksum = try await checksum(of: upload)
        if let expected = upload.checksum, expected != checksum {
            // The content is not what the client meant to send: nothing becomes visible and the bytes are freed.
            try await drive.store.deleteUpload(userId: userId, uploadId: upload.id, now: drive.now)
            hashes.forget(upload.id)
            throw DriveError.checksumMismatch(expected: expected, actual: checksum)
        }
        let (finished, file) = try await drive.store.finalizeUpload(userId: userId, uploadId: upload.id, checksum: checksum, now: drive.now)
        hashes.forget(upload.id)
        return try JSONResponse.make(finished.api(file: file), status: .created, etag: file.etag)
    }

    /// The whole content's SHA-256: from the running hash when this process saw every chunk, else read back.
    func checksum(of upload: UploadRecord) async throws -> String {
        if let state = hashes.state(for: upload.id, beforeChunk: upload.totalChunks) {
            return state.finalize().hexString
        }
        var hasher = SHA256()
        let blocks = try await drive.store.uploadBlocks(uploadId: upload.id)
        try await drive.blobs.read(blocks, user: upload.userId, range: 0..<upload.size) { buffer in
            buffer.withUnsafeReadableBytes { hasher.update(bufferPointer: $0) }
        }
        return hasher.finalize().hexString
    }
}

/// In-memory SHA-256 states of uploads in progress, so the last chunk need not re-read the whole file.
///
/// Only an optimisation: after a restart (or any gap) the state is missing and the checksum is computed by
/// reading the stored blocks back.
final class RunningHashes: Sendable {
    private let states = NIOLockedValueBox([String: (nextChunk: Int, state: SHA256)]())

    /// The state covering chunks `0..<k`, if this process has it.
    func state(for uploadId: String, beforeChunk k: Int) -> SHA256? {
        if k == 0 { return SHA256() }
        return states.withLockedValue { states in
            guard let entry = states[uploadId], entry.nextChunk == k else { return nil }
            return entry.state
        }
    }

    func record(_ uploadId: String, afterChunk k: Int, state: SHA256) {
        states.withLockedValue { $0[uploadId] = (k + 1, state) }
    }

    func forget(_ uploadId: String) {
        _ = states.withLockedValue { $0.removeValue(forKey: uploadId) }
    }
}
