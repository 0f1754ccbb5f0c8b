import Crypto
import Foundation
import NIOConcurrencyHelpers
import NimbusAPI
@testable import NimbusSync

/// The Nimbus provider as a remote with neither a change feed nor checksums (what WebDAV and foreign S3 objects look
/// like to the engine): every round lists the tree, and files are compared by reading them (`learnChecksum`). Seeds
/// ≡ 3 (mod 4) of the folder simulation run with it, so those paths run inside the simulation too. With
/// `treeVersions` (seeds ≡ 7 mod 8), a folder's revision is a digest of everything beneath it, read when it is
/// listed (a collection ETag that propagates), so the engine skips listing unchanged subtrees.
///
/// With `pathIds` (seeds ≡ 6 mod 8) items are named by their path below the root, as WebDAV, S3 and local-folder
/// remotes name them: a move there changes the id of the item and of everything beneath it, and an item moved by
/// another device is gone from its old path and new at the other (recognised as a move only by its checksum, which
/// seeds ≡ 14 mod 16 show, as S3 and local folders do; ≡ 6 mod 16 hide it, as WebDAV does). Each call finds the
/// item at the path as it is then, like a request by path.
///
/// With `unhashed` (the WebDAV-like seeds: tree versions, or path ids without checksums) it takes unhashed uploads, as
/// WebDAV does: new files go unhashed and are hashed here as they are taken (a third of the sizes it will not take so,
/// and the engine reads them first) — so the scan leaves every new file unread.
///
/// With `fills` (seeds ≡ 16–31 mod 32 of each kind) it fills new folders, as WebDAV does on a server without
/// conditional `PUT`s: a new folder is made with up to 8 of its small new files (up to 40 KB: the size from which the
/// unhashed seeds leave new files unread, so these are hashed), the folder and then each file; in half of them only
/// a folder with at least 3 (``FillsNewFolders/fillMinimum``).
public final class ListedProvider: RemoteProvider, HashesWhileSending, FillsNewFolders, @unchecked Sendable {
    let inner: NimbusProvider
    let treeVersions: Bool
    let pathIds: Bool
    let checksums: Bool
    let unhashed: Bool
    let fills: Bool
    public let fillMinimum: Int

    let rootGate: RootGate?
    /// Told of a request the engine should not have made (a fill where none is offered, or below the minimum).
    let violation: @Sendable (String) -> Void

    /// `inner` as a remote without a feed, with the behaviours given (see above).
    public init(
        inner: NimbusProvider, treeVersions: Bool = false, pathIds: Bool = false, checksums: Bool = false, unhashed: Bool = false,
        fills: Bool = false, fillMinimum: Int = 1, rootGate: RootGate? = nil, violation: @escaping @Sendable (String) -> Void
    ) {
        self.violation = violation
        self.inner = inner
        self.treeVersions = treeVersions
        self.pathIds = pathIds
        self.checksums = checksums
        self.unhashed = unhashed
        self.fills = fills
        self.fillMinimum = fillMinimum
        self.rootGate = rootGate
    }

    public var unhashedMinimum: Int64? { unhashed ? (fills ? Self.fillSize : 1) : nil }
    static let fillSize: Int64 = 40_000

    public func fillsNewFolders() async -> Bool { fills }
    public var fillLimits: (fileSize: Int64, files: Int, bytes: Int64) { (Self.fillSize, 8, 200_000) }
    public func createFolder(named name: String, in parentId: String, requestId: String, filledWith files: [BatchFile]) async throws
        -> (folder: RemoteItem, files: [Result<RemoteItem, ProviderError>])
    {
        if !fills { violation("a folder filled by a remote that said it does not fill them now") }
        if files.count < fillMinimum { violation("a fill of \(files.count) files, below the provider's minimum of \(fillMinimum)") }
        return try await createFolderThenFiles(named: name, in: parentId, requestId: requestId, files: files)
    }
    /// As WebDAV's with proven ETags: a round that sent files does not list again (the WebDAV-like seeds).
    var answersAsListed: Bool { unhashed }
    public func takesUnhashed(size: Int64) async -> Bool { unhashed && size % 3 != 0 }

