import AsyncHTTPClient
import Crypto
import Foundation
import NIOCore
import NIOFoundationCompat
import NimbusAPI
import NimbusS3

/// A prefix of an S3-compatible bucket as the remote (AWS, MinIO, Backblaze B2, Wasabi, SeaweedFS, Ceph), through
/// the same SigV4 client as the server's S3 blob store (`NimbusS3`).
///
/// Items are named by their path below the prefix; a folder is a key prefix ending in `/`, with or without a
/// zero-byte marker object (folders made here get `FOLDER/.nimbus-folder`, so empty folders exist; the console's
/// `FOLDER/` is read too). A file's revision is
/// its ETag; its SHA-256 travels with it as `x-amz-meta-sha256` (set on every upload from here, kept by copies),
/// read by `HEAD` once per ETag for files listed without it, and otherwise unknown (the engine hashes such a file
/// once when it must compare it). Files up to 16 MiB go in one `PUT`; bigger ones as multipart uploads whose id is
/// kept in the ``ProviderStateStore`` under the request id, so after a crash only missing parts are sent (found with
/// `ListParts`, each checked against its MD5). Writes send `If-None-Match: *` (new) or `If-Match: base` (a new
/// version) for stores that honour them, and compare with `HEAD` just before for those that do not. There is no
/// rename in S3: a move copies then deletes (a folder, each object under it; a retry after a crash goes on).
/// `SlowDown` and 503 are retried with backoff here (twice) and then handed to the engine's.
public final class S3Provider: TreeListingProvider, UploadsEachInBatches, ProbesFeatures {
    /// The client of the bucket.
    public let client: S3Client
    /// Key prefix of the remote's root: empty (the whole bucket) or ending in `/`.
    public let prefix: String
    let state: any ProviderStateStore
    let checksums: ChecksumMemory
    let singlePutLimit: Int64
    let partSize: Int64
    /// Parts sent by multipart uploads (for tests: a resumed upload sends only what is missing).
    @_spi(Testing) public let partsSent = LockedBox(0)
    /// Whether the store takes `If-None-Match`/`If-Match` on writes (until one is refused as not implemented).
    let conditionsWork = LockedBox(true)
    /// New files looked at on their own before their `PUT` (not answered by a batch's listing), for tests.
    @_spi(Testing) public let looksOnTheirOwn = LockedBox(0)
    /// Whether the store has been seen to refuse a second `If-None-Match: *` write of one key (``probeConditions()``,
    /// once per remote, kept in the state store): only then does a new file go up without looking first.
    @_spi(Testing) public let conditionsProven = LockedBox<Bool?>(nil)

    /// Idempotent creations, resumable (multipart) uploads, one flat listing of the tree, batches; conditional writes
    /// once the store has been proven to honour them (``probeConditions()``, the ``ProviderFeatures/probe``).
    public var features: ProviderFeatures {
        var features = ProviderFeatures(
            conditionalWrite: conditionsProven.withLock { $0 } == true, idempotentCreate: true, resumableUploads: true)
        features.treeListing = self
        features.batchUpload = self
        features.probe = self
        return features
    }

    /// The objects under `prefix` of `client`'s bucket as a remote. Files over `singlePutLimit` go in multipart
    /// uploads of `partSize` parts, kept in `state` so a restart resumes them.
    public init(client: S3Client, prefix: String, state: any ProviderStateStore, singlePutLimit: Int64 = 16 << 20, partSize: Int64 = 8 << 20) {
        self.client = client
        let parts = prefix.split(separator: "/").map(String.init)
        self.prefix = parts.isEmpty ? "" : parts.joined(separator: "/") + "/"
        self.state = state
        checksums = ChecksumMemory(state: state, prefix: "s3.sha256.")
        self.singlePutLimit = singlePutLimit
        self.partSize = max(5 << 20, partSize)
    }

    func key(_ id: String) -> String { prefix + id }
    func folderPrefix(_ id: String) -> String { id == ProviderPath.root ? prefix : prefix + id + "/" }

    /// The id of a key below the root.
    func id(ofKey key: String) -> String {
        let relative = key.dropFirst(prefix.count).split(separator: "/").joined(separator: "/")
        return relative.isEmpty ? ProviderPath.root : relative
    }

    // MARK: Calls

