import Foundation
import NimbusAPI

/// What the planner needs to know beyond the trees: how conflicts are settled and what conflict copies are called.
struct PlannerPolicy: Sendable, Equatable {
    var conflictStrategy: ConflictStrategy = .keepBoth
    /// A file deleted there but changed here is kept and sent again as a new item (folder sync), or held for the
    /// user as `unsynced` (the app library's policy).
    var keepsDeletedThere = true
    /// Conflict copies are `name (conflict from DEVICE DATE).ext`.
    var deviceName: String
    /// The date conflict copies made by this plan carry (the planner reads no clock).
    var date: Date
    /// The remote keeps older versions that can be restored: where it does not, a conflict the user settles by keeping
    /// the remote version keeps this side's as a conflict copy instead (nothing is lost).
    var remoteKeepsRevisions = true
    /// What of the remote folder this device holds, and in which form (a synced folder's selective sync).
    var selection = SyncSelection()
    /// Automatic files here are freed, least recently used first, while all files here take more bytes than this.
    var cacheLimit: Int64?
}

/// The one place that decides what happens to an item: a pure, synchronous function from the three trees to
/// the operations to run. No I/O, no clock, no randomness: the same trees give the same plan.
///
/// The rules that make losses impossible:
/// - a local item that differs from the merge base — or whose content is still being written — is never
///   overwritten, moved away or deleted by a change made there: its change is sent, or it becomes a conflict
///   (a conflict copy, last writer wins, or held for the user), or it waits until it settles;
/// - a deletion is only applied to what the other side has not changed since the merge base (a folder only if
///   everything in it is deleted too and unchanged), else the changed side's items come back;
/// - identity comes from ids: two items are taken for one only when both are new and hold the same content, or
///   a retried creation says so — never because "a content with this hash came back". Observation gives the ids:
///   there, the provider's; here, an item is found again by its path or, its path gone, by its inode (a move on
///   disk). The one place content carries an identity is observation's too, before the trees are planned from:
///   on a remote whose ids are paths (WebDAV, S3, a local folder) a move there is seen as one id gone and one new,
///   so a file missing from a full listing keeps its item when exactly one new file has its size and SHA-256 and
///   no other missing file does (the provider's id changed, the item did not); anything less certain stays a
///   deletion and a new file.
/// - what the user asked for is a fact of the local tree that the planner turns into operations: a conflict's
///   answer (the hold becomes it), a restored revision (``LocalNode/restoring``); an item deleted here whose
///   creation was in doubt is in ``Trees/doubts`` until its creation is asked for again.
///
/// Every operation of one plan can run beside every other; what has to wait for another (a file whose folder is
/// not there yet, a move into a name another item is leaving) comes in a later plan. The caller runs plans until
/// one is empty. Each item gets at most one operation per plan.
struct Planner {
    struct Place: Hashable {
        var parent: ItemID
        var name: String
    }

    let trees: Trees
    let policy: PlannerPolicy
    private(set) var remoteChildren: [ItemID: [ItemID]] = [:]
    private(set) var localChildren: [ItemID: [ItemID]] = [:]
    private var remoteAt: [Place: [ItemID]] = [:]
    private var localAt: [Place: [ItemID]] = [:]
    /// Where creations in doubt of items deleted here were asked for.
    private var doubtAt: Set<Place> = []
    /// Names this plan has given out (conflict copies, moves aside), per folder, so two never get the same one.
    private var given: [ItemID: Set<String>] = [:]
    private var remoteCovered: [ItemID: Bool] = [:]
    private var localCovered: [ItemID: Bool] = [:]
    private var emptyingLater: [ItemID: Bool] = [:]
    /// What ``Planner+Residency`` worked out once per plan (paths, exclusions, the cache's victims).
    var residencyMemo = ResidencyMemo()

    /// The operations that bring the trees closer together; empty when they agree (or all that differs waits for
    /// the user or for a file to settle).
    static func plan(_ trees: Trees, policy: PlannerPolicy) -> [PlannedOperation] {
        var planner = Planner(trees: trees, policy: policy)
        return planner.plan()
    }

