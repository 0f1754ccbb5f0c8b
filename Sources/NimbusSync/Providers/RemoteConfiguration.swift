import Crypto
import NimbusS3
import Foundation

/// A remote as a user configures it — its type and where it is, never its secrets (``RemoteSecret``) — and the
/// provider made from it. `nimbus remote add` keeps these in its `config.json` (this type's JSON form); an app keeps
/// them where it likes.
///
/// Types: `local` (a folder on a mounted disk or NAS: ``path``), `webdav` (``url``, ``user``), `s3` (``endpoint``,
/// ``bucket``, ``region``, ``prefix``) and `crypt` (encrypts into ``remote``, another remote's folder).
public struct RemoteConfiguration: Codable, Equatable, Sendable {
    /// `local`, `webdav`, `s3` or `crypt`.
    public var type: String
    /// local: the folder.
    public var path: String?
    /// webdav: the folder's URL; user name.
    public var url: String?
    public var user: String?
    /// s3: endpoint URL, bucket, region, key prefix.
    public var endpoint: String?
    public var bucket: String?
    public var region: String?
    public var prefix: String?
    /// crypt: what it encrypts into, as a pair names a remote (`OTHER:/path`, or `/path` on the signed-in server).
    public var remote: String?

    public init(
        type: String, path: String? = nil, url: String? = nil, user: String? = nil, endpoint: String? = nil, bucket: String? = nil,
        region: String? = nil, prefix: String? = nil, remote: String? = nil
    ) {
        self.type = type
        self.path = path
        self.url = url
        self.user = user
        self.endpoint = endpoint
        self.bucket = bucket
        self.region = region
        self.prefix = prefix
        self.remote = remote
    }

    /// Where it is, for listings (never a secret).
    public var location: String {
        switch type {
        case "crypt": "encrypted, in \(remote ?? "")"
        case "webdav": "\(url ?? "") (user \(user ?? "-"))"
        case "s3": "\(endpoint ?? "")/\(bucket ?? "")\((prefix ?? "").isEmpty ? "" : "/" + (prefix ?? "")) (region \(region ?? "us-east-1"))"
        default: path ?? ""
        }
    }

    /// What a configured remote lacks to be used.
    public enum Problem: Error, Sendable, Equatable {
        /// A field its type needs is missing or malformed (`url`, `endpoint or bucket`, `remote`): added again, it mends.
        case incomplete(field: String, detail: String)
        /// No secret for it: a WebDAV password, S3 keys, a crypt remote's passphrase or key.
        case missingSecret(String)
        /// A type this library does not know, or a combination it does not support (a crypt remote in another).
        case unsupported(String)
        /// Its provider refuses the settings (``ProviderError``'s words).
        case refused(String)
    }

    /// What makes the provider of this remote at `path` (`/` its root, a folder below it otherwise) for a state store:
    /// everything it needs (its address, its credentials) is checked here, so the making cannot fail. `secret` is the
    /// remote's secret, if any; for a `crypt` remote, `inner` makes the provider of what it encrypts into, and
    /// `scratch` is a folder of its own for staging (``CryptProvider``).
    public func providerMaker(
        path: String, secret: RemoteSecret?, inner: (() throws -> @Sendable (any ProviderStateStore) -> any RemoteProvider)? = nil,
        scratch: URL? = nil
    ) throws -> @Sendable (any ProviderStateStore) -> any RemoteProvider {
        func components(_ path: String) -> [String] { path.split(separator: "/").map(String.init).filter { $0 != "." } }
        let parts = components(path)
        switch type {
        case "local":
            let base = URL(fileURLWithPath: self.path ?? "/")
            let folder = parts.isEmpty ? base : base.appending(path: parts.joined(separator: "/"))
            return { LocalFolderProvider(root: folder, state: $0) }
        case "webdav":
            guard var text = url else { throw Problem.incomplete(field: "url", detail: "has no URL") }
            if !text.hasSuffix("/") { text += "/" }
            text += parts.map { $0.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed.subtracting(CharacterSet(charactersIn: "/;?#"))) ?? $0 }
                .joined(separator: "/")
            guard let url = URL(string: text) else { throw Problem.incomplete(field: "url", detail: "has a bad URL: \(text)") }
            let password = secret?.password
            if user != nil, password == nil { throw Problem.missingSecret("password") }
            do { try WebDAVProvider.check(url: url, username: user) } catch let error as ProviderError { throw Problem.refused(error.description) }
            let user = self.user
            return { WebDAVProvider(url: url, username: user, password: password, state: $0) }
        case "s3":
            guard let endpoint = endpoint.flatMap(URL.init(string:)), endpoint.host != nil, let bucket else {
                throw Problem.incomplete(field: "endpoint", detail: "has no endpoint or bucket")
            }
            guard let accessKey = secret?.accessKey, let secretKey = secret?.secretKey else { throw Problem.missingSecret("keys") }
            let client = S3Client(endpoint: endpoint, bucket: bucket, signer: SigV4Signer(accessKey: accessKey, secretKey: secretKey, region: region ?? "us-east-1"))
            let prefix = (components(self.prefix ?? "") + parts).joined(separator: "/")
            return { S3Provider(client: client, prefix: prefix, state: $0) }
        case "crypt":
            guard let inner, let scratch else { throw Problem.incomplete(field: "remote", detail: "does not say what it encrypts into") }
            let innerMaker = try inner()
            if let text = secret?.cryptKey, let bytes = Data(base64Encoded: text), bytes.count == 32 {
                let key = SymmetricKey(data: bytes)
                return { state in CryptProvider.make(over: innerMaker(state), dataKey: key, subpath: parts, state: state, scratch: scratch) }
            }
            guard let passphrase = secret?.passphrase else { throw Problem.missingSecret("passphrase") }
            return { state in CryptProvider.make(over: innerMaker(state), passphrase: passphrase, subpath: parts, state: state, scratch: scratch) }
        default:
            throw Problem.unsupported("an unknown type '\(type)'")
        }
    }
}

