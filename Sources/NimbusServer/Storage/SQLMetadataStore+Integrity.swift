import Foundation
import NIOCore
import NIOPosix
import NimbusAPI

/// A file revision one of whose blocks is damaged (its bytes no longer hash to its name, or are gone) — or was, and has
/// been stored again (healed).
public struct AffectedFile: Sendable, Codable, Equatable {
    public var userId: String
    public var username: String
    public var fileId: String
    /// From the user's root, e.g. `/Photos/2024/beach.jpg` (the name alone when the file is in the trash).
    public var path: String
    public var revisionId: String
    /// Whether it is the file's current version (older ones are kept as versions).
    public var head: Bool
}

/// What ``SQLMetadataStore/verifyBlocks(from:limit:now:)`` found in one slice of the store.
struct VerifiedSlice: Sendable {
    var checked = 0
    var bytes: Int64 = 0
    /// Blocks found damaged (newly or still), and blocks damaged before that are whole again (stored again since).
    var damaged: [(user: String, hash: String)] = []
    var healed: [(user: String, hash: String)] = []
    /// The last (user, hash) checked: where the next slice starts; nil when the store has no more.
    var next: (user: String, hash: String)?
}

/// Bit rot: blocks marked damaged (`blocks.damaged_at`) when a read or the scrub finds their bytes no longer hash to
/// their name, the files that use them, and the re-check of every stored block (`nimbus admin verify`, the daily
/// scrub). A damaged block is never served; the next upload of the same content stores it again (see ``putBlocks``).
extension SQLMetadataStore {
    /// Marks the block damaged; true when it was not already (the first time is logged and counted).
    @discardableResult
    func markDamaged(userId: String, hash: String, now: Date) async throws -> Bool {
        try await database.write { db in
            try db.execute("UPDATE blocks SET damaged_at = ? WHERE user_id = ? AND hash = ? AND damaged_at IS NULL", [now.millis, userId, hash]) > 0
        }
    }

    /// The file revisions (live files and trashed ones) that use any of `blocks`, with their users and paths.
    func files(using blocks: [(user: String, hash: String)]) async throws -> [AffectedFile] {
        let byUser = Dictionary(grouping: blocks, by: \.user).mapValues { Array(Set($0.map(\.hash))) }
        guard !byUser.isEmpty else { return [] }
        return try await database.read { db in
            var found: [AffectedFile] = []
            for (userId, hashes) in byUser {
                let username = try db.value("SELECT username FROM users WHERE id = ?", [userId], as: String.self) ?? userId
                var revisions: [String: (fileId: String, head: Bool)] = [:]
                for row in try Self.fetchAll(
                    db,
                    """
                    SELECT DISTINCT r.id AS revision_id, r.file_id, f.head_revision_id FROM revision_blocks rb
                    JOIN revisions r ON r.id = rb.revision_id JOIN files f ON f.id = r.file_id WHERE rb.user_id = ? AND rb.hash IN
                    """, [userId], hashes)
                {
                    let revisionId: String = try row.get("revision_id")
                    revisions[revisionId] = (try row.get("file_id"), try row.get("head_revision_id", as: String?.self) == revisionId)
                }
                let chains = try Self.chains(db, of: Array(Set(revisions.values.map(\.fileId))))
                for (revisionId, file) in revisions {
                    let names = (chains[file.fileId] ?? []).dropLast().map(\.name).reversed()
                    found.append(
                        AffectedFile(
                            userId: userId, username: username, fileId: file.fileId, path: "/" + names.joined(separator: "/"), revisionId: revisionId,
                            head: file.head))
                }
            }
            return found.sorted { ($0.username, $0.path, $0.revisionId) < ($1.username, $1.path, $1.revisionId) }
        }
    }

    /// Every file revision that uses a block marked damaged, or a block with no row at all (its bytes lost).
    func damagedFiles() async throws -> [AffectedFile] {
        let blocks = try await database.read { db in
            try db.fetchAll(
                """
                SELECT user_id, hash FROM blocks WHERE damaged_at IS NOT NULL
                UNION SELECT rb.user_id, rb.hash FROM revision_blocks rb
                WHERE NOT EXISTS (SELECT 1 FROM blocks b WHERE b.user_id = rb.user_id AND b.hash = rb.hash)
                """, []
            ).map { (user: try $0.get("user_id", as: String.self), hash: try $0.get("hash", as: String.self)) }
        }
        return try await files(using: blocks)
    }

