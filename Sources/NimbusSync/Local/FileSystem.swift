#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation

/// One entry as `lstat(2)` sees it.
public struct FileStat: Sendable, Equatable {
    /// What kind of entry it is.
    public enum Kind: Sendable, Equatable {
        /// A regular file.
        case file
        /// A directory.
        case folder
        /// A symbolic link (never followed).
        case link
        /// A device, socket, pipe…: never synced.
        case other
    }

    /// What kind of entry it is.
    public var kind: Kind
    /// Its inode number: a file renamed or moved keeps it.
    public var inode: UInt64
    /// Its size in bytes.
    public var size: Int64
    /// Modification time, nanoseconds since 1970.
    public var mtime: Int64
    /// Last access, nanoseconds since 1970 (0: not known). Only a hint for the cache limit's "least recently used":
    /// Linux's default `relatime` moves it at the first read after a change or once a day, `noatime` never; reading
    /// a file moves it, so it is left out of `==` (a file hashed is not a file changed).
    public var atime: Int64

    /// An entry as `lstat(2)` would describe it.
    public init(kind: Kind, inode: UInt64, size: Int64, mtime: Int64, atime: Int64 = 0) {
        self.kind = kind
        self.inode = inode
        self.size = size
        self.mtime = mtime
        self.atime = atime
    }

    public static func == (a: FileStat, b: FileStat) -> Bool {
        a.kind == b.kind && a.inode == b.inode && a.size == b.size && a.mtime == b.mtime
    }

    /// Same file, same bytes as far as a stat can tell.
    func matches(inode: Int64?, size: Int64?, mtime: Int64?) -> Bool {
        Int64(bitPattern: self.inode) == inode && (kind == .folder || (self.size == size && self.mtime == mtime))
    }
}

/// The disk a synced folder lives on, as the engine uses it. ``POSIXFileSystem`` is the real one; the
/// deterministic simulation uses an in-memory one that lets "users" write at any moment, including between the
/// moment the engine looks at a file and the moment it acts on it. Paths are absolute.
public protocol FileSystem: Sendable {
    /// `lstat`: nil when nothing is there. Links are reported, never followed.
    func stat(_ path: String) -> FileStat?
    /// The names in a folder.
    func contents(ofFolder path: String) throws -> [String]
    /// SHA-256 and size of a file's content.
    func hash(_ path: String) throws -> (checksum: String, size: Int64)
    /// The same; with `cutting`, a file system may also cut big files into chunks in the same pass, for their upload
    /// by blocks (a speed-up only: the default hashes).
    func hash(_ path: String, cutting: Bool) throws -> (checksum: String, size: Int64)
    /// A small file's content (`.nimbusignore`); nil when there is none.
    func read(_ path: String) -> Data?
    /// Creates a folder; false if something is already there.
    func makeFolder(_ path: String) throws -> Bool
    /// Removes a file (not a folder).
    func removeFile(_ path: String) throws
    /// Removes an empty folder; fails if it is not empty.
    func removeFolder(_ path: String) throws
    /// Renames `from` to `to` only if nothing is at `to`; false if something is.
    func renameNoReplace(_ from: String, to: String) throws -> Bool
    /// Renames `from` to `to`, replacing a file there.
    func rename(_ from: String, to: String) throws
    /// Moves a file from the real disk (a finished download in the engine's store) to `path` (which must be free).
    /// It gets the permissions of the file at `modeOf` (the version it replaces: an executable stays executable), or
    /// those of a new file (0666 less the umask), not the store's private 0600.
    /// `modified`: its modification time, the remote's (a downloaded file keeps the time of its change there, as
    /// rclone and Dropbox do); nil: now.
    func importFile(_ source: URL, to path: String, modeOf existing: String?, modified: Date?) throws
    /// A real file with the content at `path` for a provider to read: the file itself on a real disk.
    func exportFile(_ path: String) throws -> URL
    /// The clock file times are compared with (a file modified moments ago is still being written).
    func now() -> Date
}

extension FileSystem {
    /// The file's SHA-256 and size; a file system that can also cut it into content-defined chunks in the same
    /// pass does when `cutting` is set (this default only hashes).
    public func hash(_ path: String, cutting: Bool) throws -> (checksum: String, size: Int64) { try hash(path) }

    /// ``importFile(_:to:modeOf:modified:)`` with the current time as the file's modification time.
    public func importFile(_ source: URL, to path: String, modeOf existing: String?) throws {
        try importFile(source, to: path, modeOf: existing, modified: nil)
    }
}

