import Crypto
import Foundation
import Hummingbird
import NimbusAPI
import NIOFoundationCompat

#if canImport(FoundationXML)
import FoundationXML
#endif
extension DAVRequest {
    // MARK: Reading

    func get(_ me: Principal, _ names: [String]) async throws -> Response {
        guard let item = try await resolve(me, names) else { throw DAVError(.notFound, "Nothing at '/\(names.joined(separator: "/"))'.") }
        return try await get(me, try authorize(me, item, item.isFolder ? .list : .read), names: names)
    }

    func get(_ me: Principal, _ item: FileRecord, names: [String]? = nil) async throws -> Response {
        if item.isFolder {
            let names = names ?? [item.name]
            // A browser pointed at /dav/ gets a plain listing; WebDAV clients use PROPFIND.
            var lines = ["Index of /\(names.joined(separator: "/"))", ""]
            for child in try await allChildren(me, of: item) { lines.append(child.isFolder ? child.name + "/" : child.name) }
            let body = lines.joined(separator: "\n") + "\n"
            var headers: HTTPFields = [.contentType: "text/plain; charset=utf-8", .eTag: "\"\(item.davETag)\"", .contentLength: String(body.utf8.count)]
            headers[.lastModified] = HTTPDate.string(from: item.modifiedAt)
            return Response(status: .ok, headers: headers, body: request.method == .head ? .init() : .init(byteBuffer: ByteBuffer(string: body)))
        }
        guard let revisionId = item.headRevisionId else { throw DAVError(.notFound, "'\(item.name)' has no content.") }
        try checkPreconditions(item)
        let revision = try await dependencies.content.revision(userId: item.userId, fileId: item.id, revisionId: revisionId)
        var response = try await ContentController(dependencies: dependencies).stream(revision, name: item.name, request: request, userId: item.userId)
        // WebDAV clients open files in place: no attachment disposition here.
        response.headers[.contentDisposition] = nil
        if request.method == .head { response.body = .init() }
        return response
    }

    /// Every child of `folder` as the principal sees it: in their own folders, with the shares mounted there; inside
    /// a share, each carrying the grant that reaches it (``resolve(_:_:)``).
    func allChildren(_ me: Principal, of folder: FileRecord) async throws -> [FileRecord] {
        let own = folder.userId == me.userId && folder.seenThrough == nil
        var children = try await allChildren(of: folder, mountsAt: own ? dependencies.now : nil)
        for index in children.indices {
            if children[index].mountId != nil {
                children[index].seenThrough = try await dependencies.shares.reach(userId: me.userId, itemId: children[index].id, now: dependencies.now)
            } else if let reach = folder.seenThrough {
                children[index].seenThrough = reach.beneath
            }
        }
        return children
    }

    /// Every child of `folder` (what went to the trash with it, for a trashed one), page by page; with the shares
    /// mounted in it when `mountsAt` (the time grants are live at) is given.
    func allChildren(of folder: FileRecord, mountsAt: Date? = nil) async throws -> [FileRecord] {
        var result: [FileRecord] = []
        var page = 1
        while true {
            let batch = try await dependencies.files.children(
                of: folder.id, userId: folder.userId, paging: Paging(page: page, limit: Paging.maxLimit), order: .byName, mountsAt: mountsAt)
            result += batch.files
            if batch.files.count < Paging.maxLimit || result.count >= batch.total { return result }
            page += 1
        }
    }

    // MARK: PROPFIND

