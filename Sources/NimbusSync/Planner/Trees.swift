import Foundation

/// The three trees the planner decides from (Dropbox Nucleus' model), keyed by item id:
/// - **remote**: the provider's state as last observed (a cache, fed by the change feed or a listing);
/// - **synced**: the merge base — the last state both sides agreed on, per item;
/// - **local**: what is observed here (a folder on disk, or the app's own store), including files whose new
///   content is not known yet because they are still being written.
///
/// A difference between remote and synced is a change made there; between local and synced, a change made
/// here; both, a conflict. Only the synced tree tells "deleted here" from "created there".
///
/// Beside them, `doubts`: items deleted here while their creation was in doubt (sent, no answer recorded), as they
/// were here — in no tree, yet what the request made there (if anything) is this side's to delete.
struct Trees: Sendable, Equatable {
    var remote: [ItemID: RemoteNode] = [:]
    var synced: [ItemID: RemoteNode] = [:]
    var local: [ItemID: LocalNode] = [:]
    var doubts: [ItemID: LocalNode] = [:]
    /// The user's word on keeping content here (``PinState``), per item that has one (a synced folder's).
    var pins: [ItemID: PinState] = [:]

    /// The root folder: present in all three trees, never planned for.
    static let root = ItemID.root

    init(remote: [ItemID: RemoteNode] = [:], synced: [ItemID: RemoteNode] = [:], local: [ItemID: LocalNode] = [:]) {
        self.remote = remote
        self.synced = synced
        self.local = local
        self.remote[Self.root] = self.remote[Self.root] ?? .rootFolder
        self.synced[Self.root] = self.synced[Self.root] ?? .rootFolder
        self.local[Self.root] = self.local[Self.root] ?? .rootFolder
    }
}

/// One item as the remote side has it (or, in the synced tree, as both sides last agreed on it).
struct RemoteNode: Sendable, Equatable {
    /// `nil` only for the root.
    var parent: ItemID?
    var name: String
    var isFolder: Bool
    /// The provider's version of the content (a revision id, an ETag); `nil` for folders.
    var revision: String?
    /// SHA-256 of the content when known (the Nimbus server always gives it; some providers never do).
    var checksum: String?
    var size: Int64 = 0
    /// What the user may not do with it there, and whether it comes through someone's share (``RemoteAccess``).
    var access: RemoteAccess = []

    static let rootFolder = RemoteNode(parent: nil, name: "", isFolder: true, revision: nil, checksum: nil)

    /// Same place (folder and name).
    func isAt(_ other: RemoteNode) -> Bool { parent == other.parent && name == other.name }
    func isAt(_ other: LocalNode) -> Bool { parent == other.parent && name == other.name }
}

/// What is known of a local file's content.
enum LocalContent: Sendable, Equatable {
    /// Settled content with this SHA-256 and size.
    case known(checksum: String, size: Int64)
    /// Changed since it was last looked at and still being written: its content is not known yet. Nothing from
    /// the other side may overwrite, move or delete it until it settles.
    case changing
    /// A new file, settled, whose content is not read yet: it goes there hashed as it is sent (a provider that
    /// ``HashesWhileSending``). Sent as a new item, and otherwise taken as ``changing``: nothing compares it,
    /// overwrites, moves or deletes it until it is known (the scan reads it first when anything might).
    case unhashed(size: Int64)

    var checksum: String? {
        if case .known(let checksum, _) = self { return checksum }
        return nil
    }

    /// Not known yet (``changing`` or ``unhashed``): never compared, overwritten, moved or deleted.
    var isUnknown: Bool {
        if case .known = self { return false }
        return true
    }
}

/// Why an item waits for the user instead of being synced — or, once the user has answered a conflict, what they
/// chose: a fact of the local tree that the planner turns into operations (``Planner``'s `resolve`).
enum Hold: String, Sendable, Equatable {
    /// Changed here and there (the `ask` policy): waits for a resolution.
    case conflict
    /// Deleted there while changed (or only present) here, under a policy that asks: waits for the user to
    /// keep it (sent again as a new item) or let it go.
    case unsynced
    /// The user kept this side's version of a conflict: it is sent as the head, based on the remote one.
    case keepLocal = "resolved-keep-local"
    /// The user kept the remote version: this side's goes there as a revision (where the remote keeps them, else as a
    /// conflict copy), and the remote version comes here.
    case keepRemote = "resolved-keep-remote"
    /// The user kept both: this side's version becomes a conflict copy.
    case keepBoth = "resolved-keep-both"
    /// Made or changed here inside a share the user may only view (``RemoteAccess/readOnly``): kept here, not sent;
    /// released when the folder it is in takes new items again (a new role), or when it is moved out.
    case readOnly = "read-only"

    /// The hold that carries out `resolution`.
    init(_ resolution: ConflictResolution) {
        switch resolution {
        case .keepLocal: self = .keepLocal
        case .keepRemote: self = .keepRemote
        case .keepBoth: self = .keepBoth
        }
    }

    /// The user's answer this hold carries out; nil while the item waits for the user.
    var resolution: ConflictResolution? {
        switch self {
        case .conflict, .unsynced, .readOnly: nil
        case .keepLocal: .keepLocal
        case .keepRemote: .keepRemote
        case .keepBoth: .keepBoth
        }
    }
}

/// One item as observed here.
struct LocalNode: Sendable, Equatable {
    /// `nil` only for the root.
    var parent: ItemID?
    var name: String
    var isFolder: Bool
    /// For files; folders have `.known("", 0)`-free content: ignored.
    var content: LocalContent = .known(checksum: "", size: 0)
    var hold: Hold?
    /// A request that creates this item there was sent, and no answer recorded: the item may already exist there
    /// (under the same request id). Until a retry settles it, the item is not taken for a different one.
    var creationInDoubt = false
    /// This content is revision `restoring` of the file there, which the user restored: it becomes the head there by
    /// restoring that revision (its bytes are there already).
    var restoring: String?
    /// A placeholder stands here for the file (``Placeholder``): its content is the merge base's, not on this device.
    var placeholder = false
    /// When the file was last used here (ms since 1970): the cache limit frees the least recently used first.
    var lastUsed: Int64 = 0

    static let rootFolder = LocalNode(parent: nil, name: "", isFolder: true)

    /// Holds the merge base's content: unchanged, or a placeholder of it (which can hold nothing else).
    func holdsContent(of synced: RemoteNode) -> Bool { placeholder || content.checksum == synced.checksum }

    func isAt(_ other: RemoteNode) -> Bool { parent == other.parent && name == other.name }
}
