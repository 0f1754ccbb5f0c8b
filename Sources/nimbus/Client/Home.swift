import ArgumentParser
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
        /// Remembered folder pairs: local path → remote (`/path` on the signed-in server, or `NAME:/path`).
        var pairs: [String: String] = [:]
        /// Remotes added with `nimbus remote add`, by name.
        var remotes: [String: RemoteConfig] = [:]

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
            pairs = try container.decodeIfPresent([String: String].self, forKey: .pairs) ?? [:]
            remotes = try container.decodeIfPresent([String: RemoteConfig].self, forKey: .remotes) ?? [:]
        }
    }

    /// A remote other than the signed-in server.
    struct RemoteConfig: Codable, Equatable {
        /// `local`: a folder on a mounted disk or NAS.
        var type: String
        var path: String?
    }

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

    func loadConfig() throws -> Config {
        if let data = try? Data(contentsOf: configURL) {
            do { return try JSONDecoder.nimbus.decode(Config.self, from: data) } catch {
                throw CLIError("\(configURL.path) is damaged (\(error)); fix or delete it.")
            }
        }
        let host = ProcessInfo.processInfo.hostName.split(separator: ".").first.map(String.init) ?? "device"
        return Config(deviceName: "\(host)-\(String(UUID().uuidString.prefix(4)).lowercased())")
    }

    func save(_ config: Config) throws {
        try ensure()
        let data = try JSONEncoder.nimbus.encode(config)
        let temporary = configURL.appendingPathExtension("tmp")
        try data.write(to: temporary, options: .atomic)
        guard rename(temporary.path, configURL.path) == 0 else { throw CLIError("Could not write \(configURL.path).") }
    }

    /// Opens this device's library (the NimbusSync engine).
    func engine(strategy: ConflictStrategy? = nil, transfers: Int? = nil) throws -> SyncEngine {
        try ensure()
        let config = try loadConfig()
        if !FileManager.default.fileExists(atPath: configURL.path) { try save(config) }
        var configuration = SyncConfiguration(directory: libraryURL, deviceName: config.deviceName)
        configuration.conflictStrategy = strategy ?? config.conflict
        configuration.backoffCap = .seconds(30)
        if let transfers { configuration.maxConcurrentOperations = transfers }
        do {
            return try SyncEngine(configuration: configuration)
        } catch {
            throw CLIError("Cannot open \(libraryURL.path): \(error)")
        }
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
            let tokens = FileTokenStore(url: libraryURL.appending(path: "account.json"))
            guard let account = try tokens.load() else { throw CLIError("Not logged in. Run: nimbus login URL --username NAME") }
            configuration.tokenStore = tokens
            configuration.provider = { state in
                NimbusProvider(
                    client: ServerClient(transport: AsyncHTTPClientTransport(baseURL: account.server), tokenStore: tokens), state: state, rootPath: path)
            }
        case .local(_, let folder, _):
            configuration.provider = { state in LocalFolderProvider(root: folder, state: state) }
        }
        do {
            return try FolderSync(root: local, configuration: configuration, settleTime: 0.5)
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
    case local(name: String, folder: URL, path: String)

    init(_ text: String, config: Home.Config) throws {
        if let colon = text.firstIndex(of: ":"), !text.hasPrefix("/") {
            let name = String(text[..<colon])
            let path = RemotePath.normalized(String(text[text.index(after: colon)...]))
            guard let remote = config.remotes[name] else {
                throw CLIError("No remote named '\(name)'; see 'nimbus remote list' (add one with 'nimbus remote add \(name) local PATH').")
            }
            switch remote.type {
            case "local":
                let base = URL(fileURLWithPath: remote.path ?? "/")
                self = .local(name: name, folder: path == "/" ? base : base.appending(path: String(path.dropFirst())), path: path)
            default:
                throw CLIError("The remote '\(name)' has an unknown type '\(remote.type)'.")
            }
        } else {
            self = .nimbus(path: RemotePath.normalized(text))
        }
    }

    var description: String {
        switch self {
        case .nimbus(let path): path
        case .local(let name, _, let path): "\(name):\(path)"
        }
    }
}
