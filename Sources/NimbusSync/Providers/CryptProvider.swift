import Crypto
import Foundation
import NimbusAPI

/// An end-to-end encrypted remote over any other provider (`nimbus remote add NAME crypt --remote
/// OTHER:/path`): names and content are sealed on this device, so the provider under it — a Nimbus server, WebDAV, S3,
/// a folder on a disk — stores only ciphertext.
///
/// - Names: ``NameCipher`` (deterministic AES-256-GCM-SIV, base32), each name sealed on its own (no folder bound to
///   it, so moving a folder is one move there, as with rclone's crypt; equal names in two folders seal alike). Items
///   whose name does not open (anything not written through this wrapper, and its key file) are not shown.
/// - Content: ``ChunkedEncryption`` (content-defined chunks sealed one by one, deterministically; a sealed index; sizes
///   padded to buckets), so a small edit changes few chunks and a provider that sends blocks (Nimbus) sends little.
/// - The key: a random data key wrapped by a passphrase (``WrappedKey``: PBKDF2-HMAC-SHA256, 600,000 rounds) in
///   ``keyFileName`` at the top of the wrapped folder, made by ``create(over:passphrase:scratch:)``; every device with the
///   passphrase unwraps it (once per process, on first use). A wrong passphrase is
///   ``ProviderError/unauthorized(_:)``: the remote pauses, nothing is read or written.
/// - Sizes and checksums: the provider under it sees only sealed sizes. The plaintext size and SHA-256 of each
///   revision this device sent or fetched are remembered (`ChecksumMemory`, by id and revision); a revision made
///   elsewhere shows its sealed size (an upper bound, within 1/16) and no checksum until it is fetched once.
/// - `subpath`: the folder inside the encrypted tree this provider is rooted at (plain names).
///
/// Format and a recovery recipe: `docs/encryption.md`.
public final class CryptProvider: RemoteProvider, QuotaProvider, @unchecked Sendable {
    /// The wrapped data key, at the top of the wrapped folder (its name does not open, so it is never listed).
    public static let keyFileName = "nimbus-crypt.json"
    /// The context every file's index and padding are bound to.
    public static let context = "nimbus-crypt-remote-v1"

    let inner: any RemoteProvider
    /// The passphrase that unwraps the key file's data key; nil when the data key was given (``dataKey``).
    let passphrase: String?
    /// The keys, when the data key was given.
    let givenKeys: CryptKeys?
    let subpath: [String]
    let scratch: URL
    let memory: ChecksumMemory
    private let unlocked = AsyncKeyCell()
    private let rootId = LockedBox<String?>(nil)

    /// Use ``make(over:passphrase:subpath:state:scratch:)``.
    init(over inner: any RemoteProvider, passphrase: String?, dataKey: SymmetricKey?, subpath: [String], state: any ProviderStateStore, scratch: URL) {
        self.inner = inner
        self.passphrase = passphrase
        givenKeys = dataKey.map(CryptKeys.init(dataKey:))
        self.subpath = subpath
        self.scratch = scratch
        memory = ChecksumMemory(state: state, prefix: "crypt.")
    }

    /// A crypt provider over `inner` (rooted at the encrypted tree's top), at `subpath` inside it.
    ///
    /// - Parameters:
    ///   - inner: the provider the sealed names and contents go to.
    ///   - passphrase: unwraps the data key in the key file at the top of `inner` (on first use).
    ///   - subpath: the folder inside the encrypted tree this provider is rooted at (plain names).
    ///   - state: where the plaintext sizes and checksums of revisions sent or fetched are remembered.
    ///   - scratch: where sealed files are staged on their way up or down (this device's own disk).
    public static func make(
        over inner: any RemoteProvider, passphrase: String, subpath: [String] = [], state: any ProviderStateStore, scratch: URL
    ) -> CryptProvider {
        make(over: inner, passphrase: passphrase, dataKey: nil, subpath: subpath, state: state, scratch: scratch)
    }

    /// A crypt provider with its data key given (an app that keeps it in a ``KeyStore``, the Keychain): no key file
    /// is read, no passphrase asked.
    public static func make(
        over inner: any RemoteProvider, dataKey: SymmetricKey, subpath: [String] = [], state: any ProviderStateStore, scratch: URL
    ) -> CryptProvider {
        make(over: inner, passphrase: nil, dataKey: dataKey, subpath: subpath, state: state, scratch: scratch)
    }

    static func make(
        over inner: any RemoteProvider, passphrase: String?, dataKey: SymmetricKey?, subpath: [String], state: any ProviderStateStore, scratch: URL
    ) -> CryptProvider {
        CryptProvider(over: inner, passphrase: passphrase, dataKey: dataKey, subpath: subpath, state: state, scratch: scratch)
    }

