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
        if !FileManager.default.fileExists(atPath: root.path, isDirectory: &isDirectory) {
            try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        } else if !isDirectory.boolValue {
            throw CLIError("\(localDirectory) is a file, not a folder.")
        }
        var config = try home.loadConfig()
        let spec = try RemoteSpec(remoteDirectory ?? config.pairs[root.path] ?? "/", config: config)
        try await makeRemoteFolder(spec, home: home)
        config.pairs[root.path] = spec.description
        try home.save(config)
        let folder = try home.pairEngine(local: root, remote: spec.description, strategy: conflict.strategy, transfers: transfers)
        await folder.setConfirmDeletions(confirmDeletions)
        if watch {
            Output.line("Watching \(root.path) ⇄ \(spec) (Ctrl-C to stop)", options: output)
            try await folder.watch { report in
                self.print(report)
            }
        } else {
            // Files still being written are synced once they settle: the run ends when everything that was here when
            // it started has been looked at (or after 30 seconds of a file that keeps changing, which is reported).
            var report = try await cycle(folder)
            let deadline = Date().addingTimeInterval(30)
            while report.skipped.contains(where: { $0.hasSuffix("(still being written)") }), Date() < deadline {
                let settles = await folder.nextSettle ?? Date().addingTimeInterval(0.5)
                try await Task.sleep(for: .milliseconds(Int64(max(0.05, settles.timeIntervalSinceNow + 0.05) * 1000)))
                report.absorb(try await cycle(folder))
            }
            print(report)
            if output.json { try Output.json(SyncSummary(report)) }
            if !report.errors.isEmpty { throw ExitCode(1) }
        }
    }

    /// The remote folder of the pair, made if it is missing (a local remote's own folder must exist: it may be an
    /// unmounted disk).
    func makeRemoteFolder(_ spec: RemoteSpec, home: Home) async throws {
        switch spec {
        case .nimbus(let path):
            // Straight through the provider: the library's own view need not catch up with the whole account.
            let tokens = FileTokenStore(url: home.libraryURL.appending(path: "account.json"))
            guard let account = try tokens.load() else { throw CLIError("Not logged in. Run: nimbus login URL --username NAME") }
            let client = ServerClient(transport: AsyncHTTPClientTransport(baseURL: account.server), tokenStore: tokens)
            do {
                try await NimbusProvider.makeFolder(path, with: client)
            } catch let error as ProviderError {
                throw CLIError("Could not make the folder \(path) there: \(error.description)")
            }
        case .local(let name, let folder, let path):
            let config = try home.loadConfig()
            let base = URL(fileURLWithPath: config.remotes[name]?.path ?? "/")
            var isFolder: ObjCBool = false
            guard FileManager.default.fileExists(atPath: base.path, isDirectory: &isFolder), isFolder.boolValue else {
                throw CLIError("The remote '\(name)' is \(base.path), which is not there (is the disk mounted?).")
            }
            if path != "/" { try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true) }
        }
    }

    func cycle(_ folder: FolderSync) async throws -> FolderSyncReport {
        do {
            return try await folder.syncOnce()
        } catch let error as SyncError {
            throw CLIError(error.description)
        }
    }

    func print(_ report: FolderSyncReport) {
        guard !output.quiet, !output.json else {
            for error in report.errors { Output.error(error) }
            return
        }
        for path in report.uploaded { Swift.print("↑ \(path)") }
        for path in report.downloaded { Swift.print("↓ \(path)") }
        for path in report.createdFolders { Swift.print("+ \(path)/") }
        for move in report.moved { Swift.print("→ \(move)") }
        for path in report.deletedHere { Swift.print("✗ \(path) (deleted here, now in the server's trash)") }
        for path in report.deletedThere { Swift.print("✗ \(path) (deleted on the server)") }
        for path in report.kept { Swift.print("! \(path): deleted on the server but changed here; kept and sent again") }
        for text in report.conflicts { Swift.print("! conflict \(text)") }
        for text in report.skipped { Swift.print("· skipped \(text)") }
        for error in report.errors { Output.error("error: \(error)") }
        Swift.print("\(report.changed) change\(report.changed == 1 ? "" : "s"), \(report.errors.count) error\(report.errors.count == 1 ? "" : "s")")
    }
}

struct SyncSummary: Encodable {
    var uploaded, downloaded, createdFolders, moved, deletedHere, deletedThere, conflicts, kept, skipped, errors: [String]

    init(_ report: FolderSyncReport) {
        uploaded = report.uploaded
        downloaded = report.downloaded
        createdFolders = report.createdFolders
        moved = report.moved
        deletedHere = report.deletedHere
        deletedThere = report.deletedThere
        conflicts = report.conflicts
        kept = report.kept
        skipped = report.skipped
        errors = report.errors
    }
}
