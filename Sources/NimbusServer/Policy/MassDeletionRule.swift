import Foundation
import NimbusAPI

/// The server's mass-deletion breaker: a device whose deletions within `window` trip ``threshold`` (a share of the
/// user's items with a minimum, or an absolute count; ``MassDeletionThreshold/server`` by default) is paused: that
/// request and its later deletions answer 409 `mass_deletion_paused` (nothing deleted) until the user confirms, which
/// lets the device go on for one more `window`. Trash and permanent deletions count, a folder with all it holds.
public struct MassDeletionLimits: Sendable, Equatable {
    public var enabled = true
    public var threshold = MassDeletionThreshold.server
    public var window: Duration = .seconds(3600)

    public init(enabled: Bool = true, threshold: MassDeletionThreshold = .server, window: Duration = .seconds(3600)) {
        self.enabled = enabled
        self.threshold = threshold
        self.window = window
    }

    /// Whether `deleted` items in the window (this request's included) trip the breaker, `before` being how many
    /// items the user had at the window's start (live now + deleted in it before this request).
    public func trips(deleted: Int, before: Int) -> Bool {
        enabled && threshold.trips(deleting: deleted, of: before)
    }

    /// Whether counting the user's items could change the answer (counting them costs a scan of their rows).
    func mayTrip(deleted: Int) -> Bool {
        enabled && (deleted > threshold.absolute || deleted >= threshold.minimum)
    }
}
