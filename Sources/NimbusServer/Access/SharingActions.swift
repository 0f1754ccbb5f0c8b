import Foundation
import NimbusAPI

/// What a principal does with grants and public links, whichever route it comes by — `/v1` (``SharingController``,
/// ``LinksController``) or Nextcloud's OCS share API (``OCSShares``): the checks live here once. Each asks the access
/// decision (`share` for grants, `link` for links: the owner, or a manager of a share the item is in), and refuses
/// what would be a side door: the root, a trashed item, a role above one's own, an edit link to what one may only
/// view, a past expiry, a weak password (never a link without the protection asked for).
struct SharingActions: Sendable {
    let dependencies: Dependencies

    // MARK: Grants

    /// A pending grant of `role` on the item to the user named `user` (a user name or id). An unknown user is 404
    /// exactly as an item one may not see: no probing for who has an account.
    func grant(_ me: Principal, itemId: String, user: String, role: ShareRole, expiresAt: Date?) async throws -> GrantRecord {
        let item = try await dependencies.item(itemId, for: me, .share)
        // Only a root folder has no parent (a share's root, seen by a manager, has their mount's).
        guard item.parentId != nil else {
            throw DriveError.badRequest("Your root folder cannot be shared; share the folders in it.", code: .cannotShareRoot)
        }
        try Self.withinOwnRole(role, item)
        let expiresAt = try validExpiry(expiresAt)
        var found = try await dependencies.accounts.user(username: user)
        if found == nil { found = try await dependencies.accounts.user(id: user) }
        guard let grantee = found else { throw DriveError.notFound("No such file or folder.") }
        guard grantee.id != item.userId else { throw DriveError.badRequest("'\(grantee.username)' owns '\(item.name)' already.") }
        guard grantee.id != me.userId else { throw DriveError.badRequest("You cannot share '\(item.name)' with yourself.") }
        return try await dependencies.shares.createGrant(
            ownerId: item.userId, itemId: item.id, granteeId: grantee.id, role: role, expiresAt: expiresAt, now: dependencies.now)
    }

    /// A new role or expiry (nil: unchanged), by the owner or a manager — never for their own grant, never above
    /// their own role. It takes effect on the next request.
    func updateGrant(_ me: Principal, id: String, role: ShareRole?, expiresAt: Date?) async throws -> GrantRecord {
        let grant = try await grant(id, for: me, .share)
        let item = try await dependencies.item(grant.itemId, for: me, .share)
        guard grant.granteeId != me.userId else {
            throw DriveError.forbidden("You cannot change your own grant; ask the owner of '\(item.name)'.")
        }
        if let role { try Self.withinOwnRole(role, item) }
        return try await dependencies.shares.updateGrant(id: grant.id, role: role, expiresAt: try validExpiry(expiresAt), now: dependencies.now)
    }

    /// Ends a grant: by the owner or a manager (revoke), or by its grantee (who then no longer has it at all).
    func endGrant(_ me: Principal, id: String) async throws {
        guard let found = try await dependencies.shares.grant(id: id) else { throw dependencies.access.notFound(me, itemId: id, .share) }
        if found.granteeId == me.userId {
            _ = try await dependencies.root(for: me, .list)
        } else {
            _ = try await grant(id, for: me, .share)
        }
        try await dependencies.shares.deleteGrant(id: id, now: dependencies.now)
    }

    /// Mounts a grant offered to `me` in their folder `parentId` (their root by default) under `name` (the item's by
    /// default); returns the mount and its root as they see it.
    func accept(_ me: Principal, grantId: String, parentId: String?, name: String?) async throws -> (mount: MountRecord, file: FileRecord) {
        let name = try name.map(FilesController.validName)
        let parent = try await dependencies.item(parentId ?? "root", for: me, .create)
        guard parent.userId == me.userId, parent.mountId == nil else {
            throw DriveError.forbidden("A share can be placed only in your own folders.")
        }
        guard let grant = try await dependencies.shares.grant(id: grantId), grant.granteeId == me.userId else { throw DriveError.notFound("No such share.") }
        var (mount, file) = try await dependencies.shares.acceptGrant(id: grant.id, granteeId: me.userId, parentId: parent.id, name: name, now: dependencies.now)
        file.seenThrough = try await dependencies.shares.reach(userId: me.userId, itemId: file.id, now: dependencies.now)
        return (mount, file)
    }

    /// Declines a grant offered to `me`, or leaves an accepted one (it can be accepted again).
    func decline(_ me: Principal, grantId: String) async throws {
        _ = try await dependencies.root(for: me, .list)
        try await dependencies.shares.declineGrant(id: grantId, granteeId: me.userId, now: dependencies.now)
    }

    /// The grant with this id, if `principal` may take `action` on its item (404 otherwise, as for an unknown id).
    func grant(_ id: String, for principal: Principal, _ action: Action) async throws -> GrantRecord {
        guard let grant = try await dependencies.shares.grant(id: id) else { throw dependencies.access.notFound(principal, itemId: id, action) }
        _ = try await dependencies.item(grant.itemId, for: principal, action)
        return grant
    }

