import Crypto
import Foundation
import GRDB
import _CryptoExtras

/// How a library is encrypted at rest on the device, chosen when the library is made
/// (``SyncConfiguration/encryption``). Every later open must unlock it the same way.
public enum StoreEncryption: Sendable {
    /// A passphrase (or the account password): the library's random data key is kept wrapped under it
    /// (PBKDF2-HMAC-SHA256, 600,000 rounds) in `store-key.json` in the library's folder.
    case passphrase(String)
    /// A key store holds the data key itself (the Keychain, a 0600 key file, an environment secret); a new library
    /// stores a new random key there.
    case keyStore(any KeyStore)
}

/// A library's keys at rest, from its data key by HKDF-SHA256: one for content files (``SegmentedEncryption``),
/// one for names and other text in the database.
///
/// Column encryption, not a whole-database cipher: SQLCipher is not among the packages this project builds with
/// (Debian's is 3.4 from 2017, and it would replace the SQLite GRDB links on every platform). What is sealed: the
/// names of the three trees (`r_name`, `s_name`, `l_name`) deterministically — AES-256-GCM-SIV under a fixed nonce
/// over the name padded to 16 bytes, so equal names seal equal and the engine's lookups by name and comparisons
/// between trees still run in SQL (only equality shows) — and, with a random nonce each, failure messages and the
/// provider's small state (resumable sessions). Ids, sizes, dates, checksums and MIME types stay readable: they
/// are what SQL joins on, and say nothing of names or content. Listings are ordered in memory.
final class StoreCipher: Sendable {
    let content: SegmentedEncryption
    let nameKey: SymmetricKey
    let textKey: SymmetricKey
    /// Proves a key is this library's without reading anything encrypted (kept in `meta`).
    let check: String

    static let nonce = [UInt8](repeating: 0, count: 12)

    init(dataKey: SymmetricKey) {
        func derive(_ info: String) -> SymmetricKey {
            HKDF<SHA256>.deriveKey(inputKeyMaterial: dataKey, info: Array(info.utf8), outputByteCount: 32)
        }
        content = SegmentedEncryption(key: derive("nimbus-store-content-v1"))
        nameKey = derive("nimbus-store-names-v1")
        textKey = derive("nimbus-store-text-v1")
        check = Data(HMAC<SHA256>.authenticationCode(for: Array("nimbus-store-key-check".utf8), using: dataKey)).base64EncodedString()
    }

    /// What a deterministic seal is of: a name, or a provider's item id (each authenticated as its kind).
    enum Kind: Int, CaseIterable, Sendable {
        case name, id
        var associatedData: [UInt8] { Array((self == .name ? "name" : "id").utf8) }
    }

    /// A name as stored: base64 of the sealed, padded name (deterministic).
    func sealName(_ name: String) -> String { sealDeterministic(name, as: .name) }

    /// A provider's item id as stored (deterministic, like names: ids are looked up and joined on). The ids of
    /// WebDAV, S3 and local-folder remotes are paths: names.
    func sealId(_ id: String) -> String { sealDeterministic(id, as: .id) }

    func openId(_ stored: String) throws -> String { try openDeterministic(stored, as: .id) }

    /// Names and ids sealed and opened lately, both ways (deterministic, so each has one sealed form), one table per
    /// kind: a plan reads every row, and AES-GCM-SIV per name was most of what encryption added to a sync. Dropped
    /// whole when full — sized so that it is not for 100,000 items with their ids (an account holds more than what one
    /// pair syncs: the engine keeps the whole remote tree; ~200 bytes an entry, about what a plan holds per row
    /// anyway). Kept between runs as one sealed blob (``nameCacheBlob()``, ``loadNameCache(_:)``).
    private struct Recent {
        /// Sealed form → plain text, looked up by bytes (``SealedTable``).
        var opened: [SealedTable] = Array(repeating: SealedTable(), count: Kind.allCases.count)
        /// Plain text → sealed form, made from `opened` the first time something is sealed (a run that only reads —
        /// a no-op sync — never needs it, and building it for every loaded entry was half of loading the cache).
        var sealed: [[String: String]?] = Array(repeating: nil, count: Kind.allCases.count)
        var count = 0
        /// Entries learnt since the cache was loaded or saved.
        var added = 0

