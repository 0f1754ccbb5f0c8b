import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NimbusAPI

/// Files, folders, the trash and the change feed.
extension SQLMetadataStore {
    // MARK: Files and folders

    func item(id: String) async throws -> FileRecord? {
        try await database.read { db in try db.fetchOne("SELECT * FROM files WHERE id = ?", [id]).map(Self.file) }
    }

    func item(idPrefix: String) async throws -> FileRecord? {
        // A range on the primary key: ids are base-32 in [0-9a-v], all below "w" in any collation.
        let rows = try await database.read { db in
            try db.fetchAll("SELECT * FROM files WHERE id >= ? AND id < ? LIMIT 2", [idPrefix, idPrefix + "w"]).map(Self.file)
        }
        return rows.count == 1 ? rows[0] : nil
    }

    func contentSizes(ofFolders folderIds: [String]) async throws -> [String: Int64] {
        guard !folderIds.isEmpty else { return [:] }
        return try await database.read { db in
            var sizes: [String: Int64] = [:]
            for first in stride(from: 0, to: folderIds.count, by: 500) {
                let part = Array(folderIds[first..<min(first + 500, folderIds.count)])
                let rows = try db.fetchAll(
                    """
                    WITH RECURSIVE tree(top, id, is_folder, size) AS (
                        SELECT id, id, is_folder, size FROM files WHERE id IN (\(sqlPlaceholders(part.count)))
                        UNION ALL SELECT t.top, f.id, f.is_folder, f.size FROM files f JOIN tree t ON f.parent_id = t.id
                        WHERE t.is_folder = 1 AND f.trash_root IS NULL
                    ) SELECT top, CAST(SUM(size) AS BIGINT) AS total FROM tree WHERE is_folder = 0 GROUP BY top
                    """, part)
                for row in rows { sizes[try row.get("top")] = try row.get("total", as: Int64?.self) ?? 0 }
            }
            for id in folderIds where sizes[id] == nil { sizes[id] = 0 }
            return sizes
        }
    }

    func file(id: String, userId: String) async throws -> FileRecord {
        try await database.read { db in try Self.file(db, id: id, userId: userId) }
    }

    func children(of parentId: String, userId: String, paging: Paging, order: ListingOrder, mountsAt now: Date?) async throws -> (files: [FileRecord], total: Int) {
        try await database.read { db in
            let parent = try Self.file(db, id: parentId, userId: userId)
            guard parent.isFolder else { throw DriveError.badRequest("'\(parent.name)' is a file, not a folder.", code: .notAFolder) }
            // Inside a trashed folder, list what went to the trash with it; elsewhere, only live items.
            let trashFilter = parent.isTrashed ? "trash_root IS NOT NULL" : "trash_root IS NULL"
            if let now, !parent.isTrashed, try db.fetchOne("SELECT 1 FROM mounts WHERE user_id = ? AND parent_id = ?", [userId, parentId]) != nil {
                return try Self.childrenWithMounts(db, parentId: parentId, userId: userId, paging: paging, order: order, now: now)
            }
            try db.preferIndexOrder()
            let total = try db.value("SELECT COUNT(*) FROM files WHERE parent_id = ? AND user_id = ? AND \(trashFilter)", [parentId, userId], as: Int.self) ?? 0
            let rows = try db.fetchAll("""
                    SELECT * FROM files WHERE parent_id = ? AND user_id = ? AND \(trashFilter)
                    ORDER BY \(order.sql()) LIMIT ? OFFSET ?
                    """, [parentId, userId, paging.limit, paging.offset])
            return (try rows.map(Self.file), total)
        }
    }

    func child(named name: String, in parentId: String, userId: String) async throws -> FileRecord? {
        try await database.read { db in
            try db.fetchOne("SELECT * FROM files WHERE parent_id = ? AND user_id = ? AND name = ? AND trash_root IS NULL", [parentId, userId, name])
                .map(Self.file)
        }
    }

