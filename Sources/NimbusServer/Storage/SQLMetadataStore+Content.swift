import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NimbusAPI

/// Content and revisions: commits of staged content (one, or a batch in one transaction), the target a commit lands
/// in, the quota it is held to, revisions and their restore.
extension SQLMetadataStore {
    // MARK: Content and revisions

    func commitContent(userId: String, target: ContentTarget, content: StagedContent, now: Date) async throws -> FileRecord {
        do {
            try await putBlocks(content.blocks, userId: userId, now: now)
            let (file, _) = try await write(user: userId) { db, effects in
                try self.commit(db, &effects, userId: userId, target: target, content: content, now: now)
            }
            return file
        } catch {
            blobs.discard(content.blocks)
            throw error
        }
    }

    func commitBatch(userId: String, entries: [BatchEntry], now: Date) async throws -> [Result<(file: FileRecord, created: Bool), DriveError>] {
        let outcomes: [Result<(file: FileRecord, created: Bool), DriveError>]
        do {
            try await putBlocks(entries.flatMap(\.content.blocks), userId: userId, now: now)
            outcomes = try await write(user: userId) { base, effects in
                var outcomes: [Result<(file: FileRecord, created: Bool), DriveError>] = []
                outcomes.reserveCapacity(entries.count)
                // A few queries answer every entry's checks, and the entries' rows go out as multi-row inserts: a
                // batch of 1,000 small files is a handful of statements, not thousands of round trips.
                try self.prefetch(base, &effects, userId: userId, entries: entries)
                let db = CoalescingTransaction(base)
                defer { effects.knownChildren = [:]; effects.knownRequests = [:]; effects.knownBlocks = [:] }
                // Each entry is checked before anything of it is written, so one that breaks a rule leaves nothing
                // behind and needs no savepoint; a failure while writing fails the whole batch (and is retried).
                for entry in entries {
                    let plan: CommitPlan
                    do {
                        plan = try self.prepareCommit(db, &effects, userId: userId, target: entry.target, content: entry.content)
                    } catch let error as DriveError {
                        outcomes.append(.failure(error))
                        continue
                    }
                    outcomes.append(.success(try self.applyCommit(db, &effects, userId: userId, plan: plan, content: entry.content, now: now)))
                }
                try db.flush()
                return outcomes
            }
        } catch {
            for entry in entries { blobs.discard(entry.content.blocks) }
            throw error
        }
        return outcomes
    }

    /// Reads what a batch's checks will ask, a few statements for all entries: the live children under the names
    /// new files take, the files made under their request ids, and the state of every block they reference.
    func prefetch(_ db: any SQLTransaction, _ effects: inout Effects, userId: String, entries: [BatchEntry]) throws {
        var namesByFolder: [String: Set<String>] = [:]
        var requestIds: Set<String> = []
        var root: String?
        for entry in entries {
            guard case .new(let parentId, let name, _, let requestId) = entry.target else { continue }
            if parentId == nil, root == nil {
                root = try db.value("SELECT root_id FROM users WHERE id = ?", [userId], as: String.self)
            }
            guard let folder = parentId ?? root else { continue }
            namesByFolder[folder, default: []].insert(name)
            if let requestId { requestIds.insert(requestId) }
        }
        for (folder, names) in namesByFolder {
            let names = Array(names)
            for key in names { effects.knownChildren[ChildKey(parentId: folder, name: key)] = .absent }
            for row in try Self.fetchAll(
                db, "SELECT * FROM files WHERE user_id = ? AND parent_id = ? AND trash_root IS NULL AND name IN", [userId, folder], names)
            {
                let file = try Self.file(row)
                effects.knownChildren[ChildKey(parentId: folder, name: file.name)] = .present(file)
            }
        }
        let ids = Array(requestIds)
        for id in ids { effects.knownRequests[id] = .absent }
        for row in try Self.fetchAll(db, "SELECT * FROM files WHERE user_id = ? AND request_id IN", [userId], ids) {
            if let id = try row.get("request_id", as: String?.self) { effects.knownRequests[id] = .present(try Self.file(row)) }
        }
        let hashes = Array(Set(entries.flatMap { $0.content.blocks.map(\.ref.hash) }))
        for hash in hashes { effects.knownBlocks[hash] = .missing }
        for row in try Self.fetchAll(db, "SELECT hash, orphaned_at, damaged_at FROM blocks WHERE user_id = ? AND hash IN", [userId], hashes) {
            // (A damaged one is left to ask again: its content may come with the batch, to repair it.)
            guard try row.get("damaged_at", as: Int64?.self) == nil else {
                effects.knownBlocks[try row.get("hash")] = nil
                continue
            }
            effects.knownBlocks[try row.get("hash")] = try row.get("orphaned_at", as: Int64?.self) == nil ? .live : .orphaned
        }
    }

