import Foundation
import NimbusAPI

/// One file or folder on a remote (a provider's view of it).
public struct RemoteItem: Sendable, Equatable, Codable {
    /// The provider's stable id for the item (a Nimbus file id; a path for stores that have no ids).
    public var id: String
    /// `nil` only for the remote's root folder.
    public var parentId: String?
    /// Its name in its folder.
    public var name: String
    /// Whether it is a folder.
    public var isFolder: Bool
    /// Its content's size in bytes (0 for folders).
    public var size: Int64
    /// The version of the content (a revision id, an ETag); changes whenever the content does. `nil` for folders,
    /// except with ``ProviderFeatures/treeVersions`` (then it changes with anything beneath the folder).
    public var revision: String?
    /// SHA-256 of the content, lowercase hex, when the provider knows it (``ProviderFeatures/checksums``).
    public var checksum: String?
    /// Its MIME type, when the provider keeps one.
    public var mimeType: String?
    /// When it last changed there.
    public var modifiedAt: Date
    /// Deleted there since (in the trash): what a retried creation returns when the item it made was deleted
    /// meanwhile. Listings and change feeds never report such items (they report them gone).
    public var isDeleted = false
    /// What the signed-in user may not do with it, and whether it comes through someone's share (``RemoteAccess``).
    /// Empty for one's own items, and on providers that have no sharing.
    public var access: RemoteAccess = []

    /// An item as a provider reports it.
    public init(
        id: String, parentId: String?, name: String, isFolder: Bool, size: Int64 = 0, revision: String? = nil, checksum: String? = nil,
        mimeType: String? = nil, modifiedAt: Date = Date(timeIntervalSince1970: 0), isDeleted: Bool = false
    ) {
        self.isDeleted = isDeleted
        self.id = id
        self.parentId = parentId
        self.name = name
        self.isFolder = isFolder
        self.size = size
        self.revision = revision
        self.checksum = checksum
        self.mimeType = mimeType
        self.modifiedAt = modifiedAt
    }
}

/// What the signed-in user may not do with a remote item — someone else's, shared with them in a role that does not
/// allow it — and how it reaches them. The planner never plans what the item's access forbids (a viewer's edit is
/// kept here as a conflict copy; a deletion or move here is undone), so nothing is sent to be refused forever.
public struct RemoteAccess: OptionSet, Sendable, Hashable, Codable {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    /// Its content cannot be changed, nor (a folder) anything added into it.
    public static let readOnly = RemoteAccess(rawValue: 1)
    /// It cannot be renamed or moved.
    public static let fixedPlace = RemoteAccess(rawValue: 2)
    /// It cannot be deleted.
    public static let undeletable = RemoteAccess(rawValue: 4)
    /// It is someone else's, seen through a share they gave this user.
    public static let shared = RemoteAccess(rawValue: 8)
    /// It is the root of such a share, where the user placed it in their tree (removing it leaves the share).
    public static let shareRoot = RemoteAccess(rawValue: 16)
}

