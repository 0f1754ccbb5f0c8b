import Foundation
import NimbusAPI

/// The control loop's core: load the three trees, ask the planner, carry out what can run now, record the
/// outcomes, and plan again — until the plan is empty or all that remains waits (for a retry, the user, a file
/// that is still being written).
extension SyncEngine {
    /// One full round: observe the remote and (a synced folder) the disk, then plan and carry out until nothing
    /// is left that can run now. Steps waiting for a retry later stay pending.
    /// Every transfer of the round keeps to the policy's bandwidth limits (``BandwidthLimits``).
    public func syncOnce() async throws {
        try await BandwidthLimits.$current.withValue(bandwidth) { try await round() }
    }

    private func round() async throws {
        let provider = try requireProvider()
        if disk != nil { selection = try await store.read { tx in try tx.selection() } }
        do {
            do {
                try await refreshRemote(provider)
            } catch let error as ProviderError {
                // The remote away (or refusing): the folder is still looked at, so what changed here counts as
                // pending while it waits (status said "0 pending" with an edit unsent). Its own failure is not the
                // round's: the remote's is what is reported.
                try? await observeLocal()
                throw SyncError(error)
            }
            if disk == nil {
                try await refreshRequestedFolders()
                try enforceMetadataLimit()
            }
            if Self.tracing { trace("remote tree up to date") }
            try await observeLocal()
            if Self.tracing { trace("scanned: \(lastScan.hashed) files read, \(lastScan.unhashed) left to hash as they are sent") }
            let before = sent
            try await runPlans(provider)
            if sent > before, provider.features.answersAsListed != true {
                // What this round sent comes back in the change feed: taken in now, while it is fresh, so the next
                // round (often a no-op) has nothing to read. A remote without a feed is listed again now too: its
                // listing may differ from what the uploads answered (S3's LastModified), and taking that in here keeps
                // the next round a no-op (skipping it moved 0.45 s into the next no-op on S3: 1.06 s instead of 0.60 —
                // measured). Not where the answers are what a listing shows (WebDAV with proven ETags): there it saved
                // 0.45 s of ~10 s sending 10,000 small files and the next no-op stayed at 0.66–0.73 s.
                do { try await refreshRemote(provider) } catch let error as ProviderError { throw SyncError(error) }
                try await runPlans(provider)
            }
            try await hydratePinned(provider)
            if case .offline = phase { phase = .idle }
            try await saveNameCache()
        } catch SyncError.unauthorized(let detail) {
            phase = .needsSignIn
            notifyChanged()
            throw SyncError.unauthorized(detail)
        }
        notifyChanged()
    }

    /// An encrypted library keeps the names it opened for the next run (``StoreCipher/nameCacheBlob()``), when it
    /// learnt any.
    func saveNameCache() async throws {
        guard let blob = StoreCipher.registered(label: databaseLabel)?.nameCacheBlob() else { return }
        try await store.write { tx in try tx.setNameCache(blob) }
    }

    /// Scans the synced folder into the local tree.
    func observeLocal() async throws {
        guard let disk else { return }
        let features = provider?.features
        let cutting = features?.blockUploads == true
        let unhashedFrom = features?.unhashedUploads?.unhashedMinimum
        needsScan = false
        lastScan = try disk.scan(store, cutting: cutting, acceptingNewRoot: confirmsLocalDeletions, unhashedFrom: unhashedFrom) {
            ItemID.make().rawValue
        }
    }

