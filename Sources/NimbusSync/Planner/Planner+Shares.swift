import Foundation
import NimbusAPI

/// The planner's rules for shares someone else gave the user (``RemoteAccess``): what the remote refuses is never
/// planned. In a share the user may only view, a change here becomes a conflict copy kept on this device
/// (``Hold/readOnly``), a deletion or move here is undone, nothing new is sent into it; moves across a share's edge
/// are undone (only the owner makes them); leaving the share deletes its root there only; a share that ends keeps
/// what this side changed under `<name> (no longer shared)`.
extension Planner {
    /// Whether adding into `folder` there is refused (a folder of a share the user may only view).
    func addsRefused(into folder: ItemID?) -> Bool {
        guard let folder, let node = trees.remote[folder] else { return false }
        return node.access.contains(.readOnly)
    }

    /// A move here that cannot be made there (an item of a share the user may only view, or across a share's edge):
    /// undone here — once its place here is back, where its folder was deleted here (that folder comes back: this
    /// item stays in it there).
    mutating func undoMove(_ id: ItemID, _ r: RemoteNode, _ l: LocalNode) -> PlannedOperation? {
        if !l.isFolder, l.content.isUnknown { return nil }  // once it is written
        return followThere(id, r, l)
    }

    /// Whether the item's place here (moved here) cannot be taken there: an item of a share the user may only view,
    /// a folder there that takes no new items, or across a share's edge. Such a move is undone here (``undoMove``).
    func moveRefusedThere(_ r: RemoteNode, _ l: LocalNode) -> Bool {
        guard let parent = l.parent, !l.isAt(r) else { return false }
        if r.access.contains(.fixedPlace) || keptInReadOnlyShare(parent) { return true }
        guard parent != r.parent else { return false }
        if let folder = trees.remote[parent], folder.access.contains(.readOnly) { return true }
        return crossesShare(from: r.parent, to: parent)
    }

    /// Whether `folder` here is, or is inside, an item held in a read-only share (``Hold/readOnly``).
    func keptInReadOnlyShare(_ folder: ItemID?) -> Bool {
        var current = folder
        var steps = 0
        while let item = current, let node = trees.local[item], steps < 10_000 {
            if node.hold == .readOnly { return true }
            current = node.parent
            steps += 1
        }
        return false
    }

    /// The share (its root there) an item there is in, nil for the user's own items.
    func shareRoot(of id: ItemID?) -> ItemID? {
        var current = id
        var steps = 0
        while let item = current, let node = trees.remote[item], steps < 10_000 {
            if node.access.contains(.shareRoot) { return item }
            if !node.access.contains(.shared) { return nil }
            current = node.parent
            steps += 1
        }
        return nil
    }

    /// Whether moving an item from folder `from` to folder `to` there would take it across a share's edge (out of
    /// a share, into one, or from one to another): only the owner does that.
    func crossesShare(from: ItemID?, to: ItemID?) -> Bool { shareRoot(of: from) != shareRoot(of: to) }

    /// Deleted there by a deletion planned for it or a folder above it that is allowed there (``deletesThere(_:)``
    /// for an item the user may delete, or inside one being removed — a share left takes everything in it along).
    mutating func removesThere(_ id: ItemID) -> Bool {
        guard deletesThere(id), let r = trees.remote[id] else { return false }
        if !r.access.contains(.undeletable) { return true }
        return r.parent.map { removesThere($0) } ?? false
    }

    /// A share that ended (its root gone there) holding what this side changed: that stays, under `<name> (no
    /// longer shared)` so it is not taken for the share, and is then kept as any item deleted there (sent as the
    /// user's own). Not once renamed (a local move takes the merge base's name along).
    mutating func keepsAfterShare(_ id: ItemID, _ s: RemoteNode, _ l: LocalNode) -> Bool {
        if l.name.contains("(no longer shared)") { return false }
        if !l.isFolder { return localChanged(l, s) && !l.content.isUnknown }
        return !isLocalCovered(id)
    }

    /// The rename of ``keepsAfterShare(_:_:_:)``, once what is unchanged in it has left (their deletions run first:
    /// they read the old path).
    mutating func noLongerShared(_ id: ItemID, _ l: LocalNode) -> PlannedOperation? {
        guard let parent = l.parent else { return nil }
        if l.isFolder, Trees.subtree(id, of: trees.local.mapValues(\.parent)).dropFirst().contains(where: { deletesHere($0) }) { return nil }
        return .moveLocal(id, parent: parent, name: freeName(FileName.noLongerShared(l.name, isFolder: l.isFolder), in: parent))
    }
}
