import Foundation
import NimbusAPI

/// The control loop's core: load the three trees, ask the planner, carry out what can run now, record the
/// outcomes, and plan again — until the plan is empty or all that remains waits (for a retry, the user, a file
/// that is still being written).
extension SyncEngine {
    /// One full round: observe the remote and (a synced folder) the disk, then plan and carry out until nothing
    /// is left that can run now. Steps waiting for a retry later stay pending.
    public func syncOnce() async throws {
        let provider = try requireProvider()
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
            try await settleDoubts(provider)
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

    /// Items deleted here while their creation was in doubt (sent, no answer recorded): the creation is asked for
    /// again with the same request id, so whatever it made there is known — and then deleted there like any item
    /// deleted here. (Without this, a file the user deleted moments after adding it could come back.)
    func settleDoubts(_ provider: any RemoteProvider) async throws {
        let rows = try await store.read { tx in try tx.doubtsDeletedHere() }
        for row in rows where !running.contains(row.luid) {
            guard let request = row.createRequest, let name = row.lName,
                let parent = try await store.read({ tx in try row.lParent.flatMap { try tx.item($0) }?.fileId })
            else {
                try await store.write { tx in try tx.delete(row.luid) }
                continue
            }
            var made: RemoteItem?
            do {
                if row.isFolder {
                    made = try await provider.createFolder(named: name, in: parent, requestId: request)
                } else if let path = row.contentPath, let checksum = row.contentChecksum, let size = contentSize(path) {
                    made = try await provider.upload(
                        uploadSource(path, size: size, checksum: checksum), to: .new(parentId: parent, name: name, mimeType: row.lMime),
                        requestId: request) { _ in }
                }
            } catch ProviderError.requestIdReused(let existing?) {
                // It was made, and has changed since (or gone: deleted there too, nothing left to do).
                do { made = try await provider.item(existing) } catch ProviderError.notFound {} catch is ProviderError { continue }
            } catch let error as ProviderError where !error.isRetryable {
                // It was not made (the name belongs to another item, the folder is gone): nothing to undo.
            } catch is ProviderError {
                continue  // offline: asked again next round
            }
            if let made, try await !inUseElsewhere(made.id, than: row.luid) {
                try await recordCreated(row.luid, made, parent: row.lParent)
            } else {
                try await store.write { tx in try tx.delete(row.luid) }
            }
            if let path = row.contentPath, row.contentOwned, path.hasPrefix(stagingDirectory.path) { try? FileManager.default.removeItem(atPath: path) }
        }
    }

    /// Whether the item that a creation in doubt made is already here as another row — the change feed brought
    /// it back before the doubt was settled — and the user has worked in it since (added, moved, renamed or
    /// edited something in it): then what they did since wins over the earlier deletion, which is dropped.
    func inUseElsewhere(_ fileId: String, than luid: String) async throws -> Bool {
        try await store.read { tx in
            guard let other = try tx.item(fileId: fileId), other.luid != luid, other.lPresent else { return false }
            return try tx.hasChangesHere(under: other.luid)
        }
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
        }
        return trees
    }

