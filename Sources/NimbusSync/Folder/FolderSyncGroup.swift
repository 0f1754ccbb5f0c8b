import Foundation
import NimbusAPI

extension FolderSync {
    /// One cycle that ends settled: files still being written are synced once they settle (it ends when everything
    /// that was here when it started has been looked at, or after `settleLimit` seconds of a file that keeps changing,
    /// which is reported); a round that changed something is followed by a look at the folder, and a file saved while
    /// it ran (after it was sent) goes in another round, up to three — so its end means the folder as it is now is
    /// synced. Steps that failed and are due again within seconds (a deletion paused a moment ago by the server, a
    /// conflict being settled) are waited for, a few times; what still waits is said in ``FolderSyncReport/errors``.
    public func syncUntilSettled(settleLimit: TimeInterval = 30) async throws -> FolderSyncReport {
        let deadline = Date().addingTimeInterval(settleLimit)
        var report = try await settledRound(settleLimit: settleLimit)
        var again = 0
        while again < 3, Date() < deadline, report.changed > 0, report.errors.isEmpty, try await changedSinceLastLook() > 0 {
            again += 1
            report.absorb(try await settledRound(settleLimit: settleLimit))
        }
        return report
    }

    /// A cycle, then more while files found still being written settle, then the retries due within seconds.
    private func settledRound(settleLimit: TimeInterval) async throws -> FolderSyncReport {
        var report = try await syncOnce()
        let deadline = Date().addingTimeInterval(settleLimit)
        while !report.changing.isEmpty, Date() < deadline {
            let settles = nextSettle ?? Date().addingTimeInterval(0.5)
            try await Task.sleep(for: .milliseconds(Int64(max(0.05, settles.timeIntervalSinceNow + 0.05) * 1000)))
            report.absorb(try await syncOnce())
        }
        var retries = 0
        while retries < 3, !report.remoteFailed, let next = try await waitingRetries().next, next.timeIntervalSinceNow < 10 {
            retries += 1
            try await Task.sleep(for: .milliseconds(Int64(max(0.05, next.timeIntervalSinceNow + 0.05) * 1000)))
            // (The errors of the earlier tries are replaced by this one's: they were tried again.)
            report.absorb(try await syncOnce())
        }
        let waiting = try await waitingRetries()
        if waiting.count > 0, report.errors.isEmpty {
            let seconds = max(1, Int((waiting.next?.timeIntervalSinceNow ?? 0).rounded(.up)))
            report.errors.append(
                "\(waiting.count) change\(waiting.count == 1 ? "" : "s") failed and will be tried again (in \(seconds) s); run the sync again, or use --watch.")
        }
        return report
    }
}

/// One folder synced with several remotes (a NAS, a cloud, a second server): a ``FolderSync`` per remote, run so that
/// what arrives from one reaches the others. A remote whose rounds cannot run at all (signed out there, its folder
/// gone) is paused and the others go on; with a single remote, that failure is thrown.
public struct FolderSyncGroup: Sendable {
    /// A remote of the folder: its name (as the caller names remotes) and the pair's sync.
    public struct Pair: Sendable {
        public let remote: String
        public let folder: FolderSync

        public init(remote: String, folder: FolderSync) {
            self.remote = remote
            self.folder = folder
        }
    }

    /// What a run did: every remote's reports added up (their errors kept, each named by its remote when there are
    /// several), and the remotes paused, with why.
    public struct Report: Sendable {
        public var total = FolderSyncReport()
        public var paused: [(remote: String, error: SyncError)] = []

        /// Whether anything failed (a step, or a whole remote).
        public var failed: Bool { !total.errors.isEmpty || !paused.isEmpty }
    }

    public let pairs: [Pair]

    public init(_ pairs: [Pair]) { self.pairs = pairs }