    /// One S3 call, retried twice with backoff when the store is busy (`SlowDown`, 503) or unreachable; failures
    /// are what they mean for the engine.
    func call<T: Sendable>(_ what: String, _ body: () async throws -> T) async throws -> T {
        var attempt = 0
        while true {
            do {
                return try await body()
            } catch let error as S3Error where error.isRetryable && attempt < 2 {
                attempt += 1
                let wait = Double(error.retryAfter ?? 0) + Double.random(in: 0...0.2) * Double(1 << attempt)
                try await Task.sleep(for: .milliseconds(Int64(min(wait, 5) * 1000)))
            } catch let error as S3Error {
                throw Self.failure(error, what: what)
            }
        }
    }

    /// A write sent with its condition (`true`) where the store takes conditions; one that answers a conditional
    /// write with 501 or 500 (`rclone serve s3` answers 500 "file already exists" to any `If-None-Match`) gets the
    /// same write without it from then on — the comparison made just before is the check.
    func conditionally<T: Sendable>(_ what: String, _ body: (Bool) async throws -> T) async throws -> T {
        if conditionsWork.withLock({ $0 }) {
            do {
                return try await body(true)
            } catch let error as S3Error where error.isNotImplemented {
                conditionsWork.withLock { $0 = false }
            } catch let error as S3Error where error.isPreconditionFailed {
                throw ProviderError.versionConflict(current: nil)
            } catch let error as S3Error where !error.isRetryable {
                throw Self.failure(error, what: what)
            } catch is S3Error {
            }
        }
        return try await call(what) { try await body(false) }
    }

    static func failure(_ error: S3Error, what: String) -> ProviderError {
        switch (error.status, error.code) {
        case (0, _): .network(error.message)
        case (_, "SlowDown"), (503, _), (429, _): .retryAfter(seconds: error.retryAfter)
        case (401, _), (403, "InvalidAccessKeyId"), (403, "SignatureDoesNotMatch"), (403, "ExpiredToken"), (403, "InvalidToken"):
            .unauthorized("the S3 store refused the access key (\(error.code ?? "\(error.status)"))")
        case (403, _): .unauthorized("the S3 store refused access to \(what) (\(error.code ?? "403")): check the key's permissions")
        case (404, _): .notFound
        case (412, _): .versionConflict(current: nil)
        case (_, "EntityTooLarge"): .tooLarge("The S3 store refused \(what) as too large.")
        case (_, "QuotaExceeded"): .quotaExceeded("The S3 store is out of space for \(what).")
        case (let status, let code) where status >= 500: .server(status: status, code: .other(code ?? "s3_\(status)"), message: error.message)
        default: .server(status: error.status, code: .other(error.code ?? "s3_\(error.status)"), message: "\(what): \(error.message)")
        }
    }

    // MARK: Reading

    public func root() async throws -> RemoteItem {
        let page: S3ListPage
        do {
            page = try await call("listing the root") { try await client.list(prefix: prefix, delimiter: "/", maxKeys: 1) }
        } catch ProviderError.notFound {
            throw ProviderError.rootMissing("The bucket \(client.bucket) is not there (deleted, or never made).")
        }
        if !prefix.isEmpty, page.objects.isEmpty, page.prefixes.isEmpty {
            throw ProviderError.rootMissing("The folder \(client.bucket)/\(prefix) is not there (deleted, or never made).")
        }
        return RemoteItem(id: ProviderPath.root, parentId: nil, name: "", isFolder: true)
    }

    /// Whether anything (a marker or an object) is under the folder's prefix — anything but `besides`: a look made
    /// beside a write into the folder must not take the object just written for the folder.
    func folderExists(_ id: String, besides: String? = nil) async throws -> Bool {
        if id == ProviderPath.root, prefix.isEmpty { return true }
        let page = try await call("looking for \(id)") {
            try await client.list(prefix: folderPrefix(id), delimiter: "/", maxKeys: besides == nil ? 1 : 2)
        }
        return page.objects.contains { $0.key != besides } || !page.prefixes.isEmpty
    }

    /// The marker object that makes a folder made here exist while it is empty: `FOLDER/.nimbus-folder`, not the
    /// console's `FOLDER/` (which stores over a file system, such as `rclone serve s3`, turn into a file named
    /// FOLDER). Both kinds are read as folders and hidden from listings.
    static let markerName = ".nimbus-folder"
    func marker(_ id: String) -> String { folderPrefix(id) + Self.markerName }

    func head(_ id: String) async throws -> S3Object? {
        guard id != ProviderPath.root else { return nil }
        return try await call("looking at \(id)") { try await client.head(key(id)) }
    }