    /// The steps of a plan that may run now (``Admission``: retry gates and both mass-deletion guards), with what
    /// admission decided carried out: retry schedules that are over go, held deletions are shown.
    func admitted(_ plan: [PlannedOperation], _ trees: Trees) async throws -> [PlannedOperation] {
        let failures = try await store.read { tx in try tx.failures() }
        let guards = Admission.Guards(
            threshold: configuration.massDeletionThreshold, deletionsHereConfirmed: massDeletionConfirmed || (disk != nil && confirmsLocalDeletions),
            guardsDeletionsThere: disk != nil && !confirmsLocalDeletions)
        let admission = Admission.admit(
            plan, trees: trees, retries: failures.mapValues { Admission.RetryGate(failedForGood: $0.failed, due: $0.nextAttemptAt) },
            now: now.millis, guards: guards, running: running)
        if !admission.finishedRetries.isEmpty {
            try await store.write { tx in try tx.clearFailures(admission.finishedRetries) }
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

    // MARK: Carrying a plan out

    /// Runs the steps, up to ``SyncConfiguration/maxConcurrentOperations`` at once (small new files to a provider
    /// that takes batches go several per request); `true` if any step changed the trees.
    func execute(_ steps: [PlannedOperation], _ provider: any RemoteProvider, fills: [String: [PlannedOperation]] = [:]) async throws -> Bool {
        let width = max(1, configuration.maxConcurrentOperations)
        // Steps that only change the database go first, together, in one transaction.
        let quick = steps.filter(isDatabaseOnly)
        var progressed = try await performDatabaseSteps(quick)
        let steps = steps.filter { !isDatabaseOnly($0) }
        try await markCreationsSent(steps)
        // A new folder goes with the small new files the next plan would send into it (``fills(for:_:_:)``).
        var units = try await units(steps, provider).map { unit -> [PlannedOperation] in
            guard unit.count == 1, case .createRemoteFolder(let id) = unit[0], let files = fills[id.rawValue] else { return unit }
            return unit + files
        }
        let items = Set(steps.map(\.item.rawValue)).union(fills.values.joined().map(\.item.rawValue))
        running.formUnion(items)
        defer { running.subtract(items) }
        // The remote gone away (a step failed unreached) ends the batch: what runs finishes, nothing more starts. The
        // rest waits for the next plan, which runs it at once if anything here succeeded (one dropped connection) and
        // otherwise ends the round (an outage: a few failures, not one per queued step).
        let unreachableBefore = unreachableFailures
        var reachable: Bool { unreachableFailures == unreachableBefore }
        try await withThrowingTaskGroup(of: Bool.self) { group in
            var inFlight = 0
            while !units.isEmpty || inFlight > 0 {
                while inFlight < width, !units.isEmpty, mayRun, reachable {
                    let unit = units.removeFirst()
                    inFlight += 1
                    group.addTask {
                        if unit.count > 1, case .createRemoteFolder = unit[0] { return try await self.performFill(unit, provider) }
                        if unit.count > 1 { return try await self.performBatch(unit, provider) }
                        return try await self.perform(unit[0], provider)
                    }
                }
                guard inFlight > 0 else { break }
                if try await group.next() == true { progressed = true }
                inFlight -= 1
                if !mayRun || !reachable { units.removeAll() }
            }
        }
        return progressed
    }

    /// For each folder the plan makes there (on a provider that ``FillsNewFolders``), the small new files the next
    /// plan would send into it once it is there: the plan made again as if the folders were there already, its new
    /// files of those folders taken (settled, hashed, not failing, within the provider's limits and at least its
    /// ``FillsNewFolders/fillMinimum``; one in doubt goes
    /// with its request id, as it would alone: the provider finds what a lost answer made). What
    /// the planner would not send yet (a file being written, ignored, held) stays out; what is left out goes as usual
    /// once the folder is there.
    func fills(for steps: [PlannedOperation], _ trees: Trees, _ provider: any RemoteProvider) async throws -> [String: [PlannedOperation]] {
        let folders = Set(steps.compactMap { step -> ItemID? in
            if case .createRemoteFolder(let id) = step { return id }
            return nil
        })
        guard !folders.isEmpty, let filling = provider.features.newFolderFilling, await filling.fillsNewFolders() else { return [:] }
        var assumed = trees
        for id in folders {
            guard let here = trees.local[id] else { continue }
            let made = RemoteNode(parent: here.parent, name: here.name, isFolder: true, revision: nil, checksum: nil)
            assumed.remote[id] = made
            assumed.synced[id] = made
        }
        let limits = filling.fillLimits
        var fills: [String: [PlannedOperation]] = [:]
        var taken: [ItemID: (files: Int, bytes: Int64)] = [:]
        for step in Planner.plan(assumed, policy: policy) {
            guard case .upload(let id, nil) = step, let here = trees.local[id], !here.isFolder, here.hold == nil,
                let parent = here.parent, folders.contains(parent), case .known(_, let size) = here.content, size <= limits.fileSize,
                knownFailures?.contains(id.rawValue) != true, !running.contains(id.rawValue)
            else { continue }
            var count = taken[parent] ?? (0, 0)
            guard count.files < limits.files, count.bytes + size <= limits.bytes else { continue }
            count.files += 1
            count.bytes += size
            taken[parent] = count
            fills[parent.rawValue, default: []].append(step)
        }
        let minimum = filling.fillMinimum
        return fills.filter { $0.value.count >= minimum }
    }

    /// The steps grouped as they run: small new files together (batches), every other step alone. Local steps
    /// that only touch the database come first (they are quick and unblock the next plan). A batch holds files of
    /// one folder where it can (the plan's order mixes folders): a provider that looks before it writes (S3 on a
    /// store not proven to refuse overwrites) then looks once per batch.
    func units(_ steps: [PlannedOperation], _ provider: any RemoteProvider) async throws -> [[PlannedOperation]] {
        guard let batching = provider.features.batchUpload, batching.batchLimits.files > 1 else { return steps.map { [$0] } }
        let limits = batching.batchLimits
        let newFiles = steps.compactMap { step -> String? in if case .upload(let id, nil) = step { id.rawValue } else { nil } }
        let small = try await store.read { tx in try tx.newFileSizes(newFiles) }.filter { $0.value.size <= limits.fileSize }
        var byFolder: [String: [(step: PlannedOperation, size: Int64)]] = [:]
        for step in steps {
            if case .upload(let id, nil) = step, let file = small[id.rawValue] { byFolder[file.parent, default: []].append((step, file.size)) }
        }
        var units: [[PlannedOperation]] = []
        for step in steps {
            guard case .upload(let id, nil) = step, let file = small[id.rawValue] else {
                units.append([step])
                continue
            }
            // A folder's small files go where its first one was, cut by the batch limits.
            guard let files = byFolder.removeValue(forKey: file.parent) else { continue }
            var batch: [PlannedOperation] = []
            var bytes: Int64 = 0
            for (member, size) in files {
                if batch.count >= limits.files || bytes + size > limits.bytes {
                    units.append(batch)
                    batch = []
                    bytes = 0
                }
                batch.append(member)
                bytes += size
            }
            if !batch.isEmpty { units.append(batch) }
        }
        return units
    }

    // MARK: Failures

    /// A failure: retried later with backoff if it can succeed by itself, else the item's step is failed for good
    /// (visible until ``retry(_:)``). A 401 pauses everything until the user signs in again.
    func failed(_ step: PlannedOperation, _ error: SyncError) async throws {
        try await failed([step], error)
    }

    /// Steps that failed together (one request) are retried together, on one schedule.
    func failed(_ steps: [PlannedOperation], _ error: SyncError) async throws {
        guard let first = steps.first else { return }
        trace("\(steps.count == 1 ? "\(first)" : "\(steps.count) steps") → \(error)")
        if case .unauthorized = error {
            phase = .needsSignIn
            return
        }
        if case .network = error {
            phase = .offline
            unreachableFailures += 1
        }
        let luids = steps.map(\.item.rawValue)
        let previous = try await store.read { tx in try tx.attempts(of: luids) }
        let attempts = steps.map { (previous[$0.item.rawValue] ?? 0) + 1 }.max() ?? 1
        var retryAfter: Int?
        if case .server(_, _, _, let after) = error { retryAfter = after }
        let delay = Backoff.delay(
            attempt: attempts - 1, base: configuration.backoffBase, cap: configuration.backoffCap, retryAfter: retryAfter, random: &random)
        let next = now.addingTimeInterval(delay).millis
        let failures = steps.map { step in
            FailureRow(
                luid: step.item.rawValue, kind: step.kindName, attempts: (previous[step.item.rawValue] ?? 0) + 1, nextAttemptAt: next,
                lastError: error.description, failed: !error.isRetryable || attempts >= configuration.maxAttempts)
        }
        for step in steps { stepErrors[step.item.rawValue] = error.description }
        try await store.write { tx in try tx.recordFailures(failures) }
        knownFailures?.formUnion(steps.map(\.item.rawValue))
    }

    func succeeded(_ luid: String) async throws {
        // Most steps never failed: nothing to delete, no transaction (10,000 small uploads made 10,000 of them).
        if let knownFailures, !knownFailures.contains(luid) { return }
        try await store.write { tx in try tx.clearFailures([luid]) }
        knownFailures?.remove(luid)
    }

    /// The creations among `steps` marked as sent, each with its request id, in one transaction rather than one
    /// each as it starts. Marked before anything is sent, as each would be: after a crash such an item is in doubt,
    /// and asking again with the same request id settles it (a creation never sent is simply made then).
    func markCreationsSent(_ steps: [PlannedOperation]) async throws {
        let luids = steps.compactMap { step -> String? in
            switch step {
            case .createRemoteFolder(let id), .upload(let id, nil): id.rawValue
            default: nil
            }
        }
        guard luids.count > 1 else { return }
        try await store.write { tx in try tx.markCreationsSent(luids, newRequestId: Self.newRequestId) }
    }
}

extension SyncEngine {
    /// The rows that are not in sync (or all of them), one line each (diagnostics for tests and traces).
    func unsyncedRows(all: Bool = false) throws -> [String] {
        try store.read { tx in
            try tx.itemsButRoot().filter { all || !$0.isSynced }.map {
                "\($0.luid) \($0.isFolder ? "dir" : "file") fid=\($0.fileId ?? "-") r=\($0.rPresent ? "\($0.rParent ?? "-")/\($0.rName ?? "-")@\(($0.rRevision ?? "-").prefix(6))" : "∅") "
                    + "s=\($0.sPresent ? "\($0.sParent ?? "-")/\($0.sName ?? "-")@\(($0.sRevision ?? "-").prefix(6))" : "∅") "
                    + "l=\($0.lPresent ? "\($0.lParent ?? "-")/\($0.lName ?? "-")#\(($0.lChecksum ?? "-").prefix(6))" : "∅") hold=\($0.hold?.rawValue ?? "-") content=\($0.contentPath != nil)"
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
        case .upload, .uploadThenRestore: .upload
        case .download: .download
        case .learnChecksum: .compare
        case .moveRemote, .moveLocal: .move
        case .deleteRemote, .deleteLocal: .delete
        case .record, .link, .forget, .release: .record
        case .fork: .conflict
        case .hold: .hold
        }
    }
}

/// What a queued step does.
public enum OperationKind: String, Sendable, CustomStringConvertible {
    case createFolder, upload, download, compare, move, delete, record, conflict, hold
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
