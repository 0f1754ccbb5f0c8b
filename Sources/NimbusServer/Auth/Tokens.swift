import Crypto
import Foundation
import JWTKit
import NIOConcurrencyHelpers
import NimbusAPI

/// The claims of an access token: `sub` user, `did` device, `iss`/`aud` fixed, `exp` short.
struct AccessClaims: JWTPayload, Equatable {
    static let issuer = "nimbus"
    static let audience = "nimbus-api"

    var sub: SubjectClaim
    var did: String
    var iss: IssuerClaim
    var aud: AudienceClaim
    var exp: ExpirationClaim
    var iat: IssuedAtClaim

    /// Time checks are done by ``TokenService`` against its injectable clock.
    func verify(using algorithm: some JWTAlgorithm) async throws {}
}

/// Signs and verifies access tokens (JWT, HS256 only) and makes refresh tokens.
struct TokenService: Sendable {
    let keys: JWTKeyCollection
    let lifetime: TimeInterval
    /// Derives a refresh token's successor (every replica shares it: it comes from the signing secret).
    let rotationKey: SymmetricKey

    init(secret: [UInt8], lifetime: TimeInterval) async {
        let keys = JWTKeyCollection()
        await keys.add(hmac: HMACKey(key: SymmetricKey(data: secret)), digestAlgorithm: .sha256)
        self.keys = keys
        self.lifetime = lifetime
        rotationKey = SymmetricKey(data: HMAC<SHA256>.authenticationCode(for: Data("nimbus refresh rotation".utf8), using: SymmetricKey(data: secret)))
        cursors = CursorCodec(secret: secret)
        linkKey = SymmetricKey(data: HMAC<SHA256>.authenticationCode(for: Data("nimbus public links".utf8), using: SymmetricKey(data: secret)))
    }

    /// Derives links' tokens and signs their sessions.
    let linkKey: SymmetricKey

    /// A link's token: 140 bits of an HMAC of its id under a server key — unguessable, never stored (its hash finds
    /// the link), and shown again to its owner (`GET /v1/links/{id}`) by deriving it anew.
    func linkToken(_ linkId: String) -> String {
        let mac = Array(HMAC<SHA256>.authenticationCode(for: Data(("link:" + linkId).utf8), using: linkKey))
        // 28 symbols of 5 bits (0-9, a-v, as every id here): 140 bits.
        let alphabet = Array("0123456789abcdefghijklmnopqrstuv")
        var bits = 0
        var value = 0
        var token = ""
        for byte in mac.prefix(18) {
            value = (value << 8) | Int(byte)
            bits += 8
            while bits >= 5, token.count < 28 {
                token.append(alphabet[(value >> (bits - 5)) & 31])
                bits -= 5
            }
            value &= (1 << bits) - 1
        }
        return token
    }

    static func hashLinkToken(_ token: String) -> String { SHA256.hash(data: Data(token.utf8)).hexString }

    /// A session for a link, valid until `expiresAt` and only while the link's password is the one it was made under.
    func linkSession(_ linkId: String, passwordHash: String?, expiresAt: Date) -> String {
        let body = "\(linkId).\(expiresAt.millis)"
        return body + "." + sessionMAC(body, passwordHash: passwordHash)
    }

    /// Whether `session` is a live session of this link (under its current password).
    func verifyLinkSession(_ session: String, linkId: String, passwordHash: String?, now: Date) -> Bool {
        let parts = session.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        guard parts.count == 3, parts[0] == linkId, let millis = Int64(parts[1]), Date(millis: millis) > now else { return false }
        // Compared as digests (constant time).
        return SHA256.hash(data: Data(sessionMAC(parts[0] + "." + parts[1], passwordHash: passwordHash).utf8)) == SHA256.hash(data: Data(parts[2].utf8))
    }

    private func sessionMAC(_ body: String, passwordHash: String?) -> String {
        Data(HMAC<SHA256>.authenticationCode(for: Data(("session:" + body + ":" + (passwordHash ?? "")).utf8), using: linkKey)).base64URLEncodedString()
    }

    /// Seals change-feed positions into per-user opaque cursors.
    let cursors: CursorCodec

    /// The refresh token that replaces `token`: HMAC of it under a server key, so the same exchange retried gets the
    /// same successor (and only the server can compute it).
    func successor(of token: String) -> (token: String, hash: String) {
        let next = Data(HMAC<SHA256>.authenticationCode(for: Data(("refresh:" + token).utf8), using: rotationKey)).base64URLEncodedString()
        return (next, Self.hashRefreshToken(next))
    }

    func accessToken(for identity: Principal, now: Date) async throws -> (token: String, expiresAt: Date) {
        let expiresAt = Date(timeIntervalSince1970: (now.timeIntervalSince1970 + lifetime).rounded(.down))
        let claims = AccessClaims(
            sub: .init(value: identity.userId), did: identity.deviceId, iss: .init(value: AccessClaims.issuer),
            aud: .init(value: [AccessClaims.audience]), exp: .init(value: expiresAt), iat: .init(value: now))
        return (try await keys.sign(claims, header: ["typ": "JWT"]), expiresAt)
    }

