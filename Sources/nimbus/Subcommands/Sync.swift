import ArgumentParser
import Foundation
import NimbusAPI
import NimbusSync

enum MeteredOption: String, ExpressibleByArgument, CaseIterable {
    case allow
    case metadataOnly = "metadata-only"
    case pause

    var policy: MeteredPolicy {
        switch self {
        case .allow: .allow
        case .metadataOnly: .metadataOnly
        case .pause: .pause
        }
    }
}

/// `--bwlimit RATE[:DOWN]`: bytes per second up and down (one rate for both, or `UP:DOWN`); `off` or `0` for none.
struct BandwidthOption: Equatable {
    var up: Int64?
    var down: Int64?

    init?(_ text: String) {
        func rate(_ part: Substring) -> Int64?? {
            let part = part.trimmingCharacters(in: .whitespaces)
            if part.lowercased() == "off" { return .some(nil) }
            var number = part
            if number.lowercased().hasSuffix("/s") { number.removeLast(2) }
            guard let bytes = ByteCount.parse(number) else { return nil }
            if bytes == 0 { return .some(nil) }
            return bytes >= 1024 ? .some(bytes) : nil
        }
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard (1...2).contains(parts.count), let up = rate(parts[0]), let down = rate(parts.last ?? parts[0]) else { return nil }
        self.up = up
        self.down = down
    }
}

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

    @Option(help: "Free automatic files, least recently used first, while the folder's files take more than SIZE (e.g. 20G).")
    var cacheLimit: String?

    @Option(
        help: ArgumentHelp(
            "Bandwidth limit in bytes per second: one RATE for both ways, or UP:DOWN (e.g. 1M, 512K:4M; off for none).",
            valueName: "RATE[:DOWN]"))
    var bwlimit: String?

    @Option(help: "On a metered network: allow, metadata-only (content waits) or pause.")
    var onMetered: MeteredOption = .allow

    @OptionGroup var output: OutputOptions

    func validate() throws {
        if let cacheLimit, ByteCount.parse(cacheLimit) == nil { throw ValidationError("--cache-limit: not a size: \(cacheLimit)") }
        if let bwlimit, BandwidthOption(bwlimit) == nil {
            throw ValidationError("--bwlimit: not a rate: \(bwlimit) (e.g. 1M for 1 MiB/s both ways, 512K:4M for up:down; at least 1K, or off)")
        }
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
        var locks: [FolderSyncLock] = []
        defer { for lock in locks { lock.release() } }
        for spec in specs {
            do {
                locks.append(try Self.lock(home: home, local: root.path, remote: spec.description))
                try await makeRemoteFolder(spec, home: home)
                let folder = try home.pairEngine(local: root, remote: spec.description, strategy: conflict.strategy, transfers: transfers)
                await folder.setConfirmDeletions(confirmDeletions)
                await folder.setCacheLimit(cacheLimit.flatMap(ByteCount.parse))
                let limits = bwlimit.flatMap(BandwidthOption.init)
                await folder.setNetworkPolicy(
                    NetworkPolicy(onMetered: onMetered.policy, uploadLimit: limits?.up, downloadLimit: limits?.down, pauseOnLowBattery: false))
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
        let group = FolderSyncGroup(pairs.map { FolderSyncGroup.Pair(remote: $0.spec.description, folder: $0.folder) })
        let specOf = Dictionary(pairs.map { ($0.spec.description, $0.spec) }, uniquingKeysWith: { first, _ in first })
        @Sendable func explain(_ error: SyncError, _ remote: String) -> String { specOf[remote].map { Self.explain(error, $0) } ?? error.description }
        if watch {
            let names = pairs.map(\.spec.description).joined(separator: ", ")
            Output.line("Watching \(root.path) ⇄ \(names) (Ctrl-C to stop)", options: output)
            let logs = Dictionary(pairs.map { ($0.spec.description, WatchLog()) }, uniquingKeysWith: { first, _ in first })
            let several = pairs.count > 1
            do {
                try await group.watch(
                    onCycle: { remote, report in
                        PairStatus.save(PairStatus(report), home: home, local: root.path, remote: remote)
                        if self.output.json {
                            // One JSON object a line (JSON Lines), a line a round, for a script to follow.
                            var line = SyncSummary(report)
                            line.remote = remote
                            line.at = Date()
                            Output.jsonLine(line)
                        } else if let shown = logs[remote]?.shown(report) {
                            self.print(shown, remote: several ? remote : nil)
                        }
                    },
                    onPaused: { remote, error in
                        let message = explain(error, remote)
                        PairStatus.save(PairStatus(error: message), home: home, local: root.path, remote: remote)
                        // One remote failing (signed out, its folder gone) pauses that one; the others go on.
                        if several { Output.error("error: \(remote): \(message) (paused; the other remotes go on)") }
                    })
            } catch let error as SyncError {
                throw CLIError(explain(error, pairs.first?.spec.description ?? ""))
            }
            return
        }
        // Several remotes: passes until one changes nothing, so what arrives from one remote reaches the others.
        let report: FolderSyncGroup.Report
        do {
            report = try await group.syncOnce { remote, outcome, pass in
                switch outcome {
                case .success(let cycle):
                    PairStatus.save(PairStatus(cycle), home: home, local: root.path, remote: remote)
                    if pairs.count > 1, !cycle.errors.isEmpty || cycle.changed > 0 || pass == 0 { print(cycle, remote: remote) }
                case .failure(let error):
                    let message = explain(error, remote)
                    PairStatus.save(PairStatus(error: message), home: home, local: root.path, remote: remote)
                    if pairs.count > 1 { Output.error("error: \(remote): \(message) (paused; the other remotes go on)") }
                }
            }
        } catch let error as SyncError {
            throw CLIError(explain(error, pairs.first?.spec.description ?? ""))
        }
        failures += report.paused.map { "\($0.remote): \(explain($0.error, $0.remote))" }
        if pairs.count <= 1 { print(report.total) }
        if output.json { try Output.json(SyncSummary(report.total, failures: failures)) }
        if report.failed || !failures.isEmpty { throw ExitCode(1) }
    }

    /// Takes the pair's lock (`$NIMBUS_HOME/locks/<pair>.lock`, ``FolderSyncLock``), or says who holds it.
    static func lock(home: Home, local: String, remote: String) throws -> FolderSyncLock {
        let folder = home.url.appending(path: "locks")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let path = folder.appending(path: home.pairDirectory(local: local, remote: remote).lastPathComponent + ".lock").path
        do {
            return try FolderSyncLock(path: path)
        } catch let held as FolderSyncLock.Held {
            throw CLIError(
                "Another nimbus\(held.pid.map { " (pid \($0))" } ?? "") is syncing \(local) with \(remote); it sends and brings the changes "
                    + "itself. Nothing was done; stop it first to run this one.")
        } catch let error as SyncError {
            throw CLIError(error.description)
        }
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
            guard let (tokens, maker) = try home.nimbusProviderMaker(path: "/") else { throw CLIError("Not logged in. Run: nimbus login URL --username NAME") }
            let server = (try? tokens.load())??.server.absoluteString ?? "?"
            do {
                try await maker(NimbusProvider.NoState()).prepareFolder(RemotePath.components(path), makingMissing: true)
            } catch let error as ProviderError {
                if case .network = error { return try unreachable(error, "The server (\(server))") }
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
                try await base.prepareFolder(RemotePath.components(path), makingMissing: true)
            } catch let error as ProviderError {
                throw CLIError("Could not make the folder \(path) on '\(name)': \(error.description)")
            }
        }
    }

    var root: URL { URL(fileURLWithPath: localDirectory).standardizedFileURL }

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
        for path in report.cloudOnly { Swift.print("☁ \(path) (cloud-only)") }
        for path in report.excluded { Swift.print("− \(path) (left this device: excluded; still there)") }
        if let paused = report.paused { Swift.print("Paused: \(paused) (--on-metered pause); nothing was synced.") }
        if report.waitingForNetwork > 0 {
            let waiting = report.waitingForNetwork
            Swift.print("\(waiting) transfer\(waiting == 1 ? "" : "s") wait for an unmetered network (--on-metered metadata-only)")
        }
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
    /// Files that became placeholders, and items that left this device (excluded).
    var cloudOnly, excluded: [String]
    /// Transfers waiting for an unmetered network, and why nothing synced (a paused network policy).
    var waitingForNetwork: Int
    var paused: String?
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
        cloudOnly = report.cloudOnly
        excluded = report.excluded
        waitingForNetwork = report.waitingForNetwork
        paused = report.paused
    }
}

/// How a folder pair's last run ended (``FolderSyncStatus``), kept beside its state for `nimbus status`.
typealias PairStatus = FolderSyncStatus

extension FolderSyncStatus {
    init(error: String) { self.init(paused: error) }

    static func url(home: Home, local: String, remote: String) -> URL {
        home.pairDirectory(local: local, remote: remote).appending(path: "status.json")
    }

    static func save(_ status: PairStatus, home: Home, local: String, remote: String) {
        status.save(to: url(home: home, local: local, remote: remote))
    }

    static func load(home: Home, local: String, remote: String) -> PairStatus? {
        load(from: url(home: home, local: local, remote: remote))
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
