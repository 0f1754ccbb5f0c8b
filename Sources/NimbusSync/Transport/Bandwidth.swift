import AsyncHTTPClient
import Foundation
import NIOCore
import NIOFoundationCompat

/// A bandwidth limit in one direction, shared by every transfer of a pair that runs under it.
///
/// A generic cell rate algorithm: each ``take(_:)`` books the time its bytes need at the rate, after those
/// booked before it, and waits until its turn minus a small tolerance (a tenth of a second's worth of bytes may
/// pass ahead). Over any span longer than that, no more than the rate passes, however many transfers share it;
/// a request's body and a response's are paced as they go (pieces of at most 16 KiB), and the network's own
/// back-pressure slows the sender at the far end.
public final class BandwidthLimiter: Sendable {
    private struct State {
        var bytesPerSecond: Int64
        /// When the bytes booked so far will have passed at the rate.
        var booked: ContinuousClock.Instant
    }

    private let state: LockedBox<State>
    private let clock = ContinuousClock()
    /// How far ahead of its turn a piece may go (a burst of at most this much of the rate).
    static let tolerance = Duration.milliseconds(100)

    /// A limit of `bytesPerSecond` (at least 1).
    public init(bytesPerSecond: Int64) {
        state = LockedBox(State(bytesPerSecond: max(1, bytesPerSecond), booked: ContinuousClock().now))
    }

    /// The limit now.
    public var bytesPerSecond: Int64 { state.withLock { $0.bytesPerSecond } }

    /// Changes the limit for what is booked from now on.
    public func setBytesPerSecond(_ value: Int64) { state.withLock { $0.bytesPerSecond = max(1, value) } }

    /// Waits until `count` more bytes may pass.
    public func take(_ count: Int) async throws {
        guard count > 0 else { return }
        let now = clock.now
        let turn: ContinuousClock.Instant = state.withLock { state in
            let start = max(state.booked, now)
            state.booked = start + .seconds(Double(count) / Double(state.bytesPerSecond))
            return state.booked - Self.tolerance
        }
        if turn > now { try await Task.sleep(until: turn, clock: clock) }
    }

    /// The largest piece a body is cut into: a twentieth of a second at the rate, between 1 and 16 KiB.
    var pieceSize: Int { Int(min(16 << 10, max(1 << 10, bytesPerSecond / 20))) }
}

/// The bandwidth limits the transfers of the current task run under: the engine sets them around a round
/// (``NetworkPolicy/uploadLimit`` and ``NetworkPolicy/downloadLimit``), and every provider's requests take from
/// them — the Nimbus server's through ``AsyncHTTPClientTransport``, WebDAV's bodies as they stream, S3's objects and parts whole.
public struct BandwidthLimits: Sendable {
    /// Request bodies (uploads).
    public var up: BandwidthLimiter?
    /// Response bodies (downloads).
    public var down: BandwidthLimiter?

    public init(up: BandwidthLimiter? = nil, down: BandwidthLimiter? = nil) {
        self.up = up
        self.down = down
    }

    /// The limits of the transfers this task starts.
    @TaskLocal public static var current = BandwidthLimits()

    /// `data` as a request body: whole, or, under an upload limit, a stream of pieces that each wait their turn.
    static func body(_ data: Data) -> HTTPClientRequest.Body { body(ByteBuffer(data: data)) }

    /// `buffer` as a request body, as ``body(_:)-(Data)`` does.
    static func body(_ buffer: ByteBuffer) -> HTTPClientRequest.Body {
        guard let up = current.up, buffer.readableBytes > 0 else { return .bytes(buffer) }
        return .stream(PacedPieces(buffer: buffer, limiter: up), length: .known(Int64(buffer.readableBytes)))
    }
}

/// A body cut into pieces, each released when the limiter lets it pass.
struct PacedPieces: AsyncSequence, Sendable {
    typealias Element = ByteBuffer
    let buffer: ByteBuffer
    let limiter: BandwidthLimiter

    struct AsyncIterator: AsyncIteratorProtocol {
        var buffer: ByteBuffer
        let limiter: BandwidthLimiter

        mutating func next() async throws -> ByteBuffer? {
            let count = Swift.min(buffer.readableBytes, limiter.pieceSize)
            guard count > 0 else { return nil }
            try await limiter.take(count)
            return buffer.readSlice(length: count)
        }
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(buffer: buffer, limiter: limiter) }
}
