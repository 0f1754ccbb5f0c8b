import Crypto
import Foundation
import _CryptoExtras

/// Names hidden from an untrusted remote, in a form its listings still work with (crypt remotes): a name
/// is padded to a multiple of 16 bytes (its exact length hidden), sealed with AES-256-GCM-SIV under a fixed nonce —
/// a deterministic authenticated cipher: the same name in the same folder always seals to the same text, so a
/// lookup by name is a lookup by the sealed name, and nothing else leaks but equality — then written in lowercase
/// base32 without padding (letters and digits 2–7 only: safe on case-insensitive disks, in URLs and S3 keys).
///
/// The folder's own sealed path is the associated data, so one name in two folders seals differently (the tree's
/// shape does not show who holds the same names). The key is derived from the data key with HKDF-SHA256
/// (`info` "nimbus-names-v1"). A sealed name must fit the usual 255-byte limit: padded name + 16-byte tag ≤ 159
/// bytes, so names of up to 127 UTF-8 bytes (rclone's crypt, unauthenticated, takes 143); longer ones are refused
/// with ``EncryptionError/nameTooLong(_:)``. Format and a
/// recovery recipe: `docs/encryption.md`.
public struct NameCipher: Sendable {
    let key: SymmetricKey
    /// The fixed nonce: GCM-SIV stays safe with it (misuse resistance), and the sealed text carries no nonce.
    static let nonceBytes = [UInt8](repeating: 0, count: 12)
    /// The longest name that can be sealed, in UTF-8 bytes (its sealed form fits 255).
    public static let maximumNameBytes = 127

    /// Names sealed under a key derived from the remote's data key.
    public init(dataKey: SymmetricKey) {
        key = HKDF<SHA256>.deriveKey(inputKeyMaterial: dataKey, info: Array("nimbus-names-v1".utf8), outputByteCount: 32)
    }

    /// `name` sealed, for the folder whose sealed path is `folder` ("" for the top).
    public func seal(_ name: String, in folder: String = "") throws -> String {
        let bytes = Array(name.utf8)
        guard !bytes.isEmpty, bytes.count <= Self.maximumNameBytes else { throw EncryptionError.nameTooLong(bytes.count) }
        // Padding as PKCS#7: 1–16 bytes, each the count (a name of 16 bytes takes a whole block more).
        let padding = 16 - bytes.count % 16
        let padded = bytes + [UInt8](repeating: UInt8(padding), count: padding)
        let box = try AES.GCM._SIV.seal(padded, using: key, nonce: try AES.GCM._SIV.Nonce(data: Self.nonceBytes), authenticating: Array(folder.utf8))
        return Base32.encode(Array(box.ciphertext) + Array(box.tag))
    }

    /// The name a sealed one stands for, or ``EncryptionError/tampered(_:)`` (changed, from another folder, or not
    /// a sealed name at all).
    public func open(_ sealed: String, in folder: String = "") throws -> String {
        // Only the canonical spelling: one name has one sealed form, so a listing never shows it twice.
        guard let raw = Base32.decode(sealed), raw.count >= 32, raw.count % 16 == 0, Base32.encode(raw) == sealed else {
            throw EncryptionError.tampered("'\(sealed.prefix(40))' is not a sealed name")
        }
        let plain: Data
        do {
            let box = try AES.GCM._SIV.SealedBox(
                nonce: try AES.GCM._SIV.Nonce(data: Self.nonceBytes), ciphertext: raw.prefix(raw.count - 16), tag: raw.suffix(16))
            plain = try AES.GCM._SIV.open(box, using: key, authenticating: Array(folder.utf8))
        } catch {
            throw EncryptionError.tampered("a sealed name does not authenticate here")
        }
        guard let padding = plain.last, (1...16).contains(padding), plain.count > Int(padding),
            plain.suffix(Int(padding)).allSatisfy({ $0 == padding }),
            let name = String(bytes: plain.dropLast(Int(padding)), encoding: .utf8)
        else { throw EncryptionError.tampered("a sealed name's padding is wrong") }
        return name
    }
}

/// RFC 4648 base32, lowercase, no padding.
enum Base32 {
    static let alphabet = Array("abcdefghijklmnopqrstuvwxyz234567".utf8)

    static func encode(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count * 8 + 4) / 5)
        var buffer = 0
        var bits = 0
        for byte in bytes {
            buffer = (buffer << 8) | Int(byte)
            bits += 8
            while bits >= 5 {
                out.append(alphabet[(buffer >> (bits - 5)) & 31])
                bits -= 5
            }
            buffer &= (1 << bits) - 1
        }
        if bits > 0 { out.append(alphabet[(buffer << (5 - bits)) & 31]) }
        return String(decoding: out, as: UTF8.self)
    }

    static func decode(_ text: String) -> [UInt8]? {
        var out: [UInt8] = []
        var buffer = 0
        var bits = 0
        for character in text.utf8 {
            let value: Int
            switch character {
            case UInt8(ascii: "a")...UInt8(ascii: "z"): value = Int(character - UInt8(ascii: "a"))
            case UInt8(ascii: "2")...UInt8(ascii: "7"): value = Int(character - UInt8(ascii: "2")) + 26
            default: return nil
            }
            buffer = (buffer << 5) | value
            bits += 5
            if bits >= 8 {
                out.append(UInt8((buffer >> (bits - 8)) & 255))
                bits -= 8
                buffer &= (1 << bits) - 1
            }
        }
        // Leftover bits must be the zero padding of the last character.
        guard buffer == 0 else { return nil }
        return out
    }
}