    init(trees: Trees, policy: PlannerPolicy) {
        self.trees = trees
        self.policy = policy
        for (id, node) in trees.remote where id != Trees.root {
            guard let parent = node.parent else { continue }
            remoteChildren[parent, default: []].append(id)
            remoteAt[Place(parent: parent, name: node.name), default: []].append(id)
        }
        for (id, node) in trees.local where id != Trees.root {
            guard let parent = node.parent else { continue }
            localChildren[parent, default: []].append(id)
            localAt[Place(parent: parent, name: node.name), default: []].append(id)
        }
        for node in trees.doubts.values { if let parent = node.parent { doubtAt.insert(Place(parent: parent, name: node.name)) } }
        for (key, ids) in remoteAt where ids.count > 1 { remoteAt[key] = ids.sorted { $0.rawValue < $1.rawValue } }
        for (key, ids) in localAt where ids.count > 1 { localAt[key] = ids.sorted { $0.rawValue < $1.rawValue } }
    }

    mutating func plan() -> [PlannedOperation] {
        var ids = Set(trees.remote.keys)
        ids.formUnion(trees.synced.keys)
        ids.formUnion(trees.local.keys)
        ids.formUnion(trees.doubts.keys)
        ids.remove(Trees.root)
        var planned: [ItemID: PlannedOperation] = [:]
        var order: [PlannedOperation] = []
        var folderMoves: Set<Bool> = []  // a side that already moves a folder in this plan
        for id in ids.sorted(by: { $0.rawValue < $1.rawValue }) {
            guard let operation = planItem(id), planned[operation.item] == nil else { continue }
            // One folder move per side per plan: two moves that are each fine can together make a cycle (a folder
            // inside its own subfolder), whatever order they run in. The next plan moves the next one.
            switch operation {
            case .moveRemote(let moved, _, _) where trees.remote[moved]?.isFolder == true:
                guard folderMoves.insert(true).inserted else { continue }
            case .moveLocal(let moved, _, _) where trees.local[moved]?.isFolder == true:
                guard folderMoves.insert(false).inserted else { continue }
            default:
                break
            }
            planned[operation.item] = operation
            order.append(operation)
        }
        return order
    }

    // MARK: One item

    mutating func planItem(_ id: ItemID) -> PlannedOperation? {
        let r = trees.remote[id]
        let s = trees.synced[id]
        let l = trees.local[id]
        if let l, let hold = l.hold {
            if let resolution = hold.resolution { return resolve(id, resolution, r, s, l) }
            // Held for the user; an item held because it was deleted there is released when it comes back.
            if hold == .unsynced, r != nil { return .release(id) }
            // Held in a read-only share: released when its folder there takes new items again (a new role, or moved
            // out of the share here), and then planned as any new item.
            if hold == .readOnly, !addsRefused(into: l.parent) { return .release(id) }
            return nil
        }
        switch (r, s, l) {
        case (nil, nil, nil): return trees.doubts[id].flatMap { settleDoubt(id, $0) }
        case (nil, .some, nil): return .record(id)  // gone on both sides
        case (.some(let r), nil, nil): return newThere(id, r)
        case (nil, nil, .some(let l)): return newHere(id, l)
        case (.some(let r), .some(let s), nil): return deletedHere(id, r, s)
        case (nil, .some(let s), .some(let l)): return deletedThere(id, s, l)
        case (.some(let r), nil, .some(let l)): return unrecorded(id, r, l)
        case (.some(let r), .some(let s), .some(let l)): return changed(id, r, s, l)
        }
    }

    /// Only there: it comes here (unless its place here is taken by a new item of this side, which is the same
    /// thing made on both sides — linked — or a different one — moved aside).
    mutating func newThere(_ id: ItemID, _ r: RemoteNode) -> PlannedOperation? {
        guard let parent = r.parent, let folder = trees.local[parent], folder.isFolder else { return nil }
        return arriveHere(id, r, at: Place(parent: parent, name: r.name))
    }

    /// Brings a remote item to `place` here, where it is not yet: a new item there, or one deleted here that came
    /// back because it changed there.
    mutating func arriveHere(_ id: ItemID, _ r: RemoteNode, at place: Place) -> PlannedOperation? {
        if let occupant = localOccupant(place, except: id) {
            guard let other = trees.local[occupant], trees.synced[occupant] == nil, trees.remote[occupant] == nil else {
                // A synced item is there: it moves away or goes first, or takes another name (its own plan) — unless
                // it waits for this one (it moves into it): then it steps aside here.
                if case .cycle(let first) = chain(id, to: place, remote: false), first == occupant { return stepAside(occupant, remote: false) }
                return nil
            }
            // A new item of this side holds the name.
            // Kept here in a read-only share, it never goes there: it takes another name, and this item comes.
            if other.hold == .readOnly { return .fork(occupant, name: conflictName(for: other.name, in: place.parent)) }
            if other.creationInDoubt || other.hold != nil { return nil }  // its retried creation says whether it is this item
            if other.isFolder && r.isFolder && trees.synced[id] == nil { return .link(occupant, to: id) }
            if !other.isFolder, other.content.isUnknown { return nil }
            if !other.isFolder && !r.isFolder && trees.synced[id] == nil, let checksum = other.content.checksum, checksum == r.checksum {
                return .link(occupant, to: id)
            }
            if !other.isFolder && !r.isFolder && trees.synced[id] == nil, mustLearnChecksum(r, other) { return .learnChecksum(id) }
            // Two different things under one name: this side's moves aside (it is sent under its new name).
            return .fork(occupant, name: conflictName(for: other.name, in: place.parent))
        }
        if isExcluded(id) { return nil }  // not on this device
        if r.isFolder { return .createLocalFolder(id) }
        guard r.revision != nil else { return nil }
        return residency(id, r) == .placeholder ? .placeholder(id) : .download(id)
    }

