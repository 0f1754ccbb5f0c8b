import Foundation
import Hummingbird
import NimbusAPI
import NIOFoundationCompat

/// Nextcloud's chunked upload at `/remote.php/dav/uploads/USER/` (its v2 and the older naming alike), so a big file
/// sent by WebDAV survives a cut connection or a restart: only the chunks not yet here are sent again.
/// - `MKCOL …/NAME` starts an upload (a `Destination` header, v2's, is kept but not needed);
/// - `PUT …/NAME/CHUNK` stores a chunk, durably before it is answered; chunks go together in the order of the
///   number their names start with (`1`…`10000` in v2, `000000000000000-000010485759` before), in any order and
///   any size, and a chunk sent again replaces the first. `OC-Total-Length` (the whole file's size) is checked
///   against the size limit and the quota at once: 413 / 507 before a byte more is stored;
/// - `PROPFIND` lists the uploads, and an upload's chunks with their sizes (how a client resumes);
/// - `MOVE …/NAME/.file` with `Destination` (a path of the user's tree) assembles them into a new file or a new
///   revision of the one there — `Overwrite`, `If-Match`/`If-None-Match` and locks as for any `MOVE`, `OC-Total-Length`
///   must match, `X-OC-Mtime` kept — and closes the upload in the same transaction (201/204 with `ETag`,
///   `OC-ETag` and `OC-FileId`); nothing is assembled in place, the revision takes the chunks' blocks;
/// - `DELETE …/NAME/` drops an upload (`…/NAME/CHUNK` one chunk). An upload untouched for the upload expiry
///   (24 h by default, as Nextcloud's) is deleted by maintenance. Chunks count in the quota while they wait.
extension DAVRequest {
    func uploads(_ me: Principal, method: String) async throws -> Response {
        let names = try Self.segments(of: request.uri.path)
        switch (method, names.count) {
        case ("PROPFIND", 0...2): return try await uploadsPropfind(me, names)
        case ("MKCOL", 1): return try await startUpload(me, names[0])
        case ("PUT", 2): return try await putChunk(me, names[0], names[1])
        case ("MOVE", 2) where names[1] == ".file": return try await assemble(me, names[0])
        case ("DELETE", 1): return try await dropUpload(me, names[0], chunk: nil)
        case ("DELETE", 2): return try await dropUpload(me, names[0], chunk: names[1])
        case ("GET", _), ("HEAD", _):
            throw DAVError(.methodNotAllowed, "Chunks of an upload cannot be read; MOVE …/.file assembles them into a file.", headers: [.allow: "PROPFIND, MKCOL, PUT, MOVE, DELETE"])
        default:
            throw DAVError(.methodNotAllowed, "\(method) is not taken here: MKCOL an upload, PUT its chunks, MOVE …/.file to finish, DELETE to drop it.", headers: [.allow: "PROPFIND, MKCOL, PUT, MOVE, DELETE"])
        }
    }

    static let uploadNameLimit = 200

    func startUpload(_ me: Principal, _ name: String) async throws -> Response {
        guard name.utf8.count <= Self.uploadNameLimit, !name.hasPrefix("."), !name.contains(where: \.isNewline) else {
            throw DAVError(.badRequest, "An upload's name is 1–\(Self.uploadNameLimit) bytes, not starting with '.'.")
        }
        let body = try await request.body.collect(upTo: 1024)
        guard body.readableBytes == 0 else { throw DAVError(.unsupportedMediaType, "MKCOL takes no body.") }
        let now = dependencies.now
        let created = try await dependencies.webDAV.createDAVUpload(
            userId: owner, name: name, destination: request.headers[.init("Destination")!], now: now,
            expiresAt: now.addingTimeInterval(dependencies.configuration.uploadExpiry.timeInterval))
        guard created else { throw DAVError(.methodNotAllowed, "The upload '\(name)' exists already; PUT chunks into it, or DELETE it first.") }
        return Response(status: .created, headers: [.contentLength: "0"])
    }

    func openUpload(_ me: Principal, _ name: String) async throws -> DAVUploadRecord {
        guard let upload = try await dependencies.webDAV.davUploads(userId: owner, name: name, now: dependencies.now).first else {
            throw DAVError(.notFound, "No upload '\(name)' (never started, finished, deleted, or expired after a day untouched); start one with MKCOL.")
        }
        return upload
    }

    /// Where a chunk goes: the number its name starts with (`00042`, or `000000000000000-000010485759`).
    static func chunkOrder(_ name: String) -> Int64? {
        func isDigits(_ text: Substring) -> Bool { !text.isEmpty && text.count <= 18 && text.allSatisfy { $0.isASCII && $0.isNumber } }
        let parts = name.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.allSatisfy(isDigits) else { return nil }
        return Int64(parts[0])
    }

