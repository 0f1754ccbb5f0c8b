import Crypto
import Foundation
import Hummingbird
import NimbusAPI
import NIOFoundationCompat

#if canImport(FoundationXML)
import FoundationXML
#endif

/// WebDAV at `/dav/` (RFC 4918 class 1) over the same tree, revisions and trash as `/v1`: the metadata store is the
/// one source of truth, so a change made here is in the change feed and live events like any other.
///
/// Signed in with HTTP Basic: the user name and an app password (never the account password; failures count
/// towards the same lockout as logins). Paths are names from the user's root: `/dav/Work/report.pdf`.
/// - `PROPFIND` Depth 0 or 1 (a missing Depth is 1; `infinity` is refused with `propfind-finite-depth`);
/// - `GET`/`HEAD` with `Range` (the `/v1` content code), `PUT` streamed into a new file or a new revision;
/// - `MKCOL`, `DELETE` (to the trash), `MOVE` and `COPY` (`Overwrite`, `Depth`), `If-Match`/`If-None-Match` → 412;
/// - `getetag` is a file's revision id; a collection's moves whenever anything beneath it changes (Nextcloud's and
///   ownCloud's do too), so a client can skip a subtree whose ETag it already has; `oc:fileid` (ownCloud's namespace)
///   is the item's id, and tells such a client that collection ETags propagate here. Quota properties from RFC 4331.
///
/// It is a middleware rather than routes: WebDAV's methods and its open-ended paths are not `/v1` routes (they are
/// not in `openapi.yaml`, and the 405 logic of ``ErrorMiddleware`` does not apply to them).
struct DAVMiddleware: RouterMiddleware {
    typealias Context = NimbusRequestContext
    let drive: Drive

    static let prefix = "/dav"
    static let methods = "OPTIONS, GET, HEAD, PUT, DELETE, PROPFIND, PROPPATCH, MKCOL, COPY, MOVE, LOCK, UNLOCK"

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let mount = DAVMount(path: request.uri.path) else { return try await next(request, context) }
        do {
            return try await DAVRequest.$base.withValue(mount.base) {
                try await DAVRequest(drive: drive, request: request, context: context, mount: mount).respond()
            }
        } catch let error as DAVError {
            return error.response
        } catch {
            return DAVError(DriveError.from(error)).response
        }
    }
}

/// Where a WebDAV path is served from. The user's tree is at `/dav/` and, in Nextcloud's layout, at
/// `/remote.php/dav/files/USER/` (and its older `/remote.php/webdav/`), so clients made for Nextcloud (rclone's
/// `--webdav-vendor nextcloud`, Nextcloud's own) work unchanged; Nextcloud's chunked uploads are at
/// `/remote.php/dav/uploads/USER/` (see `DAVController+Uploads`). A path naming a user is served only to that user.
struct DAVMount: Sendable {
    enum Tree: Sendable { case files, uploads }
    var tree: Tree
    /// The path before the first name (`/dav`, `/remote.php/dav/files/ana`), as sent (percent-encoded).
    var base: String
    /// The user the path names (Nextcloud's layout), decoded; nil at `/dav/`.
    var owner: String?

    static let nextcloudFiles = "/remote.php/dav/files/"
    static let nextcloudUploads = "/remote.php/dav/uploads/"
    static let nextcloudLegacy = "/remote.php/webdav"

    init(tree: Tree, base: String, owner: String?) {
        self.tree = tree
        self.base = base
        self.owner = owner
    }

    init?(path: String) {
        if Self.path(path, isWithin: DAVMiddleware.prefix) {
            self.init(tree: .files, base: DAVMiddleware.prefix, owner: nil)
        } else if Self.path(path, isWithin: Self.nextcloudLegacy) {
            self.init(tree: .files, base: Self.nextcloudLegacy, owner: nil)
        } else {
            for (prefix, tree) in [(Self.nextcloudFiles, Tree.files), (Self.nextcloudUploads, .uploads)] where path.hasPrefix(prefix) {
                let user = path.dropFirst(prefix.count).prefix { $0 != "/" }
                guard !user.isEmpty, let owner = String(user).removingPercentEncoding else { return nil }
                self.init(tree: tree, base: prefix + user, owner: owner)
                return
            }
            return nil
        }
    }