    /// This side's content goes there as the new head: sent, based on revision `base` — or, when it is a revision
    /// there that the user restored (``LocalNode/restoring``), by restoring that revision (no bytes to send).
    func send(_ id: ItemID, _ l: LocalNode, base: String?) -> PlannedOperation {
        if let revision = l.restoring { return .restoreRevision(id, revision: revision) }
        return .upload(id, base: base)
    }

    /// Deleted here while its creation was in doubt: asked for again — after the folder it was asked in, when that
    /// folder's creation is in doubt too (a folder not there makes the answer "nothing made").
    func settleDoubt(_ id: ItemID, _ doubt: LocalNode) -> PlannedOperation? {
        if let parent = doubt.parent, trees.remote[parent] == nil, trees.doubts[parent] != nil { return nil }
        return .settleDoubt(id)
    }

    /// Only here: it goes there once its folder is there and its name is free there (a remote-only item under the
    /// same name is decided from its side) — and no creation in doubt of an item deleted here was asked for under
    /// it (that settles first: what it made is deleted, or it made nothing).
    mutating func newHere(_ id: ItemID, _ l: LocalNode) -> PlannedOperation? {
        if !l.isFolder, case .changing = l.content { return nil }
        if l.placeholder { return .deleteLocal(id) }  // stands for nothing there any more (never sent: it holds no content)
        guard let parent = l.parent, let folder = trees.remote[parent], folder.isFolder else { return nil }
        // Into a share the user may only view: kept here, never sent (it would be refused, forever).
        if folder.access.contains(.readOnly) { return .hold(id, .readOnly) }
        // A creation whose answer was lost is retried as it was (same request id) whatever holds the name now: the
        // answer tells whether the item there is this one.
        let place = Place(parent: parent, name: l.name)
        if doubtAt.contains(place) { return nil }
        if !l.creationInDoubt, let occupant = remoteOccupant(place, except: id) {
            // Whoever holds the name there leaves first (or, remote-only, decides from its side) — unless it waits
            // for this one (it moves into it): then it steps aside there.
            if trees.synced[occupant] != nil, case .cycle(let first) = chain(id, to: place, remote: true), first == occupant {
                return stepAside(occupant, remote: true)
            }
            return nil
        }
        return l.isFolder ? .createRemoteFolder(id) : .upload(id, base: nil)
    }

    /// Deleted here, still there.
    mutating func deletedHere(_ id: ItemID, _ r: RemoteNode, _ s: RemoteNode) -> PlannedOperation? {
        // Gone from an excluded path: it left the device (an eviction whose record a crash lost), never deleted there.
        if isExcluded(id) { return .evict(id) }
        if let parent = r.parent, removesThere(parent) { return nil }  // its folder's deletion takes it along
        if remoteChanged(r, s) {
            // Changed there since: that change wins over the deletion here; it comes back.
            guard let parent = r.parent, let folder = trees.local[parent], folder.isFolder else { return nil }
            return arriveHere(id, r, at: Place(parent: parent, name: r.name))
        }
        if r.isFolder, !isRemoteCovered(id) {
            // Something inside changed or is new there: the folder comes back here (the rest is deleted one by one),
            // unless all that stops it is items that were moved out of it here (their moves go first).
            let uncovered = (remoteChildren[id] ?? []).filter { !deletesThere($0) }
            if uncovered.allSatisfy({ leavesThere($0, id) }) { return nil }
            guard let parent = r.parent, let folder = trees.local[parent], folder.isFolder else { return nil }
            return arriveHere(id, r, at: Place(parent: parent, name: r.name))
        }
        if r.access.contains(.undeletable) {
            // In a share the user may only view: it cannot be deleted there, so it comes back here (after its folder).
            guard let parent = r.parent, let folder = trees.local[parent], folder.isFolder else { return nil }
            return arriveHere(id, r, at: Place(parent: parent, name: r.name))
        }
        return .deleteRemote(id)
    }