    func file(_ id: String, _ object: S3Object) -> RemoteItem {
        let name = ProviderPath.name(of: id)
        var checksum = checksums.checksum(of: id, revision: object.etag)
        if let stored = object.metadata["sha256"], stored.count == 64 {
            checksum = stored
            checksums.remember(stored, of: id, revision: object.etag)
        }
        return RemoteItem(
            id: id, parentId: ProviderPath.parent(of: id), name: name, isFolder: false, size: object.size, revision: object.etag,
            checksum: checksum?.isEmpty == true ? nil : checksum, mimeType: MimeType.guess(forName: name),
            modifiedAt: object.modified ?? Date(timeIntervalSince1970: 0))
    }

    public func item(_ id: String) async throws -> RemoteItem {
        if id == ProviderPath.root { return try await root() }
        if let object = try await head(id) { return file(id, object) }
        guard try await folderExists(id) else { throw ProviderError.notFound }
        return RemoteItem(id: id, parentId: ProviderPath.parent(of: id), name: ProviderPath.name(of: id), isFolder: true)
    }

    public func children(of folderId: String) async throws -> [RemoteItem] {
        let folder = folderPrefix(folderId)
        var objects: [S3Object] = []
        var prefixes: [String] = []
        var token: String?
        repeat {
            let page = try await call("listing \(folderId)") { try await client.list(prefix: folder, delimiter: "/", continuation: token) }
            objects += page.objects
            prefixes += page.prefixes
            token = page.next
        } while token != nil
        if objects.isEmpty, prefixes.isEmpty, !(try await folderExists(folderId)) { throw ProviderError.notFound }
        var items: [RemoteItem] = prefixes.map { prefix in
            let id = id(ofKey: prefix)
            return RemoteItem(id: id, parentId: folderId, name: ProviderPath.name(of: id), isFolder: true)
        }
        for object in objects
        where object.key != folder && !object.key.hasSuffix("/") && object.key != folder + Self.markerName
            && !ProviderPath.name(of: object.key).hasPrefix(Self.probePrefix)
        {
            let id = id(ofKey: object.key)
            guard ProviderPath.parent(of: id) == folderId else { continue }
            items.append(file(id, object))
        }
        try await learnStoredChecksums(&items)
        return items.sorted { $0.name < $1.name }
    }

    /// The whole tree in one flat listing of the prefix (1,000 keys a request); folders are the paths of keys.
    public func listTree() async throws -> [RemoteItem] {
        let objects = try await call("listing the remote") { try await client.listAll(prefix: prefix) }
        var folders: Set<String> = []
        var items: [RemoteItem] = []
        for object in objects {
            let relative = String(object.key.dropFirst(prefix.count))
            var parts = relative.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
            let isMarker = relative.hasSuffix("/") || parts.last == Self.markerName
            if isMarker { parts.removeLast() }
            guard !parts.isEmpty, !parts.contains(where: \.isEmpty) else { continue }
            for depth in 1..<(parts.count + (isMarker ? 1 : 0)) where depth <= parts.count {
                folders.insert(parts[0..<depth].joined(separator: "/"))
            }
            if !isMarker, parts.last?.hasPrefix(Self.probePrefix) != true { items.append(file(parts.joined(separator: "/"), object)) }
        }
        let folderItems = folders.sorted().map { RemoteItem(id: $0, parentId: ProviderPath.parent(of: $0), name: ProviderPath.name(of: $0), isFolder: true) }
        // A key that is also a folder's path (`a` and `a/b`) cannot be both here: the folder wins.
        items.removeAll { folders.contains($0.id) }
        try await learnStoredChecksums(&items)
        // Parents first: by depth, then by path.
        return (folderItems + items).sorted {
            let (a, b) = ($0.id.split(separator: "/").count, $1.id.split(separator: "/").count)
            return a == b ? $0.id < $1.id : a < b
        }
    }

    /// Files listed without a known SHA-256 (put there by something else): read once per ETag with HEAD, a few at
    /// a time (what has none is remembered as unknown, so it is not asked again).
    func learnStoredChecksums(_ items: inout [RemoteItem]) async throws {
        let unknown = items.enumerated().filter { !$0.element.isFolder && checksums.checksum(of: $0.element.id, revision: $0.element.revision) == nil }
            .map { ($0.offset, $0.element.id) }
        for batch in stride(from: 0, to: unknown.count, by: 16).map({ Array(unknown[$0..<min($0 + 16, unknown.count)]) }) {
            let found = try await withThrowingTaskGroup(of: (Int, S3Object?).self) { group in
                for (index, id) in batch { group.addTask { (index, try await self.head(id)) } }
                return try await group.reduce(into: [(Int, S3Object?)]()) { $0.append($1) }
            }
            for (index, object) in found {
                guard let object else { continue }
                if object.metadata["sha256"] == nil { checksums.remember("", of: items[index].id, revision: object.etag) }
                items[index] = file(items[index].id, object)
            }
        }
    }