    /// `sql` (ending in `IN`) run for `keys` in chunks of 500, `(?, ?, …)` appended; every chunk's rows.
    static func fetchAll(_ db: any SQLTransaction, _ sql: String, _ arguments: [any SQLArgument], _ keys: [String]) throws -> [SQLRow] {
        var rows: [SQLRow] = []
        for start in stride(from: 0, to: keys.count, by: 500) {
            let part = Array(keys[start..<min(start + 500, keys.count)])
            rows += try db.fetchAll("\(sql) (\(sqlPlaceholders(part.count)))", arguments + part)
        }
        return rows
    }

    /// The file a creation with `requestId` made before (a retry), if any.
    static func fileMade(_ db: any SQLTransaction, by requestId: String?, userId: String) throws -> FileRecord? {
        guard let requestId else { return nil }
        return try db.fetchOne("SELECT * FROM files WHERE user_id = ? AND request_id = ?", [userId, requestId]).map(Self.file)
    }

    /// The file an upload under `requestId` already made with these bytes (a retry), or `nil` if none did; a
    /// file it made with other bytes means the id was reused: 409 `request_id_reused`.
    static func retried(
        _ db: any SQLTransaction, _ requestId: String?, userId: String, checksum: String, known: Known<FileRecord>? = nil
    ) throws -> FileRecord? {
        let earlier: FileRecord?
        switch known {
        case .absent?: earlier = nil
        case .present(let file)?: earlier = file
        case nil: earlier = try fileMade(db, by: requestId, userId: userId)
        }
        guard let earlier else { return nil }
        // The answer is the file as the request made it: the (first) revision with the request's bytes, even when
        // the file has newer ones since (another device's version). A client that lost the first answer must not
        // take someone else's version for the one it sent — with no checksum to compare (a provider that keeps
        // none), it could not tell, and would believe its own bytes are that version.
        guard
            let made = try db.fetchOne(
                "SELECT id, size FROM revisions WHERE file_id = ? AND checksum = ? ORDER BY ordinal LIMIT 1", [earlier.id, checksum])
        else {
            throw DriveError.requestIdReused("This requestId already made a file with different content (id \(earlier.id)); use a new requestId.", existingId: earlier.id)
        }
        var answer = earlier
        answer.headRevisionId = try made.get("id", as: String.self)
        answer.size = try made.get("size", as: Int64.self)
        answer.checksum = checksum
        return answer
    }

    /// One content commit inside a write transaction: a retried `requestId` returns its first file
    /// (`created == false`), else the target is resolved, quota checked, blocks adopted (put before, by
    /// ``putBlocks(_:userId:now:)``) and a head revision added.
    func commit(
        _ db: any SQLTransaction, _ effects: inout Effects, userId: String, target: ContentTarget, content: StagedContent, now: Date
    ) throws -> (file: FileRecord, created: Bool) {
        let plan = try prepareCommit(db, &effects, userId: userId, target: target, content: content)
        return try applyCommit(db, &effects, userId: userId, plan: plan, content: content, now: now)
    }

