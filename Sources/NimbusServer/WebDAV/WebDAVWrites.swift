import Crypto
import Foundation
import Hummingbird
import NimbusAPI
import NIOFoundationCompat

#if canImport(FoundationXML)
import FoundationXML
#endif
extension DAVRequest {
    // MARK: Writing

    /// The body becomes a new file, or a new revision of the file there (history keeps the old one).
    func put(_ me: Principal, _ names: [String]) async throws -> Response {
        guard let name = names.last else { throw DAVError(.methodNotAllowed, "The root is a folder; PUT a file into it.") }
        if request.headers[.contentRange] != nil {
            throw DAVError(.badRequest, "Partial PUT (Content-Range) is not supported; send the whole file.")
        }
        let existing = try await resolve(me, names)
        if let existing, existing.isFolder { throw DAVError(.methodNotAllowed, "'\(name)' is a folder; a file cannot replace it.") }
        if let existing { try authorize(me, existing, .write) }
        try checkPreconditions(existing)
        let parent = try await parentFolder(me, of: names)
        try await checkLocks(me, names: names, targets: [(Self.lockPath(names), false)])
        let intake = dependencies.intake
        let declared = try intake.admit(request)
        let mimeType = try FilesController.validContentMimeType(UploadController.sentType(request) ?? existing?.mimeType ?? MimeType.guess(forName: name))
        // If-Match goes to the commit too: a version that lands between the check above and the commit is a 412.
        let ifMatch = request.headers[.ifMatch].flatMap { $0.trimmingCharacters(in: .whitespaces) == "*" ? nil : $0 }
        let target: ContentTarget = existing.map { .existing(fileId: $0.id, ifMatch: ifMatch) }
            ?? .new(parentId: parent.id, name: try FilesController.validName(name), policy: .fail)
        let mtime = try clientModificationTime()
        let expected = try declaredSHA256()
        // Into a share, its owner's quota pays and the file is theirs.
        var content = try await intake.receive(request, declared: declared, owner: parent.userId, mimeType: mimeType)
        if let expected, content.checksum != expected {
            dependencies.blobs.discard(content.blocks)
            throw Self.checksumMismatch(expected: expected, actual: content.checksum)
        }
        var headers: HTTPFields = [.contentLength: "0"]
        if let mtime {
            content.modifiedAt = mtime
            headers[.init("X-OC-MTime")!] = "accepted"
        }
        let file = try await intake.commit(content, to: target, owner: parent.userId)
        headers[.eTag] = "\"\(file.etag)\""
        nextcloudHeaders(file, into: &headers)
        return Response(status: existing == nil ? .created : .noContent, headers: headers)
    }

    /// ownCloud's `X-OC-Mtime` (Unix seconds): the file keeps the client's modification time (rclone, Nextcloud
    /// clients); nil when not sent.
    func clientModificationTime() throws -> Date? {
        guard let text = request.headers[.init("X-OC-Mtime")!] else { return nil }
        guard let seconds = Double(text.trimmingCharacters(in: .whitespaces)), seconds.isFinite, (0...253_402_300_799).contains(seconds) else {
            throw DAVError(.badRequest, "X-OC-Mtime is Unix time in seconds.")
        }
        return Date(timeIntervalSince1970: seconds)
    }

    static let multiStatus = HTTPResponse.Status(code: 207, reasonPhrase: "Multi-Status")

    /// A `PROPFIND`'s Depth: "0" or "1" (a missing one is 1); `infinity` is refused with `propfind-finite-depth`.
    func propfindDepth() throws -> String {
        let depth = request.headers[.init("Depth")!]?.trimmingCharacters(in: .whitespaces).lowercased() ?? "1"
        guard depth == "0" || depth == "1" else {
            throw DAVError(.forbidden, "Depth: infinity is not served; walk the tree with Depth: 1.", condition: "<d:propfind-finite-depth/>")
        }
        return depth
    }

    func mkcol(_ me: Principal, _ names: [String]) async throws -> Response {
        guard let name = names.last else { throw DAVError(.methodNotAllowed, "The root exists.") }
        let body = try await request.body.collect(upTo: 1024)
        guard body.readableBytes == 0 else { throw DAVError(.unsupportedMediaType, "MKCOL takes no body.") }
        if try await resolve(me, names) != nil { throw DAVError(.methodNotAllowed, "'\(name)' exists already.") }
        let parent = try await parentFolder(me, of: names)
        try await checkLocks(me, names: names, targets: [(Self.lockPath(names), false)])
        let made = try await dependencies.files.create(
            userId: parent.userId, parentId: parent.id, name: try FilesController.validName(name), mimeType: folderMimeType, policy: .fail,
            requestId: nil, now: dependencies.now)
        var headers: HTTPFields = [.contentLength: "0"]
        nextcloudHeaders(made.file, into: &headers)
        return Response(status: .created, headers: headers)
    }