    public func startCursor() async throws -> String {
        throw ProviderError.unsupported("S3 has no change feed; it is listed.")
    }

    public func changes(since cursor: String) async throws -> ChangePage {
        throw ProviderError.unsupported("S3 has no change feed; it is listed.")
    }

    // MARK: Writing

    public func createFolder(named name: String, in parentId: String, requestId: String) async throws -> RemoteItem {
        let id = ProviderPath.child(try ProviderPath.validated(name), in: parentId)
        if try await head(id) != nil { throw ProviderError.nameTaken(existing: id) }
        guard try await folderExists(parentId) else { throw ProviderError.notFound }
        try await call("making the folder \(name)") { _ = try await client.put(marker(id), body: ByteBuffer()) }
        return RemoteItem(id: id, parentId: parentId, name: ProviderPath.name(of: id), isFolder: true)
    }

    public func upload(
        _ source: UploadSource, to target: UploadTarget, requestId: String, progress: @escaping @Sendable (Int64) -> Void
    ) async throws -> RemoteItem {
        try await upload(source, to: target, requestId: requestId, nothingThere: false, progress: progress)
    }

    /// Batches of up to 128 small files (the engine cuts them folder by folder): a folder of 100 new files is looked at
    /// with one listing, not four.
    public var batchLimits: (fileSize: Int64, files: Int, bytes: Int64) { (1 << 20, 128, 64 << 20) }

    /// A batch of new small files: on a store proven to refuse overwrites, each file's conditional `PUT` is its own
    /// check; on any other, one listing per folder of the batch looks under all its names at once, instead of a
    /// `HEAD` and a listing per file — a name with nothing under it is then one `PUT` (its folder looked at once a
    /// minute, `knownFolder(_:besides:)`); any other goes the usual way, looked at on its own.
    public func uploadBatch(_ files: [BatchFile]) async throws -> [Result<RemoteItem, ProviderError>] {
        let free = try await probeConditions() ? [] : try await freeNames(files)
        return try await uploadEach(files, width: 2) { file in
            let target = UploadTarget.new(parentId: file.parentId, name: file.name, mimeType: file.mimeType)
            return try await self.upload(file.source, to: target, requestId: file.requestId, nothingThere: free.contains(file.requestId)) { _ in }
        }
    }

    /// The request ids of the files under whose names there is nothing — no object, no folder — by one listing of
    /// each folder (ListObjectsV2 with a delimiter, under the keys' common prefix in bytes; one page: a name past its
    /// end is not answered).
    func freeNames(_ files: [BatchFile]) async throws -> Set<String> {
        var free: Set<String> = []
        for (parentId, group) in Dictionary(grouping: files, by: \.parentId) {
            let named = group.compactMap { file in (try? ProviderPath.validated(file.name)).map { (file, key(ProviderPath.child($0, in: parentId))) } }
            guard let first = named.first?.1 else { continue }
            var common = Array(first.utf8)
            for (_, key) in named.dropFirst() {
                common.removeSubrange(zip(common, key.utf8).prefix { $0 == $1 }.count...)
            }
            var listPrefix: String? = nil
            while listPrefix == nil, !common.isEmpty {  // cut at a whole character
                listPrefix = String(validating: common, as: UTF8.self)
                if listPrefix == nil { common.removeLast() }
            }
            let within = folderPrefix(parentId)
            let prefix = (listPrefix ?? "").utf8.count >= within.utf8.count ? listPrefix ?? within : within
            let page = try await call("looking in \(parentId == ProviderPath.root ? "/" : parentId)") {
                try await client.list(prefix: prefix, delimiter: "/", maxKeys: 1000)
            }
            // Compared as text (canonically equal names count as taken: looked at on their own).
            let taken = Set(page.objects.map(\.key)).union(page.prefixes.map { String($0.dropLast()) })
            // A truncated page answers only for keys up to where it ends (keys come in byte order).
            let end = page.next == nil ? nil : [page.objects.last?.key, page.prefixes.last].compactMap { $0 }.max { $0.utf8.lexicographicallyPrecedes($1.utf8) } ?? ""
            for (file, key) in named where !taken.contains(key) {
                if let end, !(key + "/").utf8.lexicographicallyPrecedes(end.utf8) { continue }
                free.insert(file.requestId)
            }
        }
        return free
    }

