import Foundation
import NIOConcurrencyHelpers

/// What a principal asks to do with an item (and, for a folder, with what is beneath it).
enum Action: String, CaseIterable, Sendable {
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
/// passes each through ``authorize(_:_:_:)`` with the action it will take.
///
/// Today there is one kind of principal with full rights on its own tree; another user's item is invisible — 404
/// `not_found`, exactly as an id that does not exist. Roles on shared items and public-link sessions change this
/// function and the data it reads, not the routes. What a principal may see but not do will be 403 `forbidden`.
struct AccessPolicy: Sendable {
    /// Decisions as they are made, when a test asks for them.
    let log: AccessLog?

    init(log: AccessLog? = nil) { self.log = log }

    /// `item` if `principal` may take `action` on it; otherwise the error to answer with (404 for what it may not
    /// see). The item's owner (`item.userId`) is whose tree the action then changes.
    @discardableResult
    func authorize(_ principal: Principal, _ item: FileRecord, _ action: Action) throws -> FileRecord {
        let visible = allows(principal, item, action)
        log?.record(AccessLog.Decision(userId: principal.userId, itemId: item.id, action: action, allowed: visible))
        guard visible else { throw DriveError.notFound("No such file or folder.") }
        return item
    }

    /// Whether `principal` may take `action` on `item`, asked without acting (no decision recorded): what a listing
    /// tells a client it could do (Nextcloud's `oc:permissions`). The same rule as ``authorize(_:_:_:)``.
    func allows(_ principal: Principal, _ item: FileRecord, _ action: Action) -> Bool {
        item.userId == principal.userId
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
