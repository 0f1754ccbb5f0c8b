import Foundation

/// What a synced folder keeps here, and in which form: selective sync (excluded paths), pin states and cloud-only
/// files (placeholders), and the cache limit. The rules (each checked end to end by `ResidencyTests`; the randomized
/// planner tests check that every operation can run as planned):
/// - a selection or pin change never deletes anything there: what leaves the device leaves with its merge base
///   (``PlannedOperation/evict(_:)``), and an item gone from an excluded path is evicted, never deleted there;
/// - only what is synced and unmodified leaves the device or becomes a placeholder: a change here is sent first (an
///   excluded file that changed here goes there, then leaves); a file being written, held or changed stays;
/// - a deletion here covers only what this device synced: an excluded item is never taken along by the deletion of
///   the folder it is in (that folder then stays there, holding it);
/// - a placeholder holds the merge base's content and nothing else: it is never sent, a change there rewrites it
///   without a download, its deletion here deletes the file there (to the trash), and deleted there it goes;
/// - switching a file's form transfers only what the new form needs: freeing sends and fetches nothing.
extension Planner {
    struct ResidencyMemo {
        var remotePaths: [ItemID: String] = [:]
        var localPaths: [ItemID: String] = [:]
        var excluded: [ItemID: Bool] = [:]
        /// Files freed to bring the cache under its limit (nil until worked out).
        var victims: Set<ItemID>?
    }

    /// The residency rules for an item present on both sides and in the merge base: a step, `.some(nil)` to wait, or
    /// nil when they ask for nothing (the usual rules decide).
    mutating func keepingHere(_ id: ItemID, _ r: RemoteNode, _ s: RemoteNode, _ l: LocalNode) -> PlannedOperation?? {
        if isExcluded(id) {
            // Its change is sent first (the usual rules) — but a move here that does not go there (moved there too:
            // the remote's move stands; or refused there) leaves the device with the item: the content is as synced.
            let contentSynced = l.isFolder || (!l.content.isUnknown && l.holdsContent(of: s))
            guard l.hold == nil, !localChanged(l, s) || (contentSynced && (!r.isAt(s) || moveRefusedThere(r, l))) else { return nil }
            // A folder leaves once nothing is in it here (until then the usual rules keep it in step: an item kept
            // here holds it here for good), and nothing that is in it there is here elsewhere (that leaves the device,
            // or moves in, first): it never goes while something moves into it.
            if l.isFolder {
                if !(localChildren[id] ?? []).isEmpty { return nil }
                // (Not one above it here: that one moves in only once this one is gone — a cycle otherwise.)
                if (remoteChildren[id] ?? []).contains(where: { trees.local[$0] != nil && !isLocalAncestor($0, of: id) }) { return .some(nil) }
            }
            return .evict(id)
        }
        guard !l.isFolder, l.hold == nil, !l.content.isUnknown else { return nil }
        let wanted = residency(id, r)
        if l.placeholder {
            if wanted == .content, r.revision != nil { return .download(id) }
            if remoteContentChanged(r, s) { return .placeholder(id) }
            return nil
        }
        if wanted == .placeholder, !localChanged(l, s), r.revision != nil {
            return .placeholder(id)
        }
        return nil
    }

    /// Whether the item is outside the pair's selection, by its place there (or here, when it is not there). A folder
    /// that leads to an included path is not.
    mutating func isExcluded(_ id: ItemID) -> Bool {
        guard !policy.selection.rules.isEmpty, id != Trees.root else { return false }
        if let known = residencyMemo.excluded[id] { return known }
        var excluded = false
        let path = trees.remote[id] != nil ? remotePath(id) : localPath(id)
        if let path {
            excluded = policy.selection.excludes(path, isFolder: trees.remote[id]?.isFolder ?? trees.local[id]?.isFolder ?? false)
        }
        residencyMemo.excluded[id] = excluded
        return excluded
    }

