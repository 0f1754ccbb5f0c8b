import Crypto
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A key held by the Linux kernel's key retention service, in the user's keyring (`KEY_SPEC_USER_KEYRING`): in
/// kernel memory, never on disk, readable by this user's processes, gone at reboot and — with a timeout — after a
/// while. What `ssh-agent` is to SSH keys, for a store's data key: `nimbus unlock` puts the unwrapped key here so
/// later commands skip the passphrase and its 600,000 PBKDF2 rounds (~0.25 s per process); `nimbus lock` forgets it.
///
/// Through `libkeyutils.so.1` (Debian's `libkeyutils1`, on nearly every system), opened at run time: where it or the
/// key service is missing (another OS, a sandbox that filters `add_key`), ``isAvailable`` is false and every call
/// throws ``EncryptionError/keyMissing(_:)`` saying so. On Apple platforms the Keychain is the place (`KeychainKeyStore`).
public struct KernelKeyring: KeyStore {
    /// The key's description in the keyring, e.g. `nimbus:<store id>`.
    public let name: String
    /// How long a stored key lives; nil: until reboot or ``deleteKey()``.
    public let lifetime: Duration?

    /// The key named `name` in this user's keyring, kept for `lifetime` once stored.
    public init(name: String, lifetime: Duration? = nil) {
        self.name = name
        self.lifetime = lifetime
    }

    /// Whether the kernel key service can be used from this process.
    public static var isAvailable: Bool { Library.shared != nil }

    /// The key, or nil when there is none (never stored, expired or revoked).
    public func loadKey() throws -> SymmetricKey? {
        let library = try Self.library()
        let serial = name.withCString { description in library.search(userKeyring, "user", description, 0) }
        guard serial > 0, let key = Int32(exactly: serial) else { return nil }  // ENOKEY, or expired (EKEYEXPIRED), or revoked
        var buffer = [UInt8](repeating: 0, count: 64)
        let count = buffer.withUnsafeMutableBytes { library.read(key, $0.baseAddress, 64) }
        guard count == 32 else {
            if count < 0 { return nil }  // expired or revoked between the search and the read
            throw EncryptionError.tampered("the kernel keyring's \(name) does not hold a 256-bit key")
        }
        return SymmetricKey(data: buffer[0..<32])
    }

    /// Stores the key in this user's keyring, for ``lifetime``.
    public func storeKey(_ key: SymmetricKey) throws {
        let library = try Self.library()
        let serial = key.withUnsafeBytes { bytes in
            name.withCString { description in library.add("user", description, bytes.baseAddress, bytes.count, userKeyring) }
        }
        guard serial > 0 else {
            throw EncryptionError.keyMissing("the kernel keyring refused the key (\(String(cString: strerror(errno)))).")
        }
        if let lifetime {
            let seconds = UInt32(clamping: max(1, lifetime.components.seconds))
            guard library.setTimeout(serial, seconds) == 0 else {
                _ = library.unlink(serial, userKeyring)
                throw EncryptionError.keyMissing("the kernel keyring did not take the key's lifetime (\(String(cString: strerror(errno)))).")
            }
        }
    }

    /// Forgets the key (every copy under this name); none is fine.
    public func deleteKey() throws {
        guard let library = Library.shared else { return }
        while true {
            let serial = name.withCString { description in library.search(userKeyring, "user", description, 0) }
            guard serial > 0, let key = Int32(exactly: serial) else { return }
            _ = library.revoke(key)
            guard library.unlink(key, userKeyring) == 0 else { return }
        }
    }

    private let userKeyring: Int32 = -4  // KEY_SPEC_USER_KEYRING

    private static func library() throws -> Library {
        guard let library = Library.shared else {
            throw EncryptionError.keyMissing("this system has no kernel keyring for nimbus to use (libkeyutils.so.1 or the key service is missing).")
        }
        return library
    }

    /// The few keyutils calls used, found at run time.
    struct Library: @unchecked Sendable {
        let add: @convention(c) (UnsafePointer<CChar>, UnsafePointer<CChar>, UnsafeRawPointer?, Int, Int32) -> Int32
        let search: @convention(c) (Int32, UnsafePointer<CChar>, UnsafePointer<CChar>, Int32) -> Int
        let read: @convention(c) (Int32, UnsafeMutableRawPointer?, Int) -> Int
        let setTimeout: @convention(c) (Int32, UInt32) -> Int
        let revoke: @convention(c) (Int32) -> Int
        let unlink: @convention(c) (Int32, Int32) -> Int

        static let shared: Library? = {
            #if os(Linux)
            guard let handle = dlopen("libkeyutils.so.1", RTLD_NOW) else { return nil }
            func symbol<T>(_ name: String, as: T.Type) -> T? { dlsym(handle, name).map { unsafeBitCast($0, to: T.self) } }
            guard let add = symbol("add_key", as: (@convention(c) (UnsafePointer<CChar>, UnsafePointer<CChar>, UnsafeRawPointer?, Int, Int32) -> Int32).self),
                let search = symbol("keyctl_search", as: (@convention(c) (Int32, UnsafePointer<CChar>, UnsafePointer<CChar>, Int32) -> Int).self),
                let read = symbol("keyctl_read", as: (@convention(c) (Int32, UnsafeMutableRawPointer?, Int) -> Int).self),
                let setTimeout = symbol("keyctl_set_timeout", as: (@convention(c) (Int32, UInt32) -> Int).self),
                let revoke = symbol("keyctl_revoke", as: (@convention(c) (Int32) -> Int).self),
                let unlink = symbol("keyctl_unlink", as: (@convention(c) (Int32, Int32) -> Int).self)
            else { return nil }
            return Library(add: add, search: search, read: read, setTimeout: setTimeout, revoke: revoke, unlink: unlink)
            #else
            return nil
            #endif
        }()
    }
}
