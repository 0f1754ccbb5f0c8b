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
        let grant = try await dependencies.sharing.grant(
            me, itemId: try context.parameter("fileId"), user: body.user, role: body.role, expiresAt: body.expiresAt)
        return try JSONResponse.make(try await dependencies.sharing.api(grant), status: .created)
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
        let updated = try await dependencies.sharing.updateGrant(me, id: try context.parameter("grantId"), role: body.role, expiresAt: body.expiresAt)
        return try JSONResponse.make(try await api(updated))
    }

    /// Ends a grant: by the owner or a manager (revoke), or by its grantee (who then no longer has it at all).
    @Sendable func delete(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        try await dependencies.sharing.endGrant(me, id: try context.parameter("grantId"))
        return Response(status: .noContent)
    }

    @Sendable func incoming(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        _ = try await dependencies.root(for: me, .list)
        var shares: [IncomingShare] = []
        for grant in try await dependencies.shares.incomingGrants(granteeId: me.userId, now: dependencies.now) {
            guard var item = try await dependencies.files.item(id: grant.itemId), !item.isTrashed else { continue }
            if let reach = try await dependencies.shares.reach(userId: me.userId, itemId: item.id, now: dependencies.now), reach.isRoot {
                item = item.seen(through: reach)
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
        // The body is optional: none places the share in the root under its own name.
        let raw = try await request.body.collect(upTo: context.maxUploadSize)
        let body = raw.readableBytes == 0 ? AcceptShareRequest() : try JSONDecoder.nimbus.decode(AcceptShareRequest.self, from: Data(buffer: raw))
        let (mount, root) = try await dependencies.sharing.accept(me, grantId: try context.parameter("grantId"), parentId: body.parentId, name: body.name)
        return try JSONResponse.make(AcceptedShare(mountId: mount.id, file: try await dependencies.present(root, for: me)))
    }

    @Sendable func decline(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        try await dependencies.sharing.decline(me, grantId: try context.parameter("grantId"))
        return Response(status: .noContent)
    }

    // MARK: Helpers

    private func api(_ grant: GrantRecord) async throws -> Grant { try await dependencies.sharing.api(grant) }
}