    /// What a content commit will write, decided by reading only.
    enum CommitPlan {
        /// A retry of an upload that landed: that file, nothing new.
        case retry(FileRecord)
        case commit(target: TargetPlan, adoptions: [Adoption])
    }

    /// Every check of a content commit (retry, target, `If-Match`, name clash, quota, blocks present), writing
    /// nothing: a ``DriveError`` from here leaves the transaction as it was.
    func prepareCommit(
        _ db: any SQLTransaction, _ effects: inout Effects, userId: String, target: ContentTarget, content: StagedContent
    ) throws -> CommitPlan {
        if case .new(_, _, _, let requestId) = target,
            let earlier = try Self.retried(
                db, requestId, userId: userId, checksum: content.checksum, known: requestId.flatMap { effects.knownRequests[$0] })
        {
            return .retry(earlier)
        }
        let placement = try Self.planTarget(db, &effects, userId: userId, target: target)
        let adoptions = try planAdoption(db, effects, userId: userId, blocks: content.blocks)
        try checkQuota(db, &effects, userId: userId, adding: adoptions)
        try verifyStored(db, adoptions, userId: userId)
        return .commit(target: placement, adoptions: adoptions)
    }

    /// Writes a prepared commit; it breaks no rule any more, so an error here is the database's.
    func applyCommit(
        _ db: any SQLTransaction, _ effects: inout Effects, userId: String, plan: CommitPlan, content: StagedContent, now: Date
    ) throws -> (file: FileRecord, created: Bool) {
        switch plan {
        case .retry(let earlier):
            return (earlier, false)
        case .commit(let target, let adoptions):
            let file = try Self.placeTarget(db, &effects, userId: userId, plan: target, mimeType: content.mimeType, now: now)
            try applyAdoption(db, &effects, userId: userId, adoptions, now: now)
            let head = try commitRevision(
                db, &effects, file: file, blocks: content.blocks.map(\.ref), checksum: content.checksum, size: content.size,
                mimeType: content.mimeType, now: now, modifiedAt: content.modifiedAt)
            if let parentId = head.parentId, case .present? = effects.knownChildren[ChildKey(parentId: parentId, name: head.name)] {
                effects.knownChildren[ChildKey(parentId: parentId, name: head.name)] = .present(head)
            }
            return (head, true)
        }
    }

    func revisions(userId: String, fileId: String, paging: Paging) async throws -> (revisions: [RevisionRecord], total: Int) {
        try await database.read { db in
            _ = try Self.file(db, id: fileId, userId: userId)
            let total = try db.value("SELECT COUNT(*) FROM revisions WHERE file_id = ?", [fileId], as: Int.self) ?? 0
            let rows = try db.fetchAll("SELECT * FROM revisions WHERE file_id = ? ORDER BY ordinal DESC LIMIT ? OFFSET ?", [fileId, paging.limit, paging.offset])
            return (try rows.map(Self.revision), total)
        }
    }

    func revision(userId: String, fileId: String, revisionId: String) async throws -> RevisionRecord {
        try await database.read { db in
            guard
                let row = try db.fetchOne("SELECT * FROM revisions WHERE id = ? AND file_id = ? AND user_id = ?", [revisionId, fileId, userId])
            else { throw DriveError.notFound("No such revision.") }
            return try Self.revision(row)
        }
    }

    func blocks(ofRevision revisionId: String) async throws -> [BlockRef] {
        try await database.read { db in try Self.blocks(db, ofRevision: revisionId) }
    }

