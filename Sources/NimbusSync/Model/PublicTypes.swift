import Foundation
import NimbusAPI

/// A stable local id for an item (a LUID): the same before and after its first upload, whatever the server
/// calls it. `ItemID.root` is the account's root folder.
public struct ItemID: Hashable, Sendable, Codable, CustomStringConvertible {
    /// The id's text, as stored in the engine's database.
    public let rawValue: String
    /// An id from its text (as ``rawValue`` gave it).
    public init(_ rawValue: String) { self.rawValue = rawValue }
    /// The root folder of the engine's tree (the account's root, or the synced folder).
    public static let root = ItemID("root")
    /// The id's text.
    public var description: String { rawValue }
    /// A new LUID: 15 random characters of lowercase base32 (75 bits). Fifteen UTF-8 bytes is what a Swift
    /// string holds without a heap allocation, which big listings feel (older libraries keep their UUID LUIDs).
    static func make() -> ItemID {
        let alphabet = Array("abcdefghijklmnopqrstuvwxyz234567")
        var bits = IdentitySource.next()  // 64 bits for the first 12 characters, then 11 more
        var characters: [Character] = []
        characters.reserveCapacity(15)
        for index in 0..<15 {
            if index == 12 { bits = IdentitySource.next() }
            characters.append(alphabet[Int(bits & 31)])
            bits >>= 5
        }
        return ItemID(String(characters))
    }
}

/// What the user should see about an item's sync.
public enum ItemState: Sendable, Equatable {
    /// Same here and on the server.
    case synced
    /// A change waits to be sent (offline, or queued behind others).
    case pending
    /// Its content is being sent; `progress` goes from 0 to 1.
    case uploading(progress: Double)
    /// Its content is being fetched; `progress` goes from 0 to 1.
    case downloading(progress: Double)
    /// Changed here and there; waiting for ``SyncEngine/resolveConflict(_:keeping:)`` (the `ask` policy).
    case conflict
    /// Deleted on the server while changed (or only present) here: kept, waiting for the user to decide
    /// (``SyncEngine/confirmDeletion(_:)`` or ``SyncEngine/keepLocalCopy(_:)``).
    case unsynced
    /// Made or changed here inside a share the user may only view: kept on this device, not sent (a changed file's
    /// version is a conflict copy beside the original, which comes back from the server). Moved out of the share, or
    /// given a role that allows it, it syncs as any item.
    case readOnly
    /// Gave up after the allowed attempts; ``SyncEngine/retry(_:)`` tries again.
    case failed(SyncError)
}

/// One file or folder as the app shows it: the server's state with this device's pending changes applied.
public struct SyncItem: Sendable, Equatable, Identifiable {
    /// The item's stable local id.
    public var id: ItemID
    /// The server's id, once the item exists there.
    public var fileId: String?
    /// The folder it is in (`nil` for the root).
    public var parentId: ItemID?
    /// Its name in its folder (NFC-normalised).
    public var name: String
    /// Its MIME type; folders are `application/vnd.nimbus.folder`.
    public var mimeType: String
    /// Whether it is a folder.
    public var isFolder: Bool
    /// Its content's size in bytes (0 for folders).
    public var size: Int64
    /// The lowercase hex SHA-256 of its content, once known.
    public var checksum: String?
    /// The server revision this item shows (absent before its first upload).
    public var revisionId: String?
    /// When its content last changed.
    public var modifiedAt: Date
    /// Where its sync stands, for the UI.
    public var state: ItemState
    /// Kept downloaded ("available offline").
    public var isPinned: Bool
    /// Its current content is on this device.
    public var isAvailableOffline: Bool
}

/// How a conflict (changed here and there since the last sync) is settled.
public enum ConflictStrategy: String, Sendable, Codable, CaseIterable {
    /// Keep both: this device's version becomes `name (conflict from DEVICE YYYY-MM-DD).ext`.
    case keepBoth
    /// This device's version becomes the head; the other stays a revision.
    case lastWriterWins
    /// Mark the item `conflict` and wait for ``SyncEngine/resolveConflict(_:keeping:)``.
    case ask
}

/// The user's answer to a conflict.
public enum ConflictResolution: String, Sendable, Codable, CaseIterable {
    /// This device's version becomes the head (the server's stays a revision).
    case keepLocal
    /// The server's version stays the head (this device's is kept as a revision).
    case keepRemote
    /// Both stay: this device's version as a conflict copy.
    case keepBoth
}

/// The engine at a glance, for a status line.
public struct EngineStatus: Sendable, Equatable {
    /// What the engine is doing.
    public enum Phase: Sendable, Equatable {
        /// No account: nothing is sent or received.
        case signedOut
        /// Nothing to do.
        case idle
        /// Sending or receiving.
        case syncing
        /// The server could not be reached; retrying.
        case offline
        /// The server refused the credentials; nothing is sent until the user signs in again.
        case needsSignIn
        /// A pull would delete many items; waiting for ``SyncEngine/confirmMassDeletion()``.
        case awaitingDeletionConfirmation(count: Int)
    }

    /// What the engine is doing.
    public var phase: Phase
    /// Items with something to send or to bring here.
    public var pending: Int
    /// Items being sent.
    public var uploading: Int
    /// Items being fetched.
    public var downloading: Int
    /// Items changed here and there, waiting for the user.
    public var conflicts: Int
    /// Items deleted there while changed here, waiting for the user.
    public var unsynced: Int
    /// Items whose step failed for good (``SyncEngine/retry(_:)`` tries again).
    public var failed: Int
}

