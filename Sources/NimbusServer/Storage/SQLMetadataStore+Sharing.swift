import Foundation
import NimbusAPI

/// Grants, mounts and what reaches a grantee's change feed. A grant gives one user a role on an item and everything
/// under it; accepted, it is mounted in the grantee's tree (a name in one of their folders). The shared items keep
/// their owner's ids and rows: a mount only gives them a place in the grantee's view, so nothing a grantee does to
/// the mount (rename, move, delete) reaches the owner's items.
extension SQLMetadataStore {
    func createGrant(ownerId: String, itemId: String, granteeId: String, role: ShareRole, expiresAt: Date?, now: Date) async throws -> GrantRecord {
        try await write(user: ownerId) { db, _ in
            let item = try Self.file(db, id: itemId, userId: ownerId)
            guard item.parentId != nil else {
                throw DriveError.badRequest("Your root folder cannot be shared; share the folders in it.", code: .cannotShareRoot)
            }
            guard !item.isTrashed else { throw DriveError.badRequest("'\(item.name)' is in the trash; restore it first.", code: .trashed) }
            // One way to each item per grantee: not on the item twice, nor on a folder above or below another grant.
            let ancestors = Set(try Self.ancestors(db, of: itemId))
            for other in try db.fetchAll("SELECT * FROM grants WHERE owner_id = ? AND grantee_id = ?", [ownerId, granteeId]).map(Self.grant) {
                let nested = try other.itemId == itemId || ancestors.contains(other.itemId) || Self.ancestors(db, of: other.itemId).contains(itemId)
                if nested {
                    let through = other.itemId == itemId ? "" : " through another grant on a folder above or below it"
                    throw DriveError.conflict("They already have access to '\(item.name)'\(through); change that grant instead.", code: .alreadyGranted)
                }
            }
            let grant = GrantRecord(
                id: "gr" + randomToken(), ownerId: ownerId, itemId: itemId, granteeId: granteeId, role: role, state: .pending, createdAt: now,
                expiresAt: expiresAt)
            try db.insert(
                into: "grants", ["id", "owner_id", "item_id", "grantee_id", "role", "state", "created_at", "expires_at"],
                [grant.id, ownerId, itemId, granteeId, role.rawValue, grant.state.rawValue, now.millis, expiresAt?.millis])
            return grant
        }
    }

    func grant(id: String) async throws -> GrantRecord? {
        try await database.read { db in try db.fetchOne("SELECT * FROM grants WHERE id = ?", [id]).map(Self.grant) }
    }

    func grants(ownerId: String, itemId: String) async throws -> [GrantRecord] {
        try await database.read { db in
            try db.fetchAll("SELECT * FROM grants WHERE owner_id = ? AND item_id = ? ORDER BY created_at, id", [ownerId, itemId]).map(Self.grant)
        }
    }

    func grants(ownerId: String) async throws -> [GrantRecord] {
        try await database.read { db in
            try db.fetchAll("SELECT * FROM grants WHERE owner_id = ? ORDER BY created_at DESC, id", [ownerId]).map(Self.grant)
        }
    }

    func updateGrant(id: String, role: ShareRole?, expiresAt: Date?, now: Date) async throws -> GrantRecord {
        guard let found = try await grant(id: id) else { throw DriveError.notFound("No such grant.") }
        return try await write(user: found.ownerId) { db, effects in
            guard var grant = try db.fetchOne("SELECT * FROM grants WHERE id = ?", [id]).map(Self.grant) else { throw DriveError.notFound("No such grant.") }
            let before = grant.role
            if let role { grant.role = role }
            if let expiresAt { grant.expiresAt = expiresAt }
            try db.perform("UPDATE grants SET role = ?, expires_at = ? WHERE id = ?", [grant.role.rawValue, grant.expiresAt?.millis, id])
            if grant.role != before, let mount = try Self.mount(db, grantId: id) {
                // What the grantee may do with every item changed: their feed carries the share again, so a sync
                // client learns it (a viewer's held edits go once they may; an editor's stop being sent).
                try db.lockUser(grant.granteeId)
                try Self.recordChange(db, &effects, userId: grant.granteeId, fileId: mount.itemId, kind: .upsert, now: now, mountId: mount.id)
                try Self.recordContents(db, &effects, of: mount.itemId, for: mount, now: now)
            }
            return grant
        }
    }

