import ArgumentParser
import Foundation
import NimbusAPI
import NimbusSync

/// `nimbus app-password add|list|revoke`: per-device passwords for clients that sign in with a user name and a
/// password (WebDAV: Finder, Explorer, davfs2, rclone), so the account password is never typed into them.
struct AppPasswordCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "app-password", abstract: "Make, list or revoke app passwords (for WebDAV clients).",
        subcommands: [Add.self, ListCommand.self, Revoke.self])

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "add", abstract: "Make an app password; it is printed this once (the server keeps only a hash).")

        @Argument(help: "What it is for, e.g. \"Finder on the laptop\".")
        var label: String

        @OptionGroup var output: OutputOptions

        func run() async throws {
            let label = label.trimmingCharacters(in: .whitespacesAndNewlines)
            guard (1...100).contains(label.count) else { throw CLIError("A label is 1 to 100 characters.") }
            let engine = try await Home.current.signedInEngine()
            let made = try await engine.server().call(Routes.createAppPassword, body: AppPasswordRequest(label: label))
            if output.json { return try Output.json(made) }
            guard let password = made.password else { throw CLIError("The server made the app password but sent no secret; revoke \(made.id).") }
            if output.quiet {
                print(password)
            } else {
                print("App password for \"\(made.label)\" (id \(made.id)); it is shown only now:")
                print("  \(password)")
                if let account = await engine.account {
                    print("Sign in as \(account.username) with it, e.g. at \(account.server.appending(path: "dav").absoluteString)/")
                }
            }
        }
    }

    struct ListCommand: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "list", abstract: "List the account's app passwords (never their secrets).")

        @OptionGroup var output: OutputOptions

        func run() async throws {
            let engine = try await Home.current.signedInEngine()
            let list = try await engine.server().call(Routes.appPasswords)
            if output.json { return try Output.json(list) }
            if list.appPasswords.isEmpty {
                if !output.quiet { print("No app passwords. Make one with: nimbus app-password add LABEL") }
                return
            }
            for entry in list.appPasswords {
                let used = entry.lastUsedAt.map { "last used \(Output.date($0))" } ?? "never used"
                print("\(entry.id)  \(entry.label)  (made \(Output.date(entry.createdAt)), \(used))")
            }
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "revoke", abstract: "Revoke an app password: clients using it are refused.")

        @Argument(help: "The app password's id (from 'nimbus app-password list').")
        var id: String

        @OptionGroup var output: OutputOptions

        func run() async throws {
            let engine = try await Home.current.signedInEngine()
            do {
                _ = try await engine.server().call(Routes.revokeAppPassword, id)
            } catch let error as SyncError {
                if case .server(let status, _, _, _) = error, status == 404 {
                    throw CLIError("No app password \(id) on this account ('nimbus app-password list' shows them).")
                }
                throw error
            }
            Output.line("Revoked \(id).", options: output)
        }
    }
}
