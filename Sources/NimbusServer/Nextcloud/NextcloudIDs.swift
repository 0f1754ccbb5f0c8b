import Crypto
import Foundation

/// Nextcloud's ids for an item: `oc:fileid`, a positive integer the apps keep as a 64-bit number (Android parses it
/// as a `long`), and `oc:id`, that number followed by the instance's id (`00001234ocnimbus`; the iOS app reads the
/// number back from before "oc"). `OC-FileId` in an upload's answer is the `oc:id`.
///
/// The number is not stored: it is read from the item's own id, which never changes for the item's life (renames,
/// moves, the trash and back keep it). An id is "f" and 20 random base-32 characters; its first 12 characters are
/// 60 random bits, and the number is those bits plus one — so the item a number names is found by its id's prefix,
/// on the primary key (``FileStore/item(idPrefix:)``). Two items sharing 60 random bits are as unlikely as two equal
/// SHA-256 prefixes of that length; a lookup that finds two answers neither. An id of another shape (none is made
/// today) gets a number from its SHA-256 above 2⁶¹, which names it in listings but is not looked up.
enum NextcloudIDs {
    /// What follows the number in `oc:id` (Nextcloud's instance ids start with "oc" too).
    static let instanceId = "ocnimbus"

    private static let alphabet = Array("0123456789abcdefghijklmnopqrstuv".utf8)
    private static let prefixLength = 12

    /// The item's `oc:fileid`.
    static func number(of id: String) -> Int64 {
        let bytes = Array(id.utf8)
        if bytes.count == 21, bytes[0] == UInt8(ascii: "f") {
            var value: Int64 = 0
            var valid = true
            for byte in bytes[1...prefixLength] {
                guard let digit = alphabet.firstIndex(of: byte) else {
                    valid = false
                    break
                }
                value = value << 5 | Int64(digit)
            }
            if valid { return value + 1 }
        }
        let digest = Array(SHA256.hash(data: Data(id.utf8)))
        let bits = digest.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) } >> 4
        return Int64(1) << 61 + Int64(bits)
    }

    /// The id prefix every item numbered `number` has ("f" and 12 characters); nil for a number no id gives.
    static func idPrefix(of number: Int64) -> String? {
        guard number >= 1, number <= Int64(1) << 60 else { return nil }
        var value = number - 1
        var characters = [UInt8](repeating: 0, count: prefixLength)
        for index in (0..<prefixLength).reversed() {
            characters[index] = alphabet[Int(value & 31)]
            value >>= 5
        }
        return "f" + String(decoding: characters, as: UTF8.self)
    }

    /// The item's `oc:id` (and `OC-FileId`): the number, at least 8 digits, and the instance id.
    static func ocId(of id: String) -> String {
        let digits = String(number(of: id))
        return String(repeating: "0", count: max(0, 8 - digits.count)) + digits + instanceId
    }

    /// The number in an `oc:id` or a bare `oc:fileid`; nil when the text is neither.
    static func number(in text: String) -> Int64? {
        let digits = text.hasSuffix(instanceId) ? String(text.dropLast(instanceId.count)) : text
        guard !digits.isEmpty, digits.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let value = Int64(digits), value > 0 else { return nil }
        return value
    }
}
