import Crypto
import Foundation
import Hummingbird
import NimbusAPI

/// `POST /v1/upload`: simple uploads (`uploadType=media`); resumable sessions live in ``ResumableUploadController``.
struct UploadController: Sendable {
    let dependencies: Dependencies
    let resumable: ResumableUploadController

    func register(_ routes: inout RouteTable) {
        routes.on(Routes.upload, use: upload)
        resumable.register(&routes)
    }

    @Sendable func upload(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        switch request.query("uploadType") {
        case "media": return try await media(request, context: context)
        case "resumable": return try await resumable.initiate(request, context: context)
        case "batch": return try await batch(request, context: context)
        default: throw DriveError.badRequest("'uploadType' must be media, resumable or batch.")
        }
    }

    /// The raw body becomes the content: a new file (`name`, `parentId`, `onConflict`, and `requestId` to make a
    /// retry return the file the first attempt made) or a new revision (`fileId`, optionally
    /// `If-Match: "<revisionId>"`). An optional `checksum` (hex SHA-256) is checked: a mismatch → 422 and nothing
    /// changes. Streamed to disk in blocks, never held whole.
    func media(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        let declared = try Self.admitBody(request, dependencies: dependencies)
        let (target, mimeType, owner) = try await Self.target(
            dependencies, for: me, request: request, fileId: request.query("fileId"), name: request.query("name"), parentId: request.query("parentId"),
            requestId: try FilesController.validRequestId(request.query("requestId")),
            sentType: request.query("mimeType") ?? Self.sentType(request))
        let expected = try FilesController.validChecksum(request.query("checksum"))
        let modifiedAt = try FilesController.validModifiedAt(request.query("modifiedAt"))
        var content = try await Self.receiveBody(request, declared: declared, dependencies: dependencies, userId: owner, mimeType: mimeType)
        content.modifiedAt = modifiedAt
        if let expected, content.checksum != expected {
            dependencies.blobs.discard(content.blocks)
            throw DriveError.checksumMismatch(expected: expected, actual: content.checksum)
        }
        let file = try await dependencies.content.commitContent(userId: owner, target: target, content: content, now: dependencies.now)
        return try JSONResponse.make(file.api, status: .created, etag: file.etag)
    }

    /// A whole-file body's first checks, before anything is read (simple uploads, WebDAV `PUT`): its declared
    /// length (`Content-Length`, if any) within the largest file, and room for it on the server's disk.
    static func admitBody(_ request: Request, dependencies: Dependencies) throws -> Int64? {
        let max = dependencies.configuration.maxUploadSize
        let declared = request.headers[.contentLength].flatMap { Int64($0) }
        if let declared, declared > max {
            throw DriveError.tooLarge("Files can be at most \(max) bytes; this one is \(declared).")
        }
        try dependencies.ensureRoom(for: declared ?? 0)
        return declared
    }

    /// The type a client sent with the body, unless it is a generic one (curl and HTML forms send those; then the
    /// name's extension says more).
    static func sentType(_ request: Request) -> String? {
        request.headers[.contentType].flatMap { type in
            ["application/x-www-form-urlencoded", "multipart/form-data", "application/octet-stream"].contains(where: type.hasPrefix) ? nil : type
        }
    }

    /// Reads a whole-file body: refused at once when its declared length would take the user over quota; a small
    /// one is kept for the database (no block file), a bigger one streamed into staged blocks.
    static func receiveBody(_ request: Request, declared: Int64?, dependencies: Dependencies, userId: String, mimeType: String) async throws -> StagedContent {
        if let declared, let user = try await dependencies.accounts.user(id: userId) {
            try QuotaRule.check(adding: declared, used: user.usedBytes, limit: user.quotaLimit)
        }
        if let declared, declared <= StagedContent.inlineLimit {
            return .inline(Array(buffer: try await request.body.collect(upTo: StagedContent.inlineLimit)), mimeType: mimeType)
        }
        return try await stage(request.body, blobs: dependencies.blobs, max: dependencies.configuration.maxUploadSize, mimeType: mimeType).content
    }

    /// Where an upload's content goes, its MIME type, and whose tree it goes into (through the access decision): a
    /// new version of `fileId` (guarded by `If-Match`), or a new file `name` in `parentId` (the root by default;
    /// `onConflict` from the query, `requestId` to make a retry return the first file). A type the client sent wins
    /// over the file's own or the one its name suggests. Simple uploads and block commits (`POST /v1/blocks/commit`)
    /// both come here.
    static func target(
        _ dependencies: Dependencies, for me: Principal, request: Request, fileId: String?, name: String?, parentId: String?, requestId: String?, sentType: String?
    ) async throws -> (target: ContentTarget, mimeType: String, owner: String) {
        if let fileId {
            guard requestId == nil else {
                throw DriveError.badRequest("'requestId' makes the creation of a new file safe to retry; a new version is guarded by If-Match.")
            }
            let file = try await dependencies.item(fileId, for: me, .write)
            return (
                .existing(fileId: file.id, ifMatch: request.headers[.ifMatch]), try FilesController.validContentMimeType(sentType ?? file.mimeType), file.userId
            )
        }
        guard let rawName = name else {
            throw DriveError.badRequest("Give the file a 'name' (or a 'fileId' for a new version).")
        }
        let name = try FilesController.validName(rawName)
        let parent = try await dependencies.item(parentId ?? "root", for: me, .create)
        return (
            .new(parentId: parent.id, name: name, policy: try FilesController.policy(request), requestId: requestId),
            try FilesController.validContentMimeType(sentType ?? MimeType.guess(forName: name)), parent.userId
        )
    }

    /// Streams a body into staged blocks; on any failure nothing stays behind.
    static func stage(
        _ body: some AsyncSequence<ByteBuffer, any Error>, blobs: any BlobStore, max: Int64, mimeType: String, expectedSize: Int64? = nil,
        runningHash: SHA256? = nil
    ) async throws -> (content: StagedContent, runningHash: SHA256) {
        var stager = blobs.makeStager(runningHash: runningHash ?? SHA256())
        do {
            for try await buffer in body {
                try await stager.append(buffer)
                if stager.totalSize > max {
                    throw DriveError.tooLarge("Files can be at most \(max) bytes.")
                }
                if let expectedSize, stager.totalSize > expectedSize {
                    throw DriveError.badRequest("The body is longer than Content-Range says.", code: .invalidChunk)
                }
            }
            let (blocks, checksum, running, size) = try await stager.finish()
            return (StagedContent(blocks: blocks, checksum: checksum, size: size, mimeType: mimeType), running)
        } catch {
            await stager.abandon()
            throw error
        }
    }
}
