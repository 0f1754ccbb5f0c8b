import ArgumentParser
import Foundation
import NimbusAPI
import NimbusSync

struct Uploads: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show, resume or cancel unfinished uploads.", subcommands: [ListUploads.self, ResumeUploads.self, CancelUpload.self],
        defaultSubcommand: ListUploads.self)

    struct ListUploads: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "list", abstract: "List unfinished uploads.")
        @OptionGroup var output: OutputOptions

        func run() async throws {
            let engine = try Home.current.engine()
            let uploads = try await engine.operations().filter { $0.kind == .upload }
            var rows: [[String: String]] = []
            for upload in uploads {
                let item = try await engine.item(upload.item)
                let path = try await engine.path(of: upload.item) ?? "?"
                rows.append([
                    "id": upload.item.rawValue, "path": path, "size": item.map { Output.size($0.size) } ?? "?", "state": upload.state.rawValue,
                    "attempts": String(upload.attempts), "error": upload.lastError ?? "",
                ])
            }
            if output.json { return try Output.json(rows) }
            if rows.isEmpty { Output.line("No unfinished uploads.", options: output) }
            for row in rows {
                let error = row["error", default: ""]
                print("\(row["id", default: ""])  \(row["path", default: ""])  \(row["size", default: ""])  \(row["state", default: ""])\(error.isEmpty ? "" : " — " + error)")
            }
        }
    }

    struct ResumeUploads: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "resume", abstract: "Send unfinished uploads, from their last chunk.")
        @OptionGroup var output: OutputOptions

        func run() async throws {
            let engine = try await Home.current.signedInEngine()
            let progress = ProgressDisplay(options: output)
            for upload in try await engine.operations() where upload.kind == .upload {
                if upload.state == .failed { try await engine.retry(upload.item) }
                if let item = try await engine.item(upload.item) { await progress.watch(item.id, name: item.name, size: item.size) }
            }
            try await drain(engine, progress: progress)
            Output.line("All uploads finished.", options: output)
        }
    }

    struct CancelUpload: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "cancel", abstract: "Cancel an upload (its stored chunks are freed).")
        @Argument(help: "The upload's id or remote path (see 'nimbus uploads list').")
        var id: String
        @OptionGroup var output: OutputOptions

        func run() async throws {
            let engine = try Home.current.engine()
            var target = ItemID(id)
            if id.hasPrefix("/"), let item = try await engine.item(atPath: id) { target = item.id }
            guard try await engine.operations().contains(where: { $0.item == target && $0.kind == .upload }) else {
                throw CLIError("No unfinished upload \(id); see 'nimbus uploads list'.")
            }
            try await engine.cancel(target)
            Output.line("Cancelled.", options: output)
        }
    }
}

