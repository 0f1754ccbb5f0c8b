import Foundation

/// Deterministic interleaving of a plan's units, for simulations (``SyncConfiguration/interleavingSeed``): the units
/// still overlap — one starts, sends a request, another runs until its own request, the first takes its answer — but
/// only one runs at a time, and who runs next is drawn from a seed at each switch. Every interleaving a seed draws is
/// one that real concurrency could make, and the seed replays it exactly (thread timing decides nothing).
///
/// A unit waits for its turn before it starts (``enter(_:)``) and gives it up where it asks the remote (``pass()``,
/// called by the transport a simulation injects; a no-op outside a unit). The loop that launches units holds the turn
/// while it decides what to launch, and gives it up while it waits for one to end; a unit that ends hands it back to
/// the loop. A turn is given only when every live unit waits, so the draw never depends on which thread got there
/// first.
final class Turns: @unchecked Sendable {
    private struct State {
        var random: SeededRandom
        /// Units launched and not ended.
        var live: Set<Int> = []
        /// Each live unit's waiters (a unit whose child tasks ask the remote at once has several: its turn resumes them
        /// all, as the unit's own concurrency — a turn held by a child that ended could otherwise never pass on).
        var waiting: [Int: [CheckedContinuation<Void, Never>]] = [:]
        /// Who may run: a unit, the loop (`loop`), or no one yet (`nil`: given at the next draw).
        var holder: Int? = Turns.loop
        /// Over (the loop ended, or failed): everyone runs freely.
        var over = false
    }

    static let loop = -1
    private let state: LockedBox<State>

    /// The unit the current task runs for, and its turns (set for each unit's task).
    @TaskLocal static var current: (turns: Turns, unit: Int)?

    init(seed: UInt64) { state = LockedBox(State(random: SeededRandom(seed: seed))) }

    /// The loop launches `unit` (before its task starts).
    func launch(_ unit: Int) {
        state.withLock { _ = $0.live.insert(unit) }
    }

    /// The unit's task waits for its first turn.
    func enter(_ unit: Int) async {
        await wait(unit, giving: false)
    }

    /// The unit ended: the turn goes back to the loop.
    func finish(_ unit: Int) {
        state.withLock { state in
            state.live.remove(unit)
            state.waiting[unit] = nil
            if state.holder == unit { state.holder = Turns.loop }
        }
    }

    /// The loop waits for a unit to end: the turn is drawn among the units.
    func release() {
        let resume = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            if state.holder == Turns.loop { state.holder = nil }
            return Self.draw(&state)
        }
        for waiter in resume { waiter.resume() }
    }

    /// The loop ended (or failed): whoever waits runs, and nothing waits any more.
    func end() {
        let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.over = true
            defer { state.waiting = [:] }
            return state.waiting.values.flatMap { $0 }
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Inside a unit that takes turns, a step's own requests go one at a time too (a provider's parallel uploads, a
    /// file's block batches): their order would otherwise be thread timing's.
    static var serial: Bool { current != nil }

    /// `width` requests at once, or one inside a unit that takes turns.
    static func width(_ width: Int) -> Int { serial ? 1 : width }

    /// Where a unit asks the remote: another unit may run first (drawn); a no-op outside a unit.
    static func pass() async {
        guard let current else { return }
        await current.turns.wait(current.unit, giving: true)
    }

    private func wait(_ unit: Int, giving: Bool) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let resume = state.withLock { state -> [CheckedContinuation<Void, Never>] in
                // Over, or a task that outlived its unit: it runs freely.
                if state.over || !state.live.contains(unit) { return [continuation] }
                if giving, state.holder == unit { state.holder = nil }
                state.waiting[unit, default: []].append(continuation)
                return Self.draw(&state)
            }
            for waiter in resume { waiter.resume() }
        }
    }

    /// Gives the turn to a unit drawn among the live ones, once no one holds it and every live unit waits; its
    /// waiters to resume.
    private static func draw(_ state: inout State) -> [CheckedContinuation<Void, Never>] {
        guard state.holder == nil, !state.live.isEmpty, state.live.allSatisfy({ state.waiting[$0]?.isEmpty == false }) else { return [] }
        let units = state.live.sorted()
        let unit = units[Int(state.random.next() % UInt64(units.count))]
        state.holder = unit
        defer { state.waiting[unit] = [] }
        return state.waiting[unit] ?? []
    }
}
