import Foundation
import Hummingbird
import NIOFoundationCompat
import NimbusAPI

/// Grants (a role on an item for another user) and the grantee's side of them: incoming shares, accept, decline.
/// Every route asks the access decision: `share` on the item to grant or change grants (its owner, or a manager of a
/// share it is in — never for a role above their own), the grantee's own account for what is offered to them.
struct SharingController: Sendable {
    let dependencies: Dependencies

    func register(_ routes: inout RouteTable) {
        routes.on(Routes.createGrant, use: create)
        routes.on(Routes.grants, use: list)
        routes.on(Routes.outgoingGrants, use: outgoing)
        routes.on(Routes.updateGrant, use: update)
        routes.on(Routes.deleteGrant, use: delete)
        routes.on(Routes.incomingShares, use: incoming)
        routes.on(Routes.acceptShare, use: accept)
        routes.on(Routes.declineShare, use: decline)
    }

    @Sendable func create(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        let body = try await request.decode(as: GrantRequest.self, context: context)
        let item = try await dependencies.item(try context.parameter("fileId"), for: me, .share)
        // Only a root folder has no parent (a share's root, seen by a manager, has their mount's).
        guard item.parentId != nil else {
            throw DriveError.badRequest("Your root folder cannot be shared; share the folders in it.", code: .cannotShareRoot)
        }
        try Self.withinOwnRole(body.role, item)
        let expiresAt = try validExpiry(body.expiresAt)
        // An unknown user looks exactly like an item one may not see: no probing for who has an account.
        var found = try await dependencies.accounts.user(username: body.user)
        if found == nil { found = try await dependencies.accounts.user(id: body.user) }
        guard let grantee = found else { throw DriveError.notFound("No such file or folder.") }
        guard grantee.id != item.userId else { throw DriveError.badRequest("'\(grantee.username)' owns '\(item.name)' already.") }
        guard grantee.id != me.userId else { throw DriveError.badRequest("You cannot share '\(item.name)' with yourself.") }
        let grant = try await dependencies.shares.createGrant(
            ownerId: item.userId, itemId: item.id, granteeId: grantee.id, role: body.role, expiresAt: expiresAt, now: dependencies.now)
        return try JSONResponse.make(try await api(grant), status: .created)
    }

    @Sendable func list(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        let item = try await dependencies.item(try context.parameter("fileId"), for: me, .read)
        var grants = try await dependencies.shares.grants(ownerId: item.userId, itemId: item.id)
        // The owner and managers see everyone's; anyone else, their own.
        if !dependencies.access.allows(me, item, .share, reach: item.seenThrough) { grants = grants.filter { $0.granteeId == me.userId } }
        var shown: [Grant] = []
        for grant in grants { shown.append(try await api(grant)) }
        // Its links, to those who may make them (never their tokens: not in a list).
        var links: [Link] = []
        if dependencies.access.allows(me, item, .link, reach: item.seenThrough) {
            links = try await dependencies.links.links(ownerId: item.userId, itemId: item.id).map {
                LinksController.api($0, token: nil, request: request, tokens: dependencies.tokens)
            }
        }
        return try JSONResponse.make(GrantList(grants: shown, links: links))
    }

    /// Every grant on the user's own items ("shared by me").
    @Sendable func outgoing(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        _ = try await dependencies.root(for: me, .list)
        var shown: [Grant] = []
        for grant in try await dependencies.shares.grants(ownerId: me.userId) { shown.append(try await api(grant)) }
        return try JSONResponse.make(GrantList(grants: shown, links: []))
    }

    @Sendable func update(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        let body = try await request.decode(as: GrantUpdate.self, context: context)
        let grant = try await grant(try context.parameter("grantId"), for: me, .share)
        let item = try await dependencies.item(grant.itemId, for: me, .share)
        guard grant.granteeId != me.userId else {
            throw DriveError.forbidden("You cannot change your own grant; ask the owner of '\(item.name)'.")
        }
        if let role = body.role { try Self.withinOwnRole(role, item) }
        let updated = try await dependencies.shares.updateGrant(
            id: grant.id, role: body.role, expiresAt: try validExpiry(body.expiresAt), now: dependencies.now)
        return try JSONResponse.make(try await api(updated))
    }