    func trashed(userId: String, paging: Paging) async throws -> (files: [FileRecord], total: Int) {
        try await database.read { db in
            let total = try db.value("SELECT COUNT(*) FROM files WHERE user_id = ? AND trash_root = id", [userId], as: Int.self) ?? 0
            let rows = try db.fetchAll("SELECT * FROM files WHERE user_id = ? AND trash_root = id ORDER BY trashed_at DESC, name ASC LIMIT ? OFFSET ?", [userId, paging.limit, paging.offset])
            return (try rows.map(Self.file), total)
        }
    }

    func create(
        userId: String, parentId: String, name: String, mimeType: String, policy: ConflictPolicy, requestId: String?,
        now: Date
    ) async throws -> (file: FileRecord, created: Bool) {
        try await write(user: userId) { db, effects in
            try self.create(db, &effects, userId: userId, parentId: parentId, name: name, mimeType: mimeType, policy: policy, requestId: requestId, now: now)
        }
    }

    /// A folder or an empty file in a transaction (see ``create(userId:parentId:name:mimeType:policy:requestId:now:)``).
    func create(
        _ db: any SQLTransaction, _ effects: inout Effects, userId: String, parentId: String, name: String, mimeType: String, policy: ConflictPolicy,
        requestId: String?, now: Date
    ) throws -> (file: FileRecord, created: Bool) {
        let isFolder = mimeType == folderMimeType
        if let earlier = try Self.fileMade(db, by: requestId, userId: userId) {
            // A retry answers with what the request made; a requestId that made something else (a file, for
            // a folder; content, for an empty file) was reused: 409, as uploads answer.
            guard earlier.isFolder == isFolder else {
                throw DriveError.requestIdReused(
                    "This requestId already made a \(earlier.isFolder ? "folder" : "file") (id \(earlier.id)); use a new requestId.",
                    existingId: earlier.id)
            }
            if !isFolder, let made = try Self.retried(db, requestId, userId: userId, checksum: emptyChecksum, known: .present(earlier)) {
                return (made, false)
            }
            return (earlier, false)
        }
        let parent = try Self.liveFolder(db, id: parentId, userId: userId)
        var finalName = name
        let existing = try Self.liveChild(db, parentId: parent.id, name: name, userId: userId)
        switch try NameClashRule.resolve(name, held: existing, policy: policy, isFolder: isFolder) {
        case .free: break
        case .renamed: finalName = try Self.freeName(db, parentId: parent.id, name: name, userId: userId)
        case .replace(let existing):
            let file = try self.commitRevision(
                db, &effects, file: existing, blocks: [], checksum: emptyChecksum, size: 0, mimeType: mimeType, now: now)
            return (file, true)
        }
        var file: FileRecord
        if !isFolder {
            file = Self.newFile(&effects, userId: userId, parentId: parent.id, name: finalName, mimeType: mimeType, requestId: requestId, now: now)
            file = try self.commitRevision(db, &effects, file: file, blocks: [], checksum: emptyChecksum, size: 0, mimeType: mimeType, now: now)
        } else {
            file = try Self.insertFile(
                db, &effects, userId: userId, parentId: parent.id, name: finalName, mimeType: mimeType, isFolder: true, requestId: requestId, now: now)
            Self.noteActivity(&effects, .created, file, at: now)
            try Self.recordChange(db, &effects, userId: userId, fileId: file.id, kind: .upsert, now: now)
        }
        Self.touchFolder(&effects, parent.id)
        return (file, true)
    }