    func upload(
        _ source: UploadSource, to target: UploadTarget, requestId: String, nothingThere: Bool, progress: @escaping @Sendable (Int64) -> Void
    ) async throws -> RemoteItem {
        let id: String
        var base: String?
        let isNew: Bool
        let refusesOverwrite = if case .new = target, source.size <= singlePutLimit { try await probeConditions() } else { false }
        switch target {
        case .new(let parentId, let name, _) where refusesOverwrite:
            // A store that refuses to overwrite (proven): one conditional PUT is the check, the looks for a folder
            // under the name and for the parent go beside it.
            id = ProviderPath.child(try ProviderPath.validated(name), in: parentId)
            async let existingFolder = folderExists(id)
            async let parentThere = knownFolder(parentId, besides: key(id))
            let etag: String
            do {
                etag = try await putWhole(source, key: key(id), isNew: true, base: nil, conditionRequired: true, progress: progress)
            } catch ProviderError.versionConflict {
                _ = try? await existingFolder
                _ = try? await parentThere
                if let current = try await head(id), file(id, current).checksum == source.checksum { return file(id, current) }  // a retry
                throw ProviderError.nameTaken(existing: id)
            }
            let folderThere = try await existingFolder
            let parentOK = try await parentThere
            if folderThere || !parentOK {
                // Written here a moment ago under a name a folder holds, or into a folder gone meanwhile: taken back
                // (the condition made it ours), and the engine hears why.
                try? await call("taking back \(name)") { try await client.delete(key(id)) }
                if folderThere { throw ProviderError.nameTaken(existing: id) }
                throw ProviderError.notFound
            }
            return try await answer(id, etag: etag, source: source, look: etag.isEmpty)
        case .new(let parentId, let name, _) where nothingThere:
            // Nothing under the name a moment ago (the batch's listing): only the folder it goes in is looked at.
            id = ProviderPath.child(try ProviderPath.validated(name), in: parentId)
            isNew = true
            guard try await knownFolder(parentId) else { throw ProviderError.notFound }
        case .new(let parentId, let name, _):
            id = ProviderPath.child(try ProviderPath.validated(name), in: parentId)
            isNew = true
            looksOnTheirOwn.withLock { $0 += 1 }
            // The three looks at once: a file or a folder under the name, and the folder it goes in.
            async let fileThere = call("looking at \(name)") { try await client.exists(key(id)) }
            async let existingFolder = folderExists(id)
            async let parentThere = knownFolder(parentId)
            if try await fileThere, let existing = try await head(id) {
                let item = file(id, existing)
                if item.checksum == source.checksum { return item }  // a retry after a lost answer
                throw ProviderError.nameTaken(existing: id)
            }
            if try await existingFolder { throw ProviderError.nameTaken(existing: id) }
            guard try await parentThere else { throw ProviderError.notFound }
        case .version(let fileId, let baseRevision):
            id = fileId
            isNew = false
            guard let current = try await head(id) else { throw ProviderError.notFound }
            if let baseRevision, current.etag != baseRevision {
                let item = file(id, current)
                if item.checksum == source.checksum { return item }
                throw ProviderError.versionConflict(current: item)
            }
            base = baseRevision
        }
        let etag: String
        do {
            if source.size <= singlePutLimit {
                etag = try await putWhole(source, key: key(id), isNew: isNew, base: base, progress: progress)
            } else {
                etag = try await putInParts(source, key: key(id), requestId: requestId, isNew: isNew, base: base, progress: progress)
            }
        } catch ProviderError.versionConflict {
            // The store honoured the condition: something else was written meanwhile.
            let current = try await head(id)
            if isNew {
                if let current, file(id, current).checksum == source.checksum { return file(id, current) }
                throw ProviderError.nameTaken(existing: id)
            }
            throw ProviderError.versionConflict(current: current.map { file(id, $0) })
        }
        // A single PUT's answer names the object's ETag; a multipart join's answer may not be what HEAD says later
        // (rclone), so that one is looked at.
        return try await answer(id, etag: etag, source: source, look: etag.isEmpty || source.size > singlePutLimit)
    }

    /// The file just written, its checksum remembered against its ETag: the PUT's own, or, with `look` (a store that
    /// answered without one, or a multipart join), the one a `HEAD` gives.
    private func answer(_ id: String, etag: String, source: UploadSource, look: Bool) async throws -> RemoteItem {
        if look {
            guard let stored = try await head(id) else { throw ProviderError.notFound }
            checksums.remember(source.checksum, of: id, revision: stored.etag)
            return file(id, stored)
        }
        checksums.remember(source.checksum, of: id, revision: etag)
        return file(id, S3Object(key: key(id), size: source.size, etag: etag, metadata: ["sha256": source.checksum], modified: Date()))
    }

