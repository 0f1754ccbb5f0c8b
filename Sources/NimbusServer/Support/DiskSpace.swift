import Foundation
import GRDB
import NimbusAPI

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The server's own disks: uploads are refused with 507 before they would leave less than the reserve free, so the
/// database always has room for what frees space (sign-ins, deletions, emptying the trash); a write that finds the
/// disk full anyway (filled by something else) is a 507 too, never a 500.
enum DiskSpace {
    /// Bytes available to this process on the filesystem holding `path`, or nil when it cannot be asked.
    static func available(at path: String) -> Int64? {
        var stats = statvfs()
        guard statvfs(path, &stats) == 0 else { return nil }
        return Int64(stats.f_bavail) * Int64(stats.f_frsize)
    }

    static var fullError: DriveError {
        .storageFull("The server's disk is full; nothing was stored. Free space (delete files and empty the trash) or ask the server's admin.")
    }

    /// Whether `error` says a disk or its quota is full: ENOSPC/EDQUOT from a write, SQLite's SQLITE_FULL,
    /// PostgreSQL's disk_full (53100).
    static func isFull(_ error: any Error) -> Bool {
        if let failure = error as? POSIXFile.Failure { return failure.code == ENOSPC || failure.code == EDQUOT }
        if let error = error as? DatabaseError { return error.resultCode == .SQLITE_FULL }
        if let error = error as? POSIXError { return error.code == .ENOSPC || error.code == .EDQUOT }
        let nsError = error as NSError
        if nsError.domain == NSPOSIXErrorDomain { return nsError.code == Int(ENOSPC) || nsError.code == Int(EDQUOT) }
        if let underlying = nsError.userInfo[NSUnderlyingErrorKey] as? NSError, underlying.domain == NSPOSIXErrorDomain {
            return underlying.code == Int(ENOSPC) || underlying.code == Int(EDQUOT)
        }
        let text = String(reflecting: error)
        return text.contains("53100") || text.contains("disk_full") || text.contains("No space left on device")
    }
}

extension Dependencies {
    /// Refuses (507) an upload of `bytes` that would leave less than the configured reserve free on the disk of the
    /// local block store or of the embedded database. Remote stores (S3, PostgreSQL) are not asked.
    func ensureRoom(for bytes: Int64) throws {
        // Blocks or the database (or both) live in the data folder unless both are elsewhere (PostgreSQL and S3).
        guard configuration.blobs == nil || configuration.database == nil else { return }
        let reserve = configuration.minimumFreeSpace
        guard let free = DiskSpace.available(at: configuration.dataDirectory.path) else { return }
        if free - max(0, bytes) < reserve {
            throw DriveError.storageFull(
                "The server's disk is nearly full (\(ByteCount.format(free)) free, \(ByteCount.format(reserve)) kept in reserve); "
                    + "this upload (\(ByteCount.format(bytes))) was refused and nothing was stored. Free space by deleting files and emptying the trash.")
        }
    }
}

/// A file of allocated space kept on the embedded database's disk (`reserve` in the data folder). When a database write finds
/// the disk full, the file is deleted and the write tried again, so a full disk still lets a user sign in and free
/// space; it is made again once the disk has room.
struct DiskReserve: Sendable {
    let path: String
    let size: Int64

    init(directory: URL, minimumFreeSpace: Int64) {
        path = directory.appending(path: "reserve").path
        size = max(1 << 20, min(minimumFreeSpace / 2, 32 << 20))
    }

    var exists: Bool { FileManager.default.fileExists(atPath: path) }

    /// Deletes the reserve; true when there was one to give up.
    func release() -> Bool {
        unlink(path) == 0
    }

    /// Makes the reserve when it is missing and the disk has room for it and more (`spare` beyond it).
    func replenish(spare: Int64) {
        guard !exists, let free = DiskSpace.available(at: (path as NSString).deletingLastPathComponent), free > size + spare else { return }
        let partial = path + ".partial"
        unlink(partial)
        guard let fd = try? POSIXFile.openForWriting(partial) else { return }
        var ok = true
        #if canImport(Glibc)
        // Allocated without writing a byte (a sparse file would reserve nothing).
        ok = posix_fallocate(fd, 0, off_t(size)) == 0
        #else
        let chunk = [UInt8](repeating: 0, count: 1 << 20)
        var written: Int64 = 0
        while written < size && ok {
            let count = Int(min(Int64(chunk.count), size - written))
            ok = (try? chunk.withUnsafeBytes { try POSIXFile.writeAll(fd, UnsafeRawBufferPointer(rebasing: $0[0..<count]), path: partial) }) != nil
            written += Int64(count)
        }
        #endif
        ok = ok && (try? POSIXFile.sync(fd, path: partial)) != nil
        close(fd)
        if ok && rename(partial, path) == 0 { return }
        unlink(partial)
    }
}
