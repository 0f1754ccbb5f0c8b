import Foundation
import NIOConcurrencyHelpers
import NimbusAPI

/// What a principal asks to do with an item (and, for a folder, with what is beneath it).
enum Action: String, CaseIterable, Sendable, Hashable {
    /// See a folder's children, or the item's metadata in a listing.
    case list
    /// Read content, metadata, revisions, manifests.
    case read
    /// A thumbnail or preview of the content.
    case preview
    /// A new version of a file's content, or its properties (WebDAV `PROPPATCH`, locks).
    case write
    /// A new item inside a folder.
    case create
    /// A new name in the same folder.
    case rename
    /// Into another folder.
    case move
    /// To the trash.
    case trash
    /// Back from the trash, or an older revision made the head.
    case restore
    /// Deleted for good.
    case purge
    /// Grants to other people.
    case share
    /// Public links.
    case link
}

/// The one place the server decides who may do what: every route — `/v1` (files, content, revisions, blocks,
/// uploads, changes, events) and WebDAV (every verb) — fetches the items it acts on without regard to who asks and
/// passes each through ``authorize(_:_:_:reach:)`` with the action it will take.
///
/// An item's owner may do anything with it. Another user sees it only through a grant on it or a folder above it,
/// accepted and not expired (``Reach``, read by ``Dependencies/item(_:for:_:)``), and may do what the grant's role
/// allows (``allowed(_:)``); everyone else gets 404 `not_found`, exactly as for an id that does not exist. What a
/// principal may see but not do is 403 `forbidden`. Public-link sessions will be one more kind of principal here,
/// not further checks in the routes.
struct AccessPolicy: Sendable {
    /// Decisions as they are made, when a test asks for them.
    let log: AccessLog?

    init(log: AccessLog? = nil) { self.log = log }

    /// `item` if `principal` may take `action` on it; otherwise the error to answer with (404 for what it may not
    /// see, 403 for what it may see but not do). `reach`: how the principal reaches an item of someone else's. The
    /// item's owner (`item.userId`) is whose tree the action then changes.
    @discardableResult
    func authorize(_ principal: Principal, _ item: FileRecord, _ action: Action, reach: Reach? = nil, link: LinkScope? = nil) throws -> FileRecord {
        let visible = sees(principal, item, reach: reach, link: link)
        let allowed = visible && allows(principal, item, action, reach: reach, link: link)
        log?.record(AccessLog.Decision(userId: principal.userId, itemId: item.id, action: action, allowed: allowed))
        guard visible else { throw DriveError.notFound("No such file or folder.") }
        guard allowed else {
            if let link { throw DriveError.forbidden("This link (\(link.link.access.rawValue)) does not allow this.") }
            throw DriveError.forbidden("Your role on '\(item.name)' (\(reach?.role.rawValue ?? "none")) does not allow this; ask its owner.")
        }
        return item
    }

    /// Whether `principal` may see `item` at all.
    func sees(_ principal: Principal, _ item: FileRecord, reach: Reach? = nil, link: LinkScope? = nil) -> Bool {
        // A link reaches what is live beneath its item: never what is in the trash (its owner's to restore or purge).
        if let link { return link.inside && item.userId == link.link.ownerId && !item.isTrashed }
        return item.userId == principal.userId || reach != nil
    }

    /// Whether `principal` may take `action` on `item`, asked without acting (no decision recorded): what a listing
    /// tells a client it could do (Nextcloud's `oc:permissions`, `File.capabilities`). The same rule as
    /// ``authorize(_:_:_:reach:)``.
    func allows(_ principal: Principal, _ item: FileRecord, _ action: Action, reach: Reach? = nil, link: LinkScope? = nil) -> Bool {
        if let link { return sees(principal, item, link: link) && Self.allowed(link.link.access).contains(action) }
        if item.userId == principal.userId { return true }
        guard let reach else { return false }
        // The share's root is the grantee's mount: renaming, moving or deleting it changes their tree only.
        if reach.isRoot, Self.mountActions.contains(action) { return true }
        return Self.allowed(reach.role).contains(action)
    }

    /// What a grantee may do to a share's root: it acts on their mount, never on the owner's item.
    static let mountActions: Set<Action> = [.rename, .move, .trash, .purge]

    /// What each role allows inside a share. The owner alone purges, and moves items out of it.
    static func allowed(_ role: ShareRole) -> Set<Action> {
        switch role {
        case .viewer: [.list, .read, .preview]
        case .editor: [.list, .read, .preview, .write, .create, .rename, .move, .trash, .restore]
        case .manager: [.list, .read, .preview, .write, .create, .rename, .move, .trash, .restore, .share, .link]
        }
    }

    /// What each kind of link allows on what it links to (and, a folder, what is beneath it). An upload link ("file
    /// drop") adds files and sees nothing.
    static func allowed(_ access: Link.Access) -> Set<Action> {
        switch access {
        case .view: [.list, .read, .preview]
        case .edit: [.list, .read, .preview, .create, .write]
        case .upload: [.create]
        }
    }

    /// For an item that was not found at all: recorded as a refusal like any other, so a test can tell that a route
    /// asked (a missing id and another user's id must look the same).
    func notFound(_ principal: Principal, itemId: String, _ action: Action) -> DriveError {
        log?.record(AccessLog.Decision(userId: principal.userId, itemId: itemId, action: action, allowed: false))
        return DriveError.notFound("No such file or folder.")
    }
}

/// The access decisions a server made, for tests that prove every route asks (``AccessPolicy``).
final class AccessLog: Sendable {
    struct Decision: Sendable, Equatable {
        var userId: String
        var itemId: String
        var action: Action
        var allowed: Bool
    }

    private let decisions = NIOLockedValueBox<[Decision]>([])

    func record(_ decision: Decision) {
        decisions.withLockedValue { list in
            if list.count >= 10_000 { list.removeFirst(list.count / 2) }
            list.append(decision)
        }
    }

    /// Everything recorded since the last call, emptying the log.
    func take() -> [Decision] { decisions.withLockedValue { list in defer { list = [] }; return list } }
}

/// How a public-link session stands to an item: the link, and whether the item is the linked item or beneath it.
struct LinkScope: Sendable, Equatable {
    var link: LinkRecord
    var inside: Bool
}
