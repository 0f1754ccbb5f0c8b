import Foundation
import NimbusAPI

/// What a pair keeps on this device: its selection, pin states, cache limit and network policy. Each is a fact the
/// planner (or admission, for the network) reads at the next round; none of them deletes anything there.
extension FolderSync {
    /// What to do with an item's content here (``setResidency(_:at:)``).
    public enum ResidencyAction: String, Sendable, CaseIterable {
        /// Cloud-only: synced files become placeholders, and stay so.
        case free
        /// Fetched now (placeholders replaced by the files), then kept as automatic files.
        case hydrate
        /// Always on this device.
        case pin
        /// Back to automatic (the folder's word, or the selection's rules).
        case unpin
    }

    /// What ``setResidency(_:at:)`` found and marked.
    public struct ResidencyChange: Sendable, Equatable {
        /// The item's path, relative to the folder (a placeholder's without `.nimbus`).
        public var path: String
        public var isFolder: Bool
        /// Files under it (or it) that are placeholders now, and files that are here.
        public var placeholders: Int
        public var files: Int
    }

    /// Marks the item at `path` (relative to the folder, or absolute inside it; a placeholder by its `NAME.nimbus`
    /// or by `NAME`) and everything under it; the next round carries it out. Throws ``SyncError/invalid(_:)`` when no
    /// synced item is there.
    public func setResidency(_ action: ResidencyAction, at path: String) async throws -> ResidencyChange {
        try await engine.setResidency(action, at: relativePath(path))
    }

    /// The pair's selection (``SyncSelection``).
    public func selection() async throws -> SyncSelection {
        try await engine.store.read { tx in try tx.selection() }
    }

    /// Where the item at `path` is (here, a placeholder, excluded) and its pin: for a badge in a file browser. Throws
    /// ``SyncError/invalid(_:)`` when no synced item is there.
    public func residency(at path: String) async throws -> ItemResidency {
        try await engine.residency(at: relativePath(path))
    }

    /// Replaces the pair's selection; the next round carries it out (what leaves the device leaves then).
    public func setSelection(_ selection: SyncSelection) async throws {
        try await engine.store.write { tx in try tx.setSelection(selection) }
    }

    /// Automatic files are freed, least recently used first, while the files here take more than `bytes` (nil: no limit).
    public func setCacheLimit(_ bytes: Int64?) async { await engine.setCacheLimit(bytes) }

    /// What may move on a metered network, the bandwidth limits, pausing on a low battery — and who tells the network's
    /// state (nil: ``SystemNetworkConstraints``).
    public func setNetworkPolicy(_ policy: NetworkPolicy, constraints: (any NetworkConstraintsProvider)? = nil) async {
        await engine.setNetworkPolicy(policy, constraints: constraints ?? SystemNetworkConstraints())
    }

    /// How much of the pair is on this device: for status displays.
    public func residencySummary() async throws -> ResidencySummary {
        try await engine.residencySummary()
    }

    /// `path` (absolute, inside the folder, or relative to it) relative to the folder, normalised.
    public nonisolated func relativePath(_ path: String) -> String {
        var path = path
        if path.hasPrefix("/") {
            let root = self.root.path
            if path == root { return "" }
            if path.hasPrefix(root + "/") { path = String(path.dropFirst(root.count + 1)) }
        }
        return SyncSelection.normalize(path)
    }
}

/// One item's residency (``FolderSync/residency(at:)``).
public struct ItemResidency: Sendable, Equatable {
    public enum State: String, Sendable, Equatable {
        /// Its content is on this device.
        case here
        /// A placeholder (`NAME.nimbus`) stands for it.
        case cloudOnly
        /// Excluded by the selection, yet still here (what it holds is being sent, or only this device keeps it).
        case excluded
        /// Deleted here, the deletion not carried out yet.
        case notHere
    }

    /// Its path relative to the folder (a placeholder's without `.nimbus`).
    public var path: String
    public var isFolder: Bool
    public var state: State
    /// Its own pin state, and the nearest pinned or cloud-only folder's above it (``PinState/inherited``: none).
    public var pin: PinState
    public var folderPin: PinState
}

/// How much of a pair is on this device.
public struct ResidencySummary: Sendable, Equatable {
    /// Placeholders here, and the bytes they stand for.
    public var cloudOnlyFiles = 0
    public var cloudOnlyBytes: Int64 = 0
    /// Files here, and their bytes.
    public var localFiles = 0
    public var localBytes: Int64 = 0
    /// Pinned items.
    public var pinned = 0
    /// Excluded paths, and the items under them still here (changes not sent yet, files being written).
    public var excluded: [String] = []
    public var excludedKept = 0
    /// Content transfers waiting for the network (a metered one, under `metadata-only`).
    public var waitingForNetwork = 0
    /// The network as last asked, and what the policy let run.
    public var network: NetworkConstraints?
    public var paused: String?
}

extension SyncEngine {
    func setCacheLimit(_ bytes: Int64?) { cacheLimit = bytes }

    func setNetworkPolicy(_ policy: NetworkPolicy, constraints: any NetworkConstraintsProvider) {
        networkPolicy = policy
        constraintsProvider = constraints
        bandwidth.up = Self.limiter(bandwidth.up, at: policy.uploadLimit)
        bandwidth.down = Self.limiter(bandwidth.down, at: policy.downloadLimit)
    }