    /// Finds out whether this store refuses an `If-None-Match: *` write over an existing key: asked once per remote
    /// (a hidden probe object written twice, the second time with the condition, then deleted) and remembered in the
    /// state store. A store that ignores the header (AWS before 2024, some gateways) or refuses it (`rclone serve
    /// s3`) keeps the look just before each new file.
    public func probeFeatures() async throws { _ = try await probeConditions() }

    /// See ``probeFeatures()``: true when conditional writes are honoured.
    public func probeConditions() async throws -> Bool {
        if let known = conditionsProven.withLock({ $0 }) { return known }
        // The first uploads of a round come at once: one probe, the others wait for its answer.
        let probe = probing.withLock { running in
            if let running { return running }
            let task = Task { try await self.probeOnce() }
            running = task
            return task
        }
        do {
            return try await probe.value
        } catch {
            probing.withLock { $0 = nil }
            throw error
        }
    }

    let probing = LockedBox<Task<Bool, any Error>?>(nil)

    func probeOnce() async throws -> Bool {
        if let known = conditionsProven.withLock({ $0 }) { return known }
        // Per endpoint and bucket: a remote re-added elsewhere under the same name asks again.
        let stateKey = "s3.conditional-writes.\(client.endpoint.absoluteString)/\(client.bucket)"
        if let stored = try? state.value(for: stateKey) {
            conditionsProven.withLock { $0 = stored == "yes" }
            return stored == "yes"
        }
        let probe = key(Self.probePrefix + UUID.random().uuidString.lowercased())
        var proven = false
        do {
            try await call("probing the store") { _ = try await client.put(probe, body: ByteBuffer()) }
            do {
                _ = try await client.put(probe, body: ByteBuffer(), ifNoneMatch: true)
            } catch let error as S3Error where error.isPreconditionFailed {
                proven = true
            } catch let error as S3Error where error.isRetryable && error.status == 0 {
                throw Self.failure(error, what: "probing the store")
            } catch is S3Error {
            }
            try? await call("probing the store") { try await client.delete(probe) }
        }
        conditionsProven.withLock { $0 = proven }
        try? state.setValue(proven ? "yes" : "no", for: stateKey)
        return proven
    }

    /// Names of hidden probe objects (never listed).
    static let probePrefix = ".nimbus-partial-probe-"

    /// Folders seen to exist a moment ago (listed, made or checked here), so that a run of uploads into one folder
    /// checks it once a minute rather than once per file. A folder deleted there meanwhile by someone else gets the
    /// file anyway (its path exists again, with the file in it: nothing is lost).
    let seenFolders = LockedBox([String: ContinuousClock.Instant]())

    func knownFolder(_ id: String, besides: String? = nil) async throws -> Bool {
        let now = ContinuousClock.now
        if let seen = seenFolders.withLock({ $0[id] }), now - seen < .seconds(60) { return true }
        guard try await folderExists(id, besides: besides) else { return false }
        seenFolders.withLock { $0[id] = now }
        return true
    }

    /// `conditionRequired`: the write goes with its condition or not at all (a store proven to honour it; a 500 is
    /// then a failure to retry, never a sign to drop the condition).
    func putWhole(
        _ source: UploadSource, key: String, isNew: Bool, base: String?, conditionRequired: Bool = false, progress: @escaping @Sendable (Int64) -> Void
    ) async throws -> String {
        let data = try source.readChecked()
        try await BandwidthLimits.current.up?.take(data.count)  // whole: the S3 client signs and sends bodies whole
        let (body, metadata, what) = (ByteBuffer(data: data), ["sha256": source.checksum], "sending \(ProviderPath.name(of: key))")
        let etag = try await conditionRequired
            ? call(what) { try await client.put(key, body: body, metadata: metadata, ifNoneMatch: isNew, ifMatch: base) }
            : conditionally(what) { condition in
                try await client.put(key, body: body, metadata: metadata, ifNoneMatch: condition && isNew, ifMatch: condition ? base : nil)
            }
        progress(source.size)
        return etag
    }

    /// A multipart upload kept across restarts under the request id.
    @_spi(Testing) public struct Session: Codable {
        public var uploadId: String
        /// The object's key.
        public var key: String
        var checksum: String
        var partSize: Int64
    }

