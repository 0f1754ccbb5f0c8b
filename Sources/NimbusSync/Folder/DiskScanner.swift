#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation

/// One entry of a synced folder on disk.
struct DiskEntry: Sendable, Equatable {
    var path: String
    var isDirectory: Bool
    var inode: UInt64
    var size: Int64
    /// Modification time in nanoseconds since 1970.
    var mtime: Int64
}

/// Walks a folder without following symbolic links (a link is skipped and reported, so nothing outside the
/// folder is ever read), applying the ignore rules.
struct DiskScanner {
    let root: URL
    let ignore: IgnoreRules

    struct Result {
        var entries: [String: DiskEntry] = [:]
        var skippedLinks: [String] = []
    }

    func scan() throws -> Result {
        var result = Result()
        var stack = [""]
        while let relative = stack.popLast() {
            let directory = relative.isEmpty ? root.path : root.path + "/" + relative
            let names: [String]
            do {
                names = try FileManager.default.contentsOfDirectory(atPath: directory)
            } catch {
                if relative.isEmpty { throw SyncError.localFile("Cannot read the folder \(root.path): \(error.localizedDescription)") }
                continue
            }
            for name in names {
                let path = relative.isEmpty ? name : relative + "/" + name
                guard let entry = Self.stat(root.path + "/" + path, relative: path) else { continue }
                if entry.isLink {
                    result.skippedLinks.append(path)
                    continue
                }
                if ignore.ignores(path, isDirectory: entry.entry.isDirectory) { continue }
                result.entries[path] = entry.entry
                if entry.entry.isDirectory { stack.append(path) }
            }
        }
        return result
    }

    /// `lstat` of one path; `nil` if it vanished or is neither a regular file, a folder nor a link.
    static func stat(_ absolute: String, relative: String) -> (entry: DiskEntry, isLink: Bool)? {
        guard let info = lstatInfo(absolute) else { return nil }
        let type = info.st_mode & S_IFMT
        #if os(Linux)
            let mtime = Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec)
        #else
            let mtime = Int64(info.st_mtimespec.tv_sec) * 1_000_000_000 + Int64(info.st_mtimespec.tv_nsec)
        #endif
        let entry = DiskEntry(
            path: relative, isDirectory: type == S_IFDIR, inode: UInt64(info.st_ino), size: Int64(info.st_size), mtime: mtime)
        if type == S_IFLNK { return (entry, true) }
        guard type == S_IFDIR || type == S_IFREG else { return nil }
        return (entry, false)
    }
}

/// `lstat(2)` (does not follow a final symbolic link).
func lstatInfo(_ path: String) -> stat? {
    var info = stat()
    return lstat(path, &info) == 0 ? info : nil
}

/// Disk steps that must not destroy what they do not expect.
enum DiskOperations {
    #if os(Linux)
        /// glibc's renameat2 (2.28+), looked up at run time: Swift does not import it.
        typealias Renameat2 = @convention(c) (Int32, UnsafePointer<CChar>, Int32, UnsafePointer<CChar>, UInt32) -> Int32
        nonisolated(unsafe) static let renameat2: Renameat2? = dlsym(nil, "renameat2").map { unsafeBitCast($0, to: Renameat2.self) }
    #endif

    /// Renames `from` to `to` only if nothing is at `to` (never replacing a file that appeared there meanwhile);
    /// `false` if something is. Linux: renameat2(RENAME_NOREPLACE); Darwin: renamex_np(RENAME_EXCL); elsewhere,
    /// or on a file system without them, a hard link then unlink (files) or a check then rename (folders).
    static func renameNoReplace(_ from: String, to: String) throws -> Bool {
        #if os(Linux)
            if let renameat2 = Self.renameat2 {
                if renameat2(AT_FDCWD, from, AT_FDCWD, to, 1 /* RENAME_NOREPLACE */) == 0 { return true }
                if errno == EEXIST { return false }
                guard errno == EINVAL || errno == ENOSYS else { throw SyncError.localFile("Could not move \(from) to \(to) (errno \(errno)).") }
            }
        #elseif canImport(Darwin)
            if renamex_np(from, to, UInt32(RENAME_EXCL)) == 0 { return true }
            if errno == EEXIST { return false }
            guard errno == ENOTSUP || errno == EINVAL else { throw SyncError.localFile("Could not move \(from) to \(to) (errno \(errno)).") }
        #endif
        if link(from, to) == 0 {
            unlink(from)
            return true
        }
        if errno == EEXIST { return false }
        guard DiskScanner.stat(to, relative: to) == nil else { return false }
        guard rename(from, to) == 0 else { throw SyncError.localFile("Could not move \(from) to \(to) (errno \(errno)).") }
        return true
    }
}
