import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NimbusAPI
/// The block API's reads and its commit (`/v1/blocks/…`); blocks are put and adopted as for every other upload
/// (see "Blocks: put before commit, adopt in the commit" in ``SQLMetadataStore``).
extension SQLMetadataStore {
    /// The user's blocks among `hashes` that the store has bytes for: live, or orphaned and not swept yet (a
    /// commit adopts those again). Each with its size, and its bytes when the database keeps them. A block marked
    /// damaged is not among them: to a client it is missing, so the next upload of it stores it again.
    func storedBlocks(userId: String, hashes: [String]) async throws -> [String: (block: BlockRef, live: Bool)] {
        let unique = Array(Set(hashes))
        return try await database.read { db in
            var found: [String: (block: BlockRef, live: Bool)] = [:]
            for row in try Self.fetchAll(
                db, "SELECT hash, size, data, orphaned_at, pack, pack_offset, pack_stored FROM blocks WHERE damaged_at IS NULL AND user_id = ? AND hash IN",
                [userId], unique)
            {
                let block = BlockRef(
                    hash: try row.get("hash"), size: try row.get("size"), inline: try row.get("data", as: [UInt8]?.self), pack: try Self.packLocation(row))
                found[block.hash] = (block, try row.get("orphaned_at", as: Int64?.self) == nil)
            }
            return found
        }
    }

    func damagedBlocks(userId: String, hashes: [String]) async throws -> Set<String> {
        try await database.read { db in try Self.damaged(db, userId: userId, among: hashes) }
    }

    /// The user's blocks among `hashes` marked damaged, in a transaction.
    static func damaged(_ db: any SQLTransaction, userId: String, among hashes: [String]) throws -> Set<String> {
        Set(try fetchAll(db, "SELECT hash FROM blocks WHERE damaged_at IS NOT NULL AND user_id = ? AND hash IN", [userId], Array(Set(hashes)))
            .map { try $0.get("hash", as: String.self) })
    }

    /// A revision of the user's with its blocks in order (404 if it is not the user's).
    func revisionWithBlocks(userId: String, revisionId: String) async throws -> (revision: RevisionRecord, blocks: [BlockRef]) {
        let found = try await database.read { db -> RevisionRecord? in
            try db.fetchOne("SELECT * FROM revisions WHERE id = ? AND user_id = ?", [revisionId, userId]).map(Self.revision)
        }
        guard let revision = found else { throw DriveError.notFound("No such revision.") }
        return (revision, try await blocks(ofRevision: revision.id))
    }

    /// Commits content whose blocks are already in the store (sent by `PUT /v1/blocks/…` or part of earlier
    /// revisions): the same checks and adoption as ``commitContent(userId:target:content:now:)``, without a put.
    func commitStoredContent(userId: String, target: ContentTarget, content: StagedContent, now: Date) async throws -> FileRecord {
        let (file, _) = try await write(user: userId) { db, effects in
            try self.commit(db, &effects, userId: userId, target: target, content: content, now: now)
        }
        return file
    }

    // MARK: Blocks: put before commit, adopt in the commit, orphan when unreferenced, sweep after a grace period

