import Foundation
import NimbusAPI

/// The Nimbus server as a ``RemoteProvider``: every capability (change feed, `If-Match`, request ids, resumable
/// sessions, revisions, trash, quota, batches). The only place that knows the `/v1/` routes the engine uses.
///
/// Small files go in one request (`uploadType=media`), small new files that are sent together in batches
/// (``uploadBatch(_:)``), new versions of 1 MiB and more and new files over 4 MiB as blocks (only the chunks the
/// server lacks, see `NimbusProvider+Blocks.swift`); against a server without the block API, bigger ones through
/// resumable sessions kept in the ``ProviderStateStore`` under the request id, so an upload interrupted by a crash
/// goes on from the last stored chunk.
public final class NimbusProvider: RevisionsProvider, QuotaProvider, BatchUploadProvider, ChangeSignaling {
    /// The API client, with the account's tokens.
    public let client: ServerClient
    let state: any ProviderStateStore
    /// Folder path of the remote's root (`/` is the account's root).
    public let rootPath: String
    let simpleUploadLimit: Int64
    /// The largest file a batch takes, and the most files and bytes a batch carries.
    public let batchLimits: (fileSize: Int64, files: Int, bytes: Int64)
    let rootId = LockedBox<String?>(nil)
    /// Whether big new files and new versions go as blocks (see `NimbusProvider+Blocks.swift`).
    let blockUploads: Bool
    /// New versions (of a known base) and downloads at least this big go by blocks (1 MiB; less in the simulation,
    /// whose files are small, so block transfers run inside it too).
    public let deltaMinimum: Int64
    /// Whether the server has the block API (nil: not asked yet).
    let blocksSupported = LockedBox<Bool?>(nil)
    /// Bytes sent as blocks and bytes of blocks fetched (tests and benchmarks count what a delta transfer moved).
    @_spi(Testing) public let bytesSent = LockedBox<Int64>(0)
    @_spi(Testing) public let bytesReceived = LockedBox<Int64>(0)
    /// Bytes of block uploads as sent (compressed when that helped).
    @_spi(Testing) public let bytesOnWire = LockedBox<Int64>(0)
    /// Whether the server takes compressed block uploads (nil: not refused yet).
    let compressesBlocks = LockedBox<Bool?>(nil)

    /// Everything: a change feed with live events, conditional writes, idempotent creations, resumable uploads,
    /// revisions, a trash, quota, checksums, batches, and blocks both ways.
    public var features: ProviderFeatures {
        var features = ProviderFeatures(
            changeFeed: true, conditionalWrite: true, idempotentCreate: true, resumableUploads: true, trash: true, checksums: true,
            blockUploads: blockUploads)
        features.changeSignals = self
        features.revisions = self
        features.quota = self
        features.batchUpload = self
        features.deltaDownloads = self
        return features
    }

    /// The folder `rootPath` of the account `client` signs into, as a remote. New files up to `simpleUploadLimit`
    /// go in one request; with `blockUploads`, bigger ones and new versions go as blocks (``deltaMinimum`` and up).
    public init(
        client: ServerClient, state: any ProviderStateStore, rootPath: String = "/", simpleUploadLimit: Int64 = 4 * 1024 * 1024,
        batchLimits: (fileSize: Int64, files: Int, bytes: Int64) = (256 * 1024, 100, 8 * 1024 * 1024), blockUploads: Bool = true,
        deltaMinimum: Int64 = 1 << 20
    ) {
        self.blockUploads = blockUploads
        self.deltaMinimum = deltaMinimum
        self.client = client
        self.state = state
        self.rootPath = rootPath
        self.simpleUploadLimit = simpleUploadLimit
        self.batchLimits = batchLimits
    }

    // MARK: Reading

