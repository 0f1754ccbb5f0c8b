import Foundation
import NIOConcurrencyHelpers

/// Wakes whoever waits for a user's changes (long-poll, SSE) when a commit lands.
///
/// In one process this is ``LocalChangeNotifier``; a multi-replica deployment implements it with PostgreSQL
/// `LISTEN/NOTIFY` so that a commit on one replica wakes listeners on all of them.
public protocol ChangeNotifier: Sendable {
    /// Called after a transaction that appended change `seq` for `userId` has committed.
    func notify(userId: String, seq: Int64)
    /// A stream of the user's new change sequence numbers, newest only if the reader falls behind.
    func subscribe(userId: String) -> AsyncStream<Int64>
    /// The newest sequence number notified for the user in this process (0 if none yet).
    func latest(userId: String) -> Int64
}

extension ChangeNotifier {
    /// Returns once a change after `seq` is notified, or when `timeout` passes (or the task is cancelled).
    ///
    /// Subscribes before checking ``latest(userId:)``, so a commit landing between the caller's read and this
    /// call is never missed.
    func wait(userId: String, after seq: Int64, timeout: Duration) async {
        let stream = subscribe(userId: userId)
        if latest(userId: userId) > seq { return }
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                for await newSeq in stream where newSeq > seq { return }
            }
            group.addTask {
                try? await Task.sleep(for: timeout)
            }
            await group.next()
            group.cancelAll()
        }
    }
}

public final class LocalChangeNotifier: ChangeNotifier {
    private struct State {
        var latest: [String: Int64] = [:]
        var subscribers: [String: [UUID: AsyncStream<Int64>.Continuation]] = [:]
    }

    private let state = NIOLockedValueBox(State())

    public init() {}

    public func notify(userId: String, seq: Int64) {
        let continuations = state.withLockedValue { state in
            state.latest[userId] = max(state.latest[userId] ?? 0, seq)
            return Array(state.subscribers[userId]?.values ?? [:].values)
        }
        for continuation in continuations {
            continuation.yield(seq)
        }
    }

    public func subscribe(userId: String) -> AsyncStream<Int64> {
        let (stream, continuation) = AsyncStream.makeStream(of: Int64.self, bufferingPolicy: .bufferingNewest(1))
        let id = UUID()
        state.withLockedValue { $0.subscribers[userId, default: [:]][id] = continuation }
        continuation.onTermination = { [state] _ in
            state.withLockedValue { state in
                state.subscribers[userId]?[id] = nil
                if state.subscribers[userId]?.isEmpty == true { state.subscribers[userId] = nil }
            }
        }
        return stream
    }

    public func latest(userId: String) -> Int64 {
        state.withLockedValue { $0.latest[userId] ?? 0 }
    }

    /// The users someone is waiting for.
    public var subscribedUsers: [String] {
        state.withLockedValue { Array($0.subscribers.keys) }
    }

    /// How many streams are open (for metrics and tests).
    public var subscriberCount: Int {
        state.withLockedValue { $0.subscribers.values.reduce(0) { $0 + $1.count } }
    }
}