        /// A name or id just sealed or opened, both ways (the whole cache dropped first when full).
        mutating func learn(sealed: String, plain: String, kind: Kind) {
            if count >= StoreCipher.recentLimit { self = Recent() }
            opened[kind.rawValue].insert(sealed, plain: plain)
            self.sealed[kind.rawValue]?[plain] = sealed
            count += 1
            added += 1
        }

        /// The sealed form of `plain`, if known.
        mutating func sealedForm(of plain: String, kind: Kind) -> String? {
            if sealed[kind.rawValue] == nil {
                var reverse: [String: String] = [:]
                reverse.reserveCapacity(opened[kind.rawValue].count)
                opened[kind.rawValue].forEach { sealedBytes, plain in reverse[plain] = String(decoding: sealedBytes, as: UTF8.self) }
                sealed[kind.rawValue] = reverse
            }
            return sealed[kind.rawValue]?[plain]
        }
    }
    private let recent = LockedBox(Recent())
    static let recentLimit = 200_000

    func sealDeterministic(_ text: String, as kind: Kind) -> String {
        if let known = recent.withLock({ $0.sealedForm(of: text, kind: kind) }) { return known }
        let sealed = sealUncached(text, as: kind)
        remember(sealed: sealed, plain: text, kind: kind)
        return sealed
    }

    func openDeterministic(_ stored: String, as kind: Kind) throws -> String {
        if let known = recent.withLock({ $0.opened[kind.rawValue].plain(stored) }) { return known }
        let plain = try openUncached(stored, as: kind)
        remember(sealed: stored, plain: plain, kind: kind)
        return plain
    }

    /// Opens the sealed id and names of every row in place, under one hold of the cache's lock (a plan reads every
    /// row: a lookup each, and the three trees' names are mostly one sealed text, opened once).
    func open(_ rows: inout [ItemRow]) throws {
        try recent.withLock { cache in
            func open(_ stored: String, _ kind: Kind) throws -> String {
                var stored = stored
                return try stored.withUTF8 { try self.open(UnsafeRawBufferPointer($0), kind, in: &cache) }
            }
            for index in rows.indices {
                if let id = rows[index].fileId { rows[index].fileId = try open(id, .id) }
                var last: (sealed: String, plain: String)?
                func name(_ stored: String?) throws -> String? {
                    guard let stored else { return nil }
                    if let last, last.sealed == stored { return last.plain }
                    let plain = try open(stored, .name)
                    last = (stored, plain)
                    return plain
                }
                rows[index].rName = try name(rows[index].rName)
                rows[index].sName = try name(rows[index].sName)
                rows[index].lName = try name(rows[index].lName)
            }
        }
    }

    /// Runs `body` with the cache held, giving it a function that opens a sealed form given as its UTF-8 bytes
    /// (SQLite's, for ``ItemRow/fetchAll(_:where:arguments:)``): a known one without making a string of it, another
    /// by AES-GCM-SIV (then remembered).
    func withOpener<T>(_ body: ((UnsafeRawBufferPointer, Kind) throws -> String) throws -> T) throws -> T {
        try recent.withLock { cache in try body { bytes, kind in try self.open(bytes, kind, in: &cache) } }
    }

    /// A sealed form (its UTF-8 bytes) opened, with the cache held: from the cache, or by AES-GCM-SIV and then
    /// remembered.
    private func open(_ bytes: UnsafeRawBufferPointer, _ kind: Kind, in cache: inout Recent) throws -> String {
        if let known = cache.opened[kind.rawValue].plain(bytes) { return known }
        let stored = String(decoding: bytes, as: UTF8.self)
        let plain = try openUncached(stored, as: kind)
        cache.learn(sealed: stored, plain: plain, kind: kind)
        return plain
    }

    private func remember(sealed: String, plain: String, kind: Kind) {
        recent.withLock { $0.learn(sealed: sealed, plain: plain, kind: kind) }
    }

    /// How many names and ids the cache holds (for tests).
    var cachedCount: Int { recent.withLock { $0.count } }