    /// Ends a grant: by the owner or a manager (revoke), or by its grantee (who then no longer has it at all).
    @Sendable func delete(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        let id = try context.parameter("grantId")
        guard let found = try await dependencies.shares.grant(id: id) else { throw dependencies.access.notFound(me, itemId: id, .share) }
        if found.granteeId == me.userId {
            _ = try await dependencies.root(for: me, .list)
        } else {
            _ = try await grant(id, for: me, .share)
        }
        try await dependencies.shares.deleteGrant(id: id, now: dependencies.now)
        return Response(status: .noContent)
    }

    @Sendable func incoming(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        _ = try await dependencies.root(for: me, .list)
        var shares: [IncomingShare] = []
        for grant in try await dependencies.shares.incomingGrants(granteeId: me.userId, now: dependencies.now) {
            guard var item = try await dependencies.files.item(id: grant.itemId), !item.isTrashed else { continue }
            if let reach = try await dependencies.shares.reach(userId: me.userId, itemId: item.id, now: dependencies.now), reach.isRoot {
                item.seenThrough = reach
                item.mountId = reach.mount.id
                item.name = reach.mount.name
                item.parentId = reach.mount.parentId
            }
            shares.append(
                IncomingShare(
                    grant: try await api(grant), item: try await dependencies.present(item, for: me),
                    owner: UserRef(userId: grant.ownerId, username: try await dependencies.username(grant.ownerId))))
        }
        return try JSONResponse.make(IncomingShareList(shares: shares))
    }

    @Sendable func accept(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        let id = try context.parameter("grantId")
        // The body is optional: none places the share in the root under its own name.
        let raw = try await request.body.collect(upTo: context.maxUploadSize)
        let body = raw.readableBytes == 0 ? AcceptShareRequest() : try JSONDecoder.nimbus.decode(AcceptShareRequest.self, from: Data(buffer: raw))
        let name = try body.name.map(FilesController.validName)
        let parent = try await dependencies.item(body.parentId ?? "root", for: me, .create)
        guard parent.userId == me.userId, parent.mountId == nil else {
            throw DriveError.forbidden("A share can be placed only in your own folders.")
        }
        guard let grant = try await dependencies.shares.grant(id: id), grant.granteeId == me.userId else { throw DriveError.notFound("No such share.") }
        let (mount, file) = try await dependencies.shares.acceptGrant(id: grant.id, granteeId: me.userId, parentId: parent.id, name: name, now: dependencies.now)
        var root = file
        root.seenThrough = try await dependencies.shares.reach(userId: me.userId, itemId: file.id, now: dependencies.now)
        return try JSONResponse.make(AcceptedShare(mountId: mount.id, file: try await dependencies.present(root, for: me)))
    }

    @Sendable func decline(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        _ = try await dependencies.root(for: me, .list)
        try await dependencies.shares.declineGrant(id: try context.parameter("grantId"), granteeId: me.userId, now: dependencies.now)
        return Response(status: .noContent)
    }

    // MARK: Helpers

    /// The grant with this id, if `principal` may take `action` on its item (404 otherwise, as for an unknown id).
    private func grant(_ id: String, for principal: Principal, _ action: Action) async throws -> GrantRecord {
        guard let grant = try await dependencies.shares.grant(id: id) else { throw dependencies.access.notFound(principal, itemId: id, action) }
        _ = try await dependencies.item(grant.itemId, for: principal, action)
        return grant
    }

    /// A manager grants at most its own role (the owner, any).
    private static func withinOwnRole(_ role: ShareRole, _ item: FileRecord) throws {
        if let held = item.seenThrough?.role, role > held {
            throw DriveError.forbidden("You hold '\(held.rawValue)' on '\(item.name)' and cannot grant '\(role.rawValue)'.")
        }
    }

    private func validExpiry(_ date: Date?) throws -> Date? {
        guard let date else { return nil }
        guard date > dependencies.now else { throw DriveError.badRequest("'expiresAt' must be in the future.") }
        return date
    }

    private func api(_ grant: GrantRecord) async throws -> Grant {
        Grant(
            id: grant.id, itemId: grant.itemId, grantee: UserRef(userId: grant.granteeId, username: try await dependencies.username(grant.granteeId)),
            role: grant.role, state: grant.state, createdAt: grant.createdAt, expiresAt: grant.expiresAt)
    }
}