    public func root() async throws -> RemoteItem {
        var current: File = try await call(Routes.file, "root")
        for part in rootPath.split(separator: "/").map(String.init) where part != "." {
            guard let next = try await files(in: current.id).first(where: { $0.name == part }) else { throw ProviderError.notFound }
            guard next.isFolder else { throw ProviderError.invalid("\(rootPath) is a file, not a folder.") }
            current = next
        }
        rootId.withLock { $0 = current.id }
        return Self.item(current)
    }

    /// Makes the folders of `path` (from the account's root) that are missing, like `mkdir -p`.
    public static func makeFolder(_ path: String, with client: ServerClient) async throws {
        let provider = NimbusProvider(client: client, state: NoState())
        var current: File = try await provider.call(Routes.file, "root")
        for part in path.split(separator: "/").map(String.init) where part != "." {
            // Twice at most: another device may make the same folder between the look and the creation (two
            // `nimbus sync` started together): then it is that one.
            for attempt in 0..<2 {
                if let next = try await provider.files(in: current.id).first(where: { $0.name == part }) {
                    guard next.isFolder else {
                        throw ProviderError.invalid("\(part) is a file, not a folder.")
                    }
                    current = next
                    break
                }
                let body = CreateFileRequest(name: part, mimeType: folderMimeType, parentId: current.id, requestId: UUID.random().uuidString.lowercased())
                let (head, data) = try await provider.send(
                    TransportRequest(Routes.createFile, body: try JSONEncoder.nimbus.encode(body)), json: true)
                do {
                    try Self.check(head, data)
                } catch ProviderError.nameTaken where attempt == 0 {
                    continue
                }
                current = try Self.decode(File.self, data)
                break
            }
        }
    }

    /// A state store that keeps nothing (for one-off calls outside an engine).
    public struct NoState: ProviderStateStore {
        /// A store that keeps nothing.
        public init() {}
        /// Always nil.
        public func value(for key: String) throws -> String? { nil }
        /// Keeps nothing.
        public func setValue(_ value: String?, for key: String) throws {}
    }

    public func item(_ id: String) async throws -> RemoteItem {
        let file: File = try await call(Routes.file, id)
        if file.trashed { throw ProviderError.notFound }
        return Self.item(file)
    }

    public func children(of folderId: String) async throws -> [RemoteItem] {
        try await files(in: folderId).map(Self.item)
    }

    func files(in folderId: String) async throws -> [File] {
        var files: [File] = []
        var page = 1
        while true {
            let list: FileList = try await call(Routes.listFiles, query: ["parentId": folderId, "page": String(page), "limit": "1000"])
            files += list.files
            guard let next = list.pagination.nextPage else { return files }
            page = next
        }
    }

    public func startCursor() async throws -> String {
        let start: ChangeCursor = try await call(Routes.changesStart)
        return start.cursor
    }

    public func changes(since cursor: String) async throws -> ChangePage {
        let (head, data) = try await send(TransportRequest(Routes.changes, query: ["cursor": cursor, "limit": "1000"]))
        if head.status == 410 { throw ProviderError.gone }
        try Self.check(head, data)
        let page = try Self.decode(ChangeList.self, data)
        return ChangePage(
            changes: page.changes.map { change in
                if change.type == .upsert, let file = change.file, !file.trashed { return .upsert(Self.item(file)) }
                return .remove(id: change.fileId)
            }, cursor: page.cursor, hasMore: page.hasMore)
    }

    /// The server's event stream (`/v1/events`): `onChange` on every commit of this account.
    public func watch(onChange: @escaping @Sendable () -> Void) async throws {
        do {
            _ = try await client.authorizedStream(TransportRequest(Routes.events)) { data in
                if String(decoding: data, as: UTF8.self).contains("event: change") { onChange() }
            }
        } catch let error as SyncError {
            throw Self.providerError(error)
        }
    }

    /// Waits until something changes after `cursor` (a long-poll of up to `seconds`), for a caller without events.
    public func waitForChanges(after cursor: String, seconds: Int) async throws -> Bool {
        let (head, data) = try await send(TransportRequest(Routes.changes, query: ["cursor": cursor, "timeout": String(seconds), "limit": "1"]))
        guard head.status == 200, let page = try? JSONDecoder.nimbus.decode(ChangeList.self, from: data) else { return false }
        return !page.changes.isEmpty
    }

