import AsyncHTTPClient
import Foundation
import NIOCore
import NIOFoundationCompat
import NIOHTTP1
import NimbusAPI
import NimbusS3

/// A folder on a WebDAV server as the remote (Nextcloud, ownCloud, Box, Apache `mod_dav`, a NAS, `rclone serve
/// webdav`): RFC 4918 over async-http-client, Basic auth (an app password) over HTTPS or to this machine.
///
/// Items are named by their path below the folder, as with ``LocalFolderProvider``. A file's revision is its ETag
/// (or, from a server that gives none, its modification time and size). WebDAV has no SHA-256: the provider
/// remembers the checksum of what it sent or fetched, by ETag (`ChecksumMemory`), and otherwise reports none
/// (the engine hashes such a file once when it must compare it). No change feed: the engine lists, one
/// `PROPFIND Depth: 1` per folder. Writes go to a hidden `.nimbus-partial-…` file in the same folder, checked
/// against the checksum, then `MOVE`d into place (`Overwrite: F` for a new file, so nothing that appeared meanwhile
/// is replaced; a new version is compared with its base just before and sent with an `If` header naming the
/// target's ETag, which servers that evaluate it turn into an atomic check), so no half file is ever visible under
/// an item's name. An interrupted upload starts over (its progress restarts from zero) — unless the server takes
/// Nextcloud's chunked uploads (see `WebDAVProvider+Chunked`): then a big file goes in chunks and a restart sends only
/// the chunks not there yet.
public final class WebDAVProvider: QuotaProvider, UploadsEachInBatches, HashesWhileSending {
    /// The remote's root folder, ending with `/`.
    public let url: URL
    let basePath: String
    /// What this provider's uploads taught it about the server's ETags.
    @_spi(Testing) public let etagTrust = LockedBox(ETagTrust())
    /// `url` as text, ending in `/`: every request's address starts with it.
    let rootAddress: String
    let authorization: String?
    let http: HTTPClient
    let checksums: ChecksumMemory
    static let partialPrefix = PartialUploads.prefix
    /// Where the checksum memory keeps what is known by the server's file id (no path starts with it).
    static let fileIdKey = "#fileid:"
    /// Marks a revision made of the modification time and size (the server gave no ETag).
    static let syntheticPrefix = "mtime:"

    /// The root's `oc:fileid` as ``root()`` last saw it (servers that give one: Nextcloud, ownCloud, Nimbus); nil where
    /// the server answers none.
    let rootFileId = LockedBox<String?>(nil)
    /// Whether collection ETags propagate here (learnt from the root's `PROPFIND`: the server answers ownCloud's
    /// `fileid`, as Nextcloud, ownCloud and Nimbus do, whose collection ETags change with anything beneath them).
    var propagatesETags: Bool { rootFileId.withLock { $0 } != nil }

    /// Nextcloud's uploads folder (`…/dav/uploads/USER/`) when the URL is in its layout (`…/dav/files/USER/…`).
    let uploadsAddress: String?
    /// Whether the server answered at ``uploadsAddress`` (asked before the first big upload); nil: not asked yet.
    let chunkedUploads = LockedBox<Bool?>(nil)
    /// Files above this go in chunks of this size where chunked uploads are taken (Nextcloud's default chunk).
    let chunkSize: Int64
    /// How long a streamed upload may go without the server taking another byte before it is given up as stalled
    /// (a server that hangs, a connection that died without a word): as rclone's `--timeout`, 5 minutes. The wait for
    /// the answer once everything is sent is not bounded by it (a server may take long to put a big file in place).
    let stallLimit: Duration
    /// How small new files go (see `WebDAVProvider+Creates`), probed once.
    let smallCreatesProbe = LockedBox<Task<SmallCreates, Never>?>(nil)
    /// A folder's `MOVE` runs alone (see ``RequestGate``); none is begun while a streamed upload runs (see
    /// ``FillsAndStreams``).
    let gate = RequestGate()
    let fillsAndStreams = FillsAndStreams()
    /// The fewest files a new folder takes along (see ``fillMinimum``; a test sets it lower).
    @_spi(Testing) public let fewestFilled = LockedBox(5)
    /// New folders made with their files under a hidden name (for tests).
    @_spi(Testing) public let fillsDone = LockedBox(0)
    /// Chunks sent by chunked uploads (for tests: a resumed upload sends only what is missing).
    @_spi(Testing) public let chunksSent = LockedBox(0)

