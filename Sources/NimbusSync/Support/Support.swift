import Crypto
import NimbusAPI
import Foundation

/// A value behind a lock, for state that synchronous callbacks (stream terminations) must reach.
public final class LockedBox<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value

    /// A box holding `value`.
    public init(_ value: Value) { self.value = value }

    /// Runs `body` with the value, under the lock.
    public func withLock<T>(_ body: (inout Value) throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}

/// SplitMix64: small, fast, and the same sequence for the same seed on every platform.
@_spi(Testing) public struct SeededRandom: RandomNumberGenerator, Sendable {
    private var state: UInt64

    /// A generator whose sequence is fixed by `seed`.
    public init(seed: UInt64) { state = seed }

    /// The next number of the sequence.
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// Exponential backoff with full jitter: a random delay in `[0, min(cap, base·2^attempt)]`, but never less
/// than the server's `Retry-After`.
enum Backoff {
    static func delay(attempt: Int, base: Duration, cap: Duration, retryAfter: Int?, random: inout some RandomNumberGenerator) -> TimeInterval {
        let baseSeconds = Double(base.components.seconds) + Double(base.components.attoseconds) / 1e18
        let capSeconds = Double(cap.components.seconds) + Double(cap.components.attoseconds) / 1e18
        let ceiling = min(capSeconds, baseSeconds * pow(2, Double(min(attempt, 30))))
        let jittered = Double.random(in: 0...max(ceiling, 0.001), using: &random)
        return max(jittered, Double(retryAfter ?? 0))
    }
}

/// SHA-256 of a file, read in pieces of at most 1 MiB (never whole into memory).
public enum FileHasher {
    /// The lowercase hex SHA-256 of the file at `url` and its size, read in pieces.
    public static func sha256(of url: URL) throws -> (checksum: String, size: Int64) {
        // POSIX reads into one buffer sized to the file (up to 1 MiB): a folder sync hashes thousands of small
        // files, and FileHandle's 1 MiB Data per read was a fresh mmap and munmap for each.
        let descriptor = open(url.path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw readError(url) }
        defer { close(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0 else { throw readError(url) }
        if status.st_size >= overlapMinimum { return try overlapped(descriptor, url) }
        var buffer = [UInt8](repeating: 0, count: max(1, min(1 << 20, Int(status.st_size) + 1)))
        var hasher = SHA256()
        var size: Int64 = 0
        while true {
            let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw readError(url)
            }
            if count == 0 { break }
            buffer.withUnsafeBytes { hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: $0[..<count])) }
            size += Int64(count)
        }
        return (hex(hasher.finalize()), size)
    }

    /// Files this big are read on a thread of their own while this one hashes (the copy out of the page cache is
    /// about a fifth of the work: a 1 GiB file took 0.77 s read then hashed in turn, SHA-256 alone is ~0.6 s here).
    static let overlapMinimum: Int = 32 << 20

    /// A ring of buffers a reader thread fills (4 MiB each, 16 MiB in all) and the caller hashes in order.
    private final class Ring: @unchecked Sendable {
        static let pieces = 4
        static let pieceSize = 4 << 20
        let memory = UnsafeMutableRawBufferPointer.allocate(byteCount: pieces * pieceSize, alignment: 4096)
        /// Bytes in each piece (0: the end), or -1 with `failure` set: a read failed.
        var counts = [Int](repeating: 0, count: pieces)
        var failure: Int32 = 0
        let filled = DispatchSemaphore(value: 0)
        let free = DispatchSemaphore(value: pieces)
        /// Set by the caller when it stops early: the reader stops at its next piece.
        var stop = false

        func piece(_ index: Int) -> UnsafeMutableRawBufferPointer {
            UnsafeMutableRawBufferPointer(rebasing: memory[(index % Self.pieces) * Self.pieceSize..<(index % Self.pieces + 1) * Self.pieceSize])
        }

        deinit { memory.deallocate() }
    }

