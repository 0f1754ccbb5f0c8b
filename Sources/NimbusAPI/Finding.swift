import Foundation

/// What kind of item a search asks for (`GET /v1/search?type=`): decided by the item's type (MIME), so every client
/// sorts a file into the same kind.
public enum FileKind: String, Codable, Sendable, CaseIterable {
    case folder, image, video, audio, pdf, text, document, spreadsheet, presentation, archive

    /// Office and text formats a "document" search also finds (PDFs and `text/*` too).
    public static let documentTypes: Set<String> = [
        "application/msword", "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        "application/vnd.oasis.opendocument.text", "application/rtf", "text/markdown",
    ]
    public static let spreadsheetTypes: Set<String> = [
        "application/vnd.ms-excel", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        "application/vnd.oasis.opendocument.spreadsheet", "text/csv",
    ]
    public static let presentationTypes: Set<String> = [
        "application/vnd.ms-powerpoint", "application/vnd.openxmlformats-officedocument.presentationml.presentation",
        "application/vnd.oasis.opendocument.presentation",
    ]
    public static let archiveTypes: Set<String> = [
        "application/zip", "application/x-tar", "application/gzip", "application/x-7z-compressed", "application/x-rar-compressed",
        "application/x-bzip2", "application/x-xz", "application/zstd",
    ]

    /// Whether an item of this type (and folderness) is of this kind.
    public func matches(mimeType: String) -> Bool {
        let type = mimeType.lowercased()
        switch self {
        case .folder: return type == folderMimeType
        case .image: return type.hasPrefix("image/")
        case .video: return type.hasPrefix("video/")
        case .audio: return type.hasPrefix("audio/")
        case .pdf: return type == "application/pdf"
        case .text: return type.hasPrefix("text/")
        case .document: return type == "application/pdf" || type.hasPrefix("text/") || Self.documentTypes.contains(type)
        case .spreadsheet: return Self.spreadsheetTypes.contains(type)
        case .presentation: return Self.presentationTypes.contains(type)
        case .archive: return Self.archiveTypes.contains(type)
        }
    }
}

/// Who did something the activity view shows: the user, and the device or app password they did it with (absent when
/// the server itself did it, e.g. emptying an old trash).
public struct Actor: Codable, Sendable, Hashable {
    public var userId: String?
    public var username: String?
    /// The device, or `app-password:ID` for a WebDAV client.
    public var deviceId: String?
    /// The device's name, or the app password's label.
    public var deviceName: String?

    public init(userId: String?, username: String?, deviceId: String?, deviceName: String?) {
        self.userId = userId
        self.username = username
        self.deviceId = deviceId
        self.deviceName = deviceName
    }
}

/// One thing that happened to an item (`GET /v1/activity`).
public struct ActivityEvent: Codable, Sendable, Hashable {
    /// What was done.
    public enum Action: String, Codable, Sendable, CaseIterable {
        case created, uploaded, edited, renamed, moved, copied, trashed, restored, deleted, restoredVersion
    }

    public var at: Date
    public var action: Action
    /// The item as it is now; as it was, when it is gone (then `trashed` is true and it has no `downloadUrl`).
    public var file: File
    public var by: Actor
    /// The action in words a person reads, e.g. "Laptop edited notes.txt" ("You" for the asking user's own devices
    /// is the client's to say).
    public var summary: String

    public init(at: Date, action: Action, file: File, by: Actor, summary: String) {
        self.at = at
        self.action = action
        self.file = file
        self.by = by
        self.summary = summary
    }
}

/// `GET /v1/activity`: newest first.
public struct ActivityList: Codable, Sendable, Hashable {
    public var events: [ActivityEvent]
    public var pagination: Pagination

    public init(events: [ActivityEvent], pagination: Pagination) {
        self.events = events
        self.pagination = pagination
    }
}