    /// A revision's blocks in order, with where each one's bytes are.
    static func blocks(_ db: any SQLTransaction, ofRevision revisionId: String) throws -> [BlockRef] {
        try db.fetchAll("""
                SELECT r.hash, r.size, b.data, b.pack, b.pack_offset, b.pack_stored FROM revision_blocks r
                LEFT JOIN blocks b ON b.user_id = r.user_id AND b.hash = r.hash
                WHERE r.revision_id = ? ORDER BY r.idx
                """, [revisionId]
        ).map { BlockRef(hash: try $0.get("hash"), size: try $0.get("size"), inline: try $0.get("data", as: [UInt8]?.self), pack: try Self.packLocation($0)) }
    }

    func restore(userId: String, fileId: String, revisionId: String, now: Date) async throws -> FileRecord {
        try await write(user: userId) { db, effects in
            let file = try Self.file(db, id: fileId, userId: userId)
            guard !file.isTrashed else { throw DriveError.badRequest("'\(file.name)' is in the trash; restore it first.", code: .trashed) }
            guard
                let row = try db.fetchOne("SELECT * FROM revisions WHERE id = ? AND file_id = ? AND user_id = ?", [revisionId, fileId, userId])
            else { throw DriveError.notFound("No such revision.") }
            let revision = try Self.revision(row)
            let blocks = try db.fetchAll("SELECT hash, size FROM revision_blocks WHERE revision_id = ? ORDER BY idx", [revisionId]
            ).map { BlockRef(hash: try $0.get("hash"), size: try $0.get("size")) }
            Self.noteActivity(&effects, .restoredVersion, file, at: now)
            return try self.commitRevision(
                db, &effects, file: file, blocks: blocks, checksum: revision.checksum, size: revision.size, mimeType: revision.mimeType, now: now)
        }
    }

    /// The file a content commit lands in: the existing one (checked against `If-Match`: 409 if its head
    /// moved) or a new row in the parent folder, with a name clash settled by the policy.
    static func resolveTarget(_ db: any SQLTransaction, _ effects: inout Effects, userId: String, target: ContentTarget, mimeType: String, now: Date) throws -> FileRecord {
        let plan = try planTarget(db, &effects, userId: userId, target: target)
        return try placeTarget(db, &effects, userId: userId, plan: plan, mimeType: mimeType, now: now)
    }

    /// Where a content commit lands, decided without writing: an existing file, or a new one under this name.
    enum TargetPlan {
        case existing(FileRecord)
        case new(parentId: String, name: String, requestId: String?)
    }

    static func planTarget(_ db: any SQLTransaction, _ effects: inout Effects, userId: String, target: ContentTarget) throws -> TargetPlan {
        switch target {
        case .existing(let fileId, let ifMatch):
            let existing = try file(db, id: fileId, userId: userId)
            try checkWritable(existing, ifMatch: ifMatch)
            return .existing(existing)
        case .new(let parentId, let name, let policy, let requestId):
            let folderId = try parentId ?? db.value("SELECT root_id FROM users WHERE id = ?", [userId], as: String.self) ?? ""
            let parent = try effects.liveFolders[folderId] ?? liveFolder(db, id: folderId, userId: userId)
            effects.liveFolders[folderId] = parent
            let clash: FileRecord?
            switch effects.knownChildren[ChildKey(parentId: parent.id, name: name)] {
            case .absent?: clash = nil
            case .present(let file)?: clash = file
            case nil: clash = try liveChild(db, parentId: parent.id, name: name, userId: userId)
            }
            switch try NameClashRule.resolve(name, held: clash, policy: policy, isFolder: false) {
            case .free: return .new(parentId: parent.id, name: name, requestId: requestId)
            case .renamed: return .new(parentId: parent.id, name: try freeName(db, parentId: parent.id, name: name, userId: userId), requestId: requestId)
            case .replace(let existing): return .existing(existing)
            }
        }
    }