    /// What the file should be here: the item's own pin, else the nearest folder's above it there, else the
    /// selection's kind and size rules, else the cache limit's choice, else as it is.
    mutating func residency(_ id: ItemID, _ r: RemoteNode) -> Residency {
        var wanted = Residency.either
        switch trees.pins[id] {
        case .pinned: wanted = .content
        case .requested:
            // Asked for: fetched, then kept as an automatic file (whatever the folder says) until the cache frees it.
            wanted = trees.local[id]?.placeholder != false ? .content : (policy.cacheLimit != nil && cacheVictims().contains(id) ? .placeholder : .either)
        case .cloudOnly: wanted = .placeholder
        case .inherited, nil:
            switch folderPin(above: r) {
            case .pinned: wanted = .content
            case .cloudOnly: wanted = .placeholder
            default: break
            }
            if wanted == .either {
                if policy.selection.isCloudOnly(name: r.name, size: r.size) {
                    wanted = .placeholder
                } else if let limit = policy.cacheLimit {
                    if trees.local[id] == nil, r.size > limit {
                        wanted = .placeholder  // bigger than the whole cache: it would only be freed again
                    } else if cacheVictims().contains(id) {
                        wanted = .placeholder
                    }
                }
            }
        }
        // A placeholder needs its name: another item here holding `NAME.nimbus` keeps the file here instead.
        if wanted == .placeholder, let parent = trees.local[id]?.parent ?? r.parent, trees.local[id]?.placeholder != true,
            localOccupant(Place(parent: parent, name: r.name + Placeholder.suffix), except: id) != nil
        {
            return .content
        }
        return wanted
    }

    /// The automatic files freed to bring what is here under the cache limit: least recently used first, only synced
    /// and unmodified ones (never a pinned file, one with unsent changes, or one being written).
    mutating func cacheVictims() -> Set<ItemID> {
        if let known = residencyMemo.victims { return known }
        var victims: Set<ItemID> = []
        residencyMemo.victims = victims
        guard let limit = policy.cacheLimit else { return victims }
        var total: Int64 = 0
        var candidates: [(id: ItemID, used: Int64, size: Int64)] = []
        for (id, l) in trees.local where !l.isFolder && !l.placeholder && id != Trees.root {
            guard case .known(_, let size) = l.content else { continue }
            total += size
            guard l.hold == nil, trees.pins[id] == nil || trees.pins[id] == .inherited || trees.pins[id] == .requested, let s = trees.synced[id], let r = trees.remote[id],
                !localChanged(l, s), trees.pins[id] == .requested || folderPin(above: r) != .pinned
            else { continue }
            candidates.append((id, l.lastUsed, size))
        }
        guard total > limit else { return victims }
        candidates.sort { $0.used != $1.used ? $0.used < $1.used : $0.id.rawValue < $1.id.rawValue }
        for candidate in candidates where total > limit {
            victims.insert(candidate.id)
            total -= candidate.size
        }
        residencyMemo.victims = victims
        return victims
    }

    /// The pin of the nearest folder above the remote item that is pinned or cloud-only (nil: none).
    func folderPin(above r: RemoteNode) -> PinState? {
        var current = r.parent
        var steps = 0
        while let folder = current, steps < 10_000 {
            if let pin = trees.pins[folder], pin == .pinned || pin == .cloudOnly { return pin }
            current = trees.remote[folder]?.parent
            steps += 1
        }
        return nil
    }

    /// The item's path there, relative to the pair's root (nil: not under it).
    mutating func remotePath(_ id: ItemID) -> String? {
        let remote = trees.remote  // (shared storage, not a copy)
        return path(id, memo: \.remotePaths) { remote[$0].map { ($0.parent, $0.name) } }
    }

    /// The item's path here, relative to the pair's root (nil: not under it).
    mutating func localPath(_ id: ItemID) -> String? {
        let local = trees.local
        return path(id, memo: \.localPaths) { local[$0].map { ($0.parent, $0.name) } }
    }

    /// The item's path in the tree `node` reads (each item's parent and name), remembered in `memo`.
    private mutating func path(
        _ id: ItemID, memo: WritableKeyPath<ResidencyMemo, [ItemID: String]>, node: (ItemID) -> (parent: ItemID?, name: String)?
    ) -> String? {
        if id == Trees.root { return "" }
        if let known = residencyMemo[keyPath: memo][id] { return known }
        var names: [String] = []
        var current: ItemID? = id
        while let step = current, step != Trees.root, names.count < 10_000 {
            guard let (parent, name) = node(step) else { return nil }
            names.append(name)
            current = parent
        }
        let path = names.reversed().joined(separator: "/")
        residencyMemo[keyPath: memo][id] = path
        return path
    }
}