    /// WebDAV's `COPY` in one transaction: `sourceId` (with what it holds, when `deep`) copied as `name` into `parentId`.
    /// The copy shares the source's blocks (nothing is read or stored again) and takes its dead properties. Onto a file
    /// (`replacing`, the source a file too) the copy is a new revision of that file, so its history stays; onto anything
    /// else the item there goes to the trash first (`deleter` held to the breaker). All of it happens, or none.
    func copy(
        userId: String, sourceId: String, parentId: String, name: String, replacing existingId: String?, deep: Bool, now: Date, by deleter: Deleter?
    ) async throws -> FileRecord {
        try await write(user: userId) { db, effects -> Guarded<FileRecord> in
            let source = try Self.file(db, id: sourceId, userId: userId)
            var over: FileRecord?
            if let existingId {
                let existing = try Self.file(db, id: existingId, userId: userId)
                if existing.isFolder || source.isFolder {
                    if case .paused(let message) = try self.trash(db, &effects, userId: userId, fileId: existing.id, now: now, by: deleter) {
                        return .paused(message)
                    }
                } else {
                    over = existing
                }
            }
            // One action for the history: the copy (not each item it made).
            let noted = effects.activity.count
            let copied = try self.copy(db, &effects, userId: userId, source: source, parentId: parentId, name: name, over: over, deep: deep, now: now)
            effects.activity.removeSubrange(noted...)
            effects.noted = Set(effects.activity.map(\.fileId))
            Self.noteActivity(&effects, .copied, copied, at: now)
            return .done(copied)
        }.get()
    }

    func copy(
        _ db: any SQLTransaction, _ effects: inout Effects, userId: String, source: FileRecord, parentId: String, name: String, over existing: FileRecord?,
        deep: Bool, now: Date
    ) throws -> FileRecord {
        let copied: FileRecord
        if source.isFolder {
            copied = try create(db, &effects, userId: userId, parentId: parentId, name: name, mimeType: folderMimeType, policy: .fail, requestId: nil, now: now).file
        } else if let revisionId = source.headRevisionId {
            guard let row = try db.fetchOne("SELECT * FROM revisions WHERE id = ? AND user_id = ?", [revisionId, userId]) else {
                throw DriveError.notFound("No such revision.")
            }
            let revision = try Self.revision(row)
            let blocks = try Self.blocks(db, ofRevision: revision.id)
            let content = StagedContent(
                blocks: blocks.map { StagedBlock(ref: BlockRef(hash: $0.hash, size: $0.size), path: "", data: $0.inline) },
                checksum: revision.checksum, size: revision.size, mimeType: revision.mimeType)
            let target: ContentTarget = existing.map { .existing(fileId: $0.id, ifMatch: nil) } ?? .new(parentId: parentId, name: name, policy: .fail)
            copied = try commit(db, &effects, userId: userId, target: target, content: content, now: now).file
        } else {
            copied = try create(db, &effects, userId: userId, parentId: parentId, name: name, mimeType: source.mimeType, policy: .fail, requestId: nil, now: now).file
        }
        try db.perform(
            """
            INSERT INTO dav_properties (user_id, file_id, namespace, name, value)
            SELECT user_id, ?, namespace, name, value FROM dav_properties WHERE file_id = ?
            ON CONFLICT (file_id, namespace, name) DO UPDATE SET value = excluded.value
            """, [copied.id, source.id])
        guard source.isFolder, deep else { return copied }
        let children = try db.fetchAll("SELECT * FROM files WHERE parent_id = ? AND user_id = ? AND trash_root IS NULL ORDER BY name", [source.id, userId])
        for child in try children.map(Self.file) {
            _ = try copy(db, &effects, userId: userId, source: child, parentId: copied.id, name: child.name, over: nil, deep: true, now: now)
        }
        return copied
    }

    func update(userId: String, fileId: String, name: String?, parentId: String?, ifMatch: String?, now: Date) async throws -> FileRecord {
        try await write(user: userId) { db, effects in
            try self.move(db, &effects, userId: userId, fileId: fileId, name: name, parentId: parentId, ifMatch: ifMatch, now: now)
        }
    }

    /// A rename or move onto a name another item holds, which goes to the trash in the same transaction (WebDAV's
    /// `MOVE` with `Overwrite: T`): both happen, or neither — the breaker pausing `deleter`, a clash with a third item.
    func move(
        userId: String, fileId: String, name: String, parentId: String, replacing existingId: String, now: Date, by deleter: Deleter?
    ) async throws -> FileRecord {
        try await write(user: userId) { db, effects -> Guarded<FileRecord> in
            if case .paused(let message) = try self.trash(db, &effects, userId: userId, fileId: existingId, now: now, by: deleter) {
                return .paused(message)
            }
            return .done(try self.move(db, &effects, userId: userId, fileId: fileId, name: name, parentId: parentId, ifMatch: nil, now: now))
        }.get()
    }