    /// Whether `path` is `base` or below it.
    static func path(_ path: String, isWithin base: String) -> Bool { path == base || path.hasPrefix(base + "/") }

    /// The names of a path in the user's tree under any of its mounts (a `Destination`), nil when it is elsewhere.
    static func treeNames(of path: String, owner: String) throws -> [String]? {
        guard let mount = DAVMount(path: path), mount.tree == .files, mount.owner == nil || mount.owner == owner else { return nil }
        return try DAVRequest.segments(of: path, base: mount.base)
    }
}

/// A WebDAV failure: a status, and a short text (or an RFC 4918 `DAV:error` body) saying what to do.
struct DAVError: Error {
    var status: HTTPResponse.Status
    var message: String
    var headers: HTTPFields = [:]
    /// The content of a `DAV:error` body (a precondition element, e.g. `<D:propfind-finite-depth/>`).
    var condition: String?

    init(_ status: HTTPResponse.Status, _ message: String, headers: HTTPFields = [:], condition: String? = nil) {
        self.status = status
        self.message = message
        self.headers = headers
        self.condition = condition
    }

    /// The `/v1` error as WebDAV says it: a stale `If-Match` is 412 here (409 in `/v1`), a clash with a name 412.
    init(_ error: DriveError) {
        switch error {
        case .versionConflict(let message, _): self.init(.preconditionFailed, message)
        case .nameConflict(let name, _): self.init(.preconditionFailed, "'\(name)' exists already.")
        case .tooManyRequests(let message, let retryAfter): self.init(.tooManyRequests, message, headers: [.retryAfter: String(retryAfter)])
        case .unauthorized(let message): self.init(.unauthorized, message, headers: DAVRequest.challenge)
        default: self.init(error.status, error.body.error.message)
        }
    }

    var response: Response {
        var headers = headers
        let body: String
        if let condition {
            headers[.contentType] = "application/xml; charset=utf-8"
            body = "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<D:error xmlns:D=\"DAV:\">\(condition)</D:error>\n"
        } else {
            headers[.contentType] = "text/plain; charset=utf-8"
            body = message + "\n"
        }
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(string: body)))
    }
}

/// One WebDAV request, signed in.
struct DAVRequest {
    let drive: Drive
    let request: Request
    let context: NimbusRequestContext
    let mount: DAVMount

    /// The path before the names of the request being answered (`/dav`, `/remote.php/dav/files/ana`): hrefs in
    /// answers are made under it, paths in headers read under it.
    @TaskLocal static var base = DAVMiddleware.prefix

    static let challenge: HTTPFields = [.wwwAuthenticate: "Basic realm=\"Nimbus\", charset=\"UTF-8\""]

    func respond() async throws -> Response {
        let method = request.method.rawValue
        if method == "OPTIONS" {
            // Answered before signing in: clients (Windows, Office) ask what the server speaks first.
            return Response(status: .ok, headers: [
                .init("DAV")!: "1, 2", .allow: DAVMiddleware.methods, .init("MS-Author-Via")!: "DAV", .contentLength: "0",
            ])
        }
        let (me, username) = try await signIn()
        if let owner = mount.owner, owner != username {
            let named = try await drive.store.user(username: owner)
            guard named?.id == me.userId else { throw DAVError(.notFound, "'\(owner)' is not the user signed in; use /remote.php/dav/files/\(username)/.") }
        }
        if mount.tree == .uploads { return try await uploads(me, method: method) }
        let segments = try Self.segments(of: request.uri.path)
        switch method {
        case "PROPFIND": return try await propfind(me, segments)
        case "GET", "HEAD": return try await get(me, segments)
        case "PUT": return try await put(me, segments)
        case "MKCOL": return try await mkcol(me, segments)
        case "DELETE": return try await delete(me, segments)
        case "MOVE", "COPY": return try await moveOrCopy(me, segments, copy: method == "COPY")
        case "PROPPATCH": return try await proppatch(me, segments)
        case "LOCK": return try await lock(me, segments)
        case "UNLOCK": return try await unlock(me, segments)
        default:
            throw DAVError(.methodNotAllowed, "\(method) is not a WebDAV method this server takes.", headers: [.allow: DAVMiddleware.methods])
        }
    }

