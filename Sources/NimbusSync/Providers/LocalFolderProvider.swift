#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Crypto
import Foundation
import NimbusAPI

/// A folder on a mounted disk or NAS as the remote (rclone's `local`, the seed's LocalFileSystem).
///
/// Items are named by their path below the folder (`a/b.txt`; the root is `/`), so a move there changes the id.
/// A file's revision is its modification time, size and inode; its SHA-256 is computed when it is listed and
/// kept (in the ``ProviderStateStore``) until its revision changes. There is no change feed: the engine lists.
/// Writes go to a temporary file beside the target, checked against the checksum and fsynced, then renamed into
/// place, so no half file is ever visible; a new file never replaces one that appeared meanwhile. Deleted files,
/// and versions a new version replaces, go to `.nimbus-trash/` in the folder (hidden from listings).
public final class LocalFolderProvider: RemoteProvider {
    /// The folder that is the remote.
    public let root: URL
    let state: any ProviderStateStore
    /// The root folder's inode as ``root()`` last saw it (a folder made again at the path has another).
    let rootInode = LockedBox<UInt64?>(nil)
    static let trashName = ".nimbus-trash"
    static let partialPrefix = PartialUploads.prefix

    /// Idempotent creations, a trash (`.nimbus-trash/`), SHA-256 checksums and the root's inode; no feed, no
    /// conditional writes.
    public var features: ProviderFeatures { ProviderFeatures(idempotentCreate: true, trash: true, checksums: true, rootIdentity: rootIdentity) }

    /// The folder at `root` as a remote, keeping its small state (checksums by inode and time) in `state`.
    public init(root: URL, state: any ProviderStateStore) {
        self.root = root.standardizedFileURL
        self.state = state
    }

    // MARK: Paths

    static let rootId = ProviderPath.root

    func url(_ id: String) -> URL { id == Self.rootId ? root : root.appending(path: id) }

    // MARK: Reading

    public func root() async throws -> RemoteItem {
        guard let info = Self.lstat(root.path), info.st_mode & S_IFMT == S_IFDIR else {
            throw ProviderError.rootMissing("\(root.path) is not a folder (is the disk mounted?).")
        }
        rootInode.withLock { $0 = UInt64(info.st_ino) }
        return RemoteItem(id: Self.rootId, parentId: nil, name: "", isFolder: true, modifiedAt: Self.modified(info))
    }

    public func item(_ id: String) async throws -> RemoteItem {
        guard let item = try describe(id) else { throw ProviderError.notFound }
        return item
    }

    public func children(of folderId: String) async throws -> [RemoteItem] {
        let folder = url(folderId)
        guard let info = Self.lstat(folder.path), info.st_mode & S_IFMT == S_IFDIR else { throw ProviderError.notFound }
        let names: [String]
        do { names = try FileManager.default.contentsOfDirectory(atPath: folder.path) } catch { throw ProviderError.notFound }
        var items: [RemoteItem] = []
        for name in names.sorted() {
            if folderId == Self.rootId && name == Self.trashName { continue }
            if name.hasPrefix(Self.partialPrefix) {
                // An upload given up a day ago (see PartialUploads) goes; one under way stays.
                let path = url(ProviderPath.child(name, in: folderId)).path
                if let info = Self.lstat(path), info.st_mode & S_IFMT == S_IFREG, PartialUploads.isStale(name, modifiedAt: Self.modified(info)) {
                    unlink(path)
                }
                continue
            }
            if let item = try describe(ProviderPath.child(name, in: folderId)) { items.append(item) }
        }
        return items
    }

    /// The item at `id`, with its checksum (computed unless known for this revision); nil for anything that is not
    /// a regular file or a folder (links are not followed) or that is gone.
    func describe(_ id: String) throws -> RemoteItem? {
        let path = url(id).path
        guard let info = Self.lstat(path) else { return nil }
        let type = info.st_mode & S_IFMT
        let name = ProviderPath.name(of: id)
        if type == S_IFDIR {
            return RemoteItem(id: id, parentId: ProviderPath.parent(of: id), name: name, isFolder: true, modifiedAt: Self.modified(info))
        }
        guard type == S_IFREG else { return nil }
        let revision = Self.revision(info)
        let key = "local.sha256.\(id)"
        var checksum: String?
        if let cached = try state.value(for: key), cached.hasPrefix(revision + " ") {
            checksum = String(cached.dropFirst(revision.count + 1))
        } else {
            guard let (hash, _) = try? FileHasher.sha256(of: URL(fileURLWithPath: path)) else { return nil }
            // Only what did not change while it was read.
            guard let after = Self.lstat(path), Self.revision(after) == revision else { return nil }
            checksum = hash
            try state.setValue(revision + " " + hash, for: key)
        }
        return RemoteItem(
            id: id, parentId: ProviderPath.parent(of: id), name: name, isFolder: false, size: Int64(info.st_size), revision: revision, checksum: checksum,
            mimeType: MimeType.guess(forName: name), modifiedAt: Self.modified(info))
    }

