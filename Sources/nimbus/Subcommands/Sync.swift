import ArgumentParser
import Foundation
import NimbusAPI
import NimbusSync

enum ConflictOption: String, ExpressibleByArgument, CaseIterable {
    case keepBoth = "keep-both"
    case lww
    case ask

    var strategy: ConflictStrategy {
        switch self {
        case .keepBoth: .keepBoth
        case .lww: .lastWriterWins
        case .ask: .ask
        }
    }
}

struct SyncCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sync", abstract: "Two-way sync of a local folder with a remote folder (remembered for next time).")

    @Argument(help: "The local folder.")
    var localDirectory: String

    @Argument(help: "The remote folder (default /; created if missing).")
    var remoteDirectory: String?

    @Flag(help: "One cycle, then exit (the default).")
    var once = false

    @Flag(help: "Keep syncing: react to changes here (inotify) and there (server events).")
    var watch = false

    @Option(help: "On conflicts: keep-both, lww (last writer wins) or ask.")
    var conflict: ConflictOption = .keepBoth

    @Flag(help: "Go ahead even if many local files were deleted.")
    var confirmDeletions = false

    @Option(help: "How many transfers run at once (1 to 32).")
    var transfers = 4

    @OptionGroup var output: OutputOptions

    func validate() throws {
        if once && watch { throw ValidationError("Choose --once or --watch, not both.") }
        if !(1...32).contains(transfers) { throw ValidationError("--transfers must be between 1 and 32.") }
    }

    func run() async throws {
        let home = Home.current
        let root = URL(fileURLWithPath: localDirectory).standardizedFileURL
        var isDirectory: ObjCBool = false
        var config = try home.loadConfig()
        if !FileManager.default.fileExists(atPath: root.path, isDirectory: &isDirectory) {
            // A folder that syncs already and is gone (moved, renamed, deleted, or on a disk not mounted — its
            // mount point there, the folder not) is not made again empty: that would delete everything it held
            // on every remote it syncs with. Only a new pair's folder is made.
            if let remotes = config.pairs[root.path], !remotes.isEmpty {
                throw CLIError(
                    "\(root.path) is not there (moved, renamed, deleted, or on a disk that is not mounted); nothing was synced or deleted. "
                        + "If it moved, sync it where it is now (nimbus sync NEW-PLACE \(remotes[0])); if you make it again (mkdir), "
                        + "what it held is deleted on \(remotes.joined(separator: ", ")) at the next sync, as any deletion here is.")
            }
            try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        } else if !isDirectory.boolValue {
            throw CLIError("\(localDirectory) is a file, not a folder.")
        }
        // With a remote: that pair (remembered beside the folder's other remotes). Without: every remote the folder
        // syncs with (the signed-in server's root if none yet).
        let specs: [RemoteSpec]
        if let remoteDirectory {
            specs = [try RemoteSpec(remoteDirectory, config: config)]
        } else {
            specs = try (config.pairs[root.path] ?? ["/"]).map { try RemoteSpec($0, config: config) }
        }
        for spec in specs where !(config.pairs[root.path] ?? []).contains(spec.description) {
            try Self.refuseOverlap(local: root.path, spec, config: config)
        }
        var pairs: [(spec: RemoteSpec, folder: FolderSync)] = []
        var failures: [String] = []
        var locks: [PairLock] = []
        defer { for lock in locks { lock.release() } }
        for spec in specs {
            do {
                locks.append(try PairLock(home: home, local: root.path, remote: spec.description))
                try await makeRemoteFolder(spec, home: home)
                let folder = try home.pairEngine(local: root, remote: spec.description, strategy: conflict.strategy, transfers: transfers)
                await folder.setConfirmDeletions(confirmDeletions)
                // Running the sync again is asking again: what failed for good last time is tried once more (and
                // reported, with a non-zero exit, if it fails again).
                try await folder.engine.retryFailed()
                pairs.append((spec, folder))
            } catch let error as CLIError {
                guard specs.count > 1 else { throw error }
                failures.append("\(spec): \(error.description)")
                PairStatus.save(PairStatus(error: error.description), home: home, local: root.path, remote: spec.description)
            }
        }
        for spec in specs where !(config.pairs[root.path] ?? []).contains(spec.description) {
            config.pairs[root.path, default: []].append(spec.description)
        }
        try home.save(config)
        for failure in failures { Output.error("error: \(failure)") }
        let ready = pairs
        if watch {
            let names = ready.map(\.spec.description).joined(separator: ", ")
            Output.line("Watching \(root.path) ⇄ \(names) (Ctrl-C to stop)", options: output)
            try await withThrowingTaskGroup(of: Void.self) { group in
                for (spec, folder) in ready {
                    let log = WatchLog()
                    group.addTask {
                        do {
                            try await folder.watch { report in
                                PairStatus.save(PairStatus(report), home: home, local: root.path, remote: spec.description)
                                if self.output.json {
                                    // One JSON object a line (JSON Lines), a line a round, for a script to follow.
                                    var line = SyncSummary(report)
                                    line.remote = spec.description
                                    line.at = Date()
                                    Output.jsonLine(line)
                                } else if let shown = log.shown(report) {
                                    self.print(shown, remote: ready.count > 1 ? spec.description : nil)
                                }
                            }
                        } catch let error as SyncError {
                            let message = Self.explain(error, spec)
                            PairStatus.save(PairStatus(error: message), home: home, local: root.path, remote: spec.description)
                            // One remote failing (signed out, its folder gone) pauses that one; the others go on.
                            guard ready.count > 1 else { throw CLIError(message) }
                            Output.error("error: \(spec): \(message) (paused; the other remotes go on)")
                        }
                    }
                }
                try await group.waitForAll()
            }
            return
        }
        // Several remotes: rounds until one changes nothing, so what arrives from one remote reaches the others.
        var total = FolderSyncReport()
        var paused: Set<String> = []
        for pass in 0..<(pairs.count > 1 ? 5 : 1) {
            var changed = 0
            for (spec, folder) in pairs where !paused.contains(spec.description) {
                do {
                    let report = try await settledCycle(folder, spec)
                    PairStatus.save(PairStatus(report), home: home, local: root.path, remote: spec.description)
                    changed += report.changed
                    if pairs.count > 1 {
                        if !report.errors.isEmpty || report.changed > 0 || pass == 0 { print(report, remote: spec.description) }
                    }
                    let errors = total.errors + report.errors
                    total.absorb(report)
                    total.errors = errors
                } catch let error as CLIError {
                    PairStatus.save(PairStatus(error: error.description), home: home, local: root.path, remote: spec.description)
                    guard pairs.count > 1 else { throw error }
                    paused.insert(spec.description)
                    failures.append("\(spec): \(error.description)")
                    Output.error("error: \(spec): \(error.description) (paused; the other remotes go on)")
                }
            }
            if changed == 0 { break }
        }
        if pairs.count <= 1 { print(total) }
        if output.json { try Output.json(SyncSummary(total, failures: failures)) }
        if !total.errors.isEmpty || !failures.isEmpty { throw ExitCode(1) }
    }

    /// One cycle; files still being written are synced once they settle: it ends when everything that was here
    /// when it started has been looked at (or after 30 seconds of a file that keeps changing, which is reported).
    /// A round that changed something is followed by a look at the folder: a file saved while it ran (after it was
    /// sent) goes in another round, up to three, so the exit means the folder as it is now is synced.
    func settledCycle(_ folder: FolderSync, _ spec: RemoteSpec) async throws -> FolderSyncReport {
        let deadline = Date().addingTimeInterval(30)
        var report = try await settledRound(folder, spec)
        var again = 0
        while again < 3, Date() < deadline, report.changed > 0, report.errors.isEmpty, try await look(folder, spec) > 0 {
            again += 1
            report.absorb(try await settledRound(folder, spec))
        }
        return report
    }

    /// How many files changed since the round looked (a save while it ran); its errors as the round's are told.
    func look(_ folder: FolderSync, _ spec: RemoteSpec) async throws -> Int {
        do {
            return try await folder.changedSinceLastLook()
        } catch let error as SyncError {
            throw CLIError(Self.explain(error, spec))
        }
    }

    func settledRound(_ folder: FolderSync, _ spec: RemoteSpec) async throws -> FolderSyncReport {
        var report = try await cycle(folder, spec)
        let deadline = Date().addingTimeInterval(30)
        while !report.changing.isEmpty, Date() < deadline {
            let settles = await folder.nextSettle ?? Date().addingTimeInterval(0.5)
            try await Task.sleep(for: .milliseconds(Int64(max(0.05, settles.timeIntervalSinceNow + 0.05) * 1000)))
            report.absorb(try await cycle(folder, spec))
        }
        // Steps that failed and are due again within seconds (the server answered: a deletion paused a moment ago,
        // a conflict being settled) are waited for, a few times; what still waits is said, and the exit is non-zero.
        var retries = 0
        while retries < 3, !report.remoteFailed,
            let next = try await folder.waitingRetries().next, next.timeIntervalSinceNow < 10
        {
            retries += 1
            try await Task.sleep(for: .milliseconds(Int64(max(0.05, next.timeIntervalSinceNow + 0.05) * 1000)))
            // (The errors of the earlier tries are replaced by this one's: they were tried again.)
            report.absorb(try await cycle(folder, spec))
        }
        let waiting = try await folder.waitingRetries()
        if waiting.count > 0, report.errors.isEmpty {
            let seconds = max(1, Int((waiting.next?.timeIntervalSinceNow ?? 0).rounded(.up)))
            report.errors.append("\(waiting.count) change\(waiting.count == 1 ? "" : "s") failed and will be tried again (in \(seconds) s); run the sync again, or use --watch.")
        }
        return report
    }

    /// A new pair must not sync the same files twice through one remote: a folder inside (or around, or the same as)
    /// a folder that already syncs with a remote folder inside (or around) this one's. One pair would copy what the
    /// other brings into itself, deeper at every round (`A ⇄ r:/x` and `A/sub ⇄ r:/x`), or both would send every
    /// change (`A ⇄ r:/x` and `A/sub ⇄ r:/x/sub`). The same folder with other remotes, or with another part of one, is
    /// fine.
    static func refuseOverlap(local: String, _ spec: RemoteSpec, config: Home.Config) throws {
        func nested(_ a: String, _ b: String) -> Bool { a == b || a.hasPrefix(b.hasSuffix("/") ? b : b + "/") || b.hasPrefix(a.hasSuffix("/") ? a : a + "/") }
        /// Where a pair's files are: the remote and folder, and for an encrypted remote also the folder it keeps them
        /// in on the remote under it (sealed names: its whole folder).
        func places(_ spec: RemoteSpec) -> [(remote: String, path: String)] {
            switch spec {
            case .nimbus(let path): return [("", path)]
            case .named(let name, let remote, let path):
                guard remote.type == "crypt", let inner = remote.remote.flatMap({ try? RemoteSpec($0, config: config) }) else { return [(name, path)] }
                return [(name, path)] + places(inner)
            }
        }
        let mine = places(spec)
        for (otherLocal, otherRemote) in config.allPairs where nested(local, otherLocal) {
            guard let other = try? RemoteSpec(otherRemote, config: config), other.description != spec.description || otherLocal != local else { continue }
            let theirs = places(other)
            // Through one remote: its folders; else, where one is encrypted into the other, the folders under it.
            let overlap =
                mine[0].remote == theirs[0].remote
                ? nested(mine[0].path, theirs[0].path) : mine.contains { a in theirs.contains { b in a.remote == b.remote && nested(a.path, b.path) } }
            guard overlap else { continue }
            throw CLIError(
                "\(local) ⇄ \(spec) would sync files that \(otherLocal) ⇄ \(other) already syncs, through the same remote (the folders overlap here and there): the two pairs would copy each other's files into themselves. Choose a folder or a remote folder that does not overlap, or sync \(otherLocal) alone (nothing was changed).")
        }
    }

    /// What a failure of a whole round means for the user, naming the remote and what to do.
    static func explain(_ error: SyncError, _ spec: RemoteSpec) -> String {
        guard let name = spec.name else { return error.description }
        switch error {
        case .unauthorized(let detail):
            return "the remote '\(name)' refused the credentials (\(detail)); sign in again with 'nimbus remote login \(name)'. Nothing was changed."
        default:
            return error.description
        }
    }

    /// The remote folder of the pair, made if it is missing (a local remote's own folder must exist: it may be an
    /// unmounted disk).
    ///
    /// Unreachable: a pair that synced before goes on to its round, which says so (and `--watch` waits for the
    /// remote to be back); a new pair stops here, nothing synced.
    func makeRemoteFolder(_ spec: RemoteSpec, home: Home) async throws {
        let known = FileManager.default.fileExists(atPath: home.pairDirectory(local: root.path, remote: spec.description).path)
        func unreachable(_ error: ProviderError, _ what: String) throws {
            guard case .network(let detail) = error else { return }
            if known { return }
            throw CLIError("\(what) could not be reached (\(detail)); nothing was synced. Run it again when it is back (--watch waits for it).")
        }
        switch spec {
        case .nimbus(let path):
            // Straight through the provider: the library's own view need not catch up with the whole account.
            let tokens = FileTokenStore(url: home.libraryURL.appending(path: "account.json"))
            guard let account = try tokens.load() else { throw CLIError("Not logged in. Run: nimbus login URL --username NAME") }
            let client = ServerClient(transport: AsyncHTTPClientTransport(baseURL: account.server), tokenStore: tokens)
            do {
                try await NimbusProvider.makeFolder(path, with: client)
            } catch let error as ProviderError {
                if case .network = error { return try unreachable(error, "The server (\(account.server.absoluteString))") }
                throw CLIError("Could not make the folder \(path) there: \(error.description)")
            }
        case .named(let name, let remote, let path):
            // The remote's own folder must be there (a disk may be unmounted, a folder deleted from a web UI); the
            // folders below it are made when missing, the first time only (a pair's folder that vanishes later
            // pauses the pair: it is never made again silently).
            let base = try home.providerMaker(name, remote, path: "/")(NimbusProvider.NoState())
            do {
                _ = try await base.root()
            } catch let error as ProviderError {
                if case .unauthorized(let detail) = error { throw CLIError(Self.explain(.unauthorized(detail), spec)) }
                if case .network = error { return try unreachable(error, "The remote '\(name)' (\(remote.location))") }
                throw CLIError("The remote '\(name)' (\(remote.location)): \(error.description)")
            }
            guard path != "/", !known else { return }
            do {
                _ = try await base.makeFolders(RemotePath.components(path))
            } catch let error as ProviderError {
                throw CLIError("Could not make the folder \(path) on '\(name)': \(error.description)")
            }
        }
    }

    var root: URL { URL(fileURLWithPath: localDirectory).standardizedFileURL }

    func cycle(_ folder: FolderSync, _ spec: RemoteSpec) async throws -> FolderSyncReport {
        do {
            return try await folder.syncOnce()
        } catch let error as SyncError {
            throw CLIError(Self.explain(error, spec))
        }
    }

    func print(_ report: FolderSyncReport, remote: String? = nil) {
        guard !output.quiet, !output.json else {
            for error in report.errors { Output.error((remote.map { "\($0): " } ?? "") + error) }
            return
        }
        if let remote { Swift.print("[\(remote)]") }
        for path in report.uploaded { Swift.print("↑ \(path)") }
        for path in report.downloaded { Swift.print("↓ \(path)") }
        for path in report.createdFolders { Swift.print("+ \(path)/") }
        for move in report.moved { Swift.print("→ \(move)") }
        for path in report.deletedHere {
            Swift.print(report.remoteKeepsTrash ? "✗ \(path) (deleted here, now in the trash there)" : "✗ \(path) (deleted here and there)")
        }
        for path in report.deletedThere { Swift.print("✗ \(path) (deleted on the server)") }
        for path in report.kept { Swift.print("! \(path): deleted on the server but changed here; kept and sent again") }
        for text in report.conflicts { Swift.print("! conflict \(text)") }
        for text in report.skipped { Swift.print("· skipped \(text)") }
        for error in report.errors { Output.error("error: \(error)") }
        Swift.print("\(report.changed) change\(report.changed == 1 ? "" : "s"), \(report.errors.count) error\(report.errors.count == 1 ? "" : "s")")
        // Out now, into a file or a pipe too (`--watch >> sync.log`, a service's journal), where stdout waits for a
        // full buffer: a watch's lines came late, and were lost when it was stopped.
        fflush(nil)
    }
}