    /// Makes the key file in `inner`'s root (a new random data key wrapped by `passphrase`), unless one is there: then
    /// checks that `passphrase` opens it. Returns whether it made one.
    @discardableResult
    public static func create(over inner: any RemoteProvider, passphrase: String, scratch: URL) async throws -> Bool {
        guard !passphrase.isEmpty else { throw ProviderError.invalid("An encrypted remote needs a passphrase.") }
        if let wrapped = try await readKeyFile(inner, scratch: scratch) {
            _ = try unwrap(wrapped, passphrase)
            return false
        }
        let wrapped = try WrappedKey.wrap(WrappedKey.newDataKey(), passphrase: passphrase)
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        let file = scratch.appending(path: "key-\(UUID().uuidString).json")
        defer { try? FileManager.default.removeItem(at: file) }
        let data = try JSONEncoder().encode(wrapped)
        try data.write(to: file)
        let root = try await inner.root()
        do {
            _ = try await inner.upload(
                UploadSource(url: file, size: Int64(data.count), checksum: FileHasher.hex(SHA256.hash(data: data))), to: .new(parentId: root.id, name: keyFileName, mimeType: "application/json"),
                requestId: "crypt-key-\(UUID().uuidString)") { _ in }
        } catch ProviderError.nameTaken {
            // Made meanwhile by another device: that one counts.
            guard let other = try await readKeyFile(inner, scratch: scratch) else { throw ProviderError.notFound }
            _ = try unwrap(other, passphrase)
            return false
        }
        return true
    }

    /// The data key the key file in `inner`'s root holds, unwrapped with `passphrase` (``ProviderError/unauthorized(_:)``
    /// when it does not open it; ``ProviderError/rootMissing(_:)`` when there is no key file). A device can
    /// keep it (0600) instead of the passphrase: no passphrase on its disk, no key derivation at each start.
    public static func unlock(over inner: any RemoteProvider, passphrase: String, scratch: URL) async throws -> SymmetricKey {
        guard let wrapped = try await readKeyFile(inner, scratch: scratch) else {
            throw ProviderError.rootMissing("No encrypted remote here: its key file (\(keyFileName)) is missing (deleted there, or never made).")
        }
        return try unwrap(wrapped, passphrase)
    }

    /// The key file's content, if the folder has one.
    static func readKeyFile(_ inner: any RemoteProvider, scratch: URL) async throws -> WrappedKey? {
        let root = try await inner.root()
        guard let item = try await inner.children(of: root.id).first(where: { $0.name == keyFileName && !$0.isFolder }) else { return nil }
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        let file = scratch.appending(path: "key-\(UUID().uuidString).json")
        defer { try? FileManager.default.removeItem(at: file) }
        try await inner.download(item.id, revision: nil, to: DownloadTarget(url: file)) { _ in }
        do {
            return try JSONDecoder().decode(WrappedKey.self, from: Data(contentsOf: file))
        } catch {
            throw ProviderError.invalid("The encrypted remote's key file (\(keyFileName)) is damaged: \(error)")
        }
    }

    static func unwrap(_ wrapped: WrappedKey, _ passphrase: String) throws -> SymmetricKey {
        do { return try wrapped.unwrap(passphrase: passphrase) } catch EncryptionError.wrongPassphrase {
            throw ProviderError.unauthorized("the passphrase does not open this encrypted remote's key")
        }
    }

    /// The keys (read and unwrapped on first use).
    func keys() async throws -> CryptKeys {
        if let givenKeys { return givenKeys }
        return try await unlocked.value {
            CryptKeys(dataKey: try await Self.unlock(over: self.inner, passphrase: self.passphrase ?? "", scratch: self.scratch))
        }
    }

    // MARK: Items

    /// The item as this wrapper shows it, or nil when its name does not open (not written through a crypt remote
    /// with this key). Files take the plaintext size and checksum remembered for their revision.
    func shown(_ item: RemoteItem, _ keys: CryptKeys) -> RemoteItem? {
        var item = item
        if item.parentId == nil { return item }
        guard let name = try? keys.names.open(item.name) else { return nil }
        item.name = name
        guard !item.isFolder else { return item }
        item.mimeType = MimeType.guess(forName: name)
        item.checksum = nil
        if let known = memory.checksum(of: item.id, revision: item.revision) {
            let parts = known.split(separator: " ")
            if parts.count == 2, let size = Int64(parts[0]) {
                item.size = size
                item.checksum = String(parts[1])
            }
        }
        return item
    }

    func sealed(_ name: String, _ keys: CryptKeys) throws -> String {
        do { return try keys.names.seal(name) } catch let error as EncryptionError {
            throw ProviderError.invalid(error.description)
        }
    }

