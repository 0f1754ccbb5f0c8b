import Foundation
import NIOConcurrencyHelpers

/// Devices signed out in this process, for the requests they still hold open: a long-poll or an event
/// stream of a device that logs out ends at once instead of answering with the next change. (Sign-outs on another
/// replica, or by a detected refresh-token replay, are caught by the device check those requests make when they
/// wake: at the latest on the next change, heartbeat or timeout. Data is never sent after the sign-out.)
final class SignOuts: Sendable {
    private let waiters = NIOLockedValueBox<[String: [UUID: AsyncStream<Void>.Continuation]]>([:])

    /// A stream that finishes when `deviceId` is signed out here (or when the reader is cancelled).
    func stream(for deviceId: String) -> AsyncStream<Void> {
        let (stream, continuation) = AsyncStream.makeStream(of: Void.self)
        let key = UUID()
        waiters.withLockedValue { $0[deviceId, default: [:]][key] = continuation }
        continuation.onTermination = { [weak self] _ in
            self?.waiters.withLockedValue { waiters in
                waiters[deviceId]?[key] = nil
                if waiters[deviceId]?.isEmpty == true { waiters[deviceId] = nil }
            }
        }
        return stream
    }

    /// Ends every open request of `deviceId` waiting here.
    func signedOut(_ deviceId: String) {
        let continuations = waiters.withLockedValue { $0.removeValue(forKey: deviceId) } ?? [:]
        for continuation in continuations.values { continuation.finish() }
    }
}
