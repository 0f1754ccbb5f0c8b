import ArgumentParser
import Crypto
import Foundation
import NimbusAPI
import NimbusSync

/// A device's state folder: `$NIMBUS_HOME`, or `~/.nimbus`. Two shells with different homes are two devices.
struct Home {
    struct Config: Codable {
        var server: URL?
        var username: String?
        var deviceName: String
        var conflict: ConflictStrategy = .keepBoth
        /// Remembered folder pairs: local path → its remotes (`/path` on the signed-in server, or `NAME:/path`),
        /// in the order they were added. A folder can sync with several remotes, each a pair with its own state.
        var pairs: [String: [String]] = [:]
        /// Remotes added with `nimbus remote add`, by name.
        var remotes: [String: RemoteConfig] = [:]
        /// In an encrypted home, `pairs` sealed (AES-256-GCM under a key from the store's data key): which folders
        /// sync with which remote folders names them. Opened by ``Home/loadConfig()``, sealed by ``Home/save(_:)``.
        var sealedPairs: String?

        /// Every folder pair, by folder and then in the order its remotes were added.
        var allPairs: [(local: String, remote: String)] {
            pairs.sorted { $0.key < $1.key }.flatMap { local, remotes in remotes.map { (local, $0) } }
        }

        init(server: URL? = nil, username: String? = nil, deviceName: String) {
            self.server = server
            self.username = username
            self.deviceName = deviceName
        }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            server = try container.decodeIfPresent(URL.self, forKey: .server)
            username = try container.decodeIfPresent(String.self, forKey: .username)
            deviceName = try container.decode(String.self, forKey: .deviceName)
            conflict = try container.decodeIfPresent(ConflictStrategy.self, forKey: .conflict) ?? .keepBoth
            // Before several remotes per folder, a folder had one: "local": "remote".
            if let many = try? container.decodeIfPresent([String: [String]].self, forKey: .pairs) {
                pairs = many
            } else {
                pairs = (try container.decodeIfPresent([String: String].self, forKey: .pairs) ?? [:]).mapValues { [$0] }
            }
            remotes = try container.decodeIfPresent([String: RemoteConfig].self, forKey: .remotes) ?? [:]
            sealedPairs = try container.decodeIfPresent(String.self, forKey: .sealedPairs)
        }
    }

    /// A remote other than the signed-in server (NimbusSync's ``RemoteConfiguration``, in `config.json`). Secrets are
    /// not here: they are in `remotes/NAME.secret` (mode 0600) or in the environment (``Home/secret(for:type:)``).
    typealias RemoteConfig = RemoteConfiguration

    /// A remote's secret: a WebDAV password, S3 keys, or a crypt remote's passphrase (or key).
    typealias Secret = RemoteSecret

    /// Where a crypt remote's passphrase is read from when none is stored for it.
    static let cryptPassphraseVariable = "NIMBUS_CRYPT_PASSPHRASE"

    let url: URL

    static var current: Home {
        if let path = ProcessInfo.processInfo.environment["NIMBUS_HOME"], !path.isEmpty {
            return Home(url: URL(fileURLWithPath: path).standardizedFileURL)
        }
        return Home(url: FileManager.default.homeDirectoryForCurrentUser.appending(path: ".nimbus"))
    }

    var configURL: URL { url.appending(path: "config.json") }
    var libraryURL: URL { url.appending(path: "library") }

    func ensure() throws {
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
    }

    /// The device's config; `unsealing` false leaves an encrypted home's folder pairs sealed (no passphrase asked).
    func loadConfig(unsealing: Bool = true) throws -> Config {
        if let data = try? Data(contentsOf: configURL) {
            var config: Config
            do { config = try JSONDecoder.nimbus.decode(Config.self, from: data) } catch {
                throw CLIError("\(configURL.path) is damaged (\(error)); fix or delete it.")
            }
            if unsealing, let sealed = config.sealedPairs {
                // The folder pairs of an encrypted home: the store is unlocked to read them.
                let key = try configKey()
                guard let raw = Data(base64Encoded: sealed),
                    let plain = try? AES.GCM.open(try AES.GCM.SealedBox(combined: raw), using: key, authenticating: Array("pairs".utf8)),
                    let pairs = try? JSONDecoder().decode([String: [String]].self, from: plain)
                else { throw CLIError("The folder pairs in \(configURL.path) do not open with this store's key; the file was changed.") }
                config.pairs = pairs
            }
            return config
        }
        let host = ProcessInfo.processInfo.hostName.split(separator: ".").first.map(String.init) ?? "device"
        return Config(deviceName: "\(host)-\(String(UUID().uuidString.prefix(4)).lowercased())")
    }

    func save(_ config: Config) throws {
        try ensure()
        var config = config
        if isEncrypted {
            let box = try AES.GCM.seal(try JSONEncoder().encode(config.pairs), using: try configKey(), authenticating: Array("pairs".utf8))
            config.sealedPairs = box.combined?.base64EncodedString()
            config.pairs = [:]
        }
        let data = try JSONEncoder.nimbus.encode(config)
        let temporary = configURL.appendingPathExtension("tmp")
        try data.write(to: temporary, options: .atomic)
        guard rename(temporary.path, configURL.path) == 0 else { throw CLIError("Could not write \(configURL.path).") }
    }

    /// Opens this device's library (the NimbusSync engine). `creating` makes a new library encrypted under it.
    func engine(strategy: ConflictStrategy? = nil, transfers: Int? = nil, creating encryption: StoreEncryption? = nil) throws -> SyncEngine {
        try ensure()
        let config = try loadConfig()
        if !FileManager.default.fileExists(atPath: configURL.path) { try save(config) }
        var configuration = SyncConfiguration(directory: libraryURL, deviceName: config.deviceName)
        configuration.conflictStrategy = strategy ?? config.conflict
        configuration.backoffCap = .seconds(30)
        if let transfers { configuration.maxConcurrentOperations = transfers }
        configuration.encryption = try encryption ?? storeEncryption()
        do {
            return try SyncEngine(configuration: configuration)
        } catch let error as EncryptionError {
            throw Self.explained(error)
        } catch {
            throw CLIError("Cannot open \(libraryURL.path): \(error)")
        }
    }

    // MARK: Encryption at rest (`nimbus login --encrypt`)

    /// Where the store's passphrase is read from (else it is asked for on a terminal).
    static let passphraseVariable = "NIMBUS_PASSPHRASE"

    /// The library's wrapped data key: present when this device's store is encrypted.
    var storeKeyURL: URL { libraryURL.appending(path: "store-key.json") }
    var isEncrypted: Bool { FileManager.default.fileExists(atPath: storeKeyURL.path) }

    /// The store's passphrase: `NIMBUS_PASSPHRASE`, else asked on a terminal (twice when `confirming` a new one).
    static func passphrase(prompt: String = "Passphrase of this device's store: ", confirming: Bool = false) throws -> String {
        if let value = ProcessInfo.processInfo.environment[passphraseVariable], !value.isEmpty { return value }
        // Asked once per command.
        if !confirming, let typed = typedPassphrase.withLock({ $0 }) { return typed }
        guard let typed = Terminal.readSecret(prompt: prompt) else {
            throw CLIError("This device's store is encrypted and no passphrase was given: set \(passphraseVariable), or run on a terminal to be asked.")
        }
        guard !typed.isEmpty else { throw CLIError("An empty passphrase is not one.") }
        if confirming, Terminal.readSecret(prompt: "Again: ") != typed { throw CLIError("The passphrases differ; nothing was changed.") }
        typedPassphrase.withLock { $0 = typed }
        return typed
    }

    private static let typedPassphrase = LockedBox<String?>(nil)

    /// The unlocked data key of this process (one PBKDF2 per command, shared by the library and every folder pair).
    private static let unlocked = LockedBox<SymmetricKey?>(nil)

    /// How to open this device's stores: nil when they are plain; else the data key — from the kernel keyring when
    /// `nimbus unlock` left it there, else unwrapped once with the passphrase (a clear error when it is missing or
    /// wrong).
    func storeEncryption() throws -> StoreEncryption? {
        guard isEncrypted else { return nil }
        if let key = Self.unlocked.withLock({ $0 }) { return .keyStore(MemoryKeyStore(key: key)) }
        if KernelKeyring.isAvailable, let key = try? keyring()?.loadKey() {
            Self.unlocked.withLock { $0 = key }
            return .keyStore(MemoryKeyStore(key: key))
        }
        let key = try unwrapWithPassphrase()
        Self.unlocked.withLock { $0 = key }
        return .keyStore(MemoryKeyStore(key: key))
    }

    /// The data key, unwrapped with the passphrase (`NIMBUS_PASSPHRASE` or asked): 600,000 rounds of PBKDF2.
    func unwrapWithPassphrase() throws -> SymmetricKey {
        let wrapped: WrappedKey
        do { wrapped = try JSONDecoder().decode(WrappedKey.self, from: Data(contentsOf: storeKeyURL)) } catch {
            throw CLIError("\(storeKeyURL.path) is damaged (\(error)); this device's store cannot be unlocked.")
        }
        do {
            return try wrapped.unwrap(passphrase: try Self.passphrase())
        } catch let error as EncryptionError {
            throw Self.explained(error)
        }
    }

    /// Where `nimbus unlock` keeps the data key: the user's kernel keyring, under a name made from the wrapped key
    /// (so a store re-wrapped by `nimbus passphrase`, or wiped and made again, never finds an older entry). Nil when
    /// the store is not encrypted.
    func keyring(lifetime: Duration? = nil) -> KernelKeyring? {
        guard let wrapped = try? Data(contentsOf: storeKeyURL) else { return nil }
        let id = Hex.encode(SHA256.hash(data: wrapped).prefix(16))
        return KernelKeyring(name: "nimbus:store:\(id)", lifetime: lifetime)
    }

    /// The key that seals the folder pairs in an encrypted home's config.
    func configKey() throws -> SymmetricKey {
        guard case .keyStore(let store)? = try storeEncryption(), let key = try store.loadKey() else {
            throw CLIError("This device's store is encrypted and cannot be unlocked.")
        }
        return HKDF<SHA256>.deriveKey(inputKeyMaterial: key, info: Array("nimbus-home-config-v1".utf8), outputByteCount: 32)
    }

    /// An encryption failure as the CLI says it: what happened and what to do.
    static func explained(_ error: EncryptionError) -> CLIError {
        switch error {
        case .wrongPassphrase:
            CLIError("The passphrase is wrong: it does not unlock this device's store (\(passphraseVariable) or what was typed). Nothing was read or changed.")
        case .keyMissing(let what):
            CLIError("This device's store is encrypted and cannot be unlocked: \(what) Set \(passphraseVariable), or run on a terminal to be asked.")
        case .notEncrypted:
            CLIError("\(error.description) Run 'nimbus logout --wipe' first (after a sync: queued changes would be lost), then log in with --encrypt.")
        default:
            CLIError("\(error.description)")
        }
    }

    func secretURL(_ name: String) -> URL { url.appending(path: "remotes/\(name).secret") }

    /// Stores a remote's secret, readable by this user only (0600, in a 0700 folder), replacing any before.
    func saveSecret(_ secret: Secret, for name: String) throws {
        try ensure()
        do { try secret.save(to: secretURL(name)) } catch let error as SyncError { throw CLIError(error.description) }
    }

    func removeSecret(for name: String) { unlink(secretURL(name).path) }

    /// A remote's secret. WebDAV: `NIMBUS_REMOTE_<NAME>_PASSWORD` (named for this remote, so it wins), else the
    /// 0600 file. S3: the file's keys (given for this remote), else `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY`.
    /// Nil when none has it.
    func secret(for name: String, type: String) -> Secret? {
        let environment = ProcessInfo.processInfo.environment
        if type == "webdav", let password = environment[Self.passwordVariable(name)], !password.isEmpty { return Secret(password: password) }
        if let stored = Secret.load(from: secretURL(name)) { return stored }
        if type == "crypt", let passphrase = environment[Self.cryptPassphraseVariable], !passphrase.isEmpty { return Secret(passphrase: passphrase) }
        if type == "s3", let key = environment["AWS_ACCESS_KEY_ID"], let secret = environment["AWS_SECRET_ACCESS_KEY"], !key.isEmpty, !secret.isEmpty {
            return Secret(accessKey: key, secretKey: secret)
        }
        return nil
    }

    /// What makes the provider of remote `name` at `path` (`/` its root) for a state store
    /// (``RemoteConfiguration/providerMaker(path:secret:inner:scratch:)``), with what it lacks said as a command to run.
    func providerMaker(_ name: String, _ remote: RemoteConfig, path: String) throws -> @Sendable (any ProviderStateStore) -> any RemoteProvider {
        do {
            return try remote.providerMaker(
                path: path, secret: secret(for: name, type: remote.type), inner: { try self.wrappedProviderMaker(name, remote) },
                scratch: url.appending(path: "crypt-scratch/\(name)"))
        } catch let problem as RemoteConfiguration.Problem {
            switch problem {
            case .incomplete(let field, let detail):
                throw CLIError(field == "url" && detail.hasPrefix("has a bad") ? "The remote '\(name)' \(detail)" : "The remote '\(name)' \(detail); add it again.")
            case .missingSecret:
                switch remote.type {
                case "webdav":
                    throw CLIError("No password for the remote '\(name)': run 'nimbus remote login \(name)' or set \(Self.passwordVariable(name)).")
                case "s3":
                    throw CLIError("No keys for the remote '\(name)': set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or run 'nimbus remote login \(name)'.")
                default:
                    throw CLIError(
                        "No passphrase for the encrypted remote '\(name)': set \(Self.cryptPassphraseVariable), or store its key with 'nimbus remote login \(name)'.")
                }
            case .unsupported(let what):
                throw CLIError("The remote '\(name)' has \(what).")
            case .refused(let detail):
                throw CLIError("The remote '\(name)': \(detail)")
            }
        }
    }

    /// What makes the signed-in server's provider rooted at `path`, with the account's token store; nil when this
    /// device is not logged in.
    func nimbusProviderMaker(path: String) throws -> (FileTokenStore, @Sendable (any ProviderStateStore) -> any RemoteProvider)? {
        let tokens = FileTokenStore(url: libraryURL.appending(path: "account.json"))
        guard let maker = try NimbusProvider.maker(tokens: tokens, path: path) else { return nil }
        return (tokens, maker)
    }

    /// What makes the provider a crypt remote `name` encrypts into: a folder of another remote, or of the signed-in server.
    func wrappedProviderMaker(_ name: String, _ remote: RemoteConfig) throws -> @Sendable (any ProviderStateStore) -> any RemoteProvider {
        guard let spec = remote.remote, !spec.isEmpty else { throw CLIError("The remote '\(name)' does not say what it encrypts into; add it again.") }
        switch try RemoteSpec(spec, config: try loadConfig()) {
        case .nimbus(let path):
            guard let (_, maker) = try nimbusProviderMaker(path: path) else {
                throw CLIError("The encrypted remote '\(name)' is on the Nimbus server, and this device is not logged in. Run: nimbus login URL --username NAME")
            }
            return maker
        case .named(let other, let otherRemote, let path):
            guard otherRemote.type != "crypt" else { throw CLIError("The remote '\(name)' encrypts into '\(other)', which is encrypted itself; that is not supported.") }
            return try providerMaker(other, otherRemote, path: path)
        }
    }

    static func passwordVariable(_ name: String) -> String {
        "NIMBUS_REMOTE_" + name.uppercased().map { $0.isLetter || $0.isNumber ? String($0) : "_" }.joined() + "_PASSWORD"
    }

    /// Where a folder pair keeps its engine (its three trees): one folder per local folder and remote.
    func pairDirectory(local: String, remote: String) -> URL {
        let key = String((local + "\n" + remote).utf8.reduce(UInt64(14_695_981_039_346_656_037)) { ($0 ^ UInt64($1)) &* 1_099_511_628_211 }, radix: 16)
        return url.appending(path: "pairs/\(key)")
    }

    /// The engine of a folder pair: the folder `local` (on disk) with `remote` (`/path` on the signed-in server,
    /// or `NAME:/path` of a remote added with `nimbus remote add`).
    func pairEngine(local: URL, remote: String, strategy: ConflictStrategy, transfers: Int? = nil) throws -> FolderSync {
        try ensure()
        let config = try loadConfig()
        let target = try RemoteSpec(remote, config: config)
        var configuration = SyncConfiguration(directory: pairDirectory(local: local.path, remote: target.description), deviceName: config.deviceName)
        configuration.conflictStrategy = strategy
        configuration.backoffCap = .seconds(30)
        if let transfers { configuration.maxConcurrentOperations = transfers }
        switch target {
        case .nimbus(let path):
            guard let (tokens, maker) = try nimbusProviderMaker(path: path) else { throw CLIError("Not logged in. Run: nimbus login URL --username NAME") }
            configuration.tokenStore = tokens
            configuration.provider = maker
        case .named(let name, let remote, let path):
            configuration.provider = try providerMaker(name, remote, path: path)
        }
        // An encrypted device keeps its folder pairs' state encrypted too, under the same data key.
        configuration.encryption = try storeEncryption()
        do {
            return try FolderSync(root: local, configuration: configuration, settleTime: 0.5)
        } catch EncryptionError.notEncrypted where configuration.encryption != nil {
            // Made before the store was encrypted: still opened (its folder is plain on disk anyway), with a word.
            FileHandle.standardError.write(Data("note: the sync state of \(local.path) was made before this device's store was encrypted; it stays unencrypted.\n".utf8))
            configuration.encryption = nil
            do { return try FolderSync(root: local, configuration: configuration, settleTime: 0.5) } catch {
                throw CLIError("Cannot open the sync state of \(local.path): \(error)")
            }
        } catch let error as EncryptionError {
            throw Self.explained(error)
        } catch {
            throw CLIError("Cannot open the sync state of \(local.path): \(error)")
        }
    }

    /// The engine, signed in (or a clear error telling how to sign in).
    func signedInEngine(strategy: ConflictStrategy? = nil, transfers: Int? = nil) async throws -> SyncEngine {
        let engine = try engine(strategy: strategy, transfers: transfers)
        guard await engine.account != nil else {
            throw CLIError("Not logged in. Run: nimbus login URL --username NAME")
        }
        return engine
    }
}