    /// Reads the unhashed files (``ItemRow/lUnhashed``) that a plan might compare with something: sent before (their
    /// creation in doubt), known there, or with an item there under their name (any case, any normalisation) — all
    /// but a new file on its own, which is hashed as it is sent. True if any was read.
    func readUnhashed(_ rows: [ItemRow], _ disk: DiskFolder) async throws -> Bool {
        func key(_ parent: String, _ name: String) -> String { parent + "/" + name.precomposedStringWithCanonicalMapping.lowercased() }
        var taken = Set<String>()
        for row in rows where row.rPresent {
            if let parent = row.rParent, let name = row.rName { taken.insert(key(parent, name)) }
        }
        let due = rows.filter { row in
            guard row.lUnhashed, row.lPresent, !row.lChanging, row.lChecksum == nil else { return false }
            guard let parent = row.lParent, let name = row.lName else { return true }
            return row.sPresent || row.rPresent || row.createSent || row.fileId != nil || taken.contains(key(parent, name))
        }
        guard !due.isEmpty else { return false }
        _ = try await read(due, disk)
        return true
    }

    /// Plans and carries out until nothing more can run now (only the steps `including` accepts).
    func runPlans(_ provider: any RemoteProvider, including: (PlannedOperation) -> Bool = { _ in true }) async throws {
        do { try await mapRoot(provider) } catch let error as ProviderError { throw SyncError(error) }
        var previous: [PlannedOperation] = []
        var repeats = 0
        for _ in 0..<500 {
            guard mayRun else { return }
            let trees = try await loadTrees()
            let plan = Planner.plan(trees, policy: policy)
            let runnable = try await admitted(plan, trees).filter(including)
            if Self.tracing { trace("plan: \(plan) → running \(runnable.count)") }
            if runnable.isEmpty { return }
            // The same steps again: once or twice is a step that learned something and goes again (a file that
            // changed while it was sent, hashed anew); more is nothing coming of it (every step failed): later.
            repeats = runnable == previous ? repeats + 1 : 0
            if repeats > 2 { return }
            previous = runnable
            if provider.features.treeVersions { try await forgetListings(above: runnable, trees) }
            let progressed = try await execute(runnable, provider, fills: try await fills(for: runnable, trees, provider))
            if needsScan { try await observeLocal() }
            notifyChanged()
            if !progressed { return }
        }
    }

    /// Sends (and brings here) what the trees say is pending now, without asking the remote for news first.
    public func push() async throws {
        try await runPlans(try requireProvider())
        notifyChanged()
    }

    /// Whether the phase lets steps run (not signed out, not waiting for a sign-in).
    var mayRun: Bool {
        switch phase {
        case .idle, .syncing, .offline, .awaitingDeletionConfirmation: true
        default: false
        }
    }

    /// The plan for the trees as they are now.
    func currentPlan() async throws -> [PlannedOperation] {
        let trees = try await loadTrees()
        return Planner.plan(trees, policy: policy)
    }