    /// Deleted there, still here.
    mutating func deletedThere(_ id: ItemID, _ s: RemoteNode, _ l: LocalNode) -> PlannedOperation? {
        if let parent = l.parent, deletesHere(parent) { return nil }  // its folder's deletion takes it along
        if l.placeholder { return .deleteLocal(id) }  // it stood for the file, moved here or not: nothing to keep
        if s.access.contains(.shareRoot), policy.keepsDeletedThere, keepsAfterShare(id, s, l) { return noLongerShared(id, l) }
        if localChanged(l, s) {
            if !l.isFolder, l.content.isUnknown { return nil }  // kept; decided once it settles
            return policy.keepsDeletedThere ? .forget(id) : .hold(id, .unsynced)
        }
        if l.isFolder, !isLocalCovered(id) {
            // Something inside is new or changed here: the folder is kept — unless all that stops it is items
            // moved out of it there, which follow (a changed one once its change is sent, a file being written once
            // it settles): it waits for them, and goes once empty, instead of coming back empty.
            if emptiesLater(id) { return nil }
            return policy.keepsDeletedThere ? .forget(id) : .hold(id, .unsynced)
        }
        return .deleteLocal(id)
    }

    /// Present on both sides under one id with no merge base (a state between two recorded steps): agreeing
    /// parts are recorded; content that differs is a conflict.
    mutating func unrecorded(_ id: ItemID, _ r: RemoteNode, _ l: LocalNode) -> PlannedOperation? {
        if r.isFolder != l.isFolder { return fork(id, l) }
        if l.placeholder { return .record(id) }  // it stands for this item there
        if !l.isFolder {
            if l.content.isUnknown { return nil }
            if mustLearnChecksum(r, l) { return .learnChecksum(id) }
            if l.content.checksum != r.checksum { return conflict(id, r, l) }
        }
        return .record(id)
    }

    /// Present everywhere: what changed where?
    mutating func changed(_ id: ItemID, _ r: RemoteNode, _ s: RemoteNode, _ l: LocalNode) -> PlannedOperation? {
        if r.isFolder != l.isFolder || r.isFolder != s.isFolder { return fork(id, l) }
        if let step = keepingHere(id, r, s, l) { return step }
        let movedThere = !r.isAt(s)
        let movedHere = !l.isAt(s)
        if !l.isFolder {
            if l.content.isUnknown {
                // Never overwritten, moved or deleted by a change made there while it is being written; its own
                // move may go there meanwhile.
                if movedHere && !movedThere && !r.access.contains(.fixedPlace) { return followHere(id, r, l) }
                return nil
            }
            let changedHere = !l.holdsContent(of: s)
            let changedThere = remoteContentChanged(r, s)
            if changedHere && changedThere {
                if mustLearnChecksum(r, l) { return .learnChecksum(id) }
                return l.content.checksum == r.checksum ? .record(id) : conflict(id, r, l)
            }
            // (A new revision there with the very bytes of the merge base is no change: the upload is based on it.)
            // In a share the user may only view, this side's version becomes a conflict copy beside it (kept here)
            // and the original comes back: nothing is sent to be refused.
            if changedHere { return r.access.contains(.readOnly) ? fork(id, l) : send(id, l, base: r.revision) }
            if changedThere { return .download(id) }
            // Same bytes, new version. (No checksum there is "unknown", not "different".)
            if r.revision != s.revision || (r.checksum != nil && r.checksum != s.checksum) { return .record(id) }
        }
        if movedThere && movedHere {
            if r.isAt(l) { return .record(id) }
            return followThere(id, r, l)  // moved on both sides: the remote move stands
        }
        if movedHere { return r.access.contains(.fixedPlace) ? undoMove(id, r, l) : followHere(id, r, l) }
        if movedThere { return followThere(id, r, l) }
        return nil
    }

    // MARK: Moves