    // MARK: The cache between runs

    /// The `meta` key the sealed cache is kept under.
    static let cacheMetaKey = "nameCache"

    /// Associated data of the sealed cache (a blob of another kind never opens as one).
    static let cacheAssociatedData = Array("nimbus-name-cache-v1".utf8)

    /// The cache of opened names and ids as one blob sealed under the text key (AES-256-GCM, random nonce), when it
    /// learnt enough since it was loaded or last saved; nil otherwise. Plaintext: the number of entries of each kind
    /// (4 bytes each, little-endian), then for each entry its kind (1 byte), the sealed form's and the name's UTF-8
    /// lengths (4 bytes each) and both texts.
    ///
    /// Why: a process opens every row's names to plan, and opening ~20,000 sealed names one AES-GCM-SIV call at a
    /// time cost a no-op sync of 10,000 files ~50 ms; opening one blob costs ~1 ms. The blob holds nothing the
    /// rows do not (each entry is a sealed form and what it opens to under this library's key) and shows only its
    /// length; an old copy is as right as a new one (sealing is deterministic), merely less complete.
    func nameCacheBlob() -> String? {
        let plain: [UInt8]? = recent.withLock { cache in
            // A round that learnt a few names leaves them to be opened again next time, rather than rewrite a blob
            // of every name (megabytes in a big library) for them: saved once they are a twentieth of it.
            guard cache.added > 0, cache.added * 20 >= cache.count else { return nil }
            var bytes: [UInt8] = []
            for kind in Kind.allCases { withUnsafeBytes(of: UInt32(cache.opened[kind.rawValue].count).littleEndian) { bytes += $0 } }
            for kind in Kind.allCases {
                cache.opened[kind.rawValue].forEach { sealed, name in
                    bytes.append(UInt8(kind.rawValue))
                    for length in [sealed.count, name.utf8.count] { withUnsafeBytes(of: UInt32(length).littleEndian) { bytes += $0 } }
                    bytes += sealed
                    bytes += name.utf8
                }
            }
            cache.added = 0
            return bytes
        }
        guard let plain, let box = try? AES.GCM.seal(plain, using: textKey, authenticating: Self.cacheAssociatedData), let combined = box.combined
        else { return nil }
        return combined.base64EncodedString()
    }