    public func startCursor() async throws -> String {
        throw ProviderError.unsupported("A local folder has no change feed; it is listed.")
    }

    public func changes(since cursor: String) async throws -> ChangePage {
        throw ProviderError.unsupported("A local folder has no change feed; it is listed.")
    }

    // MARK: Writing

    public func createFolder(named name: String, in parentId: String, requestId: String) async throws -> RemoteItem {
        let name = try ProviderPath.validated(name)
        let id = ProviderPath.child(name, in: parentId)
        guard let parent = Self.lstat(url(parentId).path), parent.st_mode & S_IFMT == S_IFDIR else { throw ProviderError.notFound }
        if mkdir(url(id).path, 0o755) != 0 {
            guard errno == EEXIST else { throw Self.posixError("create \(id)") }
            // Already there: the folder a lost answer made (or the same folder made elsewhere) is this folder.
            guard let existing = try describe(id), existing.isFolder else { throw ProviderError.nameTaken(existing: id) }
            return existing
        }
        guard let item = try describe(id) else { throw ProviderError.notFound }
        return item
    }

    public func upload(
        _ source: UploadSource, to target: UploadTarget, requestId: String, progress: @escaping @Sendable (Int64) -> Void
    ) async throws -> RemoteItem {
        let id: String
        switch target {
        case .new(let parentId, let name, _):
            id = ProviderPath.child(try ProviderPath.validated(name), in: parentId)
            guard let parent = Self.lstat(url(parentId).path), parent.st_mode & S_IFMT == S_IFDIR else { throw ProviderError.notFound }
        case .version(let fileId, _):
            id = fileId
            guard let current = Self.lstat(url(id).path), current.st_mode & S_IFMT == S_IFREG else { throw ProviderError.notFound }
        }
        let target_ = url(id)
        // Named after the request: a retry after a crash writes over what the crashed upload left.
        let temporary = target_.deletingLastPathComponent().appending(
            path: PartialUploads.name(requestId: requestId, parentId: ProviderPath.parent(of: id) ?? ProviderPath.root))
        defer { unlink(temporary.path) }
        try copy(source, to: temporary, progress: progress)
        switch target {
        case .new:
            if try DiskOperations.renameNoReplace(temporary.path, to: target_.path) { break }
            // Something holds the name: this very content (a retry after a lost answer) is this file.
            if let existing = try describe(id), !existing.isFolder, existing.checksum == source.checksum { return existing }
            throw ProviderError.nameTaken(existing: id)
        case .version(_, let base):
            guard let current = try describe(id), !current.isFolder else { throw ProviderError.notFound }
            if let base, current.revision != base {
                if current.checksum == source.checksum { return current }  // already these bytes (a retry)
                throw ProviderError.versionConflict(current: current)
            }
            // The version it replaces goes to the trash (nothing is lost by last-writer-wins).
            try keepInTrash(id)
            guard rename(temporary.path, target_.path) == 0 else { throw Self.posixError("replace \(id)") }
        }
        // The file keeps the time it was last changed on the device that sent it (set once in place: a leftover
        // partial is told by its age).
        if let modified = source.modified { POSIXFileSystem.setModified(target_.path, to: modified) }
        guard let item = try describe(id) else { throw ProviderError.notFound }
        return item
    }

    /// Copies `source` to `destination`, hashing on the way; refuses bytes that do not match the checksum.
    func copy(_ source: UploadSource, to destination: URL, progress: @escaping @Sendable (Int64) -> Void) throws {
        let input: ContentReader
        do { input = try source.open() } catch { throw ProviderError.checksumMismatch }
        defer { input.close() }
        guard FileManager.default.createFile(atPath: destination.path, contents: nil, attributes: [.posixPermissions: 0o644]) else {
            throw Self.posixError("write in \(destination.deletingLastPathComponent().path)")
        }
        let output = try FileHandle(forWritingTo: destination)
        defer { try? output.close() }
        var hasher = SHA256()
        var size: Int64 = 0
        // No more than was scanned: a file that grew since sends those bytes (the growth is its next version).
        // A write that fails (the disk there full) is said plainly, not as a Foundation error's dump.
        func writing(_ body: () throws -> Void) throws {
            do { try body() } catch {
                if LocalWriteError(path: root.path, size: nil, underlying: error).outOfSpace {
                    throw ProviderError.quotaExceeded("not enough space on the disk of \(root.path)")
                }
                throw ProviderError.server(status: 0, code: .other("write_failed"), message: "could not write in \(root.path): \(LocalWriteError.reason(error))")
            }
        }
        while size < source.size, let data = try input.read(upToCount: Int(min(1024 * 1024, source.size - size))), !data.isEmpty {
            hasher.update(data: data)
            try writing { try output.write(contentsOf: data) }
            size += Int64(data.count)
            progress(size)
        }
        // A file that grew since it was scanned is refused as changed (scanned again, sent whole in the same run).
        if let extra = try? input.read(upToCount: 1), !extra.isEmpty { throw ProviderError.checksumMismatch }
        try writing { try output.synchronize() }
        guard size == source.size, FileHasher.hex(hasher.finalize()) == source.checksum else { throw ProviderError.checksumMismatch }
    }