    /// Renames and/or moves an item (a folder with all it holds) in a transaction.
    func move(
        _ db: any SQLTransaction, _ effects: inout Effects, userId: String, fileId: String, name: String?, parentId: String?, ifMatch: String?, now: Date
    ) throws -> FileRecord {
        let file = try Self.file(db, id: fileId, userId: userId)
        if let ifMatch, !ETag.matches(ifMatch, file.etag) {
            throw DriveError.preconditionFailed("The file changed since you read it (its ETag is now \"\(file.etag)\"); fetch it and retry.", current: file.api)
        }
        guard let oldParent = file.parentId else { throw DriveError.badRequest("The root folder cannot be renamed or moved.") }
        guard !file.isTrashed else { throw DriveError.badRequest("'\(file.name)' is in the trash; restore it first.", code: .trashed) }
        let newName = name ?? file.name
        var newParent = oldParent
        if let parentId, parentId != oldParent {
            let parent = try Self.liveFolder(db, id: parentId, userId: userId)
            if file.isFolder {
                // Walk up from the destination: meeting the moved folder means a cycle.
                var cursor: String? = parent.id
                while let current = cursor {
                    if current == file.id {
                        throw DriveError.badRequest("A folder cannot be moved into itself or one of its subfolders.", code: .invalidMove)
                    }
                    cursor = try db.value("SELECT parent_id FROM files WHERE id = ?", [current], as: String.self)
                }
            }
            newParent = parent.id
        }
        if newName == file.name && newParent == oldParent { return file }
        let existing = try Self.liveChild(db, parentId: newParent, name: newName, userId: userId)
        _ = try NameClashRule.resolve(newName, held: existing, policy: .fail, isFolder: file.isFolder, itself: file.id)
        // A file keeps the time of its content's last change (a rename or move is not one: WebDAV clients,
        // rclone and Nextcloud expect a MOVE to keep a file's time); a folder's time is its last change.
        try db.perform(
            "UPDATE files SET name = ?, search_name = ?, parent_id = ?, version = version + 1, modified_at = ? WHERE id = ?",
            [newName, SearchText.fold(newName), newParent, file.isFolder ? now.millis : file.modifiedAt.millis, file.id])
        try Self.recordChange(
            db, &effects, userId: userId, fileId: file.id, kind: .upsert, now: now, formerParent: newParent == oldParent ? nil : oldParent)
        var moved = file
        moved.name = newName
        Self.noteActivity(&effects, newParent == oldParent ? .renamed : .moved, moved, at: now)
        Self.touchFolder(&effects, oldParent)
        if newParent != oldParent { Self.touchFolder(&effects, newParent) }
        return try Self.file(db, id: file.id, userId: userId)
    }

    func trash(userId: String, fileId: String, now: Date, by deleter: Deleter?) async throws -> FileRecord {
        try await write(user: userId) { db, effects -> Guarded<FileRecord> in
            try self.trash(db, &effects, userId: userId, fileId: fileId, now: now, by: deleter)
        }.get()
    }

    /// Moves an item and what is in it to the trash in a transaction, unless the breaker pauses `deleter`.
    func trash(_ db: any SQLTransaction, _ effects: inout Effects, userId: String, fileId: String, now: Date, by deleter: Deleter?) throws -> Guarded<FileRecord> {
        let file = try Self.file(db, id: fileId, userId: userId)
        guard let parentId = file.parentId else { throw DriveError.badRequest("The root folder cannot be deleted.") }
        guard !file.isTrashed else { return .done(file) }
        let ids = try Self.subtree(db, rootId: file.id).filter { id in
            try db.value("SELECT trash_root FROM files WHERE id = ?", [id], as: String.self) == nil
        }
        if let refusal = try Self.admitDeletion(db, userId: userId, deleter: deleter, items: ids.count, now: now) { return .paused(refusal) }
        Self.noteActivity(&effects, .trashed, file, at: now)
        for id in ids {
            try db.perform("UPDATE files SET trash_root = ?, trashed_at = ?, version = version + 1 WHERE id = ?", [file.id, now.millis, id])
            try Self.recordChange(db, &effects, userId: userId, fileId: id, kind: .upsert, now: now)
        }
        Self.touchFolder(&effects, parentId)
        return .done(try Self.file(db, id: file.id, userId: userId))
    }

