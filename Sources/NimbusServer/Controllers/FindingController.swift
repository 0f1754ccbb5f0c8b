import Foundation
import Hummingbird
import Logging
import Metrics
import NimbusAPI

/// Finding and seeing files: search, stars, recent files, the activity history, thumbnails.
struct FindingController: Sendable {
    let dependencies: Dependencies
    let thumbnailer: Thumbnailer

    /// The longest search text (characters).
    static let longestQuery = 255

    func register(_ routes: inout RouteTable) {
        routes.on(Routes.search, use: search)
        routes.on(Routes.star, use: star)
        routes.on(Routes.unstar, use: unstar)
        routes.on(Routes.starred, use: starred)
        routes.on(Routes.recent, use: recent)
        routes.on(Routes.activity, use: activity)
        routes.on(Routes.thumbnail, use: thumbnail)
    }

    @Sendable func search(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        let text = (request.query("q") ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
        guard !text.isEmpty else { throw DriveError.badRequest("'q' must not be empty: give part of a name to search for.") }
        guard text.count <= Self.longestQuery else { throw DriveError.badRequest("'q' must be at most \(Self.longestQuery) characters.") }
        var kind: FileKind?
        if let raw = request.query("type") {
            guard let parsed = FileKind(rawValue: raw) else {
                throw DriveError.badRequest("'type' must be one of \(FileKind.allCases.map(\.rawValue).joined(separator: ", ")).")
            }
            kind = parsed
        }
        var modifiedAfter: Date?
        if let raw = request.query("modifiedAfter") {
            guard let date = ISO8601.date(from: raw) else {
                throw DriveError.badRequest("'modifiedAfter' must be an RFC 3339 date-time, e.g. 2026-03-01T12:00:00Z.")
            }
            modifiedAfter = date
        }
        let paging = try Paging.parse(page: request.query("page"), limit: request.query("limit"))
        let root = try await dependencies.root(for: me, .list)
        let query = SearchQuery(text: SearchText.fold(text), kind: kind, modifiedAfter: modifiedAfter)
        let (hits, total) = try await dependencies.finding.search(userId: root.userId, query: query, offset: paging.offset, limit: paging.limit, now: dependencies.now)
        var files = try await dependencies.present(hits.map(\.file), for: me)
        for index in files.indices { files[index].path = "/" + hits[index].names.joined(separator: "/") }
        return try JSONResponse.make(FileList(files: try await dependencies.starring(files, for: me), pagination: paging.pagination(totalItems: total)))
    }

    @Sendable func star(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        let item = try await dependencies.item(try context.parameter("fileId"), for: me, .read)
        guard item.parentId != nil || item.mountId != nil else { throw DriveError.badRequest("The root folder cannot be starred.") }
        try await dependencies.finding.star(userId: me.userId, fileId: item.id, now: dependencies.now)
        return Response(status: .noContent)
    }

    @Sendable func unstar(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        let item = try await dependencies.item(try context.parameter("fileId"), for: me, .read)
        try await dependencies.finding.unstar(userId: me.userId, fileId: item.id)
        return Response(status: .noContent)
    }

    @Sendable func starred(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        try await listing(request) { userId, paging in try await dependencies.finding.starred(userId: userId, offset: paging.offset, limit: paging.limit) }
    }

    @Sendable func recent(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        try await listing(request) { userId, paging in try await dependencies.finding.recent(userId: userId, offset: paging.offset, limit: paging.limit) }
    }

    /// A page of the user's own list of items (starred, recent): those they still see, as they see them, starred marked.
    private func listing(
        _ request: Request, _ fetch: (String, Paging) async throws -> (files: [FileRecord], total: Int)
    ) async throws -> Response {
        let me = try await dependencies.principal(request)
        let paging = try Paging.parse(page: request.query("page"), limit: request.query("limit"))
        let root = try await dependencies.root(for: me, .list)
        let (records, total) = try await fetch(root.userId, paging)
        let files = try await dependencies.present(try await visible(records, to: me), for: me)
        return try JSONResponse.make(FileList(files: try await dependencies.starring(files, for: me), pagination: paging.pagination(totalItems: total)))
    }

    @Sendable func activity(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        let paging = try Paging.parse(page: request.query("page"), limit: request.query("limit"))
        let root = try await dependencies.root(for: me, .list)
        let (records, total) = try await dependencies.finding.activity(userId: root.userId, offset: paging.offset, limit: paging.limit)
        var events: [ActivityEvent] = []
        for record in records {
            let file: File
            if let current = record.current, let seen = try await visible([current], to: me).first {
                file = try await dependencies.present(seen, for: me)
            } else if record.ownerId == me.userId {
                // Gone for good: as it was.
                file = File(
                    id: record.fileId, name: record.name, mimeType: record.mimeType, parentId: nil, size: 0, checksum: nil, revisionId: nil,
                    createdAt: record.at, modifiedAt: record.at, downloadUrl: nil, trashed: true)
            } else {
                continue  // someone else's item this user no longer reaches: not theirs to see
            }
            let username = try await record.actorId.asyncMap { try await dependencies.username($0) }
            let deviceName = record.deviceId.map { Principal.appPasswordId($0) == nil && $0.hasPrefix(Principal.linkPrefix) ? "a public link" : record.deviceName ?? $0 }
            let by = Actor(userId: record.actorId, username: username, deviceId: record.deviceId, deviceName: deviceName)
            events.append(ActivityEvent(at: record.at, action: record.action, file: file, by: by, summary: Self.summary(record, by: by)))
        }
        return try JSONResponse.make(ActivityList(events: events, pagination: paging.pagination(totalItems: total)))
    }

    /// The event in words: "alice (Laptop) edited notes.txt".
    static func summary(_ record: ActivityRecord, by: Actor) -> String {
        let who =
            switch (by.username, by.deviceName) {
            case (let user?, let device?): "\(user) (\(device))"
            case (let user?, nil): user
            case (nil, let device?): "Someone with \(device)"
            case (nil, nil): "Nimbus"
            }
        let name = record.name
        let what = record.isFolder ? "folder" : "file"
        switch record.action {
        case .created: return "\(who) created the \(what) \(name)"
        case .uploaded: return "\(who) uploaded \(name)"
        case .edited: return "\(who) edited \(name)"
        case .renamed: return "\(who) renamed a \(what) to \(name)"
        case .moved: return "\(who) moved \(name)"
        case .copied: return "\(who) copied \(name)"
        case .trashed: return "\(who) moved \(name) to the trash"
        case .restored: return "\(who) restored \(name) from the trash"
        case .deleted: return "\(who) deleted \(name) for good"
        case .restoredVersion: return "\(who) restored an earlier version of \(name)"
        }
    }

    /// Those of `records` the principal sees: their own, and someone else's they reach through a share now (seen so).
    func visible(_ records: [FileRecord], to me: Principal) async throws -> [FileRecord] {
        var seen: [FileRecord] = []
        for record in records {
            if record.userId == me.userId {
                seen.append(record)
            } else if let reach = try await dependencies.shares.reach(userId: me.userId, itemId: record.id, now: dependencies.now) {
                seen.append(record.seen(through: reach))
            }
        }
        return seen
    }

    // MARK: Thumbnails

    @Sendable func thumbnail(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        var size = 256
        if let raw = request.query("size") {
            guard let value = Int(raw), Thumbnailer.sizes.contains(value) else { throw DriveError.badRequest("'size' must be 64, 256 or 1024.") }
            size = value
        }
        let file = try await dependencies.item(try context.parameter("fileId"), for: me, .preview)
        guard !file.isFolder, let revisionId = file.headRevisionId else { throw DriveError.noThumbnail("'\(file.name)' is a folder: it has no thumbnail.") }
        let etag = "\(revisionId)-\(size)"
        var headers: HTTPFields = [
            .eTag: "\"\(etag)\"", .cacheControl: "private, max-age=0, must-revalidate", .init("X-Content-Type-Options")!: "nosniff",
        ]
        if let cached = try await dependencies.finding.thumbnail(revisionId: revisionId, size: size) {
            Counter(label: "nimbus_thumbnails_total", dimensions: [("result", "cached")]).increment()
            return try respond(cached, name: file.name, etag: etag, headers: &headers, request: request)
        }
        let made = try await make(revisionId: revisionId, file: file, size: size)
        try await dependencies.finding.storeThumbnail(revisionId: revisionId, size: size, userId: file.userId, thumbnail: made, now: dependencies.now)
        return try respond(made, name: file.name, etag: etag, headers: &headers, request: request)
    }

    private func respond(_ thumbnail: ThumbnailRecord, name: String, etag: String, headers: inout HTTPFields, request: Request) throws -> Response {
        guard let data = thumbnail.data, let type = thumbnail.mimeType else { throw DriveError.noThumbnail("No thumbnail can be made of '\(name)'.") }
        if let condition = request.headers[.ifNoneMatch], ETag.matches(condition, etag) { return Response(status: .notModified, headers: headers) }
        headers[.contentType] = type
        headers[.contentLength] = String(data.count)
        return Response(status: .ok, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(bytes: data)))
    }