    /// `current` at `rate` (a new one if there was none; none for no limit).
    static func limiter(_ current: BandwidthLimiter?, at rate: Int64?) -> BandwidthLimiter? {
        guard let rate, rate > 0 else { return nil }
        guard let current else { return BandwidthLimiter(bytesPerSecond: rate) }
        current.setBytesPerSecond(rate)
        return current
    }

    /// Asks the constraints provider what the network is like, and what the policy lets run (kept for admission).
    func refreshAllowance() async -> NetworkAllowance {
        guard let constraintsProvider else {
            allowance = .everything
            return allowance
        }
        let constraints = await constraintsProvider.current()
        lastConstraints = constraints
        allowance = networkPolicy.allowance(constraints)
        return allowance
    }

    /// The item at `path` here (a placeholder by its name without `.nimbus`, or with it), and its path without it.
    static func item(at path: String, _ tx: StoreTransaction) throws -> (row: ItemRow, path: String) {
        var luid = ItemID.root.rawValue
        var names = path.isEmpty ? [] : path.split(separator: "/").map(String.init)
        for (index, name) in names.enumerated() {
            var next = try tx.luid(named: name, inLocal: luid)
            if next == nil, index == names.count - 1, name.hasSuffix(Placeholder.suffix) {
                names[index] = String(name.dropLast(Placeholder.suffix.count))
                next = try tx.luid(named: names[index], inLocal: luid)
            }
            guard let next else { throw SyncError.invalid("\(path) is not in the synced folder (or not synced yet: run nimbus sync first).") }
            luid = next
        }
        guard let item = try tx.item(luid) else { throw SyncError.invalid("\(path) is not in the synced folder.") }
        return (item, names.joined(separator: "/"))
    }

    func residency(at path: String) async throws -> ItemResidency {
        try await store.read { tx in
            let (row, path) = try Self.item(at: path, tx)
            let selection = try tx.selection()
            // The nearest explicit pin of a folder above.
            var inherited = PinState.inherited
            var parent = row.lParent
            while inherited == .inherited, let luid = parent, luid != ItemID.root.rawValue, let above = try tx.item(luid) {
                inherited = above.pin
                parent = above.lParent
            }
            let state: ItemResidency.State =
                !row.lPresent ? .notHere
                : selection.excludes(path, isFolder: row.isFolder) ? .excluded
                : row.lPlaceholder ? .cloudOnly : .here
            return ItemResidency(path: path, isFolder: row.isFolder, state: state, pin: row.pin, folderPin: inherited)
        }
    }

    func setResidency(_ action: FolderSync.ResidencyAction, at path: String) async throws -> FolderSync.ResidencyChange {
        try await store.write { tx in
            let (item, path) = try Self.item(at: path, tx)
            let luid = item.luid
            var change = FolderSync.ResidencyChange(path: path, isFolder: item.isFolder, placeholders: 0, files: 0)
            // Under it here, and under it there (an item not here now — moved away and coming back, or new there —
            // takes the folder's word as well when it arrives).
            let here = try tx.localSubtree(luid)
            let known = Set(here)
            let there = item.rPresent ? try tx.remoteSubtree(luid).filter { !known.contains($0) } : []
            for below in here + there {
                guard var row = try tx.item(below) else { continue }
                let original = row
                if below == luid {
                    switch action {
                    case .free: row.pin = .cloudOnly
                    case .pin: row.pin = .pinned
                    case .unpin: row.pin = .inherited
                    case .hydrate: row.pin = row.isFolder ? .inherited : (row.lPlaceholder ? .requested : (row.pin == .cloudOnly ? .inherited : row.pin))
                    }
                } else {
                    // Under it: the folder's word holds (a placeholder under a folder fetched now is asked for).
                    row.pin = action == .hydrate && row.lPlaceholder && !row.isFolder ? .requested : .inherited
                }
                if !row.isFolder, row.lPresent {
                    if row.lPlaceholder { change.placeholders += 1 } else { change.files += 1 }
                }
                if row != original { try tx.update(row, from: original) }
            }
            return change
        }
    }

    func residencySummary() async throws -> ResidencySummary {
        var summary = ResidencySummary()
        let (rows, selection) = try await store.read { tx in (try tx.itemsHere(), try tx.selection()) }
        let paths = selection.rules.isEmpty ? [:] : try paths()
        for row in rows where row.luid != ItemID.root.rawValue {
            if row.pin == .pinned { summary.pinned += 1 }
            if !row.isFolder {
                if row.lPlaceholder {
                    summary.cloudOnlyFiles += 1
                    summary.cloudOnlyBytes += row.rSize ?? 0
                } else {
                    summary.localFiles += 1
                    summary.localBytes += row.lSize ?? 0
                }
            }
            if !selection.rules.isEmpty, let path = paths[row.luid], selection.excludes(path, isFolder: row.isFolder) {
                summary.excludedKept += 1
            }
        }
        summary.excluded = selection.excluded
        summary.waitingForNetwork = waitingForNetwork
        summary.network = lastConstraints
        if case .paused(let why) = allowance { summary.paused = why }
        return summary
    }
}
