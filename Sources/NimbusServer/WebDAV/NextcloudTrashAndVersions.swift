import Foundation
import Hummingbird
import NimbusAPI
import NIOFoundationCompat

/// Nextcloud's trash bin and file versions over WebDAV, over the same trash and revisions as `/v1`:
///
/// `/remote.php/dav/trashbin/USER/trash/` lists what was deleted (each item the user deleted, named
/// `NAME.dSECONDS` as Nextcloud does — `NAME.dSECONDS-FILEID` when two share both), with `nc:trashbin-filename`,
/// `nc:trashbin-original-location` (its path from the user's root) and `nc:trashbin-deletion-time`; a deleted
/// folder lists what went with it. `MOVE` of an item to `…/trashbin/USER/restore/NAME` puts it back (where it was,
/// under a free name if that one is taken); `DELETE` of an item deletes it for good, of `trash` itself empties the
/// trash. `GET` reads a deleted file.
///
/// `/remote.php/dav/versions/USER/versions/FILEID/` lists a file's earlier versions (each named by its revision id,
/// with its size, type, time and ETag); `GET` reads one, and `MOVE` of one to `…/versions/USER/restore/target` makes
/// it the current content again (a new version: history keeps the one it replaced).
extension DAVRequest {
    // MARK: Trash bin

    func trashbin(_ me: Principal, method: String) async throws -> Response {
        let names = try Self.segments(of: request.uri.path)
        let allow: HTTPFields = [.allow: "PROPFIND, GET, HEAD, MOVE, DELETE"]
        switch (method, names.first, names.count) {
        case ("PROPFIND", nil, 0):
            let depth = try propfindDepth()
            var xml = DAVXML.multistatusOpen + Self.collectionResponse([])
            if depth == "1" { xml += Self.collectionResponse(["trash"]) + Self.collectionResponse(["restore"]) }
            return Self.multistatus(xml + "</d:multistatus>\n")
        case ("PROPFIND", "restore", 1):
            return Self.multistatus(DAVXML.multistatusOpen + Self.collectionResponse(["restore"]) + "</d:multistatus>\n")
        case ("PROPFIND", "trash", _):
            return try await trashPropfind(me, Array(names.dropFirst()))
        case ("GET", "trash", 2...), ("HEAD", "trash", 2...):
            let (item, _) = try await trashItem(me, Array(names.dropFirst()), .read)
            return try await get(me, item)
        case ("MOVE", "trash", 2):
            guard let destination = request.headers[.init("Destination")!], let path = Self.path(ofURL: destination),
                DAVMount.path(path, isWithin: Self.base + "/restore"), try Self.segments(of: path).count == 2
            else {
                throw DAVError(.badGateway, "Restore by MOVE to \(Self.base)/restore/NAME.")
            }
            let (item, _) = try await trashItem(me, Array(names.dropFirst()), .restore)
            _ = try await dependencies.files.untrash(userId: owner, fileId: item.id, now: dependencies.now)
            return Response(status: .created, headers: [.contentLength: "0"])
        case ("DELETE", "trash", 1):
            for (_, item) in try await trashEntries() {
                try dependencies.access.authorize(me, item, .purge)
                try await dependencies.files.deletePermanently(userId: owner, fileId: item.id, now: dependencies.now, by: dependencies.deleter(me))
            }
            return Response(status: .noContent)
        case ("DELETE", "trash", 2):
            let (item, _) = try await trashItem(me, Array(names.dropFirst()), .purge)
            try await dependencies.files.deletePermanently(userId: owner, fileId: item.id, now: dependencies.now, by: dependencies.deleter(me))
            return Response(status: .noContent)
        case (_, "trash", _), (_, "restore", _), (_, nil, _):
            throw DAVError(.methodNotAllowed, "\(method) is not taken here: PROPFIND lists the trash, MOVE to restore/ restores, DELETE deletes for good.", headers: allow)
        default:
            throw DAVError(.notFound, "The trash bin has 'trash' and 'restore' only.")
        }
    }

