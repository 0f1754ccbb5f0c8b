import ArgumentParser
import Foundation
import NimbusAPI
import NimbusSync

struct Login: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Sign this device in to a Nimbus server.")

    @Argument(help: "The server, e.g. http://127.0.0.1:8080")
    var url: String

    @Option(help: "Your username.")
    var username: String

    @Flag(help: "Read the password from standard input.")
    var passwordStdin = false

    @Option(help: "This device's name (shown in conflict copies).")
    var deviceName: String?

    @Flag(help: "Encrypt this device's store at rest (AES-256: cached files, queued uploads, names), under a passphrase from NIMBUS_PASSPHRASE or asked for. Chosen when the store is made; every later command unlocks it the same way.")
    var encrypt = false

    func run() async throws {
        guard let server = URL(string: url), server.scheme == "http" || server.scheme == "https", server.host != nil else {
            throw ValidationError("'\(url)' is not a server URL (e.g. http://127.0.0.1:8080).")
        }
        let password: String
        if passwordStdin {
            guard let line = readLine(strippingNewline: true), !line.isEmpty else { throw CLIError("No password on standard input.") }
            password = line
        } else {
            guard let line = Terminal.readSecret(prompt: "Password for \(username): ") else {
                throw CLIError("No terminal to ask for a password; use --password-stdin.")
            }
            password = line
        }
        let home = Home.current
        var encryption: StoreEncryption?
        if encrypt && !home.isEncrypted {
            if FileManager.default.fileExists(atPath: home.libraryURL.appending(path: "sync.sqlite").path) {
                throw CLIError(
                    "This device's store (\(home.libraryURL.path)) was made without encryption. Run 'nimbus logout --wipe' first (after a sync: queued changes would be lost), then log in with --encrypt.")
            }
            encryption = .passphrase(try Home.passphrase(prompt: "New passphrase for this device's store: ", confirming: true))
        }
        var config = try home.loadConfig()
        if let deviceName { config.deviceName = deviceName }
        try home.save(config)
        let engine = try home.engine(creating: encryption)
        do {
            try await engine.signIn(server: server, username: username, password: password)
        } catch let error as SyncError {
            throw CLIError("Login failed: \(error.description)")
        }
        config.server = server
        config.username = username
        try home.save(config)
        print("Logged in to \(server.absoluteString) as \(username) (device \(config.deviceName))\(engine.isEncrypted ? "; this device's store is encrypted" : "").")
    }
}

struct Logout: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Sign this device out (local files and queued changes stay).")

    @Flag(help: "Also delete this device's store: its key (an encrypted store can never be read again), cached files and queue, and the folder pairs' sync state (your synced folders stay). Refused while changes wait to be sent.")
    var wipe = false

    @Flag(help: "With --wipe: go ahead even though changes wait to be sent (they are lost).")
    var discardPending = false

    func run() async throws {
        let home = Home.current
        if wipe { return try await wipeStore(home) }
        let engine = try home.engine()
        await engine.signOut()
        var config = try home.loadConfig()
        config.username = nil
        try home.save(config)
        print("Logged out.")
    }

    func wipeStore(_ home: Home) async throws {
        // Read while it can be (an encrypted home's folder pairs open with the store's key).
        var config = try home.loadConfig(unsealing: false)
        let keyring = home.keyring()
        if FileManager.default.fileExists(atPath: home.libraryURL.appending(path: "sync.sqlite").path) {
            var engine: SyncEngine?
            do {
                engine = try home.engine()
            } catch let error as CLIError {
                // Locked (no passphrase): what waits cannot be checked.
                guard discardPending else {
                    throw CLIError("\(error.description)\nWithout the store unlocked, unsent changes cannot be checked: pass --discard-pending to wipe anyway.")
                }
            }
            do {
                try await engine?.signOut(wipingKeys: true, discardingPending: discardPending)
            } catch let error as SyncError {
                throw CLIError("\(error.description) Run 'nimbus uploads resume' first, or pass --discard-pending.")
            }
        }
        try? keyring?.deleteKey()  // a key 'nimbus unlock' kept goes too
        for folder in [home.libraryURL, home.url.appending(path: "pairs")] where FileManager.default.fileExists(atPath: folder.path) {
            try FileManager.default.removeItem(at: folder)
        }
        config.username = nil
        config.pairs = [:]
        config.sealedPairs = nil
        try home.save(config)
        print("Logged out; this device's store was wiped (its key, cached files, queue and folder pairs' sync state).")
    }
}