    /// An unhashed source, hashed as WebDAV's upload does while it sends (the export is a snapshot: the bytes the
    /// inner provider gets are the ones hashed), then checked unchanged before it takes its name.
    func hashed(_ source: UploadSource) throws -> UploadSource {
        guard !source.isHashed else { return source }
        let (checksum, size) = try FileHasher.sha256(of: source.url)
        guard size == source.size, source.unchanged?() != false else { throw ProviderError.checksumMismatch }
        var hashed = UploadSource(url: source.url, size: size, checksum: checksum)
        hashed.modified = source.modified
        return hashed
    }

    /// The Nimbus provider's writes (conditional, idempotent, resumable, to a trash), without its feed, batches,
    /// blocks, revisions or quota; checksums and tree versions as the seed says; unhashed uploads and new folders
    /// filled offered always (``unhashedMinimum`` and ``fillsNewFolders()`` say whether they are used).
    public var features: ProviderFeatures {
        var features = ProviderFeatures(
            conditionalWrite: true, idempotentCreate: true, resumableUploads: true, trash: true, checksums: checksums, treeVersions: treeVersions,
            answersAsListed: answersAsListed)
        features.unhashedUploads = self
        features.newFolderFilling = self
        return features
    }

    /// A digest of the folder's id and of everything beneath it (ids, names, revisions).
    func treeVersion(of folderId: String) async throws -> String {
        var lines = [folderId]
        for child in try await inner.children(of: folderId) {
            let below = child.isFolder ? try await treeVersion(of: child.id) : (child.revision ?? "")
            lines.append("\(child.id)\t\(child.name)\t\(below)")
        }
        return SHA256.hash(data: Data(lines.sorted().joined(separator: "\n").utf8)).map { String(format: "%02x", $0) }.joined()
    }

    /// `item` as this remote shows it: with the folder's tree version (when on), without its checksum (unless
    /// shown), named by `path` (with path ids).
    func shown(_ item: RemoteItem, path: String? = nil) async throws -> RemoteItem {
        var item = item
        if treeVersions, item.isFolder { item.revision = try await treeVersion(of: item.id) }
        if !checksums { item.checksum = nil }
        if pathIds {
            let path = try await self.path(item, known: path)
            item.id = path
            item.parentId = ProviderPath.parent(of: path)
        }
        return item
    }

    /// The path of an item of the inner provider (its parents walked up to the root), unless known.
    func path(_ item: RemoteItem, known: String?) async throws -> String {
        if let known { return known }
        let rootId = try await inner.root().id
        var names: [String] = []
        var current = item
        while current.id != rootId {
            names.append(current.name)
            guard let parent = current.parentId, names.count < 100 else { throw ProviderError.notFound }
            current = try await inner.item(parent)
        }
        return names.isEmpty ? ProviderPath.root : names.reversed().joined(separator: "/")
    }

    /// The inner provider's id of what is at `id` now (with path ids: found name by name from the root).
    func innerId(_ id: String) async throws -> String {
        guard pathIds else { return id }
        var current = try await inner.root().id
        guard id != ProviderPath.root else { return current }
        for name in id.split(separator: "/") {
            guard let child = try await inner.children(of: current).first(where: { $0.name == name }) else { throw ProviderError.notFound }
            current = child.id
        }
        return current
    }