    /// The items the user deleted, each with its name in the trash bin.
    func trashEntries() async throws -> [(name: String, item: FileRecord)] {
        var items: [FileRecord] = []
        var page = 1
        while true {
            let batch = try await dependencies.files.trashed(userId: owner, paging: Paging(page: page, limit: Paging.maxLimit))
            items += batch.files
            if batch.files.count < Paging.maxLimit || items.count >= batch.total { break }
            page += 1
        }
        func plain(_ item: FileRecord) -> String { "\(item.name).d\(Int64((item.trashedAt ?? item.modifiedAt).timeIntervalSince1970))" }
        var counts: [String: Int] = [:]
        for item in items { counts[plain(item), default: 0] += 1 }
        return items.map { item in
            let name = plain(item)
            return (counts[name] == 1 ? name : "\(name)-\(NextcloudIDs.number(of: item.id))", item)
        }
    }

    /// The item at `names` inside the trash (an entry, or something deleted with it), through the access decision.
    func trashItem(_ me: Principal, _ names: [String], _ action: Action) async throws -> (FileRecord, [String]) {
        guard let first = names.first, let entry = try await trashEntries().first(where: { $0.name == first })?.item else {
            throw DAVError(.notFound, "Nothing named '\(names.first ?? "")' in the trash.")
        }
        var current = entry
        for name in names.dropFirst() {
            guard current.isFolder, let child = try await trashedChildren(of: current, root: entry).first(where: { $0.name == name }) else {
                throw DAVError(.notFound, "Nothing at '\(names.joined(separator: "/"))' in the trash.")
            }
            current = child
        }
        return (try dependencies.access.authorize(me, current, action), names)
    }

    /// What went to the trash with `root` inside the trashed folder `folder`.
    func trashedChildren(of folder: FileRecord, root: FileRecord) async throws -> [FileRecord] {
        try await allChildren(of: folder).filter { $0.trashRoot == root.id }
    }

    func trashPropfind(_ me: Principal, _ names: [String]) async throws -> Response {
        let depth = try propfindDepth()
        let wanted = try PropfindBody.parse(Data(buffer: try await request.body.collect(upTo: 1 << 20)))
        let user = try await dependencies.accounts.user(id: owner)
        var listed: [([String], FileRecord)] = []
        var itself: ([String], FileRecord)?
        var trash: [String: NextcloudProperties.TrashInfo] = [:]
        if names.isEmpty {
            if depth == "1" {
                for (name, item) in try await trashEntries() {
                    try dependencies.access.authorize(me, item, .list)
                    listed.append((["trash", name], item))
                }
            }
        } else {
            let (item, _) = try await trashItem(me, names, .list)
            itself = (["trash"] + names, item)
            if depth == "1" && item.isFolder, let entry = try await trashEntries().first(where: { $0.name == names[0] })?.item {
                for child in try await trashedChildren(of: item, root: entry) { listed.append((["trash"] + names + [child.name], child)) }
            }
        }
        var locations: [String: String] = [:]
        for (_, item) in (itself.map { [$0] } ?? []) + listed {
            trash[item.id] = .init(filename: item.name, originalLocation: try await originalLocation(of: item, cache: &locations), deletedAt: item.trashedAt ?? item.modifiedAt)
        }
        let all = (itself.map { [$0] } ?? []) + listed
        let folders = NextcloudProperties.asksForSize(wanted) ? all.map(\.1).filter(\.isFolder) : []
        let properties = NextcloudProperties(
            permissions: Dictionary(all.map { ($0.1.id, dependencies.access.allows(me, $0.1, .purge) ? "GD" : "G") }, uniquingKeysWith: { a, _ in a }),
            folderSizes: try await trashedSizes(folders), ownerName: user?.username ?? "", trash: trash)
        var xml = DAVXML.multistatusOpen
        xml += itself.map { Self.propResponse($0.1, names: $0.0, wanted: wanted, user: nil, dead: [], locks: [], nextcloud: properties) } ?? Self.collectionResponse(["trash"])
        for (path, item) in listed {
            xml += Self.propResponse(item, names: path, wanted: wanted, user: nil, dead: [], locks: [], nextcloud: properties)
        }
        return Self.multistatus(xml + "</d:multistatus>\n")
    }

