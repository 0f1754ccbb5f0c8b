import ArgumentParser
import Foundation
import NimbusAPI
import NimbusServer

/// Where a server keeps its store: `--data` (SQLite and blocks) or `--database` (PostgreSQL), as `nimbus serve` takes
/// them (`nimbus user …`, `nimbus admin verify`).
struct ServerStore: ParsableArguments {
    @Option(help: "The server's data folder.")
    var data: String = "./nimbus-data"

    @Option(help: "The server's PostgreSQL database (as given to nimbus serve --database), instead of the data folder's.")
    var database: String?

    var folder: URL { URL(fileURLWithPath: data) }
}

/// `nimbus user ...`: account administration on a server's store — while the server runs or not (each change is in
/// the database, which the server reads on every request).
struct User: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Manage user accounts.", subcommands: [Add.self, List.self, Passwd.self, Quota.self, Disable.self, Enable.self, Remove.self])

    /// Runs an account operation; its failure is a message on stderr and a non-zero exit.
    static func run<T>(_ body: () async throws -> T) async throws -> T {
        do { return try await body() } catch let error as ValidationError { throw error } catch { throw CLIError("\(error)") }
    }

    /// A password from the terminal (asked twice) or one line of standard input.
    static func password(for name: String, stdin: Bool) throws -> String {
        if stdin {
            guard let line = readLine(strippingNewline: true), !line.isEmpty else { throw ValidationError("No password on standard input.") }
            return line
        }
        guard let first = Terminal.readSecret(prompt: "Password for \(name): "), let second = Terminal.readSecret(prompt: "Repeat it: ") else {
            throw ValidationError("No terminal to ask for a password; use --password-stdin.")
        }
        guard first == second else { throw ValidationError("The passwords differ; nothing was changed.") }
        return first
    }

    static func quotaText(_ quota: Int64?) -> String { quota.map(ByteCount.format) ?? "unlimited" }

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Add a user (or change one with --update).")

        @Argument(help: "The username (letters, digits, '.', '_', '-').")
        var name: String

        @Flag(help: "Read the password from standard input instead of asking for it.")
        var passwordStdin = false

        @Option(help: "Storage quota, e.g. 10GiB; unlimited when absent.", transform: Serve.size)
        var quota: Int64?

        @OptionGroup var store: ServerStore

        @Flag(help: "Change the password and quota of an existing user.")
        var update = false

        func run() async throws {
            let password = try User.password(for: name, stdin: passwordStdin)
            let user = try await User.run {
                try await Admin.addUser(
                    dataDirectory: store.folder, database: store.database, username: name, password: password, quota: quota, update: update)
            }
            print("\(user.created ? "Added" : "Updated") user \(user.username) (id \(user.id), quota \(User.quotaText(quota))).")
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List the accounts: name, id, quota, used, devices, last seen, disabled.")

        @Flag(help: "Print JSON (an array of {id, username, quota, used, devices, appPasswords, lastSeen, createdAt, disabled}).")
        var json = false

        @OptionGroup var store: ServerStore

        func run() async throws {
            let users = try await User.run { try await Admin.users(dataDirectory: store.folder, database: store.database) }
            if json { return try Output.json(users) }
            guard !users.isEmpty else { return print("No users yet: add one with 'nimbus user add NAME'.") }
            let dates = DateFormatter()
            dates.dateFormat = "yyyy-MM-dd HH:mm"
            let rows = users.map { user in
                [
                    user.username, user.id, User.quotaText(user.quota), ByteCount.format(user.used),
                    "\(user.devices)" + (user.appPasswords > 0 ? " + \(user.appPasswords) app" : ""),
                    user.lastSeen.map(dates.string(from:)) ?? "never", user.disabled ? "disabled" : "",
                ]
            }
            let header = ["USER", "ID", "QUOTA", "USED", "DEVICES", "LAST SEEN", ""]
            let widths = header.indices.map { column in ([header] + rows).map { $0[column].count }.max() ?? 0 }
            for row in [header] + rows {
                print(zip(row, widths).map { $0.padding(toLength: $1, withPad: " ", startingAt: 0) }.joined(separator: "  ").trimmingCharacters(in: .whitespaces))
            }
        }
    }

    struct Passwd: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Set a user's password; every device and app password of the account is signed out.")

        @Argument(help: "The username.")
        var name: String

        @Flag(help: "Read the password from standard input instead of asking for it.")
        var passwordStdin = false

        @OptionGroup var store: ServerStore

        func run() async throws {
            let password = try User.password(for: name, stdin: passwordStdin)
            try await User.run { try await Admin.setPassword(dataDirectory: store.folder, database: store.database, username: name, password: password) }
            print("Changed the password of \(name); its devices and app passwords are signed out.")
        }
    }

    struct Quota: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Set a user's storage quota (a size such as 10GiB, or none).")

        @Argument(help: "The username.")
        var name: String

        @Argument(help: "The quota: a size (10GiB, 500MB, 1048576) or 'none' for unlimited.")
        var size: String

        @OptionGroup var store: ServerStore

        func run() async throws {
            let quota: Int64? = size.lowercased() == "none" ? nil : try Serve.size(size)
            let user = try await User.run {
                try await Admin.setQuota(dataDirectory: store.folder, database: store.database, username: name, quota: quota)
            }
            var line = "Quota of \(name): \(User.quotaText(quota)) (\(ByteCount.format(user.used)) used)."
            if let quota, user.used > quota { line += " It is over: nothing new goes in until files are deleted or the quota raised." }
            print(line)
        }
    }

    struct Disable: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Disable an account: sign-in refused, its tokens and app passwords refused at once; its data is kept.")

        @Argument(help: "The username.")
        var name: String

        @OptionGroup var store: ServerStore

        func run() async throws {
            let changed = try await User.run { try await Admin.setDisabled(dataDirectory: store.folder, database: store.database, username: name, true) }
            print(changed ? "Disabled \(name): nothing signs in to it now; its files are kept ('nimbus user enable \(name)' undoes it)." : "\(name) is disabled already.")
        }
    }

    struct Enable: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Enable a disabled account again (its devices and app passwords work again).")

        @Argument(help: "The username.")
        var name: String

        @OptionGroup var store: ServerStore

        func run() async throws {
            let changed = try await User.run { try await Admin.setDisabled(dataDirectory: store.folder, database: store.database, username: name, false) }
            print(changed ? "Enabled \(name)." : "\(name) is not disabled.")
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Remove an account and all its data (files, versions, trash, shares, devices); its storage is freed by the next sweep.")

        @Argument(help: "The username.")
        var name: String

        @Flag(help: "Yes, remove the account and everything it holds (required: this cannot be undone).")
        var yes = false

        @OptionGroup var store: ServerStore

        func run() async throws {
            guard yes else {
                throw ValidationError("Removing \(name) deletes the account and every file it holds, for good; pass --yes to do it (or 'nimbus user disable \(name)' to keep the data).")
            }
            let (user, items) = try await User.run { try await Admin.removeUser(dataDirectory: store.folder, database: store.database, username: name) }
            print("Removed \(name) (id \(user.id)): \(items) files and folders, \(ByteCount.format(user.used)) to be freed by the server's next sweep.")
        }
    }
}