    func untrash(userId: String, fileId: String, now: Date) async throws -> FileRecord {
        try await write(user: userId) { db, effects in
            try self.untrash(db, &effects, userId: userId, fileId: fileId, now: now).file
        }
    }

    /// Puts a trashed item and what was trashed with it back (where it was if that folder is live, otherwise into
    /// the root folder; under a free name if its own is taken meanwhile). An item not in the trash is left alone.
    func untrash(_ db: any SQLTransaction, _ effects: inout Effects, userId: String, fileId: String, now: Date) throws -> (file: FileRecord, items: Int) {
        let file = try Self.file(db, id: fileId, userId: userId)
        guard let trashRoot = file.trashRoot, let oldParent = file.parentId else { return (file, 0) }
        var parentId = oldParent
        let parent = try Self.existingFile(db, id: oldParent, userId: userId)
        if parent?.isTrashed ?? true {
            parentId = try db.value("SELECT root_id FROM users WHERE id = ?", [userId], as: String.self) ?? oldParent
        }
        // Restoring never fails on a name: a taken one gives way to `name (1)`.
        var name = file.name
        let clash = try Self.liveChild(db, parentId: parentId, name: name, userId: userId)
        if case .renamed = try NameClashRule.resolve(name, held: clash, policy: .rename, isFolder: file.isFolder) {
            name = try Self.freeName(db, parentId: parentId, name: name, userId: userId)
        }
        let ids = try Self.subtree(db, rootId: file.id).filter { id in
            try db.value("SELECT trash_root FROM files WHERE id = ?", [id], as: String.self) == trashRoot
        }
        var restored = file
        restored.name = name
        Self.noteActivity(&effects, .restored, restored, at: now)
        // Name and place first, while the row is still trashed and outside the live-name index.
        try db.perform("UPDATE files SET name = ?, search_name = ?, parent_id = ? WHERE id = ?", [name, SearchText.fold(name), parentId, file.id])
        for id in ids {
            try db.perform("UPDATE files SET trash_root = NULL, trashed_at = NULL, version = version + 1 WHERE id = ?", [id])
            try Self.recordChange(db, &effects, userId: userId, fileId: id, kind: .upsert, now: now)
        }
        Self.touchFolder(&effects, parentId)
        return (try Self.file(db, id: file.id, userId: userId), ids.count)
    }

    func deletePermanently(userId: String, fileId: String, now: Date, by deleter: Deleter?) async throws {
        try await write(user: userId) { db, effects -> Guarded<Void> in
            let file = try Self.file(db, id: fileId, userId: userId)
            guard let parentId = file.parentId else { throw DriveError.badRequest("The root folder cannot be deleted.") }
            if deleter != nil {
                let items = try Self.subtree(db, rootId: file.id).count
                if let refusal = try Self.admitDeletion(db, userId: userId, deleter: deleter, items: items, now: now) { return .paused(refusal) }
            }
            Self.noteActivity(&effects, .deleted, file, at: now)
            try self.purge(db, &effects, userId: userId, rootId: file.id, now: now)
            Self.touchFolder(&effects, parentId)
            return .done(())
        }.get()
    }

    // MARK: Change feed

    func latestSeq(userId: String) async throws -> Int64 {
        try await database.read { db in
            try db.value("SELECT last_seq FROM users WHERE id = ?", [userId], as: Int64.self) ?? 0
        }
    }