    /// The item moved here: move it there too.
    mutating func followHere(_ id: ItemID, _ r: RemoteNode, _ l: LocalNode) -> PlannedOperation? {
        // Into a folder kept here in a read-only share (it never goes there): undone.
        if keptInReadOnlyShare(l.parent) { return undoMove(id, r, l) }
        guard let parent = l.parent, let folder = trees.remote[parent], folder.isFolder else { return nil }
        // Into a share the user may only view (or out of one into another tree: the owner alone moves items out),
        // the move cannot be made there: it is undone here.
        if parent != r.parent, folder.access.contains(.readOnly) || crossesShare(from: r.parent, to: parent) { return undoMove(id, r, l) }
        if parent == id || isRemoteAncestor(id, of: parent) {
            // Moved there in a way that makes this move a cycle (a folder into what became its own subfolder):
            // the remote places stand.
            return r.isAt(l) ? nil : followThere(id, r, l, yielding: true)
        }
        let target = Place(parent: parent, name: l.name)
        switch chain(id, to: target, remote: true) {
        case .free: return .moveRemote(id, parent: parent, name: l.name)
        case .wait: return nil
        case .stays:
            // Another item keeps that name there: this one takes another here (and then there) — once it is not
            // being written.
            if !l.isFolder, l.content.isUnknown { return nil }
            return .moveLocal(id, parent: parent, name: takenName(for: l.name, in: parent))
        case .cycle(let first):
            if first == id { return .moveRemote(id, parent: parent, name: takenName(for: l.name, in: parent)) }
            return remoteOccupant(target, except: id) == first ? stepAside(first, remote: true) : nil
        }
    }

    /// The item moved there: move it here too (its content here is as synced, or it would not be asked).
    /// `yielding`: its own move here was given up (it would make a cycle there), so it must leave its place here
    /// even when a synced item now holds its name there here — it takes another name (and then takes it there).
    mutating func followThere(_ id: ItemID, _ r: RemoteNode, _ l: LocalNode, yielding: Bool = false) -> PlannedOperation? {
        guard let parent = r.parent, let folder = trees.local[parent], folder.isFolder else { return nil }
        if parent == id || isLocalAncestor(id, of: parent) {
            // The other item's undo goes first — unless it cannot be undone here (its place there is in a folder
            // deleted here): then this move yields, and is undone there instead.
            return undoBlocked(from: parent, to: id) ? yieldThere(id, l) : nil
        }
        let target = Place(parent: parent, name: r.name)
        // An item kept here in a read-only share holds the name: it takes another (it never goes there).
        if let occupant = localOccupant(target, except: id), let other = trees.local[occupant], other.hold == .readOnly {
            return .fork(occupant, name: conflictName(for: other.name, in: parent))
        }
        switch chain(id, to: target, remote: false) {
        case .free: return .moveLocal(id, parent: parent, name: r.name)
        case .wait: return nil
        case .stays(let occupant):
            if yielding, trees.synced[occupant] != nil {
                if !l.isFolder, l.content.isUnknown { return nil }
                return .moveLocal(id, parent: parent, name: takenName(for: r.name, in: parent))
            }
            guard let other = trees.local[occupant], trees.synced[occupant] == nil, trees.remote[occupant] == nil else { return nil }
            if other.creationInDoubt || other.hold != nil { return nil }
            if !other.isFolder, other.content.isUnknown { return nil }
            return .fork(occupant, name: conflictName(for: other.name, in: parent))
        case .cycle(let first):
            if first == id { return .moveLocal(id, parent: parent, name: takenName(for: r.name, in: parent)) }
            return localOccupant(target, except: id) == first ? stepAside(first, remote: false) : nil
        }
    }

    enum Chain: Equatable {
        /// Nothing holds the name.
        case free
        /// The item holding it (or one further along) leaves it, later.
        case wait
        /// This item holds it and keeps it.
        case stays(ItemID)
        /// Items that each wait for the next one to leave; the first (smallest id) moves to a free name to break it.
        case cycle(first: ItemID)
    }