    /// Puts staged blocks in the blob store, before the transaction that will adopt them. Their rows are written
    /// first, marked orphaned (or an orphaned row's age refreshed, and its place made the new copy's), so that a
    /// crash or a failed commit leaves nothing the sweep does not find; a live row stays as it is. A pack none of
    /// whose blocks a row names (the user had them all) is not put at all; the others get a `packs` row, which the
    /// sweep deletes with the pack once no block names it.
    ///
    /// A live block marked damaged (bit rot) is stored again the same way: its row takes the new copy's place at once
    /// (staying live), and loses its damaged mark once the copy is put — every file and revision that uses it is
    /// whole again.
    func putBlocks(_ blocks: [StagedBlock], userId: String, now: Date) async throws {
        let stored = blocks.filter { $0.data == nil }
        guard !stored.isEmpty else { return }
        let staged = Set(stored.compactMap(\.ref.pack?.pack))
        let (kept, replaced, damaged) = try await write(user: userId) { db, _ -> (Set<String>, [String], Set<String>) in
            let damaged = try Self.damaged(db, userId: userId, among: stored.map(\.ref.hash))
            // Orphaned blocks kept as their own files that now move into a pack: their files go once it is put.
            var replaced: [String] = []
            let packed = stored.filter { $0.ref.pack != nil }.map(\.ref.hash)
            for row in try Self.fetchAll(db, "SELECT hash FROM blocks WHERE pack IS NULL AND orphaned_at IS NOT NULL AND user_id = ? AND hash IN", [userId], packed) {
                replaced.append(try row.get("hash"))
            }
            for block in stored {
                let pack = block.ref.pack
                try db.perform(
                    """
                    INSERT INTO blocks (user_id, hash, size, created_at, orphaned_at, pack, pack_offset, pack_stored) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT (user_id, hash) DO UPDATE SET orphaned_at = CASE WHEN blocks.orphaned_at IS NULL THEN NULL ELSE excluded.orphaned_at END,
                        freed = 0, pack = excluded.pack, pack_offset = excluded.pack_offset, pack_stored = excluded.pack_stored
                    WHERE blocks.orphaned_at IS NOT NULL OR blocks.damaged_at IS NOT NULL
                    """, [userId, block.ref.hash, block.ref.size, now.millis, now.millis, pack?.pack, pack?.offset, pack?.stored])
            }
            guard !staged.isEmpty else { return ([], replaced, damaged) }
            let kept = Set(try Self.fetchAll(db, "SELECT DISTINCT pack FROM blocks WHERE user_id = ? AND pack IN", [userId], staged.sorted())
                .map { try $0.get("pack", as: String.self) })
            let sizes = Self.packSizes(stored)
            for id in kept.sorted() {
                try db.perform("INSERT INTO packs (user_id, id, created_at, size) VALUES (?, ?, ?, ?)", [userId, id, now.millis, sizes[id]])
            }
            return (kept, replaced, damaged)
        }
        let unused = stored.filter { $0.ref.pack.map { !kept.contains($0.pack) } ?? false }
        blobs.discard(unused)
        try await blobs.put(stored.filter { $0.ref.pack.map { kept.contains($0.pack) } ?? true }, user: userId)
        // Damaged blocks stored again: whole once their new copy is put (their rows name it).
        if !damaged.isEmpty {
            try await write(user: userId) { db, _ in
                for block in stored where damaged.contains(block.ref.hash) {
                    if let pack = block.ref.pack {
                        try db.perform(
                            "UPDATE blocks SET damaged_at = NULL, healed_at = ? WHERE damaged_at IS NOT NULL AND user_id = ? AND hash = ? AND pack = ? AND pack_offset = ?",
                            [now.millis, userId, block.ref.hash, pack.pack, pack.offset])
                    } else {
                        try db.perform(
                            "UPDATE blocks SET damaged_at = NULL, healed_at = ? WHERE damaged_at IS NOT NULL AND user_id = ? AND hash = ? AND pack IS NULL",
                            [now.millis, userId, block.ref.hash])
                    }
                }
            }
        }
        if !replaced.isEmpty {
            try await write(user: userId) { db, _ in
                let still = try Self.fetchAll(db, "SELECT hash FROM blocks WHERE pack IS NOT NULL AND user_id = ? AND hash IN", [userId], replaced)
                try self.blobs.deleteBlocking(try still.map { try $0.get("hash", as: String.self) }, user: userId)
            }
        }
    }

    /// Adoption makes the blocks a commit references live and charges the new ones to the user. A live row means
    /// the bytes are kept (inline in the row, or in the blob store). A stored block whose row is orphaned or missing
    /// is checked in the blob store, under the user's lock, where no sweep can run; an inline block brings its
    /// bytes and needs no blob store at all. In three steps, so that every check comes before any write:
    /// ``planAdoption(_:userId:blocks:)`` (which blocks are not live yet: what the quota is charged),
    /// ``verifyStored(_:_:userId:)`` (the blob store has them), then ``applyAdoption(_:_:userId:_:now:)``.
    ///
    /// A block a commit makes live: new to the user (no row) or orphaned (a row).
    struct Adoption: Sendable {
        var block: StagedBlock
        var hasRow: Bool
        /// A live block marked damaged whose bytes come with this commit, to be kept in its row again (small content:
        /// stored blocks are stored again by ``putBlocks(_:userId:now:)``); already counted in the quota.
        var repairs = false
    }