    func propfind(_ me: Principal, _ names: [String]) async throws -> Response {
        let depth = try propfindDepth()
        let body = try await request.body.collect(upTo: 1 << 20)
        let wanted = try PropfindBody.parse(Data(buffer: body))
        let item = try await require(me, names, .list)
        let user = try await dependencies.accounts.user(id: owner)
        let children = depth == "1" && item.isFolder ? try await allChildren(me, of: item) : []
        let listed = [item] + children
        var dead: [String: [DeadProperty]] = [:]
        for (userId, items) in Dictionary(grouping: listed, by: \.userId) {
            dead.merge(try await dependencies.webDAV.deadProperties(userId: userId, fileIds: items.map(\.id))) { a, _ in a }
        }
        let locks = try await dependencies.webDAV.davLocks(userId: owner, now: dependencies.now)
        var nextcloud: NextcloudProperties?
        if mount.isNextcloud {
            nextcloud = try await nextcloudProperties(me, listed, wanted: wanted)
        }
        var xml = DAVXML.multistatusOpen
        xml += Self.propResponse(item, names: names, wanted: wanted, user: user, dead: dead[item.id] ?? [], locks: locks, nextcloud: nextcloud)
        for child in children {
            xml += Self.propResponse(
                child, names: names + [child.name], wanted: wanted, user: user, dead: dead[child.id] ?? [], locks: locks, nextcloud: nextcloud)
        }
        xml += "</d:multistatus>\n"
        return Response(
            status: Self.multiStatus,
            headers: [.contentType: "application/xml; charset=utf-8", .contentLength: String(xml.utf8.count)],
            body: .init(byteBuffer: ByteBuffer(string: xml)))
    }

    /// ownCloud's namespace: at `/dav/` its `fileid` property is answered (the item's id, as NimbusSync's WebDAV
    /// provider has always read it) when asked for by name; the Nextcloud mounts answer ``NextcloudProperties``.
    static let ownCloudNamespace = DAVXML.ownCloud

    /// The live properties this server has, in the `DAV:` namespace.
    static let liveProperties = [
        "resourcetype", "displayname", "getetag", "getlastmodified", "creationdate", "getcontentlength", "getcontenttype",
        "supportedlock", "lockdiscovery", "quota-used-bytes", "quota-available-bytes",
    ]

    static func propResponse(
        _ item: FileRecord, names: [String], wanted: PropfindBody, user: UserRecord?, dead: [DeadProperty], locks: [DAVLock],
        nextcloud: NextcloudProperties? = nil
    ) -> String {
        var found: [String] = []
        var missing: [String] = []
        func value(_ name: String) -> String? {
            switch name {
            case "resourcetype": return item.isFolder ? "<d:collection/>" : ""
            case "displayname": return xmlEscape(names.last ?? "")
            case "getetag": return xmlEscape("\"\(item.davETag)\"")
            case "getlastmodified": return HTTPDate.string(from: item.modifiedAt)
            case "creationdate": return iso8601(item.createdAt)
            case "getcontentlength": return item.isFolder ? nil : String(item.size)
            case "getcontenttype": return item.isFolder ? nil : xmlEscape(item.mimeType)
            case "supportedlock": return supportedLock
            case "lockdiscovery":
                let path = lockPath(names)
                return locks.filter { $0.covers(path) }.map(activeLock).joined()
            case "quota-used-bytes": return item.isFolder ? user.map { String($0.usedBytes) } : nil
            case "quota-available-bytes":
                guard item.isFolder, let user else { return nil }
                return user.quotaLimit.map { String(max(0, $0 - user.usedBytes)) }
            default: return nil
            }
        }
        switch wanted {
        case .allprop:
            for name in liveProperties where !name.hasPrefix("quota") {
                if let value = value(name) { found.append(DAVXML.element("DAV:", name, value: value)) }
            }
            found += dead.map { DAVXML.element($0.namespace, $0.name, value: $0.value) }
        case .propname:
            for name in liveProperties where value(name) != nil { found.append("<d:\(name)/>") }
            found += dead.map { DAVXML.element($0.namespace, $0.name, value: "") }
        case .prop(let properties):
            for property in properties {
                if property.namespace == "DAV:", let value = value(property.name) {
                    found.append(DAVXML.element("DAV:", property.name, value: value))
                } else if let nextcloud, let value = nextcloud.value(item, property) {
                    found.append(DAVXML.element(property.namespace, property.name, value: value))
                } else if nextcloud == nil, property.namespace == ownCloudNamespace, property.name == "fileid" {
                    found.append(DAVXML.element(ownCloudNamespace, "fileid", value: xmlEscape(item.id)))
                } else if let stored = dead.first(where: { $0.namespace == property.namespace && $0.name == property.name }) {
                    found.append(DAVXML.element(stored.namespace, stored.name, value: stored.value))
                } else {
                    missing.append(DAVXML.element(property.namespace, property.name, value: ""))
                }
            }
        }
        return response(href: href(names, folder: item.isFolder), found: found, missing: missing)
    }