    /// A trashed folder's content size: what went to the trash with it.
    func trashedSizes(_ folders: [FileRecord]) async throws -> [String: Int64] {
        var sizes: [String: Int64] = [:]
        for folder in folders {
            var total: Int64 = 0
            var pending = [folder]
            while let next = pending.popLast() {
                for child in try await allChildren(of: next) where child.trashRoot == folder.trashRoot {
                    if child.isFolder { pending.append(child) } else { total += child.size }
                }
            }
            sizes[folder.id] = total
        }
        return sizes
    }

    /// Where an item was, from the user's root ("Docs/report.pdf"): its parents' names as they are now.
    func originalLocation(of item: FileRecord, cache: inout [String: String]) async throws -> String {
        guard let parentId = item.parentId else { return item.name }
        if let known = cache[parentId] { return known.isEmpty ? item.name : known + "/" + item.name }
        var names: [String] = []
        var next: String? = parentId
        while let id = next, let folder = try await dependencies.files.item(id: id), folder.parentId != nil, folder.userId == owner {
            names.insert(folder.name, at: 0)
            next = folder.parentId
        }
        let path = names.joined(separator: "/")
        cache[parentId] = path
        return path.isEmpty ? item.name : path + "/" + item.name
    }

    // MARK: Versions

    func versions(_ me: Principal, method: String) async throws -> Response {
        let names = try Self.segments(of: request.uri.path)
        switch (method, names.first, names.count) {
        case ("PROPFIND", nil, 0):
            let depth = try propfindDepth()
            var xml = DAVXML.multistatusOpen + Self.collectionResponse([])
            if depth == "1" { xml += Self.collectionResponse(["versions"]) + Self.collectionResponse(["restore"]) }
            return Self.multistatus(xml + "</d:multistatus>\n")
        case ("PROPFIND", "versions", 1), ("PROPFIND", "restore", 1):
            return Self.multistatus(DAVXML.multistatusOpen + Self.collectionResponse(names) + "</d:multistatus>\n")
        case ("PROPFIND", "versions", 2...3):
            return try await versionsPropfind(me, names)
        case ("GET", "versions", 3), ("HEAD", "versions", 3):
            let file = try await versionedFile(me, names[1], .read)
            let revision = try await dependencies.content.revision(userId: file.userId, fileId: file.id, revisionId: names[2])
            var response = try await ContentController(dependencies: dependencies).stream(revision, name: file.name, request: request, userId: file.userId)
            response.headers[.contentDisposition] = nil
            if request.method == .head { response.body = .init() }
            return response
        case ("MOVE", "versions", 3):
            guard let destination = request.headers[.init("Destination")!], let path = Self.path(ofURL: destination),
                DAVMount.path(path, isWithin: Self.base + "/restore")
            else {
                throw DAVError(.badGateway, "Restore a version by MOVE to \(Self.base)/restore/target.")
            }
            let file = try await versionedFile(me, names[1], .write)
            _ = try await dependencies.content.restore(userId: file.userId, fileId: file.id, revisionId: names[2], now: dependencies.now)
            return Response(status: .created, headers: [.contentLength: "0"])
        case (_, "versions", _), (_, "restore", _), (_, nil, _):
            throw DAVError(.methodNotAllowed, "\(method) is not taken here: PROPFIND lists versions, GET reads one, MOVE to restore/target restores it.", headers: [.allow: "PROPFIND, GET, HEAD, MOVE"])
        default:
            throw DAVError(.notFound, "The versions tree has 'versions/FILEID' and 'restore' only.")
        }
    }

    /// The file a versions path names by its `oc:fileid`, through the access decision.
    func versionedFile(_ me: Principal, _ text: String, _ action: Action) async throws -> FileRecord {
        guard let number = NextcloudIDs.number(in: text), let prefix = NextcloudIDs.idPrefix(of: number),
            let file = try await dependencies.files.item(idPrefix: prefix), !file.isTrashed, !file.isFolder
        else {
            _ = dependencies.access.notFound(me, itemId: text, action)
            throw DAVError(.notFound, "No file with the id \(text).")
        }
        do {
            return try dependencies.access.authorize(me, file, action)
        } catch {
            throw DAVError(.notFound, "No file with the id \(text).")
        }
    }