    /// Follows who holds `target` on one side, and where each holder is going.
    mutating func chain(_ id: ItemID, to target: Place, remote: Bool) -> Chain {
        var visited = [id]
        var place = target
        while true {
            let current = visited[visited.count - 1]
            guard let occupant = remote ? remoteOccupant(place, except: current) : localOccupant(place, except: current) else {
                return visited.count == 1 ? .free : .wait
            }
            switch remote ? destinationThere(occupant) : destinationHere(occupant) {
            case .stays: return visited.count == 1 ? .stays(occupant) : .wait
            case .goes: return .wait
            case .goesAfterChildren:
                // A folder that goes once its children have left — and one of those waits for it, or one of those
                // moves into something that waits for it.
                let waiting = visited.filter { remote ? isRemoteAncestor(occupant, of: $0) : isLocalAncestor(occupant, of: $0) }
                if !waiting.isEmpty { return .cycle(first: waiting.min { $0.rawValue < $1.rawValue } ?? id) }
                for child in (remote ? remoteChildren[occupant] : localChildren[occupant]) ?? [] {
                    guard case .moves(let next) = remote ? destinationThere(child) : destinationHere(child) else { continue }
                    let parentThere = remote ? trees.remote[next.parent] != nil : trees.local[next.parent] != nil
                    if !parentThere, dependsOn(next.parent, visited, remote: remote) { return .cycle(first: occupant) }
                }
                return .wait
            case .moves(let next):
                if let index = visited.firstIndex(of: occupant) {
                    return .cycle(first: visited[index...].min { $0.rawValue < $1.rawValue } ?? id)
                }
                // Moving into a folder that is not on that side yet — and that folder (or one it comes in, from the
                // other side) is one of those waiting.
                // Moving into its own subtree on that side: it cannot until the items above its target leave it —
                // and one of those is waiting for it.
                if next.parent == occupant || (remote ? isRemoteAncestor(occupant, of: next.parent) : isLocalAncestor(occupant, of: next.parent)) {
                    let below = visited.contains { remote ? isRemoteAncestor(occupant, of: $0) : isLocalAncestor(occupant, of: $0) }
                    return below ? .cycle(first: id) : .wait
                }
                let parentThere = remote ? trees.remote[next.parent] != nil : trees.local[next.parent] != nil
                if !parentThere, dependsOn(next.parent, visited, remote: remote) { return .cycle(first: occupant) }
                visited.append(occupant)
                place = next
            }
        }
    }

    /// Whether `folder`, missing on one side, can only come there after one of `items` (it is one of them, or comes
    /// inside one of them from the other side).
    func dependsOn(_ folder: ItemID, _ items: [ItemID], remote: Bool) -> Bool {
        items.contains { $0 == folder || (remote ? isLocalAncestor($0, of: folder) : isRemoteAncestor($0, of: folder)) }
    }

    /// Moves a synced item that holds a name others wait for to a free name beside it, on one side (to break a
    /// cycle of items waiting for each other). Nothing is done to a file being written or holding unsent changes.
    mutating func stepAside(_ id: ItemID, remote: Bool) -> PlannedOperation? {
        if remote {
            guard let r = trees.remote[id], trees.synced[id] != nil, let parent = r.parent, !r.access.contains(.fixedPlace) else { return nil }
            return .moveRemote(id, parent: parent, name: takenName(for: r.name, in: parent))
        }
        guard let l = trees.local[id], let s = trees.synced[id], let parent = l.parent, l.hold == nil else { return nil }
        if !l.isFolder, !l.holdsContent(of: s) || l.content.isUnknown { return nil }
        return .moveLocal(id, parent: parent, name: takenName(for: l.name, in: parent))
    }

    enum Destination {
        case stays
        case goes
        /// A folder deleted on the other side that goes once the items moving out of it have left.
        case goesAfterChildren
        case moves(Place)
    }

    /// Where an item that is there now is going there (as its own plan decides).
    mutating func destinationThere(_ id: ItemID) -> Destination {
        guard let r = trees.remote[id], let s = trees.synced[id] else { return .stays }
        guard let l = trees.local[id] else {
            if remoteChanged(r, s) { return .stays }  // comes back here
            if !r.isFolder || isRemoteCovered(id) { return .goes }
            let uncovered = (remoteChildren[id] ?? []).filter { !deletesThere($0) }
            return uncovered.allSatisfy { leavesThere($0, id) } ? .goesAfterChildren : .stays
        }
        if l.hold != nil || l.isAt(r) { return .stays }
        if !r.isAt(s) { return .stays }  // moved there: here follows
        if moveRefusedThere(r, l) { return .stays }  // undone here
        guard let parent = l.parent else { return .stays }
        return .moves(Place(parent: parent, name: l.name))
    }

    /// Where an item that is here now is going here (as its own plan decides).
    mutating func destinationHere(_ id: ItemID) -> Destination {
        guard let l = trees.local[id] else { return .stays }
        guard let s = trees.synced[id] else { return .stays }  // a new item here: moved aside by whoever needs its name
        if l.hold != nil { return .stays }
        if !l.isFolder, l.content.isUnknown { return .stays }
        guard let r = trees.remote[id] else {
            if localChanged(l, s) { return .stays }  // kept, sent again
            if !l.isFolder || isLocalCovered(id) { return .goes }
            return emptiesLater(id) ? .goesAfterChildren : .stays
        }
        if !r.isAt(l), moveRefusedThere(r, l), let parent = r.parent {
            // Its move here cannot be made there: it is undone (once its change, if any, is sent).
            if !l.isFolder, !l.holdsContent(of: s) { return .stays }
            return .moves(Place(parent: parent, name: r.name))
        }
        if r.isAt(l) || (!l.isAt(s) && r.isAt(s)) { return .stays }  // in place, or its own move goes there
        if !l.isFolder, !l.holdsContent(of: s) { return .stays }  // its change is sent first
        guard let parent = r.parent else { return .stays }
        return .moves(Place(parent: parent, name: r.name))
    }

