import Foundation
import Logging
import ServiceLifecycle

/// Background upkeep, run every `maintenanceInterval` until shutdown: frees expired upload sessions, purges
/// the trash past its retention, compacts the change feed, unmounts expired grants, sweeps blocks orphaned for longer than the grace
/// period from the blob store. Between passes, blocks this process freed (a file purged, the trash emptied) are
/// swept as soon as their short grace period is over, so the space is usable again within minutes.
struct MaintenanceService: Service {
    let store: any MetadataStore
    let configuration: ServerConfiguration
    let logger: Logger
    /// How long freed blocks wait (``ServerConfiguration/freedBlockGracePeriod``, or the blob store's default).
    let freedGrace: TimeInterval
    /// One pass or sweep at a time: the service's own loop and a pass asked for from outside (tests that move the
    /// clock, then ask) never sweep or compact packs at once (two compactions of one pack made two new packs).
    let gate = PassGate()

    init(store: any MetadataStore, configuration: ServerConfiguration, logger: Logger, blobsAreRemote: Bool) {
        self.store = store
        self.configuration = configuration
        self.logger = logger
        freedGrace = (configuration.freedBlockGracePeriod ?? .seconds(blobsAreRemote ? 3600 : 60)).timeInterval
    }

    func run() async throws {
        var nextPass = ContinuousClock.now
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            if ContinuousClock.now >= nextPass {
                await runOnce()
                nextPass = .now + configuration.maintenanceInterval
            } else if let since = store.unsweptFreeingSince, configuration.clock.now() >= since.addingTimeInterval(freedGrace) {
                await sweepFreed()
            }
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: min(configuration.freedSweepCheck, configuration.maintenanceInterval)) }
        }
    }

    /// Sweeps what is due, outside the full pass: space freed moments ago, given back.
    func sweepFreed() async {
        await gate.run { await sweepFreedNow() }
    }

    private func sweepFreedNow() async {
        let now = configuration.clock.now()
        do {
            // A sweep takes at most 1,000 blocks a user: go on while it is taking that many (a big file purged).
            var swept = 0
            for _ in 0..<100 {
                let count = try await sweep(now: now)
                swept += count
                if count < 1000 { break }
            }
            if swept > 0 { logger.info("maintenance", metadata: ["sweptBlocks": "\(swept)"]) }
        } catch {
            logger.error("sweeping freed blocks failed; will retry", metadata: ["error": "\(error)"])
        }
    }

    private func sweep(now: Date) async throws -> Int {
        let swept = try await store.sweepBlocks(
            orphanedBefore: now.addingTimeInterval(-configuration.blockGracePeriod.timeInterval), freedBefore: now.addingTimeInterval(-freedGrace), now: now)
        // The disk reserve given up on a full disk comes back once there is room again (space freed just now).
        (store as? SQLMetadataStore)?.reserve?.replenish(spare: configuration.minimumFreeSpace)
        return swept
    }

    /// Re-reads this pass's share of the stored blocks — every block within ``ServerConfiguration/scrubDays``, from
    /// where the last pass stopped (kept in the database, so every replica shares one round) — checking each against
    /// its SHA-256: rot no read touched is found, marked and logged, and blocks stored again since are marked healed.
    private func scrub(now: Date) async throws {
        guard configuration.scrubDays > 0, let store = store as? SQLMetadataStore else { return }
        let passesPerDay = max(1, 86400 / max(1, Int(configuration.maintenanceInterval.timeInterval)))
        let total = try await store.blockTotal()
        var left = max(100, Int((Double(total) / Double(configuration.scrubDays * passesPerDay)).rounded(.up)))
        var cursor = try await store.scrubCursor()
        var checked = 0
        var damaged: [(user: String, hash: String)] = []
        var healed = 0  // blocks
        while left > 0 {
            let slice = try await store.verifyBlocks(from: cursor, limit: min(left, 1000), now: now)
            checked += slice.checked
            damaged += slice.damaged
            healed += slice.healed.count
            left -= max(slice.checked, 1)
            cursor = slice.next
            if cursor == nil { break }  // round done: the next pass starts again from the first block
        }
        try await store.setScrubCursor(cursor)
        if !damaged.isEmpty {
            logger.error(
                "scrub: stored blocks are damaged (not served; uploading the files again repairs them; nimbus admin verify lists them)",
                metadata: ["blocks": "\(damaged.map(\.hash))"])
        }
        if healed > 0 { logger.info("scrub: damaged blocks are whole again", metadata: ["healed": "\(healed)"]) }
        if checked > 0 { logger.debug("scrub", metadata: ["checked": "\(checked)"]) }
    }

    /// One pass; failures are logged and retried next time.
    func runOnce() async {
        await gate.run { await runOnceNow() }
    }

    private func runOnceNow() async {
        let now = configuration.clock.now()
        do {
            let expired = try await store.expireUploads(now: now, forgetAfter: 7 * 24 * 3600)
            let purged = try await store.purgeTrash(trashedBefore: now.addingTimeInterval(-configuration.trashRetention.timeInterval), now: now)
            let compacted = try await store.compactChanges(before: now.addingTimeInterval(-configuration.changeRetention.timeInterval))
            _ = try await store.pruneDeletionLog(before: now.addingTimeInterval(-configuration.massDeletion.window.timeInterval))
            _ = try await store.pruneActivity(before: now.addingTimeInterval(-configuration.activityRetention.timeInterval))
            _ = try await store.pruneLoginFlows(now: now)
            // Grants past their expiry stop working at once (the access decision reads the expiry); here their mounts
            // leave their grantees' trees, and feeds.
            _ = try await store.expireGrants(now: now)
            let swept = try await sweep(now: now)
            try await scrub(now: now)
            if expired + purged + compacted + swept > 0 {
                logger.info(
                    "maintenance",
                    metadata: [
                        "expiredUploads": "\(expired)", "purgedItems": "\(purged)", "compactedChanges": "\(compacted)", "sweptBlocks": "\(swept)",
                    ])
            }
        } catch {
            logger.error("maintenance failed; will retry", metadata: ["error": "\(error)"])
        }
    }
}

/// Runs one body at a time, in the order they came.
actor PassGate {
    private var busy = false
    private var waiting: [CheckedContinuation<Void, Never>] = []

    func run(_ body: @Sendable () async -> Void) async {
        while busy { await withCheckedContinuation { waiting.append($0) } }
        busy = true
        await body()
        busy = false
        if !waiting.isEmpty { waiting.removeFirst().resume() }
    }
}
