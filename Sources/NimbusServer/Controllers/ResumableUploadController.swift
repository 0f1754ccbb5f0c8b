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
    let dependencies: Dependencies
    let hashes: RunningHashes

    func register(_ routes: inout RouteTable) {
        routes.on(Routes.uploadSession, use: status)
        routes.on(Routes.cancelUpload, use: cancel)
        routes.on(Routes.uploadChunk, use: chunk)
    }

    func initiate(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        let body = try await request.decode(as: UploadRequest.self, context: context)
        let configuration = dependencies.configuration
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
        try dependencies.intake.admit(bytes: body.size)
        let file = try await body.fileId.asyncMap { try await dependencies.item($0, for: me, .write) }
        let parent = try await dependencies.item(body.parentId ?? "root", for: me, .create)
        let owner = file?.userId ?? parent.userId
        let fileId = file?.id
        let parentId = parent.id
        let now = dependencies.now
        let chunkSize = configuration.chunkSize
        let session = UploadRecord(
            id: "up" + randomToken(), userId: owner, requestId: body.requestId, name: name, mimeType: mimeType,
            parentId: fileId == nil ? parentId : nil, fileId: fileId, ifMatch: request.headers[.ifMatch],
            policy: try FilesController.policy(request), size: body.size, checksum: body.checksum?.lowercased(), chunkSize: chunkSize,
            totalChunks: Int((body.size + chunkSize - 1) / chunkSize), chunksProcessed: 0, createdAt: now,
            expiresAt: now.addingTimeInterval(configuration.uploadExpiry.timeInterval), completedFileId: nil, state: .active)
        let (upload, _) = try await dependencies.content.createUpload(session, now: now)
        if upload.totalChunks == 0 {
            // Nothing to send: an empty file is complete at once.
            return try await finish(upload, userId: owner, for: me)
        }
        let made = try await upload.completedFileId.asyncMap { try await dependencies.present(try await dependencies.files.file(id: $0, userId: owner), for: me) }
        return try JSONResponse.make(upload.api(file: made), status: made == nil ? .ok : .created)
    }

    /// The session `id`, through the access decision on where it writes (the file it makes a new version of, or the
    /// folder it makes a file in; its owner's root when that is gone): 404 for a principal that may not, as for an
    /// unknown id.
    func session(_ id: String, for me: Principal) async throws -> UploadRecord {
        guard let upload = try await dependencies.content.uploadSession(id: id) else { throw dependencies.access.notFound(me, itemId: id, .write) }
        let target: FileRecord?
        if let itemId = upload.fileId ?? upload.parentId, try await dependencies.files.item(id: itemId) != nil {
            // Through the decision with how the principal reaches it (an editor's session in a share).
            _ = try await dependencies.item(itemId, for: me, upload.fileId == nil ? .create : .write)
            return upload
        } else if let owner = try await dependencies.accounts.user(id: upload.userId) {
            target = try await dependencies.files.item(id: owner.rootId)
        } else {
            target = nil
        }
        guard let target else { throw dependencies.access.notFound(me, itemId: id, .write) }
        try dependencies.access.authorize(me, target, .write)
        return upload
    }

    @Sendable func status(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        let upload = try await session(try context.parameter("uploadId"), for: me)
        try SQLMetadataStore.checkActive(upload, now: dependencies.now)
        let file = try await upload.completedFileId.asyncMap { try await dependencies.present(try await dependencies.files.file(id: $0, userId: upload.userId), for: me) }
        return try JSONResponse.make(upload.api(file: file))
    }

    @Sendable func cancel(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        let id = try context.parameter("uploadId")
        let upload = try await session(id, for: me)
        try await dependencies.content.deleteUpload(userId: upload.userId, uploadId: id, now: dependencies.now)
        hashes.forget(id)
        return Response(status: .noContent)
    }

    @Sendable func chunk(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        let id = try context.parameter("uploadId")
        var upload = try await session(id, for: me)
        let owner = upload.userId
        try SQLMetadataStore.checkActive(upload, now: dependencies.now)
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
        try dependencies.intake.admit(bytes: range.last + 1 - range.first)
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
            return try await acknowledge(upload, userId: owner, for: me)
        }
        let previous = hashes.state(for: id, beforeChunk: k)
        let staged = try await dependencies.intake.stage(
            request.body, max: expected.length, mimeType: upload.mimeType, expectedSize: expected.length, runningHash: previous)
        guard staged.content.size == expected.length else {
            dependencies.blobs.discard(staged.content.blocks)
            throw DriveError.badRequest(
                "Chunk \(k) must be \(expected.length) bytes; \(staged.content.size) arrived. Nothing was stored; send it again.",
                code: .invalidChunk)
        }
        let (stored, wasStored) = try await dependencies.content.storeChunk(
            userId: owner, uploadId: id, chunk: k, blocks: staged.content.blocks, now: dependencies.now,
            expiresAt: dependencies.now.addingTimeInterval(dependencies.configuration.uploadExpiry.timeInterval))
        if wasStored, previous != nil || k == 0 {
            hashes.record(id, afterChunk: k, state: staged.runningHash)
        }
        upload = stored
        return try await acknowledge(upload, userId: owner, for: me)
    }

    /// 308 while chunks remain; once all are in, commits the file and answers 201 with it.
    func acknowledge(_ upload: UploadRecord, userId: String, for me: Principal) async throws -> Response {
        if upload.completedFileId == nil && upload.chunksProcessed < upload.totalChunks {
            var response = try JSONResponse.make(upload.api(), status: .permanentRedirect)
            response.headers[.range] = "bytes=0-\(Int64(upload.chunksProcessed) * upload.chunkSize - 1)"
            return response
        }
        return try await finish(upload, userId: userId, for: me)
    }

    func finish(_ upload: UploadRecord, userId: String, for me: Principal) async throws -> Response {
        if let fileId = upload.completedFileId {
            let file = try await dependencies.files.file(id: fileId, userId: userId)
            return try JSONResponse.make(upload.api(file: try await dependencies.present(file, for: me)), status: .created, etag: file.etag)
        }
        let checksum = try await checksum(of: upload)
        if let expected = upload.checksum, expected != checksum {
            // The content is not what the client meant to send: nothing becomes visible and the bytes are freed.
            try await dependencies.content.deleteUpload(userId: userId, uploadId: upload.id, now: dependencies.now)
            hashes.forget(upload.id)
            throw DriveError.checksumMismatch(expected: expected, actual: checksum)
        }
        let (finished, file) = try await dependencies.content.finalizeUpload(userId: userId, uploadId: upload.id, checksum: checksum, now: dependencies.now)
        hashes.forget(upload.id)
        return try JSONResponse.make(finished.api(file: try await dependencies.present(file, for: me)), status: .created, etag: file.etag)
    }

    /// The whole content's SHA-256: from the running hash when this process saw every chunk, else read back.
    func checksum(of upload: UploadRecord) async throws -> String {
        if let state = hashes.state(for: upload.id, beforeChunk: upload.totalChunks) {
            return state.finalize().hexString
        }
        var hasher = SHA256()
        let blocks = try await dependencies.content.uploadBlocks(uploadId: upload.id)
        try await dependencies.blobs.read(blocks, user: upload.userId, range: 0..<upload.size) { buffer in
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