    /// A refusal, with the items it names as this remote names them.
    func translated<T>(_ path: String?, _ body: () async throws -> T) async throws -> T {
        do { return try await body() } catch let error as ProviderError where pathIds {
            switch error {
            case .nameTaken(let existing): throw ProviderError.nameTaken(existing: existing == nil ? nil : path)
            case .versionConflict(let current):
                throw ProviderError.versionConflict(current: current == nil ? nil : try? await shown(current!, path: path))
            case .requestIdReused(let existing):
                // The item that request made, named by its path now (one in the trash by a path that is not there).
                guard let existing else { throw error }
                guard let made = try? await inner.item(existing), !made.isDeleted else { throw ProviderError.requestIdReused(existing: ".gone/\(existing)") }
                throw ProviderError.requestIdReused(existing: try await self.path(made, known: nil))
            default: throw error
            }
        }
    }

    public func root() async throws -> RemoteItem {
        if rootGate?.gone.withLockedValue({ $0 }) == true {
            throw ProviderError.rootMissing("The folder is not there (deleted, or never made).")
        }
        return try await shown(try await inner.root(), path: pathIds ? ProviderPath.root : nil)
    }
    public func item(_ id: String) async throws -> RemoteItem { try await shown(try await inner.item(try await innerId(id)), path: pathIds ? id : nil) }
    public func children(of folderId: String) async throws -> [RemoteItem] {
        var listed: [RemoteItem] = []
        for child in try await inner.children(of: try await innerId(folderId)) {
            listed.append(try await shown(child, path: pathIds ? ProviderPath.child(child.name, in: folderId) : nil))
        }
        return listed
    }
    public func startCursor() async throws -> String { throw ProviderError.unsupported("listed") }
    public func changes(since cursor: String) async throws -> ChangePage { throw ProviderError.unsupported("listed") }
    public func createFolder(named name: String, in parentId: String, requestId: String) async throws -> RemoteItem {
        let path = pathIds ? ProviderPath.child(name, in: parentId) : nil
        return try await translated(path) {
            try await shown(try await inner.createFolder(named: name, in: try await innerId(parentId), requestId: requestId), path: path)
        }
    }
    public func upload(_ source: UploadSource, to target: UploadTarget, requestId: String, progress: @escaping @Sendable (Int64) -> Void) async throws
        -> RemoteItem
    {
        switch target {
        case .new(let parentId, let name, let mimeType):
            let path = pathIds ? ProviderPath.child(name, in: parentId) : nil
            let wasHashed = source.isHashed
            let source = try hashed(source)
            return try await translated(path) {
                let made = try await inner.upload(
                    source, to: .new(parentId: try await innerId(parentId), name: name, mimeType: mimeType), requestId: requestId, progress: progress)
                // (A retried creation whose file was deleted meanwhile is found in the trash: not at this path.)
                var shown = try await shown(made, path: made.isDeleted ? nil : path)
                if !wasHashed { shown.checksum = source.checksum }  // an unhashed upload's answer tells what was sent
                return shown
            }
        case .version(let id, let base):
            guard source.isHashed else { throw ProviderError.invalid("unhashed version") }
            let path = pathIds ? id : nil
            return try await translated(path) {
                try await shown(try await inner.upload(source, to: .version(of: try await innerId(id), base: base), requestId: requestId, progress: progress), path: path)
            }
        }
    }
    public func download(_ id: String, revision: String?, to destination: DownloadTarget, progress: @escaping @Sendable (Int64) -> Void) async throws {
        try await inner.download(try await innerId(id), revision: revision, to: destination, progress: progress)
    }
    public func move(_ id: String, to parentId: String, name: String) async throws -> RemoteItem {
        let path = pathIds ? ProviderPath.child(name, in: parentId) : nil
        return try await translated(path) {
            try await shown(try await inner.move(try await innerId(id), to: try await innerId(parentId), name: name), path: path)
        }
    }
    public func delete(_ id: String) async throws { try await inner.delete(try await innerId(id)) }
}

/// Whether a listed remote's root folder is there (a test deletes it "from a web UI" and makes it again).
public final class RootGate: Sendable {
    public let gone = NIOLockedValueBox(false)
    public init() {}
}
