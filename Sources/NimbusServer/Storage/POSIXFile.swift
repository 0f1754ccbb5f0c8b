#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation

/// Thin, throwing wrappers over the POSIX calls that durability depends on (open, write, fsync, rename).
///
/// Foundation's file APIs do not expose `fsync` of a directory, and "durable before acknowledged" needs it:
/// a renamed file is only durable once its directory entry is.
enum POSIXFile {
    struct Failure: Error, CustomStringConvertible {
        var call: String
        var path: String
        var code: Int32
        var description: String { "\(call)(\(path)) failed: \(String(cString: strerror(code)))" }
    }

    static func openForWriting(_ path: String) throws -> Int32 {
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw Failure(call: "open", path: path, code: errno) }
        return fd
    }

    static func openForReading(_ path: String) throws -> Int32 {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw Failure(call: "open", path: path, code: errno) }
        return fd
    }

    /// Writes all of `bytes` at the current offset, retrying short writes and EINTR.
    static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, path: String) throws {
        var offset = 0
        while offset < bytes.count {
            let written = write(fd, bytes.baseAddress! + offset, bytes.count - offset)
            if written < 0 {
                if errno == EINTR { continue }
                throw Failure(call: "write", path: path, code: errno)
            }
            offset += written
        }
    }

    /// Reads up to `count` bytes at `offset` into `into`; fewer only at the end of the file.
    static func readInto(_ fd: Int32, _ into: UnsafeMutableRawPointer, count: Int, at offset: Int64, path: String) throws -> Int {
        var filled = 0
        while filled < count {
            let n = pread(fd, into + filled, count - filled, off_t(offset) + off_t(filled))
            if n < 0 {
                if errno == EINTR { continue }
                throw Failure(call: "pread", path: path, code: errno)
            }
            if n == 0 { break }
            filled += n
        }
        return filled
    }

    /// Reads up to `count` bytes at `offset` into a new array (shorter only at end of file).
    static func read(_ fd: Int32, count: Int, at offset: Int64, path: String) throws -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: count)
        let filled = try buffer.withUnsafeMutableBytes { raw in
            guard let base = raw.baseAddress else { return 0 }
            return try readInto(fd, base, count: count, at: offset, path: path)
        }
        buffer.removeLast(count - filled)
        return buffer
    }

    /// The whole file (for staged blocks, a few MiB at most).
    static func readAll(_ path: String) throws -> [UInt8] {
        let fd = try openForReading(path)
        defer { closeFile(fd) }
        var result: [UInt8] = []
        while true {
            let piece = try read(fd, count: 1024 * 1024, at: Int64(result.count), path: path)
            if piece.isEmpty { return result }
            result += piece
        }
    }

    /// The size of the open file.
    static func size(_ fd: Int32, path: String) throws -> Int64 {
        let end = lseek(fd, 0, SEEK_END)
        guard end >= 0 else { throw Failure(call: "lseek", path: path, code: errno) }
        return Int64(end)
    }

    static func sync(_ fd: Int32, path: String) throws {
        guard fsync(fd) == 0 else { throw Failure(call: "fsync", path: path, code: errno) }
    }

    static func closeFile(_ fd: Int32) {
        _ = close(fd)
    }

    /// fsyncs a directory so that entries created or renamed in it survive a crash.
    static func syncDirectory(_ path: String) throws {
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw Failure(call: "open", path: path, code: errno) }
        defer { _ = close(fd) }
        guard fsync(fd) == 0 else { throw Failure(call: "fsync", path: path, code: errno) }
    }

    static func move(_ from: String, to: String) throws {
        guard rename(from, to) == 0 else { throw Failure(call: "rename", path: to, code: errno) }
    }

    static func exists(_ path: String) -> Bool {
        access(path, F_OK) == 0
    }

    /// Removes a file; a file that is already gone is not an error.
    static func remove(_ path: String) throws {
        if unlink(path) != 0 && errno != ENOENT {
            throw Failure(call: "unlink", path: path, code: errno)
        }
    }

    /// Writes a small file durably: to `path.tmp`, fsynced, renamed over `path`, the folder fsynced.
    static func writeDurably(_ bytes: some Collection<UInt8>, to path: String) throws {
        let temporary = path + ".tmp"
        try remove(temporary)
        let fd = try openForWriting(temporary)
        defer { closeFile(fd) }
        try Array(bytes).withUnsafeBytes { try writeAll(fd, $0, path: temporary) }
        try sync(fd, path: temporary)
        try move(temporary, to: path)
        try syncDirectory((path as NSString).deletingLastPathComponent)
    }

    static func makeDirectory(_ path: String) throws {
        if mkdir(path, 0o700) != 0 && errno != EEXIST {
            throw Failure(call: "mkdir", path: path, code: errno)
        }
    }
}