    /// The identity in a valid token, or `nil`: wrong algorithm (only `HS256` is accepted, never `none`),
    /// bad signature, wrong issuer or audience, or expired.
    func verify(_ token: String, now: Date) async -> Principal? {
        if let known = verified.withLockedValue({ $0[token] }) { return known.expires > now ? known.principal : nil }
        guard let (principal, expires) = await check(token, now: now) else { return nil }
        verified.withLockedValue { tokens in
            if tokens.count >= 10_000 { tokens.removeAll() }
            tokens[token] = (principal, expires)
        }
        return principal
    }

    /// Access tokens this process has checked, by their text, with what they say: a client sends the same one with
    /// every request for its whole lifetime, and parsing and checking it each time (two JSON documents and an HMAC)
    /// was 4 % of the CPU of a metadata request. The same text always checks the same under the same key; its expiry
    /// is compared with the clock each time. Bounded: emptied at 10,000.
    private let verified = NIOLockedValueBox<[String: (principal: Principal, expires: Date)]>([:])

    private func check(_ token: String, now: Date) async -> (Principal, Date)? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3,
            let headerData = Data(base64URLEncoded: String(parts[0])),
            let header = try? JSONSerialization.jsonObject(with: headerData) as? [String: Any],
            header["alg"] as? String == "HS256"
        else { return nil }
        guard let claims = try? await keys.verify(token, as: AccessClaims.self) else { return nil }
        guard claims.iss.value == AccessClaims.issuer, claims.aud.value.contains(AccessClaims.audience),
            claims.exp.value > now
        else { return nil }
        return (Principal(userId: claims.sub.value, deviceId: claims.did), claims.exp.value)
    }

    /// A new opaque refresh token (256 random bits) and the hash the store keeps instead of it.
    static func makeRefreshToken() -> (token: String, hash: String) {
        let bytes = SymmetricKey(size: .bits256).withUnsafeBytes { Data($0) }
        let token = bytes.base64URLEncodedString()
        return (token, hashRefreshToken(token))
    }

    static func hashRefreshToken(_ token: String) -> String {
        SHA256.hash(data: Data(token.utf8)).hexString
    }
}

extension Data {
    init?(base64URLEncoded text: String) {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        self.init(base64Encoded: base64)
    }

    func base64URLEncodedString() -> String {
        base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}

/// Loads the JWT secret from `jwt-secret` in the data folder, creating it (64 random bytes, mode 0600) on first start.
enum SecretFile {
    /// 512 random bits.
    static func random() -> [UInt8] { SymmetricKey(size: .init(bitCount: 512)).withUnsafeBytes { Array($0) } }

    static func loadOrCreate(at url: URL) throws -> [UInt8] {
        if let text = try? String(contentsOf: url, encoding: .utf8) {
            let hex = text.trimmingCharacters(in: .whitespacesAndNewlines)
            guard let bytes = [UInt8](hex: hex), bytes.count >= 32 else {
                throw DriveError.internalError("\(url.path) is not a valid secret (expected at least 64 hex digits); delete it to make a new one (signs everyone out).")
            }
            return bytes
        }
        let bytes = random()
        try POSIXFile.writeDurably(Hex.encode(bytes).utf8, to: url.path)
        return bytes
    }
}

/// Change-feed cursors, opaque and per user: the feed position (a sequence number shared by all users) sealed with
/// AES-GCM under a key from the signing secret, the user's id as associated data. A client cannot read the number (so
/// gaps tell nothing about other users), forge one, or use another user's; the same position always gives the same
/// cursor (the nonce is an HMAC of user and position). Every replica derives the same keys.
struct CursorCodec: Sendable {
    let sealKey: SymmetricKey
    let nonceKey: SymmetricKey

    init(secret: [UInt8]) {
        let base = SymmetricKey(data: secret)
        sealKey = SymmetricKey(data: HMAC<SHA256>.authenticationCode(for: Data("nimbus change cursors: seal".utf8), using: base))
        nonceKey = SymmetricKey(data: HMAC<SHA256>.authenticationCode(for: Data("nimbus change cursors: nonce".utf8), using: base))
    }

    func encode(_ seq: Int64, userId: String) -> String {
        var position = Data(count: 8)
        for index in 0..<8 { position[index] = UInt8(truncatingIfNeeded: UInt64(bitPattern: seq) >> (56 - 8 * UInt64(index))) }
        let nonceBytes = Data(HMAC<SHA256>.authenticationCode(for: Data(userId.utf8) + [0] + position, using: nonceKey).prefix(12))
        guard let nonce = try? AES.GCM.Nonce(data: nonceBytes),
            let sealed = try? AES.GCM.seal(position, using: sealKey, nonce: nonce, authenticating: Data(userId.utf8)),
            let combined = sealed.combined
        else { return "" }  // AES-GCM with a 12-byte nonce does not fail.
        return combined.base64URLEncodedString()
    }

    /// The position in a cursor made for `userId`; nil for anything else (a number from before cursors were sealed,
    /// another user's cursor, a changed byte).
    func decode(_ text: String, userId: String) -> Int64? {
        guard text.count == 48, let data = Data(base64URLEncoded: text), let box = try? AES.GCM.SealedBox(combined: data),
            let position = try? AES.GCM.open(box, using: sealKey, authenticating: Data(userId.utf8)), position.count == 8
        else { return nil }
        let value = position.reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        guard value <= UInt64(Int64.max) else { return nil }
        return Int64(value)
    }
}