    /// One `d:response`: the properties found (200) and those asked for and missing (404).
    static func response(href: String, found: [String], missing: [String]) -> String {
        var xml = "<d:response><d:href>\(xmlEscape(href))</d:href>"
        if !found.isEmpty || missing.isEmpty {
            xml += "<d:propstat><d:prop>\(found.joined())</d:prop><d:status>HTTP/1.1 200 OK</d:status></d:propstat>"
        }
        if !missing.isEmpty {
            xml += "<d:propstat><d:prop>\(missing.joined())</d:prop><d:status>HTTP/1.1 404 Not Found</d:status></d:propstat>"
        }
        return xml + "</d:response>\n"
    }

    /// Sets and removes dead properties, all or nothing: a live (protected) property in the request is 403 and
    /// every other one 424, and nothing is changed.
    func proppatch(_ me: Principal, _ names: [String]) async throws -> Response {
        let body = try await request.body.collect(upTo: 1 << 20)
        let updates = try PropertyUpdate.parse(Data(buffer: body))
        let item = try await require(me, names, .write)
        try checkPreconditions(item)
        try await checkLocks(me, names: names, targets: [(Self.lockPath(names), false)])
        let protected = updates.filter {
            ($0.property.namespace == "DAV:" && Self.liveProperties.contains($0.property.name))
                || ($0.property.namespace == Self.ownCloudNamespace && $0.property.name == "fileid")
        }
        var statuses: [(DeadProperty, String)] = []
        if protected.isEmpty {
            var set: [DeadProperty] = []
            var remove: [DeadProperty] = []
            // In document order: a later entry for the same property wins.
            for update in updates {
                let key = update.property
                set.removeAll { $0.namespace == key.namespace && $0.name == key.name }
                remove.removeAll { $0.namespace == key.namespace && $0.name == key.name }
                switch update {
                case .set(let property): set.append(property)
                case .remove(let property): remove.append(property)
                }
            }
            try await dependencies.webDAV.patchDeadProperties(userId: item.userId, fileId: item.id, set: set, remove: remove)
            statuses = updates.map { ($0.property, "HTTP/1.1 200 OK") }
        } else {
            statuses = updates.map { update in
                let isProtected = protected.contains { $0.property == update.property }
                return (update.property, isProtected ? "HTTP/1.1 403 Forbidden" : "HTTP/1.1 424 Failed Dependency")
            }
        }
        var xml = DAVXML.multistatusOpen
        xml += "<d:response><d:href>\(Self.xmlEscape(Self.href(names, folder: item.isFolder)))</d:href>"
        for (property, status) in statuses {
            xml += "<d:propstat><d:prop>\(DAVXML.element(property.namespace, property.name, value: ""))</d:prop><d:status>\(status)</d:status></d:propstat>"
        }
        xml += "</d:response>\n</d:multistatus>\n"
        return Response(
            status: Self.multiStatus,
            headers: [.contentType: "application/xml; charset=utf-8", .contentLength: String(xml.utf8.count)],
            body: .init(byteBuffer: ByteBuffer(string: xml)))
    }

    static func iso8601(_ date: Date) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        return formatter.string(from: date)
    }

    static func xmlEscape(_ text: String) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for character in text.unicodeScalars {
            switch character {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            default: out.unicodeScalars.append(character)
            }
        }
        return out
    }
}