    // MARK: Signing in

    /// Basic auth with the user name and one of the user's app passwords. Failures count towards the login
    /// lockout of that account from that address, exactly like `POST /v1/auth/login`.
    func signIn() async throws -> (Identity, String) {
        guard let header = request.headers[.authorization] else {
            throw DAVError(.unauthorized, "Sign in with your user name and an app password (make one in Settings or with 'nimbus app-password add').", headers: Self.challenge)
        }
        guard let (username, password) = Self.basicCredentials(header) else {
            throw DAVError(.unauthorized, "The Authorization header must be 'Basic base64(user:app-password)'.", headers: Self.challenge)
        }
        let drive = drive
        let outcome = try await drive.signIn(username: username, remoteIP: context.remoteIP, clearsFailures: false) { () -> Identity? in
            let record = try await drive.store.useAppPassword(passwordHash: AppPasswords.hash(password), now: drive.now)
            let user = try await drive.store.user(username: username)
            guard let record, let user, record.userId == user.id else { return nil }
            return Identity(userId: user.id, deviceId: Identity.appPasswordPrefix + record.id)
        }
        switch outcome {
        case .signedIn(let identity): return (identity, username)
        case .lockedOut(let wait):
            throw DAVError(.tooManyRequests, "Too many failed sign-ins for this account from this address; try again in \(wait) s.", headers: [.retryAfter: String(wait)])
        case .refused:
            throw DAVError(.unauthorized, "Wrong user name or app password (WebDAV takes app passwords, not the account password).", headers: Self.challenge)
        }
    }

    // MARK: Paths

    /// The decoded names after the base (`/dav/`); `..`, `.` and empty names (but a trailing slash) are refused.
    static func segments(of rawPath: String, base: String = DAVRequest.base) throws -> [String] {
        let rest = rawPath.dropFirst(base.count)
        var names: [String] = []
        let parts = rest.split(separator: "/", omittingEmptySubsequences: false)
        for (index, part) in parts.enumerated() {
            if part.isEmpty {
                // The leading "/" and a trailing one (a collection's href) are fine; "a//b" is not.
                guard index == 0 || index == parts.count - 1 else { throw DAVError(.badRequest, "The path has an empty name in it.") }
                continue
            }
            guard let name = String(part).removingPercentEncoding, name != ".", name != "..", !name.contains("/") else {
                throw DAVError(.badRequest, "'\(part)' is not a valid name in a path.")
            }
            names.append(name)
        }
        return names
    }

    /// The href of the item at `names` (percent-encoded per name; collections end with "/").
    static func href(_ names: [String], folder: Bool) -> String {
        let encoded = names.map { $0.addingPercentEncoding(withAllowedCharacters: unreserved) ?? $0 }
        let path = base + "/" + encoded.joined(separator: "/")
        return folder && !names.isEmpty ? path + "/" : path
    }

    static let unreserved = CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~!$&'()*+,;=:@")

    /// The names in the user's tree a `Destination` header (a URL or a path) points at, under this request's base
    /// or another mount of the same tree (`/dav/…`, `/remote.php/dav/files/USER/…`); nil when it points elsewhere.
    func destinationNames(_ header: String) throws -> [String]? {
        let path = URL(string: header).flatMap { $0.scheme != nil ? $0.path(percentEncoded: true) : nil } ?? header
        if DAVMount.path(path, isWithin: Self.base) { return try Self.segments(of: path) }
        guard let owner = mount.owner ?? request.headers[.authorization].flatMap({ Self.basicCredentials($0)?.user }) else { return nil }
        return try DAVMount.treeNames(of: path, owner: owner)
    }

    /// The user name and password of a Basic `Authorization` header.
    static func basicCredentials(_ header: String) -> (user: String, password: String)? {
        let parts = header.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "basic", let decoded = Data(base64Encoded: String(parts[1])),
            let text = String(data: decoded, encoding: .utf8), let colon = text.firstIndex(of: ":")
        else { return nil }
        return (String(text[..<colon]), String(text[text.index(after: colon)...]))
    }