    /// Reads up to `limit` stored blocks in (user, hash) order after `from` (nil: from the start) through the blob
    /// store — which checks each against its SHA-256 — and marks those that fail damaged; those damaged before and
    /// whole now (stored again since) are reported healed, once, and their marks cleared.
    func verifyBlocks(from: (user: String, hash: String)?, limit: Int, now: Date) async throws -> VerifiedSlice {
        let rows = try await database.read { db in
            try db.fetchAll(
                from == nil
                    ? "SELECT user_id, hash, size, data, pack, pack_offset, pack_stored, damaged_at, healed_at FROM blocks ORDER BY user_id, hash LIMIT ?"
                    : """
                    SELECT user_id, hash, size, data, pack, pack_offset, pack_stored, damaged_at, healed_at FROM blocks
                    WHERE user_id > ? OR (user_id = ? AND hash > ?) ORDER BY user_id, hash LIMIT ?
                    """,
                from.map { [$0.user, $0.user, $0.hash, limit] } ?? [limit])
        }
        struct Checked {
            var user: String
            var block: BlockRef
            var marked: Bool  // damaged or healed before
            var wasDamaged: Bool
        }
        var slice = VerifiedSlice()
        var checked: [Checked] = []
        for row in rows {
            let user: String = try row.get("user_id")
            let block = BlockRef(hash: try row.get("hash"), size: try row.get("size"), inline: try row.get("data", as: [UInt8]?.self), pack: try Self.packLocation(row))
            let wasDamaged = try row.get("damaged_at", as: Int64?.self) != nil
            let healedSince = try row.get("healed_at", as: Int64?.self) != nil
            checked.append(Checked(user: user, block: block, marked: wasDamaged || healedSince, wasDamaged: wasDamaged))
            slice.next = (user, block.hash)
            slice.checked += 1
            slice.bytes += block.size
        }
        // The blocks of one pack in the order they lie there, read in one coalesced pass (a damaged one stops it:
        // the pass goes on after it).
        let groups = Dictionary(grouping: checked) { $0.user + "/" + ($0.block.pack?.pack ?? "") }
        for key in groups.keys.sorted() {
            var left = (groups[key] ?? []).sorted { ($0.block.pack?.offset ?? 0) < ($1.block.pack?.offset ?? 0) }
            while !left.isEmpty {
                let user = left[0].user
                let damagedHash: String?
                do {
                    try await blobs.read(left.map(\.block), user: user, range: 0..<left.reduce(0) { $0 + $1.block.size }) { _ in }
                    damagedHash = nil
                } catch let damaged as DamagedBlock {
                    damagedHash = damaged.hash
                } catch {
                    // Not rot (a store that does not answer, a pack deleted or moved since the rows were read): each
                    // block of the group on its own.
                    for one in left { try await verifyAlone(one.block, user: user, marked: one.marked, wasDamaged: one.wasDamaged, now: now, into: &slice) }
                    break
                }
                let stop = damagedHash.flatMap { hash in left.firstIndex { $0.block.hash == hash } } ?? left.count
                for one in left[..<stop] where one.marked { try await healed(one.block, user: user, into: &slice) }
                guard stop < left.count else { break }
                let bad = left[stop]
                slice.damaged.append((user, bad.block.hash))
                if !bad.wasDamaged { try await markDamaged(userId: user, hash: bad.block.hash, now: now) }
                left = Array(left[(stop + 1)...])
            }
        }
        if rows.count < limit { slice.next = nil }
        return slice
    }

    /// One block read on its own (after a read of its pack failed other than by rot): damaged only when its bytes are
    /// gone from the place its row still names.
    private func verifyAlone(_ block: BlockRef, user: String, marked: Bool, wasDamaged: Bool, now: Date, into slice: inout VerifiedSlice) async throws {
        do {
            try await blobs.read([block], user: user, range: 0..<block.size) { _ in }
            if marked { try await healed(block, user: user, into: &slice) }
            return
        } catch is DamagedBlock {
        } catch {
            // Its bytes are not there at all (a pack gone) — or the store did not answer: a store that is down is not
            // rot; and only if the row still names that place (a sweep or a compaction may have deleted or moved it).
            guard try await !blobs.containsBlockingAsync(block, user: user) else { throw error }
            let still = try await database.read { db in
                try db.fetchOne("SELECT pack, pack_offset FROM blocks WHERE user_id = ? AND hash = ?", [user, block.hash]).map {
                    (try $0.get("pack", as: String?.self), try $0.get("pack_offset", as: Int64?.self))
                }
            }
            guard let still, still.0 == block.pack?.pack, still.1 == block.pack?.offset else { return }
        }
        slice.damaged.append((user, block.hash))
        if !wasDamaged { try await markDamaged(userId: user, hash: block.hash, now: now) }
    }

    /// A block marked damaged (or healed) before that reads whole: reported healed once, its marks cleared.
    private func healed(_ block: BlockRef, user: String, into slice: inout VerifiedSlice) async throws {
        try await database.write { db in
            try db.perform("UPDATE blocks SET damaged_at = NULL, healed_at = NULL WHERE user_id = ? AND hash = ?", [user, block.hash])
        }
        slice.healed.append((user, block.hash))
    }
}

extension SQLMetadataStore {
    /// How many blocks the store keeps (all users).
    func blockTotal() async throws -> Int {
        try await database.read { db in try db.value("SELECT COUNT(*) FROM blocks", [], as: Int.self) ?? 0 }
    }

    /// Where the scrub's round stands: the last block it checked (nil: at the start).
    func scrubCursor() async throws -> (user: String, hash: String)? {
        let value = try await database.read { db in try db.value("SELECT value FROM settings WHERE key = 'scrub-cursor'", [], as: String.self) }
        guard let parts = value?.split(separator: " ", maxSplits: 1), parts.count == 2 else { return nil }
        return (String(parts[0]), String(parts[1]))
    }

    func setScrubCursor(_ cursor: (user: String, hash: String)?) async throws {
        try await database.write { db in
            if let cursor {
                try db.perform(
                    "INSERT INTO settings (key, value) VALUES ('scrub-cursor', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    [cursor.user + " " + cursor.hash])
            } else {
                try db.perform("DELETE FROM settings WHERE key = 'scrub-cursor'", [])
            }
        }
    }
}

extension BlobStore {
    /// ``containsBlocking(_:user:)-(BlockRef,_)`` off the caller's thread (a block store's look-ups may block).
    func containsBlockingAsync(_ block: BlockRef, user: String) async throws -> Bool {
        if block.inline != nil { return true }
        return try await NIOThreadPool.singleton.runIfActive { try containsBlocking(block, user: user) }
    }
}