    /// Whether `child` is on its way out of `folder` there (moved out of it here: that move goes there first).
    mutating func leavesThere(_ child: ItemID, _ folder: ItemID) -> Bool {
        if case .moves(let place) = destinationThere(child) { return place.parent != folder }
        return false
    }

    /// Whether `child` is on its way out of `folder` here (moved out of it there: that move comes here first).
    mutating func leavesHere(_ child: ItemID, _ folder: ItemID) -> Bool {
        if case .moves(let place) = destinationHere(child) { return place.parent != folder }
        return false
    }

    /// Whether all that keeps `folder` (deleted there) here is items on their way out of it: moved out of it here or
    /// there, or folders inside that are deleted there and wait for the same.
    mutating func emptiesLater(_ folder: ItemID) -> Bool {
        if let known = emptyingLater[folder] { return known }
        emptyingLater[folder] = false  // (a cycle in a damaged tree does not empty)
        let uncovered = (localChildren[folder] ?? []).filter { !deletesHere($0) }
        let result = uncovered.allSatisfy { child in
            if leavesHere(child, folder) || movedOutThere(child, folder) { return true }
            guard let l = trees.local[child], l.isFolder, l.hold == nil, trees.remote[child] == nil, let s = trees.synced[child], !localChanged(l, s)
            else { return false }
            return emptiesLater(child)
        }
        emptyingLater[folder] = result
        return result
    }

    /// Whether `child`, synced and here in `folder`, was moved out of it there: it follows here once nothing holds it
    /// (its change sent, or settled) — or, changed on both sides, its conflict copy stays in `folder` as a new item.
    func movedOutThere(_ child: ItemID, _ folder: ItemID) -> Bool {
        guard let l = trees.local[child], l.hold == nil, let s = trees.synced[child], let r = trees.remote[child], let parent = r.parent else {
            return false
        }
        return l.parent == folder && s.parent == folder && parent != folder
    }

    mutating func fork(_ id: ItemID, _ l: LocalNode) -> PlannedOperation? {
        guard let parent = l.parent else { return nil }
        return .fork(id, name: conflictName(for: l.name, in: parent))
    }

    /// `name (conflict from DEVICE DATE).ext`, numbered when that is taken here, there or by this plan.
    mutating func conflictName(for name: String, in parent: ItemID) -> String {
        freeName(FileName.conflictCopy(name, device: policy.deviceName, date: policy.date), in: parent)
    }

    /// `name (1).ext`, `name (2).ext`… — the first free one.
    mutating func takenName(for name: String, in parent: ItemID) -> String {
        var attempt = 1
        while true {
            let candidate = FileName.numbered(name, attempt)
            if isFree(candidate, in: parent) {
                given[parent, default: []].insert(candidate)
                return candidate
            }
            attempt += 1
        }
    }

    mutating func freeName(_ base: String, in parent: ItemID) -> String {
        if isFree(base, in: parent) {
            given[parent, default: []].insert(base)
            return base
        }
        return takenName(for: base, in: parent)
    }

    func isFree(_ name: String, in parent: ItemID) -> Bool {
        let place = Place(parent: parent, name: name)
        return remoteAt[place] == nil && localAt[place] == nil && !(given[parent]?.contains(name) ?? false)
    }

    // MARK: What changed

    /// Moved, renamed or new content there since the merge base.
    func remoteChanged(_ r: RemoteNode, _ s: RemoteNode) -> Bool {
        !r.isAt(s) || r.isFolder != s.isFolder || (!r.isFolder && remoteContentChanged(r, s))
    }

    /// A remote file without a known SHA-256 that may hold the very bytes of the local file (same size): they can
    /// only be told apart by reading it once. (Different sizes are different contents: no read.)
    func mustLearnChecksum(_ r: RemoteNode, _ l: LocalNode) -> Bool {
        guard !r.isFolder, r.checksum == nil, r.revision != nil, case .known(_, let size) = l.content else { return false }
        return size == r.size
    }

    /// New content there: a new revision, unless it is known to hold the same bytes.
    func remoteContentChanged(_ r: RemoteNode, _ s: RemoteNode) -> Bool {
        guard r.revision != s.revision else { return false }
        if let checksum = r.checksum, checksum == s.checksum { return false }
        return true
    }