    func putChunk(_ me: Principal, _ uploadName: String, _ chunkName: String) async throws -> Response {
        guard let order = Self.chunkOrder(chunkName) else {
            throw DAVError(.badRequest, "A chunk is named by its number (1–10000), or by its byte range (000000000000000-000010485759).")
        }
        let upload: DAVUploadRecord
        do {
            upload = try await openUpload(me, uploadName)
        } catch let error as DAVError where error.status == .notFound {
            throw DAVError(.conflict, error.message)  // RFC 4918: a PUT into a missing collection
        }
        let configuration = dependencies.configuration
        let others = upload.chunks.filter { $0.order != order }.reduce(Int64(0)) { $0 + $1.size }
        if let text = request.headers[.init("OC-Total-Length")!] {
            guard let total = Int64(text.trimmingCharacters(in: .whitespaces)), total >= 0 else {
                throw DAVError(.badRequest, "OC-Total-Length is the whole file's size in bytes.")
            }
            guard total <= configuration.maxUploadSize else {
                throw DAVError(.contentTooLarge, "Files can be at most \(configuration.maxUploadSize) bytes; this one is \(total).")
            }
            // The chunks already here count in the quota, so only the rest of the file is asked for.
            if let user = try await dependencies.accounts.user(id: owner) {
                do {
                    try QuotaRule.check(adding: total, used: user.usedBytes - upload.chunks.reduce(0, { $0 + $1.size }), limit: user.quotaLimit)
                } catch let error as DriveError {
                    throw DAVError(error)
                }
            }
        }
        try dependencies.intake.admit(request)
        let staged = try await dependencies.intake.stage(request.body, max: configuration.maxUploadSize - others, mimeType: "application/octet-stream")
        let now = dependencies.now
        try await dependencies.webDAV.storeDAVChunk(
            userId: owner, upload: uploadName, chunk: .init(order: order, name: chunkName, size: staged.content.size),
            blocks: staged.content.blocks, now: now, expiresAt: now.addingTimeInterval(configuration.uploadExpiry.timeInterval))
        let replaced = upload.chunks.contains { $0.order == order }
        return Response(status: replaced ? .noContent : .created, headers: [.contentLength: "0"])
    }

    func assemble(_ me: Principal, _ uploadName: String) async throws -> Response {
        guard let header = request.headers[.init("Destination")!] else {
            throw DAVError(.badRequest, "A Destination header (the file's path in your tree) is needed to assemble the upload.")
        }
        guard let target = try destinationNames(header), let name = target.last else {
            throw DAVError(.badGateway, "The destination is not a file in your tree (\(DAVMount.nextcloudFiles)\(mount.owner ?? "")/…).")
        }
        let upload = try await openUpload(me, uploadName)
        let total = upload.chunks.reduce(Int64(0)) { $0 + $1.size }
        if let text = request.headers[.init("OC-Total-Length")!] {
            guard let declared = Int64(text.trimmingCharacters(in: .whitespaces)), declared == total else {
                throw DAVError(.badRequest, "The chunks add up to \(total) bytes, not OC-Total-Length \(text); nothing was changed.")
            }
        }
        guard total <= dependencies.configuration.maxUploadSize else {
            throw DAVError(.contentTooLarge, "Files can be at most \(dependencies.configuration.maxUploadSize) bytes; the chunks add up to \(total).")
        }
        let existing = try await resolve(me, target)
        if let existing, existing.isFolder { throw DAVError(.methodNotAllowed, "'\(name)' is a folder; a file cannot replace it.") }
        if let existing { try authorize(me, existing, .write) }
        let overwrite = (request.headers[.init("Overwrite")!]?.trimmingCharacters(in: .whitespaces).uppercased() ?? "T") != "F"
        if existing != nil && !overwrite {
            throw DAVError(.preconditionFailed, "'/\(target.joined(separator: "/"))' exists and Overwrite is F.")
        }
        try checkPreconditions(existing)
        let parent = try await parentFolder(me, of: target)
        try await checkLocks(me, names: target, targets: [(Self.lockPath(target), false)])
        let modifiedAt = try clientModificationTime()
        let blocks = try await dependencies.webDAV.davUploadBlocks(userId: owner, upload: uploadName)
        let checksum = try await dependencies.blobs.checksum(of: blocks, user: owner)
        if let expected = try declaredSHA256(), expected != checksum {
            // The upload stays as it is (a client may send a chunk again and retry); no file is touched.
            throw Self.checksumMismatch(expected: expected, actual: checksum)
        }
        let ifMatch = request.headers[.ifMatch].flatMap { $0.trimmingCharacters(in: .whitespaces) == "*" ? nil : $0 }
        let contentTarget: ContentTarget = existing.map { .existing(fileId: $0.id, ifMatch: ifMatch) }
            ?? .new(parentId: parent.id, name: try FilesController.validName(name), policy: .fail)
        let mimeType = try FilesController.validContentMimeType(existing?.mimeType ?? MimeType.guess(forName: name))
        let file: FileRecord
        if parent.userId == owner {
            file = try await dependencies.webDAV.finishDAVUpload(
                userId: owner, upload: uploadName, target: contentTarget, blocks: blocks, checksum: checksum, size: total,
                mimeType: mimeType, modifiedAt: modifiedAt, now: dependencies.now)
        } else {
            file = try await assemble(blocks, into: contentTarget, of: parent.userId, mimeType: mimeType, modifiedAt: modifiedAt)
            _ = try await dependencies.webDAV.deleteDAVUpload(userId: owner, upload: uploadName, chunk: nil, now: dependencies.now)
        }
        var headers: HTTPFields = [.contentLength: "0", .eTag: "\"\(file.etag)\""]
        nextcloudHeaders(file, into: &headers)
        if modifiedAt != nil { headers[.init("X-OC-MTime")!] = "accepted" }
        return Response(status: existing == nil ? .created : .noContent, headers: headers)
    }