    /// A provider error with the item it names shown as this wrapper shows it.
    func mapped(_ error: any Error, _ keys: CryptKeys) -> any Error {
        if case ProviderError.versionConflict(let current) = error {
            return ProviderError.versionConflict(current: current.flatMap { shown($0, keys) })
        }
        return error
    }

    /// What the provider under it can do, less what is of ciphertext: its feed, conditional writes, idempotent
    /// creation, resumable uploads, trash, tree versions, quota, whole-tree listing and probe carry over; what it says of
    /// checksums, batches, revisions, blocks and its root is of ciphertext or of another folder, and is not offered.
    public var features: ProviderFeatures {
        let under = inner.features
        var features = ProviderFeatures(
            changeFeed: under.changeFeed, conditionalWrite: under.conditionalWrite, idempotentCreate: under.idempotentCreate,
            resumableUploads: under.resumableUploads, trash: under.trash, treeVersions: under.treeVersions)
        features.quota = under.quota == nil ? nil : self
        features.treeListing = under.treeListing == nil ? nil : self
        features.probe = under.probe
        return features
    }

    public func root() async throws -> RemoteItem {
        let keys = try await keys()
        if let known = rootId.withLock({ $0 }) {
            do {
                var item = try await inner.item(known)
                item.parentId = nil
                item.name = ""
                return item
            } catch ProviderError.notFound {
                rootId.withLock { $0 = nil }
            }
        }
        var current = try await inner.root()
        for name in subpath {
            let sealedName = try sealed(name, keys)
            guard let next = try await inner.children(of: current.id).first(where: { $0.name == sealedName && $0.isFolder }) else {
                throw ProviderError.notFound
            }
            current = next
        }
        rootId.withLock { $0 = current.id }
        current.parentId = nil
        current.name = ""
        return current
    }

    public func item(_ id: String) async throws -> RemoteItem {
        let keys = try await keys()
        let found = try await inner.item(id)
        if id == rootId.withLock({ $0 }) {
            var root = found
            root.parentId = nil
            root.name = ""
            return root
        }
        guard let item = shown(found, keys) else { throw ProviderError.notFound }
        return item
    }

    public func children(of folderId: String) async throws -> [RemoteItem] {
        let keys = try await keys()
        return try await inner.children(of: folderId).compactMap { shown($0, keys) }
    }

    public func startCursor() async throws -> String { try await inner.startCursor() }

    public func changes(since cursor: String) async throws -> ChangePage {
        let keys = try await keys()
        var page = try await inner.changes(since: cursor)
        page.changes = page.changes.map { change in
            guard case .upsert(let item) = change else { return change }
            // Renamed to something that does not open (or never ours): gone, as far as this remote goes.
            return shown(item, keys).map(RemoteChange.upsert) ?? .remove(id: item.id)
        }
        return page
    }

    public func quota() async throws -> (used: Int64, limit: Int64?) {
        guard let quota = inner.features.quota else {
            throw ProviderError.unsupported("This remote does not report its space.")
        }
        return try await quota.quota()
    }

    // MARK: Changes

    public func createFolder(named name: String, in parentId: String, requestId: String) async throws -> RemoteItem {
        let keys = try await keys()
        let made = try await inner.createFolder(named: try sealed(try ProviderPath.validated(name), keys), in: parentId, requestId: requestId)
        guard let item = shown(made, keys) else { throw ProviderError.server(status: 500, code: .other("crypt_name"), message: "A sealed name did not open.") }
        return item
    }

    public func upload(
        _ source: UploadSource, to target: UploadTarget, requestId: String, progress: @escaping @Sendable (Int64) -> Void
    ) async throws -> RemoteItem {
        let keys = try await keys()
        let innerTarget: UploadTarget
        switch target {
        case .new(let parentId, let name, _):
            innerTarget = .new(parentId: parentId, name: try sealed(try ProviderPath.validated(name), keys), mimeType: "application/octet-stream")
        case .version:
            innerTarget = target
        }
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        let sealedFile = scratch.appending(path: "up-\(UUID().uuidString).sealed")
        defer { try? FileManager.default.removeItem(at: sealedFile) }
        let digest: ChunkedEncryption.Digest
        do {
            digest = try ChunkedEncryption.sealReporting(
                source.url, to: sealedFile, key: keys.dataKey, context: Self.context, sealing: source.sealing)
        } catch {
            throw ProviderError.checksumMismatch  // unreadable or gone: read it again
        }
        guard digest.checksum == source.checksum, digest.plainSize == source.size else { throw ProviderError.checksumMismatch }
        let sealedChecksum = try digest.sealedChecksum ?? FileHasher.sha256(of: sealedFile).checksum
        let stored: RemoteItem
        var sealedSource = UploadSource(url: sealedFile, size: digest.sealedSize, checksum: sealedChecksum, boundaries: digest.boundaries)
        sealedSource.modified = source.modified  // as rclone's crypt: the time is the remote's to see, not the name or bytes
        do {
            stored = try await inner.upload(
                sealedSource, to: innerTarget,
                requestId: requestId
            ) { sent in
                // Progress in plaintext bytes (the sealed file is at most 1/16 bigger).
                progress(digest.sealedSize > 0 ? sent * digest.plainSize / digest.sealedSize : sent)
            }
        } catch {
            throw mapped(error, keys)
        }
        memory.remember("\(digest.plainSize) \(digest.checksum)", of: stored.id, revision: stored.revision)
        memory.flush()
        guard let item = shown(stored, keys) else { throw ProviderError.server(status: 500, code: .other("crypt_name"), message: "A sealed name did not open.") }
        return item
    }

