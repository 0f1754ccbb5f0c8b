import Crypto
import Foundation
import _CryptoExtras

/// A data key wrapped by a key derived from a passphrase: PBKDF2-HMAC-SHA256 (600,000 rounds by default,
/// OWASP's 2023 figure) over a random 16-byte salt gives a key-encryption key, which seals the 32-byte data key with
/// AES-256-GCM. Changing the passphrase re-wraps the same data key: nothing encrypted with it changes. Stored as
/// JSON (`docs/encryption.md`).
public struct WrappedKey: Codable, Sendable, Equatable {
    /// The format's version.
    public var version = 1
    /// The key derivation function.
    public var kdf = "pbkdf2-hmac-sha256"
    /// PBKDF2's rounds.
    public var iterations: Int
    /// Base64 of the salt.
    public var salt: String
    /// Base64 of nonce ‖ ciphertext ‖ tag (AES-256-GCM, associated data `nimbus-data-key-v1`).
    public var sealed: String

    static let associatedData = Array("nimbus-data-key-v1".utf8)
    /// The fewest rounds accepted when unwrapping (a stored file asking for fewer was tampered with).
    public static let minimumIterations = 210_000
    /// The rounds new keys are wrapped with.
    public static let defaultIterations = 600_000

    /// A new random data key (AES-256).
    public static func newDataKey() -> SymmetricKey { SymmetricKey(size: .bits256) }

    /// `dataKey` wrapped under `passphrase`.
    public static func wrap(_ dataKey: SymmetricKey, passphrase: String, iterations: Int = defaultIterations) throws -> WrappedKey {
        var salt = [UInt8](repeating: 0, count: 16)
        var generator = SystemRandomNumberGenerator()
        for index in salt.indices { salt[index] = generator.next() }
        let wrapping = try derive(passphrase, salt: salt, iterations: iterations)
        let box = try dataKey.withUnsafeBytes { raw in
            try AES.GCM.seal(Data(raw), using: wrapping, nonce: AES.GCM.Nonce(), authenticating: associatedData)
        }
        guard let combined = box.combined else { throw EncryptionError.tampered("sealing the key failed") }
        return WrappedKey(iterations: iterations, salt: Data(salt).base64EncodedString(), sealed: combined.base64EncodedString())
    }

    /// The data key, or ``EncryptionError/wrongPassphrase``.
    public func unwrap(passphrase: String) throws -> SymmetricKey {
        guard version == 1, kdf == "pbkdf2-hmac-sha256" else { throw EncryptionError.notEncrypted("key format \(kdf) v\(version)") }
        guard iterations >= Self.minimumIterations, iterations <= 100_000_000 else {
            throw EncryptionError.tampered("the key file asks for \(iterations) PBKDF2 rounds")
        }
        guard let salt = Data(base64Encoded: salt), salt.count >= 16, let sealed = Data(base64Encoded: sealed) else {
            throw EncryptionError.tampered("the key file is malformed")
        }
        let wrapping = try Self.derive(passphrase, salt: Array(salt), iterations: iterations)
        let plain: Data
        do {
            plain = try AES.GCM.open(try AES.GCM.SealedBox(combined: sealed), using: wrapping, authenticating: Self.associatedData)
        } catch {
            throw EncryptionError.wrongPassphrase
        }
        guard plain.count == 32 else { throw EncryptionError.tampered("the wrapped key is \(plain.count) bytes") }
        return SymmetricKey(data: plain)
    }

    /// The same data key under a new passphrase (fresh salt).
    public func rewrapped(from old: String, to new: String, iterations: Int = defaultIterations) throws -> WrappedKey {
        try Self.wrap(try unwrap(passphrase: old), passphrase: new, iterations: iterations)
    }

    static func derive(_ passphrase: String, salt: [UInt8], iterations: Int) throws -> SymmetricKey {
        try KDF.Insecure.PBKDF2.deriveKey(
            from: Array(passphrase.precomposedStringWithCanonicalMapping.utf8), salt: salt, using: .sha256, outputByteCount: 32,
            unsafeUncheckedRounds: iterations)
    }
}