struct SyncSummary: Encodable {
    var uploaded, downloaded, createdFolders, moved, deletedHere, deletedThere, conflicts, kept, skipped, errors: [String]
    /// With `--watch --json`: the pair's remote, and when the round ended (absent from `--once`'s summary).
    var remote: String?
    var at: Date?

    init(_ report: FolderSyncReport, failures: [String] = []) {
        uploaded = report.uploaded
        downloaded = report.downloaded
        createdFolders = report.createdFolders
        moved = report.moved
        deletedHere = report.deletedHere
        deletedThere = report.deletedThere
        conflicts = report.conflicts
        kept = report.kept
        skipped = report.skipped
        errors = report.errors + failures
    }
}

/// How a folder pair's last run ended, kept beside its state (`status.json`) for `nimbus status`.
struct PairStatus: Codable {
    var at = Date()
    var changed = 0
    var errors: [String] = []
    /// The round could not run at all (signed out there, its folder gone): syncing with that remote is paused.
    var paused: String?

    init(_ report: FolderSyncReport) {
        changed = report.changed
        errors = report.errors
    }

    init(error: String) { paused = error }

    static func url(home: Home, local: String, remote: String) -> URL {
        home.pairDirectory(local: local, remote: remote).appending(path: "status.json")
    }

    static func save(_ status: PairStatus, home: Home, local: String, remote: String) {
        let target = url(home: home, local: local, remote: remote)
        try? FileManager.default.createDirectory(at: target.deletingLastPathComponent(), withIntermediateDirectories: true)
        try? JSONEncoder.nimbus.encode(status).write(to: target, options: .atomic)
    }