    /// The live item at `names`, or nil; a missing folder on the way is nil too.
    func resolve(_ me: Identity, _ names: [String]) async throws -> FileRecord? {
        var current = try await drive.file("root", for: me)
        for name in names {
            guard current.isFolder, let child = try await drive.store.child(named: name, in: current.id, userId: me.userId) else { return nil }
            current = child
        }
        return current
    }

    /// The folder a new item at `names` goes into: 409 when it does not exist (RFC 4918: intermediate collections
    /// are never made implicitly).
    func parentFolder(_ me: Identity, of names: [String]) async throws -> FileRecord {
        guard let parent = try await resolve(me, Array(names.dropLast())), parent.isFolder else {
            throw DAVError(.conflict, "The folder '/\(names.dropLast().joined(separator: "/"))' does not exist; create it first (MKCOL).")
        }
        return parent
    }

    func require(_ me: Identity, _ names: [String]) async throws -> FileRecord {
        guard let item = try await resolve(me, names) else { throw DAVError(.notFound, "Nothing at '/\(names.joined(separator: "/"))'.") }
        return item
    }

    /// `If-Match` / `If-None-Match` against the item's ETag (`*` = exists): 412 when they do not hold.
    func checkPreconditions(_ item: FileRecord?) throws {
        if let condition = request.headers[.ifMatch] {
            guard let item, condition.trimmingCharacters(in: .whitespaces) == "*" || ETag.matches(condition, item.davETag) else {
                throw DAVError(.preconditionFailed, "If-Match does not hold: the item changed (or is missing) since you read it.")
            }
        }
        if let condition = request.headers[.ifNoneMatch], let item {
            if condition.trimmingCharacters(in: .whitespaces) == "*" || ETag.matches(condition, item.davETag) {
                throw DAVError(.preconditionFailed, "If-None-Match does not hold: the item exists.")
            }
        }
    }

    // MARK: Reading