    /// A manager grants at most its own role (the owner, any).
    static func withinOwnRole(_ role: ShareRole, _ item: FileRecord) throws {
        if let held = item.seenThrough?.role, role > held {
            throw DriveError.forbidden("You hold '\(held.rawValue)' on '\(item.name)' and cannot grant '\(role.rawValue)'.")
        }
    }

    /// An expiry must be in the future (400 otherwise); nil is none.
    func validExpiry(_ date: Date?) throws -> Date? {
        guard let date else { return nil }
        guard date > dependencies.now else { throw DriveError.badRequest("'expiresAt' must be in the future.") }
        return date
    }

    func api(_ grant: GrantRecord) async throws -> Grant {
        Grant(
            id: grant.id, itemId: grant.itemId, grantee: UserRef(userId: grant.granteeId, username: try await dependencies.username(grant.granteeId)),
            role: grant.role, state: grant.state, createdAt: grant.createdAt, expiresAt: grant.expiresAt)
    }

    // MARK: Links

    /// A new link to the item; returns it with its token (shown this once in a list-free answer).
    func createLink(_ me: Principal, itemId: String, _ body: LinkRequest) async throws -> (link: LinkRecord, token: String) {
        let item = try await dependencies.item(itemId, for: me, .link)
        guard item.parentId != nil || item.userId != me.userId else {
            throw DriveError.badRequest("Your root folder cannot be shared; share the folders in it.", code: .cannotShareRoot)
        }
        guard !item.isTrashed else { throw DriveError.badRequest("'\(item.name)' is in the trash; restore it first.", code: .trashed) }
        if body.access == .upload, !item.isFolder {
            throw DriveError.badRequest("An upload link drops files into a folder; '\(item.name)' is a file.", code: .notAFolder)
        }
        if body.access == .edit, item.seenThrough.map({ $0.role < .editor }) ?? false {
            throw DriveError.forbidden("You cannot make an edit link to what you may only view.")
        }
        let now = dependencies.now
        var link = LinkRecord(
            id: "ln" + randomToken(), ownerId: item.userId, itemId: item.id, access: body.access, passwordHash: nil,
            expiresAt: try validExpiry(body.expiresAt), maxDownloads: try Self.validMaxDownloads(body.maxDownloads), downloads: 0,
            createdAt: now, revokedAt: nil)
        // A password that is too weak is refused: never a link without the protection asked for.
        if let password = body.password { link.passwordHash = try await dependencies.hashPassword(try Self.validPassword(password)) }
        let token = dependencies.tokens.linkToken(link.id)
        link = try await dependencies.links.createLink(link, tokenHash: TokenService.hashLinkToken(token))
        return (link, token)
    }

    /// A new password (empty: none any more; sessions under the old one end), expiry or download limit.
    func updateLink(_ me: Principal, id: String, _ body: LinkUpdate) async throws -> LinkRecord {
        var link = try await link(id, for: me)
        if let password = body.password {
            link.passwordHash = password.isEmpty ? nil : try await dependencies.hashPassword(try Self.validPassword(password))
        }
        if let expiresAt = body.expiresAt { link.expiresAt = try validExpiry(expiresAt) }
        if let maxDownloads = body.maxDownloads { link.maxDownloads = try Self.validMaxDownloads(maxDownloads) }
        return try await dependencies.links.updateLink(link)
    }

    func revokeLink(_ me: Principal, id: String) async throws {
        let link = try await link(id, for: me)
        try await dependencies.links.revokeLink(id: link.id, now: dependencies.now)
    }

    /// A live link of an item `principal` may make links for (404 otherwise, as for an unknown id).
    func link(_ id: String, for principal: Principal) async throws -> LinkRecord {
        guard let link = try await dependencies.links.link(id: id), link.revokedAt == nil else {
            throw dependencies.access.notFound(principal, itemId: id, .link)
        }
        _ = try await dependencies.item(link.itemId, for: principal, .link)
        return link
    }

    static func validPassword(_ password: String) throws -> String {
        guard password.count >= 8 else {
            throw DriveError.badRequest("A link's password needs at least 8 characters; no link was made or changed.", code: .weakPassword)
        }
        guard password.utf8.count <= 72 else { throw DriveError.badRequest("A link's password can be at most 72 bytes.", code: .weakPassword) }
        return password
    }

    static func validMaxDownloads(_ count: Int?) throws -> Int? {
        guard let count else { return nil }
        guard (1...1_000_000_000).contains(count) else { throw DriveError.badRequest("'maxDownloads' must be a whole number from 1.") }
        return count
    }
}

extension Dependencies {
    /// Grants and links, by any route (``SharingActions``).
    var sharing: SharingActions { SharingActions(dependencies: self) }
}