    /// Idempotent creations, quota, batches, new folders filled, big new files hashed as they go; tree versions where
    /// the server's folder ETags propagate (learnt from the root's listing), resumable uploads where it takes
    /// Nextcloud's chunked uploads, upload answers as listed once three have proven to be what a listing shows.
    public var features: ProviderFeatures {
        var features = ProviderFeatures(
            idempotentCreate: true, resumableUploads: chunkedUploads.withLock({ $0 }) == true, treeVersions: propagatesETags,
            answersAsListed: answersAsListed, rootIdentity: rootIdentity)
        features.quota = self
        features.batchUpload = self
        features.newFolderFilling = self
        features.unhashedUploads = self
        return features
    }

    /// The folder at `url` of a WebDAV server as a remote.
    ///
    /// - Parameters:
    ///   - url: the folder on the server (`https://cloud.example.com/remote.php/dav/files/ana/Backup`); see
    ///     ``check(url:username:)``, which an app calls first.
    ///   - username: the user name for Basic auth (nil: no authentication).
    ///   - password: its password (an app password on Nextcloud and Nimbus).
    ///   - state: where the provider keeps what it learns (checksums by ETag, chunked uploads in progress).
    ///   - http: the HTTP client.
    ///   - chunkSize: a file bigger than this goes in chunks of this size to a server in Nextcloud's layout that takes
    ///     its chunked uploads.
    public convenience init(
        url: URL, username: String?, password: String?, state: any ProviderStateStore, http: HTTPClient = .storage, chunkSize: Int64 = 10 << 20
    ) {
        let authorization = username.map { "Basic " + Data("\($0):\(password ?? "")".utf8).base64EncodedString() }
        self.init(url: url, authorization: authorization, state: state, http: http, chunkSize: chunkSize)
    }

    init(url: URL, authorization: String?, state: any ProviderStateStore, http: HTTPClient, chunkSize: Int64, stallLimit: Duration = .seconds(300)) {
        var text = url.absoluteString
        if !text.hasSuffix("/") { text += "/" }
        self.url = URL(string: text) ?? url
        rootAddress = self.url.absoluteString
        let path = self.url.path(percentEncoded: false)
        basePath = path.hasSuffix("/") ? path : path + "/"
        self.authorization = authorization
        self.http = http
        checksums = ChecksumMemory(state: state, prefix: "dav.sha256.")
        self.chunkSize = max(1, chunkSize)
        self.stallLimit = stallLimit
        uploadsAddress = Self.nextcloudUploads(rootAddress)
    }

    /// A new provider on the same remote, as after a restart, with another ``stallLimit`` if given (for tests).
    @_spi(Testing) public func restarted(state: any ProviderStateStore, stallLimit: Duration? = nil) -> WebDAVProvider {
        WebDAVProvider(
            url: url, authorization: authorization, state: state, http: http, chunkSize: chunkSize, stallLimit: stallLimit ?? self.stallLimit)
    }

    /// A provider of the folder `name` in this one's root (for tests that delete and make again a pair's root).
    @_spi(Testing) public func below(_ name: String, state: any ProviderStateStore) -> WebDAVProvider {
        WebDAVProvider(url: url.appending(path: name + "/"), authorization: authorization, state: state, http: http, chunkSize: chunkSize, stallLimit: stallLimit)
    }