    /// The three trees from the database: the remote tree as far as it hangs under the remote's root, the local
    /// tree under the local root; ignored paths of a synced folder left out of all three.
    func loadTrees() async throws -> Trees {
        var rows = try await store.read { tx in try tx.allItems() }
        if let disk, rows.contains(where: \.lUnhashed), try await readUnhashed(rows, disk) {
            rows = try await store.read { tx in try tx.allItems() }
        }
        var index: [String: Int] = [:]
        index.reserveCapacity(rows.count)
        for (position, row) in rows.enumerated() { index[row.luid] = position }
        let root = ItemID.root.rawValue
        // Reachability from the root, per tree (with each item's path, for the ignore rules).
        func reachable(_ parentOf: (ItemRow) -> String?, _ nameOf: (ItemRow) -> String?, present: (ItemRow) -> Bool) -> [String: String] {
            var paths: [String: String] = [root: ""]
            func path(_ luid: String, _ depth: Int) -> String? {
                if let known = paths[luid] { return known }
                guard depth < 1000, let position = index[luid], present(rows[position]), let parent = parentOf(rows[position]), let name = nameOf(rows[position]),
                    let above = path(parent, depth + 1)
                else { return nil }
                let value = above.isEmpty ? name : above + "/" + name
                paths[luid] = value
                return value
            }
            for row in rows where present(row) { _ = path(row.luid, 0) }
            return paths
        }
        let remotePaths = reachable({ $0.rParent }, { $0.rName }, present: { $0.rPresent })
        let localPaths = reachable({ $0.lParent }, { $0.lName }, present: { $0.lPresent })
        let ignore = disk?.ignoreRules
        var ignoredFolders: [String: Bool] = [:]
        /// Whether a path, or a folder above it, is ignored (each folder asked once).
        func isIgnored(_ path: String, isFolder: Bool, by ignore: IgnoreRules) -> Bool {
            if isFolder, let known = ignoredFolders[path] { return known }
            var ignored = ignore.ignores(path, isDirectory: isFolder)
            if !ignored, let slash = path.lastIndex(of: "/") { ignored = isIgnored(String(path[..<slash]), isFolder: true, by: ignore) }
            if isFolder { ignoredFolders[path] = ignored }
            return ignored
        }
        var trees = Trees()
        for row in rows where row.luid != root {
            let id = ItemID(row.luid)
            if let ignore {
                if let path = localPaths[row.luid], isIgnored(path, isFolder: row.isFolder, by: ignore) { continue }
                if let path = remotePaths[row.luid], path != localPaths[row.luid], isIgnored(path, isFolder: row.isFolder, by: ignore) { continue }
            }
            if remotePaths[row.luid] != nil, let node = row.remoteNode { trees.remote[id] = node }
            if let node = row.syncedNode { trees.synced[id] = node }
            if localPaths[row.luid] != nil, let node = row.localNode { trees.local[id] = node }
            if let node = row.doubtNode { trees.doubts[id] = node }
            if disk != nil, row.pin != .inherited { trees.pins[id] = row.pin }
        }
        return trees
    }

    /// A folder's listed revision says its subtree is as the remote tree has it since that listing; a step that
    /// changes the remote changes that tree without a listing, and a revision that is a digest of what is beneath (a
    /// collection ETag) can come back to the very value it had — a folder made here, then deleted by another
    /// device, leaves its parent as it was listed before, and the skipped listing would keep the folder forever.
    /// So the folders above every remote step (where it is there, and where it goes) are listed again next time,
    /// forgotten before the steps run (a crash in between costs a listing, never a missed change).
    func forgetListings(above steps: [PlannedOperation], _ trees: Trees) async throws {
        var folders: Set<String> = []
        for step in steps where step.isRemote {
            let id = step.item
            if trees.remote[id]?.isFolder == true || trees.local[id]?.isFolder == true { folders.insert(id.rawValue) }
            var above = [trees.remote[id]?.parent, trees.local[id]?.parent]
            while let next = above.popLast() {
                guard let folder = next, folders.insert(folder.rawValue).inserted else { continue }
                above += [trees.remote[folder]?.parent, trees.local[folder]?.parent]
            }
        }
        if !folders.isEmpty { try await store.write { [folders] tx in try tx.forgetListedVersions(of: folders) } }
    }

