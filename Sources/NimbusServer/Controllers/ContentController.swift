import Foundation
import Hummingbird
import NimbusAPI

/// Content downloads and revisions: `/v1/files/{id}/content`, `/v1/files/{id}/revisions/...`.
struct ContentController: Sendable {
    let dependencies: Dependencies

    func register(_ routes: inout RouteTable) {
        routes.on(Routes.content, use: content)
        routes.on(Routes.revisions, use: revisions)
        routes.on(Routes.revision, use: revision)
        routes.on(Routes.revisionContent, use: revisionContent)
        routes.on(Routes.restoreRevision, use: restore)
    }

    @Sendable func content(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        let file = try await dependencies.item(try context.parameter("fileId"), for: me, .read)
        guard !file.isFolder, let revisionId = file.headRevisionId else {
            throw DriveError.badRequest("'\(file.name)' is a folder; it has no content.", code: .isAFolder)
        }
        let revision = try await dependencies.content.revision(userId: file.userId, fileId: file.id, revisionId: revisionId)
        if Self.isOpening(request) { try await dependencies.finding.noteOpened(userId: me.userId, fileId: file.id, now: dependencies.now) }
        return try await stream(revision, name: file.name, request: request, userId: file.userId)
    }

    /// A browser fetching a file's content from its start (it sends `Sec-Fetch-Site`; sync clients, WebDAV apps and
    /// scripts do not): the user opened it, for their recent files. A video's later ranges are the same opening.
    static func isOpening(_ request: Request) -> Bool {
        guard request.headers[.init("Sec-Fetch-Site")!] != nil else { return false }
        guard let range = request.headers[.range] else { return true }
        return range.replacingOccurrences(of: " ", with: "").hasPrefix("bytes=0-")
    }

    @Sendable func revisions(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        let file = try await dependencies.item(try context.parameter("fileId"), for: me, .read)
        let paging = try Paging.parse(page: request.query("page"), limit: request.query("limit"))
        let (revisions, total) = try await dependencies.content.revisions(userId: file.userId, fileId: file.id, paging: paging)
        return try JSONResponse.make(RevisionList(revisions: revisions.map(\.api), pagination: paging.pagination(totalItems: total)))
    }

    @Sendable func revision(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        let file = try await dependencies.item(try context.parameter("fileId"), for: me, .read)
        let revision = try await dependencies.content.revision(userId: file.userId, fileId: file.id, revisionId: try context.parameter("revisionId"))
        return try JSONResponse.make(revision.api, etag: revision.id)
    }

    @Sendable func revisionContent(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        let file = try await dependencies.item(try context.parameter("fileId"), for: me, .read)
        let revision = try await dependencies.content.revision(userId: file.userId, fileId: file.id, revisionId: try context.parameter("revisionId"))
        return try await stream(revision, name: file.name, request: request, userId: file.userId)
    }

    @Sendable func restore(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        let item = try await dependencies.item(try context.parameter("fileId"), for: me, .restore)
        let file = try await dependencies.content.restore(
            userId: item.userId, fileId: item.id, revisionId: try context.parameter("revisionId"), now: dependencies.now)
        return try JSONResponse.make(try await dependencies.present(file, for: me), etag: file.etag)
    }

    /// Streams a revision's bytes: `ETag` (the revision id), `If-None-Match` → 304, one `Range` → 206 or 416.
    /// Served as an attachment with `nosniff`, so user content is never rendered as a page of this origin.
    func stream(_ revision: RevisionRecord, name: String, request: Request, userId: String) async throws -> Response {
        var headers: HTTPFields = [
            .eTag: "\"\(revision.id)\"",
            .acceptRanges: "bytes",
            .contentType: revision.mimeType,
            .contentDisposition: Self.attachment(name),
            .init("X-Content-Type-Options")!: "nosniff",
        ]
        headers[.lastModified] = HTTPDate.string(from: revision.createdAt)
        if let condition = request.headers[.ifNoneMatch], ETag.matches(condition, revision.id) {
            return Response(status: .notModified, headers: headers)
        }
        var range: Range<Int64> = 0..<revision.size
        var status = HTTPResponse.Status.ok
        switch ByteRange.parse(request.headers[.range], size: revision.size) {
        case .whole:
            break
        case .unsatisfiable:
            throw DriveError.rangeNotSatisfiable("The requested range is outside the content (\(revision.size) bytes).", size: revision.size)
        case .partial(let byteRange):
            if let ifRange = request.headers[.ifRange], !ETag.matches(ifRange, revision.id) {
                break
            }
            range = byteRange.first..<(byteRange.last + 1)
            status = .partialContent
            headers[.contentRange] = "bytes \(byteRange.first)-\(byteRange.last)/\(revision.size)"
        }
        headers[.contentLength] = String(range.count)
        let servedRange = range
        let blocks = try await dependencies.content.blocks(ofRevision: revision.id)
        let blobs = dependencies.blobs
        let body = ResponseBody(contentLength: Int(range.count)) { writer in
            try await blobs.read(blocks, user: userId, range: servedRange) { buffer in
                try await writer.write(buffer)
            }
            try await writer.finish(nil)
        }
        return Response(status: status, headers: headers, body: body)
    }

    /// `attachment; filename="..."; filename*=UTF-8''...` with the name escaped for both forms.
    static func attachment(_ name: String) -> String {
        let ascii = String(name.unicodeScalars.map { $0.isASCII && $0 != "\"" && $0 != "\\" && $0.value >= 0x20 ? Character($0) : "_" })
        var allowed = CharacterSet.alphanumerics.intersection(CharacterSet(charactersIn: Unicode.Scalar(0)...Unicode.Scalar(127)))
        allowed.insert(charactersIn: "-._~")
        let encoded = name.addingPercentEncoding(withAllowedCharacters: allowed) ?? ascii
        return "attachment; filename=\"\(ascii)\"; filename*=UTF-8''\(encoded)"
    }
}

/// RFC 9110 HTTP-date (`Sun, 06 Nov 1994 08:49:37 GMT`).
enum HTTPDate {
    static func string(from date: Date) -> String {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(secondsFromGMT: 0) ?? calendar.timeZone
        let c = calendar.dateComponents([.year, .month, .day, .hour, .minute, .second, .weekday], from: date)
        let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        func two(_ n: Int?) -> String { n.map { $0 < 10 ? "0\($0)" : "\($0)" } ?? "00" }
        return "\(days[(c.weekday ?? 1) - 1]), \(two(c.day)) \(months[(c.month ?? 1) - 1]) \(c.year ?? 1970) \(two(c.hour)):\(two(c.minute)):\(two(c.second)) GMT"
    }
}