/// How the engine is set up.
public struct SyncConfiguration: Sendable {
    /// Where the database, tokens and content live (the app's private store).
    public var directory: URL
    /// Shown in conflict copies and on the server's device list.
    public var deviceName: String
    /// How conflicts are settled (keep both by default).
    public var conflictStrategy: ConflictStrategy = .keepBoth
    /// Attempts before an operation goes to `failed`.
    public var maxAttempts: Int = 5
    /// Backoff: first delay and cap (exponential with full jitter in between).
    public var backoffBase: Duration = .milliseconds(500)
    /// The longest wait between two attempts.
    public var backoffCap: Duration = .seconds(300)
    /// Metadata cache cap; least recently used entries that are not pinned, pending or local-only go first.
    public var metadataCacheLimit: Int64 = 200 * 1024 * 1024
    /// A round deleting more than this of the tree, on either side, waits for confirmation: by default over half of
    /// it and at least 10 items, or over 1,000 (the server's breaker uses the same rule with its own figures).
    public var massDeletionThreshold = MassDeletionThreshold.client
    /// Where tokens are kept; a 0600 file in `directory` by default.
    public var tokenStore: (any TokenStore)?
    /// How requests reach the server; AsyncHTTPClient by default. Tests inject faults here.
    public var transportFactory: (@Sendable (URL) -> any Transport)?
    /// The engine's time (backoff schedules); tests use a manual clock.
    public var clock: any SyncClock = SystemSyncClock()
    /// Seed for backoff jitter; a fixed seed makes a run repeatable.
    public var randomSeed: UInt64?
    /// How many steps run at once. Every step of one plan can run beside every other (what must wait for another
    /// comes in a later plan); 1 runs everything in turn.
    public var maxConcurrentOperations: Int = 4
    /// (Simulations) Steps that run at once take turns drawn from this seed, switching where they ask the remote
    /// (see `Turns`): the same overlaps, but a run replays exactly. Nil (always, outside tests): they truly overlap.
    var interleavingSeed: UInt64?
    /// New files up to this size go in one request (a simple upload with the item's request id, so a retry never
    /// makes a second file); bigger ones go as blocks (or, without ``blockUploads``, in resumable sessions).
    public var simpleUploadLimit: Int64 = 4 * 1024 * 1024
    /// New files over ``simpleUploadLimit`` and new versions of 1 MiB or more go to a Nimbus server as blocks: only
    /// the content-defined chunks it lacks, then a commit (resumable by nature). Off: sent whole, in resumable sessions.
    public var blockUploads = true
    /// New files up to `batchFileLimit` bytes that are ready together go up in one request
    /// (`uploadType=batch`), at most `maxBatchFiles` files and `maxBatchBytes` bytes per request: a tree of small
    /// files costs a round trip and a server commit per batch, not per file. `maxBatchFiles` 1 turns batching off.
    public var maxBatchFiles: Int = 100
    /// The largest file that goes in a batch.
    public var batchFileLimit: Int64 = 256 * 1024
    /// The most content a batch request carries.
    public var maxBatchBytes: Int64 = 8 * 1024 * 1024

    /// What this side is: the app's own store (the default: the library's view, changed by its actions), or a
    /// folder on disk that is scanned (folder sync).
    public var local: LocalSide = .appStore
    /// The remote, when it is not the Nimbus account the engine signs into (a folder pair with another provider):
    /// made once, with the store where it keeps its small state (resumable sessions) in the engine's database.
    public var provider: (@Sendable (any ProviderStateStore) -> any RemoteProvider)?
    /// Encryption at rest: set when the library is made, and the same way at every later open. Content
    /// (cached, pinned, staged uploads, partial downloads) is sealed in 64 KiB AES-256-GCM segments; names, failure
    /// messages and the provider's session state in the database are sealed too (`StoreCipher`). Opening an
    /// encrypted library without it, or with a wrong passphrase or key, throws ``EncryptionError`` (never an empty
    /// view). Files added to an encrypted library are always copied in (`copy: false` is taken as `true`).
    public var encryption: StoreEncryption?

    /// A configuration with the defaults: the engine keeps its state in `directory`; `deviceName` is shown
    /// in conflict copies and on the server's device list.
    public init(directory: URL, deviceName: String) {
        self.directory = directory
        self.deviceName = deviceName
    }
}

/// The local side of an engine.
public enum LocalSide: Sendable {
    /// The app's store: items change through the engine's actions; content is kept in the engine's folder.
    case appStore
    /// A folder on disk, scanned; `settleTime` is how long a file must be quiet before its content is taken
    /// (until then it is being written, and nothing from the other side touches it).
    case folder(URL, fileSystem: any FileSystem, settleTime: TimeInterval)
}

/// The engine's notion of now, injectable for deterministic tests.
public protocol SyncClock: Sendable {
    /// The current date, as the engine sees it.
    func now() -> Date
}

/// The system's clock.
public struct SystemSyncClock: SyncClock {
    /// The system's clock.
    public init() {}
    /// The current date.
    public func now() -> Date { Date() }
}