/// How a provider call failed, by what it means for the caller (rclone's classification): what to do next
/// follows from the case, never from an error message.
public enum ProviderError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The item's head is no longer the revision the change was based on; `current` is the item now, if known.
    case versionConflict(current: RemoteItem?)
    /// Another item holds the name in that folder (`existing` is its id, if known).
    case nameTaken(existing: String?)
    /// The item (or the folder it should go in) is not there (deleted, or never existed).
    case notFound
    /// A cursor or upload session expired: start over (a full listing, a new session).
    case gone
    /// Not enough space there.
    case quotaExceeded(String)
    /// Too big for the provider.
    case tooLarge(String)
    /// Slow down: try again after `seconds` (or a backoff when unknown).
    case retryAfter(seconds: Int?)
    /// The credentials were refused; nothing works until the user signs in again.
    case unauthorized(String)
    /// No usable answer (refused, reset, timed out): the request may or may not have taken effect.
    case network(String)
    /// The bytes sent did not match their checksum (the file changed while it was read): read it again.
    case checksumMismatch
    /// The request id already made something else (`existing`, if known).
    case requestIdReused(existing: String?)
    /// The request cannot succeed as it is (a bad name, a folder where a file is needed, a move into itself).
    case invalid(String)
    /// A file where a folder is needed (the folder to sync with, one on its path, the folder something goes in).
    case notAFolder(String)
    /// The folder this syncs with is not there (deleted, never made, a disk not mounted, a file in its place).
    case rootMissing(String)
    /// The remote cannot do this at all (no change feed: it is listed; no space report).
    case unsupported(String)
    /// The server paused this device's deletions until its user confirms them (its mass-deletion breaker).
    case deletionsPaused(String)
    /// Any other refusal or failure there.
    case server(status: Int, code: ErrorCode, message: String)

    /// Whether the same request can succeed later without anyone changing anything.
    public var isRetryable: Bool {
        switch self {
        // A paused deletion is tried again, later: it goes once the user confirms.
        case .network, .retryAfter, .gone, .deletionsPaused: true
        case .server(let status, _, _): status >= 500 || status == 408
        default: false
        }
    }

    /// What happened, in words for the user.
    public var description: String {
        switch self {
        case .versionConflict(let current): "The file changed there meanwhile\(current.map { " (now \($0.revision ?? "?"))" } ?? "")."
        case .nameTaken: "Another item already has that name there."
        case .notFound: "Not there (deleted, or never there)."
        case .gone: "Expired there; starting over."
        case .quotaExceeded(let message): message
        case .tooLarge(let message): message
        case .retryAfter(let seconds): "Busy there; retrying\(seconds.map { " in \($0) s" } ?? " later")."
        case .unauthorized(let message): "Signed out by the server (\(message)); sign in again to resume syncing."
        case .network(let message): "Could not be reached (\(message)); will retry."
        case .checksumMismatch: "The file changed while it was being sent; it will be read again."
        case .requestIdReused: "That request already made a different item."
        case .invalid(let message), .notAFolder(let message), .rootMissing(let message), .unsupported(let message), .deletionsPaused(let message): message
        case .server(let status, let code, let message): "\(message) (\(status) \(code))"
        }
    }
}

/// One entry of a change feed.
public enum RemoteChange: Sendable, Equatable {
    /// The item's state now (new, changed, moved).
    case upsert(RemoteItem)
    /// The item is gone (deleted, trashed or moved out of the remote).
    case remove(id: String)
}

/// One page of a change feed (``RemoteProvider/changes(since:)``).
public struct ChangePage: Sendable, Equatable {
    /// The changes, oldest first.
    public var changes: [RemoteChange]
    /// Where the next call starts.
    public var cursor: String
    /// More changes wait: call again now with `cursor`.
    public var hasMore: Bool

    /// A page of `changes`, to be followed from `cursor`.
    public init(changes: [RemoteChange], cursor: String, hasMore: Bool) {
        self.changes = changes
        self.cursor = cursor
        self.hasMore = hasMore
    }
}

/// The bytes to send: a file, its size and SHA-256 (the provider refuses bytes that do not match it).
public struct UploadSource: Sendable, Equatable {
    /// The file to read.
    public var url: URL
    /// Its size in bytes.
    public var size: Int64
    /// Its SHA-256, lowercase hex (empty for an unhashed source).
    public var checksum: String
    /// Where the content's parts end, for a provider that stores blocks (the Nimbus server) to cut there instead of
    /// at its own content-defined points (each part at most 4 MiB; the last is `size`): an encrypted remote's sealed
    /// chunks, so an edit is stored as the few sealed chunks it changed. Nil: the provider's own cuts.
    public var boundaries: [Int64]?
    /// The file at `url` is sealed at rest (an encrypted library's staged upload): read it through ``open()``.
    var sealing: ContentSealing?
    /// When the file was last changed here (a synced folder's file), for a provider that can keep it with the file
    /// (the Nimbus API's `modifiedAt`, a local folder's mtime), so other devices' copies keep it too; nil: the upload's time.
    public var modified: Date?

    /// The content of the file at `url`, of `size` bytes and SHA-256 `checksum`.
    public init(url: URL, size: Int64, checksum: String, boundaries: [Int64]? = nil) {
        self.url = url
        self.size = size
        self.checksum = checksum
        self.boundaries = boundaries
    }

    init(url: URL, size: Int64, checksum: String, sealing: ContentSealing?) {
        self.init(url: url, size: size, checksum: checksum)
        self.sealing = sealing
    }

    /// The content's bytes. Providers read them this way, never from `url` directly: in an encrypted library the
    /// file there is sealed.
    public func open() throws -> ContentReader { try ContentReader(url: url, sealing: sealing) }

    /// A new file whose SHA-256 is not known yet, for a provider that ``HashesWhileSending``: it hashes the bytes as
    /// they go and answers with the checksum (``RemoteItem/checksum``). `unchanged` is asked once all was sent, before
    /// the file takes its name: false (the file changed while it was read) refuses it as ``ProviderError/checksumMismatch``.
    public static func unhashed(url: URL, size: Int64, unchanged: @escaping @Sendable () -> Bool) -> UploadSource {
        var source = UploadSource(url: url, size: size, checksum: "")
        source.unchanged = unchanged
        return source
    }