    /// To the trash (restorable there and in `/v1/trash`), the whole tree for a folder. A share's root, deleted by
    /// its grantee, is their mount: they leave the share, and the owner's items stay.
    func delete(_ me: Principal, _ names: [String]) async throws -> Response {
        guard !names.isEmpty else { throw DAVError(.forbidden, "The root folder cannot be deleted.") }
        if request.uri.path.contains("#") { throw DAVError(.badRequest, "A fragment is not part of a path.") }
        let item = try await require(me, names, .trash)
        try checkPreconditions(item)
        let locks = try await checkLocks(me, names: names, targets: [(Self.lockPath(names), true)])
        if let grant = item.seenThrough?.grant, item.mountId != nil {
            try await dependencies.shares.declineGrant(id: grant.id, granteeId: me.userId, now: dependencies.now)
        } else {
            _ = try await dependencies.files.trash(userId: item.userId, fileId: item.id, now: dependencies.now, by: dependencies.deleter(me))
        }
        try await releaseLocks(me, inside: Self.lockPath(names), from: locks)
        return Response(status: .noContent)
    }

    /// A share's root, moved by its grantee, is their mount: it changes their view only, in their own folders. Items
    /// move only within one tree and one share (only an owner takes items out of a share); a copy is made in the
    /// source's owner's tree, so copying between trees is refused too.
    func moveOrCopy(_ me: Principal, _ names: [String], copy: Bool) async throws -> Response {
        guard !names.isEmpty else { throw DAVError(.forbidden, "The root folder cannot be moved or copied.") }
        guard let destinationHeader = request.headers[.init("Destination")!] else { throw DAVError(.badRequest, "A Destination header is needed.") }
        guard let target = try destinationNames(destinationHeader) else {
            throw DAVError(.badGateway, "The destination is not on this WebDAV share (\(Self.base)/).")
        }
        guard !target.isEmpty else { throw DAVError(.forbidden, "The root folder cannot be replaced.") }
        guard target != names else { throw DAVError(.forbidden, "The source and the destination are the same.") }
        if target.count > names.count && Array(target.prefix(names.count)) == names {
            throw DAVError(.forbidden, "A folder cannot be moved or copied into itself.")
        }
        let overwrite = (request.headers[.init("Overwrite")!]?.trimmingCharacters(in: .whitespaces).uppercased() ?? "T") != "F"
        guard let source = try await resolve(me, names) else { throw DAVError(.notFound, "Nothing at '/\(names.joined(separator: "/"))'.") }
        let parent = try await parentFolder(me, of: target)
        try authorize(me, source, copy ? .read : parent.id == source.parentId ? .rename : .move)
        try checkPreconditions(source)
        let newName = try FilesController.validName(target[target.count - 1])
        let existing = try await resolve(me, target)
        if existing != nil && !overwrite {
            throw DAVError(.preconditionFailed, "'/\(target.joined(separator: "/"))' exists and Overwrite is F.")
        }
        if let existing { try authorize(me, existing, copy && !existing.isFolder && !source.isFolder ? .write : .trash) }
        if !copy, let mountId = source.mountId {
            guard parent.userId == me.userId, parent.seenThrough == nil else { throw DAVError(.forbidden, "A share can be placed only in your own folders.") }
            guard existing == nil else { throw DAVError(.preconditionFailed, "'/\(target.joined(separator: "/"))' exists; a share does not replace an item.") }
            try await checkLocks(me, names: names, targets: [(Self.lockPath(target), true)])
            _ = try await dependencies.shares.updateMount(userId: me.userId, mountId: mountId, name: newName, parentId: parent.id, now: dependencies.now)
            return Response(status: .created, headers: [.contentLength: "0"])
        }
        guard Self.sameTree(source, parent), existing.map({ Self.sameTree($0, parent) }) ?? true else {
            throw DAVError(
                .forbidden,
                copy ? "Copying between a share and another tree is not done here; download and upload the copy."
                    : "Only its owner can move '\(source.name)' out of the share it is in, and nothing moves between users' folders.")
        }
        let locks = try await checkLocks(
            me, names: names, targets: (copy ? [] : [(Self.lockPath(names), true)]) + [(Self.lockPath(target), true)])
        if copy {
            let depth = request.headers[.init("Depth")!]?.trimmingCharacters(in: .whitespaces).lowercased() ?? "infinity"
            guard depth == "0" || depth == "infinity" else { throw DAVError(.badRequest, "COPY takes Depth 0 or infinity.") }
            // One transaction: what is under the destination goes to the trash (or, a file onto a file, gets the copy as a
            // new revision) with the copy made, or nothing happens.
            _ = try await dependencies.files.copy(
                userId: source.userId, sourceId: source.id, parentId: parent.id, name: newName, replacing: existing?.id, deep: depth == "infinity",
                now: dependencies.now, by: dependencies.deleter(me))
        } else {
            if let existing {
                // The item under the destination goes to the trash in the move's own transaction: both or neither.
                _ = try await dependencies.files.move(
                    userId: source.userId, fileId: source.id, name: newName, parentId: parent.id, replacing: existing.id, now: dependencies.now,
                    by: dependencies.deleter(me))
            } else {
                _ = try await dependencies.files.update(
                    userId: source.userId, fileId: source.id, name: newName, parentId: parent.id, ifMatch: nil, now: dependencies.now)
            }
            // Locks stay with paths, not items: the source's go (RFC 4918 §9.9.4).
            try await releaseLocks(me, inside: Self.lockPath(names), from: locks)
        }
        return Response(status: existing == nil ? .created : .noContent, headers: [.contentLength: "0"])
    }
}