    /// Moved, renamed, new content or being written here since the merge base.
    func localChanged(_ l: LocalNode, _ s: RemoteNode) -> Bool {
        if !l.isAt(s) || l.isFolder != s.isFolder { return true }
        if l.isFolder { return false }
        if l.content.isUnknown { return true }
        return !l.holdsContent(of: s)
    }

    /// This item is deleted there by a deletion planned for it or a folder above it: deleted here, unchanged
    /// there, and (a folder) everything in it likewise.
    mutating func deletesThere(_ id: ItemID) -> Bool {
        guard id != Trees.root, trees.local[id] == nil, let r = trees.remote[id], let s = trees.synced[id], !remoteChanged(r, s) else { return false }
        if isExcluded(id) { return false }  // not this device's to delete: it only left the device
        return !r.isFolder || isRemoteCovered(id)
    }

    mutating func isRemoteCovered(_ folder: ItemID) -> Bool {
        if let known = remoteCovered[folder] { return known }
        remoteCovered[folder] = false  // (a cycle in a damaged tree is not covered)
        let covered = (remoteChildren[folder] ?? []).allSatisfy { deletesThere($0) }
        remoteCovered[folder] = covered
        return covered
    }

    /// This item is deleted here by a deletion planned for it or a folder above it: deleted there, unchanged here,
    /// and (a folder) everything in it likewise.
    mutating func deletesHere(_ id: ItemID) -> Bool {
        guard id != Trees.root, trees.remote[id] == nil, let l = trees.local[id], l.hold == nil, let s = trees.synced[id], !localChanged(l, s) else {
            return false
        }
        return !l.isFolder || isLocalCovered(id)
    }

    mutating func isLocalCovered(_ folder: ItemID) -> Bool {
        if let known = localCovered[folder] { return known }
        localCovered[folder] = false
        let covered = (localChildren[folder] ?? []).allSatisfy { deletesHere($0) }
        localCovered[folder] = covered
        return covered
    }

    /// Whether, on the path here from `start` up to `id`, an item moved here cannot go back to its place there
    /// (that folder is not here any more), so the cycle it makes with `id`'s move there cannot be undone on its side.
    func undoBlocked(from start: ItemID, to id: ItemID) -> Bool {
        var current: ItemID? = start
        var steps = 0
        while let item = current, item != id, steps < 10_000 {
            if let here = trees.local[item], let there = trees.remote[item], let place = there.parent, here.parent != place,
                trees.local[place]?.isFolder != true
            {
                return true
            }
            current = trees.local[item]?.parent
            steps += 1
        }
        return false
    }

    /// A move made there that would put the item inside what it holds here, when that cannot be undone here:
    /// the item goes back there to where it is here.
    mutating func yieldThere(_ id: ItemID, _ l: LocalNode) -> PlannedOperation? {
        guard let parent = l.parent, trees.remote[parent]?.isFolder == true, parent != id, !isRemoteAncestor(id, of: parent) else { return nil }
        if trees.remote[id]?.access.contains(.fixedPlace) == true || trees.remote[parent]?.access.contains(.readOnly) == true { return nil }
        switch chain(id, to: Place(parent: parent, name: l.name), remote: true) {
        case .free: return .moveRemote(id, parent: parent, name: l.name)
        case .stays: return .moveRemote(id, parent: parent, name: takenName(for: l.name, in: parent))
        case .wait, .cycle: return nil
        }
    }

    // MARK: Places

    func remoteOccupant(_ place: Place, except id: ItemID) -> ItemID? { remoteAt[place]?.first { $0 != id } }
    func localOccupant(_ place: Place, except id: ItemID) -> ItemID? { localAt[place]?.first { $0 != id } }

    /// Whether `ancestor` is above `id` there.
    func isRemoteAncestor(_ ancestor: ItemID, of id: ItemID) -> Bool {
        var current = trees.remote[id]?.parent
        var steps = 0
        while let step = current, steps < 10_000 {
            if step == ancestor { return true }
            current = trees.remote[step]?.parent
            steps += 1
        }
        return false
    }

    /// Whether `ancestor` is above `id` here.
    func isLocalAncestor(_ ancestor: ItemID, of id: ItemID) -> Bool {
        var current = trees.local[id]?.parent
        var steps = 0
        while let step = current, steps < 10_000 {
            if step == ancestor { return true }
            current = trees.local[step]?.parent
            steps += 1
        }
        return false
    }
}