    /// Refuses what cannot be a WebDAV folder's URL, and a password sent over plain `http://` to another machine
    /// (it would cross the network readable).
    public static func check(url: URL, username: String?) throws {
        guard let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https", url.host != nil else {
            throw ProviderError.invalid("\(url.absoluteString) is not an http(s):// URL.")
        }
        if username != nil, scheme == "http", !url.isLoopback {
            throw ProviderError.invalid("Refusing to send a password over plain http:// to \(url.host ?? ""); use https://.")
        }
    }

    // MARK: Addresses

    /// The address of `id` (`folder`: with a trailing slash, as servers want for collections).
    func address(_ id: String, folder: Bool = false) -> String {
        if id == ProviderPath.root { return rootAddress }
        return rootAddress + SigV4Signer.encode(id, slash: false) + (folder ? "/" : "")
    }

    /// The id an `href` of a multistatus answer names (nil: outside the root). Servers send a path
    /// (`/dav/a%20b.txt`, most of them) or a whole URL.
    func id(ofHref href: String) -> String? {
        var path = href
        if !href.hasPrefix("/"), let parsed = URL(string: href), parsed.scheme != nil { path = parsed.path(percentEncoded: true) }
        path = SigV4Signer.decode(path) ?? path
        if !path.hasSuffix("/") { path += "/" }
        guard path.hasPrefix(basePath) else { return nil }
        var relative = path.dropFirst(basePath.count)
        if relative.contains("//") || relative.hasPrefix("/") {
            // Doubled slashes from some servers: normalized (rare; the common case below does not split the path).
            relative = Substring(relative.split(separator: "/").joined(separator: "/") + "/")
        }
        if relative.hasSuffix("/") { relative = relative.dropLast() }
        return relative.isEmpty ? ProviderPath.root : String(relative)
    }

    // MARK: Requests

    func request(_ method: String, _ address: String, headers: [(String, String)] = [], body: HTTPClientRequest.Body? = nil) -> HTTPClientRequest {
        var request = HTTPClientRequest(url: address)
        request.method = HTTPMethod(rawValue: method)
        if let authorization { request.headers.add(name: "Authorization", value: authorization) }
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let body { request.body = body }
        return request
    }

    func execute(_ request: HTTPClientRequest, timeout: TimeAmount = .seconds(300)) async throws -> HTTPClientResponse {
        do {
            return try await http.execute(request, timeout: timeout)
        } catch let error as HTTPClientError where error == .remoteConnectionClosed && Self.repeatable.contains(request.method.rawValue) {
            // A kept-alive connection the server had just closed (cheroot does under load): once more, on a new one.
            // Only requests that can be repeated as they are (not MOVE, not a streamed PUT).
            do { return try await http.execute(request, timeout: timeout) } catch { throw ProviderError.network("\(error)") }
        } catch {
            throw ProviderError.network("\(error)")
        }
    }

    static let repeatable: Set<String> = ["GET", "HEAD", "PROPFIND", "MKCOL", "DELETE"]

    /// A short request whose body is read whole; a status outside 2xx is thrown as what it means (see ``failure``).
    func send(
        _ method: String, _ address: String, headers: [(String, String)] = [], body: String? = nil, timeout: TimeAmount = .seconds(300)
    ) async throws -> (HTTPClientResponse, Data) {
        var headers = headers
        var requestBody: HTTPClientRequest.Body?
        if let body {
            headers.append(("Content-Type", "application/xml; charset=utf-8"))
            requestBody = .bytes(ByteBuffer(string: body))
        }
        return try await answered(request(method, address, headers: headers, body: requestBody), timeout: timeout)
    }

    /// A request's answer, its body read whole. A folder's `MOVE` runs alone, any other request until its body is read
    /// (a `PROPFIND`'s answer is written as the server walks the folder): see ``RequestGate``.
    func answered(_ request: HTTPClientRequest, timeout: TimeAmount) async throws -> (HTTPClientResponse, Data) {
        let alone = request.method == .MOVE && request.url.hasSuffix("/")
        await gate.enter(exclusive: alone)
        defer { gate.leave(exclusive: alone) }
        let response = try await execute(request, timeout: timeout)
        let data: Data
        do { data = try await response.text() } catch { throw ProviderError.network("\(error)") }
        return (response, data)
    }

    /// What a refusal means. `409` is a missing parent folder for the writes that make something (RFC 4918).
    static func failure(_ status: Int, _ headers: HTTPHeaders, what: String) -> ProviderError {
        switch status {
        case 401: .unauthorized("the WebDAV server refused the user name or password")
        case 404, 409, 410: .notFound
        case 412: .versionConflict(current: nil)
        case 413: .tooLarge("The WebDAV server refused \(what) as too large.")
        case 423: .retryAfter(seconds: 5)
        case 429, 503: .retryAfter(seconds: headers.first(name: "retry-after").flatMap(Int.init))
        case 507: .quotaExceeded("Not enough space on the WebDAV server for \(what).")
        default: .server(status: status, code: .other("webdav_\(status)"), message: "The WebDAV server answered \(status) to \(what).")
        }
    }

    static let propfindBody = """
        <?xml version="1.0" encoding="utf-8"?>
        <d:propfind xmlns:d="DAV:"><d:prop><d:resourcetype/><d:getcontentlength/><d:getetag/><d:getlastmodified/><d:getcontenttype/>\
        </d:prop></d:propfind>
        """

    /// Where the root answered ownCloud's `fileid` (Nextcloud, ownCloud, Nimbus), listings ask for it too: a file
    /// keeps it when moved, so the checksum known for it follows it to its new path (see ``item(_:folderETags:)``).
    /// (Not asked of other servers: a "not found" for it in each of 10,000 answers cost a no-op listing ~10 %.)
    static let propfindWithFileIdBody = """
        <?xml version="1.0" encoding="utf-8"?>
        <d:propfind xmlns:d="DAV:" xmlns:oc="http://owncloud.org/ns"><d:prop><d:resourcetype/><d:getcontentlength/><d:getetag/>\
        <d:getlastmodified/><d:getcontenttype/><oc:fileid/></d:prop></d:propfind>
        """

    /// The root's `PROPFIND` asks for ownCloud's `fileid` too: a server that has it propagates collection ETags.
    static let rootPropfindBody = """
        <?xml version="1.0" encoding="utf-8"?>
        <d:propfind xmlns:d="DAV:" xmlns:oc="http://owncloud.org/ns"><d:prop><d:resourcetype/><d:getetag/><d:getlastmodified/>\
        <oc:fileid/></d:prop></d:propfind>
        """

    /// `PROPFIND` of `id` (depth 0) or its children (depth 1, the folder itself included): each listed item.
    func propfind(_ id: String, depth: Int, folder: Bool) async throws -> [RemoteItem] {
        let folderETags = propagatesETags
        let tree = try await multistatus(id, depth: depth, folder: folder, body: folderETags ? Self.propfindWithFileIdBody : Self.propfindBody)
        return tree.all("response").compactMap { item($0, folderETags: folderETags) }
    }

    /// A `PROPFIND`'s multistatus.
    func multistatus(_ id: String, depth: Int, folder: Bool, body: String) async throws -> XMLTree {
        let (response, data) = try await send("PROPFIND", address(id, folder: folder), headers: [("Depth", "\(depth)")], body: body)
        let status = Int(response.status.code)
        guard status == 207 else {
            if (200..<300).contains(status) {
                throw ProviderError.server(status: status, code: .other("not_webdav"), message: "\(url.absoluteString) did not answer as a WebDAV server.")
            }
            throw Self.failure(status, response.headers, what: "listing \(id)")
        }
        guard let tree = XMLTree.parse(data), tree.name == "multistatus" else {
            throw ProviderError.server(status: status, code: .other("bad_multistatus"), message: "The WebDAV server's listing could not be read.")
        }
        return tree
    }

    /// The properties a `<response>` has (status 200), by name.
    static func properties(_ response: XMLTree) -> [String: XMLTree] {
        var properties: [String: XMLTree] = [:]
        for propstat in response.all("propstat") where (propstat.value("status") ?? "").contains(" 200") {
            for property in propstat.child("prop")?.children ?? [] { properties[property.name] = property }
        }
        return properties
    }

    /// One `<response>` of a multistatus as an item (nil: outside the root, or not found). A folder's revision is
    /// its ETag where those propagate (`folderETags`), else none.
    func item(_ response: XMLTree, folderETags: Bool) -> RemoteItem? {
        guard let href = response.value("href"), let id = id(ofHref: href) else { return nil }
        let properties = Self.properties(response)
        if properties.isEmpty { return nil }
        let isFolder = properties["resourcetype"]?.child("collection") != nil
        let name = ProviderPath.name(of: id)
        let modified = properties["getlastmodified"].flatMap { HTTPDate.parse(Self.trimmed($0.text)) }
            ?? Date(timeIntervalSince1970: 0)
        if isFolder {
            let tag = folderETags ? properties["getetag"].map { Self.unquoted($0.text) } : nil
            return RemoteItem(
                id: id, parentId: ProviderPath.parent(of: id), name: name, isFolder: true, revision: (tag?.isEmpty ?? true) ? nil : tag,
                modifiedAt: modified)
        }
        let size = Int64(Self.trimmed(properties["getcontentlength"]?.text ?? "")) ?? 0
        var revision = properties["getetag"].map { Self.unquoted($0.text) } ?? ""
        if revision.isEmpty { revision = Self.syntheticPrefix + "\(Int64(modified.timeIntervalSince1970 * 1000))-\(size)" }
        let type = properties["getcontenttype"].map { Self.trimmed($0.text) }
        var checksum = checksums.checksum(of: id, revision: revision)
        if let fileId = properties["fileid"].map({ Self.trimmed($0.text) }), !fileId.isEmpty {
            // The server's id of the file stays with it when it is moved (from its web UI, by another client): what
            // is known of this version follows it, so the engine sees a move (the same SHA-256) instead of a
            // deletion and a new file it would download again.
            let key = Self.fileIdKey + fileId
            if let checksum {
                if checksums.checksum(of: key, revision: revision) == nil { checksums.remember(checksum, of: key, revision: revision) }
            } else {
                checksum = checksums.checksum(of: key, revision: revision)
                if let checksum { checksums.remember(checksum, of: id, revision: revision) }
            }
        }
        return RemoteItem(
            id: id, parentId: ProviderPath.parent(of: id), name: name, isFolder: false, size: size, revision: revision,
            checksum: checksum, mimeType: (type?.isEmpty ?? true) ? MimeType.guess(forName: name) : type, modifiedAt: modified)
    }

    static func unquoted(_ etag: String) -> String {
        var value = Substring(trimmed(etag))
        if value.hasPrefix("W/") { value = value.dropFirst(2) }
        if value.hasPrefix("\"") { value = value.dropFirst() }
        if value.hasSuffix("\"") { value = value.dropLast() }
        return String(value)
    }

    /// Without spaces and line breaks around it (Foundation's `trimmingCharacters` was a tenth of a listing's CPU).
    static func trimmed(_ text: String) -> String {
        let scalars = text.unicodeScalars
        guard let first = scalars.firstIndex(where: { !$0.properties.isWhitespace }),
            let last = scalars.lastIndex(where: { !$0.properties.isWhitespace })
        else { return "" }
        if first == scalars.startIndex && last == scalars.index(before: scalars.endIndex) { return text }
        return String(scalars[first...last])
    }

    // MARK: Reading

    public func root() async throws -> RemoteItem {
        let tree: XMLTree
        do {
            tree = try await multistatus(ProviderPath.root, depth: 0, folder: true, body: Self.rootPropfindBody)
        } catch ProviderError.notFound {
            throw ProviderError.rootMissing("The folder \(url.absoluteString) is not on the WebDAV server (deleted, or never made).")
        }
        let response = tree.all("response").first { $0.value("href").flatMap(id(ofHref:)) == ProviderPath.root }
        let fileId = response.flatMap { Self.properties($0)["fileid"].map { Self.trimmed($0.text) } }
        let propagates = fileId != nil
        rootFileId.withLock { $0 = fileId }
        guard let response, let root = item(response, folderETags: propagates), root.isFolder else {
            throw ProviderError.notAFolder("\(url.absoluteString) is not a folder on the WebDAV server.")
        }
        if uploadsAddress != nil, chunkedUploads.withLock({ $0 }) == nil {
            _ = try? await chunkedUploadsFolder(for: .max)  // learnt once, so `features` says it
        }
        return RemoteItem(id: ProviderPath.root, parentId: nil, name: "", isFolder: true, revision: root.revision, modifiedAt: root.modifiedAt)
    }

    public func item(_ id: String) async throws -> RemoteItem {
        guard let found = try await propfind(id, depth: 0, folder: false).first(where: { $0.id == id }) else { throw ProviderError.notFound }
        return found
    }

    public func children(of folderId: String) async throws -> [RemoteItem] {
        let listed = try await propfind(folderId, depth: 1, folder: true)
        guard listed.contains(where: { $0.id == folderId && $0.isFolder }) else { throw ProviderError.notFound }
        for stale in listed where stale.id != folderId && PartialUploads.isStale(stale.name, modifiedAt: stale.modifiedAt) {
            // An upload given up a day ago (see PartialUploads), or the hidden folder of a new folder's files.
            _ = try? await send("DELETE", address(stale.id, folder: stale.isFolder))
        }
        return listed.filter { $0.id != folderId && $0.parentId == folderId && !$0.name.hasPrefix(Self.partialPrefix) }
            .sorted { $0.name < $1.name }
    }

    public func startCursor() async throws -> String {
        throw ProviderError.unsupported("WebDAV has no change feed; it is listed.")
    }

    public func changes(since cursor: String) async throws -> ChangePage {
        throw ProviderError.unsupported("WebDAV has no change feed; it is listed.")
    }

    /// Used and available space (RFC 4331), where the server reports them.
    public func quota() async throws -> (used: Int64, limit: Int64?) {
        let body = """
            <?xml version="1.0" encoding="utf-8"?>
            <d:propfind xmlns:d="DAV:"><d:prop><d:quota-available-bytes/><d:quota-used-bytes/></d:prop></d:propfind>
            """
        let (response, data) = try await send("PROPFIND", address(ProviderPath.root, folder: true), headers: [("Depth", "0")], body: body)
        guard Int(response.status.code) == 207, let tree = XMLTree.parse(data) else {
            throw Self.failure(Int(response.status.code), response.headers, what: "the quota")
        }
        var used: Int64 = 0
        var available: Int64?
        for propstat in tree.child("response")?.all("propstat") ?? [] where (propstat.value("status") ?? "").contains(" 200") {
            if let value = propstat.child("prop")?.value("quota-used-bytes").flatMap({ Int64($0.trimmingCharacters(in: .whitespaces)) }) { used = value }
            if let value = propstat.child("prop")?.value("quota-available-bytes").flatMap({ Int64($0.trimmingCharacters(in: .whitespaces)) }),
                value >= 0
            {
                available = value
            }
        }
        return (used, available.map { used + $0 })
    }

    // MARK: Writing

    public func createFolder(named name: String, in parentId: String, requestId: String) async throws -> RemoteItem {
        let id = ProviderPath.child(try ProviderPath.validated(name), in: parentId)
        let (response, _) = try await send("MKCOL", address(id, folder: true))
        let status = Int(response.status.code)
        if (200..<300).contains(status) { return try await item(id) }
        if status == 405 || status == 301 {
            // Something holds the name: a folder (what a lost answer made, or the same folder made elsewhere) is this one.
            let existing = try await item(id)
            guard existing.isFolder else { throw ProviderError.nameTaken(existing: id) }
            return existing
        }
        throw Self.failure(status, response.headers, what: "making the folder \(name)")
    }

    public func upload(
        _ source: UploadSource, to target: UploadTarget, requestId: String, progress: @escaping @Sendable (Int64) -> Void
    ) async throws -> RemoteItem {
        let id: String
        let parentId: String
        switch target {
        case .new(let parent, let name, _):
            id = ProviderPath.child(try ProviderPath.validated(name), in: parent)
            parentId = parent
        case .version(let fileId, let base):
            guard source.isHashed else { throw ProviderError.invalid("A new version must be hashed before it is sent.") }
            id = fileId
            parentId = ProviderPath.parent(of: fileId) ?? ProviderPath.root
            let current = try await item(id)
            if current.isFolder { throw ProviderError.notFound }
            if let base, current.revision != base {
                if try await holds(current, source.checksum, size: source.size) { return current }  // already these bytes (a retry)
                throw ProviderError.versionConflict(current: current)
            }
        }
        let temporary: String
        var putTag: String?
        var checksum = source.checksum
        if source.isHashed,
            let assembled = try await uploadInChunks(source, requestId: requestId, parentId: parentId, what: ProviderPath.name(of: id), progress: progress)
        {
            temporary = assembled
        } else {
            // Named after the request: a retry after a crash writes over what the crashed upload left.
            temporary = ProviderPath.child(PartialUploads.name(requestId: requestId, parentId: parentId), in: parentId)
            (putTag, checksum) = try await putWhole(source, at: temporary, what: ProviderPath.name(of: id), progress: progress)
        }
        var headers = [("Destination", address(id))]
        switch target {
        case .new:
            headers.append(("Overwrite", "F"))
        case .version(_, let base):
            headers.append(("Overwrite", "T"))
            if let base { headers.append(("If", "<\(address(id))> ([\"\(base)\"])")) }
        }
        var (moved, _) = try await send("MOVE", address(temporary), headers: headers)
        if Int(moved.status.code) == 412, case .version(_, let base?) = target, (try? await item(id))?.revision == base {
            // The target is still at its base: the server does not evaluate a tagged `If` on the destination (rclone
            // applies it to the source). The comparison just made is the check.
            (moved, _) = try await send("MOVE", address(temporary), headers: headers.filter { $0.0 != "If" })
        }
        let status = Int(moved.status.code)
        guard (200..<300).contains(status) else {
            _ = try? await send("DELETE", address(temporary))
            if status == 412, case .new = target {
                guard let existing = try await sameFile(at: id, checksum: checksum, size: source.size) else { throw ProviderError.nameTaken(existing: id) }
                return existing
            }
            if status == 412 { throw ProviderError.versionConflict(current: try? await item(id)) }
            throw Self.failure(status, moved.headers, what: "placing \(ProviderPath.name(of: id))")
        }
        return try await placed(id, parentId: parentId, size: source.size, putTag: putTag, checksum: checksum)
    }

    /// What holds a new file's name (its `MOVE` with `Overwrite: F` was refused) if it is this very content — a retry
    /// after a lost answer: then it is this file; nil: a folder, or other bytes (the name is taken).
    func sameFile(at id: String, checksum: String, size: Int64) async throws -> RemoteItem? {
        guard let existing = try? await item(id), !existing.isFolder, try await holds(existing, checksum, size: size) else { return nil }
        return existing
    }

    /// The file just put in place at `id`, its checksum remembered for its revision.
    func placed(_ id: String, parentId: String, size: Int64, putTag: String?, checksum: String) async throws -> RemoteItem {
        var stored: RemoteItem
        if let putTag, !putTag.isEmpty, etagTrust.withLock({ $0.trusted }) {
            // Saves a PROPFIND per upload: the ETag the PUT answered is the file's (checked on the first uploads).
            let name = ProviderPath.name(of: id)
            stored = RemoteItem(
                id: id, parentId: parentId, name: name, isFolder: false, size: size, revision: putTag,
                mimeType: MimeType.guess(forName: name), modifiedAt: Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down)))
        } else {
            stored = try await item(id)
            etagTrust.withLock { $0.learn(put: putTag, stored: stored.revision) }
        }
        checksums.remember(checksum, of: id, revision: stored.revision)
        stored.checksum = checksum
        return stored
    }

    /// New files from 8 MiB go unhashed: sent whole, hashed as they go (not where chunked uploads are taken — a chunked
    /// upload is found again after a restart by its checksum).
    public var unhashedMinimum: Int64? { Self.unhashedFrom }
    static let unhashedFrom: Int64 = 8 << 20

    public func takesUnhashed(size: Int64) async -> Bool {
        guard size > Self.inMemoryLimit else { return false }
        do { return try await chunkedUploadsFolder(for: size) == nil } catch { return false }
    }

    /// Sends `source` whole to `temporary` (checked against its checksum; an unhashed one is hashed as it goes and
    /// checked ``UploadSource/unchanged``); the ETag the server answered, if strong, and the checksum of what was sent.
    func putWhole(
        _ source: UploadSource, at temporary: String, what: String, progress: @escaping @Sendable (Int64) -> Void
    ) async throws -> (tag: String?, checksum: String) {
        // No `X-OC-Mtime` (the file's own time): rclone then answers the PUT with an ETag the file does not keep, so
        // every upload would need a PROPFIND to learn its revision — 1.3–1.5× the time for small files (measured).
        let headers = [("Content-Length", "\(source.size)"), ("Content-Type", "application/octet-stream")]
        let put: HTTPClientResponse
        var checksum = source.checksum
        if source.size <= Self.inMemoryLimit && source.isHashed {
            // A small file is read and checked whole before it goes (no stream and task per file).
            let bytes = try source.readChecked()
            // Bounded by the stall limit, not the day a streamed upload may take: a server that hangs would hold it.
            (put, _) = try await send(
                "PUT", address(temporary), headers: headers, stream: BandwidthLimits.body(bytes),
                timeout: TimeAmount(stallLimit))
            progress(source.size)
        } else {
            let body = HashingFileBody(source, progress: progress)
            let stream = try body.stream()
            await fillsAndStreams.beginStream()
            defer { fillsAndStreams.endStream() }
            do {
                (put, _) = try await cancellingWhenStalled(after: stallLimit, sent: { body.sent }, total: source.size) {
                    try await self.send("PUT", self.address(temporary), headers: headers, stream: .stream(stream, length: .known(source.size)))
                }
            } catch {
                // Cut off (the file shrank, the connection broke, the server stalled): what the server kept of it goes
                // (tried for a while only: a stalled server would hold it too; a retry writes over it anyway).
                _ = try? await send("DELETE", address(temporary), timeout: .seconds(30))
                throw error
            }
            if !(200..<300).contains(Int(put.status.code)) {
                // Refused before it took it all (a server busy with what a stalled request left): what it said, not
                // "the file changed".
                _ = try? await send("DELETE", address(temporary), timeout: .seconds(30))
                throw Self.failure(Int(put.status.code), put.headers, what: "sending \(what)")
            }
            let digest = body.digest
            guard digest.size == source.size, digest.checksum == source.checksum || !source.isHashed, !body.grew, source.unchanged?() != false else {
                _ = try? await send("DELETE", address(temporary))
                throw ProviderError.checksumMismatch
            }
            checksum = digest.checksum
        }
        guard (200..<300).contains(Int(put.status.code)) else {
            throw Self.failure(Int(put.status.code), put.headers, what: "sending \(what)")
        }
        return (Self.strongTag(put.headers), checksum)
    }

    /// The strong `ETag` an answer carries, unquoted (nil: none, or a weak one).
    static func strongTag(_ headers: HTTPHeaders) -> String? {
        headers.first(name: "ETag").flatMap { $0.hasPrefix("W/") ? nil : unquoted($0) }
    }

    /// Files up to this size are read whole and checked before they are sent.
    static let inMemoryLimit: Int64 = 1 << 20

    /// Whether the strong ETag a PUT answers is the one its file keeps once moved into place (rclone and Apache
    /// keep it; a server that makes a new one on MOVE must be asked with a PROPFIND after every upload). Learned from
    /// this provider's first uploads: three that agree and none that differs.
    @_spi(Testing) public struct ETagTrust: Sendable {
        public var agreed = 0
        /// Whether one upload's ETag was not the stored file's.
        public var differed = false
        /// Whether the answers can be taken as the listing's: three agreed, none differed.
        public var trusted: Bool { agreed >= 3 && !differed }

        mutating func learn(put: String?, stored: String?) {
            guard let put else { return }
            if put == stored { agreed += 1 } else { differed = true }
        }
    }

    /// Not where collection ETags propagate: there the listing after sending records each folder's new ETag, so the
    /// next round skips the unchanged subtrees (without it, the next no-op to Nimbus's `/dav/` listed every folder:
    /// 0.88–0.99 s instead of 0.38–0.40).
    var answersAsListed: Bool { etagTrust.withLock { $0.trusted } && !propagatesETags }

    /// A streamed request (an upload's body).
    func send(
        _ method: String, _ address: String, headers: [(String, String)], stream: HTTPClientRequest.Body, timeout: TimeAmount = .hours(24)
    ) async throws -> (HTTPClientResponse, Data) {
        try await answered(request(method, address, headers: headers, body: stream), timeout: timeout)
    }

    /// Whether a file there holds the `size` bytes whose SHA-256 is `checksum` (known, or learned by reading it when its
    /// size matches).
    func holds(_ existing: RemoteItem, _ checksum: String, size: Int64) async throws -> Bool {
        guard existing.size == size else { return false }
        if let known = existing.checksum { return known == checksum }
        let scratch = FileManager.default.temporaryDirectory.appending(path: "nimbus-dav-check-\(UUID.random().uuidString)")
        defer { try? FileManager.default.removeItem(at: scratch) }
        try await download(existing.id, revision: existing.revision, to: DownloadTarget(url: scratch)) { _ in }
        return checksums.checksum(of: existing.id, revision: existing.revision) == checksum
    }

    public func download(_ id: String, revision: String?, to destination: DownloadTarget, progress: @escaping @Sendable (Int64) -> Void) async throws {
        let output = try destination.open()
        defer { try? output.close() }
        let offset = Int64(try output.seekToEnd())
        var headers: [(String, String)] = []
        if offset > 0 { headers.append(("Range", "bytes=\(offset)-")) }
        if let revision, !revision.hasPrefix(Self.syntheticPrefix) { headers.append(("If-Match", "\"\(revision)\"")) }
        // (Until the answer's head: the body read after touches no folder there.)
        await gate.enter(exclusive: false)
        let response: HTTPClientResponse
        do {
            defer { gate.leave(exclusive: false) }
            response = try await execute(request("GET", address(id), headers: headers), timeout: .hours(24))
        }
        let status = Int(response.status.code)
        if status == 416 {
            // Nothing after what is here: complete already, or a different file (checked by the caller's checksum).
            _ = try? await response.text()
            return try finish(id, revision: revision, at: destination)
        }
        guard status == 200 || status == 206 else {
            _ = try? await response.text()
            if status == 412 { throw ProviderError.versionConflict(current: try? await item(id)) }
            throw Self.failure(status, response.headers, what: "fetching \(ProviderPath.name(of: id))")
        }
        if let revision, let etag = response.headers.first(name: "etag").map(Self.unquoted), !etag.isEmpty, etag != revision,
            !revision.hasPrefix(Self.syntheticPrefix)
        {
            throw ProviderError.versionConflict(current: try? await item(id))
        }
        var from = offset
        if status == 200 && offset > 0 {
            // The server sent the whole file: start over.
            try output.truncate(atOffset: 0)
            from = 0
        }
        do {
            try await appendBody(response, to: output, from: from, progress: progress)
        } catch {
            throw ProviderError.network("\(error)")
        }
        try finish(id, revision: revision, at: destination)
    }

    /// Remembers the checksum of a revision now fetched whole.
    func finish(_ id: String, revision: String?, at destination: DownloadTarget) throws {
        guard let revision, let (checksum, _) = try? destination.hash() else { return }
        checksums.remember(checksum, of: id, revision: revision)
    }

    public func move(_ id: String, to parentId: String, name: String) async throws -> RemoteItem {
        let destination = ProviderPath.child(try ProviderPath.validated(name), in: parentId)
        if destination == id { return try await item(id) }
        if parentId == id || parentId.hasPrefix(id + "/") {
            throw ProviderError.invalid("A folder cannot be moved into itself or one of its subfolders.")
        }
        let current = try await item(id)
        let (response, _) = try await send(
            "MOVE", address(id, folder: current.isFolder), headers: [("Destination", address(destination, folder: current.isFolder)), ("Overwrite", "F")])
        let status = Int(response.status.code)
        if status == 412 { throw ProviderError.nameTaken(existing: destination) }
        guard (200..<300).contains(status) else { throw Self.failure(status, response.headers, what: "moving \(ProviderPath.name(of: id))") }
        var moved = try await item(destination)
        if !moved.isFolder, let checksum = current.checksum {
            checksums.remember(checksum, of: destination, revision: moved.revision)
            moved.checksum = checksum
        }
        return moved
    }

    public func delete(_ id: String) async throws {
        guard id != ProviderPath.root else { throw ProviderError.invalid("The root cannot be deleted.") }
        let (response, _) = try await send("DELETE", address(id))
        let status = Int(response.status.code)
        guard (200..<300).contains(status) else { throw Self.failure(status, response.headers, what: "deleting \(ProviderPath.name(of: id))") }
        checksums.forget(id)
    }
}

extension WebDAVProvider {
    /// The root's `oc:fileid` (a folder made again at the same path has another); nil where the server gives none
    /// (``ProviderFeatures/rootIdentity``).
    var rootIdentity: String? { rootFileId.withLock { $0 }.flatMap { $0.isEmpty ? nil : $0 } }
}
