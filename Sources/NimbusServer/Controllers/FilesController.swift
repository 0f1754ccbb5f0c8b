import Foundation
import Hummingbird
import NimbusAPI

/// Files and folders: list, get, create, rename/move, trash, untrash, permanent delete.
struct FilesController: Sendable {
    let dependencies: Dependencies

    func register(_ routes: inout RouteTable) {
        routes.on(Routes.listFiles, use: list)
        routes.on(Routes.createFile, use: create)
        routes.on(Routes.file, use: get)
        routes.on(Routes.updateFile, use: update)
        routes.on(Routes.deleteFile, use: delete)
        routes.on(Routes.untrash, use: untrash)
        routes.on(Routes.trash, use: trash)
        routes.on(Routes.restoreTrash, use: restoreTrash)
        routes.on(Routes.pausedDeletions, use: paused)
        routes.on(Routes.confirmDeletions, use: confirm)
    }

    @Sendable func list(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        let paging = try Paging.parse(page: request.query("page"), limit: request.query("limit"))
        let order = try ListingOrder.parse(sort: request.query("sort"), order: request.query("order"))
        let parent = try await dependencies.item(request.query("parentId") ?? "root", for: me, .list)
        let (files, total) = try await dependencies.files.children(of: parent.id, userId: parent.userId, paging: paging, order: order,
            // Shares are mounted in their grantee's tree only: a folder someone shares shows no mounts of theirs.
            mountsAt: parent.userId == me.userId ? dependencies.now : nil)
        let shown = try await dependencies.starring(try await dependencies.present(files, for: me, through: parent.seenThrough), for: me)
        return try JSONResponse.make(FileList(files: shown, pagination: paging.pagination(totalItems: total)))
    }

    @Sendable func get(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        let file = try await dependencies.item(try context.parameter("fileId"), for: me, .read)
        return try JSONResponse.make(try await dependencies.present(file, for: me), etag: file.etag)
    }

    @Sendable func create(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        let policy = try Self.policy(request)
        let body = try await request.decode(as: CreateFileRequest.self, context: context)
        let name = try Self.validName(body.name)
        let mimeType = try Self.validMimeType(body.mimeType)
        try Self.validRequestId(body.requestId)
        let parent = try await dependencies.item(body.parentId ?? "root", for: me, .create)
        let (file, _) = try await dependencies.files.create(
            userId: parent.userId, parentId: parent.id, name: name, mimeType: mimeType, policy: policy, requestId: body.requestId, now: dependencies.now)
        return try JSONResponse.make(try await dependencies.present([file], for: me, through: parent.seenThrough)[0], status: .created, etag: file.etag)
    }

    @Sendable func update(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        let body = try await request.decode(as: UpdateFileRequest.self, context: context)
        let item = try await dependencies.item(try context.parameter("fileId"), for: me, body.parentId == nil ? .rename : .move)
        let name = try body.name.map(Self.validName)
        let parent = try await body.parentId.asyncMap { try await dependencies.item($0, for: me, .create) }
        if let mountId = item.mountId {
            // A share's root, renamed or moved by its grantee: their mount, in their own tree.
            if let parent, parent.userId != me.userId || parent.mountId != nil {
                throw DriveError.forbidden("A share can be placed only in your own folders.")
            }
            let file = try await dependencies.shares.updateMount(userId: me.userId, mountId: mountId, name: name, parentId: parent?.id, now: dependencies.now)
            return try JSONResponse.make(try await dependencies.present(file, for: me), etag: file.etag)
        }
        if let parent, parent.userId != item.userId || parent.seenThrough?.grant.id != item.seenThrough?.grant.id {
            // Only the owner takes items out of a share (or into another one); nobody moves them into another user's tree.
            throw DriveError.forbidden("Only its owner can move '\(item.name)' out of the share it is in.")
        }
        let file = try await dependencies.files.update(
            userId: item.userId, fileId: item.id, name: name, parentId: parent?.id, ifMatch: request.headers[.ifMatch], now: dependencies.now)
        return try JSONResponse.make(try await dependencies.present([file], for: me, through: item.seenThrough)[0], etag: file.etag)
    }

    @Sendable func delete(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        let permanent: Bool
        switch request.query("permanent") {
        case nil, "false", "0": permanent = false
        case "true", "1": permanent = true
        default: throw DriveError.badRequest("'permanent' must be true or false.")
        }
        let item = try await dependencies.item(try context.parameter("fileId"), for: me, permanent ? .purge : .trash)
        if let grant = item.seenThrough?.grant, item.mountId != nil {
            // A share's root, deleted by its grantee (any route): they leave the share; the owner's items stay.
            try await dependencies.shares.declineGrant(id: grant.id, granteeId: me.userId, now: dependencies.now)
            return Response(status: .noContent)
        }
        if permanent {
            try await dependencies.files.deletePermanently(userId: item.userId, fileId: item.id, now: dependencies.now, by: dependencies.deleter(me))
        } else {
            _ = try await dependencies.files.trash(userId: item.userId, fileId: item.id, now: dependencies.now, by: dependencies.deleter(me))
        }
        return Response(status: .noContent)
    }