    // MARK: Writing

    public func createFolder(named name: String, in parentId: String, requestId: String) async throws -> RemoteItem {
        let body = CreateFileRequest(name: name, mimeType: folderMimeType, parentId: parentId, requestId: requestId)
        let (head, data) = try await send(TransportRequest(Routes.createFile, body: try JSONEncoder.nimbus.encode(body)), json: true)
        try Self.check(head, data)
        return Self.item(try Self.decode(File.self, data))
    }

    public func upload(
        _ source: UploadSource, to target: UploadTarget, requestId: String, progress: @escaping @Sendable (Int64) -> Void
    ) async throws -> RemoteItem {
        let session = try state.value(for: sessionKey(requestId))
        if session == nil, shouldUploadBlocks(source, target), let item = try await blockUpload(source, to: target, requestId: requestId, progress: progress) {
            return item
        }
        if source.size <= simpleUploadLimit, session == nil {
            return try await simpleUpload(source, to: target, requestId: requestId, progress: progress)
        }
        return try await resumableUpload(source, to: target, requestId: requestId, progress: progress)
    }

    /// One request (`uploadType=media`): a new file carries the request id (a retry returns the same file), a new
    /// version `If-Match`, both the checksum.
    func simpleUpload(
        _ source: UploadSource, to target: UploadTarget, requestId: String, progress: @escaping @Sendable (Int64) -> Void
    ) async throws -> RemoteItem {
        let bytes = try Self.read(source)
        let modifiedAt = source.modified.map { ISO8601.string(from: $0) }
        var headers = ["Content-Type": "application/octet-stream"]
        let path: String
        switch target {
        case .new(let parentId, let name, let mimeType):
            path = Routes.upload.path(query: [
                "uploadType": "media", "checksum": source.checksum, "modifiedAt": modifiedAt, "name": name, "parentId": parentId,
                "requestId": requestId, "mimeType": mimeType ?? MimeType.guess(forName: name),
            ])
        case .version(let fileId, let base):
            path = Routes.upload.path(query: ["uploadType": "media", "checksum": source.checksum, "modifiedAt": modifiedAt, "fileId": fileId])
            if let base { headers["If-Match"] = "\"\(base)\"" }
        }
        let (head, data) = try await send(TransportRequest(method: "POST", path: path, headers: headers, body: bytes))
        try Self.check(head, data)
        progress(source.size)
        return Self.item(try Self.decode(File.self, data))
    }

    func sessionKey(_ requestId: String) -> String { "nimbus.upload.\(requestId)" }