struct Status: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Show sync state: queue, transfers, conflicts, folder pairs.")
    @OptionGroup var output: OutputOptions

    func run() async throws {
        let home = Home.current
        let engine = try home.engine()
        let config = try home.loadConfig()
        let status = try await engine.status()
        let attention = try await engine.itemsNeedingAttention()
        let operations = try await engine.operations()
        if output.json {
            struct Report: Encodable {
                var account: String?
                var pending: Int
                var conflicts: Int
                var unsynced: Int
                var failed: Int
                /// Each synced folder and its first remote (see `pairs` for all).
                var folders: [String: String]
                var pairs: [PairJSON]
                var attention: [ItemJSON]
            }
            struct PairJSON: Encodable {
                var local, remote: String
                var pending, conflicts, failed: Int?
                var lastSync: Date?
                var paused: String?
                var errors: [String]
            }
            var pairs: [PairJSON] = []
            for (local, remote) in config.allPairs {
                let counts = try? await Self.pairCounts(home, config, local, remote)
                let last = PairStatus.load(home: home, local: local, remote: remote)
                pairs.append(
                    PairJSON(
                        local: local, remote: remote, pending: counts?.pending, conflicts: counts?.conflicts, failed: counts?.failed,
                        lastSync: last?.at, paused: last?.paused, errors: last?.errors ?? []))
            }
            var items: [ItemJSON] = []
            for item in attention { items.append(ItemJSON(item, path: try await engine.path(of: item.id) ?? item.name)) }
            let account = await engine.account.map { "\($0.username)@\($0.server.absoluteString)" }
            return try Output.json(
                Report(
                    account: account, pending: status.pending, conflicts: status.conflicts, unsynced: status.unsynced, failed: status.failed,
                    folders: config.pairs.compactMapValues(\.first), pairs: pairs, attention: items))
        }
        if let account = await engine.account {
            print("Logged in as \(account.username) on \(account.server.absoluteString) (device \(config.deviceName))")
        } else if !config.allPairs.isEmpty, config.allPairs.allSatisfy({ !$0.remote.hasPrefix("/") }) {
            // Remotes only (WebDAV, S3, folders): no Nimbus account is needed, and nothing waits for one.
            print("Not logged in to a Nimbus server; the folders below sync with their remotes.")
        } else {
            print("Not logged in (changes are recorded and sent after 'nimbus login').")
        }
        print("\(status.pending) pending, \(status.conflicts) conflicts, \(status.unsynced) unsynced, \(status.failed) failed")
        for operation in operations.prefix(20) {
            let path = try await engine.path(of: operation.item) ?? operation.item.rawValue
            print("  \(operation.kind) \(path) — \(operation.state)\(operation.lastError.map { ": \($0)" } ?? "")")
        }
        for item in attention {
            print("  ! \(try await engine.path(of: item.id) ?? item.name): \(ItemJSON.describe(item.state))")
        }
        for (local, remote) in config.allPairs {
            var line = "  sync \(local) ⇄ \(remote)"
            if let counts = try? await Self.pairCounts(home, config, local, remote) {
                line += ": \(counts.pending) pending, \(counts.conflicts) conflicts, \(counts.failed) failed"
            }
            if let last = PairStatus.load(home: home, local: local, remote: remote) {
                let when = ISO8601DateFormatter().string(from: last.at)
                if let paused = last.paused {
                    line += "\n    paused: \(paused)"
                } else {
                    line += "; last synced \(when)\(last.errors.isEmpty ? "" : ", \(last.errors.count) error\(last.errors.count == 1 ? "" : "s")")"
                }
                for error in last.errors.prefix(3) { line += "\n    error: \(error)" }
            }
            if let residency = try? await Self.pairResidency(home, config, local, remote),
                residency.cloudOnlyFiles > 0 || !residency.excluded.isEmpty || residency.pinned > 0
            {
                line += "\n    " + SelectCommand.residencyLine(residency)
            }
            print(line)
        }
        if !config.allPairs.isEmpty {
            let network = await SystemNetworkConstraints().current()
            print("Network: \(network.isMetered ? "metered" : "not metered") (\(network.source))\(network.isLowBattery ? "; battery low" : "")")
        }
    }

    /// How much of a pair is on this device (nil when it never ran or cannot be opened now).
    static func pairResidency(_ home: Home, _ config: Home.Config, _ local: String, _ remote: String) async throws -> ResidencySummary? {
        guard FileManager.default.fileExists(atPath: home.pairDirectory(local: local, remote: remote).path) else { return nil }
        let pair = try home.pairEngine(local: URL(fileURLWithPath: local), remote: remote, strategy: config.conflict)
        return try await pair.residencySummary()
    }

    /// A pair's counts, from its state (nil when it never ran or cannot be opened now).
    static func pairCounts(_ home: Home, _ config: Home.Config, _ local: String, _ remote: String) async throws -> EngineStatus? {
        guard FileManager.default.fileExists(atPath: home.pairDirectory(local: local, remote: remote).path) else { return nil }
        let pair = try home.pairEngine(local: URL(fileURLWithPath: local), remote: remote, strategy: config.conflict)
        return try await pair.engine.status()
    }
}

enum Keep: String, ExpressibleByArgument, CaseIterable {
    case local, remote, both
}

