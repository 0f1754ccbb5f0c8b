import Foundation

/// Whether a synced folder keeps an item's content on this device: the user's word for one item (and, set on a
/// folder, for what is in it). A file without one follows the nearest folder above it that has one, then the pair's
/// ``SyncSelection`` rules, then automatic (as it is).
///
/// A cloud-only file is a placeholder here (``Placeholder``): a small text file `NAME.nimbus` that says what it
/// stands for. Pin states are a fact of the local tree the planner reads: a change of pin state is never a change of
/// the file, so it never deletes anything there and transfers only what the new state needs.
public enum PinState: Int, Sendable, Codable, CaseIterable, CustomStringConvertible {
    /// No word for this item: it follows its folder (stored as 0).
    case inherited = 0
    /// Always on this device: a placeholder is replaced by the file, and the file is never freed.
    case pinned = 1
    /// Kept in the cloud only: a synced, unmodified file here is replaced by its placeholder; a file that arrives
    /// comes as one. A file with unsent changes is never freed.
    case cloudOnly = 2
    /// Asked for (`nimbus hydrate`, `nimbus open`): the placeholder is replaced by the file, which is then kept as an
    /// automatic file, whatever a folder above says, until the cache limit frees it (then this mark goes).
    case requested = 3

    public var description: String {
        switch self {
        case .inherited: "automatic"
        case .pinned: "pinned"
        case .cloudOnly: "cloud-only"
        case .requested: "requested"
        }
    }
}

/// What one file should be on this device, as the planner decides from pins, the selection and the cache limit.
enum Residency: Sendable, Equatable {
    /// Its content here (a placeholder is replaced by the file).
    case content
    /// A placeholder here (a synced, unmodified file is replaced by one).
    case placeholder
    /// As it is: a file stays a file, a placeholder stays a placeholder, a new file comes as a file (``PinState``'s
    /// automatic).
    case either
}

/// Which part of the remote folder a synced folder holds, and in which form: the pair's selective sync.
///
/// - **Paths** are rules on paths relative to the pair's root: the deepest rule that covers a path decides;
///   none covers it, it is synced. Excluding `/` and including `Docs` is "only Docs". An excluded item is not on this
///   device at all (not even a placeholder): excluding a folder sends what it holds that is not sent yet, then removes
///   from the device what is synced and unmodified, and never deletes anything there.
/// - **Kinds and sizes** make files cloud-only (placeholders) rather than excluded: `cloudOnlyKinds` (kind
///   names or extensions) and `cloudOnlyLargerThan`.
public struct SyncSelection: Sendable, Codable, Equatable {
    /// Path → included (true) or excluded (false). Paths have no leading or trailing `/`; "" is the pair's root.
    public var rules: [String: Bool] = [:]
    /// Kinds of files kept cloud-only: `video`, `image`, `audio`, `pdf`, `document`, `archive`, or an extension
    /// (`iso`, `.mkv`).
    public var cloudOnlyKinds: [String] = []
    /// Files larger than this many bytes are kept cloud-only.
    public var cloudOnlyLargerThan: Int64?

    public init(rules: [String: Bool] = [:], cloudOnlyKinds: [String] = [], cloudOnlyLargerThan: Int64? = nil) {
        self.rules = rules
        self.cloudOnlyKinds = cloudOnlyKinds
        self.cloudOnlyLargerThan = cloudOnlyLargerThan
    }

    /// Nothing excluded, nothing cloud-only by rule.
    public var isEmpty: Bool { rules.values.allSatisfy { $0 } && cloudOnlyKinds.isEmpty && cloudOnlyLargerThan == nil }

    /// The excluded paths, sorted.
    public var excluded: [String] { rules.filter { !$0.value }.map(\.key).sorted() }
    /// The paths included inside an excluded one, sorted.
    public var included: [String] { rules.filter { $0.value }.map(\.key).sorted() }

    /// `path` in the form rules keep: no leading, trailing or doubled `/`, no `.` parts; "" for the root.
    public static func normalize(_ path: String) -> String {
        path.split(separator: "/").filter { $0 != "." && !$0.isEmpty }.joined(separator: "/")
    }

    /// Excludes `path` (and all under it): rules beneath it go.
    public mutating func exclude(_ path: String) {
        let path = Self.normalize(path)
        rules = rules.filter { !Self.isWithin($0.key, path) }
        if isIncluded(path) { rules[path] = false }
    }

    /// Includes `path` (and all under it) again: rules beneath it go; inside an excluded folder, it becomes an
    /// exception to it.
    public mutating func include(_ path: String) {
        let path = Self.normalize(path)
        rules = rules.filter { !Self.isWithin($0.key, path) }
        if !isIncluded(path) { rules[path] = true }
    }

    /// Whether `path` (relative to the pair's root) is synced: the deepest rule covering it decides.
    public func isIncluded(_ path: String) -> Bool {
        if rules.isEmpty { return true }
        var current = Self.normalize(path)
        while true {
            if let rule = rules[current] { return rule }
            if current.isEmpty { return true }
            current = current.lastIndex(of: "/").map { String(current[..<$0]) } ?? ""
        }
    }

