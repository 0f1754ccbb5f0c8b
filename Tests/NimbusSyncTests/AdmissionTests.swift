import Foundation
import NimbusAPI
@testable import NimbusSync
import Testing

/// Admission (`Planner/Admission.swift`): which steps of a plan run now — retry gates and both mass-deletion guards —
/// decided from the plan, the trees and the retry schedules alone.
@Suite("Admission")
struct AdmissionTests {
    /// A folder `d` of `files` files and `others` files beside it at the root, all synced.
    static func trees(files: Int, others: Int) -> Trees {
        var items: [(ItemID, ItemID, String, String?)] = [(ItemID("d"), .root, "d", nil)]
        for index in 0..<files { items.append((ItemID("d\(index)"), ItemID("d"), "f\(index)", "c\(index)")) }
        for index in 0..<others { items.append((ItemID("o\(index)"), .root, "o\(index)", "x\(index)")) }
        return PlannerScenario.base(items)
    }

    static let guards = Admission.Guards(threshold: .client, deletionsHereConfirmed: false, guardsDeletionsThere: true)

    @Test("a failed step waits for its due time, one failed for good waits for the user, and a schedule whose step the plan no longer asks for is over")
    func retryGates() {
        let trees = Self.trees(files: 0, others: 4)
        let plan: [PlannedOperation] = [.download(ItemID("o0")), .download(ItemID("o1")), .download(ItemID("o2"))]
        let retries: [String: Admission.RetryGate] = [
            "o0": .init(failedForGood: false, due: 1_000),  // due later
            "o1": .init(failedForGood: false, due: 10),  // due now
            "o2": .init(failedForGood: true, due: 0),  // failed for good
            "o3": .init(failedForGood: false, due: 0),  // no step planned: over
            "o4": .init(failedForGood: true, due: 0),  // failed for good stays, planned or not
        ]
        let admission = Admission.admit(plan, trees: trees, retries: retries, now: 500, guards: Self.guards, running: [])
        #expect(admission.steps == [.download(ItemID("o1"))])
        #expect(admission.finishedRetries == ["o3"])
        #expect(admission.deletionsHere == .none)
        // A step under way is not started twice.
        #expect(Admission.admit(plan, trees: trees, retries: [:], now: 500, guards: Self.guards, running: ["o0"]).steps.count == 2)
    }

    @Test("deletions here past the guard are held (a folder counts with all it holds) until the user confirms; a few go at once")
    func deletionsHere() {
        var trees = Self.trees(files: 20, others: 5)
        // Deleted there: the folder (21 items of 26) and one file beside it.
        let plan: [PlannedOperation] = [.deleteLocal(ItemID("d")), .deleteLocal(ItemID("o0")), .download(ItemID("o1"))]
        let held = Admission.admit(plan, trees: trees, retries: [:], now: 0, guards: Self.guards)
        #expect(held.deletionsHere == .held(22))
        #expect(held.steps == [.download(ItemID("o1"))], "the other steps go on")
        var confirmed = Self.guards
        confirmed.deletionsHereConfirmed = true
        #expect(Admission.admit(plan, trees: trees, retries: [:], now: 0, guards: confirmed).steps == plan)
        #expect(Admission.admit(plan, trees: trees, retries: [:], now: 0, guards: confirmed).deletionsHere == .admitted)
        // A few of many: under the guard's figures.
        for index in 0..<40 { trees.local[ItemID("m\(index)")] = LocalNode(parent: .root, name: "m\(index)", isFolder: false, content: .known(checksum: "m", size: 1)) }
        let few = Admission.admit([.deleteLocal(ItemID("o0"))], trees: trees, retries: [:], now: 0, guards: Self.guards)
        #expect(few.deletionsHere == .admitted)
        #expect(few.steps == [.deleteLocal(ItemID("o0"))])
    }

    @Test("deletions there from deletions here are held past the guard for a synced folder, weighed against the merge base; not guarded when confirmed")
    func deletionsThere() {
        let trees = Self.trees(files: 30, others: 2)
        let plan: [PlannedOperation] = [.deleteRemote(ItemID("d")), .upload(ItemID("o0"), base: "r-x0")]
        let held = Admission.admit(plan, trees: trees, retries: [:], now: 0, guards: Self.guards)
        #expect(held.heldThere == 31)
        #expect(held.steps == [.upload(ItemID("o0"), base: "r-x0")])
        var unguarded = Self.guards
        unguarded.guardsDeletionsThere = false
        let admitted = Admission.admit(plan, trees: trees, retries: [:], now: 0, guards: unguarded)
        #expect(admitted.heldThere == nil)
        #expect(admitted.steps == plan)
    }
}
