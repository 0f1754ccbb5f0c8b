import ArgumentParser
import Foundation
import NimbusAPI
import NimbusSync

/// What lives on this device: selective sync (`select`), cloud-only files (`free`, `hydrate`, `open`) and pins. Each
/// marks the pair's state, then runs a round of that pair when no other nimbus syncs it (a running `--watch` carries
/// the mark out at its next round).
enum ResidencyCLI {
    /// The synced folder holding `path` (the deepest), with its one remote.
    static func pair(holding path: String, config: Home.Config) throws -> (root: URL, remote: String) {
        let absolute = URL(fileURLWithPath: path).standardizedFileURL.path
        let roots = config.pairs.keys.filter { absolute == $0 || absolute.hasPrefix($0.hasSuffix("/") ? $0 : $0 + "/") }.sorted { $0.count > $1.count }
        guard let root = roots.first, let remotes = config.pairs[root], !remotes.isEmpty else {
            throw CLIError("\(path) is not in a synced folder (nimbus sync DIR first).")
        }
        guard remotes.count == 1 else {
            // A placeholder or an excluded folder would look deleted to the folder's other remotes.
            throw CLIError(
                "\(root) syncs with \(remotes.count) remotes (\(remotes.joined(separator: ", "))); cloud-only files and selective sync need a folder that syncs with one. Nothing was changed.")
        }
        return (URL(fileURLWithPath: root), remotes[0])
    }

    /// Runs `body` on the pair's engine, then a round when the pair is free; prints what the round did.
    static func withPair(
        holding path: String, quiet: Bool, _ body: (FolderSync) async throws -> String
    ) async throws {
        let home = Home.current
        let config = try home.loadConfig()
        let (root, remote) = try pair(holding: path, config: config)
        let lock: FolderSyncLock
        do {
            lock = try SyncCommand.lock(home: home, local: root.path, remote: remote)
        } catch {
            // Another nimbus syncs the pair: the mark is written (the database takes two writers), it carries it out.
            let folder = try home.pairEngine(local: root, remote: remote, strategy: config.conflict)
            let said = try await body(folder)
            if !quiet { print("\(said); the nimbus syncing \(root.path) carries it out at its next round.") }
            return
        }
        defer { lock.release() }
        let folder = try home.pairEngine(local: root, remote: remote, strategy: config.conflict)
        let said = try await body(folder)
        await folder.setNetworkPolicy(NetworkPolicy(onMetered: .metadataOnly))
        let report = try await folder.syncUntilSettled()
        PairStatus.save(PairStatus(report), home: home, local: root.path, remote: remote)
        if !quiet {
            print(said)
            for path in report.downloaded { print("↓ \(path)") }
            for path in report.cloudOnly { print("☁ \(path) (cloud-only)") }
            for path in report.excluded { print("− \(path) (left this device: excluded)") }
            for path in report.uploaded { print("↑ \(path)") }
        }
        for error in report.errors { Output.error("error: \(error)") }
        if let paused = report.paused { Output.error("Paused (\(paused)); the change is recorded and carried out at the next sync.") }
        if !report.errors.isEmpty { throw ExitCode(1) }
    }

    static func mark(_ action: FolderSync.ResidencyAction, _ path: String, quiet: Bool) async throws {
        try await withPair(holding: path, quiet: quiet) { folder in
            let change: FolderSync.ResidencyChange
            do { change = try await folder.setResidency(action, at: URL(fileURLWithPath: path).standardizedFileURL.path) } catch let error as SyncError {
                throw CLIError(error.description)
            }
            let what = change.path.isEmpty ? folder.root.path : change.path
            switch action {
            case .free: return "\(what): cloud-only (\(change.files) file\(change.files == 1 ? "" : "s") here become placeholders once synced)"
            case .hydrate: return "\(what): fetching \(change.placeholders) file\(change.placeholders == 1 ? "" : "s")"
            case .pin: return "\(what): pinned (always on this device)"
            case .unpin: return "\(what): automatic"
            }
        }
    }
}

struct FreeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "free",
        abstract: "Make a synced file, or a folder's files, cloud-only: each becomes a placeholder NAME.nimbus (never deleted there).")
    @Argument(help: "A file or folder in a synced folder.") var path: String
    @OptionGroup var output: OutputOptions
    func run() async throws { try await ResidencyCLI.mark(.free, path, quiet: output.quiet) }
}

struct HydrateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "hydrate", abstract: "Fetch a cloud-only file (its NAME.nimbus or NAME), or a folder's: the placeholders are replaced by the files.")
    @Argument(help: "A placeholder, file or folder in a synced folder.") var path: String
    @OptionGroup var output: OutputOptions
    func run() async throws { try await ResidencyCLI.mark(.hydrate, path, quiet: output.quiet) }
}

