import Foundation
import Logging
import ServiceLifecycle

/// Background upkeep, run every `maintenanceInterval` until shutdown: frees expired upload sessions, purges
/// the trash past its retention, compacts the change feed, sweeps blocks orphaned for longer than the grace
/// period from the blob store.
struct MaintenanceService: Service {
    let store: any MetadataStore
    let configuration: ServerConfiguration
    let logger: Logger

    func run() async throws {
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            await runOnce()
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: configuration.maintenanceInterval) }
        }
    }

    /// One pass; failures are logged and retried next time.
    func runOnce() async {
        let now = configuration.clock.now()
        do {
            let expired = try await store.expireUploads(now: now, forgetAfter: 7 * 24 * 3600)
            let purged = try await store.purgeTrash(trashedBefore: now.addingTimeInterval(-configuration.trashRetention.timeInterval), now: now)
            let compacted = try await store.compactChanges(before: now.addingTimeInterval(-configuration.changeRetention.timeInterval))
            _ = try await store.pruneDeletionLog(before: now.addingTimeInterval(-configuration.massDeletion.window.timeInterval))
            let swept = try await store.sweepBlocks(orphanedBefore: now.addingTimeInterval(-configuration.blockGracePeriod.timeInterval), now: now)
            // The disk reserve given up on a full disk comes back once there is room again (space freed just now).
            (store as? SQLMetadataStore)?.reserve?.replenish(spare: configuration.minimumFreeSpace)
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