    static func overlapped(_ descriptor: Int32, _ url: URL) throws -> (checksum: String, size: Int64) {
        let ring = Ring()
        let done = DispatchSemaphore(value: 0)
        let reader = Thread {
            var index = 0
            while true {
                ring.free.wait()
                if ring.stop { break }
                let count = fill(descriptor, ring.piece(index))
                ring.counts[index % Ring.pieces] = count ?? -1
                if count == nil { ring.failure = errno }
                ring.filled.signal()
                if (count ?? 0) < Ring.pieceSize { break }
                index += 1
            }
            done.signal()
        }
        reader.start()
        var hasher = SHA256()
        var size: Int64 = 0
        var index = 0
        var failed = false
        while true {
            ring.filled.wait()
            let count = ring.counts[index % Ring.pieces]
            if count < 0 {
                failed = true
                break
            }
            hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: ring.piece(index)[..<count]))
            size += Int64(count)
            ring.free.signal()
            if count < Ring.pieceSize { break }
            index += 1
        }
        ring.stop = true
        ring.free.signal()
        done.wait()  // the reader is done with the descriptor and the buffers before either goes
        if failed {
            errno = ring.failure
            throw readError(url)
        }
        return (hex(hasher.finalize()), size)
    }

    /// Fills `buffer` from `descriptor` (from its position, or from `offset` with `pread`, the position left alone):
    /// fewer bytes only at the end of the file; nil on an error (`errno` says which).
    static func fill(_ descriptor: Int32, _ buffer: UnsafeMutableRawBufferPointer, at offset: Int64? = nil) -> Int? {
        guard let base = buffer.baseAddress else { return 0 }
        var count = 0
        while count < buffer.count {
            let got =
                if let offset { pread(descriptor, base + count, buffer.count - count, off_t(offset) + off_t(count)) }
                else { read(descriptor, base + count, buffer.count - count) }
            if got < 0 {
                if errno == EINTR { continue }
                return nil
            }
            if got == 0 { break }
            count += got
        }
        return count
    }

    /// The error FileHandle would give for the current `errno` ("… couldn’t be opened because there is no such file").
    static func readError(_ url: URL) -> CocoaError {
        let code: CocoaError.Code = switch errno {
        case ENOENT: .fileReadNoSuchFile
        case EACCES, EPERM: .fileReadNoPermission
        default: .fileReadUnknown
        }
        return CocoaError(code, userInfo: [NSFilePathErrorKey: url.path, NSUnderlyingErrorKey: POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)])
    }

    /// The size of the regular file at `path` (one `stat`), or nil when it is missing or not a regular file.
    public static func regularFileSize(_ path: String) -> Int64? {
        var status = stat()
        guard stat(path, &status) == 0, status.st_mode & S_IFMT == S_IFREG else { return nil }
        return Int64(status.st_size)
    }

    /// Whether `path` is a pipe or a socket (standard input fed by `|`): content that can be copied once, read to
    /// its end, but has no size beforehand and cannot be read again.
    public static func isStream(_ path: String) -> Bool {
        var status = stat()
        guard stat(path, &status) == 0 else { return false }
        return status.st_mode & S_IFMT == S_IFIFO || status.st_mode & S_IFMT == S_IFSOCK
    }

    static func hex(_ digest: some Sequence<UInt8>) -> String {
        Hex.encode(digest)
    }

    /// Copies `source` to `destination` (which must not exist), hashing on the way, and fsyncs the copy.
    static func copy(_ source: URL, to destination: URL) throws -> (checksum: String, size: Int64) {
        let input = try FileHandle(forReadingFrom: source)
        defer { try? input.close() }
        guard FileManager.default.createFile(atPath: destination.path, contents: nil, attributes: [.posixPermissions: 0o600]) else {
            throw SyncError.localFile("Could not create \(destination.path).")
        }
        let output = try FileHandle(forWritingTo: destination)
        defer { try? output.close() }
        var hasher = SHA256()
        var size: Int64 = 0
        while let data = try input.read(upToCount: 1024 * 1024), !data.isEmpty {
            hasher.update(data: data)
            try output.write(contentsOf: data)
            size += Int64(data.count)
        }
        try output.synchronize()
        return (hex(hasher.finalize()), size)
    }
}

/// Where new item ids and request ids come from: the system's random numbers — or, inside
/// `IdentitySource.$seeded.withValue(_:)`, a seeded sequence, so that a deterministic simulation replays exactly (the
/// planner orders its steps by id, so random ids reorder the requests a seed makes, and which of them fail). Keys,
/// nonces and salts never come from here.
enum IdentitySource {
    /// A seeded sequence shared by everything a simulation's seed runs (behind a lock).
    final class Seeded: Sendable {
        private let random: LockedBox<SeededRandom>
        init(seed: UInt64) { random = LockedBox(SeededRandom(seed: seed)) }
        func next() -> UInt64 { random.withLock { $0.next() } }
    }

    @TaskLocal static var seeded: Seeded?

    /// 64 bits: the seeded sequence's next, or the system's.
    static func next() -> UInt64 {
        if let seeded { return seeded.next() }
        var generator = SystemRandomNumberGenerator()
        return generator.next()
    }
}

extension UUID {
    /// A random (version 4) UUID from the system generator (``IdentitySource``): Foundation's `UUID()` on Linux opens
    /// and reads /dev/urandom for each one, which queueing thousands of operations felt.
    static func random() -> UUID {
        var bytes = (IdentitySource.next(), IdentitySource.next())
        return withUnsafeMutableBytes(of: &bytes) { raw in
            raw[6] = raw[6] & 0x0f | 0x40  // version 4
            raw[8] = raw[8] & 0x3f | 0x80  // RFC 4122 variant
            return UUID(uuid: raw.load(as: uuid_t.self))
        }
    }
}