    /// Syncs with every remote until a pass changes nothing (at most 5 passes with several remotes; one with a single
    /// remote), each cycle ending settled (``FolderSync/syncUntilSettled(settleLimit:)``). `onCycle` hears each
    /// remote's cycle as it ends (with the pass it belongs to), or why the remote was paused. Throws only a single
    /// remote's failure.
    public func syncOnce(onCycle: (_ remote: String, _ outcome: Result<FolderSyncReport, SyncError>, _ pass: Int) -> Void = { _, _, _ in })
        async throws -> Report
    {
        var report = Report()
        var paused: Set<String> = []
        for pass in 0..<(pairs.count > 1 ? 5 : 1) {
            var changed = 0
            for pair in pairs where !paused.contains(pair.remote) {
                do {
                    let cycle = try await pair.folder.syncUntilSettled()
                    onCycle(pair.remote, .success(cycle), pass)
                    changed += cycle.changed
                    let errors = report.total.errors + cycle.errors
                    report.total.absorb(cycle)
                    report.total.errors = errors
                } catch let error as SyncError {
                    onCycle(pair.remote, .failure(error), pass)
                    guard pairs.count > 1 else { throw error }
                    paused.insert(pair.remote)
                    report.paused.append((pair.remote, error))
                }
            }
            if changed == 0 { break }
        }
        return report
    }

    /// Keeps every remote in sync (``FolderSync/watch(watcher:debounce:interval:onCycle:)``), side by side, until
    /// cancelled. `onCycle` hears each remote's cycles; `onPaused` a remote whose watch failed (the others go on). With
    /// a single remote its failure is thrown.
    public func watch(
        onCycle: @escaping @Sendable (_ remote: String, _ report: FolderSyncReport) -> Void,
        onPaused: @escaping @Sendable (_ remote: String, _ error: SyncError) -> Void = { _, _ in }
    ) async throws {
        let single = pairs.count <= 1
        try await withThrowingTaskGroup(of: Void.self) { group in
            for pair in pairs {
                group.addTask {
                    do {
                        try await pair.folder.watch { report in onCycle(pair.remote, report) }
                    } catch let error as SyncError {
                        onPaused(pair.remote, error)
                        if single { throw error }
                    }
                }
            }
            try await group.waitForAll()
        }
    }
}

/// Held while this process syncs a pair. A second sync of the same folder and remote (a `--once` while a `--watch`
/// runs, two started by cron) would run a second engine on the same state: both send the same files, one trips over the
/// other's temporary files. An `flock` on a file of the caller's (one per pair), which the kernel releases when the
/// process ends, `kill -9` included; the file names the holder's pid.
public struct FolderSyncLock: Sendable {
    /// The pair is being synced by another process.
    public struct Held: Error, Sendable {
        /// The holder's pid, as its lock file names it (nil if it cannot be read).
        public var pid: Int32?
    }

    private let descriptor: Int32

    /// Takes the lock at `path` (made if missing), or throws ``Held`` at once if another process holds it.
    public init(path: String) throws {
        let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw SyncError.localFile("Cannot open \(path) (errno \(errno)).") }
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
            let holder = (try? String(contentsOfFile: path, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines)
            close(descriptor)
            throw Held(pid: holder.flatMap { Int32($0) })
        }
        ftruncate(descriptor, 0)
        let pid = "\(getpid())\n"
        _ = pid.withCString { write(descriptor, $0, strlen($0)) }
        self.descriptor = descriptor
    }

    /// Lets the lock go (the process ending does too).
    public func release() {
        flock(descriptor, LOCK_UN)
        close(descriptor)
    }
}

/// How a folder pair's last run ended, kept beside its state (`status.json`) for status displays: when, what it
/// changed and the errors it met — or, when the round could not run at all (signed out there, its folder gone), why
/// syncing with that remote is paused.
public struct FolderSyncStatus: Codable, Sendable, Equatable {
    public var at = Date()
    public var changed = 0
    public var errors: [String] = []
    /// The round could not run: syncing with that remote is paused, for this reason.
    public var paused: String?

    public init(_ report: FolderSyncReport, at: Date = Date()) {
        self.at = at
        changed = report.changed
        errors = report.errors
    }

    public init(paused reason: String, at: Date = Date()) {
        self.at = at
        paused = reason
    }

    /// Keeps it at `url`, replacing the one before at once; best effort (a status that cannot be written is not the
    /// round's failure).
    public func save(to url: URL) {
        try? FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        try? JSONEncoder.nimbus.encode(self).write(to: url, options: .atomic)
    }

    /// The status kept at `url`; nil when there is none.
    public static func load(from url: URL) -> FolderSyncStatus? {
        guard let data = try? Data(contentsOf: url) else { return nil }
        return try? JSONDecoder.nimbus.decode(FolderSyncStatus.self, from: data)
    }
}