    /// Whether `checksum` is the content's (false: ``unhashed(url:size:unchanged:)``).
    public var isHashed: Bool { !checksum.isEmpty }

    /// For an unhashed source: whether the file is still the one that was sent (see ``unhashed(url:size:unchanged:)``).
    public var unchanged: (@Sendable () -> Bool)?

    /// Two sources are equal when they name the same bytes the same way.
    public static func == (a: UploadSource, b: UploadSource) -> Bool {
        a.url == b.url && a.size == b.size && a.checksum == b.checksum && a.boundaries == b.boundaries && (a.sealing == nil) == (b.sealing == nil)
    }
}

/// A provider that takes a new file whose SHA-256 is not known yet (``UploadSource/unhashed(url:size:unchanged:)``),
/// hashing the bytes as they go: a synced folder then reads a big new file once — while it is sent — instead of once
/// to hash it and once more to send it. Only new files (``UploadTarget/new(parentId:name:mimeType:)``) go unhashed; the
/// answer's ``RemoteItem/checksum`` is what was sent. (WebDAV: one `PUT` to a temporary name, hashed as it goes, then
/// moved into place.)
public protocol HashesWhileSending: RemoteProvider {
    /// New files of at least this size are left unread by a synced folder's scan (nil: none).
    var unhashedMinimum: Int64? { get }
    /// Whether a new file of `size` can be sent unhashed now (false: the engine reads it first).
    func takesUnhashed(size: Int64) async -> Bool
}

/// Where uploaded bytes go.
public enum UploadTarget: Sendable, Equatable {
    /// A new file; fails with ``ProviderError/nameTaken(existing:)`` if the name is taken (unless `replacing`).
    case new(parentId: String, name: String, mimeType: String?)
    /// A new version of a file, based on revision `base` (fails with ``ProviderError/versionConflict(current:)`` if
    /// the head moved); `base` nil overwrites whatever the head is (the old head stays a revision where kept).
    case version(of: String, base: String?)
}

/// Where a provider may keep small state across restarts (resumable upload sessions): a key-value store the
/// engine backs with its database.
public protocol ProviderStateStore: Sendable {
    /// The value kept under `key`, if any.
    func value(for key: String) throws -> String?
    /// Keeps `value` under `key` (nil removes it).
    func setValue(_ value: String?, for key: String) throws
    /// Every key starting with `prefix`, with its value (one read instead of one per key); nil when this store
    /// cannot (then keys are read one by one).
    func values(withPrefix prefix: String) throws -> [String: String]?
    /// Several keys at once (one write).
    func setValues(_ values: [String: String?]) throws
}

/// Where content-defined chunks are on this device: for each file a provider sent or fetched as blocks,
/// the chunks of that revision in order. A state store that keeps one (the engine's database does) lets a download
/// take every chunk some synced file here already holds, and a new version name its base's chunks without asking.
public protocol BlockIndexStore: Sendable {
    /// Replaces what is known of `fileId`'s chunks with those of `revision`.
    func setBlocks(_ blocks: [BlockManifest.Block], of fileId: String, revision: String) throws
    /// The chunks recorded for `fileId`, and the revision they are of.
    func blocks(of fileId: String) throws -> (revision: String, blocks: [BlockManifest.Block])?
    /// For each of `hashes` that some file here is recorded to hold: files and offsets where it is (a few each).
    func locations(of hashes: Set<String>) throws -> [String: [BlockLocation]]
}

/// A chunk in a file of this device, as recorded (the file may have changed since: the bytes are checked on use).
public struct BlockLocation: Sendable, Hashable {
    /// The file (by its provider id) holding the chunk.
    public var fileId: String
    /// Where in that file the chunk starts.
    public var offset: Int64
    /// The chunk's length.
    public var size: Int64
}

extension ProviderStateStore {
    /// Not offered by default: keys are read one by one.
    public func values(withPrefix prefix: String) throws -> [String: String]? { nil }
    /// Each key written with ``setValue(_:for:)``.
    public func setValues(_ values: [String: String?]) throws {
        for (key, value) in values { try setValue(value, for: key) }
    }
}