    func deleteGrant(id: String, now: Date) async throws {
        guard let found = try await grant(id: id) else { throw DriveError.notFound("No such grant.") }
        try await write(user: found.ownerId) { db, effects in
            try db.lockUser(found.granteeId)
            try Self.unmount(db, &effects, grantId: id, now: now)
            try db.perform("DELETE FROM grants WHERE id = ?", [id])
        }
    }

    func incomingGrants(granteeId: String, now: Date) async throws -> [GrantRecord] {
        try await database.read { db in
            try db.fetchAll(
                "SELECT * FROM grants WHERE grantee_id = ? AND (expires_at IS NULL OR expires_at > ?) ORDER BY created_at DESC, id", [granteeId, now.millis]
            ).map(Self.grant)
        }
    }

    func acceptGrant(id: String, granteeId: String, parentId: String, name: String?, now: Date) async throws -> (mount: MountRecord, file: FileRecord) {
        try await write(user: granteeId) { db, effects in
            guard let grant = try db.fetchOne("SELECT * FROM grants WHERE id = ? AND grantee_id = ?", [id, granteeId]).map(Self.grant),
                grant.isLive(at: now)
            else { throw DriveError.notFound("No such share.") }
            let item = try Self.file(db, id: grant.itemId, userId: grant.ownerId)
            if let mount = try Self.mount(db, grantId: id) {
                // Accepted already: the same answer again.
                return (mount, try Self.mountRoot(db, mount))
            }
            guard !item.isTrashed else { throw DriveError.gone("'\(item.name)' is in its owner's trash.") }
            let parent = try Self.liveFolder(db, id: parentId, userId: granteeId)
            let wanted = name ?? item.name
            let taken = try Self.liveChild(db, parentId: parent.id, name: wanted, userId: granteeId) != nil
            let mount = MountRecord(
                id: "mt" + randomToken(), userId: granteeId, grantId: id, itemId: item.id, parentId: parent.id,
                name: taken ? try Self.freeName(db, parentId: parent.id, name: wanted, userId: granteeId) : wanted, createdAt: now)
            try db.insert(
                into: "mounts", ["id", "user_id", "grant_id", "item_id", "parent_id", "name", "created_at"],
                [mount.id, granteeId, id, item.id, mount.parentId, mount.name, now.millis])
            try db.perform("UPDATE grants SET state = ? WHERE id = ?", [Grant.State.accepted.rawValue, id])
            // The grantee's feed gets the share as it is now (its root, then what is in it): a client that follows the
            // feed alone sees all of it, as if it had been made there.
            try Self.recordChange(db, &effects, userId: granteeId, fileId: item.id, kind: .upsert, now: now, mountId: mount.id)
            try Self.recordContents(db, &effects, of: item.id, for: mount, now: now)
            Self.touchFolder(&effects, parent.id)
            return (mount, try Self.mountRoot(db, mount))
        }
    }

    func declineGrant(id: String, granteeId: String, now: Date) async throws {
        try await write(user: granteeId) { db, effects in
            guard try db.fetchOne("SELECT 1 FROM grants WHERE id = ? AND grantee_id = ?", [id, granteeId]) != nil else {
                throw DriveError.notFound("No such share.")
            }
            try Self.unmount(db, &effects, grantId: id, now: now)
            try db.perform("UPDATE grants SET state = ? WHERE id = ?", [Grant.State.declined.rawValue, id])
        }
    }

    func mount(id: String, userId: String) async throws -> MountRecord? {
        try await database.read { db in try db.fetchOne("SELECT * FROM mounts WHERE id = ? AND user_id = ?", [id, userId]).map(Self.mount) }
    }

    func mountedChild(named name: String, in parentId: String, userId: String, now: Date) async throws -> FileRecord? {
        try await database.read { db in
            try db.fetchOne(
                """
                SELECT \(Self.mountColumns) FROM mounts m JOIN files f ON f.id = m.item_id JOIN grants g ON g.id = m.grant_id
                WHERE m.user_id = ? AND m.parent_id = ? AND m.name = ? AND f.trash_root IS NULL AND (g.expires_at IS NULL OR g.expires_at > ?)
                """, [userId, parentId, name, now.millis]
            ).map(Self.mountedFile)
        }
    }

