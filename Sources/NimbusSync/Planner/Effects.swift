import Foundation

/// What carrying out an operation gave back, as far as the trees are concerned: the one input ``Trees/apply(_:_:)``
/// needs beyond the operation. (The merge base keeps no sizes: a synced node's content is its revision and checksum.)
enum OperationOutcome: Sendable, Equatable {
    /// Nothing beyond the operation itself (a move, a deletion, a record, a hold).
    case done
    /// The item as it now is there, made or sent by the operation (its new revision and checksum): a folder created
    /// there, a new file or version sent, an item moved there; for a download, the version fetched (its checksum as
    /// read).
    case there(RemoteNode)
    /// This side's version went there as a revision (`sent`), then the remote version became the head again, as
    /// `head` (``PlannedOperation/uploadThenRestore(_:base:)``).
    case restored(sent: RemoteNode, head: RemoteNode)
    /// This side's version of a conflict became the new local-only item `copy` (``PlannedOperation/fork(_:name:)``).
    case forked(copy: ItemID)
    /// The remote content's SHA-256, read (``PlannedOperation/learnChecksum(_:)``).
    case checksum(String)
}

extension Trees {
    /// The effect of `operation` having succeeded with `outcome`: the one definition of what each operation does to
    /// the three trees and the merge base. The executor writes it (``SyncEngine``'s steps record it in the store);
    /// the planner's property tests run plans through it.
    mutating func apply(_ operation: PlannedOperation, _ outcome: OperationOutcome = .done) {
        switch (operation, outcome) {
        case (.createRemoteFolder(let id), .there(let node)):
            remote[id] = node
            synced[id] = node
            local[id]?.creationInDoubt = false
        case (.upload(let id, let base), .there(let node)):
            remote[id] = node
            if base != nil, var merged = synced[id] {
                merged.revision = node.revision
                merged.checksum = node.checksum
                synced[id] = merged
            } else {
                synced[id] = node
            }
            local[id]?.creationInDoubt = false
        case (.uploadThenRestore(let id, _), .restored(let sent, let head)):
            // This side's version is in the history there; the merge base is it, so the remote head (the version
            // the user kept) comes here next.
            var merged = synced[id] ?? sent
            merged.revision = sent.revision
            merged.checksum = sent.checksum
            synced[id] = merged
            remote[id] = head
            local[id]?.hold = nil
        case (.restoreRevision(let id, _), .there(let node)):
            // The restored revision is the head there, and the content here and the merge base (here the content was
            // only known as "that revision").
            remote[id] = node
            synced[id]?.revision = node.revision
            synced[id]?.checksum = node.checksum
            local[id]?.content = .known(checksum: node.checksum ?? "", size: node.size)
            local[id]?.restoring = nil
        case (.moveRemote(let id, let parent, let name), .there(let node)):
            // The provider's answer is the item there now (a provider whose ids are paths gives a new one).
            remote[id] = node
            synced[id]?.parent = parent
            synced[id]?.name = name
        case (.moveRemote(let id, let parent, let name), _):
            remote[id]?.parent = parent
            remote[id]?.name = name
            synced[id]?.parent = parent
            synced[id]?.name = name
        case (.deleteRemote(let id), _):
            for gone in Self.subtree(id, of: remote.mapValues(\.parent)) {
                remote[gone] = nil
                synced[gone] = nil
            }
        case (.createLocalFolder(let id), _):
            guard let r = remote[id] else { return }
            local[id] = LocalNode(parent: r.parent, name: r.name, isFolder: true)
            synced[id] = r
        case (.download(let id), let outcome):
            // What came: the remote version the plan saw, as fetched (`.there`: its checksum as read) — not a newer one
            // a pull brought meanwhile, which comes next.
            guard var got = remote[id] else { return }
            if case .there(let fetched) = outcome { got = fetched }
            let content = LocalContent.known(checksum: got.checksum ?? "", size: got.size)
            if local[id] != nil {
                local[id]?.content = content
                local[id]?.placeholder = false
                synced[id]?.revision = got.revision
                synced[id]?.checksum = got.checksum
            } else {
                local[id] = LocalNode(parent: got.parent, name: got.name, isFolder: false, content: content)
                synced[id] = got
            }
            if remote[id]?.revision == got.revision, remote[id]?.checksum == nil { remote[id]?.checksum = got.checksum }
        case (.moveLocal(let id, let parent, let name), _):
            local[id]?.parent = parent
            local[id]?.name = name
            synced[id]?.parent = parent
            synced[id]?.name = name
        case (.deleteLocal(let id), _):
            for gone in Self.subtree(id, of: local.mapValues(\.parent)) {
                local[gone] = nil
                synced[gone] = nil
            }
        case (.placeholder(let id), _):
            guard let r = remote[id] else { return }
            if pins[id] == .requested { pins[id] = nil }  // freed by the cache limit: the request is used up
            let content = LocalContent.known(checksum: r.checksum ?? "", size: r.size)
            if local[id] != nil, synced[id] != nil {
                local[id]?.content = content
                local[id]?.placeholder = true
                synced[id]?.revision = r.revision
                synced[id]?.checksum = r.checksum
            } else {
                local[id] = LocalNode(parent: r.parent, name: r.name, isFolder: false, content: content, placeholder: true)
                synced[id] = r
            }
        case (.evict(let id), _):
            local[id] = nil
            synced[id] = nil
        case (.record(let id), _):
            switch (remote[id], local[id]) {
            case (nil, nil):
                synced[id] = nil
            case (.some(let r), .some(let l)):
                guard var s = synced[id] else {
                    synced[id] = r
                    return
                }
                if r.isFolder || l.content.checksum == r.checksum {
                    s.revision = r.revision
                    s.checksum = r.checksum
                }
                if r.isAt(l) {
                    s.parent = r.parent
                    s.name = r.name
                }
                s.access = r.access
                synced[id] = s
            default:
                break
            }
        case (.link(let id, let other), _):
            guard let r = remote[other] else { return }
            remote[other] = nil
            synced[other] = nil
            remote[id] = r
            synced[id] = r
            for (child, node) in remote where node.parent == other { remote[child]?.parent = id }
            for (child, node) in synced where node.parent == other { synced[child]?.parent = id }
            // (Its place here stays: the same place by the planner's comparison of names, maybe not byte for byte.)
            local[id]?.creationInDoubt = false
        case (.forget(let id), _):
            // Its remote identity goes with the merge base (it was deleted there; it is sent again as a new item).
            remote[id] = nil
            synced[id] = nil
            local[id]?.creationInDoubt = false
            local[id]?.hold = nil
        case (.fork(let id, let name), let outcome):
            guard let l = local[id] else { return }
            guard synced[id] != nil || remote[id] != nil, case .forked(let copy) = outcome else {
                // Only here: it just takes the other name.
                local[id]?.name = name
                return
            }
            var node = l
            node.name = name
            node.hold = nil
            node.creationInDoubt = false
            local[copy] = node
            for (child, other) in local where other.parent == id { local[child]?.parent = copy }
            local[id] = nil
            synced[id] = nil
        case (.hold(let id, let hold), _):
            local[id]?.hold = hold
        case (.release(let id), _):
            local[id]?.hold = nil
        case (.settleDoubt(let id), .there(let node)):
            // What the creation made: both sides held it once; here it is deleted since.
            doubts[id] = nil
            remote[id] = node
            synced[id] = node
        case (.settleDoubt(let id), _):
            doubts[id] = nil  // nothing made (or it is another item here now)
        case (.learnChecksum(let id), .checksum(let checksum)):
            remote[id]?.checksum = checksum
            if synced[id]?.revision == remote[id]?.revision { synced[id]?.checksum = checksum }
        default:
            // An outcome that does not fit its operation changes nothing (the executor records what it learned, and
            // the next plan decides).
            break
        }
    }

    /// `id` and everything under it, in a tree given as each item's parent (parents before children).
    static func subtree(_ id: ItemID, of parents: [ItemID: ItemID?]) -> [ItemID] {
        let children = children(of: parents)
        var result: [ItemID] = []
        var stack = [id]
        var seen: Set<ItemID> = []
        while let next = stack.popLast() {
            guard seen.insert(next).inserted else { continue }
            result.append(next)
            stack += (children[next] ?? []).sorted { $0.rawValue > $1.rawValue }
        }
        return result
    }

    /// Each item's children, in a tree given as each item's parent.
    static func children(of parents: [ItemID: ItemID?]) -> [ItemID: [ItemID]] {
        var children: [ItemID: [ItemID]] = [:]
        for (child, parent) in parents { if let parent { children[parent, default: []].append(child) } }
        return children
    }
}