struct Conflicts: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List conflicts (of the library and of every synced folder), or resolve one.",
        subcommands: [ListConflicts.self, ResolveConflict.self], defaultSubcommand: ListConflicts.self)

    /// One place items live in: the library (remote paths), or a synced folder (paths on disk).
    struct Scope {
        var engine: SyncEngine
        /// The synced folder, for a pair.
        var folder: URL?
        var pair: FolderSync?
        /// The pair's folder on the signed-in server (`/Shared`), when that is its remote.
        var remotePath: String?

        /// How the user names an item of this scope: its remote path, or its path on disk.
        func display(_ path: String) -> String {
            guard let folder else { return path }
            return folder.path + path
        }
    }

    /// The library and every remembered folder pair.
    static func scopes(_ home: Home) async throws -> [Scope] {
        var scopes: [Scope] = []
        let config = try home.loadConfig()
        if FileManager.default.fileExists(atPath: home.libraryURL.path) { scopes.append(Scope(engine: try home.engine())) }
        for (local, remote) in config.allPairs {
            guard FileManager.default.fileExists(atPath: home.pairDirectory(local: local, remote: remote).path) else { continue }
            let pair = try home.pairEngine(local: URL(fileURLWithPath: local), remote: remote, strategy: config.conflict)
            var remotePath: String?
            if case .nimbus(let path) = try RemoteSpec(remote, config: config) { remotePath = path }
            scopes.append(Scope(engine: pair.engine, folder: URL(fileURLWithPath: local), pair: pair, remotePath: remotePath))
        }
        return scopes
    }

    struct ListConflicts: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "list", abstract: "List items changed here and there.")
        @OptionGroup var output: OutputOptions

        func run() async throws {
            var rows: [ItemJSON] = []
            for scope in try await Conflicts.scopes(Home.current) {
                for item in try await scope.engine.itemsNeedingAttention() where [.conflict, .unsynced, .readOnly].contains(item.state) {
                    var row = ItemJSON(item, path: scope.display(try await scope.engine.path(of: item.id) ?? item.name))
                    row.reason = Self.reason(item.state)
                    rows.append(row)
                }
            }
            if output.json { return try Output.json(rows) }
            if rows.isEmpty { Output.line("No conflicts.", options: output) }
            for row in rows { print("\(row.path)  \(row.state)  (\(row.reason ?? ""))") }
        }

        /// Why an item waits for the user, in their words.
        static func reason(_ state: ItemState) -> String {
            switch state {
            case .conflict: "changed here and there"
            case .unsynced: "deleted there, changed or kept here"
            case .readOnly: "in a share you may only view: kept on this device, not sent; move it out of the share to keep it as yours"
            default: ""
            }
        }
    }

    struct ResolveConflict: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "resolve", abstract: "Keep this device's version, the server's, or both.")
        @Argument(help: "The item in conflict: its path in a synced folder, or its remote path.")
        var path: String
        @Option(help: "local, remote or both.")
        var keep: Keep
        @OptionGroup var output: OutputOptions

        func run() async throws {
            let home = Home.current
            let scopes = try await Conflicts.scopes(home)
            let absolute = URL(fileURLWithPath: path).standardizedFileURL.path
            // A path in a synced folder names the item there; otherwise it is a remote path of the library.
            var found: (scope: Conflicts.Scope, item: SyncItem)?
            for scope in scopes {
                if let folder = scope.folder, absolute == folder.path || absolute.hasPrefix(folder.path + "/") {
                    let relative = String(absolute.dropFirst(folder.path.count))
                    if let item = try await scope.engine.item(atPath: relative.isEmpty ? "/" : relative) { found = (scope, item) }
                    break
                }
            }
            if found == nil, path.hasPrefix("/") {
                // A remote path: a synced folder's item that waits for the user there, else the library's.
                let remote = RemotePath.normalized(path)
                for scope in scopes where scope.pair != nil {
                    guard let prefix = scope.remotePath, remote == prefix || remote.hasPrefix(prefix == "/" ? "/" : prefix + "/") else { continue }
                    let relative = prefix == "/" ? remote : String(remote.dropFirst(prefix.count))
                    if let item = try await scope.engine.item(atPath: relative.isEmpty ? "/" : relative), item.state == .conflict || item.state == .unsynced {
                        found = (scope, item)
                        break
                    }
                }
                if found == nil, let library = scopes.first(where: { $0.folder == nil }),
                    let item = try await library.engine.item(atPath: remote)
                {
                    found = (library, item)
                }
            }
            guard let (scope, item) = found else { throw CLIError("\(path): no such file or folder.") }
            switch item.state {
            case .conflict:
                let resolution: ConflictResolution = keep == .local ? .keepLocal : keep == .remote ? .keepRemote : .keepBoth
                do { try await scope.engine.resolveConflict(item.id, keeping: resolution) } catch let error as SyncError { throw CLIError(error.description) }
            case .unsynced:
                if keep == .remote { try await scope.engine.confirmDeletion(item.id) } else { try await scope.engine.keepLocalCopy(item.id) }
            case .readOnly:
                throw CLIError(
                    "\(path) is in a share you may only view, so it cannot be sent there: move it out of the share's folder to keep it as yours, or delete it (the share's own version is beside it).")
            default:
                throw CLIError("\(path) is not in conflict.")
            }
            if let pair = scope.pair {
                let report = try await pair.syncOnce()
                for error in report.errors { Output.error("error: \(error)") }
            } else {
                try await drain(scope.engine)
            }
            Output.line("Resolved \(path) (kept \(keep.rawValue)).", options: output)
        }
    }
}
