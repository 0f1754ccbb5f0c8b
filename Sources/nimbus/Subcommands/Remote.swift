import ArgumentParser
import Foundation
import NimbusSync

/// `nimbus remote`: storage other than the signed-in server that folders can sync with (`nimbus sync DIR NAME:/path`).
struct RemoteCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "remote", abstract: "Add, list or remove remotes (other places folders can sync with).",
        subcommands: [AddRemote.self, ListRemotes.self, RemoveRemote.self], defaultSubcommand: ListRemotes.self)

    enum Kind: String, ExpressibleByArgument, CaseIterable {
        case local
    }

    struct AddRemote: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "add", abstract: "Add a remote: 'local PATH' is a folder on a mounted disk or NAS.")
        @Argument(help: "Its name (letters, digits, '-', '_'), used as NAME:/path.")
        var name: String
        @Argument(help: "Its type: local.")
        var kind: Kind
        @Argument(help: "For local: the folder.")
        var path: String
        @OptionGroup var output: OutputOptions

        func validate() throws {
            guard !name.isEmpty, name.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" }) else {
                throw ValidationError("A remote's name is letters, digits, '-' and '_' (it is used as NAME:/path).")
            }
        }

        func run() async throws {
            let home = Home.current
            var config = try home.loadConfig()
            guard config.remotes[name] == nil else { throw CLIError("A remote named '\(name)' exists; remove it first ('nimbus remote remove \(name)').") }
            let folder = URL(fileURLWithPath: path).standardizedFileURL
            var isFolder: ObjCBool = false
            guard FileManager.default.fileExists(atPath: folder.path, isDirectory: &isFolder), isFolder.boolValue else {
                throw CLIError("\(folder.path) is not a folder (is the disk mounted?).")
            }
            config.remotes[name] = Home.RemoteConfig(type: kind.rawValue, path: folder.path)
            try home.save(config)
            Output.line("Added \(name): \(kind.rawValue) \(folder.path). Sync a folder with it: nimbus sync DIR \(name):/", options: output)
        }
    }

    struct ListRemotes: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "list", abstract: "List the remotes.")
        @OptionGroup var output: OutputOptions

        func run() async throws {
            let config = try Home.current.loadConfig()
            if output.json {
                return try Output.json(config.remotes.sorted { $0.key < $1.key }.map { ["name": $0.key, "type": $0.value.type, "path": $0.value.path ?? ""] })
            }
            if config.remotes.isEmpty { Output.line("No remotes. Add one: nimbus remote add NAME local PATH", options: output) }
            for (name, remote) in config.remotes.sorted(by: { $0.key < $1.key }) { print("\(name)  \(remote.type)  \(remote.path ?? "")") }
        }
    }

    struct RemoveRemote: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "remove", abstract: "Remove a remote (nothing in it is deleted).")
        @Argument(help: "Its name.")
        var name: String
        @OptionGroup var output: OutputOptions

        func run() async throws {
            let home = Home.current
            var config = try home.loadConfig()
            guard config.remotes.removeValue(forKey: name) != nil else { throw CLIError("No remote named '\(name)'; see 'nimbus remote list'.") }
            // Folder pairs with it are forgotten (their folders and the remote's files stay as they are).
            for (local, remote) in config.pairs where remote.hasPrefix(name + ":") { config.pairs[local] = nil }
            try home.save(config)
            Output.line("Removed \(name).", options: output)
        }
    }
}
