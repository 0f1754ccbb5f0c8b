#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation

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
        static let renameat2: Renameat2? = dlsym(nil, "renameat2").map { unsafeBitCast($0, to: Renameat2.self) }
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
        guard lstatInfo(to) == nil else { return false }
        guard rename(from, to) == 0 else { throw SyncError.localFile("Could not move \(from) to \(to) (errno \(errno)).") }
        return true
    }
}