    /// An upload into a share someone gave the uploader: the chunks are the uploader's (their blocks, staged under
    /// them), the file is the share owner's, whose quota pays — the bytes are staged again for the owner
    /// (``ContentIntake/restage(_:from:for:mimeType:)``). The upload is dropped after (left behind by a crash, it
    /// expires like any other).
    func assemble(_ blocks: [BlockRef], into target: ContentTarget, of fileOwner: String, mimeType: String, modifiedAt: Date?) async throws -> FileRecord {
        var content = try await dependencies.intake.restage(blocks, from: Array(repeating: owner, count: blocks.count), for: fileOwner, mimeType: mimeType)
        if let modifiedAt { content.modifiedAt = modifiedAt }
        return try await dependencies.intake.commit(content, to: target, owner: fileOwner)
    }

    func dropUpload(_ me: Principal, _ uploadName: String, chunk: String?) async throws -> Response {
        let order = try chunk.map { name in
            guard let order = Self.chunkOrder(name) else { throw DAVError(.notFound, "No chunk '\(name)' in '\(uploadName)'.") }
            return order
        }
        guard try await dependencies.webDAV.deleteDAVUpload(userId: owner, upload: uploadName, chunk: order, now: dependencies.now) else {
            throw DAVError(.notFound, chunk.map { "No chunk '\($0)' in '\(uploadName)'." } ?? "No upload '\(uploadName)'.")
        }
        return Response(status: .noContent)
    }

    /// The uploads (Depth 1 of the user's folder), or an upload and its chunks, or one chunk: names, sizes and times.
    func uploadsPropfind(_ me: Principal, _ names: [String]) async throws -> Response {
        let depth = try propfindDepth()
        _ = try PropfindBody.parse(Data(buffer: try await request.body.collect(upTo: 1 << 20)))
        func entry(_ path: [String], folder: Bool, size: Int64? = nil, modified: Date? = nil) -> String {
            var props = folder ? "<d:resourcetype><d:collection/></d:resourcetype>" : "<d:resourcetype/>"
            if let name = path.last { props += "<d:displayname>\(Self.xmlEscape(name))</d:displayname>" }
            if let size { props += "<d:getcontentlength>\(size)</d:getcontentlength>" }
            if let modified { props += "<d:getlastmodified>\(HTTPDate.string(from: modified))</d:getlastmodified>" }
            return "<d:response><d:href>\(Self.xmlEscape(Self.href(path, folder: folder)))</d:href>"
                + "<d:propstat><d:prop>\(props)</d:prop><d:status>HTTP/1.1 200 OK</d:status></d:propstat></d:response>"
        }
        var xml = DAVXML.multistatusOpen
        if names.isEmpty {
            xml += entry([], folder: true)
            if depth == "1" {
                for upload in try await dependencies.webDAV.davUploads(userId: owner, name: nil, now: dependencies.now) {
                    xml += entry([upload.name], folder: true, modified: upload.createdAt)
                }
            }
        } else {
            let upload = try await openUpload(me, names[0])
            if names.count == 2 {
                guard let chunk = upload.chunks.first(where: { $0.name == names[1] }) else {
                    throw DAVError(.notFound, "No chunk '\(names[1])' in '\(names[0])'.")
                }
                xml += entry(names, folder: false, size: chunk.size, modified: upload.createdAt)
            } else {
                xml += entry(names, folder: true, modified: upload.createdAt)
                if depth == "1" {
                    for chunk in upload.chunks { xml += entry(names + [chunk.name], folder: false, size: chunk.size, modified: upload.createdAt) }
                }
            }
        }
        xml += "</d:multistatus>\n"
        return Response(
            status: Self.multiStatus, headers: [.contentType: "application/xml; charset=utf-8", .contentLength: String(xml.utf8.count)],
            body: .init(byteBuffer: ByteBuffer(string: xml)))
    }
}