    func putInParts(
        _ source: UploadSource, key: String, requestId: String, isNew: Bool, base: String?, progress: @escaping @Sendable (Int64) -> Void
    ) async throws -> String {
        let stateKey = "s3.upload.\(requestId)"
        let partSize = max(self.partSize, (source.size + 9_999) / 10_000)
        var session = (try state.value(for: stateKey)).flatMap { try? JSONDecoder().decode(Session.self, from: Data($0.utf8)) }
        if let existing = session, existing.key != key || existing.checksum != source.checksum || existing.partSize != partSize {
            _ = try? await call("dropping an old upload") { try await client.abortMultipartUpload(existing.key, uploadId: existing.uploadId) }
            session = nil
        }
        // An upload of this key under another request (killed, then the file changed: a new request) is over: its
        // parts would cost storage until the bucket's lifecycle rule (if any) aborted it.
        for (otherKey, value) in (try? state.values(withPrefix: "s3.upload.")) ?? [:] where otherKey != stateKey {
            guard let other = try? JSONDecoder().decode(Session.self, from: Data(value.utf8)), other.key == key else { continue }
            do {
                try await call("dropping an old upload") { try await client.abortMultipartUpload(other.key, uploadId: other.uploadId) }
            } catch ProviderError.notFound {
                // gone already (finished, or aborted by the store)
            } catch {
                continue  // kept, to be dropped by a later upload of this key
            }
            try? state.setValue(nil, for: otherKey)
        }
        var stored: [Int: String] = [:]
        if let existing = session {
            do {
                let parts = try await call("resuming \(ProviderPath.name(of: key))") { try await client.listParts(key, uploadId: existing.uploadId) }
                for part in parts { stored[part.number] = part.etag }
            } catch ProviderError.notFound {
                session = nil  // expired or finished: start over
            }
        }
        if session == nil {
            let uploadId = try await call("starting \(ProviderPath.name(of: key))") {
                try await client.createMultipartUpload(key, metadata: ["sha256": source.checksum])
            }
            let made = Session(uploadId: uploadId, key: key, checksum: source.checksum, partSize: partSize)
            try state.setValue(String(decoding: try JSONEncoder().encode(made), as: UTF8.self), for: stateKey)
            session = made
        }
        guard let session else { throw ProviderError.network("no upload session") }
        let input: ContentReader
        do { input = try source.open() } catch { throw ProviderError.checksumMismatch }
        defer { input.close() }
        var hasher = SHA256()
        var parts: [(number: Int, etag: String)] = []
        var offset: Int64 = 0
        var number = 1
        while offset < source.size {
            guard let data = try input.read(upToCount: Int(min(partSize, source.size - offset))), !data.isEmpty else { break }
            hasher.update(data: data)
            let md5 = Hex.encode(Insecure.MD5.hash(data: data))
            if let etag = stored[number], etag == md5 {
                parts.append((number, etag))  // already there, these very bytes
            } else {
                let partNumber = number
                try await BandwidthLimits.current.up?.take(data.count)
                let etag = try await call("sending \(ProviderPath.name(of: key))") {
                    try await client.uploadPart(key, uploadId: session.uploadId, number: partNumber, body: ByteBuffer(data: data))
                }
                partsSent.withLock { $0 += 1 }
                parts.append((number, etag))
            }
            offset += Int64(data.count)
            number += 1
            progress(offset)
        }
        guard offset == source.size, (try input.read(upToCount: 1) ?? Data()).isEmpty, FileHasher.hex(hasher.finalize()) == source.checksum else {
            _ = try? await call("dropping an upload") { try await client.abortMultipartUpload(key, uploadId: session.uploadId) }
            try state.setValue(nil, for: stateKey)
            throw ProviderError.checksumMismatch
        }
        if let base, let current = try await call("looking at \(key)", { try await client.head(key) }), current.etag != base {
            throw ProviderError.versionConflict(current: nil)
        }
        let etag = try await conditionally("joining \(ProviderPath.name(of: key))") { condition in
            try await client.completeMultipartUpload(key, uploadId: session.uploadId, parts: parts, ifNoneMatch: condition && isNew)
        }
        try state.setValue(nil, for: stateKey)
        return etag
    }

    public func download(_ id: String, revision: String?, to destination: DownloadTarget, progress: @escaping @Sendable (Int64) -> Void) async throws {
        guard let object = try await head(id) else { throw ProviderError.notFound }
        if let revision, object.etag != revision { throw ProviderError.versionConflict(current: file(id, object)) }
        let output = try destination.open()
        defer { try? output.close() }
        var offset = Int64(try output.seekToEnd())
        if offset > object.size {
            try output.truncate(atOffset: 0)
            offset = 0
        }
        let chunk: Int64 = 8 << 20
        while offset < object.size {
            let range = offset..<min(object.size, offset + chunk)
            let body: ByteBuffer
            do {
                body = try await call("fetching \(ProviderPath.name(of: id))") { try await client.get(key(id), range: range, ifMatch: object.etag) }
            } catch ProviderError.versionConflict {
                throw ProviderError.versionConflict(current: try await head(id).map { file(id, $0) })
            }
            guard Int64(body.readableBytes) == Int64(range.count) else { throw ProviderError.network("a short answer for \(id)") }
            try await BandwidthLimits.current.down?.take(body.readableBytes)
            try output.write(contentsOf: body.readableBytesView)
            offset += Int64(body.readableBytes)
            progress(offset)
        }
        try output.synchronize()
        if let (checksum, _) = try? destination.hash() { checksums.remember(checksum, of: id, revision: object.etag) }
    }

