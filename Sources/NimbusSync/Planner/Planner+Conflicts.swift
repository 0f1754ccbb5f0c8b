import Foundation
import NimbusAPI

/// The planner's conflicts: content changed on both sides, settled by the policy, and the user's answers to held ones.
extension Planner {
    /// Changed on both sides (content) — settled by the policy.
    mutating func conflict(_ id: ItemID, _ r: RemoteNode, _ l: LocalNode) -> PlannedOperation? {
        // Read-only there: this side's version can only be kept as a copy.
        if r.access.contains(.readOnly) { return fork(id, l) }
        switch policy.conflictStrategy {
        case .keepBoth: return fork(id, l)
        case .lastWriterWins: return send(id, l, base: r.revision)
        case .ask: return .hold(id, .conflict)
        }
    }

    /// Carries out the user's answer to a held conflict. Settled once both sides hold this side's version as synced
    /// (after keeping it); a file still being written waits; one no longer there (deleted meanwhile) is released and
    /// planned as any other.
    mutating func resolve(_ id: ItemID, _ resolution: ConflictResolution, _ r: RemoteNode?, _ s: RemoteNode?, _ l: LocalNode) -> PlannedOperation? {
        guard let r, !r.isFolder, !l.isFolder else { return .release(id) }
        if l.content.isUnknown { return nil }
        if let s, r.revision == s.revision, l.content.checksum == s.checksum { return .release(id) }
        // Read-only there (it went into a share the user may only view): whatever was answered, this side's version
        // can only be kept as a copy.
        if r.access.contains(.readOnly) { return fork(id, l) }
        switch resolution {
        case .keepBoth:
            return fork(id, l)
        case .keepLocal:
            guard let base = r.revision else { return .release(id) }
            return send(id, l, base: base)
        case .keepRemote:
            guard policy.remoteKeepsRevisions, let base = r.revision else { return fork(id, l) }
            return .uploadThenRestore(id, base: base)
        }
    }
}
