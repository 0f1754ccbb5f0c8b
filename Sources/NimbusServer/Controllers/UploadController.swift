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
        let intake = dependencies.intake
        let declared = try intake.admit(request)
        let (target, mimeType, owner) = try await Self.target(
            dependencies, for: me, request: request, fileId: request.query("fileId"), name: request.query("name"), parentId: request.query("parentId"),
            requestId: try FilesController.validRequestId(request.query("requestId")),
            sentType: request.query("mimeType") ?? Self.sentType(request))
        let expected = try FilesController.validChecksum(request.query("checksum"))
        let modifiedAt = try FilesController.validModifiedAt(request.query("modifiedAt"))
        var content = try await intake.receive(request, declared: declared, owner: owner, mimeType: mimeType)
        content.modifiedAt = modifiedAt
        try intake.verify(content, expected: expected)
        let file = try await intake.commit(content, to: target, owner: owner)
        return try JSONResponse.make(try await dependencies.present(file, for: me), status: .created, etag: file.etag)
    }

    /// The type a client sent with the body, unless it is a generic one (curl and HTML forms send those; then the
    /// name's extension says more).
    static func sentType(_ request: Request) -> String? {
        request.headers[.contentType].flatMap { type in
            ["application/x-www-form-urlencoded", "multipart/form-data", "application/octet-stream"].contains(where: type.hasPrefix) ? nil : type
        }
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
}
