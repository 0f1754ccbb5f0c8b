#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation

/// Tells when something under a folder may have changed. Linux uses inotify; other platforms can plug in
/// FSEvents; ``PollingWatcher`` works everywhere.
public protocol FolderWatcher: Sendable {
    /// Calls `onChange` after changes under `root`, until cancelled.
    func watch(_ root: URL, onChange: @escaping @Sendable () -> Void) async throws
}

/// Checks every `interval` (the sync cycle's scan finds what changed).
public struct PollingWatcher: FolderWatcher {
    /// How often it says "something may have changed".
    public var interval: Duration
    /// A watcher that fires every `interval`.
    public init(interval: Duration = .seconds(2)) { self.interval = interval }

    /// Calls `onChange` every ``interval`` until cancelled.
    public func watch(_ root: URL, onChange: @escaping @Sendable () -> Void) async throws {
        while !Task.isCancelled {
            try await Task.sleep(for: interval)
            onChange()
        }
    }
}

#if os(Linux)
/// inotify on every folder of the tree (new folders are added as they appear).
public struct InotifyWatcher: FolderWatcher {
    /// An inotify watcher.
    public init() {}

    /// Calls `onChange` after changes anywhere under `root` (folders made later included), until cancelled.
    public func watch(_ root: URL, onChange: @escaping @Sendable () -> Void) async throws {
        let fd = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        guard fd >= 0 else { throw SyncError.localFile("inotify is not available (errno \(errno)).") }
        defer { close(fd) }
        let mask = UInt32(IN_CREATE | IN_DELETE | IN_MODIFY | IN_MOVED_FROM | IN_MOVED_TO | IN_CLOSE_WRITE | IN_ATTRIB | IN_DELETE_SELF)
        var watched: [Int32: String] = [:]
        func addTree(_ path: String) {
            var stack = [path]
            while let directory = stack.popLast() {
                let descriptor = inotify_add_watch(fd, directory, mask)
                if descriptor >= 0 { watched[descriptor] = directory }
                for name in (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [] {
                    var isDirectory: ObjCBool = false
                    let child = directory + "/" + name
                    if FileManager.default.fileExists(atPath: child, isDirectory: &isDirectory), isDirectory.boolValue,
                        (try? FileManager.default.destinationOfSymbolicLink(atPath: child)) == nil
                    {
                        stack.append(child)
                    }
                }
            }
        }
        addTree(root.path)
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while !Task.isCancelled {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count <= 0 {
                try await Task.sleep(for: .milliseconds(100))
                continue
            }
            var offset = 0
            var sawDirectory = false
            while offset + MemoryLayout<inotify_event>.size <= count {
                let event = buffer.withUnsafeBytes { $0.load(fromByteOffset: offset, as: inotify_event.self) }
                if event.mask & UInt32(IN_ISDIR) != 0 && event.mask & UInt32(IN_CREATE | IN_MOVED_TO) != 0 { sawDirectory = true }
                offset += MemoryLayout<inotify_event>.size + Int(event.len)
            }
            if sawDirectory { addTree(root.path) }
            onChange()
        }
    }
}
#endif

extension FolderSync {
    /// How often a watch looks at the remote when nothing woke it: a remote with a change feed announces its
    /// changes (the interval is a fallback); one without is listed — every 15 s where one request tells whether
    /// anything changed (collection ETags that propagate: Nextcloud, ownCloud, Nimbus's `/dav/`), every 30 s where
    /// the listing walks the tree (as often as Nextcloud's desktop client polls).
    public static func pollInterval(for features: ProviderFeatures) -> Duration {
        if features.changeFeed { return .seconds(60) }
        if features.treeVersions { return .seconds(15) }
        return .seconds(30)
    }

    /// Syncs now, then again after every change here (the watcher) or there (the server's events), debounced,
    /// and at least every `interval` (by default ``pollInterval(for:)`` of the remote); until cancelled. Each cycle's
    /// report goes to `onCycle`.
    public func watch(
        watcher: (any FolderWatcher)? = nil, debounce: Duration = .milliseconds(200), interval: Duration? = nil,
        onCycle: @escaping @Sendable (FolderSyncReport) -> Void
    ) async throws {
        #if os(Linux)
            let watcher = watcher ?? InotifyWatcher()
        #else
            let watcher = watcher ?? PollingWatcher()
        #endif
        let signal = Signal()
        let root = self.root
        let engine = self.engine
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await watcher.watch(root, onChange: { signal.fire() }) }
            group.addTask { await engine.watchServer(onChange: { signal.fire() }) }
            group.addTask {
                // The remote unreachable: tried again after 5 s, then 10, 20, … up to the usual interval (the poll
                // interval alone kept a watch offline for up to a minute after its server was back).
                var offlineWait: Duration = .seconds(5)
                while !Task.isCancelled {
                    var offline = false
                    do {
                        let report = try await self.syncOnce()
                        offline = report.offline
                        onCycle(report)
                        if let settles = await self.nextSettle {
                            // Look again as soon as the file written first has been quiet for the settle time
                            // (a file still being written then is skipped again: at most a round per settle time).
                            let wait = max(0.01, settles.timeIntervalSinceNow + 0.01)
                            try await Task.sleep(for: .milliseconds(Int64(wait * 1000)))
                            continue
                        }
                    } catch is CancellationError {
                        return
                    } catch {
                        var report = FolderSyncReport()
                        report.errors.append("\(error)")
                        onCycle(report)
                    }
                    // (Asked each time: a WebDAV remote learns at its first listing whether its ETags propagate.)
                    let features = await engine.remoteFeatures
                    var wait = interval ?? Self.pollInterval(for: features)
                    if offline {
                        wait = min(wait, offlineWait)
                        offlineWait = min(offlineWait * 2, .seconds(60))
                    } else {
                        offlineWait = .seconds(5)
                    }
                    await signal.wait(timeout: wait)
                    // Debounce: let a burst of changes settle.
                    try await Task.sleep(for: debounce)
                }
            }
            try await group.next()
            group.cancelAll()
        }
    }
}