    public func download(_ id: String, revision: String?, to destination: DownloadTarget, progress: @escaping @Sendable (Int64) -> Void) async throws {
        guard let before = Self.lstat(url(id).path), before.st_mode & S_IFMT == S_IFREG else { throw ProviderError.notFound }
        if let revision, Self.revision(before) != revision { throw ProviderError.versionConflict(current: try describe(id)) }
        let input: FileHandle
        do { input = try FileHandle(forReadingFrom: url(id)) } catch { throw ProviderError.notFound }
        defer { try? input.close() }
        let output = try destination.open()
        defer { try? output.close() }
        var offset = Int64(try output.seekToEnd())
        if offset > Int64(before.st_size) {
            try output.truncate(atOffset: 0)
            offset = 0
        }
        try input.seek(toOffset: UInt64(offset))
        while let data = try input.read(upToCount: 1024 * 1024), !data.isEmpty {
            try output.write(contentsOf: data)
            offset += Int64(data.count)
            progress(offset)
        }
        try output.synchronize()
        guard let after = Self.lstat(url(id).path), Self.revision(after) == Self.revision(before) else {
            // It changed while it was read: what was written is not one revision.
            try output.truncate(atOffset: 0)
            throw ProviderError.versionConflict(current: try describe(id))
        }
    }

    public func move(_ id: String, to parentId: String, name: String) async throws -> RemoteItem {
        let name = try ProviderPath.validated(name)
        let destination = ProviderPath.child(name, in: parentId)
        guard Self.lstat(url(id).path) != nil else { throw ProviderError.notFound }
        guard let parent = Self.lstat(url(parentId).path), parent.st_mode & S_IFMT == S_IFDIR else { throw ProviderError.notFound }
        if destination == id { return try await item(id) }
        if parentId == id || parentId.hasPrefix(id + "/") {
            throw ProviderError.invalid("A folder cannot be moved into itself or one of its subfolders.")
        }
        guard try DiskOperations.renameNoReplace(url(id).path, to: url(destination).path) else { throw ProviderError.nameTaken(existing: destination) }
        return try await item(destination)
    }

    public func delete(_ id: String) async throws {
        guard id != Self.rootId else { throw ProviderError.invalid("The root cannot be deleted.") }
        guard Self.lstat(url(id).path) != nil else { throw ProviderError.notFound }
        try keepInTrash(id)
    }

    /// Moves what is at `id` into `.nimbus-trash/<time>/<id>`.
    func keepInTrash(_ id: String) throws {
        let stamp = String(Int64(Date().timeIntervalSince1970 * 1000))
        let destination = root.appending(path: Self.trashName).appending(path: stamp).appending(path: id)
        try FileManager.default.createDirectory(at: destination.deletingLastPathComponent(), withIntermediateDirectories: true)
        guard rename(url(id).path, destination.path) == 0 else {
            if errno == ENOENT { throw ProviderError.notFound }
            throw Self.posixError("move \(id) to the trash")
        }
    }

    // MARK: POSIX

    static func lstat(_ path: String) -> stat? { lstatInfo(path) }

    static func revision(_ info: stat) -> String {
        #if os(Linux)
            let nanos = Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec)
        #else
            let nanos = Int64(info.st_mtimespec.tv_sec) * 1_000_000_000 + Int64(info.st_mtimespec.tv_nsec)
        #endif
        return "\(nanos)-\(info.st_size)-\(info.st_ino)"
    }

    static func modified(_ info: stat) -> Date {
        #if os(Linux)
            Date(timeIntervalSince1970: TimeInterval(info.st_mtim.tv_sec) + TimeInterval(info.st_mtim.tv_nsec) / 1e9)
        #else
            Date(timeIntervalSince1970: TimeInterval(info.st_mtimespec.tv_sec) + TimeInterval(info.st_mtimespec.tv_nsec) / 1e9)
        #endif
    }

    static func posixError(_ what: String) -> ProviderError {
        let code = errno
        if code == ENOSPC || code == EDQUOT { return .quotaExceeded("No space left on the disk to \(what).") }
        if code == ENOENT { return .notFound }
        return .server(status: 0, code: .other("errno_\(code)"), message: "Could not \(what): \(String(cString: strerror(code))).")
    }
}

extension LocalFolderProvider {
    /// The root's inode (not the device: a network share mounted again may get another device number), for
    /// ``ProviderFeatures/rootIdentity``.
    var rootIdentity: String? { rootInode.withLock { $0 }.map { "inode \($0)" } }
}
