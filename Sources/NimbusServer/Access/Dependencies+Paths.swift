import Foundation
import NimbusAPI

/// Paths in a user's tree as they see it — their own folders, and the shares mounted in them — for the routes that
/// name items by path (WebDAV, Nextcloud's OCS share API and previews).
extension Dependencies {
    /// The live item at `names` below `start` (a folder of the principal's tree as they see it), or nil; a missing
    /// folder on the way is nil too.
    ///
    /// In the principal's own folders a name can be a share mounted there (``ShareStore/mountedChild(named:in:userId:now:)``):
    /// from there on the walk is in the share owner's tree, and every item found carries the grant that reaches it
    /// (``FileRecord/seenThrough``), which the access decision is then asked with. Walking decides nothing: the
    /// caller asks for the action it takes on each item it touches.
    func walk(_ names: [String], from start: FileRecord) async throws -> FileRecord? {
        var current = start
        for name in names {
            guard current.isFolder else { return nil }
            if var child = try await files.child(named: name, in: current.id, userId: current.userId) {
                child.seenThrough = current.seenThrough?.beneath
                current = child
            } else if current.seenThrough == nil,
                let mounted = try await shares.mountedChild(named: name, in: current.id, userId: current.userId, now: now),
                let reach = try await shares.reach(userId: current.userId, itemId: mounted.id, now: now), reach.isRoot
            {
                current = mounted.seen(through: reach)
            } else {
                return nil
            }
        }
        return current
    }

    /// The names leading to `item` from the principal's root, as they see it: a share's items under their mount's
    /// name and folder. Empty for the root; nil when the item is not in their tree.
    func names(of item: FileRecord, for principal: Principal) async throws -> [String]? {
        var names: [String] = []
        var current = item
        var reach = item.userId == principal.userId ? nil : try await shares.reach(userId: principal.userId, itemId: item.id, now: now)
        if item.userId != principal.userId, reach == nil { return nil }
        while names.count < 10_000 {
            if let through = reach, current.id == through.grant.itemId {
                // The share's root: on in the grantee's own folders, from the mount.
                names.insert(through.mount.name, at: 0)
                guard let parent = try await files.item(id: through.mount.parentId) else { return nil }
                current = parent
                reach = nil
                continue
            }
            guard let parentId = current.parentId else { return names }
            names.insert(current.name, at: 0)
            guard let parent = try await files.item(id: parentId) else { return nil }
            current = parent
        }
        return nil
    }
}
