import ArgumentParser
import Foundation
import NimbusAPI
import NimbusServer

/// `nimbus user ...`: account administration on a data folder (works while the server is stopped or running).
struct User: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Manage user accounts.", subcommands: [Add.self])

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Add a user (or change one with --update).")

        @Argument(help: "The username (letters, digits, '.', '_', '-').")
        var name: String

        @Flag(help: "Read the password from standard input instead of asking for it.")
        var passwordStdin = false

        @Option(help: "Storage quota, e.g. 10GiB; unlimited when absent.", transform: Serve.size)
        var quota: Int64?

        @Option(help: "The server's data folder.")
        var data: String = "./nimbus-data"

        @Option(help: "The server's PostgreSQL database (as given to nimbus serve --database), instead of the data folder's.")
        var database: String?

        @Flag(help: "Change the password and quota of an existing user.")
        var update = false

        func run() async throws {
            let password: String
            if passwordStdin {
                guard let line = readLine(strippingNewline: true), !line.isEmpty else {
                    throw ValidationError("No password on standard input.")
                }
                password = line
            } else {
                guard let first = Terminal.readSecret(prompt: "Password for \(name): "),
                    let second = Terminal.readSecret(prompt: "Repeat it: ")
                else { throw ValidationError("No terminal to ask for a password; use --password-stdin.") }
                guard first == second else { throw ValidationError("The passwords differ; nothing was changed.") }
                password = first
            }
            do {
                let user = try await Admin.addUser(
                    dataDirectory: URL(fileURLWithPath: data), database: database, username: name, password: password, quota: quota,
                    update: update)
                let quotaText = quota.map(ByteCount.format) ?? "unlimited"
                print("\(user.created ? "Added" : "Updated") user \(user.username) (id \(user.id), quota \(quotaText)).")
            } catch {
                throw CLIError("\(error)")
            }
        }
    }
}
