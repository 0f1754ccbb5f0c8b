import Crypto
import NimbusAPI
import Foundation

/// AWS Signature Version 4 for S3-compatible stores, header form
/// (https://docs.aws.amazon.com/AmazonS3/latest/API/sig-v4-header-based-auth.html). Hand-written because no S3 SDK
/// is available here; kept to what a signer needs: canonical request, string to sign, derived key, Authorization.
/// Tested against AWS's published example and against servers that check signatures (`rclone serve s3`).
public struct SigV4Signer: Sendable {
    public var accessKey: String
    public var secretKey: String
    public var region: String
    public var service: String

    /// The last day's derived signing key (four HMACs), kept: a sync of many small files signs thousands of requests
    /// a day with the same one.
    private let derived = DerivedKeyCache()

    public init(accessKey: String, secretKey: String, region: String, service: String = "s3") {
        self.accessKey = accessKey
        self.secretKey = secretKey
        self.region = region
        self.service = service
    }

    /// The SHA-256 (lowercase hex) of an empty payload.
    public static let emptyPayloadHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

    /// The headers to add to a request (`Authorization`, `x-amz-date`, `x-amz-content-sha256`). `path` is the
    /// request path as sent, already percent-encoded; `query` the decoded query items; `headers` the headers to sign
    /// (`host` must be among them); `payloadHash` the body's SHA-256 in hex (or `UNSIGNED-PAYLOAD`).
    public func sign(
        method: String, path: String, query: [(String, String)], headers: [(String, String)], payloadHash: String, date: Date
    ) -> [(String, String)] {
        let stamp = Self.timestamp(date)
        let day = String(stamp.prefix(8))
        var signed = headers.map { ($0.0.lowercased(), Self.trimmed($0.1)) }
        signed.append(("x-amz-date", stamp))
        signed.append(("x-amz-content-sha256", payloadHash))
        signed.sort { $0.0 < $1.0 }
        let names = signed.map(\.0).joined(separator: ";")
        let encoded: [(String, String)] = query.map { (Self.encode($0.0), Self.encode($0.1)) }
        let sortedQuery = encoded.sorted { (a: (String, String), b: (String, String)) -> Bool in a.0 == b.0 ? a.1 < b.1 : a.0 < b.0 }
        let canonicalQuery = sortedQuery.map { (pair: (String, String)) -> String in pair.0 + "=" + pair.1 }.joined(separator: "&")
        let canonicalHeaders = signed.map { (pair: (String, String)) -> String in pair.0 + ":" + pair.1 + "\n" }.joined()
        let parts: [String] = [method, path.isEmpty ? "/" : path, canonicalQuery, canonicalHeaders, names, payloadHash]
        let canonical = parts.joined(separator: "\n")
        let scope = "\(day)/\(region)/\(service)/aws4_request"
        let toSign = ["AWS4-HMAC-SHA256", stamp, scope, Self.hex(SHA256.hash(data: Data(canonical.utf8)))].joined(separator: "\n")
        let key = derivedKey(day: day)
        let signature = Self.hex(HMAC<SHA256>.authenticationCode(for: Data(toSign.utf8), using: key))
        return [
            ("Authorization", "AWS4-HMAC-SHA256 Credential=\(accessKey)/\(scope), SignedHeaders=\(names), Signature=\(signature)"),
            ("x-amz-date", stamp),
            ("x-amz-content-sha256", payloadHash),
        ]
    }

    /// The signing key of `day` (`yyyyMMdd`) for this signer's secret, region and service.
    func derivedKey(day: String) -> SymmetricKey {
        let identity = "\(day)/\(region)/\(service)/\(secretKey)"
        if let key = derived.key(for: identity) { return key }
        var key = SymmetricKey(data: Data("AWS4\(secretKey)".utf8))
        for part in [day, region, service, "aws4_request"] {
            key = SymmetricKey(data: Data(HMAC<SHA256>.authenticationCode(for: Data(part.utf8), using: key)))
        }
        derived.store(key, for: identity)
        return key
    }

    /// `yyyyMMdd'T'HHmmss'Z'` in UTC (`gmtime_r`: a `Calendar` per request was a visible part of signing).
    static func timestamp(_ date: Date) -> String {
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        var c = tm()
        gmtime_r(&seconds, &c)
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return "\(c.tm_year + 1900)\(two(c.tm_mon + 1))\(two(c.tm_mday))T\(two(c.tm_hour))\(two(c.tm_min))\(two(c.tm_sec))Z"
    }

    /// Header values are signed with surrounding spaces removed and inner runs of spaces collapsed.
    static func trimmed(_ value: String) -> String {
        value.split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ")
    }

    /// RFC 3986 percent-encoding as SigV4 wants it: everything but `A-Z a-z 0-9 - _ . ~` (and `/` when `slash`
    /// is false, for object keys in a path).
    public static func encode(_ text: String, slash: Bool = true) -> String {
        let hexDigits: StaticString = "0123456789ABCDEF"
        var bytes: [UInt8] = []
        bytes.reserveCapacity(text.utf8.count + 8)
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: "~"):
                bytes.append(byte)
            case UInt8(ascii: "/") where !slash:
                bytes.append(byte)
            default:
                bytes.append(UInt8(ascii: "%"))
                hexDigits.withUTF8Buffer { digits in
                    bytes.append(digits[Int(byte >> 4)])
                    bytes.append(digits[Int(byte & 0x0F)])
                }
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The reverse of ``encode(_:slash:)`` for any percent-encoded text: `%XX` sequences become their bytes
    /// (nil when one is malformed or the bytes are not UTF-8); everything else is kept as it is.
    public static func decode(_ text: String) -> String? {
        guard text.utf8.contains(UInt8(ascii: "%")) else { return text }
        func value(_ byte: UInt8) -> UInt8? {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
            default: nil
            }
        }
        let source = Array(text.utf8)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(source.count)
        var index = 0
        while index < source.count {
            if source[index] == UInt8(ascii: "%") {
                guard index + 2 < source.count, let high = value(source[index + 1]), let low = value(source[index + 2]) else { return nil }
                bytes.append(high << 4 | low)
                index += 3
            } else {
                bytes.append(source[index])
                index += 1
            }
        }
        return String(validating: bytes, as: UTF8.self)
    }

    static func hex<D: Sequence>(_ digest: D) -> String where D.Element == UInt8 {
        Hex.encode(digest)
    }
}

/// One derived key behind a lock, shared by copies of a signer.
final class DerivedKeyCache: @unchecked Sendable {
    private let lock = NSLock()
    private var identity = ""
    private var key: SymmetricKey?

    func key(for identity: String) -> SymmetricKey? {
        lock.withLock { self.identity == identity ? key : nil }
    }

    func store(_ key: SymmetricKey, for identity: String) {
        lock.withLock {
            self.identity = identity
            self.key = key
        }
    }
}