    /// Runs the worker on the revision's bytes (copied to a private folder, removed after): the thumbnail, or none.
    private func make(revisionId: String, file: FileRecord, size: Int) async throws -> ThumbnailRecord {
        let none = ThumbnailRecord(mimeType: nil, data: nil)
        let type = file.mimeType.lowercased()
        guard type.hasPrefix("image/") || type.hasPrefix("video/") || type == "application/pdf" else { return none }
        let revision = try await dependencies.content.revision(userId: file.userId, fileId: file.id, revisionId: revisionId)
        let blocks = try await dependencies.content.blocks(ofRevision: revisionId)
        var head: [UInt8] = []
        try await dependencies.blobs.read(blocks, user: file.userId, range: 0..<min(64, revision.size)) { head += Array(buffer: $0) }
        guard let kind = thumbnailer.kind(mimeType: type, head: head), revision.size <= thumbnailer.largest(kind) else {
            Counter(label: "nimbus_thumbnails_total", dimensions: [("result", "none")]).increment()
            return none
        }
        let folder = FileManager.default.temporaryDirectory.appending(path: "nimbus-thumb-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let source = folder.appending(path: "source")
        guard FileManager.default.createFile(atPath: source.path, contents: nil), let handle = FileHandle(forWritingAtPath: source.path) else {
            throw DriveError.internalError("Could not write a thumbnail's source to \(folder.path).")
        }
        do {
            try await dependencies.blobs.read(blocks, user: file.userId, range: 0..<revision.size) { buffer in
                try handle.write(contentsOf: buffer.readableBytesView)
            }
            try handle.close()
        } catch {
            try? handle.close()
            throw error
        }
        guard let (data, mimeType) = await thumbnailer.make(kind, source: source, size: size) else {
            Counter(label: "nimbus_thumbnails_total", dimensions: [("result", "failed")]).increment()
            thumbnailer.logger.warning("No thumbnail could be made", metadata: ["file": "\(file.id)", "user": "\(file.userId)", "type": "\(type)"])
            return none
        }
        Counter(label: "nimbus_thumbnails_total", dimensions: [("result", "made")]).increment()
        return ThumbnailRecord(mimeType: mimeType, data: data)
    }

}

extension Dependencies {
    /// The files with `starred` set for the principal (one read for them all).
    func starring(_ files: [File], for principal: Principal) async throws -> [File] {
        let starred = try await finding.starredAmong(userId: principal.userId, ids: files.map(\.id))
        return files.map { file in
            var marked = file
            marked.starred = starred.contains(file.id)
            return marked
        }
    }
}