    /// A resumable session, persisted under the request id: an interrupted upload (even a crashed process) goes on
    /// from where the server says it stands.
    func resumableUpload(
        _ source: UploadSource, to target: UploadTarget, requestId: String, progress: @escaping @Sendable (Int64) -> Void
    ) async throws -> RemoteItem {
        var session = try await savedSession(requestId)
        if session == nil {
            var headers: [String: String] = [:]
            let request: UploadRequest
            switch target {
            case .new(let parentId, let name, let mimeType):
                request = UploadRequest(
                    requestId: requestId, name: name, mimeType: mimeType ?? MimeType.guess(forName: name), parentId: parentId, size: source.size,
                    fileId: nil, checksum: source.checksum)
            case .version(let fileId, let base):
                if let base { headers["If-Match"] = "\"\(base)\"" }
                request = UploadRequest(
                    requestId: requestId, name: "file", mimeType: "application/octet-stream", parentId: nil, size: source.size, fileId: fileId,
                    checksum: source.checksum)
            }
            let (head, data) = try await send(
                TransportRequest(Routes.upload, query: ["uploadType": "resumable"], headers: headers, body: try JSONEncoder.nimbus.encode(request)),
                json: true)
            try Self.check(head, data)
            let started = try Self.decode(UploadResponse.self, data)
            if let file = started.file { return Self.item(file) }
            session = started
            try state.setValue(String(decoding: try JSONEncoder.nimbus.encode(started), as: UTF8.self), for: sessionKey(requestId))
        }
        guard var session else { throw ProviderError.gone }
        let handle: ContentReader
        do { handle = try source.open() } catch { throw ProviderError.checksumMismatch }
        defer { handle.close() }
        var restarts = 0
        while true {
            // All chunks stored but no file yet (a crash before the commit): sending the last one again commits.
            let k = min(session.chunksProcessed, max(session.totalChunks - 1, 0))
            let start = Int64(k) * session.chunkSize
            let end = min(start + session.chunkSize, source.size)
            progress(start)
            try handle.seek(toOffset: UInt64(start))
            let bytes = try handle.read(upToCount: Int(end - start)) ?? Data()
            guard Int64(bytes.count) == end - start else { throw ProviderError.checksumMismatch }  // the file shrank
            let (head, data) = try await send(
                TransportRequest(
                    method: "PUT", path: session.uploadUrl, headers: ["Content-Range": "bytes \(start)-\(end - 1)/\(source.size)"], body: bytes))
            switch head.status {
            case 308:
                session = try Self.decode(UploadResponse.self, data)
            case 201:
                try state.setValue(nil, for: sessionKey(requestId))
                guard let file = try Self.decode(UploadResponse.self, data).file else { throw ProviderError.gone }
                progress(source.size)
                return Self.item(file)
            case 404, 410:
                try state.setValue(nil, for: sessionKey(requestId))
                throw ProviderError.gone
            case 400, 416:
                // Our idea of the session is off: ask where it stands (once or twice), else start over.
                restarts += 1
                guard restarts < 3, let fresh = try await savedSession(requestId) else {
                    try state.setValue(nil, for: sessionKey(requestId))
                    throw ProviderError.gone
                }
                session = fresh
            default:
                if head.status == 409 || head.status == 422 { try state.setValue(nil, for: sessionKey(requestId)) }
                try Self.check(head, data)
                throw ProviderError.server(status: head.status, code: .other("unexpected"), message: "Unexpected answer \(head.status) to a chunk.")
            }
        }
    }

    /// The persisted session of an upload, refreshed from the server; `nil` if there is none or it is gone.
    func savedSession(_ requestId: String) async throws -> UploadResponse? {
        guard let text = try state.value(for: sessionKey(requestId)),
            let saved = try? JSONDecoder.nimbus.decode(UploadResponse.self, from: Data(text.utf8))
        else { return nil }
        let (head, data) = try await send(TransportRequest(Routes.uploadSession, saved.uploadId))
        guard head.status == 200, let fresh = try? JSONDecoder.nimbus.decode(UploadResponse.self, from: data),
            fresh.chunksProcessed <= fresh.totalChunks, fresh.chunkSize == saved.chunkSize
        else {
            if head.status == 404 || head.status == 410 || head.status == 200 {
                try state.setValue(nil, for: sessionKey(requestId))
                return nil
            }
            try Self.check(head, data)
            return nil
        }
        return fresh
    }

    /// Forgets (and frees on the server) an unfinished upload session.
    public func cancelUpload(requestId: String) async {
        guard let text = try? state.value(for: sessionKey(requestId)),
            let saved = try? JSONDecoder.nimbus.decode(UploadResponse.self, from: Data(text.utf8))
        else { return }
        _ = try? await send(TransportRequest(Routes.cancelUpload, saved.uploadId))
        try? state.setValue(nil, for: sessionKey(requestId))
    }

