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
private func lstatInfo(_ path: String) -> stat? {
    var info = stat()
    return lstat(path, &info) == 0 ? info : nil
}
