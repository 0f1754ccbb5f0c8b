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