    public func uploadBatch(_ files: [BatchFile]) async throws -> [Result<RemoteItem, ProviderError>] {
        var entries: [BatchUploadRequest.Entry] = []
        for file in files {
            entries.append(
                BatchUploadRequest.Entry(
                    name: file.name, parentId: file.parentId, mimeType: file.mimeType ?? MimeType.guess(forName: file.name), requestId: file.requestId,
                    checksum: file.source.checksum, content: try Self.read(file.source), modifiedAt: file.source.modified))
        }
        let (head, data) = try await send(
            TransportRequest(Routes.upload, query: ["uploadType": "batch"], body: try JSONEncoder.nimbus.encode(BatchUploadRequest(files: entries))),
            json: true)
        try Self.check(head, data)
        let results = try Self.decode(BatchUploadResponse.self, data).results
        guard results.count == files.count else {
            throw ProviderError.server(status: head.status, code: .other("invalid_response"), message: "The batch answer has \(results.count) results for \(files.count) files.")
        }
        return results.map { result in
            if let file = result.file, (200..<300).contains(result.status) { return .success(Self.item(file)) }
            return .failure(Self.error(ServerFailure(status: result.status, detail: result.error, retryAfter: nil)))
        }
    }

    public func download(_ id: String, revision: String?, to destination: DownloadTarget, progress: @escaping @Sendable (Int64) -> Void) async throws {
        let handle: ContentWriter
        do { handle = try destination.open() } catch {
            throw ProviderError.invalid("Cannot write \(destination.url.path): \(error.localizedDescription)")
        }
        defer { try? handle.close() }
        let offset = Int64(try handle.seekToEnd())
        var headers: [String: String] = [:]
        if let revision { headers["If-Range"] = "\"\(revision)\"" }
        if offset > 0 { headers["Range"] = "bytes=\(offset)-" }
        let path = revision.map { Routes.revisionContent.path(id, $0) } ?? Routes.content.path(id)
        let written = LockedBox(offset)
        let head: TransportResponseHead
        do {
            head = try await client.authorizedStream(TransportRequest(method: "GET", path: path, headers: headers)) { data in
                try handle.write(contentsOf: data)
                progress(written.withLock { $0 += Int64(data.count); return $0 })
            }
        } catch let error as SyncError {
            if error.status == 416 && offset > 0 {
                // More bytes here than the revision has: not a partial download of it. Start over.
                try handle.truncate(atOffset: 0)
                throw ProviderError.network("the partial download did not fit the revision; starting over")
            }
            throw Self.providerError(error)
        }
        if head.status == 200 && offset > 0 {
            // The range was not honoured and the whole content came after the partial one: start over.
            try handle.truncate(atOffset: 0)
            throw ProviderError.network("the download restarted from the beginning")
        }
        try handle.synchronize()
    }

    public func move(_ id: String, to parentId: String, name: String) async throws -> RemoteItem {
        let body = UpdateFileRequest(name: name, parentId: parentId)
        let (head, data) = try await send(TransportRequest(Routes.updateFile, id, body: try JSONEncoder.nimbus.encode(body)), json: true)
        try Self.check(head, data)
        return Self.item(try Self.decode(File.self, data))
    }

    public func delete(_ id: String) async throws {
        let (head, data) = try await send(TransportRequest(Routes.deleteFile, id))
        try Self.check(head, data)
    }

    public func revisions(of id: String) async throws -> [FileRevision] {
        let list: RevisionList = try await call(Routes.revisions, id, query: ["limit": "1000"])
        return list.revisions
    }

    public func restore(_ id: String, revision: String) async throws -> RemoteItem {
        Self.item(try await call(Routes.restoreRevision, id, revision))
    }

    public func quota() async throws -> (used: Int64, limit: Int64?) {
        let about: About = try await call(Routes.about)
        return (about.quota.used, about.quota.limit)
    }

    // MARK: Plumbing

    static func item(_ file: File) -> RemoteItem {
        var item = RemoteItem(
            id: file.id, parentId: file.parentId, name: file.name, isFolder: file.isFolder, size: file.size, revision: file.revisionId,
            checksum: file.checksum, mimeType: file.mimeType, modifiedAt: file.modifiedAt, isDeleted: file.trashed)
        item.access = access(file)
        return item
    }