    public func move(_ id: String, to parentId: String, name: String) async throws -> RemoteItem {
        let destination = ProviderPath.child(try ProviderPath.validated(name), in: parentId)
        if destination == id { return try await item(id) }
        if parentId == id || parentId.hasPrefix(id + "/") {
            throw ProviderError.invalid("A folder cannot be moved into itself or one of its subfolders.")
        }
        guard try await folderExists(parentId) else { throw ProviderError.notFound }
        if let object = try await head(id) {
            if try await head(destination) != nil { throw ProviderError.nameTaken(existing: destination) }
            if try await folderExists(destination) { throw ProviderError.nameTaken(existing: destination) }
            try await call("moving \(ProviderPath.name(of: id))") { _ = try await client.copy(from: key(id), to: key(destination)) }
            try await call("moving \(ProviderPath.name(of: id))") { try await client.delete(key(id)) }
            let moved = try await item(destination)
            if let checksum = file(id, object).checksum, let revision = moved.revision { checksums.remember(checksum, of: destination, revision: revision) }
            return try await item(destination)
        }
        // A folder: every object under it is copied, then deleted. A move interrupted half-way is taken up again
        // (what is already at the destination is part of this folder).
        let sources = try await call("listing \(id)") { try await client.listAll(prefix: folderPrefix(id)) }
        guard !sources.isEmpty else { throw ProviderError.notFound }
        let relative = Set(sources.map { String($0.key.dropFirst(folderPrefix(id).count)) })
        if try await head(destination) != nil { throw ProviderError.nameTaken(existing: destination) }
        let there = try await call("listing \(destination)") { try await client.listAll(prefix: folderPrefix(destination)) }
        guard there.allSatisfy({ relative.contains(String($0.key.dropFirst(folderPrefix(destination).count))) }) else {
            throw ProviderError.nameTaken(existing: destination)
        }
        for object in sources {
            let target = folderPrefix(destination) + object.key.dropFirst(folderPrefix(id).count)
            try await call("moving \(id)") { _ = try await client.copy(from: object.key, to: target) }
        }
        seenFolders.withLock { seen in seen = seen.filter { !ProviderPath.isWithin($0.key, id) } }
        for object in sources { try await call("moving \(id)") { try await client.delete(object.key) } }
        return RemoteItem(id: destination, parentId: parentId, name: ProviderPath.name(of: destination), isFolder: true)
    }

    public func delete(_ id: String) async throws {
        guard id != ProviderPath.root else { throw ProviderError.invalid("The root cannot be deleted.") }
        if try await head(id) != nil {
            try await call("deleting \(id)") { try await client.delete(key(id)) }
            checksums.forget(id)
            return
        }
        let objects = try await call("listing \(id)") { try await client.listAll(prefix: folderPrefix(id)) }
        guard !objects.isEmpty else { throw ProviderError.notFound }
        seenFolders.withLock { seen in seen = seen.filter { !ProviderPath.isWithin($0.key, id) } }
        // Markers last (deepest first among them): an interrupted deletion leaves the folders, never a file whose
        // folder was made to vanish.
        let ordered = objects.sorted { a, b in
            let (aMarker, bMarker) = (a.key.hasSuffix("/" + Self.markerName) || a.key.hasSuffix("/"), b.key.hasSuffix("/" + Self.markerName) || b.key.hasSuffix("/"))
            return aMarker == bMarker ? a.key.count > b.key.count : !aMarker
        }
        for object in ordered { try await call("deleting \(id)") { try await client.delete(object.key) } }
    }

    /// Makes the folders of `path` (markers), so that an empty remote folder exists.
    public func makeFolder(_ path: String) async throws {
        var current = ProviderPath.root
        for part in path.split(separator: "/").map(String.init) where part != "." {
            let next = ProviderPath.child(part, in: current)
            if try await head(next) != nil {
                throw ProviderError.invalid("\(part) is a file, not a folder.")
            }
            if !(try await folderExists(next)) { try await call("making \(part)") { _ = try await client.put(marker(next), body: ByteBuffer()) } }
            current = next
        }
    }
}