    func updateMount(userId: String, mountId: String, name: String?, parentId: String?, now: Date) async throws -> FileRecord {
        try await write(user: userId) { db, effects in
            guard var mount = try db.fetchOne("SELECT * FROM mounts WHERE id = ? AND user_id = ?", [mountId, userId]).map(Self.mount) else {
                throw DriveError.notFound("No such share.")
            }
            let oldParent = mount.parentId
            if let parentId { mount.parentId = try Self.liveFolder(db, id: parentId, userId: userId).id }
            if let name { mount.name = name }
            if mount.parentId != oldParent || name != nil {
                if let holder = try Self.liveChild(db, parentId: mount.parentId, name: mount.name, userId: userId), holder.mountId != mountId {
                    throw DriveError.nameConflict(name: mount.name, existingId: holder.id)
                }
                try db.perform("UPDATE mounts SET name = ?, parent_id = ? WHERE id = ?", [mount.name, mount.parentId, mountId])
                try Self.recordChange(db, &effects, userId: userId, fileId: mount.itemId, kind: .upsert, now: now, mountId: mountId)
                Self.touchFolder(&effects, oldParent)
                Self.touchFolder(&effects, mount.parentId)
            }
            return try Self.mountRoot(db, mount)
        }
    }

    func reach(userId: String, itemId: String, now: Date) async throws -> Reach? {
        try await database.read { db in try Self.reach(db, userId: userId, itemId: itemId, now: now) }
    }

    func item(id: String, reachedBy userId: String, now: Date) async throws -> (item: FileRecord, reach: Reach?)? {
        try await database.read { db in
            guard let item = try db.fetchOne("SELECT * FROM files WHERE id = ?", [id]).map(Self.file) else { return nil }
            guard item.userId != userId else { return (item, nil) }
            return (item, try Self.reach(db, userId: userId, itemId: id, now: now))
        }
    }

    func sharedItems(ownerId: String, among ids: [String]) async throws -> Set<String> {
        guard !ids.isEmpty else { return [] }
        return try await database.read { db in
            var shared: Set<String> = []
            for first in stride(from: 0, to: ids.count, by: 500) {
                let part = Array(ids[first..<min(first + 500, ids.count)])
                shared.formUnion(
                    try db.values(
                        "SELECT DISTINCT item_id FROM grants WHERE owner_id = ? AND item_id IN (\(sqlPlaceholders(part.count)))", [ownerId] + part,
                        as: String.self))
            }
            return shared
        }
    }

    func expireGrants(now: Date) async throws -> Int {
        let expired = try await database.read { db in
            try db.fetchAll(
                "SELECT g.* FROM grants g JOIN mounts m ON m.grant_id = g.id WHERE g.expires_at IS NOT NULL AND g.expires_at <= ? LIMIT 500", [now.millis]
            ).map(Self.grant)
        }
        for grant in expired {
            try await write(user: grant.granteeId) { db, effects in try Self.unmount(db, &effects, grantId: grant.id, now: now) }
        }
        return expired.count
    }

    // MARK: Transaction helpers

    /// How `userId` reaches `itemId`, someone else's: the nearest accepted, live grant on it or a folder above it —
    /// one query (the item's ancestors, recursively, against the user's grants).
    static func reach(_ db: any SQLTransaction, userId: String, itemId: String, now: Date) throws -> Reach? {
        let row = try db.fetchOne(
            """
            WITH RECURSIVE up(id, parent_id, depth) AS (
                SELECT id, parent_id, 0 FROM files WHERE id = ?
                UNION ALL SELECT f.id, f.parent_id, up.depth + 1 FROM files f JOIN up ON f.id = up.parent_id WHERE up.depth < 10000
            )
            SELECT g.*, m.id AS m_id, m.parent_id AS m_parent_id, m.name AS m_name, m.created_at AS m_created_at
            FROM up JOIN grants g ON g.item_id = up.id JOIN mounts m ON m.grant_id = g.id
            WHERE g.grantee_id = ? AND g.state = 'accepted' AND (g.expires_at IS NULL OR g.expires_at > ?)
            ORDER BY up.depth LIMIT 1
            """, [itemId, userId, now.millis])
        // (Grants to one user never nest: there is one at most; the nearest, were there more.)
        guard let row else { return nil }
        let grant = try Self.grant(row)
        let mount = MountRecord(
            id: try row.get("m_id"), userId: userId, grantId: grant.id, itemId: grant.itemId, parentId: try row.get("m_parent_id"),
            name: try row.get("m_name"), createdAt: Date(millis: try row.get("m_created_at")))
        return Reach(grant: grant, mount: mount, isRoot: grant.itemId == itemId)
    }

