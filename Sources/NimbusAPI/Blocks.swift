import Foundation

/// Block-level sync (`/v1/blocks/…`): content as an ordered list of content-defined chunks (``FastCDC``) addressed
/// by SHA-256. A client asks which blocks the server lacks, sends only those, then commits a file or a new version
/// as the list of its blocks. Blocks belong to one user: never shared across users.

/// `POST /v1/blocks/missing`.
public struct MissingBlocksRequest: Codable, Sendable, Hashable {
    /// Up to ``maxHashes`` lowercase hex SHA-256s.
    public var hashes: [String]
    public static let maxHashes = 10_000

    public init(hashes: [String]) { self.hashes = hashes }
}

/// The answer: the asked hashes this user's store lacks, in the order asked, each once.
public struct MissingBlocksResponse: Codable, Sendable, Hashable {
    public var missing: [String]

    public init(missing: [String]) { self.missing = missing }
}

/// `PUT /v1/blocks/{sha256}` answers `201` (stored now) or `200` (already there) with this.
public struct StoredBlock: Codable, Sendable, Hashable {
    public var hash: String
    public var size: Int64

    public init(hash: String, size: Int64) {
        self.hash = hash
        self.size = size
    }
}

/// `POST /v1/blocks` (many blocks in one request) answers `200` with the blocks stored, in order.
public struct StoredBlocks: Codable, Sendable, Hashable {
    public var stored: [StoredBlock]

    public init(stored: [StoredBlock]) { self.stored = stored }

    /// The body's media type: for each block a line `<sha256 hex> <length>\n`, then its bytes.
    public static let contentType = "application/x-nimbus-blocks"
}

/// One entry of a commit's block list: a block by hash, or a run of the base revision's blocks (`from` is the
/// index of the first, `count` how many), so that a small edit of a big file commits a short list.
public enum BlockListEntry: Codable, Sendable, Hashable {
    case block(String)
    case base(from: Int, count: Int)

    private enum Keys: String, CodingKey { case from, count }

    public init(from decoder: any Decoder) throws {
        if let single = try? decoder.singleValueContainer(), let hash = try? single.decode(String.self) {
            self = .block(hash)
            return
        }
        let object = try decoder.container(keyedBy: Keys.self)
        self = .base(from: try object.decode(Int.self, forKey: .from), count: try object.decode(Int.self, forKey: .count))
    }

    public func encode(to encoder: any Encoder) throws {
        switch self {
        case .block(let hash):
            var single = encoder.singleValueContainer()
            try single.encode(hash)
        case .base(let from, let count):
            var object = encoder.container(keyedBy: Keys.self)
            try object.encode(from, forKey: .from)
            try object.encode(count, forKey: .count)
        }
    }
}

/// `POST /v1/blocks/commit`: a new file (`name`, `parentId`, optional `requestId`, `onConflict` in the query) or a
/// new version of `fileId` (guarded by `If-Match: "<revisionId>"`), made of `blocks` in order. `size` and
/// `checksum` (hex SHA-256 of the whole content) are checked against the blocks: 422 when they disagree. Blocks the
/// store lacks → 409 `blocks_missing` naming them in `error.missing`; nothing changes.
public struct BlockCommitRequest: Codable, Sendable, Hashable {
    public var name: String?
    public var parentId: String?
    public var mimeType: String?
    public var requestId: String?
    public var fileId: String?
    /// The revision that `{from, count}` entries take blocks from (any revision of this user's).
    public var baseRevisionId: String?
    public var size: Int64
    public var checksum: String
    public var blocks: [BlockListEntry]
    /// When the content was last changed on the client (its file's mtime); the file's `modifiedAt` then. Default:
    /// the commit's time.
    public var modifiedAt: Date?

    public init(
        name: String? = nil, parentId: String? = nil, mimeType: String? = nil, requestId: String? = nil, fileId: String? = nil,
        baseRevisionId: String? = nil, size: Int64, checksum: String, blocks: [BlockListEntry], modifiedAt: Date? = nil
    ) {
        self.modifiedAt = modifiedAt
        self.name = name
        self.parentId = parentId
        self.mimeType = mimeType
        self.requestId = requestId
        self.fileId = fileId
        self.baseRevisionId = baseRevisionId
        self.size = size
        self.checksum = checksum
        self.blocks = blocks
    }
}

/// `GET /v1/files/{id}/blocks` (the head) or `?revisionId=…`: the blocks a revision is made of, in order.
public struct BlockManifest: Codable, Sendable, Hashable {
    public struct Block: Codable, Sendable, Hashable {
        public var hash: String
        public var size: Int64

        public init(hash: String, size: Int64) {
            self.hash = hash
            self.size = size
        }
    }

    public var fileId: String
    public var revisionId: String
    public var size: Int64
    public var checksum: String
    public var blocks: [Block]

    public init(fileId: String, revisionId: String, size: Int64, checksum: String, blocks: [Block]) {
        self.fileId = fileId
        self.revisionId = revisionId
        self.size = size
        self.checksum = checksum
        self.blocks = blocks
    }
}

extension String {
    /// Whether this is a SHA-256 as the block API writes it: 64 lowercase hex digits.
    public var isBlockHash: Bool {
        utf8.count == 64 && utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
    }
}

extension Array where Element == UInt8 {
    /// The bytes a hexadecimal string spells (either case); nil when it is not one.
    public init?(hex: String) {
        guard hex.utf8.count % 2 == 0 else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(hex.utf8.count / 2)
        var high: UInt8?
        for character in hex.utf8 {
            let value: UInt8
            switch character {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): value = character - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): value = character - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): value = character - UInt8(ascii: "A") + 10
            default: return nil
            }
            if let first = high {
                bytes.append(first << 4 | value)
                high = nil
            } else {
                high = value
            }
        }
        self = bytes
    }
}
