import Foundation

/// A device whose deletions the server's mass-deletion breaker paused: it deleted or trashed more of the user's
/// items in a short window than the server allows without a confirmation. Its further deletions answer 409
/// `mass_deletion_paused` until the user confirms (`POST /v1/trash/confirm`).
public struct DeletionPause: Codable, Sendable, Hashable {
    /// The device (a signed-in client) or `app-password:ID` (a WebDAV client).
    public var deviceId: String
    /// The device's name at sign-in, or the app password's label.
    public var deviceName: String?
    /// Items it deleted or trashed in the window, the refused request's included.
    public var deletions: Int
    public var pausedAt: Date

    public init(deviceId: String, deviceName: String?, deletions: Int, pausedAt: Date) {
        self.deviceId = deviceId
        self.deviceName = deviceName
        self.deletions = deletions
        self.pausedAt = pausedAt
    }
}

/// `GET /v1/trash/paused` (the devices paused now) and `POST /v1/trash/confirm` (the devices it let go on).
public struct DeletionPauseList: Codable, Sendable, Hashable {
    public var paused: [DeletionPause]

    public init(paused: [DeletionPause]) { self.paused = paused }
}

/// `POST /v1/trash/restore`: everything trashed at or after `since` back where it was.
public struct RestoreTrashRequest: Codable, Sendable, Hashable {
    public var since: Date

    public init(since: Date) { self.since = since }
}

public struct RestoreTrashResponse: Codable, Sendable, Hashable {
    /// Trashed items restored (each with whatever was trashed with it).
    public var restored: Int
    /// Items back in the tree, those inside restored folders included.
    public var items: Int

    public init(restored: Int, items: Int) {
        self.restored = restored
        self.items = items
    }
}