    /// Whether the item at `path` is outside the selection: not included, and not a folder that leads to an included
    /// path.
    public func excludes(_ path: String, isFolder: Bool) -> Bool {
        !isIncluded(path) && !(isFolder && leadsToIncluded(path))
    }

    /// Whether `path` must be here as a folder because something included lies below it (it leads there), though
    /// a rule excludes it.
    public func leadsToIncluded(_ path: String) -> Bool {
        let path = Self.normalize(path)
        return rules.contains { $0.value && Self.isWithin($0.key, path) && $0.key != path }
    }

    /// Whether a file with this name and size is cloud-only by the kind and size rules.
    public func isCloudOnly(name: String, size: Int64) -> Bool {
        if let limit = cloudOnlyLargerThan, size > limit { return true }
        guard !cloudOnlyKinds.isEmpty else { return false }
        let ext = (name as NSString).pathExtension.lowercased()
        for kind in cloudOnlyKinds {
            let wanted = kind.lowercased().trimmingCharacters(in: CharacterSet(charactersIn: "."))
            if wanted == ext { return true }
            if let extensions = Self.kinds[wanted], extensions.contains(ext) { return true }
        }
        return false
    }

    /// The kind names `cloudOnlyKinds` understands besides extensions (as the server's search kinds).
    public static let kinds: [String: Set<String>] = [
        "video": ["mp4", "m4v", "mov", "mkv", "webm", "avi", "wmv", "flv", "mpg", "mpeg", "3gp", "ts", "mts", "m2ts"],
        "image": ["jpg", "jpeg", "png", "gif", "webp", "heic", "heif", "tif", "tiff", "bmp", "raw", "cr2", "nef", "arw", "dng", "svg"],
        "audio": ["mp3", "m4a", "aac", "flac", "wav", "ogg", "opus", "wma", "aiff", "alac"],
        "pdf": ["pdf"],
        "document": ["doc", "docx", "odt", "rtf", "txt", "md", "xls", "xlsx", "ods", "csv", "ppt", "pptx", "odp", "pages", "numbers", "key"],
        "archive": ["zip", "tar", "gz", "tgz", "bz2", "xz", "7z", "rar", "zst", "iso", "dmg"],
    ]

    /// Whether `path` is `folder` or inside it.
    static func isWithin(_ path: String, _ folder: String) -> Bool {
        folder.isEmpty || path == folder || path.hasPrefix(folder + "/")
    }
}

/// When content may move, as the app (or the user) wants it on a metered network.
public enum MeteredPolicy: String, Sendable, Codable, CaseIterable {
    /// Sync as on any network.
    case allow
    /// Names, folders, moves and deletions go; file content waits for an unmetered network (a file the user asks
    /// for — ``PinState/requested`` — comes anyway).
    case metadataOnly = "metadata-only"
    /// Nothing syncs until the network is not metered.
    case pause
}

/// What the device's network and power are like now, as a ``NetworkConstraintsProvider`` tells it.
public struct NetworkConstraints: Sendable, Equatable {
    /// On a network the user pays by the byte (a phone's hotspot, a metered Wi-Fi).
    public var isMetered: Bool
    /// The battery is low and not charging.
    public var isLowBattery: Bool
    /// Where the answer came from, for status displays ("NetworkManager", "NIMBUS_NETWORK_METERED", "unknown").
    public var source: String

    public init(isMetered: Bool = false, isLowBattery: Bool = false, source: String = "unknown") {
        self.isMetered = isMetered
        self.isLowBattery = isLowBattery
        self.source = source
    }
}

/// Tells the engine what the network and battery are like; an app implements it with its platform's API
/// (`NWPathMonitor`'s `isExpensive`/`isConstrained`, `ProcessInfo.isLowPowerModeEnabled`). Asked before each round.
public protocol NetworkConstraintsProvider: Sendable {
    func current() async -> NetworkConstraints
}

/// The network policy of a pair: what may move on a metered network, bandwidth limits, and pausing on a low battery.
public struct NetworkPolicy: Sendable, Equatable {
    public var onMetered: MeteredPolicy = .allow
    /// Bytes per second up and down (nil: no limit).
    public var uploadLimit: Int64?
    public var downloadLimit: Int64?
    /// Nothing syncs while the battery is low and not charging.
    public var pauseOnLowBattery = true

    public init(onMetered: MeteredPolicy = .allow, uploadLimit: Int64? = nil, downloadLimit: Int64? = nil, pauseOnLowBattery: Bool = true) {
        self.onMetered = onMetered
        self.uploadLimit = uploadLimit
        self.downloadLimit = downloadLimit
        self.pauseOnLowBattery = pauseOnLowBattery
    }

    /// What may run under `constraints`.
    func allowance(_ constraints: NetworkConstraints) -> NetworkAllowance {
        if pauseOnLowBattery && constraints.isLowBattery { return .paused("the battery is low") }
        guard constraints.isMetered else { return .everything }
        switch onMetered {
        case .allow: return .everything
        case .metadataOnly: return .metadataOnly
        case .pause: return .paused("the network is metered")
        }
    }
}

/// What the network policy lets run now.
enum NetworkAllowance: Sendable, Equatable {
    case everything
    /// No content transfers but those the user asked for.
    case metadataOnly
    /// Nothing (why, in words).
    case paused(String)
}