    func versionsPropfind(_ me: Principal, _ names: [String]) async throws -> Response {
        let depth = try propfindDepth()
        let wanted = try PropfindBody.parse(Data(buffer: try await request.body.collect(upTo: 1 << 20)))
        let file = try await versionedFile(me, names[1], .read)
        var revisions: [RevisionRecord] = []
        var page = 1
        while true {
            let batch = try await dependencies.content.revisions(userId: file.userId, fileId: file.id, paging: Paging(page: page, limit: Paging.maxLimit))
            revisions += batch.revisions
            if batch.revisions.count < Paging.maxLimit || revisions.count >= batch.total { break }
            page += 1
        }
        // The current content is the file itself; its earlier versions are listed.
        let earlier = revisions.filter { $0.id != file.headRevisionId }
        func entry(_ revision: RevisionRecord) -> String {
            Self.response(
                href: Self.href(["versions", names[1], revision.id], folder: false), wanted: wanted,
                values: [
                    ("DAV:", "resourcetype", ""), ("DAV:", "displayname", Self.xmlEscape(revision.id)),
                    ("DAV:", "getcontentlength", String(revision.size)), ("DAV:", "getcontenttype", Self.xmlEscape(revision.mimeType)),
                    ("DAV:", "getlastmodified", HTTPDate.string(from: revision.createdAt)), ("DAV:", "getetag", Self.xmlEscape("\"\(revision.id)\"")),
                    (DAVXML.ownCloud, "checksums", DAVXML.element(DAVXML.ownCloud, "checksum", value: "SHA256:" + revision.checksum)),
                    (DAVXML.nextcloud, "has-preview", "false"),
                ])
        }
        var xml = DAVXML.multistatusOpen
        if names.count == 3 {
            guard let revision = earlier.first(where: { $0.id == names[2] }) ?? revisions.first(where: { $0.id == names[2] }) else {
                throw DAVError(.notFound, "No version '\(names[2])' of '\(file.name)'.")
            }
            xml += entry(revision)
        } else {
            xml += Self.collectionResponse(names)
            if depth == "1" { for revision in earlier { xml += entry(revision) } }
        }
        return Self.multistatus(xml + "</d:multistatus>\n")
    }

    // MARK: Helpers

    /// A `PROPFIND` answer for a collection that is not an item (the trash bin's and versions' own folders).
    static func collectionResponse(_ names: [String]) -> String {
        "<d:response><d:href>\(xmlEscape(href(names, folder: true)))</d:href><d:propstat><d:prop><d:resourcetype><d:collection/></d:resourcetype></d:prop>"
            + "<d:status>HTTP/1.1 200 OK</d:status></d:propstat></d:response>\n"
    }

    /// One `d:response` from the values this entry has, answering what `wanted` names (the rest 404).
    static func response(href: String, wanted: PropfindBody, values: [(String, String, String)]) -> String {
        var found: [String] = []
        var missing: [String] = []
        switch wanted {
        case .allprop, .propname:
            for (namespace, name, value) in values where namespace == "DAV:" {
                found.append(DAVXML.element(namespace, name, value: wanted == .propname ? "" : value))
            }
        case .prop(let properties):
            for property in properties {
                if let value = values.first(where: { $0.0 == property.namespace && $0.1 == property.name })?.2 {
                    found.append(DAVXML.element(property.namespace, property.name, value: value))
                } else {
                    missing.append(DAVXML.element(property.namespace, property.name, value: ""))
                }
            }
        }
        return response(href: href, found: found, missing: missing)
    }

    static func multistatus(_ xml: String) -> Response {
        Response(
            status: multiStatus, headers: [.contentType: "application/xml; charset=utf-8", .contentLength: String(xml.utf8.count)],
            body: .init(byteBuffer: ByteBuffer(string: xml)))
    }

    /// The path of a `Destination` (a URL or a path), percent-encoded as sent.
    static func path(ofURL header: String) -> String? {
        URL(string: header).flatMap { $0.scheme != nil ? $0.path(percentEncoded: true) : nil } ?? (header.hasPrefix("/") ? header : nil)
    }
}