    func get(_ me: Identity, _ names: [String]) async throws -> Response {
        let item = try await require(me, names)
        if item.isFolder {
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
        let revision = try await drive.store.revision(userId: me.userId, fileId: item.id, revisionId: revisionId)
        var response = try await ContentController(drive: drive).stream(revision, name: item.name, request: request, userId: me.userId)
        // WebDAV clients open files in place: no attachment disposition here.
        response.headers[.contentDisposition] = nil
        if request.method == .head { response.body = .init() }
        return response
    }

    func allChildren(_ me: Identity, of folder: FileRecord) async throws -> [FileRecord] {
        var result: [FileRecord] = []
        var page = 1
        while true {
            let batch = try await drive.store.children(of: folder.id, userId: me.userId, paging: Paging(page: page, limit: Paging.maxLimit))
            result += batch.files
            if batch.files.count < Paging.maxLimit || result.count >= batch.total { return result }
            page += 1
        }
    }

    // MARK: PROPFIND

    func propfind(_ me: Identity, _ names: [String]) async throws -> Response {
        let depth = try propfindDepth()
        let body = try await request.body.collect(upTo: 1 << 20)
        let wanted = try PropfindBody.parse(Data(buffer: body))
        let item = try await require(me, names)
        let user = try await drive.store.user(id: me.userId)
        let children = depth == "1" && item.isFolder ? try await allChildren(me, of: item) : []
        let dead = try await drive.store.deadProperties(userId: me.userId, fileIds: [item.id] + children.map(\.id))
        let locks = try await drive.store.davLocks(userId: me.userId, now: drive.now)
        var xml = "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<D:multistatus xmlns:D=\"DAV:\">\n"
        xml += Self.propResponse(item, names: names, wanted: wanted, user: user, dead: dead[item.id] ?? [], locks: locks)
        for child in children {
            xml += Self.propResponse(child, names: names + [child.name], wanted: wanted, user: user, dead: dead[child.id] ?? [], locks: locks)
        }
        xml += "</D:multistatus>\n"
        return Response(
            status: Self.multiStatus,
            headers: [.contentType: "application/xml; charset=utf-8", .contentLength: String(xml.utf8.count)],
            body: .init(byteBuffer: ByteBuffer(string: xml)))
    }

    /// ownCloud's namespace: its `fileid` property is answered (the item's id) when asked for by name.
    static let ownCloudNamespace = "http://owncloud.org/ns"

    /// The live properties this server has, in the `DAV:` namespace.
    static let liveProperties = [
        "resourcetype", "displayname", "getetag", "getlastmodified", "creationdate", "getcontentlength", "getcontenttype",
        "supportedlock", "lockdiscovery", "quota-used-bytes", "quota-available-bytes",
    ]

    static func propResponse(
        _ item: FileRecord, names: [String], wanted: PropfindBody, user: UserRecord?, dead: [DeadProperty], locks: [DAVLock]
    ) -> String {
        var found: [String] = []
        var missing: [String] = []
        func value(_ name: String) -> String? {
            switch name {
            case "resourcetype": return item.isFolder ? "<D:collection/>" : ""
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
            for name in liveProperties where value(name) != nil { found.append("<D:\(name)/>") }
            found += dead.map { DAVXML.element($0.namespace, $0.name, value: "") }
        case .prop(let properties):
            for property in properties {
                if property.namespace == "DAV:", let value = value(property.name) {
                    found.append(DAVXML.element("DAV:", property.name, value: value))
                } else if property.namespace == ownCloudNamespace, property.name == "fileid" {
                    found.append(DAVXML.element(ownCloudNamespace, "fileid", value: xmlEscape(item.id)))
                } else if let stored = dead.first(where: { $0.namespace == property.namespace && $0.name == property.name }) {
                    found.append(DAVXML.element(stored.namespace, stored.name, value: stored.value))
                } else {
                    missing.append(DAVXML.element(property.namespace, property.name, value: ""))
                }
            }
        }
        var xml = "<D:response><D:href>\(xmlEscape(href(names, folder: item.isFolder)))</D:href>"
        if !found.isEmpty || missing.isEmpty {
            xml += "<D:propstat><D:prop>\(found.joined())</D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat>"
        }
        if !missing.isEmpty {
            xml += "<D:propstat><D:prop>\(missing.joined())</D:prop><D:status>HTTP/1.1 404 Not Found</D:status></D:propstat>"
        }
        return xml + "</D:response>\n"
    }

    /// Sets and removes dead properties, all or nothing: a live (protected) property in the request is 403 and
    /// every other one 424, and nothing is changed.
    func proppatch(_ me: Identity, _ names: [String]) async throws -> Response {
        let body = try await request.body.collect(upTo: 1 << 20)
        let updates = try PropertyUpdate.parse(Data(buffer: body))
        let item = try await require(me, names)
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
            try await drive.store.patchDeadProperties(userId: me.userId, fileId: item.id, set: set, remove: remove)
            statuses = updates.map { ($0.property, "HTTP/1.1 200 OK") }
        } else {
            statuses = updates.map { update in
                let isProtected = protected.contains { $0.property == update.property }
                return (update.property, isProtected ? "HTTP/1.1 403 Forbidden" : "HTTP/1.1 424 Failed Dependency")
            }
        }
        var xml = "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<D:multistatus xmlns:D=\"DAV:\">\n"
        xml += "<D:response><D:href>\(Self.xmlEscape(Self.href(names, folder: item.isFolder)))</D:href>"
        for (property, status) in statuses {
            xml += "<D:propstat><D:prop>\(DAVXML.element(property.namespace, property.name, value: ""))</D:prop><D:status>\(status)</D:status></D:propstat>"
        }
        xml += "</D:response>\n</D:multistatus>\n"
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

    // MARK: Writing

    /// The body becomes a new file, or a new revision of the file there (history keeps the old one).
    func put(_ me: Identity, _ names: [String]) async throws -> Response {
        guard let name = names.last else { throw DAVError(.methodNotAllowed, "The root is a folder; PUT a file into it.") }
        if request.headers[.contentRange] != nil {
            throw DAVError(.badRequest, "Partial PUT (Content-Range) is not supported; send the whole file.")
        }
        let existing = try await resolve(me, names)
        if let existing, existing.isFolder { throw DAVError(.methodNotAllowed, "'\(name)' is a folder; a file cannot replace it.") }
        try checkPreconditions(existing)
        let parent = try await parentFolder(me, of: names)
        try await checkLocks(me, names: names, targets: [(Self.lockPath(names), false)])
        let declared = try UploadController.admitBody(request, drive: drive)
        let mimeType = try FilesController.validContentMimeType(UploadController.sentType(request) ?? existing?.mimeType ?? MimeType.guess(forName: name))
        // If-Match goes to the commit too: a version that lands between the check above and the commit is a 412.
        let ifMatch = request.headers[.ifMatch].flatMap { $0.trimmingCharacters(in: .whitespaces) == "*" ? nil : $0 }
        let target: ContentTarget = existing.map { .existing(fileId: $0.id, ifMatch: ifMatch) }
            ?? .new(parentId: parent.id, name: try FilesController.validName(name), policy: .fail)
        let mtime = try clientModificationTime()
        var content = try await UploadController.receiveBody(request, declared: declared, drive: drive, userId: me.userId, mimeType: mimeType)
        var headers: HTTPFields = [.contentLength: "0"]
        if let mtime {
            content.modifiedAt = mtime
            headers[.init("X-OC-MTime")!] = "accepted"
        }
        let file = try await drive.store.commitContent(userId: me.userId, target: target, content: content, now: drive.now)
        headers[.eTag] = "\"\(file.etag)\""
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
            throw DAVError(.forbidden, "Depth: infinity is not served; walk the tree with Depth: 1.", condition: "<D:propfind-finite-depth/>")
        }
        return depth
    }

    func mkcol(_ me: Identity, _ names: [String]) async throws -> Response {
        guard let name = names.last else { throw DAVError(.methodNotAllowed, "The root exists.") }
        let body = try await request.body.collect(upTo: 1024)
        guard body.readableBytes == 0 else { throw DAVError(.unsupportedMediaType, "MKCOL takes no body.") }
        if try await resolve(me, names) != nil { throw DAVError(.methodNotAllowed, "'\(name)' exists already.") }
        let parent = try await parentFolder(me, of: names)
        try await checkLocks(me, names: names, targets: [(Self.lockPath(names), false)])
        _ = try await drive.store.create(
            userId: me.userId, parentId: parent.id, name: try FilesController.validName(name), mimeType: folderMimeType, policy: .fail,
            requestId: nil, now: drive.now)
        return Response(status: .created, headers: [.contentLength: "0"])
    }

    /// To the trash (restorable there and in `/v1/trash`), the whole tree for a folder.
    func delete(_ me: Identity, _ names: [String]) async throws -> Response {
        guard !names.isEmpty else { throw DAVError(.forbidden, "The root folder cannot be deleted.") }
        if request.uri.path.contains("#") { throw DAVError(.badRequest, "A fragment is not part of a path.") }
        let item = try await require(me, names)
        try checkPreconditions(item)
        let locks = try await checkLocks(me, names: names, targets: [(Self.lockPath(names), true)])
        _ = try await drive.store.trash(userId: me.userId, fileId: item.id, now: drive.now, by: drive.deleter(me))
        try await releaseLocks(me, inside: Self.lockPath(names), from: locks)
        return Response(status: .noContent)
    }

    func moveOrCopy(_ me: Identity, _ names: [String], copy: Bool) async throws -> Response {
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
        let source = try await require(me, names)
        try checkPreconditions(source)
        let parent = try await parentFolder(me, of: target)
        let newName = try FilesController.validName(target[target.count - 1])
        let existing = try await resolve(me, target)
        if existing != nil && !overwrite {
            throw DAVError(.preconditionFailed, "'/\(target.joined(separator: "/"))' exists and Overwrite is F.")
        }
        let locks = try await checkLocks(
            me, names: names, targets: (copy ? [] : [(Self.lockPath(names), true)]) + [(Self.lockPath(target), true)])
        if copy {
            let depth = request.headers[.init("Depth")!]?.trimmingCharacters(in: .whitespaces).lowercased() ?? "infinity"
            guard depth == "0" || depth == "infinity" else { throw DAVError(.badRequest, "COPY takes Depth 0 or infinity.") }
            if let existing, existing.isFolder || source.isFolder {
                _ = try await drive.store.trash(userId: me.userId, fileId: existing.id, now: drive.now, by: drive.deleter(me))
                try await copyItem(me, source, into: parent, name: newName, over: nil, deep: depth == "infinity")
            } else {
                try await copyItem(me, source, into: parent, name: newName, over: existing, deep: depth == "infinity")
            }
        } else {
            if let existing { _ = try await drive.store.trash(userId: me.userId, fileId: existing.id, now: drive.now, by: drive.deleter(me)) }
            _ = try await drive.store.update(
                userId: me.userId, fileId: source.id, name: newName, parentId: parent.id, ifMatch: nil, now: drive.now)
            // Locks stay with paths, not items: the source's go (RFC 4918 §9.9.4).
            try await releaseLocks(me, inside: Self.lockPath(names), from: locks)
        }
        return Response(status: existing == nil ? .created : .noContent, headers: [.contentLength: "0"])
    }

    /// A copy shares the source's blocks (nothing is read or written but metadata). Copying a file onto a file
    /// makes a new revision of the destination, so its history stays.
    /// Dead properties go with the copy (RFC 4918 §9.8.2).
    func copyItem(_ me: Identity, _ source: FileRecord, into parent: FileRecord, name: String, over existing: FileRecord?, deep: Bool) async throws {
        let copied = try await copyOne(me, source, into: parent, name: name, over: existing)
        if let properties = try await drive.store.deadProperties(userId: me.userId, fileIds: [source.id])[source.id], !properties.isEmpty {
            try await drive.store.patchDeadProperties(userId: me.userId, fileId: copied.id, set: properties, remove: [])
        }
        guard source.isFolder, deep else { return }
        for child in try await allChildren(me, of: source) {
            try await copyItem(me, child, into: copied, name: child.name, over: nil, deep: true)
        }
    }

    func copyOne(_ me: Identity, _ source: FileRecord, into parent: FileRecord, name: String, over existing: FileRecord?) async throws -> FileRecord {
        if source.isFolder {
            return try await drive.store.create(
                userId: me.userId, parentId: parent.id, name: name, mimeType: folderMimeType, policy: .fail, requestId: nil, now: drive.now
            ).file
        }
        guard let revisionId = source.headRevisionId else {
            return try await drive.store.create(
                userId: me.userId, parentId: parent.id, name: name, mimeType: source.mimeType, policy: .fail, requestId: nil, now: drive.now
            ).file
        }
        let (revision, blocks) = try await drive.store.revisionWithBlocks(userId: me.userId, revisionId: revisionId)
        let content = StagedContent(
            blocks: blocks.map { StagedBlock(ref: BlockRef(hash: $0.hash, size: $0.size), path: "", data: $0.inline) },
            checksum: revision.checksum, size: revision.size, mimeType: revision.mimeType)
        let target: ContentTarget = existing.map { .existing(fileId: $0.id, ifMatch: nil) } ?? .new(parentId: parent.id, name: name, policy: .fail)
        return try await drive.store.commitStoredContent(userId: me.userId, target: target, content: content, now: drive.now)
    }
}

/// What a PROPFIND asks for: everything, the names, or the listed properties.
enum PropfindBody: Equatable {
    case allprop
    case propname
    case prop([DeadProperty])