/// A storage back-end the sync engine can sync with: the Nimbus server, a folder on a mounted disk, and later
/// WebDAV or S3. The contract, for every implementation (`Tests/ProviderConformance` checks it):
///
/// - Items have stable ids (``RemoteItem/id``) for as long as they exist; a folder's children have unique names.
/// - Every call either succeeds or throws a ``ProviderError``; a thrown ``ProviderError/network(_:)`` means the
///   outcome is unknown, and every call must be safe to repeat: creations with the same request id return what
///   the first made (``ProviderFeatures/idempotentCreate``) or fail with ``ProviderError/nameTaken(existing:)``
///   (the caller then looks at what holds the name); moves and deletions of what is already done succeed or say
///   ``ProviderError/notFound``.
/// - Content is checked: an upload stores exactly the bytes whose SHA-256 is ``UploadSource/checksum`` or fails
///   with ``ProviderError/checksumMismatch``; a download writes exactly the revision asked for.
/// - Nothing half-written is ever visible under an item's name.
public protocol RemoteProvider: Sendable {
    /// What the provider can do beyond the basics, in one value; the engine uses what is there and makes up for the
    /// rest.
    var features: ProviderFeatures { get }

    /// The remote's root folder (the folder the remote was set up with).
    func root() async throws -> RemoteItem

    /// One item as it is now; ``ProviderError/notFound`` if it is gone.
    func item(_ id: String) async throws -> RemoteItem

    /// A folder's children, all of them (paging is the provider's business).
    func children(of folderId: String) async throws -> [RemoteItem]

    /// A cursor for "now": ``changes(since:)`` from it reports what changes after this call.
    /// Only with ``ProviderFeatures/changeFeed``.
    func startCursor() async throws -> String

    /// What changed since `cursor`, a page at a time; ``ProviderError/gone`` when the cursor is too old (list
    /// everything again). Only with ``ProviderFeatures/changeFeed``.
    func changes(since cursor: String) async throws -> ChangePage

    /// Creates a folder; with the same `requestId` again, returns the folder the first call made.
    func createFolder(named name: String, in parentId: String, requestId: String) async throws -> RemoteItem

    /// Stores `source` as a new file or a new version (see ``UploadTarget``), reporting bytes sent to `progress`.
    func upload(
        _ source: UploadSource, to target: UploadTarget, requestId: String, progress: @escaping @Sendable (Int64) -> Void
    ) async throws -> RemoteItem

    /// Writes revision `revision` of file `id` (its head when nil) to `destination`, resuming after the bytes
    /// already there (a partial earlier download of the same revision), reporting bytes written to `progress`.
    func download(_ id: String, revision: String?, to destination: DownloadTarget, progress: @escaping @Sendable (Int64) -> Void) async throws

    /// Moves and/or renames an item; ``ProviderError/nameTaken(existing:)`` if the name is taken there,
    /// ``ProviderError/invalid(_:)`` for a folder moved into itself. A provider whose ids are paths
    /// answers with the new path as the id; what was beneath a moved folder then has its old path's place under the
    /// new one (`old/x` → `new/x`), which the engine takes without listing.
    func move(_ id: String, to parentId: String, name: String) async throws -> RemoteItem

    /// Deletes an item (a folder with everything in it), to the trash where there is one.
    func delete(_ id: String) async throws

    /// Forgets the resumable upload session started under `requestId` (aborting it there, so its parts free their
    /// space): the content it was sending was discarded. Nothing to do for a provider that keeps no sessions.
    func cancelUpload(requestId: String) async
}

extension RemoteProvider {
    /// No upload sessions kept: nothing to forget.
    public func cancelUpload(requestId: String) async {}

    /// The folder at `path` (names below the root) made where missing, like `mkdir -p`; another client making the
    /// same folder meanwhile is taken as it is. A file in the way is ``ProviderError/notAFolder(_:)``.
    public func makeFolders(_ path: [String]) async throws -> RemoteItem {
        var current = try await root()
        for part in path {
            for attempt in 0..<2 {
                if let existing = try await children(of: current.id).first(where: { $0.name == part }) {
                    guard existing.isFolder else {
                        throw ProviderError.notAFolder("\(part) is a file, not a folder.")
                    }
                    current = existing
                    break
                }
                do {
                    current = try await createFolder(named: part, in: current.id, requestId: UUID.random().uuidString.lowercased())
                    break
                } catch ProviderError.nameTaken where attempt == 0 {
                    continue
                }
            }
        }
        return current
    }

