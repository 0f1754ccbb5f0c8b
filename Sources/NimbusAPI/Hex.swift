/// Lower-case hex of bytes (digests, ids, keys): one lookup per nibble. `String(format: "%02x")` per byte was 10 % of
/// a small-file S3 sync's CPU (SigV4 hashes every request twice).
public enum Hex {
    public static func encode(_ bytes: some Sequence<UInt8>) -> String {
        let digits: StaticString = "0123456789abcdef"
        var out: [UInt8] = []
        out.reserveCapacity(bytes.underestimatedCount * 2)
        digits.withUTF8Buffer { table in
            for byte in bytes {
                out.append(table[Int(byte >> 4)])
                out.append(table[Int(byte & 0x0f)])
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}
