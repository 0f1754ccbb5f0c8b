import Foundation

/// A small disk for tests that fill one: a tmpfs of a given size mounted on a folder (needs root with the
/// capability to mount, as the tests have in CI). Unmounted lazily (`umount -l`), so a file a child process still
/// holds open never keeps it mounted.
public struct SmallDisk: Sendable {
    public let path: URL

    /// Whether this process may mount one (tried once).
    public static let canMount: Bool = {
        guard getuid() == 0 else { return false }
        let point = FileManager.default.temporaryDirectory.appending(path: "nimbus-mount-probe-\(UUID().uuidString)")
        guard (try? FileManager.default.createDirectory(at: point, withIntermediateDirectories: true)) != nil else { return false }
        defer { try? FileManager.default.removeItem(at: point) }
        guard let disk = try? SmallDisk.mount(at: point, megabytes: 1) else { return false }
        disk.unmount()
        return true
    }()

    /// Mounts a tmpfs of `megabytes` on the folder `path` (made if missing).
    public static func mount(at path: URL, megabytes: Int) throws -> SmallDisk {
        try FileManager.default.createDirectory(at: path, withIntermediateDirectories: true)
        let mounted = try Spawned.run("/usr/bin/mount", ["-t", "tmpfs", "-o", "size=\(megabytes)m", "tmpfs", path.path])
        guard mounted.status == 0 else { throw Failure("mounting a \(megabytes) MB tmpfs on \(path.path) failed: \(String(decoding: mounted.errors, as: UTF8.self))") }
        return SmallDisk(path: path)
    }

    /// Makes it `megabytes` big, keeping what it holds (room made, or taken away).
    public func resize(megabytes: Int) throws {
        let resized = try Spawned.run("/usr/bin/mount", ["-o", "remount,size=\(megabytes)m", path.path])
        guard resized.status == 0 else { throw Failure("resizing the tmpfs on \(path.path) failed: \(String(decoding: resized.errors, as: UTF8.self))") }
    }

    public func unmount() {
        _ = try? Spawned.run("/usr/bin/umount", ["-l", path.path])
    }

    struct Failure: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }
}