    func planAdoption(_ db: any SQLTransaction, _ effects: Effects, userId: String, blocks: [StagedBlock]) throws -> [Adoption] {
        var seen: Set<String> = []
        var adoptions: [Adoption] = []
        for block in blocks where seen.insert(block.ref.hash).inserted {
            switch effects.knownBlocks[block.ref.hash] {
            case .live?: continue
            case .orphaned?:
                adoptions.append(Adoption(block: block, hasRow: true))
                continue
            case .missing?:
                adoptions.append(Adoption(block: block, hasRow: false))
                continue
            case nil: break
            }
            let row = try db.fetchOne("SELECT orphaned_at, damaged_at FROM blocks WHERE user_id = ? AND hash = ?", [userId, block.ref.hash])
            if let row, try row.get("orphaned_at", as: Int64?.self) == nil {
                if block.data != nil, try row.get("damaged_at", as: Int64?.self) != nil { adoptions.append(Adoption(block: block, hasRow: true, repairs: true)) }
                continue
            }
            adoptions.append(Adoption(block: block, hasRow: row != nil))
        }
        return adoptions
    }

    func verifyStored(_ db: any SQLTransaction, _ adoptions: [Adoption], userId: String) throws {
        var packsSeen: Set<String> = []  // a pack holds many of them: looked for once
        for adoption in adoptions where adoption.block.data == nil {
            var block = adoption.block.ref
            if adoption.hasRow, let row = try db.fetchOne("SELECT pack, pack_offset, pack_stored FROM blocks WHERE user_id = ? AND hash = ?", [userId, block.hash]) {
                block.pack = try Self.packLocation(row)  // where the row says the bytes are
            }
            if let pack = block.pack?.pack, !packsSeen.insert(pack).inserted { continue }
            if try !blobs.containsBlocking(block, user: userId) {
                throw DriveError.unavailable("A block of this upload is missing from the blob store; nothing was changed, upload again.", retryAfter: 1)
            }
        }
    }

    func applyAdoption(_ db: any SQLTransaction, _ effects: inout Effects, userId: String, _ adoptions: [Adoption], now: Date) throws {
        for adoption in adoptions {
            let block = adoption.block
            if adoption.repairs {
                try db.perform(
                    "UPDATE blocks SET data = ?, damaged_at = NULL, healed_at = ? WHERE user_id = ? AND hash = ?", [block.data, now.millis, userId, block.ref.hash])
                continue
            }
            if !adoption.hasRow {
                let pack = block.data == nil ? block.ref.pack : nil
                try db.insert(
                    into: "blocks", ["user_id", "hash", "size", "created_at", "data", "pack", "pack_offset", "pack_stored"],
                    [userId, block.ref.hash, block.ref.size, now.millis, block.data, pack?.pack, pack?.offset, pack?.stored])
            } else {
                try db.perform(
                    "UPDATE blocks SET orphaned_at = NULL, freed = 0, data = CASE WHEN data IS NULL THEN ? ELSE data END WHERE user_id = ? AND hash = ?",
                    [block.data, userId, block.ref.hash])
            }
            effects.usedBytes[userId, default: 0] += block.ref.size
            if effects.knownBlocks[block.ref.hash] != nil { effects.knownBlocks[block.ref.hash] = .live }
        }
    }

    /// Among `hashes`, the blocks no revision or upload references any more stop counting against the quota and
    /// are marked orphaned and *freed*: the sweep deletes them (row, bytes kept inline, copy in the blob store) after
    /// the freed-space grace period (a minute on the local store), unless a commit adopts them again first — so space
    /// a user frees (a file purged, the trash emptied) is usable again within minutes, not a day later.
    func collectGarbage(_ db: any SQLTransaction, _ effects: inout Effects, userId: String, hashes: Set<String>, now: Date) throws {
        for hash in hashes {
            effects.knownBlocks[hash] = nil  // may be orphaned now: ask the database next time
            let used = try db.fetchOne(
                """
                SELECT 1 FROM revision_blocks WHERE user_id = ? AND hash = ?
                UNION ALL SELECT 1 FROM upload_blocks WHERE user_id = ? AND hash = ? LIMIT 1
                """, [userId, hash, userId, hash])
            guard used == nil,
                let size = try db.value("SELECT size FROM blocks WHERE user_id = ? AND hash = ? AND orphaned_at IS NULL", [userId, hash], as: Int64.self)
            else { continue }
            try db.perform("UPDATE blocks SET orphaned_at = ?, freed = 1 WHERE user_id = ? AND hash = ?", [now.millis, userId, hash])
            effects.usedBytes[userId, default: 0] -= size
            freedSince.withLockedValue { $0 = min($0 ?? now, now) }
        }
    }