    /// An empty body is `allprop`; anything else must be a well-formed `DAV:propfind` (400 otherwise).
    static func parse(_ data: Data) throws -> PropfindBody {
        guard data.contains(where: { !($0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09) }) else { return .allprop }
        let root = try DAVXML.parse(data)
        guard root.namespace == "DAV:", root.name == "propfind" else { throw DAVError(.badRequest, "The body must be a DAV:propfind element.") }
        for child in root.children where child.namespace == "DAV:" {
            switch child.name {
            case "allprop": return .allprop
            case "propname": return .propname
            case "prop": return .prop(child.children.map { DeadProperty(namespace: $0.namespace, name: $0.name) })
            default: continue
            }
        }
        throw DAVError(.badRequest, "A DAV:propfind names allprop, propname or prop.")
    }
}

/// A PROPPATCH body: sets and removes, in document order.
enum PropertyUpdate {
    case set(DeadProperty)
    case remove(DeadProperty)

    var property: DeadProperty {
        switch self {
        case .set(let property), .remove(let property): property
        }
    }

    static func parse(_ data: Data) throws -> [PropertyUpdate] {
        let root = try DAVXML.parse(data)
        guard root.namespace == "DAV:", root.name == "propertyupdate" else {
            throw DAVError(.badRequest, "The body must be a DAV:propertyupdate element.")
        }
        var updates: [PropertyUpdate] = []
        for action in root.children where action.namespace == "DAV:" && (action.name == "set" || action.name == "remove") {
            for prop in action.children where prop.namespace == "DAV:" && prop.name == "prop" {
                for property in prop.children {
                    let dead = DeadProperty(namespace: property.namespace, name: property.name, value: property.innerXML)
                    updates.append(action.name == "set" ? .set(dead) : .remove(dead))
                }
            }
        }
        guard !updates.isEmpty else { throw DAVError(.badRequest, "The DAV:propertyupdate sets or removes nothing.") }
        return updates
    }
}

/// A small namespace-aware XML tree for request bodies (a megabyte at most), with each element's content kept
/// as XML again so a dead property's value comes back as it was given (nested elements, namespaces, Unicode).
enum DAVXML {
    final class Element {
        let namespace: String
        let name: String
        var children: [Element] = []
        /// The element's content (text and child elements), serialized with each element's namespace on it.
        var innerXML = ""