    @Sendable func untrash(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        let item = try await dependencies.item(try context.parameter("fileId"), for: me, .restore)
        let file = try await dependencies.files.untrash(userId: item.userId, fileId: item.id, now: dependencies.now)
        return try JSONResponse.make(try await dependencies.present([file], for: me, through: item.seenThrough)[0], etag: file.etag)
    }

    @Sendable func trash(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        let paging = try Paging.parse(page: request.query("page"), limit: request.query("limit"))
        let root = try await dependencies.root(for: me, .list)
        let (files, total) = try await dependencies.files.trashed(userId: root.userId, paging: paging)
        return try JSONResponse.make(FileList(files: try await dependencies.present(files, for: me), pagination: paging.pagination(totalItems: total)))
    }

    /// Everything trashed at or after `since` back where it was (`nimbus untrash --since TIME`).
    @Sendable func restoreTrash(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        let body = try await request.decode(as: RestoreTrashRequest.self, context: context)
        let root = try await dependencies.root(for: me, .restore)
        let (restored, items) = try await dependencies.files.untrashAll(userId: root.userId, since: body.since, now: dependencies.now)
        return try JSONResponse.make(RestoreTrashResponse(restored: restored, items: items))
    }

    /// The devices whose deletions the mass-deletion breaker paused.
    @Sendable func paused(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        let root = try await dependencies.root(for: me, .list)
        return try JSONResponse.make(DeletionPauseList(paused: try await dependencies.files.deletionPauses(userId: root.userId)))
    }

    /// The user meant those deletions: the paused devices go on (`nimbus trash confirm`, the web app's Trash).
    @Sendable func confirm(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        let root = try await dependencies.root(for: me, .purge)
        let lifted = try await dependencies.files.confirmDeletions(userId: root.userId, window: dependencies.configuration.massDeletion.window, now: dependencies.now)
        return try JSONResponse.make(DeletionPauseList(paused: lifted))
    }


    static func validName(_ raw: String) throws -> String {
        do {
            return try FileName.validated(raw)
        } catch {
            throw DriveError.badRequest(error.description, code: .invalidName)
        }
    }

    /// An idempotency key as clients send it (1 to 200 characters), or none.
    @discardableResult
    static func validRequestId(_ raw: String?) throws -> String? {
        if let raw, raw.isEmpty || raw.count > 200 {
            throw DriveError.badRequest("'requestId' must be 1 to 200 characters.")
        }
        return raw
    }

    /// An expected content checksum (hex SHA-256), lowercased, or none.
    /// A client's modification time for content (`modifiedAt`): within 1970 and 9999, else 400.
    static func validModifiedAt(_ date: Date?) throws -> Date? {
        guard let date else { return nil }
        guard (0...253_402_300_799).contains(date.timeIntervalSince1970) else {
            throw DriveError.badRequest("'modifiedAt' must be a date-time between 1970 and 9999.")
        }
        return date
    }

    /// `modifiedAt` as a query parameter (RFC 3339, as in JSON bodies).
    static func validModifiedAt(_ text: String?) throws -> Date? {
        guard let text else { return nil }
        guard let date = ISO8601.date(from: text) else {
            throw DriveError.badRequest("'modifiedAt' must be an RFC 3339 date-time, e.g. 2026-03-01T12:00:00Z.")
        }
        return try validModifiedAt(date)
    }

    static func validChecksum(_ raw: String?) throws -> String? {
        guard let raw else { return nil }
        guard raw.count == 64, raw.allSatisfy(\.isHexDigit) else {
            throw DriveError.badRequest("'checksum' must be the hex SHA-256 of the content.")
        }
        return raw.lowercased()
    }

    /// A type for content (an upload, a new version): any valid one but the folder type, which would make a file
    /// look like a folder to every client (folders are made with `POST /v1/files`).
    static func validContentMimeType(_ raw: String) throws -> String {
        let value = try validMimeType(raw)
        guard value.lowercased() != folderMimeType else {
            throw DriveError.badRequest("'\(folderMimeType)' is the type of folders (made with POST /v1/files), not of content.", code: .invalidMimeType)
        }
        return value
    }

    static func validMimeType(_ raw: String) throws -> String {
        let value = raw.trimmingCharacters(in: .whitespaces)
        guard !value.isEmpty, value.count <= 255, value.contains("/"), !value.contains(where: { $0.isNewline }) else {
            throw DriveError.badRequest("'mimeType' must look like 'type/subtype' (e.g. text/plain).", code: .invalidMimeType)
        }
        return value
    }

    static func policy(_ request: Request) throws -> ConflictPolicy { try policy(request.query("onConflict")) }

    /// `onConflict` as given (query or batch entry): absent means `fail`.
    static func policy(_ raw: String?) throws -> ConflictPolicy {
        guard let raw else { return .fail }
        guard let policy = ConflictPolicy(rawValue: raw) else {
            throw DriveError.badRequest("'onConflict' must be fail, rename or replace.")
        }
        return policy
    }
}

extension Optional {
    func asyncMap<T>(_ transform: (Wrapped) async throws -> T) async rethrows -> T? {
        guard let value = self else { return nil }
        return try await transform(value)
    }
}