    func changes(userId: String, after seq: Int64, limit: Int) async throws -> (changes: [ChangeRecord], hasMore: Bool)? {
        try await database.read { db in
            guard let user = try db.fetchOne("SELECT last_seq, changes_floor FROM users WHERE id = ?", [userId]) else {
                return nil
            }
            let last: Int64 = try user.get("last_seq")
            let floor: Int64 = try user.get("changes_floor")
            guard seq >= floor, seq <= last else { return nil }
            // A grantee's row for a share's item (`mount_id`) shows the item; the share's root, under the mount's name
            // and in the mount's folder.
            let rows = try db.fetchAll("""
                    SELECT c.seq AS c_seq, c.user_seq AS c_user_seq, c.kind AS c_kind, c.file_id AS c_file_id, c.mount_id AS c_mount_id,
                        m.id AS m_id, m.parent_id AS m_parent_id, m.name AS m_name, f.*
                    FROM changes c LEFT JOIN files f ON f.id = c.file_id AND c.kind = 'upsert'
                    LEFT JOIN mounts m ON m.id = c.mount_id AND m.item_id = c.file_id
                    WHERE c.user_id = ? AND c.seq > ? ORDER BY c.seq LIMIT ?
                    """, [userId, seq, limit + 1])
            let changes = try rows.prefix(limit).map { row in
                let kind = Change.Kind(rawValue: try row.get("c_kind")) ?? .upsert
                let file: FileRecord? =
                    try row.get("id", as: String?.self) == nil ? nil : try row.get("m_id", as: String?.self) == nil ? try Self.file(row) : try Self.mountedFile(row)
                return ChangeRecord(
                    seq: try row.get("c_seq"), userSeq: try row.get("c_user_seq"), kind: file == nil ? .delete : kind, fileId: try row.get("c_file_id"),
                    file: file, mountId: try row.get("c_mount_id"))
            }
            return (Array(changes), rows.count > limit)
        }
    }

    // MARK: Maintenance

    func purgeTrash(trashedBefore before: Date, now: Date) async throws -> Int {
        let candidates = try await database.read { db in
            try db.fetchAll("SELECT id, user_id FROM files WHERE trash_root = id AND trashed_at < ? LIMIT 500", [before.millis])
                .map { (id: try $0.get("id", as: String.self), userId: try $0.get("user_id", as: String.self)) }
        }
        var purged = 0
        // One transaction per item, under its user's lock; the item is checked again there (it may have been
        // restored or purged since it was listed).
        for candidate in candidates {
            purged += try await write(user: candidate.userId) { db, effects in
                guard let row = try db.fetchOne("SELECT parent_id FROM files WHERE id = ? AND trash_root = id AND trashed_at < ?", [candidate.id, before.millis])
                else { return 0 }
                if let file = try Self.existingFile(db, id: candidate.id, userId: candidate.userId) { Self.noteActivity(&effects, .deleted, file, at: now) }
                let count = try self.purge(db, &effects, userId: candidate.userId, rootId: candidate.id, now: now)
                if let parentId = try row.get("parent_id", as: String?.self) { Self.touchFolder(&effects, parentId) }
                return count
            }
        }
        return purged
    }

    func compactChanges(before: Date) async throws -> Int {
        let users = try await database.read { db in
            try db.values("SELECT DISTINCT user_id FROM changes WHERE kind = 'delete' AND at < ?", [before.millis], as: String.self)
        }
        var removed = 0
        for userId in users {
            removed += try await write(user: userId) { db, _ in
                guard let top = try db.value("SELECT MAX(seq) FROM changes WHERE user_id = ? AND kind = 'delete' AND at < ?", [userId, before.millis], as: Int64.self)
                else { return 0 }
                let count = try db.execute("DELETE FROM changes WHERE user_id = ? AND kind = 'delete' AND seq <= ?", [userId, top])
                try db.perform("UPDATE users SET changes_floor = ? WHERE id = ? AND changes_floor < ?", [top, userId, top])
                return count
            }
        }
        return removed
    }
}
