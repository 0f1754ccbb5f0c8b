#if canImport(Security)
import Crypto
import Foundation
import Security

/// The data key in the Keychain (Apple platforms): a generic-password item of `service` and `account`,
/// readable after the device's first unlock and never moved to another device (no iCloud Keychain, no backup).
///
/// Built on Apple platforms only; this project's CI runs on Linux, where the same ``KeyStore`` contract is tested with
/// ``FileKeyStore``, ``EnvironmentKeyStore`` and ``KernelKeyring``. It has not been compiled or run here.
public struct KeychainKeyStore: KeyStore {
    /// The Keychain item's service.
    public let service: String
    /// The Keychain item's account.
    public let account: String

    /// `account` names the library (e.g. its folder's name); `service` the app.
    public init(service: String = "Nimbus", account: String) {
        self.service = service
        self.account = account
    }

    private var item: [String: Any] {
        [kSecClass as String: kSecClassGenericPassword, kSecAttrService as String: service, kSecAttrAccount as String: account]
    }

    /// The key in the Keychain, or nil when there is none.
    public func loadKey() throws -> SymmetricKey? {
        var query = item
        query[kSecReturnData as String] = true
        query[kSecMatchLimit as String] = kSecMatchLimitOne
        var result: CFTypeRef?
        let status = SecItemCopyMatching(query as CFDictionary, &result)
        if status == errSecItemNotFound { return nil }
        guard status == errSecSuccess, let data = result as? Data else {
            throw EncryptionError.keyMissing("the Keychain did not give the key \(service)/\(account) (\(Self.message(status))).")
        }
        guard data.count == 32 else {
            throw EncryptionError.tampered("the Keychain item \(service)/\(account) does not hold a 256-bit key")
        }
        return SymmetricKey(data: data)
    }

    /// Stores the key (`AfterFirstUnlockThisDeviceOnly`), replacing any there.
    public func storeKey(_ key: SymmetricKey) throws {
        let data = key.withUnsafeBytes { Data($0) }
        var attributes = item
        attributes[kSecValueData as String] = data
        attributes[kSecAttrAccessible as String] = kSecAttrAccessibleAfterFirstUnlockThisDeviceOnly
        var status = SecItemAdd(attributes as CFDictionary, nil)
        if status == errSecDuplicateItem {
            status = SecItemUpdate(item as CFDictionary, [kSecValueData as String: data] as CFDictionary)
        }
        guard status == errSecSuccess else {
            throw EncryptionError.keyMissing("the Keychain did not keep the key \(service)/\(account) (\(Self.message(status))).")
        }
    }

    /// Deletes the Keychain item.
    public func deleteKey() throws {
        let status = SecItemDelete(item as CFDictionary)
        guard status == errSecSuccess || status == errSecItemNotFound else {
            throw EncryptionError.keyMissing("the Keychain did not delete the key \(service)/\(account) (\(Self.message(status))).")
        }
    }

    static func message(_ status: OSStatus) -> String {
        (SecCopyErrorMessageString(status, nil) as String?) ?? "OSStatus \(status)"
    }
}
#endif