    /// Deletes from the blob store the blocks orphaned before `before` (sent, never committed) and those freed before
    /// `freedBefore` (their last reference went), then their rows, then the packs made before `freedBefore` that no
    /// block names any more; one transaction per user, under its lock, so no commit can adopt a block while it goes.
    /// Returns how many blocks went.
    func sweepBlocks(orphanedBefore before: Date, freedBefore: Date, now: Date) async throws -> Int {
        // `freedBefore` is the later time: the index on orphaned_at finds both kinds.
        let latest = max(before, freedBefore).millis
        let due = "orphaned_at IS NOT NULL AND orphaned_at < ? AND (orphaned_at < ? OR freed = 1)"
        let unreferencedPacks = """
            SELECT id FROM packs WHERE user_id = ? AND created_at < ?
            AND NOT EXISTS (SELECT 1 FROM blocks WHERE blocks.user_id = packs.user_id AND blocks.pack = packs.id) LIMIT 1000
            """
        freedSince.withLockedValue { if let since = $0, since < freedBefore { $0 = nil } }
        let users = try await database.read { db in
            Set(try db.values("SELECT DISTINCT user_id FROM blocks WHERE \(due) LIMIT 1000", [latest, before.millis], as: String.self))
                .union(
                    try db.values(
                        """
                        SELECT DISTINCT user_id FROM packs WHERE created_at < ?
                        AND NOT EXISTS (SELECT 1 FROM blocks WHERE blocks.user_id = packs.user_id AND blocks.pack = packs.id) LIMIT 1000
                        """, [freedBefore.millis], as: String.self))
        }
        var swept = 0
        for userId in users.sorted() {
            let (count, touched) = try await write(user: userId) { db, _ -> (Int, Set<String>) in
                let rows = try db.fetchAll("SELECT hash, pack FROM blocks WHERE user_id = ? AND \(due) LIMIT 1000", [userId, latest, before.millis])
                let hashes = try rows.map { try $0.get("hash", as: String.self) }
                let touched = Set(try rows.compactMap { try $0.get("pack", as: String?.self) })
                let own = try rows.filter { try $0.get("pack", as: String?.self) == nil }.map { try $0.get("hash", as: String.self) }
                try self.blobs.deleteBlocking(own, user: userId)
                for hash in hashes {
                    try db.perform("DELETE FROM blocks WHERE user_id = ? AND hash = ? AND orphaned_at IS NOT NULL", [userId, hash])
                }
                let packs = try db.values(unreferencedPacks, [userId, freedBefore.millis], as: String.self)
                try self.blobs.deletePacksBlocking(packs, user: userId)
                for id in packs {
                    try db.perform("DELETE FROM packs WHERE user_id = ? AND id = ?", [userId, id])
                }
                return (hashes.count, touched.subtracting(packs))
            }
            swept += count
            for pack in touched.sorted() {
                do {
                    try await compactPack(pack, userId: userId, now: now)
                } catch {
                    // Compaction only saves space: a failure leaves the old pack as it was (and the new one, if put,
                    // to the sweep), and is tried again when more of its blocks die.
                }
            }
        }
        return swept
    }

    /// Each pack's size in bytes as the staged blocks written into it reach (the end of its last block).
    static func packSizes(_ blocks: [StagedBlock]) -> [String: Int64] {
        blocks.reduce(into: [:]) { sizes, block in
            if let pack = block.ref.pack { sizes[pack.pack] = max(sizes[pack.pack] ?? 0, pack.offset + pack.stored) }
        }
    }