    /// ``download(_:revision:to:progress:)`` into a plain file.
    public func download(_ id: String, revision: String?, to url: URL, progress: @escaping @Sendable (Int64) -> Void) async throws {
        try await download(id, revision: revision, to: DownloadTarget(url: url), progress: progress)
    }
}

/// A provider that tells when something changes there (so the engine pulls at once instead of polling).
public protocol ChangeSignaling: RemoteProvider {
    /// Calls `onChange` whenever something may have changed there, until cancelled; throws when the connection
    /// fails (the caller falls back to ``waitForChanges(after:seconds:)`` and tries again later).
    func watch(onChange: @escaping @Sendable () -> Void) async throws
    /// Returns once something changed after `cursor` (true) or after `seconds` (false): a long-poll.
    func waitForChanges(after cursor: String, seconds: Int) async throws -> Bool
}

/// A provider that lists its whole tree more cheaply than folder by folder (S3: one flat listing of the prefix, a
/// request per 1,000 keys however many folders there are).
public protocol TreeListingProvider: RemoteProvider {
    /// Every item under the root, each folder before what is in it.
    func listTree() async throws -> [RemoteItem]
}

/// Older versions of a file (``ProviderFeatures/revisions``).
public protocol RevisionsProvider: RemoteProvider {
    /// The file's revisions, newest first.
    func revisions(of id: String) async throws -> [FileRevision]
    /// Makes revision `revision` the head again (a new head with its content; history keeps everything).
    func restore(_ id: String, revision: String) async throws -> RemoteItem
}

/// Space used and available (``ProviderFeatures/quota``).
public protocol QuotaProvider: RemoteProvider {
    /// Bytes used there, and the limit (nil: none known).
    func quota() async throws -> (used: Int64, limit: Int64?)
}

/// A provider that makes a new folder with its small new files already in it in fewer requests than a folder and
/// then each file alone (WebDAV on a server that takes no conditional `PUT`: the folder is filled under a hidden name,
/// where nobody else writes, one `PUT` per file, then moved into place with `Overwrite: F` — instead of a `PUT` and a
/// `MOVE` per file). The engine sends a folder's small new files along with its creation when
/// ``fillsNewFolders()`` says so.
public protocol FillsNewFolders: RemoteProvider {
    /// Whether creations with files are worth it on this remote now (learnt once; false: the engine sends the folder
    /// alone, then its files).
    func fillsNewFolders() async -> Bool
    /// The largest file, number of files and total bytes one folder takes along.
    var fillLimits: (fileSize: Int64, files: Int, bytes: Int64) { get }
    /// The fewest files a folder takes along: with fewer, the folder goes alone and its files after it (a fill's own
    /// requests would cost more than the ones it saves). 1 unless the provider says otherwise.
    var fillMinimum: Int { get }
    /// Makes the folder `name` in `parentId` as ``RemoteProvider/createFolder(named:in:requestId:)`` does (the same
    /// request id: a folder already there under the name is this one) with `files` in it (their `parentId` is not
    /// read); the folder and each file's outcome, in order. Thrown: the folder's creation failed, or no answer
    /// arrived (any of it may have been made).
    func createFolder(named name: String, in parentId: String, requestId: String, filledWith files: [BatchFile]) async throws
        -> (folder: RemoteItem, files: [Result<RemoteItem, ProviderError>])
}

extension FillsNewFolders {
    /// One file is enough by default.
    public var fillMinimum: Int { 1 }

    /// The folder, then each file in it with ``RemoteProvider/upload(_:to:requestId:progress:)``, two at a time.
    public func createFolderThenFiles(named name: String, in parentId: String, requestId: String, files: [BatchFile]) async throws
        -> (folder: RemoteItem, files: [Result<RemoteItem, ProviderError>])
    {
        let folder = try await createFolder(named: name, in: parentId, requestId: requestId)
        let answers = try await outcomes(of: files, width: 2) { file in
            try await self.upload(
                file.source, to: .new(parentId: folder.id, name: file.name, mimeType: file.mimeType), requestId: file.requestId) { _ in }
        }
        return (folder, answers)
    }
}

/// Many small new files in one request (``ProviderFeatures/batchUpload``).
public protocol BatchUploadProvider: RemoteProvider {
    /// The largest file, number of files and total bytes one batch takes.
    var batchLimits: (fileSize: Int64, files: Int, bytes: Int64) { get }
    /// Sends each `(source, parentId, name, mimeType, requestId)` as a new file; each succeeds or fails alone,
    /// in order. A thrown error means none of the answers arrived (the requests may have taken effect).
    func uploadBatch(_ files: [BatchFile]) async throws -> [Result<RemoteItem, ProviderError>]
}

