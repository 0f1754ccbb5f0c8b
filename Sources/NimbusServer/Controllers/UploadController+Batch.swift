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
        let me = try await dependencies.principal(request)
        // Base64 is 4/3 of the bytes; the JSON around each entry is small.
        let limit = BatchUploadRequest.maxContentBytes / 3 * 4 + BatchUploadRequest.maxFiles * 2048
        let batch = try await request.decodeJSON(
            BatchUploadRequest.self, limit: limit,
            tooLarge: "A batch can carry at most \(BatchUploadRequest.maxContentBytes) bytes of content; send the rest in another.")
        guard !batch.files.isEmpty, batch.files.count <= BatchUploadRequest.maxFiles else {
            throw DriveError.badRequest("A batch holds 1 to \(BatchUploadRequest.maxFiles) files; this one has \(batch.files.count).")
        }
        let total = batch.files.reduce(0) { $0 + $1.content.count }
        let intake = dependencies.intake
        try intake.admit(bytes: Int64(total))
        guard total <= BatchUploadRequest.maxContentBytes else {
            throw DriveError.tooLarge("A batch can carry at most \(BatchUploadRequest.maxContentBytes) bytes of content; this one has \(total).")
        }

        var results = [BatchUploadResponse.Result?](repeating: nil, count: batch.files.count)
        var entries: [BatchEntry] = []
        var positions: [Int] = []
        var owners: [String] = []
        do {
            var folders: [String: FileRecord] = [:]
            for (index, entry) in batch.files.enumerated() {
                do {
                    let (target, mimeType, owner) = try await prepare(entry, for: me, folders: &folders)
                    let expected = try FilesController.validChecksum(entry.checksum)
                    let modifiedAt = try FilesController.validModifiedAt(entry.modifiedAt)
                    var content = try await intake.receive(entry.content, mimeType: mimeType)
                    content.modifiedAt = modifiedAt
                    try intake.verify(content, expected: expected)
                    entries.append(BatchEntry(target: target, content: content))
                    positions.append(index)
                    owners.append(owner)
                } catch let error as DriveError {
                    results[index] = Self.result(error)
                }
            }
        } catch {
            for entry in entries { dependencies.blobs.discard(entry.content.blocks) }
            throw error
        }
        // One transaction per tree written into (today the principal's own: one).
        for owner in Set(owners).sorted() {
            let mine = owners.indices.filter { owners[$0] == owner }
            let outcomes = try await dependencies.content.commitBatch(userId: owner, entries: mine.map { entries[$0] }, now: dependencies.now)
            for (index, outcome) in zip(mine, outcomes) {
                switch outcome {
                case .success(let committed):
                    results[positions[index]] = .init(status: committed.created ? 201 : 200, file: try await dependencies.present(committed.file, for: me))
                case .failure(let error): results[positions[index]] = Self.result(error)
                }
            }
        }
        return try JSONResponse.make(BatchUploadResponse(results: results.map { $0 ?? Self.result(.internalError("Not processed.")) }))
    }

    static func result(_ error: DriveError) -> BatchUploadResponse.Result {
        .init(status: Int(error.status.code), error: error.body.error)
    }

    /// Where an entry goes, its media type and whose tree it goes into, checked as the simple upload checks its query
    /// (through the access decision; each folder asked about once per batch, in `folders`).
    func prepare(
        _ entry: BatchUploadRequest.Entry, for me: Principal, folders: inout [String: FileRecord]
    ) async throws -> (ContentTarget, String, String) {
        try FilesController.validRequestId(entry.requestId)
        if let fileId = entry.fileId {
            guard entry.requestId == nil else {
                throw DriveError.badRequest("'requestId' makes the creation of a new file safe to retry; a new version is guarded by 'ifMatch'.")
            }
            let file = try await dependencies.item(fileId, for: me, .write)
            let ifMatch = entry.ifMatch.map { $0.hasPrefix("\"") || $0 == "*" ? $0 : "\"\($0)\"" }
            return (.existing(fileId: file.id, ifMatch: ifMatch), try FilesController.validContentMimeType(entry.mimeType ?? file.mimeType), file.userId)
        }
        guard let rawName = entry.name else { throw DriveError.badRequest("Give each file a 'name' (or a 'fileId' for a new version).") }
        let name = try FilesController.validName(rawName)
        let policy = try FilesController.policy(entry.onConflict)
        let asked = entry.parentId ?? "root"
        let parent: FileRecord
        if let known = folders[asked] {
            parent = known
        } else {
            parent = try await dependencies.item(asked, for: me, .create)
            folders[asked] = parent
        }
        let mimeType = try FilesController.validContentMimeType(entry.mimeType ?? MimeType.guess(forName: name))
        return (.new(parentId: parent.id, name: name, policy: policy, requestId: entry.requestId), mimeType, parent.userId)
    }
}