    /// The item and the folders above it, nearest first (empty: no such item) — one recursive query, whatever the
    /// depth (every request on a shared item asks it: a first sync of a share asks it once per file).
    static func ancestors(_ db: any SQLTransaction, of itemId: String) throws -> [String] {
        try db.values(
            """
            WITH RECURSIVE up(id, parent_id, depth) AS (
                SELECT id, parent_id, 0 FROM files WHERE id = ?
                UNION ALL SELECT f.id, f.parent_id, up.depth + 1 FROM files f JOIN up ON f.id = up.parent_id WHERE up.depth < 10000
            ) SELECT id FROM up ORDER BY depth
            """, [itemId], as: String.self)
    }

    /// Takes a grant's mount out of its grantee's tree (their feed says the mount root went; the rows of the share's
    /// items it carried go with it): the owner's items are not touched.
    static func unmount(_ db: any SQLTransaction, _ effects: inout Effects, grantId: String, now: Date) throws {
        guard let mount = try mount(db, grantId: grantId) else { return }
        try db.perform("DELETE FROM mounts WHERE id = ?", [mount.id])
        try db.perform("DELETE FROM changes WHERE user_id = ? AND mount_id = ?", [mount.userId, mount.id])
        try recordChange(db, &effects, userId: mount.userId, fileId: mount.itemId, kind: .delete, now: now, mountId: mount.id)
        touchFolder(&effects, mount.parentId)
    }

    /// Before items go for good (`ids`, the subtree of `rootId`): grantees who see them lose them, grants on them
    /// end, and shares mounted in them are left (the grant stays, declined, to be accepted again elsewhere).
    static func purgeShares(_ db: any SQLTransaction, _ effects: inout Effects, rootId: String, ids: [String], now: Date) throws {
        for mount in try mountsReaching(db, itemId: rootId, now: now) {
            try db.lockUser(mount.userId)
            try recordChange(db, &effects, userId: mount.userId, fileId: rootId, kind: .delete, now: now, mountId: mount.id)
        }
        for first in stride(from: 0, to: ids.count, by: 500) {
            let part = Array(ids[first..<min(first + 500, ids.count)])
            for grant in try db.fetchAll("SELECT * FROM grants WHERE item_id IN (\(sqlPlaceholders(part.count)))", part).map(grant) {
                try db.lockUser(grant.granteeId)
                try unmount(db, &effects, grantId: grant.id, now: now)
                try db.perform("DELETE FROM grants WHERE id = ?", [grant.id])
            }
            try db.perform(
                "UPDATE links SET revoked_at = ? WHERE revoked_at IS NULL AND item_id IN (\(sqlPlaceholders(part.count)))", [now.millis] + part)
            for mount in try db.fetchAll("SELECT * FROM mounts WHERE parent_id IN (\(sqlPlaceholders(part.count)))", part).map(mount) {
                try unmount(db, &effects, grantId: mount.grantId, now: now)
                try db.perform("UPDATE grants SET state = ? WHERE id = ?", [Grant.State.declined.rawValue, mount.grantId])
            }
        }
    }

    static func mount(_ db: any SQLTransaction, grantId: String) throws -> MountRecord? {
        try db.fetchOne("SELECT * FROM mounts WHERE grant_id = ?", [grantId]).map(mount)
    }

    /// The mount's item as its grantee sees it.
    static func mountRoot(_ db: any SQLTransaction, _ mount: MountRecord) throws -> FileRecord {
        guard var item = try db.fetchOne("SELECT * FROM files WHERE id = ?", [mount.itemId]).map(file) else { throw DriveError.notFound("No such share.") }
        item.mountId = mount.id
        item.parentId = mount.parentId
        item.name = mount.name
        return item
    }

    /// A page of a folder holding mounts: its items and its mounts' items, folders first, then by name.
    static func childrenWithMounts(_ db: any SQLTransaction, parentId: String, userId: String, paging: Paging, order: ListingOrder, now: Date) throws -> (files: [FileRecord], total: Int) {
        let union = """
            SELECT f.*, NULL AS m_id, NULL AS m_parent_id, NULL AS m_name, f.name AS shown FROM files f
            WHERE f.parent_id = ? AND f.user_id = ? AND f.trash_root IS NULL
            UNION ALL
            SELECT \(mountColumns), m.name AS shown FROM mounts m JOIN files f ON f.id = m.item_id JOIN grants g ON g.id = m.grant_id
            WHERE m.parent_id = ? AND m.user_id = ? AND f.trash_root IS NULL AND (g.expires_at IS NULL OR g.expires_at > ?)
            """
        let arguments: [any SQLArgument] = [parentId, userId, parentId, userId, now.millis]
        let total = try db.value("SELECT COUNT(*) FROM (\(union)) listing", arguments, as: Int.self) ?? 0
        let rows = try db.fetchAll("SELECT * FROM (\(union)) listing ORDER BY \(order.sql(name: "shown")) LIMIT ? OFFSET ?", arguments + [paging.limit, paging.offset])
        return (try rows.map { row in try row.get("m_id", as: String?.self) == nil ? try file(row) : try mountedFile(row) }, total)
    }