struct PassphraseCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "passphrase",
        abstract: "Change the passphrase of this device's encrypted store (its key is re-wrapped; nothing is re-encrypted).")

    @Flag(help: "Read the new passphrase from standard input (the current one comes from NIMBUS_PASSPHRASE or is asked for).")
    var newPassphraseStdin = false

    func run() async throws {
        let home = Home.current
        guard home.isEncrypted else { throw CLIError("This device's store is not encrypted (log in with --encrypt to make an encrypted one).") }
        let current = try Home.passphrase(prompt: "Current passphrase: ")
        let new: String
        if newPassphraseStdin {
            guard let line = readLine(strippingNewline: true), !line.isEmpty else { throw CLIError("No new passphrase on standard input.") }
            new = line
        } else {
            guard let typed = Terminal.readSecret(prompt: "New passphrase: "), !typed.isEmpty else {
                throw CLIError("No terminal to ask for the new passphrase; use --new-passphrase-stdin.")
            }
            guard Terminal.readSecret(prompt: "Again: ") == typed else { throw CLIError("The passphrases differ; nothing was changed.") }
            new = typed
        }
        let before = home.keyring()
        do {
            try SyncEngine.changePassphrase(in: home.libraryURL, from: current, to: new)
        } catch let error as EncryptionError {
            throw Home.explained(error)
        }
        try? before?.deleteKey()  // an unlock of the old wrapping ends with it
        print("The passphrase of this device's store was changed.")
    }
}

struct UnlockCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "unlock",
        abstract: "Keep this device's encrypted store unlocked for a while, so commands need no passphrase.",
        discussion: """
            The store's key is kept in this user's kernel keyring (Linux), never on disk, until the time is up, \
            'nimbus lock', 'nimbus logout --wipe' or a reboot. Any process of this user can use it meanwhile \
            (as with ssh-agent).
            """)

    @Option(name: .customLong("for"), help: "How long: 30s, 15m, 8h, 7d (at most 30d).")
    var lifetime = "15m"

    func run() async throws {
        let home = Home.current
        guard home.isEncrypted else { throw CLIError("This device's store is not encrypted; there is nothing to unlock.") }
        guard let (duration, words) = Self.duration(lifetime) else {
            throw CLIError("--for takes a number and a unit (s, m, h or d) up to 30d, such as 15m or 8h; not '\(lifetime)'.")
        }
        guard KernelKeyring.isAvailable, let keyring = home.keyring(lifetime: duration) else {
            throw CLIError("This system has no kernel keyring nimbus can use (libkeyutils.so.1); set NIMBUS_PASSPHRASE for each command instead.")
        }
        let key = try home.unwrapWithPassphrase()
        do {
            try keyring.deleteKey()
            try keyring.storeKey(key)
        } catch let error as EncryptionError {
            throw Home.explained(error)
        }
        print("This device's store stays unlocked for \(words) (its key in this user's kernel keyring, never on disk); 'nimbus lock' forgets it sooner.")
    }

    /// `30s`, `15m`, `8h`, `7d` → the duration and how to say it; nil for anything else or over 30 days.
    static func duration(_ text: String) -> (Duration, String)? {
        let units: [Character: (seconds: Int64, word: String)] = ["s": (1, "second"), "m": (60, "minute"), "h": (3600, "hour"), "d": (86400, "day")]
        guard let last = text.last, let unit = units[last], let count = Int64(text.dropLast()), count > 0 else { return nil }
        let seconds = count * unit.seconds
        guard seconds <= 30 * 86400 else { return nil }
        return (.seconds(seconds), "\(count) \(unit.word)\(count == 1 ? "" : "s")")
    }
}

struct LockCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "lock", abstract: "Forget the key 'nimbus unlock' kept: commands ask for the passphrase again.")

    func run() async throws {
        let home = Home.current
        guard home.isEncrypted else { throw CLIError("This device's store is not encrypted; there is nothing to lock.") }
        do { try home.keyring()?.deleteKey() } catch let error as EncryptionError { throw Home.explained(error) }
        print("Locked: commands ask for the passphrase of this device's store again.")
    }
}

struct WhoAmI: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "whoami", abstract: "Show the signed-in account.")

    @OptionGroup var output: OutputOptions

    func run() async throws {
        let home = Home.current
        let engine = try home.engine()
        guard let account = await engine.account else { throw CLIError("Not logged in. Run: nimbus login URL --username NAME") }
        let config = try home.loadConfig()
        if output.json {
            try Output.json(["username": account.username, "userId": account.userId, "server": account.server.absoluteString, "device": config.deviceName])
        } else {
            print("\(account.username) on \(account.server.absoluteString) (device \(config.deviceName))")
        }
    }
}

struct AboutCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "about", abstract: "Show the account's quota and the server's limits.")

    @OptionGroup var output: OutputOptions

    func run() async throws {
        let engine = try await Home.current.signedInEngine()
        let about = try await engine.server().call(Routes.about)
        if output.json { return try Output.json(about) }
        let limit = about.quota.limit.map(Output.size) ?? "unlimited"
        print("\(about.username): \(Output.size(about.quota.used)) used of \(limit)")
        print("largest file \(Output.size(about.maxUploadSize)), chunk size \(Output.size(about.chunkSize)), API \(about.apiVersion)")
    }
}