    static func load(home: Home, local: String, remote: String) -> PairStatus? {
        guard let data = try? Data(contentsOf: url(home: home, local: local, remote: remote)) else { return nil }
        return try? JSONDecoder.nimbus.decode(PairStatus.self, from: data)
    }
}

/// What a watch prints of its rounds (JSON lines print every round): the first, and any that changed something, found
/// a conflict, failed differently than the round before, recovered, or skipped something not said already; a quiet
/// poll prints nothing, and a file skipped for the same reason (a link, a file still being written) is said once —
/// every round printed its "0 changes" and every skipped link again, a screen an hour in `--watch >> sync.log`.
final class WatchLog: @unchecked Sendable {
    private let lock = NSLock()
    private var rounds = 0
    private var skipped: Set<String> = []
    private var errors: [String] = []

    /// The report to print (skipped entries not said before only), or nil for a quiet round.
    func shown(_ report: FolderSyncReport) -> FolderSyncReport? {
        lock.withLock {
            rounds += 1
            var shown = report
            shown.skipped = report.skipped.filter { !skipped.contains($0) }
            skipped = Set(report.skipped)
            let sameErrors = report.errors == errors
            errors = report.errors
            let quiet = rounds > 1 && report.changed == 0 && report.conflicts.isEmpty && report.kept.isEmpty && shown.skipped.isEmpty && sameErrors
            return quiet ? nil : shown
        }
    }
}