struct PinCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "pin", abstract: "Keep a file or folder on this device always (fetched if cloud-only).")
    @Argument(help: "A file or folder in a synced folder.") var path: String
    @OptionGroup var output: OutputOptions
    func run() async throws { try await ResidencyCLI.mark(.pin, path, quiet: output.quiet) }
}

struct UnpinCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "unpin", abstract: "Make a file or folder automatic again (what its folder, the selection and the cache limit say).")
    @Argument(help: "A file or folder in a synced folder.") var path: String
    @OptionGroup var output: OutputOptions
    func run() async throws { try await ResidencyCLI.mark(.unpin, path, quiet: output.quiet) }
}

struct OpenCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "open", abstract: "Open a file of a synced folder with the desktop's opener, fetching it first if it is cloud-only.")
    @Argument(help: "A file or placeholder (NAME.nimbus) in a synced folder.") var path: String
    @Flag(help: "Fetch it, print its path, and open nothing.") var printPath = false
    @Flag(help: "Say a failure on the desktop too (notify-send): for a file manager's double-click, which shows no terminal.")
    var notify = false
    @OptionGroup var output: OutputOptions

    func run() async throws {
        do {
            try await fetchAndOpen()
        } catch {
            if notify, FileManager.default.isExecutableFile(atPath: "/usr/bin/notify-send") {
                let process = Process()
                process.executableURL = URL(fileURLWithPath: "/usr/bin/notify-send")
                process.arguments = ["--app-name=Nimbus", "Nimbus could not open \(URL(fileURLWithPath: path).lastPathComponent)", "\(error)"]
                try? process.run()
                process.waitUntilExit()
            }
            throw error
        }
    }

    func fetchAndOpen() async throws {
        var target = URL(fileURLWithPath: path).standardizedFileURL.path
        if target.hasSuffix(Placeholder.suffix), let data = FileManager.default.contents(atPath: target), Placeholder.parse(data) != nil {
            try await ResidencyCLI.mark(.hydrate, target, quiet: true)
            target = String(target.dropLast(Placeholder.suffix.count))
        } else if !FileManager.default.fileExists(atPath: target), FileManager.default.fileExists(atPath: target + Placeholder.suffix) {
            try await ResidencyCLI.mark(.hydrate, target + Placeholder.suffix, quiet: true)
        }
        guard FileManager.default.fileExists(atPath: target) else { throw CLIError("\(path) is not here (could it be fetched? see nimbus status).") }
        if printPath {
            print(target)
            return
        }
        let chosen = ProcessInfo.processInfo.environment["NIMBUS_OPENER"].flatMap { $0.isEmpty ? nil : $0 }
        let opener = chosen ?? ["/usr/bin/xdg-open", "/usr/bin/open"].first { FileManager.default.isExecutableFile(atPath: $0) }
        guard let opener else { throw CLIError("\(target) is here; no desktop opener (xdg-open) was found to open it.") }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: opener)
        process.arguments = [target]
        try process.run()
        process.waitUntilExit()
        if process.terminationStatus != 0 { throw CLIError("\(opener) could not open \(target) (exit \(process.terminationStatus)).") }
    }
}