/// A remote's secret: a WebDAV password, S3 keys, or a crypt remote's passphrase (or its data key, unwrapped once
/// with the passphrase and kept instead of it, base64).
public struct RemoteSecret: Codable, Sendable, Equatable {
    public var password: String?
    public var accessKey: String?
    public var secretKey: String?
    public var passphrase: String?
    public var cryptKey: String?

    public init(password: String? = nil, accessKey: String? = nil, secretKey: String? = nil, passphrase: String? = nil, cryptKey: String? = nil) {
        self.password = password
        self.accessKey = accessKey
        self.secretKey = secretKey
        self.passphrase = passphrase
        self.cryptKey = cryptKey
    }
}

extension RemoteSecret {
    /// Keeps the secret in a file only its user can read (0600, in a 0700 folder), replacing any before at once (a
    /// crash leaves the old one or the new one, never half of either).
    public func save(to url: URL) throws {
        let folder = url.deletingLastPathComponent()
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let temporary = folder.appending(path: "." + url.lastPathComponent + ".tmp")
        unlink(temporary.path)
        guard FileManager.default.createFile(atPath: temporary.path, contents: try JSONEncoder().encode(self), attributes: [.posixPermissions: 0o600]),
            rename(temporary.path, url.path) == 0
        else { throw SyncError.localFile("Could not write \(url.path).") }
    }

    /// The secret kept at `url` by ``save(to:)``; nil when there is none (or it cannot be read).
    public static func load(from url: URL) -> RemoteSecret? {
        guard let data = try? Data(contentsOf: url) else { return nil }
        return try? JSONDecoder().decode(RemoteSecret.self, from: data)
    }
}

extension NimbusProvider {
    /// What makes the provider of the Nimbus account kept in `tokens` (signed in with ``SyncEngine/signIn(server:username:password:)``
    /// or a login saved there), rooted at the folder `path` of the account; nil when no account is kept.
    public static func maker(tokens: any TokenStore, path: String = "/") throws -> (@Sendable (any ProviderStateStore) -> any RemoteProvider)? {
        guard let account = try tokens.load() else { return nil }
        return { state in
            NimbusProvider(client: ServerClient(transport: AsyncHTTPClientTransport(baseURL: account.server), tokenStore: tokens), state: state, rootPath: path)
        }
    }
}

extension RemoteProvider {
    /// Makes ready the folder `path` (components below the provider's root) that a folder pair syncs with: the
    /// remote's own root must answer (a disk unmounted, a bucket gone, credentials refused: its error is thrown), and
    /// when `makingMissing` the folders down to it are made where missing — the first time a pair syncs only: a
    /// pair's folder that vanishes later pauses the pair (``ProviderError/rootMissing(_:)``) and is never made again
    /// silently, or an emptied remote would look like a deletion of everything.
    public func prepareFolder(_ path: [String], makingMissing: Bool) async throws {
        _ = try await root()
        guard makingMissing, !path.isEmpty else { return }
        _ = try await makeFolders(path)
    }
}

