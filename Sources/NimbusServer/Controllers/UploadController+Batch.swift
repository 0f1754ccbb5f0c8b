import Crypto
import Foundation
import Hummingbird
import NIOFoundationCompat
import NimbusAPI

/// `POST /v1/upload?uploadType=batch`: many small files in one request, committed in one transaction.
extension UploadController {
    /// Decodes a ``BatchUploadRequest``, stages each entry's bytes, commits them all in one transaction and answers
    /// 200 with one result per entry. A malformed request (bad JSON, no entries, too many, too big) is refused as a
    /// whole and changes nothing; an entry that cannot be done (bad name, clash, checksum, quota) fails alone.
    func batch(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await drive.identity(request)
        // Base64 is 4/3 of the bytes; the JSON around each entry is small.
        let limit = BatchUploadRequest.maxContentBytes / 3 * 4 + BatchUploadRequest.maxFiles * 2048
        let batch = try await request.decodeJSON(
            BatchUploadRequest.self, limit: limit,
            tooLarge: "A batch can carry at most \(BatchUploadRequest.maxContentBytes) bytes of content; send the rest in another.")
        guard !batch.files.isEmpty, batch.files.count <= BatchUploadRequest.maxFiles else {
            throw DriveError.badRequest("A batch holds 1 to \(BatchUploadRequest.maxFiles) files; this one has \(batch.files.count).")
        }
        let total = batch.files.reduce(0) { $0 + $1.content.count }
        try drive.ensureRoom(for: Int64(total))
        guard total <= BatchUploadRequest.maxContentBytes else {
            throw DriveError.tooLarge("A batch can carry at most \(BatchUploadRequest.maxContentBytes) bytes of content; this one has \(total).")
        }

        var results = [BatchUploadResponse.Result?](repeating: nil, count: batch.files.count)
        var entries: [BatchEntry] = []
        var positions: [Int] = []
        do {
            var root: String?
            for (index, entry) in batch.files.enumerated() {
                do {
                    let (target, mimeType) = try await prepare(entry, for: me, root: &root)
                    let expected = try FilesController.validChecksum(entry.checksum)
                    let modifiedAt = try FilesController.validModifiedAt(entry.modifiedAt)
                    var content = try await Self.stage(entry.content, blobs: drive.blobs, mimeType: mimeType)
                    content.modifiedAt = modifiedAt
                    if let expected, content.checksum != expected {
                        drive.blobs.discard(content.blocks)
                        throw DriveError.checksumMismatch(expected: expected, actual: content.checksum)
                    }
                    entries.append(BatchEntry(target: target, content: content))
                    positions.append(index)
                } catch let error as DriveError {
                    results[index] = Self.result(error)
                }
            }
        } catch {
            for entry in entries { drive.blobs.discard(entry.content.blocks) }
            throw error
        }
        if !entries.isEmpty {
            let outcomes = try await drive.store.commitBatch(userId: me.userId, entries: entries, now: drive.now)
            for (position, outcome) in zip(positions, outcomes) {
                switch outcome {
                case .success(let committed): results[position] = .init(status: committed.created ? 201 : 200, file: committed.file.api)
                case .failure(let error): results[position] = Self.result(error)
                }
            }
        }
        return try JSONResponse.make(BatchUploadResponse(results: results.map { $0 ?? Self.result(.internalError("Not processed.")) }))
    }

    static func result(_ error: DriveError) -> BatchUploadResponse.Result {
        .init(status: Int(error.status.code), error: error.body.error)
    }

    /// Where an entry goes and its media type, checked as the simple upload checks its query.
    func prepare(_ entry: BatchUploadRequest.Entry, for me: Identity, root: inout String?) async throws -> (ContentTarget, String) {
        try FilesController.validRequestId(entry.requestId)
        if let fileId = entry.fileId {
            guard entry.requestId == nil else {
                throw DriveError.badRequest("'requestId' makes the creation of a new file safe to retry; a new version is guarded by 'ifMatch'.")
            }
            let file = try await drive.file(fileId, for: me)
            let ifMatch = entry.ifMatch.map { $0.hasPrefix("\"") || $0 == "*" ? $0 : "\"\($0)\"" }
            return (.existing(fileId: file.id, ifMatch: ifMatch), try FilesController.validContentMimeType(entry.mimeType ?? file.mimeType))
        }
        guard let rawName = entry.name else { throw DriveError.badRequest("Give each file a 'name' (or a 'fileId' for a new version).") }
        let name = try FilesController.validName(rawName)
        let policy = try FilesController.policy(entry.onConflict)
        let parentId: String
        if let given = entry.parentId, given != "root" {
            parentId = given
        } else if let root {
            parentId = root
        } else {
            parentId = try await drive.resolve("root", for: me)
            root = parentId
        }
        let mimeType = try FilesController.validContentMimeType(entry.mimeType ?? MimeType.guess(forName: name))
        return (.new(parentId: parentId, name: name, policy: policy, requestId: entry.requestId), mimeType)
    }

    /// Stages bytes already in memory (a batch entry): small ones inline, others as block files.
    static func stage(_ bytes: Data, blobs: any BlobStore, mimeType: String) async throws -> StagedContent {
        if bytes.count <= StagedContent.inlineLimit { return .inline([UInt8](bytes), mimeType: mimeType) }
        var stager = blobs.makeStager(runningHash: SHA256())
        do {
            try await stager.append(ByteBuffer(bytes: bytes))
            let (blocks, checksum, _, size) = try await stager.finish()
            return StagedContent(blocks: blocks, checksum: checksum, size: size, mimeType: mimeType)
        } catch {
            await stager.abandon()
            throw error
        }
    }
}
