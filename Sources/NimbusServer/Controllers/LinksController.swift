import Foundation
import Hummingbird
import NimbusAPI

/// Public links, the owner's side: make one (view, edit, or upload-only), list, show (with its token), change, turn
/// off. The access decision's `link` action on the item: its owner, or a manager of a share it is in.
struct LinksController: Sendable {
    let dependencies: Dependencies

    func register(_ routes: inout RouteTable) {
        routes.on(Routes.createLink, use: create)
        routes.on(Routes.links, use: list)
        routes.on(Routes.link, use: get)
        routes.on(Routes.updateLink, use: update)
        routes.on(Routes.deleteLink, use: delete)
    }

    @Sendable func create(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        let body = try await request.decode(as: LinkRequest.self, context: context)
        let (link, token) = try await dependencies.sharing.createLink(me, itemId: try context.parameter("fileId"), body)
        return try JSONResponse.make(api(link, token: token, request: request), status: .created)
    }

    @Sendable func list(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        _ = try await dependencies.root(for: me, .list)
        let links = try await dependencies.links.links(ownerId: me.userId, itemId: nil)
        return try JSONResponse.make(LinkList(links: links.map { api($0, token: nil, request: request) }))
    }

    @Sendable func get(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        let link = try await dependencies.sharing.link(try context.parameter("linkId"), for: me)
        return try JSONResponse.make(api(link, token: dependencies.tokens.linkToken(link.id), request: request))
    }

    @Sendable func update(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        let body = try await request.decode(as: LinkUpdate.self, context: context)
        let link = try await dependencies.sharing.updateLink(me, id: try context.parameter("linkId"), body)
        return try JSONResponse.make(api(link, token: nil, request: request))
    }

    @Sendable func delete(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        try await dependencies.sharing.revokeLink(me, id: try context.parameter("linkId"))
        return Response(status: .noContent)
    }

    func api(_ link: LinkRecord, token: String?, request: Request) -> Link {
        Self.api(link, token: token, request: request, tokens: dependencies.tokens)
    }

    /// The link as its owner sees it; its URL (which holds the token) only when `token` is given.
    static func api(_ link: LinkRecord, token: String?, request: Request, tokens: TokenService) -> Link {
        let scheme = request.headers[.init("X-Forwarded-Proto")!] ?? "http"
        let host = request.head.authority ?? "localhost"
        return Link(
            id: link.id, url: token.map { "\(scheme)://\(host)/s/\($0)" } ?? "\(scheme)://\(host)/s/…", token: token, access: link.access,
            expiresAt: link.expiresAt, maxDownloads: link.maxDownloads, downloads: link.downloads, passwordSet: link.passwordHash != nil,
            createdAt: link.createdAt, itemId: link.itemId)
    }
}