extension BatchUploadProvider {
    /// ``uploadBatch(_:)`` for a provider with no batch request of its own (WebDAV, S3): each file its own upload,
    /// `width` at a time, the answers in order. What the engine gains is its own side: a batch of small files is read,
    /// marked sent and recorded in one transaction each, instead of several per file. An error that is not a
    /// ``ProviderError`` (the provider's own bug, a local read) is that file's `.network` failure, tried again later.
    func uploadEach(_ files: [BatchFile], width: Int) async throws -> [Result<RemoteItem, ProviderError>] {
        try await uploadEach(files, width: width) { file in
            try await self.upload(
                file.source, to: .new(parentId: file.parentId, name: file.name, mimeType: file.mimeType), requestId: file.requestId) { _ in }
        }
    }

    /// Each file sent by `send`, `width` at a time; a provider's failure is that file's result.
    func uploadEach(
        _ files: [BatchFile], width: Int, send: @escaping @Sendable (BatchFile) async throws -> RemoteItem
    ) async throws -> [Result<RemoteItem, ProviderError>] {
        try await outcomes(of: files, width: width, send: send)
    }
}

/// Each file sent by `send`, `width` at a time, its outcome in order: a ``ProviderError`` is that file's failure, any
/// other error (the provider's own bug, a local read) its `.network` failure, tried again later.
func outcomes(
    of files: [BatchFile], width: Int, send: @escaping @Sendable (BatchFile) async throws -> RemoteItem
) async throws -> [Result<RemoteItem, ProviderError>] {
    try await inOrder(files, width: width) { file in try await outcome { try await send(file) } }
}

/// What `body` answers, or what it threw as a ``ProviderError`` (any other error is a network one); cancellation is
/// thrown on.
func outcome<Answer>(_ body: () async throws -> Answer) async throws -> Result<Answer, ProviderError> {
    do {
        return .success(try await body())
    } catch let error as ProviderError {
        return .failure(error)
    } catch is CancellationError {
        throw CancellationError()
    } catch {
        return .failure(.network("\(error)"))
    }
}

/// `body` of each of `items`, `width` at a time (the next started as soon as one is done), the answers in the items'
/// order. The first error thrown ends it (the rest are cancelled).
func inOrder<Item: Sendable, Answer: Sendable>(
    _ items: [Item], width: Int, _ body: @escaping @Sendable (Item) async throws -> Answer
) async throws -> [Answer] {
    try await withThrowingTaskGroup(of: (Int, Answer).self) { group in
        var answers = [Answer?](repeating: nil, count: items.count)
        var next = 0
        func start() {
            let index = next
            let item = items[index]
            next += 1
            group.addTask { (index, try await body(item)) }
        }
        while next < min(max(1, Turns.width(width)), items.count) { start() }
        while let (index, answer) = try await group.next() {
            answers[index] = answer
            if next < items.count { start() }
        }
        return answers.compactMap { $0 }
    }
}

/// A provider with no batch request of its own (WebDAV, S3) that still takes small new files in batches: the engine
/// reads, marks sent and records a batch in one transaction each, and each file is its own upload here, two at a time
/// (`uploadEach(_:width:)`). Widths of 4 and batches of 16 measured the same.
public protocol UploadsEachInBatches: BatchUploadProvider {}

extension UploadsEachInBatches {
    /// Files up to 1 MiB, 32 files and 16 MiB a batch.
    public var batchLimits: (fileSize: Int64, files: Int, bytes: Int64) { (1 << 20, 32, 16 << 20) }

    /// Each file its own upload, two at a time; each outcome in order.
    public func uploadBatch(_ files: [BatchFile]) async throws -> [Result<RemoteItem, ProviderError>] {
        try await uploadEach(files, width: 2)
    }
}

/// A new file of a batch (``BatchUploadProvider/uploadBatch(_:)``).
public struct BatchFile: Sendable {
    /// Its content.
    public var source: UploadSource
    /// The folder it goes in.
    public var parentId: String
    /// Its name there.
    public var name: String
    /// Its MIME type, if known.
    public var mimeType: String?
    /// The request id that makes its creation safe to retry.
    public var requestId: String

    /// A new file named `name` in `parentId`, created under `requestId`.
    public init(source: UploadSource, parentId: String, name: String, mimeType: String?, requestId: String) {
        self.source = source
        self.parentId = parentId
        self.name = name
        self.mimeType = mimeType
        self.requestId = requestId
    }
}