    /// Fills the cache from a blob ``nameCacheBlob()`` made. A blob that does not open (another key, altered) is
    /// ignored: it is only a cache, and every name is then opened from its row as without one.
    func loadNameCache(_ blob: String) {
        guard let raw = Data(base64Encoded: blob), let box = try? AES.GCM.SealedBox(combined: raw),
            let plain = try? AES.GCM.open(box, using: textKey, authenticating: Self.cacheAssociatedData)
        else { return }
        plain.withUnsafeBytes { (bytes: UnsafeRawBufferPointer) in
            recent.withLock { cache in
                var at = 0
                func length() -> Int? {
                    guard at + 4 <= bytes.count else { return nil }
                    defer { at += 4 }
                    return Int(UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: at, as: UInt32.self)))
                }
                func slice(_ count: Int) -> UnsafeRawBufferPointer? {
                    guard count <= bytes.count - at else { return nil }
                    defer { at += count }
                    return UnsafeRawBufferPointer(rebasing: bytes[at..<at + count])
                }
                for kind in Kind.allCases {
                    guard let count = length() else { return }
                    cache.opened[kind.rawValue].reserveCapacity(min(count, Self.recentLimit))
                }
                while at < bytes.count, cache.count < Self.recentLimit {
                    guard let kind = Kind(rawValue: Int(bytes[at])) else { return }
                    at += 1
                    guard let sealedCount = length(), let nameCount = length(), let sealed = slice(sealedCount), let name = slice(nameCount)
                    else { return }
                    // Authenticated, so written by this library: decoded as UTF-8 without validating it again.
                    cache.opened[kind.rawValue].insert(sealed, plain: String(decoding: name, as: UTF8.self))
                    cache.sealed[kind.rawValue]?[String(decoding: name, as: UTF8.self)] = String(decoding: sealed, as: UTF8.self)
                    cache.count += 1
                }
            }
        }
    }

    private func sealUncached(_ text: String, as kind: Kind) -> String {
        let bytes = Array(text.utf8)
        let padding = 16 - bytes.count % 16
        let padded = bytes + [UInt8](repeating: UInt8(padding), count: padding)
        // Sealing with a valid key and nonce cannot fail; an empty result would only fail to open, never leak.
        guard let nonce = try? AES.GCM._SIV.Nonce(data: Self.nonce),
            let box = try? AES.GCM._SIV.seal(padded, using: nameKey, nonce: nonce, authenticating: kind.associatedData)
        else { return "" }
        return (box.ciphertext + box.tag).base64EncodedString()
    }

    func sealName(_ name: String?) -> String? { name.map { sealName($0) } }

    /// The name a stored one stands for, or ``EncryptionError/tampered(_:)``.
    func openName(_ stored: String) throws -> String { try openDeterministic(stored, as: .name) }

    private func openUncached(_ stored: String, as kind: Kind) throws -> String {
        guard let raw = Data(base64Encoded: stored), raw.count >= 32, raw.count % 16 == 0 else {
            throw EncryptionError.tampered("a name in the database is not sealed")
        }
        let plain: Data
        do {
            let box = try AES.GCM._SIV.SealedBox(
                nonce: try AES.GCM._SIV.Nonce(data: Self.nonce), ciphertext: raw.prefix(raw.count - 16), tag: raw.suffix(16))
            plain = try AES.GCM._SIV.open(box, using: nameKey, authenticating: kind.associatedData)
        } catch {
            throw EncryptionError.tampered("a name in the database does not authenticate")
        }
        guard let padding = plain.last, (1...16).contains(padding), plain.count >= Int(padding),
            let name = String(validating: plain.dropLast(Int(padding)), as: UTF8.self)
        else { throw EncryptionError.tampered("a name in the database is malformed") }
        return name
    }

    func openName(_ stored: String?) throws -> String? { try stored.map { try openName($0) } }

    /// Other text (an error message, a session's state), sealed with a random nonce.
    func sealText(_ text: String) -> String {
        guard let box = try? AES.GCM.seal(Data(text.utf8), using: textKey, authenticating: Array("text".utf8)), let combined = box.combined else {
            return ""
        }
        return "~" + combined.base64EncodedString()
    }

    func openText(_ stored: String) throws -> String {
        guard stored.hasPrefix("~"), let raw = Data(base64Encoded: String(stored.dropFirst())) else {
            throw EncryptionError.tampered("a value in the database is not sealed")
        }
        do {
            let plain = try AES.GCM.open(try AES.GCM.SealedBox(combined: raw), using: textKey, authenticating: Array("text".utf8))
            return String(decoding: plain, as: UTF8.self)
        } catch {
            throw EncryptionError.tampered("a value in the database does not authenticate")
        }
    }

    // MARK: Which database has which cipher

    /// The cipher of each open encrypted library, by its database's label (rows are sealed and opened where they
    /// are read and written, inside GRDB's closures, which have the `Database` and nothing else).
    static let registered = LockedBox([String: StoreCipher]())

    static func register(_ cipher: StoreCipher?, label: String) {
        registered.withLock { $0[label] = cipher }
    }

    /// The cipher registered for a database's label; nil for a plain library.
    static func registered(label: String?) -> StoreCipher? {
        guard let label else { return nil }
        return registered.withLock { $0[label] }
    }
}

extension Database {
    /// This library's cipher when it is encrypted at rest; nil for a plain one.
    var storeCipher: StoreCipher? { StoreCipher.registered(label: configuration.label) }

    /// A provider id as this store keeps it (sealed when encrypted): for SQL arguments.
    func storedId(_ id: String) -> String { storeCipher?.sealId(id) ?? id }

    /// A provider id as read from this store.
    func openedId(_ stored: String) throws -> String { try storeCipher?.openId(stored) ?? stored }