struct SelectCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "select",
        abstract: "Choose what of a synced folder lives on this device: exclude or include paths, make kinds or big files cloud-only.",
        discussion: """
            An excluded path is not on this device: its unsent changes are sent first, then what is synced and unmodified \
            leaves the device. Nothing is ever deleted there. `--exclude /` then `--include Docs` syncs only Docs.
            """)
    @Argument(help: "The synced folder.") var directory: String
    @Option(help: "Exclude a path (relative to the folder) from this device.") var exclude: [String] = []
    @Option(help: "Include a path again (or, inside an excluded folder, as an exception).") var include: [String] = []
    @Option(help: "A kind (video, image, audio, pdf, document, archive) or extension, with --cloud-only or --keep-local.") var kind: [String] = []
    @Option(help: "With --cloud-only: files larger than SIZE (e.g. 100M) are cloud-only; 'none' removes the rule.") var largerThan: String?
    @Flag(help: "Make the --kind or --larger-than files cloud-only (placeholders).") var cloudOnly = false
    @Flag(help: "Keep the --kind files on this device again.") var keepLocal = false
    @Flag(help: "Show the selection.") var list = false
    @OptionGroup var output: OutputOptions

    func validate() throws {
        if (!kind.isEmpty || largerThan != nil) && cloudOnly == keepLocal && !(largerThan == "none") {
            throw ValidationError("--kind and --larger-than go with --cloud-only (or --kind with --keep-local).")
        }
        if let largerThan, largerThan != "none", ByteCount.parse(largerThan) == nil { throw ValidationError("--larger-than: not a size: \(largerThan)") }
        if exclude.isEmpty && include.isEmpty && kind.isEmpty && largerThan == nil && !list {
            throw ValidationError("Say what to change (--exclude, --include, --kind, --larger-than) or --list.")
        }
    }

    func run() async throws {
        let root = URL(fileURLWithPath: directory).standardizedFileURL
        let config = try Home.current.loadConfig()
        guard config.pairs[root.path] != nil else { throw CLIError("\(root.path) is not a synced folder (nimbus sync \(directory) first).") }
        if list && exclude.isEmpty && include.isEmpty && kind.isEmpty && largerThan == nil {
            let (_, remote) = try ResidencyCLI.pair(holding: root.path, config: config)
            let folder = try Home.current.pairEngine(local: root, remote: remote, strategy: config.conflict)
            try await Self.show(folder, json: output.json)
            return
        }
        try await ResidencyCLI.withPair(holding: root.path, quiet: output.quiet || output.json) { folder in
            var selection = try await folder.selection()
            for path in exclude {
                let relative = folder.relativePath(URL(fileURLWithPath: path, relativeTo: root).standardizedFileURL.path)
                guard !relative.isEmpty || path == "/" else { throw CLIError("\(path) is not inside \(root.path).") }
                selection.exclude(path == "/" ? "" : relative)
            }
            for path in include {
                let relative = folder.relativePath(URL(fileURLWithPath: path, relativeTo: root).standardizedFileURL.path)
                selection.include(path == "/" ? "" : relative)
            }
            for kind in kind {
                let name = kind.lowercased()
                selection.cloudOnlyKinds.removeAll { $0 == name }
                if cloudOnly { selection.cloudOnlyKinds.append(name) }
            }
            if let largerThan { selection.cloudOnlyLargerThan = largerThan == "none" ? nil : ByteCount.parse(largerThan) }
            try await folder.setSelection(selection)
            return Self.describe(selection)
        }
    }

    static func describe(_ selection: SyncSelection) -> String {
        var parts: [String] = []
        parts.append(selection.excluded.isEmpty ? "nothing excluded" : "excluded: " + selection.excluded.map { $0.isEmpty ? "/" : $0 }.joined(separator: ", "))
        if !selection.included.isEmpty { parts.append("included: " + selection.included.joined(separator: ", ")) }
        if !selection.cloudOnlyKinds.isEmpty { parts.append("cloud-only kinds: " + selection.cloudOnlyKinds.joined(separator: ", ")) }
        if let limit = selection.cloudOnlyLargerThan { parts.append("cloud-only above \(ByteCount.format(limit))") }
        return parts.joined(separator: "; ")
    }

    static func show(_ folder: FolderSync, json: Bool) async throws {
        let selection = try await folder.selection()
        let summary = try await folder.residencySummary()
        if json {
            struct Shown: Encodable {
                var excluded, included, cloudOnlyKinds: [String]
                var cloudOnlyLargerThan: Int64?
                var excludedKept, cloudOnlyFiles, localFiles, pinned: Int
                var cloudOnlyBytes, localBytes: Int64
            }
            try Output.json(
                Shown(
                    excluded: selection.excluded, included: selection.included, cloudOnlyKinds: selection.cloudOnlyKinds,
                    cloudOnlyLargerThan: selection.cloudOnlyLargerThan, excludedKept: summary.excludedKept, cloudOnlyFiles: summary.cloudOnlyFiles,
                    localFiles: summary.localFiles, pinned: summary.pinned, cloudOnlyBytes: summary.cloudOnlyBytes, localBytes: summary.localBytes))
            return
        }
        print(describe(selection))
        for path in selection.excluded { print("excluded \(path.isEmpty ? "/" : path)") }
        for path in selection.included { print("included \(path)") }
        print(Self.residencyLine(summary))
    }

    static func residencyLine(_ summary: ResidencySummary) -> String {
        var line =
            "on this device: \(summary.localFiles) files (\(ByteCount.format(summary.localBytes))); cloud-only: \(summary.cloudOnlyFiles) files (\(ByteCount.format(summary.cloudOnlyBytes)))"
        if summary.pinned > 0 { line += "; \(summary.pinned) pinned" }
        if !summary.excluded.isEmpty {
            line += "; excluded: \(summary.excluded.map { $0.isEmpty ? "/" : $0 }.joined(separator: ", ")), \(summary.excludedKept) local items kept"
        }
        return line
    }
}
