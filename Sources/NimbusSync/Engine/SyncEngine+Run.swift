import Foundation
import NimbusAPI

/// Keeping in sync: the control loop, woken by local changes, the remote's events and retry timers.
extension SyncEngine {
    /// Runs until cancelled: a round after every local change, every change there (the provider's events, or
    /// long-polls where those fail) and every retry that falls due; at least every `interval`. Errors never end
    /// it: the network being away just means waiting for it (``EngineStatus/Phase/offline``).
    public func run(interval: Duration = .seconds(60)) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await self.listenForRemoteChanges() }
            group.addTask { try await self.controlLoop(interval: interval) }
            try await group.next()
            group.cancelAll()
        }
    }

    func controlLoop(interval: Duration) async throws {
        while !Task.isCancelled {
            if provider != nil, phase != .signedOut, phase != .needsSignIn {
                do {
                    if case .awaitingDeletionConfirmation = phase {} else { phase = .syncing }
                    try await syncOnce()
                    if case .syncing = phase { phase = .idle }
                } catch let error as SyncError {
                    switch error {
                    case .unauthorized: phase = .needsSignIn
                    case .notSignedIn: phase = .signedOut
                    default: phase = .offline
                    }
                } catch is CancellationError {
                    return
                } catch {
                    phase = .offline
                }
                notifyChanged()
            }
            var wait = interval
            if case .offline = phase { wait = .seconds(5) }
            if let due = try? nextDue() {
                let seconds = max(0.05, due.timeIntervalSince(now))
                wait = min(wait, .milliseconds(Int64(seconds * 1000)))
            }
            await signal.wait(timeout: wait)
        }
    }

    /// Calls `onChange` whenever the remote announces a change, until cancelled (for a caller that runs its own
    /// loop, like a synced folder).
    public func watchServer(onChange: @escaping @Sendable () -> Void) async {
        await listenForRemoteChanges(onChange: onChange)
    }

    /// Wakes the control loop on every change the remote announces. Prefers its event stream; when that fails,
    /// long-polls the change feed until the stream works again. A remote that announces nothing is polled by the
    /// loop's interval.
    func listenForRemoteChanges(onChange: (@Sendable () -> Void)? = nil) async {
        var failures = 0
        while !Task.isCancelled {
            guard let provider = provider?.features.changeSignals, phase != .needsSignIn else {
                try? await Task.sleep(for: .seconds(1))
                continue
            }
            let signal = self.signal
            let fire: @Sendable () -> Void = { signal.fire(); onChange?() }
            do {
                try await provider.watch(onChange: fire)
                failures = 0
            } catch is CancellationError {
                return
            } catch {
                failures += 1
                // Fall back to one long-poll: it also wakes us as soon as something changes.
                let cursor = (try? await store.read { tx in try tx.cursor() }) ?? nil
                if let cursor, (try? await provider.waitForChanges(after: cursor, seconds: 30)) == true {
                    fire()
                } else {
                    let delay = Backoff.delay(attempt: min(failures, 6), base: .seconds(1), cap: .seconds(30), retryAfter: nil, random: &random)
                    try? await Task.sleep(for: .milliseconds(Int64(delay * 1000)))
                }
            }
        }
    }
}

/// A wake-up call that is never lost: fired before anyone waits, the next wait returns at once.
final class Signal: Sendable {
    private struct State {
        var pending = false
        var waiter: CheckedContinuation<Void, Never>?
    }

    private let state = LockedBox(State())

    func fire() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            if let waiter = state.waiter {
                state.waiter = nil
                return waiter
            }
            state.pending = true
            return nil
        }
        waiter?.resume()
    }

    /// Returns when fired, after `timeout`, or on cancellation.
    func wait(timeout: Duration) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.waitForFire() }
            group.addTask { try? await Task.sleep(for: timeout) }
            await group.next()
            group.cancelAll()
        }
    }

    private func waitForFire() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let resumeNow = state.withLock { state -> Bool in
                    if state.pending || Task.isCancelled {
                        state.pending = false
                        return true
                    }
                    state.waiter = continuation
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
                let waiter = state.waiter
                state.waiter = nil
                return waiter
            }
            waiter?.resume()
        }
    }
}