    /// A provider-state key as stored. Keys are `namespace.rest` (`s3.upload.<request>`, `dav.sha256.<id>`,
    /// `crypt.<id>`), and ids of some providers are paths: in an encrypted store the rest is sealed after the namespace
    /// — the first segment, and a `sha256.` after it — so the lookups by prefix of ``ChecksumMemory`` still work.
    func storedKey(_ key: String) -> String {
        guard let cipher = storeCipher else { return key }
        guard let dot = key.firstIndex(of: ".") else { return "~" + cipher.sealId(key) }
        var end = key.index(after: dot)
        if key[end...].hasPrefix("sha256.") { end = key.index(end, offsetBy: 7) }
        return String(key[..<end]) + "~" + cipher.sealId(String(key[end...]))
    }

    /// Text as stored (sealed with a random nonce when encrypted), and back.
    func sealedText(_ text: String) -> String { storeCipher?.sealText(text) ?? text }
    func openedText(_ stored: String) throws -> String { try storeCipher?.openText(stored) ?? stored }

    func openedKey(_ stored: String) throws -> String {
        guard let cipher = storeCipher, let tilde = stored.firstIndex(of: "~") else { return stored }
        return String(stored[..<tilde]) + (try cipher.openId(String(stored[stored.index(after: tilde)...])))
    }
}

/// Opening a library's store key (``StoreEncryption``): made with the library, unlocked at every later open.
enum StoreKey {
    static let fileName = "store-key.json"

    /// The data key of the library in `directory` whose database says `encrypted` (and keeps `check`), unlocked by
    /// `encryption`; a new key when the library is new (`isNew`). Nil for a plain library opened without encryption.
    static func unlock(
        directory: URL, encryption: StoreEncryption?, encrypted: Bool, isNew: Bool, check: String?
    ) throws -> SymmetricKey? {
        let keyFile = directory.appending(path: fileName)
        if isNew {
            guard let encryption else { return nil }
            let key = WrappedKey.newDataKey()
            switch encryption {
            case .passphrase(let passphrase):
                try write(try WrappedKey.wrap(key, passphrase: passphrase), to: keyFile)
            case .keyStore(let store):
                if let existing = try store.loadKey() { return existing }
                try store.storeKey(key)
            }
            return key
        }
        guard encrypted else {
            if encryption != nil {
                throw EncryptionError.notEncrypted(
                    "the library in \(directory.path) was made without encryption; its data is not encrypted. Make a new library to encrypt it.")
            }
            return nil
        }
        guard let encryption else {
            throw EncryptionError.keyMissing("the library in \(directory.path) is encrypted; give its passphrase or key to open it.")
        }
        let key: SymmetricKey
        switch encryption {
        case .passphrase(let passphrase):
            guard let data = try? Data(contentsOf: keyFile) else {
                throw EncryptionError.keyMissing("\(keyFile.path) is gone: the library's key was wiped, and its data cannot be read.")
            }
            let wrapped: WrappedKey
            do { wrapped = try JSONDecoder().decode(WrappedKey.self, from: data) } catch {
                throw EncryptionError.tampered("\(keyFile.path) is not a key file")
            }
            key = try wrapped.unwrap(passphrase: passphrase)
        case .keyStore(let store):
            guard let stored = try store.loadKey() else {
                throw EncryptionError.keyMissing("the key store holds no key for the library in \(directory.path).")
            }
            key = stored
        }
        if let check, StoreCipher(dataKey: key).check != check { throw EncryptionError.wrongPassphrase }
        return key
    }

    static func write(_ wrapped: WrappedKey, to url: URL) throws {
        let data = try JSONEncoder().encode(wrapped)
        let temporary = url.deletingLastPathComponent().appending(path: ".\(url.lastPathComponent).\(UUID().uuidString)")
        guard FileManager.default.createFile(atPath: temporary.path, contents: data, attributes: [.posixPermissions: 0o600]) else {
            throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: temporary.path])
        }
        if let handle = try? FileHandle(forWritingTo: temporary) {
            try? handle.synchronize()
            try? handle.close()
        }
        guard rename(temporary.path, url.path) == 0 else {
            try? FileManager.default.removeItem(at: temporary)
            throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: url.path])
        }
    }
}