/// Where a device keeps its data key when no passphrase is asked each time: the Keychain on Apple
/// platforms, a 0600 key file or an environment secret on Linux.
public protocol KeyStore: Sendable {
    /// The stored key, or nil when there is none.
    func loadKey() throws -> SymmetricKey?
    /// Keeps `key`, replacing any kept before.
    func storeKey(_ key: SymmetricKey) throws
    /// Removes the key (sign-out with wipe): the data it encrypted cannot be read any more.
    func deleteKey() throws
}

/// A key in a file only its owner may read (0600), written atomically.
public struct FileKeyStore: KeyStore {
    /// The key file.
    public let url: URL

    /// A key kept in the file at `url`.
    public init(url: URL) { self.url = url }

    /// The key in the file, or nil when there is none; a file that holds no 256-bit key is `tampered`.
    public func loadKey() throws -> SymmetricKey? {
        guard let text = try? String(contentsOf: url, encoding: .utf8) else { return nil }
        guard let data = Data(base64Encoded: text.trimmingCharacters(in: .whitespacesAndNewlines)), data.count == 32 else {
            throw EncryptionError.tampered("the key file \(url.path) does not hold a 256-bit key")
        }
        return SymmetricKey(data: data)
    }

    /// Writes the key atomically, mode 0600.
    public func storeKey(_ key: SymmetricKey) throws {
        let text = key.withUnsafeBytes { Data($0).base64EncodedString() } + "\n"
        let temporary = url.deletingLastPathComponent().appending(path: ".\(url.lastPathComponent).\(UUID().uuidString)")
        guard FileManager.default.createFile(atPath: temporary.path, contents: Data(text.utf8), attributes: [.posixPermissions: 0o600]) else {
            throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: temporary.path])
        }
        guard rename(temporary.path, url.path) == 0 else {
            try? FileManager.default.removeItem(at: temporary)
            throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: url.path])
        }
    }

    /// Deletes the file.
    public func deleteKey() throws {
        if FileManager.default.fileExists(atPath: url.path) { try FileManager.default.removeItem(at: url) }
    }
}

/// A key from an environment variable (base64 of 32 bytes): for services, where a secret manager sets it.
public struct EnvironmentKeyStore: KeyStore {
    /// The variable's name.
    public let name: String
    let environment: [String: String]

    /// A key read from the variable `name`.
    public init(name: String = "NIMBUS_DATA_KEY", environment: [String: String] = ProcessInfo.processInfo.environment) {
        self.name = name
        self.environment = environment
    }

    /// The key in the variable, or nil when it is not set.
    public func loadKey() throws -> SymmetricKey? {
        guard let value = environment[name] else { return nil }
        guard let data = Data(base64Encoded: value.trimmingCharacters(in: .whitespacesAndNewlines)), data.count == 32 else {
            throw EncryptionError.keyMissing("\(name) is set but is not base64 of 32 bytes")
        }
        return SymmetricKey(data: data)
    }

    /// Refused: the environment is set outside the process.
    public func storeKey(_ key: SymmetricKey) throws {
        throw EncryptionError.keyMissing("\(name) is read from the environment; set it there")
    }

    /// Nothing to delete here.
    public func deleteKey() throws {}
}

/// A key already unlocked (by the caller, once), held in memory only: several libraries of one device sharing one
/// data key (the CLI's library and its folder pairs), without asking for the passphrase again.
public struct MemoryKeyStore: KeyStore {
    let key: SymmetricKey

    /// A store holding `key`.
    public init(key: SymmetricKey) { self.key = key }

    /// The key held.
    public func loadKey() throws -> SymmetricKey? { key }
    /// Nothing is stored: the key is the one held.
    public func storeKey(_ key: SymmetricKey) throws {}
    /// Nothing to delete.
    public func deleteKey() throws {}
}