        init(namespace: String, name: String) {
            self.namespace = namespace
            self.name = name
        }
    }

    static func parse(_ data: Data) throws -> Element {
        let reader = Reader()
        let parser = XMLParser(data: data)
        parser.shouldProcessNamespaces = true
        parser.shouldReportNamespacePrefixes = true
        parser.delegate = reader
        guard parser.parse(), !reader.invalid, let root = reader.root else {
            throw DAVError(.badRequest, "The body is not well-formed XML with valid namespace declarations.")
        }
        return root
    }

    /// `<name xmlns="namespace">value</name>` (or `<D:name>` for `DAV:`).
    static func element(_ namespace: String, _ name: String, value: String) -> String {
        let open = namespace == "DAV:" ? "D:\(name)" : "\(name) xmlns=\"\(DAVRequest.xmlEscape(namespace))\""
        let close = namespace == "DAV:" ? "D:\(name)" : name
        return value.isEmpty ? "<\(open)/>" : "<\(open)>\(value)</\(close)>"
    }

    private final class Reader: NSObject, XMLParserDelegate {
        var stack: [Element] = []
        var root: Element?
        var invalid = false

        func parser(_ parser: XMLParser, didStartMappingPrefix prefix: String, toURI namespaceURI: String) {
            // "xmlns:p=''" is not allowed by Namespaces in XML 1.0 (litmus checks it is refused).
            if !prefix.isEmpty && namespaceURI.isEmpty {
                invalid = true
                parser.abortParsing()
            }
        }

