import Foundation
import NimbusAPI

/// Which operations of a plan may run now. The planner says what brings the trees together; admission says when:
/// a step that failed waits out its backoff (or, failed for good, for the user), and deletions past the mass-deletion
/// guards wait for the user to confirm — on either side. Pure, like the planner: the plan, the trees, the retry
/// schedules and the clock's reading in, the decision out; the engine carries it out (records the schedules that are
/// over, shows the held deletions).
struct Admission: Sendable, Equatable {
    /// A failed step's retry schedule.
    struct RetryGate: Sendable, Equatable {
        /// Failed for good (too often, or with an error retrying would not mend): waits for the user.
        var failedForGood: Bool
        /// When it may run again (ms since 1970).
        var due: Int64
        /// The kind of step that failed (``PlannedOperation/kindName``): another decision for the item — the planner
        /// learned something since, such as a role that no longer allows the step — is not held by it.
        var kind: String? = nil
    }

    /// The mass-deletion guards (``MassDeletionThreshold``, the client's figures by default).
    struct Guards: Sendable, Equatable {
        var threshold: MassDeletionThreshold
        /// Deletions here that come from deletions there may all go (the user confirmed them).
        var deletionsHereConfirmed: Bool
        /// Deletions there that come from deletions here are guarded (a synced folder whose user did not confirm:
        /// an unmounted disk, an `rm -rf` slip).
        var guardsDeletionsThere: Bool
    }

    /// Where the plan's deletions here stand.
    enum DeletionsHere: Sendable, Equatable {
        /// The plan deletes nothing here (a confirmation given earlier is used up).
        case none
        /// Some, admitted.
        case admitted
        /// This many items, held until the user confirms.
        case held(Int)
    }

    /// The steps that may run now, in the plan's order.
    var steps: [PlannedOperation]
    /// Items whose retry schedule is over: the plan no longer asks for their step (it is done, or moot).
    var finishedRetries: [String]
    var deletionsHere: DeletionsHere
    /// Items whose deletion there is held (nil: none held).
    var heldThere: Int?

    /// Admits the steps of `plan`: not for an item in `running` (a step for it is under way), not for one waiting for
    /// a retry, and not deletions past a guard. The guards weigh the items each deletion takes (an item with all that
    /// is under it, in the tree it goes from) against all there are (here: the local tree; there: the merge base).
    static func admit(
        _ plan: [PlannedOperation], trees: Trees, retries: [String: RetryGate], now: Int64, guards: Guards, running: Set<String> = []
    ) -> Admission {
        let planned = Set(plan.map(\.item.rawValue))
        let finished = retries.filter { !$0.value.failedForGood && !planned.contains($0.key) }.map(\.key).sorted()
        var steps = plan.filter { step in
            guard let gate = retries[step.item.rawValue], gate.kind == nil || gate.kind == step.kindName else { return true }
            return !gate.failedForGood && gate.due <= now
        }
        // Deletions here that come from deletions there.
        let here = steps.filter { if case .deleteLocal = $0 { true } else { false } }
        var deletionsHere = DeletionsHere.none
        if !here.isEmpty {
            deletionsHere = .admitted
            if !guards.deletionsHereConfirmed {
                let count = subtreeSizes(here.map(\.item), parents: trees.local.mapValues(\.parent))
                let total = trees.local.keys.filter { $0 != Trees.root }.count
                if guards.threshold.trips(deleting: count, of: total) {
                    steps.removeAll { if case .deleteLocal = $0 { true } else { false } }
                    deletionsHere = .held(count)
                }
            }
        }
        // Deletions there that come from deletions here.
        var heldThere: Int?
        if guards.guardsDeletionsThere {
            let there = steps.filter { if case .deleteRemote = $0 { true } else { false } }
            if !there.isEmpty {
                let count = subtreeSizes(there.map(\.item), parents: trees.remote.mapValues(\.parent))
                let total = trees.synced.keys.filter { $0 != Trees.root }.count
                if guards.threshold.trips(deleting: count, of: total) {
                    steps.removeAll { if case .deleteRemote = $0 { true } else { false } }
                    heldThere = count
                }
            }
        }
        return Admission(
            steps: steps.filter { !running.contains($0.item.rawValue) }, finishedRetries: finished, deletionsHere: deletionsHere, heldThere: heldThere)
    }

    /// How many items `ids` and everything under each are (each counted per deletion that takes it, as the guard
    /// weighs them), in a tree given as each item's parent.
    static func subtreeSizes(_ ids: [ItemID], parents: [ItemID: ItemID?]) -> Int {
        let children = Trees.children(of: parents)
        var sizes: [ItemID: Int] = [:]
        func size(_ id: ItemID, _ depth: Int) -> Int {
            if let known = sizes[id] { return known }
            guard depth < 10_000 else { return 1 }
            let total = 1 + (children[id] ?? []).reduce(0) { $0 + size($1, depth + 1) }
            sizes[id] = total
            return total
        }
        return ids.reduce(0) { $0 + size($1, 0) }
    }
}
