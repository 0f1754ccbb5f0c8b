import ArgumentParser
import Crypto
import Foundation
import NimbusAPI
import NimbusSync

/// `nimbus remote`: storage other than the signed-in server that folders can sync with (`nimbus sync DIR NAME:/path`).
struct RemoteCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "remote", abstract: "Add, list, inspect or remove remotes (other places folders can sync with).",
        subcommands: [AddRemote.self, ListRemotes.self, AboutRemote.self, LoginRemote.self, RemoveRemote.self], defaultSubcommand: ListRemotes.self)

    enum Kind: String, ExpressibleByArgument, CaseIterable {
        case local, webdav, s3, crypt
    }

    struct AddRemote: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "add",
            abstract: """
                Add a remote: 'local PATH' (a folder on a mounted disk or NAS), 'webdav --url URL --user U', 's3 --endpoint URL --bucket B', \
                or 'crypt --remote OTHER:/path' (end-to-end encrypted, into another remote or the server).
                """,
            discussion: """
                WebDAV: the password (an app password) is read from standard input with --password-stdin, asked for on a \
                terminal, or, if neither, read at each use from NIMBUS_REMOTE_<NAME>_PASSWORD. S3: the keys are read from \
                standard input with --keys-stdin (two lines: access key id, secret key) — or when piped there and \
                AWS_ACCESS_KEY_ID is not set — else at each use from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY. What is read is stored in $NIMBUS_HOME/remotes/NAME.secret \
                (mode 0600) and never printed. The remote is tried before it is added.

                crypt: names and contents are encrypted on this device before they reach OTHER:/path (another remote, or \
                /path on the signed-in server; the folder is made if missing). The passphrase is read from standard input \
                with --passphrase-stdin or asked for on a terminal (then the data key it opens is stored, 0600, not the passphrase), or read at each use from \
                NIMBUS_CRYPT_PASSPHRASE. The first add makes the remote's key (a random key wrapped by the passphrase, in \
                nimbus-crypt.json there); later adds (other devices) must give the same passphrase. Lose it and the data is lost.
                """)
        @Argument(help: "Its name (letters, digits, '-', '_'), used as NAME:/path.")
        var name: String
        @Argument(help: "Its type: local, webdav, s3 or crypt.")
        var kind: Kind
        @Argument(help: "For local: the folder.")
        var path: String?
        @Option(help: "For webdav: the folder's URL (https://, or http:// to this machine).")
        var url: String?
        @Option(help: "For webdav: the user name.")
        var user: String?
        @Flag(help: "For webdav: read the password from standard input.")
        var passwordStdin = false
        @Option(help: "For s3: the endpoint URL (https://s3.eu-central-1.amazonaws.com, http://127.0.0.1:9000, …).")
        var endpoint: String?
        @Option(help: "For s3: the bucket.")
        var bucket: String?
        @Option(help: "For s3: the region (default us-east-1).")
        var region: String?
        @Option(help: "For s3: a key prefix inside the bucket (default: the whole bucket).")
        var prefix: String?
        @Flag(help: "For s3: read the access key id and the secret key (one per line) from standard input.")
        var keysStdin = false
        @Option(name: .customLong("remote"), help: "For crypt: where to keep the encrypted files (OTHER:/path, or /path on the signed-in server).")
        var wrapped: String?
        @Flag(help: "For crypt: read the passphrase from standard input.")
        var passphraseStdin = false
        @OptionGroup var output: OutputOptions

        func validate() throws {
            guard !name.isEmpty, name.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" }) else {
                throw ValidationError("A remote's name is letters, digits, '-' and '_' (it is used as NAME:/path).")
            }
            switch kind {
            case .local:
                guard path != nil else { throw ValidationError("A local remote needs its folder: nimbus remote add \(name) local PATH") }
            case .webdav:
                guard url != nil else { throw ValidationError("A WebDAV remote needs --url URL (and --user U).") }
            case .s3:
                guard endpoint != nil, bucket != nil else { throw ValidationError("An S3 remote needs --endpoint URL and --bucket B.") }
            case .crypt:
                guard wrapped != nil else { throw ValidationError("An encrypted remote needs --remote OTHER:/path (or /path on the signed-in server).") }
            }
            if kind != .crypt, wrapped != nil || passphraseStdin { throw ValidationError("--remote and --passphrase-stdin are for crypt.") }
            if kind != .local, path != nil { throw ValidationError("Only a local remote takes a PATH; \(kind.rawValue) takes options.") }
            if kind != .webdav, url != nil || user != nil || passwordStdin { throw ValidationError("--url, --user and --password-stdin are for webdav.") }
            if kind != .s3, endpoint != nil || bucket != nil || region != nil || prefix != nil || keysStdin {
                throw ValidationError("--endpoint, --bucket, --region, --prefix and --keys-stdin are for s3.")
            }
        }

        func run() async throws {
            let home = Home.current
            var config = try home.loadConfig()
            guard config.remotes[name] == nil else { throw CLIError("A remote named '\(name)' exists; remove it first ('nimbus remote remove \(name)').") }
            var remote = Home.RemoteConfig(type: kind.rawValue)
            var secret: Home.Secret?
            switch kind {
            case .local:
                let folder = URL(fileURLWithPath: path ?? "").standardizedFileURL
                var isFolder: ObjCBool = false
                guard FileManager.default.fileExists(atPath: folder.path, isDirectory: &isFolder), isFolder.boolValue else {
                    throw CLIError("\(folder.path) is not a folder (is the disk mounted?).")
                }
                remote.path = folder.path
            case .webdav:
                guard let text = url, let parsed = URL(string: text), parsed.host != nil else { throw CLIError("'\(url ?? "")' is not a URL.") }
                do { try WebDAVProvider.check(url: parsed, username: user) } catch let error as ProviderError { throw CLIError(error.description) }
                remote.url = text
                remote.user = user
                if let user { secret = try Self.password(for: user, name: name, fromStandardInput: passwordStdin).map { Home.Secret(password: $0) } }
            case .s3:
                guard let text = endpoint, let parsed = URL(string: text), parsed.scheme == "http" || parsed.scheme == "https", parsed.host != nil else {
                    throw CLIError("'\(endpoint ?? "")' is not an endpoint URL (https://…).")
                }
                remote.endpoint = text
                remote.bucket = bucket
                remote.region = region
                remote.prefix = prefix.map { RemotePath.components($0).joined(separator: "/") }
                secret = keysStdin ? try Self.keys() : try Self.pipedKeys()
            case .crypt:
                return try await addCrypt(home: home, config: config)
            }
            // Tried before it is kept: a wrong password or a missing bucket is said now, not at the first sync.
            if let secret { try home.saveSecret(secret, for: name) }
            do {
                let provider = try home.providerMaker(name, remote, path: "/")(NimbusProvider.NoState())
                _ = try await provider.root()
            } catch let error as ProviderError {
                if secret != nil { home.removeSecret(for: name) }
                switch error {
                case .unauthorized(let detail): throw CLIError("Could not use \(name) (\(remote.location)): \(detail); nothing was added.")
                // (Not "will retry", as a sync says: nothing here tries again.)
                case .network(let detail): throw CLIError("Could not use \(name) (\(remote.location)): it could not be reached (\(detail)); nothing was added.")
                default: throw CLIError("Could not use \(name) (\(remote.location)): \(error.description) Nothing was added.")
                }
            } catch {
                if secret != nil { home.removeSecret(for: name) }
                throw error
            }
            config.remotes[name] = remote
            try home.save(config)
            Output.line("Added \(name): \(kind.rawValue) \(remote.location). Sync a folder with it: nimbus sync DIR \(name):/", options: output)
        }

        /// A crypt remote: the folder it encrypts into is made if missing, its key made there (or, when another device
        /// made it, opened with the passphrase given), then the remote is kept.
        func addCrypt(home: Home, config: Home.Config) async throws {
            var config = config
            guard let spec = wrapped else { return }
            var remote = Home.RemoteConfig(type: "crypt")
            remote.remote = spec
            let target = try RemoteSpec(spec, config: config)
            if case .named(let other, let otherRemote, _) = target, otherRemote.type == "crypt" {
                throw CLIError("'\(other)' is encrypted itself; encrypt into a local, webdav or s3 remote, or the server.")
            }
            let passphrase = try Self.passphrase(name: name, fromStandardInput: passphraseStdin)
            let given = passphrase ?? ProcessInfo.processInfo.environment[Home.cryptPassphraseVariable] ?? ""
            guard !given.isEmpty else { throw CLIError("No passphrase: use --passphrase-stdin, or set \(Home.cryptPassphraseVariable).") }
            let made: Bool
            var dataKey: String?
            do {
                // The folder there, made if missing (like mkdir -p), then the key in it.
                let top: RemoteSpec
                switch target {
                case .nimbus: top = .nimbus(path: "/")
                case .named(let other, let otherRemote, _): top = .named(name: other, remote: otherRemote, path: "/")
                }
                var wrappedTop = remote
                wrappedTop.remote = top.description
                let topProvider = try home.wrappedProviderMaker(name, wrappedTop)(NimbusProvider.NoState())
                switch target {
                case .nimbus(let path), .named(_, _, let path): _ = try await topProvider.makeFolders(RemotePath.components(path))
                }
                let inner = try home.wrappedProviderMaker(name, remote)(NimbusProvider.NoState())
                let scratch = home.url.appending(path: "crypt-scratch/\(name)")
                made = try await CryptProvider.create(over: inner, passphrase: given, scratch: scratch)
                // Given here (not from the environment): its data key is kept, 0600, never the passphrase.
                if passphrase != nil {
                    let key = try await CryptProvider.unlock(over: inner, passphrase: given, scratch: scratch)
                    dataKey = key.withUnsafeBytes { Data($0).base64EncodedString() }
                }
            } catch let error as ProviderError {
                if case .unauthorized = error {
                    throw CLIError("\(spec) already holds an encrypted remote, and this passphrase does not open it; nothing was added.")
                }
                throw CLIError("Could not use \(spec): \(error.description)")
            }
            if let dataKey { try home.saveSecret(Home.Secret(cryptKey: dataKey), for: name) }
            config.remotes[name] = remote
            try home.save(config)
            Output.line(
                (made ? "Added \(name): encrypted, in \(spec) (a new key, wrapped by your passphrase, is in \(CryptProvider.keyFileName) there; "
                    + "without the passphrase nothing can be read back)."
                    : "Added \(name): encrypted, in \(spec) (opened with your passphrase).")
                    + " Sync a folder with it: nimbus sync DIR \(name):/", options: output)
        }

        /// A crypt passphrase: from standard input, asked for on a terminal, or nil (the environment's, at each use).
        static func passphrase(name: String, fromStandardInput: Bool) throws -> String? {
            if fromStandardInput {
                guard let line = readLine(strippingNewline: true), !line.isEmpty else { throw CLIError("No passphrase on standard input.") }
                return line
            }
            return Terminal.readSecret(prompt: "Passphrase for the encrypted remote \(name): ")
        }

        /// The password: from standard input, asked for on a terminal, or nil (read from the environment at each use).
        static func password(for user: String, name: String, fromStandardInput: Bool) throws -> String? {
            if fromStandardInput {
                guard let line = readLine(strippingNewline: true), !line.isEmpty else { throw CLIError("No password on standard input.") }
                return line
            }
            if let line = Terminal.readSecret(prompt: "Password for \(user) (an app password where the server has them): ") {
                return line
            }
            guard ProcessInfo.processInfo.environment[Home.passwordVariable(name)] != nil else {
                throw CLIError("No password: use --password-stdin, or set \(Home.passwordVariable(name)).")
            }
            return nil
        }

        /// The S3 keys from standard input: the access key id, then the secret key.
        static func keys() throws -> Home.Secret {
            guard let id = readLine(strippingNewline: true), !id.isEmpty, let secret = readLine(strippingNewline: true), !secret.isEmpty else {
                throw CLIError("--keys-stdin reads two lines: the access key id, then the secret key.")
            }
            return Home.Secret(accessKey: id, secretKey: secret)
        }

        /// S3 keys without `--keys-stdin`: `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` when set (nil: used at each
        /// use), else the two lines piped to standard input (`printf 'ID\nSECRET\n' | nimbus remote add …`). Nothing
        /// is read from a terminal, nor waited for more than a second from a pipe that stays open with nothing in it.
        static func pipedKeys() throws -> Home.Secret? {
            let environment = ProcessInfo.processInfo.environment
            if !(environment["AWS_ACCESS_KEY_ID"] ?? "").isEmpty, !(environment["AWS_SECRET_ACCESS_KEY"] ?? "").isEmpty { return nil }
            guard isatty(0) == 0 else { return nil }
            var descriptor = pollfd(fd: 0, events: Int16(POLLIN), revents: 0)
            guard poll(&descriptor, 1, 1000) == 1 else { return nil }
            let id = readLine(strippingNewline: true)?.trimmingCharacters(in: .whitespaces) ?? ""
            let secret = readLine(strippingNewline: true)?.trimmingCharacters(in: .whitespaces) ?? ""
            if id.isEmpty, secret.isEmpty { return nil }  // an empty stdin (/dev/null): no keys given that way
            guard !id.isEmpty, !secret.isEmpty else {
                throw CLIError("Keys on standard input are two lines: the access key id, then the secret key.")
            }
            return Home.Secret(accessKey: id, secretKey: secret)
        }
    }

    struct ListRemotes: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "list", abstract: "List the remotes.")
        @OptionGroup var output: OutputOptions

        func run() async throws {
            let config = try Home.current.loadConfig()
            if output.json {
                return try Output.json(
                    config.remotes.sorted { $0.key < $1.key }.map { RemoteJSON(name: $0.key, remote: $0.value) })
            }
            if config.remotes.isEmpty { Output.line("No remotes. Add one: nimbus remote add NAME local|webdav|s3 …", options: output) }
            for (name, remote) in config.remotes.sorted(by: { $0.key < $1.key }) { print("\(name)  \(remote.type)  \(remote.location)") }
        }
    }

    /// A remote as JSON (never its secret).
    struct RemoteJSON: Encodable {
        var name: String
        var type: String
        var path: String
        var url, user, endpoint, bucket, region, prefix, remote: String?

        init(name: String, remote: Home.RemoteConfig) {
            self.name = name
            type = remote.type
            path = remote.path ?? ""
            url = remote.url
            user = remote.user
            endpoint = remote.endpoint
            bucket = remote.bucket
            region = remote.region
            prefix = remote.prefix
            self.remote = remote.remote
        }
    }

    struct AboutRemote: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "about", abstract: "A remote's quota and capabilities (it is asked).")
        @Argument(help: "Its name.")
        var name: String
        @OptionGroup var output: OutputOptions

        func run() async throws {
            let home = Home.current
            let config = try home.loadConfig()
            guard let remote = config.remotes[name] else { throw CLIError("No remote named '\(name)'; see 'nimbus remote list'.") }
            let provider = try home.providerMaker(name, remote, path: "/")(NimbusProvider.NoState())
            var quota: (used: Int64, limit: Int64?)?
            do {
                _ = try await provider.root()
                if let quoted = provider.features.quota { quota = try? await quoted.quota() }
                // What cannot be told is found by trying (S3's conditional writes: a hidden object, then deleted).
                try? await provider.features.probe?.probeFeatures()
            } catch let error as ProviderError {
                if case .unauthorized = error { throw CLIError("\(name) refused the credentials; sign in again with 'nimbus remote login \(name)'.") }
                throw CLIError("\(name) (\(remote.location)): \(error.description)")
            }
            let features = provider.features
            let capabilities = features.names
            if output.json {
                struct About: Encodable {
                    var name, type, location: String
                    var capabilities: [String]
                    var used: Int64?
                    var limit: Int64?
                }
                return try Output.json(
                    About(name: name, type: remote.type, location: remote.location, capabilities: capabilities, used: quota?.used, limit: quota?.limit))
            }
            print("\(name): \(remote.type) \(remote.location)")
            if let quota {
                print("  space: \(ByteCount.format(quota.used)) used" + (quota.limit.map { " of \(ByteCount.format($0))" } ?? " (no limit reported)"))
            } else {
                print("  space: not reported by this remote")
            }
            print("  capabilities: \(capabilities.isEmpty ? "none beyond the basics" : capabilities.joined(separator: ", "))")
            print("  changes are found by: \(features.changeFeed ? "its change feed" : "listing it and comparing")")
        }
    }

    struct LoginRemote: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "login", abstract: "Give a remote new credentials (after it refused the old ones: 'sign in again').")
        @Argument(help: "Its name.")
        var name: String
        @Flag(help: "For webdav: read the password from standard input.")
        var passwordStdin = false
        @Flag(help: "For s3: read the access key id and the secret key (one per line) from standard input.")
        var keysStdin = false
        @Flag(help: "For crypt: read the passphrase from standard input.")
        var passphraseStdin = false
        @OptionGroup var output: OutputOptions

        func run() async throws {
            let home = Home.current
            let config = try home.loadConfig()
            guard let remote = config.remotes[name] else { throw CLIError("No remote named '\(name)'; see 'nimbus remote list'.") }
            let secret: Home.Secret
            switch remote.type {
            case "crypt":
                guard let passphrase = try AddRemote.passphrase(name: name, fromStandardInput: passphraseStdin) else {
                    throw CLIError("No passphrase given (use --passphrase-stdin); \(Home.cryptPassphraseVariable) is used as it is.")
                }
                // The data key it opens is what is kept (checked here: a wrong passphrase keeps the old secret).
                do {
                    let inner = try home.wrappedProviderMaker(name, remote)(NimbusProvider.NoState())
                    let key = try await CryptProvider.unlock(over: inner, passphrase: passphrase, scratch: home.url.appending(path: "crypt-scratch/\(name)"))
                    secret = Home.Secret(cryptKey: key.withUnsafeBytes { Data($0).base64EncodedString() })
                } catch let error as ProviderError {
                    if case .unauthorized = error { throw CLIError("That passphrase does not open \(name); the key kept is the one before.") }
                    throw CLIError("\(name) (\(remote.location)): \(error.description)")
                }
            case "webdav":
                guard let user = remote.user else { throw CLIError("\(name) has no user name; it needs no password.") }
                guard let password = try AddRemote.password(for: user, name: name, fromStandardInput: passwordStdin) else {
                    throw CLIError("No password given; \(Home.passwordVariable(name)) is used as it is.")
                }
                secret = Home.Secret(password: password)
            case "s3":
                if keysStdin {
                    secret = try AddRemote.keys()
                } else if let piped = try AddRemote.pipedKeys() {
                    secret = piped
                } else {
                    throw CLIError("Give the keys with --keys-stdin (or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY).")
                }
            default:
                throw CLIError("\(name) is a \(remote.type) remote; it has no credentials.")
            }
            let previous = try? Data(contentsOf: home.secretURL(name))
            try home.saveSecret(secret, for: name)
            do {
                _ = try await home.providerMaker(name, remote, path: "/")(NimbusProvider.NoState()).root()
            } catch let error as ProviderError {
                // The old secret stays (a typo must not lose a working one).
                if let previous { try? previous.write(to: home.secretURL(name)) } else { home.removeSecret(for: name) }
                if case .unauthorized(let detail) = error { throw CLIError("\(name) (\(remote.location)): \(detail); the credentials kept are the ones before.") }
                throw CLIError("\(name) (\(remote.location)): \(error.description)")
            }
            Output.line("Signed in to \(name).", options: output)
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
            for (local, remotes) in config.pairs {
                let kept = remotes.filter { !$0.hasPrefix(name + ":") }
                config.pairs[local] = kept.isEmpty ? nil : kept
            }
            try home.save(config)
            home.removeSecret(for: name)
            Output.line("Removed \(name).", options: output)
        }
    }
}