    /// What the server says the user may do with the item (its `capabilities`), and whether it comes through a share.
    static func access(_ file: File) -> RemoteAccess {
        var access: RemoteAccess = []
        if let capabilities = file.capabilities {
            if !capabilities.canEdit { access.insert(.readOnly) }
            if !capabilities.canRename { access.insert(.fixedPlace) }
            if !capabilities.canDelete { access.insert(.undeletable) }
        }
        if file.mountId != nil {
            access.insert(.shared)
            if file.shared == true { access.insert(.shareRoot) }
        }
        // The user's own root cannot be renamed or deleted either; that is not a restriction the planner plans around.
        if file.parentId == nil { access = [] }
        return access
    }

    static func read(_ source: UploadSource) throws -> Data {
        let bytes: Data
        do {
            let reader = try source.open()
            defer { reader.close() }
            bytes = try reader.readToEnd()
        } catch { throw ProviderError.checksumMismatch }
        guard Int64(bytes.count) == source.size else { throw ProviderError.checksumMismatch }
        return bytes
    }

    func send(_ request: TransportRequest, json: Bool = false) async throws -> (TransportResponseHead, Data) {
        do {
            return try await client.authorized(request, json: json)
        } catch let error as SyncError {
            throw Self.providerError(error)
        }
    }

    /// `GET` (or the endpoint's method) of `endpoint`, its answer decoded.
    func call<Body, Answer: Decodable>(
        _ endpoint: Endpoint<Body, Answer>, _ parameters: String..., query: KeyValuePairs<String, String?> = [:]
    ) async throws -> Answer {
        let (head, data) = try await send(TransportRequest(method: endpoint.method, path: endpoint.path(parameters, query: query)))
        try Self.check(head, data)
        return try Self.decode(Answer.self, data)
    }

    static func providerError(_ error: SyncError) -> ProviderError {
        switch error {
        case .network(let message): .network(message)
        case .unauthorized(let message): .unauthorized(message)
        case .notSignedIn: .unauthorized("not signed in")
        case .server(let status, let code, let message, let retryAfter):
            Self.error(ServerFailure(status: status, code: code, message: message, retryAfter: retryAfter))
        default: .server(status: 0, code: .other("client"), message: error.description)
        }
    }

    /// Throws the typed outcome of a non-2xx answer.
    static func check(_ head: TransportResponseHead, _ data: Data) throws {
        if let failure = ServerFailure(head, data) { throw error(failure) }
    }

    /// A server's failure as what it means for the engine.
    static func error(_ failure: ServerFailure) -> ProviderError {
        let message = failure.message
        switch (failure.status, failure.code) {
        case (401, _): return .unauthorized(message)
        case (404, _): return .notFound
        case (409, .api(.nameConflict)): return .nameTaken(existing: failure.existingId)
        case (409, .api(.versionConflict)): return .versionConflict(current: failure.file.map(item))
        case (409, .api(.requestIdReused)): return .requestIdReused(existing: failure.existingId)
        case (409, .api(.massDeletionPaused)): return .deletionsPaused(message)
        case (400, .api(.trashed)): return .notFound
        case (400, .api(.notAFolder)): return .notAFolder(message)
        case (410, _): return .gone
        case (412, _): return .versionConflict(current: failure.file.map(item))
        case (413, _): return .tooLarge(message)
        case (422, _): return .checksumMismatch
        case (429, _), (503, _): return .retryAfter(seconds: failure.retryAfter)
        case (507, _): return .quotaExceeded(message)
        case (400, _): return .invalid(message)
        default: return .server(status: failure.status, code: failure.code, message: message)
        }
    }

    static func decode<T: Decodable>(_ type: T.Type, _ data: Data) throws -> T {
        do {
            return try JSONDecoder.nimbus.decode(T.self, from: data)
        } catch {
            throw ProviderError.server(status: 200, code: .other("bad_response"), message: "Unexpected answer from the server: \(error)")
        }
    }
}