        func parser(_ parser: XMLParser, didStartElement name: String, namespaceURI: String?, qualifiedName: String?, attributes: [String: String] = [:]) {
            // A prefixed name with no namespace: "xmlns:p=''" (not all parsers report the mapping itself).
            if let qualifiedName, qualifiedName.contains(":"), (namespaceURI ?? "").isEmpty {
                invalid = true
                parser.abortParsing()
                return
            }
            let element = Element(namespace: namespaceURI ?? "", name: name)
            stack.last?.children.append(element)
            if stack.isEmpty { root = element }
            // Ancestors below the property level keep this element in their content.
            let opening = "<\(name) xmlns=\"\(DAVRequest.xmlEscape(namespaceURI ?? ""))\">"
            for ancestor in stack { ancestor.innerXML += opening }
            stack.append(element)
        }

        func parser(_ parser: XMLParser, didEndElement name: String, namespaceURI: String?, qualifiedName: String?) {
            _ = stack.popLast()
            for ancestor in stack { ancestor.innerXML += "</\(name)>" }
        }

        func parser(_ parser: XMLParser, foundCharacters string: String) {
            let escaped = DAVRequest.xmlEscape(string)
            for element in stack { element.innerXML += escaped }
        }

        func parser(_ parser: XMLParser, foundCDATA block: Data) {
            let escaped = DAVRequest.xmlEscape(String(decoding: block, as: UTF8.self))
            for element in stack { element.innerXML += escaped }
        }
    }
}