    /// The steps of a plan that may run now (``Admission``: retry gates and both mass-deletion guards), with what
    /// admission decided carried out: retry schedules that are over go, held deletions are shown.
    func admitted(_ plan: [PlannedOperation], _ trees: Trees) async throws -> [PlannedOperation] {
        let failures = try await store.read { tx in try tx.failures() }
        let guards = Admission.Guards(
            threshold: configuration.massDeletionThreshold, deletionsHereConfirmed: massDeletionConfirmed || (disk != nil && confirmsLocalDeletions),
            guardsDeletionsThere: disk != nil && !confirmsLocalDeletions)
        var admission = Admission.admit(
            plan, trees: trees, retries: failures.mapValues { Admission.RetryGate(failedForGood: $0.failed, due: $0.nextAttemptAt, kind: $0.kind) },
            now: now.millis, guards: guards, running: running)
        if allowance == .metadataOnly {
            // A metered network delays content, not metadata: transfers wait — but a file the user asked for comes.
            let held = admission.steps.filter { step in
                guard step.isTransfer else { return false }
                if case .download(let id) = step, trees.pins[id] == .requested { return false }
                return true
            }
            waitingForNetwork = held.count
            if !held.isEmpty { admission.steps.removeAll { held.contains($0) } }
        } else {
            waitingForNetwork = 0
        }
        if !admission.finishedRetries.isEmpty {
            let finished = admission.finishedRetries
            try await store.write { tx in try tx.clearFailures(finished) }
        }
        knownFailures = Set(failures.keys).subtracting(admission.finishedRetries)
        switch admission.deletionsHere {
        case .held(let count):
            phase = .awaitingDeletionConfirmation(count: count)
            heldDeletions = count
        case .none:
            if case .awaitingDeletionConfirmation = phase { phase = .idle }
            massDeletionConfirmed = false
            heldDeletions = 0
        case .admitted:
            break
        }
        if let held = admission.heldThere { heldLocalDeletions = held }
        return admission.steps
    }

    /// Steps waiting out a backoff (not failed for good): how many, and when the first is due.
    func waitingRetries() throws -> (count: Int, next: Date?) {
        try store.read { tx in try tx.waitingRetries() }
    }

    /// When the earliest step waiting for a retry falls due; nil when nothing waits for one (or nothing is left).
    func nextDue() throws -> Date? {
        try waitingRetries().next
    }
}

extension SyncEngine {
    /// The rows that are not in sync (or all of them), one line each (diagnostics for tests and traces).
    func unsyncedRows(all: Bool = false) throws -> [String] {
        try store.read { tx in
            try tx.itemsButRoot().filter { all || !$0.isSynced }.map {
                "\($0.luid) \($0.isFolder ? "dir" : "file") fid=\($0.fileId ?? "-") r=\($0.rPresent ? "\($0.rParent ?? "-")/\($0.rName ?? "-")@\(($0.rRevision ?? "-").prefix(6))" : "∅") "
                    + "s=\($0.sPresent ? "\($0.sParent ?? "-")/\($0.sName ?? "-")@\(($0.sRevision ?? "-").prefix(6))" : "∅") "
                    + "l=\($0.lPresent ? "\($0.lParent ?? "-")/\($0.lName ?? "-")#\(($0.lChecksum ?? "-").prefix(6))" : "∅") hold=\($0.hold?.rawValue ?? "-") content=\($0.contentPath != nil) pin=\($0.pin)\($0.lPlaceholder ? " placeholder" : "")"
            }
        }
    }
}

extension SyncEngine {
    /// What the steps carried out since the last call did, and the errors met (a synced folder's report).
    func takeRoundReport() -> (done: [(step: PlannedOperation, path: String?)], errors: [String: String]) {
        defer {
            done = []
            stepErrors = [:]
        }
        return (done, stepErrors)
    }

    /// Lets a synced folder delete many items at once, there (`confirmsLocalDeletions`) and here.
    public func setConfirmDeletions(_ value: Bool) {
        confirmsLocalDeletions = value
        if value { massDeletionConfirmed = true }
    }
}

extension PlannedOperation {
    /// What the step is called in status displays (and in the failures table).
    var kindName: String { kind.rawValue }

    var kind: OperationKind {
        switch self {
        case .createRemoteFolder, .createLocalFolder: .createFolder
        case .upload, .uploadThenRestore, .restoreRevision: .upload
        case .download: .download
        case .learnChecksum: .compare
        case .moveRemote, .moveLocal: .move
        case .deleteRemote, .deleteLocal, .settleDoubt: .delete
        case .record, .link, .forget, .release: .record
        case .fork: .conflict
        case .hold: .hold
        case .placeholder: .free
        case .evict: .evict
        }
    }
}

