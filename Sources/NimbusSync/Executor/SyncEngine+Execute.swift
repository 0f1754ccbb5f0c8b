import Foundation
import NimbusAPI

/// Carrying a plan out: the steps that may run now, grouped into units (small new files to a provider that takes
/// batches go several per request; a new folder with the small new files it will hold), run up to
/// ``SyncConfiguration/maxConcurrentOperations`` at once, each outcome recorded; failures scheduled for a retry.
extension SyncEngine {
    /// Carries out ``PlannedOperation/settleDoubt(_:)``: the creation of an item deleted here is asked for again with
    /// its request id, so whatever it made there is known — recorded as made, then deleted there by the next plan like
    /// any item deleted here. (Without this, a file the user deleted moments after adding it could come back.) Refused
    /// for good (the name is another item's, the folder is gone), it made nothing: the item is let go; unreachable, the
    /// step fails and is retried.
    func settleDoubt(_ row: ItemRow, _ provider: any RemoteProvider) async throws {
        var made: RemoteItem?
        if let request = row.createRequest, let name = row.lName,
            let parent = try await store.read({ tx in try row.lParent.flatMap { try tx.item($0) }?.fileId })
        {
            do {
                if row.isFolder {
                    made = try await provider.createFolder(named: name, in: parent, requestId: request)
                } else if let path = row.contentPath, let checksum = row.contentChecksum, let size = contentSize(path) {
                    made = try await provider.upload(
                        uploadSource(path, size: size, checksum: checksum), to: .new(parentId: parent, name: name, mimeType: row.lMime),
                        requestId: request) { _ in }
                }
            } catch ProviderError.requestIdReused(let existing?) {
                // It was made, and has changed since (or is gone: deleted there too, nothing left to do).
                do { made = try await provider.item(existing) } catch ProviderError.notFound {}
            } catch let error as ProviderError where !error.isRetryable {
                if case .unauthorized = error { throw error }
                // It was not made (the name belongs to another item, the folder is gone): nothing to undo.
            }
        }
        let id = ItemID(row.luid)
        if let made, try await !inUseElsewhere(made.id, than: row.luid) {
            try await recordCreated(row.luid, made, parent: row.lParent, as: .settleDoubt(id))
        } else {
            _ = try await store.write { tx in try self.write(tx, try tx.item(row.luid).map { [$0] } ?? [], { $0.apply(.settleDoubt(id)) }) }
        }
        if let path = row.contentPath, row.contentOwned, path.hasPrefix(stagingDirectory.path) { try? FileManager.default.removeItem(atPath: path) }
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
        // In a simulation, the units take turns drawn from a seed (``Turns``): the same overlaps, replayable.
        let turns = configuration.interleavingSeed.map { Turns(seed: $0 &+ random.next()) }
        try await withThrowingTaskGroup(of: Bool.self) { group in
            defer { turns?.end() }
            var inFlight = 0
            var launched = 0
            while !units.isEmpty || inFlight > 0 {
                while inFlight < width, !units.isEmpty, mayRun, reachable {
                    let unit = units.removeFirst()
                    inFlight += 1
                    launched += 1
                    let index = launched
                    turns?.launch(index)
                    group.addTask {
                        guard let turns else { return try await self.performUnit(unit, provider) }
                        return try await Turns.$current.withValue((turns, index)) {
                            await turns.enter(index)
                            defer { turns.finish(index) }
                            return try await self.performUnit(unit, provider)
                        }
                    }
                }
                guard inFlight > 0 else { break }
                turns?.release()
                if try await group.next() == true { progressed = true }
                inFlight -= 1
                if !mayRun || !reachable { units.removeAll() }
            }
        }
        return progressed
    }

    /// Carries out one unit: a step, a batch of new files, or a new folder with its files.
    func performUnit(_ unit: [PlannedOperation], _ provider: any RemoteProvider) async throws -> Bool {
        if unit.count > 1, case .createRemoteFolder = unit[0] { return try await performFill(unit, provider) }
        if unit.count > 1 { return try await performBatch(unit, provider) }
        return try await perform(unit[0], provider)
    }

    /// For each folder the plan makes there (on a provider that ``FillsNewFolders``), the small new files the next
    /// plan would send into it once it is there: the plan made again as if the folders were there already, its new
    /// files of those folders taken (settled, hashed, not failing, within the provider's limits and at least its
    /// ``FillsNewFolders/fillMinimum``; one in doubt goes
    /// with its request id, as it would alone: the provider finds what a lost answer made). What
    /// the planner would not send yet (a file being written, ignored, held) stays out; what is left out goes as usual
    /// once the folder is there. None under a metadata-only network.
    func fills(for steps: [PlannedOperation], _ trees: Trees, _ provider: any RemoteProvider) async throws -> [String: [PlannedOperation]] {
        let folders = Set(steps.compactMap { step -> ItemID? in
            if case .createRemoteFolder(let id) = step { return id }
            return nil
        })
        // Filling sends content: not while the network carries metadata only.
        guard !folders.isEmpty, allowance != .metadataOnly, let filling = provider.features.newFolderFilling, await filling.fillsNewFolders() else {
            return [:]
        }
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
