import Foundation

/// The block API's reads and its commit (`/v1/blocks/…`); blocks are put and adopted as for every other upload
/// (see "Blocks: put before commit, adopt in the commit" in ``SQLMetadataStore``).
extension SQLMetadataStore {
    /// The user's blocks among `hashes` that the store has bytes for: live, or orphaned and not swept yet (a
    /// commit adopts those again). Each with its size, and its bytes when the database keeps them.
    func storedBlocks(userId: String, hashes: [String]) async throws -> [String: (block: BlockRef, live: Bool)] {
        let unique = Array(Set(hashes))
        return try await database.read { db in
            var found: [String: (block: BlockRef, live: Bool)] = [:]
            for row in try Self.fetchAll(
                db, "SELECT hash, size, data, orphaned_at, pack, pack_offset, pack_stored FROM blocks WHERE user_id = ? AND hash IN", [userId], unique)
            {
                let block = BlockRef(
                    hash: try row.get("hash"), size: try row.get("size"), inline: try row.get("data", as: [UInt8]?.self), pack: try Self.packLocation(row))
                found[block.hash] = (block, try row.get("orphaned_at", as: Int64?.self) == nil)
            }
            return found
        }
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
}