    /// Change-feed rows for the grantees who see `fileId` through a mount (after its owner's own row): those it is
    /// under now, and — after a move (`formerParent`) — those it was under and left, who see it deleted.
    static func recordForGrantees(
        _ db: any SQLTransaction, _ effects: inout Effects, ownerId: String, fileId: String, kind: Change.Kind, now: Date, formerParent: String?
    ) throws {
        if effects.sharing[ownerId] == nil {
            effects.sharing[ownerId] = try db.fetchOne("SELECT 1 FROM grants WHERE owner_id = ? AND state = 'accepted'", [ownerId]) != nil
        }
        guard effects.sharing[ownerId] == true else { return }
        let reaching = try mountsReaching(db, itemId: fileId, now: now)
        for mount in reaching {
            try db.lockUser(mount.userId)
            try recordChange(db, &effects, userId: mount.userId, fileId: fileId, kind: kind, now: now, mountId: mount.id)
        }
        guard let formerParent else { return }
        let before = try mountsReaching(db, itemId: formerParent, now: now)
        let left = Set(reaching.map(\.id))
        for mount in before where !left.contains(mount.id) {
            try db.lockUser(mount.userId)
            try recordChange(db, &effects, userId: mount.userId, fileId: fileId, kind: .delete, now: now, mountId: mount.id)
        }
        // Moved into a share from outside it: its grantees had never seen what the item holds.
        let stayed = Set(before.map(\.id))
        for mount in reaching where !stayed.contains(mount.id) {
            try recordContents(db, &effects, of: fileId, for: mount, now: now)
        }
    }

    /// Feed rows, for a mount's grantee, of everything live beneath `folderId` (a share just mounted, or a folder just
    /// moved into one).
    static func recordContents(_ db: any SQLTransaction, _ effects: inout Effects, of folderId: String, for mount: MountRecord, now: Date) throws {
        let inside = try db.values(
            """
            WITH RECURSIVE tree(id) AS (
                SELECT id FROM files WHERE parent_id = ? AND trash_root IS NULL
                UNION ALL SELECT f.id FROM files f JOIN tree t ON f.parent_id = t.id WHERE f.trash_root IS NULL
            ) SELECT id FROM tree
            """, [folderId], as: String.self)
        for id in inside {
            try recordChange(db, &effects, userId: mount.userId, fileId: id, kind: .upsert, now: now, mountId: mount.id)
        }
    }

    /// The live mounts of grants on the item or a folder above it.
    static func mountsReaching(_ db: any SQLTransaction, itemId: String, now: Date) throws -> [MountRecord] {
        let path = try ancestors(db, of: itemId)
        guard !path.isEmpty else { return [] }
        return try db.fetchAll(
            """
            SELECT m.* FROM mounts m JOIN grants g ON g.id = m.grant_id
            WHERE g.state = 'accepted' AND (g.expires_at IS NULL OR g.expires_at > ?) AND m.item_id IN (\(sqlPlaceholders(path.count)))
            ORDER BY m.user_id, m.id
            """, [now.millis] + path
        ).map(mount)
    }

    // MARK: Row mapping

    static func grant(_ row: SQLRow) throws -> GrantRecord {
        GrantRecord(
            id: try row.get("id"), ownerId: try row.get("owner_id"), itemId: try row.get("item_id"), granteeId: try row.get("grantee_id"),
            role: ShareRole(rawValue: try row.get("role")) ?? .viewer, state: Grant.State(rawValue: try row.get("state")) ?? .pending,
            createdAt: Date(millis: try row.get("created_at")), expiresAt: (try row.get("expires_at", as: Int64?.self)).map(Date.init(millis:)))
    }

    static func mount(_ row: SQLRow) throws -> MountRecord {
        MountRecord(
            id: try row.get("id"), userId: try row.get("user_id"), grantId: try row.get("grant_id"), itemId: try row.get("item_id"),
            parentId: try row.get("parent_id"), name: try row.get("name"), createdAt: Date(millis: try row.get("created_at")))
    }
}