/// Remote paths as users type them: `/Work/report.pdf`; `/` is the root.
enum RemotePath {
    static func components(_ path: String) -> [String] {
        path.split(separator: "/").map(String.init).filter { $0 != "." }
    }

    static func normalized(_ path: String) -> String { "/" + components(path).joined(separator: "/") }

    static func parent(_ path: String) -> String { "/" + components(path).dropLast().joined(separator: "/") }

    static func name(_ path: String) -> String? { components(path).last }

    /// The item at `path`, or a CLIError naming what is missing.
    static func item(_ path: String, in engine: SyncEngine) async throws -> SyncItem {
        guard let item = try await engine.item(atPath: normalized(path)) else {
            if let reason = Offline.reason.withLock({ $0 }) {
                throw CLIError("\(normalized(path)) is not known on this device, and the server was not there to ask: \(reason).")
            }
            throw CLIError("\(normalized(path)): no such file or folder.")
        }
        return item
    }

    static func folder(_ path: String, in engine: SyncEngine) async throws -> SyncItem {
        let item = try await item(path, in: engine)
        guard item.isFolder else { throw CLIError("\(normalized(path)) is a file, not a folder.") }
        return item
    }

    /// Creates the folders of `path` that are missing (like `mkdir -p`) and returns the last one.
    static func makeFolders(_ path: String, in engine: SyncEngine) async throws -> ItemID {
        var current = ItemID.root
        var walked = ""
        for part in components(path) {
            walked += "/" + part
            if let existing = try await engine.item(atPath: walked) {
                guard existing.isFolder else { throw CLIError("\(walked) is a file, not a folder.") }
                current = existing.id
            } else {
                current = try await engine.createFolder(named: part, in: current)
            }
        }
        return current
    }
}

/// Where a folder pair's other side is: a folder of the signed-in server, or of a remote added with
/// `nimbus remote add` (`NAME:/path`).
enum RemoteSpec: CustomStringConvertible {
    case nimbus(path: String)
    case named(name: String, remote: Home.RemoteConfig, path: String)

    init(_ text: String, config: Home.Config) throws {
        if let colon = text.firstIndex(of: ":"), !text.hasPrefix("/") {
            let name = String(text[..<colon])
            let path = RemotePath.normalized(String(text[text.index(after: colon)...]))
            guard let remote = config.remotes[name] else {
                throw CLIError("No remote named '\(name)'; see 'nimbus remote list' (add one with 'nimbus remote add \(name) TYPE ...').")
            }
            self = .named(name: name, remote: remote, path: path)
        } else {
            self = .nimbus(path: RemotePath.normalized(text))
        }
    }

    /// The remote's name (nil: the signed-in server).
    var name: String? {
        if case .named(let name, _, _) = self { return name }
        return nil
    }

    var description: String {
        switch self {
        case .nimbus(let path): path
        case .named(let name, _, let path): "\(name):\(path)"
        }
    }
}