    /// Compaction: a pack more than half of whose bytes belong to no live block any more (their rows were swept)
    /// has its live blocks copied into a new pack, their rows moved there, and the old pack left for the sweep —
    /// with its `created_at` set to now, so it is deleted only after the grace period: a download that read a
    /// block's old place just before the move still finds the bytes. Order, as for uploads: the new pack's row
    /// (naming no block: the sweep takes it if this stops half-way), then its bytes, then the move. A block whose
    /// row changed meanwhile (sent again into another pack) keeps its new place.
    func compactPack(_ id: String, userId: String, now: Date) async throws {
        let found = try await database.read { db -> (size: Int64?, live: [(ref: BlockRef, offset: Int64)])? in
            guard let pack = try db.fetchOne("SELECT size FROM packs WHERE user_id = ? AND id = ?", [userId, id]) else { return nil }
            let rows = try db.fetchAll(
                "SELECT hash, size, pack, pack_offset, pack_stored FROM blocks WHERE user_id = ? AND pack = ? ORDER BY pack_offset", [userId, id])
            return (
                try pack.get("size", as: Int64?.self),
                try rows.map { row in
                    let location = try Self.packLocation(row)
                    return (BlockRef(hash: try row.get("hash"), size: try row.get("size"), pack: location), location?.offset ?? 0)
                }
            )
        }
        guard let found, let size = found.size, !found.live.isEmpty else { return }
        let liveBytes = found.live.reduce(Int64(0)) { $0 + ($1.ref.pack?.stored ?? 0) }
        guard liveBytes * 2 < size else { return }
        // Read the live blocks (whole, expanded) and write them into a new pack.
        var writer = blobs.makePackWriter()
        let staged: [StagedBlock]
        do {
            for entry in found.live {
                var bytes: [UInt8] = []
                bytes.reserveCapacity(Int(entry.ref.size))
                try await blobs.read([entry.ref], user: userId, range: 0..<entry.ref.size) { piece in bytes += piece.readableBytesView }
                try await writer.add(bytes, hash: entry.ref.hash)
            }
            staged = try await writer.finish()
        } catch {
            await writer.abandon()
            throw error
        }
        let newPacks = Set(staged.compactMap(\.ref.pack?.pack))
        let sizes = Self.packSizes(staged)
        let stamp = now.millis
        try await write(user: userId) { db, _ in
            for pack in newPacks.sorted() {
                try db.perform("INSERT INTO packs (user_id, id, created_at, size) VALUES (?, ?, ?, ?)", [userId, pack, stamp, sizes[pack]])
            }
        }
        do {
            try await blobs.put(staged, user: userId)
        } catch {
            blobs.discard(staged)
            throw error
        }
        try await write(user: userId) { db, _ in
            for (block, old) in zip(staged, found.live) {
                guard let place = block.ref.pack else { continue }
                try db.perform(
                    "UPDATE blocks SET pack = ?, pack_offset = ?, pack_stored = ? WHERE user_id = ? AND hash = ? AND pack = ? AND pack_offset = ?",
                    [place.pack, place.offset, place.stored, userId, block.ref.hash, id, old.offset])
            }
            try db.perform("UPDATE packs SET created_at = ? WHERE user_id = ? AND id = ?", [stamp, userId, id])
        }
    }

    /// A block row's place in a pack (nil: the block is its own file or object, or kept in the row).
    static func packLocation(_ row: SQLRow) throws -> PackLocation? {
        guard let pack = try row.get("pack", as: String?.self) else { return nil }
        return PackLocation(pack: pack, offset: try row.get("pack_offset"), stored: try row.get("pack_stored"))
    }