    public func download(_ id: String, revision: String?, to destination: DownloadTarget, progress: @escaping @Sendable (Int64) -> Void) async throws {
        let keys = try await keys()
        // The sealed bytes go beside the destination (a partial of them is resumed), or to the scratch folder for a
        // download into memory; opened into the destination once whole.
        let sealedFile: URL
        if destination.isInMemory {
            try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
            sealedFile = scratch.appending(path: "down-\(UUID().uuidString).sealed")
        } else {
            sealedFile = destination.url.appendingPathExtension("sealed")
        }
        try await inner.download(id, revision: revision, to: DownloadTarget(url: sealedFile), progress: progress)
        defer { try? FileManager.default.removeItem(at: sealedFile) }
        let digest: ChunkedEncryption.Digest
        do {
            if destination.isInMemory {
                let writer = try destination.open()
                try writer.truncate(atOffset: 0)
                digest = try ChunkedEncryption.openReporting(sealedFile, into: writer, key: keys.dataKey, context: Self.context)
            } else {
                digest = try ChunkedEncryption.openReporting(
                    sealedFile, to: destination.url, key: keys.dataKey, context: Self.context, sealing: destination.sealing)
            }
        } catch let error as EncryptionError {
            throw ProviderError.server(status: 502, code: .other("crypt_tampered"), message: error.description)
        }
        if let revision {
            memory.remember("\(digest.plainSize) \(digest.checksum)", of: id, revision: revision)
            memory.flush()
        }
    }

    public func move(_ id: String, to parentId: String, name: String) async throws -> RemoteItem {
        let keys = try await keys()
        let moved = try await inner.move(id, to: parentId, name: try sealed(try ProviderPath.validated(name), keys))
        guard let item = shown(moved, keys) else { throw ProviderError.server(status: 500, code: .other("crypt_name"), message: "A sealed name did not open.") }
        return item
    }

    public func delete(_ id: String) async throws {
        _ = try await keys()
        try await inner.delete(id)
    }

}

extension CryptProvider: TreeListingProvider {
    /// Over a provider that lists whole trees in one go (S3), so does this one
    /// (``ProviderFeatures/treeListing``). Items under a folder whose name does not open are not shown either.
    public func listTree() async throws -> [RemoteItem] {
        guard let tree = inner.features.treeListing else { throw ProviderError.unsupported("The remote under this one lists folder by folder.") }
        let keys = try await keys()
        let root = try await root()
        var shownIds: Set<String> = [root.id]
        var result: [RemoteItem] = []
        for item in try await tree.listTree() {
            // Parents come first: an item is shown when its parent was (the root, or a folder whose name opened).
            guard let parent = item.parentId, shownIds.contains(parent) else { continue }
            guard let shown = shown(item, keys) else { continue }
            shownIds.insert(shown.id)
            result.append(shown)
        }
        return result
    }
}

/// The keys of an unlocked crypt remote.
struct CryptKeys: Sendable {
    let dataKey: SymmetricKey
    let names: NameCipher

    init(dataKey: SymmetricKey) {
        self.dataKey = dataKey
        names = NameCipher(dataKey: dataKey)
    }
}

/// A value made once, on first use, by an async body (later callers wait for the first); a failure is not kept.
final class AsyncKeyCell: @unchecked Sendable {
    private let lock = NSLock()
    private var task: Task<CryptKeys, any Error>?

    func value(_ make: @escaping @Sendable () async throws -> CryptKeys) async throws -> CryptKeys {
        let current: Task<CryptKeys, any Error> = lock.withLock {
            if let task { return task }
            let made = Task { try await make() }
            task = made
            return made
        }
        do {
            return try await current.value
        } catch {
            lock.withLock { if task == current { task = nil } }
            throw error
        }
    }
}