/// The real disk.
public struct POSIXFileSystem: FileSystem {
    /// The real disk.
    public init() {}

    /// The entry at `path` as `lstat(2)` sees it, or nil if there is none.
    public func stat(_ path: String) -> FileStat? {
        guard let info = lstatInfo(path) else { return nil }
        let kind: FileStat.Kind =
            switch info.st_mode & S_IFMT {
            case S_IFREG: .file
            case S_IFDIR: .folder
            case S_IFLNK: .link
            default: .other
            }
        #if os(Linux)
            let mtime = Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec)
            let atime = Int64(info.st_atim.tv_sec) * 1_000_000_000 + Int64(info.st_atim.tv_nsec)
        #else
            let mtime = Int64(info.st_mtimespec.tv_sec) * 1_000_000_000 + Int64(info.st_mtimespec.tv_nsec)
            let atime = Int64(info.st_atimespec.tv_sec) * 1_000_000_000 + Int64(info.st_atimespec.tv_nsec)
        #endif
        return FileStat(kind: kind, inode: UInt64(info.st_ino), size: Int64(info.st_size), mtime: mtime, atime: atime)
    }

    /// The names in the folder at `path`.
    public func contents(ofFolder path: String) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: path)
    }

    /// The file's SHA-256 (lowercase hex) and size, read in pieces.
    public func hash(_ path: String) throws -> (checksum: String, size: Int64) {
        try FileHasher.sha256(of: URL(fileURLWithPath: path))
    }

    /// Big files cut as well when `cutting` (`LocalChunking.hashAndCut(_:)`): their upload takes the chunks.
    public func hash(_ path: String, cutting: Bool) throws -> (checksum: String, size: Int64) {
        guard cutting, let size = stat(path)?.size, size >= LocalChunking.cutMinimum else { return try hash(path) }
        return try LocalChunking.hashAndCut(URL(fileURLWithPath: path))
    }

    /// The file's whole content (small files only), or nil.
    public func read(_ path: String) -> Data? { FileManager.default.contents(atPath: path) }

    /// Makes a folder at `path`; false if something is there already.
    public func makeFolder(_ path: String) throws -> Bool {
        if mkdir(path, 0o755) == 0 { return true }
        if errno == EEXIST { return false }
        throw SyncError.localFile("Could not create the folder \(path) (\(String(cString: strerror(errno)))).")
    }

    /// Deletes the file at `path`.
    public func removeFile(_ path: String) throws {
        guard unlink(path) == 0 || errno == ENOENT else { throw SyncError.localFile("Could not delete \(path) (\(String(cString: strerror(errno)))).") }
    }

    /// Deletes the (empty) folder at `path`.
    public func removeFolder(_ path: String) throws {
        guard rmdir(path) == 0 || errno == ENOENT else { throw SyncError.localFile("Could not delete the folder \(path) (\(String(cString: strerror(errno)))).") }
    }

    /// Renames `from` to `to` only if nothing is at `to` (`renameat2(RENAME_NOREPLACE)`); false if something is.
    public func renameNoReplace(_ from: String, to: String) throws -> Bool {
        try DiskOperations.renameNoReplace(from, to: to)
    }

    /// Renames `from` to `to`, replacing a file there.
    public func rename(_ from: String, to: String) throws {
        guard Foundation.rename(from, to) == 0 else { throw SyncError.localFile("Could not move \(from) to \(to) (\(String(cString: strerror(errno)))).") }
    }

    /// Moves `source` to `path` with the permissions of `existing` (or a new file's) and the given modification time.
    public func importFile(_ source: URL, to path: String, modeOf existing: String?, modified: Date?) throws {
        if Foundation.rename(source.path, path) != 0 {
            // Another file system: copy, then drop the engine's copy. A copy that fails (the disk full) leaves nothing
            // behind: a partial copy kept the space it took, and the disk stayed full.
            do {
                try FileManager.default.copyItem(atPath: source.path, toPath: path)
            } catch {
                try? FileManager.default.removeItem(atPath: path)
                throw LocalWriteError(path: path, size: stat(source.path)?.size, underlying: error)
            }
            try? FileManager.default.removeItem(at: source)
        }
        Self.giveMode(path, of: existing)
        if let modified { Self.setModified(path, to: modified) }
    }

    /// The modification time a downloaded file gets: that of the remote version, so a file keeps the time of its last
    /// change across devices (as rclone and Dropbox keep it) — but never later than three seconds ago. The engine
    /// records the file's stat as it places it; a save made right after, in place and of the same size, must change
    /// that stat, and it gets the clock's time: were the download's time that same time (the remote's, from another
    /// device's clock, or now, in a file system that keeps whole seconds or two), the save would look like nothing
    /// happened and never be sent. A remote that gave none (before 2001), or one in the future, or within those three
    /// seconds, gives three seconds ago.
    public static func keptModificationTime(_ remote: Date?, now: Date) -> Date {
        let latest = now.addingTimeInterval(-3)
        guard let remote, remote.timeIntervalSince1970 > 978_307_200, remote <= latest else { return latest }
        return remote
    }

    /// Sets the file's modification time (not following a link; the access time is left as it is).
    public static func setModified(_ path: String, to date: Date) {
        let seconds = date.timeIntervalSince1970.rounded(.down)
        // UTIME_OMIT, a macro Swift does not import: the access time stays.
        #if os(Linux)
            let omit = (1 << 30) - 2
        #else
            let omit = -2
        #endif
        var times = [
            timespec(tv_sec: 0, tv_nsec: omit),
            timespec(tv_sec: Int(seconds), tv_nsec: Int((date.timeIntervalSince1970 - seconds) * 1e9)),
        ]
        _ = utimensat(AT_FDCWD, path, &times, AT_SYMLINK_NOFOLLOW)
    }

    /// Gives the file at `path` the permissions of the regular file at `existing` (the version it replaces), or those
    /// of a new file (0666 less the umask) when there is none: a download is made private (0600) in the store.
    public static func giveMode(_ path: String, of existing: String?) {
        var info = Foundation.stat()
        let mode: mode_t = if let existing, lstat(existing, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG {
            info.st_mode & 0o7777
        } else {
            0o666 & ~Self.umask
        }
        _ = chmod(path, mode)
    }

    /// The process's umask, read once (setting it back at once: the call that reads it also sets it).
    static let umask: mode_t = {
        let mask = Foundation.umask(0o022)
        _ = Foundation.umask(mask)
        return mask
    }()

    /// The file itself: on the real disk, `path` is readable as it is.
    public func exportFile(_ path: String) throws -> URL { URL(fileURLWithPath: path) }

    /// The system clock.
    public func now() -> Date { Date() }
}

