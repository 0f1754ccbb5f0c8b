import Foundation

/// One step the planner asks for. Every operation of one plan may run at the same time as every other (the
/// planner leaves out what must wait for another, such as a file whose folder does not exist there yet: it comes
/// in a later plan), and each has one defined effect on the trees when it succeeds (``Trees/apply(_:_:)``).
enum PlannedOperation: Sendable, Hashable, CustomStringConvertible {
    // There (through the provider)
    /// Creates the folder there, where the local node is.
    case createRemoteFolder(ItemID)
    /// Sends the local content: a new file where the local node is (`base` nil), or a new version of the remote
    /// file based on revision `base` (a conditional write: it fails if the remote head is no longer `base`).
    case upload(ItemID, base: String?)
    /// Moves or renames the item there.
    case moveRemote(ItemID, parent: ItemID, name: String)
    /// Sends the local content as a new version based on revision `base` (so it is kept in the history there), then
    /// makes `base` the head again: the user kept the remote version of a conflict (where the remote keeps
    /// revisions). The local file must still be as the plan saw it; the remote version comes here next.
    case uploadThenRestore(ItemID, base: String)
    /// Makes revision `revision` of the file there its head again: the user restored it here (``LocalNode/restoring``).
    case restoreRevision(ItemID, revision: String)
    /// Deletes the item there (to the provider's trash where it has one); a folder with its whole remote subtree,
    /// every item of which is deleted here too and unchanged there.
    case deleteRemote(ItemID)
    /// The remote file's SHA-256 is not known (a provider that keeps none, such as WebDAV) and it must be compared
    /// with a file here: its content is read once to learn it (the provider remembers it for that version). Nothing
    /// changes on either side; the remote tree gets the checksum.
    case learnChecksum(ItemID)
    /// An item deleted here while its creation was in doubt (sent, no answer recorded): the creation is asked for
    /// again with the same request id, so whatever it made there — then or now — is known (and deleted there by the
    /// next plan, like any item deleted here). Nothing made: the item is forgotten.
    case settleDoubt(ItemID)

    // Here
    /// Creates the folder here, where the remote node is.
    case createLocalFolder(ItemID)
    /// Brings the remote content here: in place of the local file, which must still be as the plan saw it (as
    /// synced), or, when there is no local node, as a new file where the remote node is.
    case download(ItemID)
    /// Moves or renames the item here; the local file must still be as the plan saw it.
    case moveLocal(ItemID, parent: ItemID, name: String)
    /// Deletes the item here, which must still be as the plan saw it (as synced); a folder with its local
    /// subtree, every item of which is deleted there too and unchanged here.
    case deleteLocal(ItemID)
    /// The file here becomes a placeholder of the remote version (``Placeholder``), which the merge base takes: made
    /// where the remote has it (new here), rewritten (a placeholder whose file changed there), or put in place of the
    /// file, which must still be as synced (freed). No content moves.
    case placeholder(ItemID)
    /// The item leaves this device and the merge base, and stays there (it is outside the pair's selection): a file
    /// or placeholder as synced, a folder with nothing left in it here. Nothing is deleted there.
    case evict(ItemID)

    // The merge base
    /// Both sides agree (on the content, the place, or that the item is gone): the synced tree takes it.
    case record(ItemID)
    /// The local-only item is the remote-only item `to` (made on both sides, or sent by a request whose answer
    /// was lost): one item, synced.
    case link(ItemID, to: ItemID)
    /// Deleted there but changed here, and kept: the item forgets its remote identity and is sent again as new.
    case forget(ItemID)

    // Conflicts
    /// Changed on both sides: this side's version becomes a new local-only item named `name` beside it (sent as a
    /// new file next); the item itself takes the remote version.
    case fork(ItemID, name: String)
    /// Waits for the user.
    case hold(ItemID, Hold)
    /// The reason to wait went away (the item is back there).
    case release(ItemID)

    var item: ItemID {
        switch self {
        case .createRemoteFolder(let id), .upload(let id, _), .uploadThenRestore(let id, _), .moveRemote(let id, _, _), .deleteRemote(let id), .createLocalFolder(let id),
            .download(let id), .moveLocal(let id, _, _), .deleteLocal(let id), .record(let id), .link(let id, _), .forget(let id),
            .learnChecksum(let id), .settleDoubt(let id), .restoreRevision(let id, _), .placeholder(let id), .evict(let id),
            .fork(let id, _), .hold(let id, _), .release(let id):
            id
        }
    }

    /// Talks to the provider (as opposed to changing only this side or the merge base).
    var isRemote: Bool {
        switch self {
        case .createRemoteFolder, .upload, .uploadThenRestore, .restoreRevision, .moveRemote, .deleteRemote, .settleDoubt: true
        default: false
        }
    }

    /// Moves content bytes (may take long; runs beside other transfers).
    var isTransfer: Bool {
        switch self {
        case .upload, .uploadThenRestore, .download, .learnChecksum: true
        default: false
        }
    }

    var description: String {
        switch self {
        case .createRemoteFolder(let id): "createRemoteFolder(\(id))"
        case .upload(let id, let base): "upload(\(id), base: \(base ?? "nil"))"
        case .uploadThenRestore(let id, let base): "uploadThenRestore(\(id), base: \(base))"
        case .moveRemote(let id, let parent, let name): "moveRemote(\(id) → \(parent)/\(name))"
        case .deleteRemote(let id): "deleteRemote(\(id))"
        case .learnChecksum(let id): "learnChecksum(\(id))"
        case .settleDoubt(let id): "settleDoubt(\(id))"
        case .restoreRevision(let id, let revision): "restoreRevision(\(id), \(revision))"
        case .createLocalFolder(let id): "createLocalFolder(\(id))"
        case .download(let id): "download(\(id))"
        case .moveLocal(let id, let parent, let name): "moveLocal(\(id) → \(parent)/\(name))"
        case .deleteLocal(let id): "deleteLocal(\(id))"
        case .placeholder(let id): "placeholder(\(id))"
        case .evict(let id): "evict(\(id))"
        case .record(let id): "record(\(id))"
        case .link(let id, let other): "link(\(id) = \(other))"
        case .forget(let id): "forget(\(id))"
        case .fork(let id, let name): "fork(\(id) → \(name))"
        case .hold(let id, let hold): "hold(\(id), \(hold))"
        case .release(let id): "release(\(id))"
        }
    }
}