    /// Adds a head revision made of `blocks` (already placed) and prunes revisions past retention.
    func commitRevision(
        _ db: any SQLTransaction, _ effects: inout Effects, file: FileRecord, blocks: [BlockRef], checksum: String, size: Int64, mimeType: String,
        now: Date, modifiedAt: Date? = nil
    ) throws -> FileRecord {
        let revisionId = "r" + randomToken()
        // The file's modification time: the client's when it gave one (WebDAV's X-OC-Mtime), else the commit's.
        let modified = modifiedAt ?? now
        let ordinal =
            effects.inserted.contains(file.id)
            ? 1 : (try db.value("SELECT MAX(ordinal) FROM revisions WHERE file_id = ?", [file.id], as: Int64.self) ?? 0) + 1
        try db.insert(
            into: "revisions", ["id", "file_id", "user_id", "mime_type", "size", "checksum", "created_at", "ordinal"],
            [revisionId, file.id, file.userId, mimeType, size, checksum, now.millis, ordinal])
        for (index, block) in blocks.enumerated() {
            try db.insert(into: "revision_blocks", ["revision_id", "idx", "user_id", "hash", "size"], [revisionId, index, file.userId, block.hash, block.size])
        }
        let isNew = effects.inserted.contains(file.id)
        Self.noteActivity(&effects, isNew ? (size > 0 ? .uploaded : .created) : .edited, file, at: now)
        if let unplaced = effects.unplaced.removeValue(forKey: file.id) {
            // A new file: its row, written once, is what inserting it (version 1) and then updating its head gave.
            try db.insert(
                into: "files",
                [
                    "id", "user_id", "parent_id", "name", "mime_type", "is_folder", "size", "checksum", "head_revision_id", "version", "created_at",
                    "modified_at", "request_id", "search_name",
                ],
                [
                    file.id, file.userId, file.parentId, file.name, mimeType, false, size, checksum, revisionId, file.version + 1,
                    file.createdAt.millis, modified.millis, unplaced.requestId, SearchText.fold(file.name),
                ])
        } else {
            try db.perform("""
                    UPDATE files SET head_revision_id = ?, size = ?, checksum = ?, mime_type = ?, version = version + 1, modified_at = ?
                    WHERE id = ?
                    """, [revisionId, size, checksum, mimeType, modified.millis, file.id])
        }
        try Self.recordChange(db, &effects, userId: file.userId, fileId: file.id, kind: .upsert, now: now)
        // Revisions are only ever removed, and ordinals only grow: a file whose newest ordinal is within
        // `keepLast` has nothing to prune.
        if ordinal > Int64(revisionRetention.keepLast) { try pruneRevisions(db, &effects, fileId: file.id, userId: file.userId, now: now) }
        // `file` was read (or made) in this transaction: the row now is it with the UPDATE above applied.
        var updated = file
        updated.headRevisionId = revisionId
        updated.size = size
        updated.checksum = checksum
        updated.mimeType = mimeType
        updated.version += 1
        updated.modifiedAt = Date(millis: modified.millis)
        return updated
    }

    func pruneRevisions(_ db: any SQLTransaction, _ effects: inout Effects, fileId: String, userId: String, now: Date) throws {
        let all = try db.fetchAll("SELECT id, created_at FROM revisions WHERE file_id = ? ORDER BY ordinal DESC", [fileId])
            .map { (id: try $0.get("id", as: String.self), date: Date(millis: try $0.get("created_at"))) }
        guard all.count > revisionRetention.keepLast else { return }
        let doomed = revisionRetention.prunable(all, now: now, date: \.date).map(\.id)
        guard !doomed.isEmpty else { return }
        var hashes: Set<String> = []
        for id in doomed {
            hashes.formUnion(try db.values("SELECT hash FROM revision_blocks WHERE revision_id = ?", [id], as: String.self))
            try db.perform("DELETE FROM revision_blocks WHERE revision_id = ?", [id])
            try db.perform("DELETE FROM thumbnails WHERE revision_id = ?", [id])
            try db.perform("DELETE FROM revisions WHERE id = ?", [id])
        }
        try collectGarbage(db, &effects, userId: userId, hashes: hashes, now: now)
    }

    /// Deletes a subtree for good: rows, revisions, unreferenced blocks; a `delete` change per item.
    @discardableResult
    func purge(_ db: any SQLTransaction, _ effects: inout Effects, userId: String, rootId: String, now: Date) throws -> Int {
        let ids = try Self.subtree(db, rootId: rootId)
        try Self.purgeShares(db, &effects, rootId: rootId, ids: ids, now: now)
        var hashes: Set<String> = []
        for id in ids {
            let revisionIds = try db.values("SELECT id FROM revisions WHERE file_id = ?", [id], as: String.self)
            for revisionId in revisionIds {
                hashes.formUnion(try db.values("SELECT hash FROM revision_blocks WHERE revision_id = ?", [revisionId], as: String.self))
                try db.perform("DELETE FROM revision_blocks WHERE revision_id = ?", [revisionId])
            }
            try db.perform("DELETE FROM thumbnails WHERE revision_id IN (SELECT id FROM revisions WHERE file_id = ?)", [id])
            try db.perform("DELETE FROM revisions WHERE file_id = ?", [id])
            try db.perform("DELETE FROM dav_properties WHERE file_id = ?", [id])
            try db.perform("DELETE FROM stars WHERE file_id = ?", [id])
            try db.perform("DELETE FROM files WHERE id = ?", [id])
            try Self.recordChange(db, &effects, userId: userId, fileId: id, kind: .delete, now: now)
        }
        try collectGarbage(db, &effects, userId: userId, hashes: hashes, now: now)
        return ids.count
    }
}