/// A file could not be written into the synced folder, said plainly (the disk full, no permission) rather than as a
/// Foundation error's dump; nothing was left there, and it is tried again.
public struct LocalWriteError: Error, CustomStringConvertible {
    /// The file that could not be written.
    public let path: String
    /// How many bytes it needed, when known.
    public let size: Int64?
    /// The POSIX error, when the failure carried one.
    public let code: Int32?

    /// The failure to write `path` (`size` bytes), from the error the write threw.
    public init(path: String, size: Int64?, underlying: any Error) {
        self.path = path
        self.size = size
        code = Self.posixCode(of: underlying)
    }

    /// The POSIX error a Foundation error carries, if any.
    public static func posixCode(of error: any Error) -> Int32? {
        let nsError = error as NSError
        if nsError.domain == NSPOSIXErrorDomain { return Int32(nsError.code) }
        if let inner = nsError.userInfo[NSUnderlyingErrorKey] as? NSError, inner.domain == NSPOSIXErrorDomain { return Int32(inner.code) }
        if nsError.domain == NSCocoaErrorDomain {
            switch CocoaError.Code(rawValue: nsError.code) {
            case .fileWriteOutOfSpace: return ENOSPC
            case .fileReadNoPermission, .fileWriteNoPermission: return EACCES
            default: return nil
            }
        }
        return nil
    }

    /// Why reading or writing failed, in a few words ("Permission denied").
    public static func reason(_ error: any Error) -> String {
        if let code = posixCode(of: error) { return String(cString: strerror(code)) }
        return (error as NSError).localizedDescription
    }

    /// The disk (or the user's quota on it) is full.
    public var outOfSpace: Bool { code == ENOSPC || code == EDQUOT }

    /// What failed and what to do, in words for the user.
    public var description: String {
        let folder = (path as NSString).deletingLastPathComponent
        let needed = size.map { " (\(ByteCountFormatter.string(fromByteCount: $0, countStyle: .file)))" } ?? ""
        if outOfSpace {
            return "not enough space on the disk of \(folder) to bring it here\(needed); nothing was left there, it is tried again at the next sync"
        }
        return code.map { "could not write it into \(folder): \(String(cString: strerror($0)))" } ?? "could not write it into \(folder)"
    }
}
