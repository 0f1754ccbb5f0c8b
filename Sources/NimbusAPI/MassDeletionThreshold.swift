import Foundation

/// When deletions are too many to carry out without the user saying so: more than `absolute` items, or at least
/// `minimum` items that are more than `fraction` of all there are. The same rule guards both ends, with their own
/// figures: the server pauses a device that deletes too much within an hour (``server``), and a sync client holds a
/// round that would delete too much of a synced tree on either side (``client``) — an unmounted disk, a wiped share, a
/// restored backup, an `rm -rf` slip.
public struct MassDeletionThreshold: Sendable, Equatable, Codable {
    /// The share of all items that, once passed (with at least ``minimum`` items), trips the threshold.
    public var fraction: Double
    /// The fewest items that trip it by ``fraction``: a small tree may be emptied.
    public var minimum: Int
    /// More than this many items trip it, whatever the share.
    public var absolute: Int

    public init(fraction: Double, minimum: Int, absolute: Int) {
        self.fraction = fraction
        self.minimum = minimum
        self.absolute = absolute
    }

    /// The server's breaker, per device and hour: over half of a user's items and at least 1,000, or over 10,000.
    public static let server = MassDeletionThreshold(fraction: 0.5, minimum: 1_000, absolute: 10_000)
    /// A sync round's guard, per synced tree: over half of it and at least 10 items, or over 1,000.
    public static let client = MassDeletionThreshold(fraction: 0.5, minimum: 10, absolute: 1_000)

    /// Whether deleting `count` items out of `total` trips it.
    public func trips(deleting count: Int, of total: Int) -> Bool {
        count > absolute || (count >= minimum && Double(count) > fraction * Double(max(total, 1)))
    }
}