/// Held while this process syncs a pair. A second `nimbus sync` of the same folder and remote (a `--once` while a
/// `--watch` runs, two started by cron) ran a second engine on the same state: both sent the same files, one tripped
/// over the other's temporary files (seen: 300 new files sent twice, 270 replaced versions in the remote's trash, two
/// errors). An `flock` on `$NIMBUS_HOME/locks/<pair>.lock`, which the kernel releases when the process ends, `kill -9`
/// included; the file names the holder's pid.
struct PairLock {
    let descriptor: Int32

    init(home: Home, local: String, remote: String) throws {
        let folder = home.url.appending(path: "locks")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let path = folder.appending(path: home.pairDirectory(local: local, remote: remote).lastPathComponent + ".lock").path
        let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw CLIError("Cannot open \(path) (errno \(errno)).") }
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
            let holder = (try? String(contentsOfFile: path, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
            close(descriptor)
            throw CLIError(
                "Another nimbus\(holder.isEmpty ? "" : " (pid \(holder))") is syncing \(local) with \(remote); it sends and brings the changes "
                    + "itself. Nothing was done; stop it first to run this one.")
        }
        ftruncate(descriptor, 0)
        let pid = "\(getpid())\n"
        _ = pid.withCString { write(descriptor, $0, strlen($0)) }
        self.descriptor = descriptor
    }

    func release() {
        flock(descriptor, LOCK_UN)
        close(descriptor)
    }
}