/// What a queued step does.
public enum OperationKind: String, Sendable, CustomStringConvertible {
    case createFolder, upload, download, compare, move, delete, record, conflict, hold
    /// A file becomes (or stays) a placeholder here: cloud-only.
    case free
    /// An item leaves this device, outside the selection (nothing is deleted there).
    case evict
    /// Deleted there but changed here: waits for the user.
    case unsynced

    public var description: String { rawValue }
}

/// Where a queued step stands.
public enum OperationState: String, Sendable, CustomStringConvertible {
    /// Runs when it can (after a backoff, if it failed before).
    case pending
    /// Failed for good (or too often): waits for ``SyncEngine/retry(_:)``.
    case failed
    /// Waits for the user (a conflict, an item deleted there but changed here).
    case parked

    public var description: String { rawValue }
}

/// A queued step, for status displays and diagnostics.
public struct OperationSummary: Sendable, Equatable, CustomStringConvertible {
    /// The step's id (its item's, for one step per item).
    public var id: String
    /// The item it is for.
    public var item: ItemID
    /// What it does.
    public var kind: OperationKind
    /// Where it stands.
    public var state: OperationState
    /// How many times it was tried.
    public var attempts: Int
    /// When it is tried next.
    public var nextAttemptAt: Date
    /// Why the last attempt failed, if it did.
    public var lastError: String?
    /// Steps it waits for.
    public var dependsOn: [String]

    /// A line for a status display.
    public var description: String {
        "\(kind) \(item) [\(state), \(attempts) attempts\(lastError.map { ": \($0)" } ?? "")]"
    }
}

extension SyncEngine {
    /// What is left to do, item by item: the current plan's steps (with their retry state), and the items that
    /// failed for good or wait for the user.
    public func operations() async throws -> [OperationSummary] {
        let plan = try await currentPlan()
        let failures = try await store.read { tx in try tx.failures() }
        var result: [OperationSummary] = []
        var listed: Set<String> = []
        for step in plan where step.isRemote || step.isTransfer {
            let failure = failures[step.item.rawValue]
            listed.insert(step.item.rawValue)
            result.append(
                OperationSummary(
                    id: step.item.rawValue, item: step.item, kind: step.kind, state: failure?.failed == true ? .failed : .pending,
                    attempts: failure?.attempts ?? 0, nextAttemptAt: Date(millis: failure?.nextAttemptAt ?? 0), lastError: failure?.lastError, dependsOn: []))
        }
        for (luid, failure) in failures where !listed.contains(luid) && failure.failed {
            result.append(
                OperationSummary(
                    id: luid, item: ItemID(luid), kind: OperationKind(rawValue: failure.kind) ?? .record, state: .failed, attempts: failure.attempts,
                    nextAttemptAt: Date(millis: failure.nextAttemptAt), lastError: failure.lastError, dependsOn: []))
        }
        let held = try await store.read { tx in try tx.holds() }
        for (luid, hold) in held where !listed.contains(luid) {
            // (An answered conflict waits for nobody: its steps are listed when they can run.)
            guard hold.resolution == nil else { continue }
            result.append(
                OperationSummary(
                    id: luid, item: ItemID(luid), kind: hold == .conflict ? .conflict : .unsynced, state: .parked, attempts: 0,
                    nextAttemptAt: Date(millis: 0), lastError: nil, dependsOn: []))
        }
        return result
    }

    /// Runs one step of the current plan, if one can run (for simulations that interleave devices step by step);
    /// `false` when there was nothing to run.
    @discardableResult
    public func runNextOperation() async throws -> Bool {
        let provider = try requireProvider()
        guard mayRun else { return false }
        let trees = try await loadTrees()
        guard let step = try await admitted(Planner.plan(trees, policy: policy), trees).first else { return false }
        running.insert(step.item.rawValue)
        defer { running.remove(step.item.rawValue) }
        _ = try await perform(step, provider)
        if needsScan { try await observeLocal() }
        notifyChanged()
        return true
    }
}