    static func placeTarget(_ db: any SQLTransaction, _ effects: inout Effects, userId: String, plan: TargetPlan, mimeType: String, now: Date) throws -> FileRecord {
        switch plan {
        case .existing(let file):
            return file
        case .new(let parentId, let name, let requestId):
            let file = newFile(&effects, userId: userId, parentId: parentId, name: name, mimeType: mimeType, requestId: requestId, now: now)
            touchFolder(&effects, parentId)
            effects.knownChildren[ChildKey(parentId: parentId, name: name)] = .present(file)
            if let requestId { effects.knownRequests[requestId] = .present(file) }
            return file
        }
    }

    /// A new file, not written yet: ``SQLMetadataStore/commitRevision(_:_:file:blocks:checksum:size:mimeType:now:)``
    /// writes its row together with its first revision.
    static func newFile(
        _ effects: inout Effects, userId: String, parentId: String, name: String, mimeType: String, requestId: String?, now: Date
    ) -> FileRecord {
        let id = "f" + randomToken()
        effects.inserted.insert(id)
        effects.unplaced[id] = Unplaced(requestId: requestId)
        return FileRecord(
            id: id, userId: userId, parentId: parentId, name: name, mimeType: mimeType, isFolder: false, size: 0, checksum: nil,
            headRevisionId: nil, version: 1, trashRoot: nil, trashedAt: nil, createdAt: Date(millis: now.millis),
            modifiedAt: Date(millis: now.millis))
    }

    /// Inserts a new live item and returns it as reading the row back would give (the schema's defaults for the
    /// rest: no content yet, version 1).
    static func insertFile(
        _ db: any SQLTransaction, _ effects: inout Effects, userId: String, parentId: String, name: String, mimeType: String, isFolder: Bool, requestId: String?, now: Date
    ) throws -> FileRecord {
        let id = "f" + randomToken()
        try db.perform("""
                INSERT INTO files (id, user_id, parent_id, name, mime_type, is_folder, created_at, modified_at, request_id, search_name)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """, [id, userId, parentId, name, mimeType, isFolder, now.millis, now.millis, requestId, SearchText.fold(name)])
        effects.inserted.insert(id)
        return FileRecord(
            id: id, userId: userId, parentId: parentId, name: name, mimeType: mimeType, isFolder: isFolder, size: 0, checksum: nil,
            headRevisionId: nil, version: 1, trashRoot: nil, trashedAt: nil, createdAt: Date(millis: now.millis),
            modifiedAt: Date(millis: now.millis))
    }

    /// A file can take a new revision: not a folder, not trashed, and its head is what `If-Match` names.
    static func checkWritable(_ existing: FileRecord, ifMatch: String?) throws {
        guard !existing.isFolder else { throw DriveError.badRequest("'\(existing.name)' is a folder; it has no content.", code: .isAFolder) }
        guard !existing.isTrashed else { throw DriveError.badRequest("'\(existing.name)' is in the trash; restore it first.", code: .trashed) }
        if let ifMatch, !ETag.matches(ifMatch, existing.etag) {
            throw DriveError.versionConflict(
                "'\(existing.name)' has a newer version (\(existing.etag)) than the one this upload was based on; nothing was changed.",
                current: existing.api)
        }
    }

    /// 507 if adopting these blocks would take the user over quota (blocks already live cost nothing).
    func checkQuota(_ db: any SQLTransaction, _ effects: inout Effects, userId: String, adding adoptions: [Adoption]) throws {
        let needed = adoptions.reduce(Int64(0)) { $0 + ($1.repairs ? 0 : $1.block.ref.size) }
        guard needed > 0 else { return }
        if effects.quota[userId] == nil {
            guard let row = try db.fetchOne("SELECT quota_limit, used_bytes FROM users WHERE id = ?", [userId]) else { return }
            effects.quota[userId] = Quota(limit: try row.get("quota_limit"), used: try row.get("used_bytes"))
        }
        guard let stored = effects.quota[userId] else { return }
        try QuotaRule.check(adding: needed, used: stored.used + (effects.usedBytes[userId] ?? 0), limit: stored.limit)
    }
}
