import Crypto
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
        let item = try await dependencies.item(try context.parameter("fileId"), for: me, .link)
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
            expiresAt: try Self.validExpiry(body.expiresAt, now: now), maxDownloads: try Self.validMaxDownloads(body.maxDownloads), downloads: 0,
            createdAt: now, revokedAt: nil)
        // A password that is too weak is refused: never a link without the protection asked for.
        if let password = body.password { link.passwordHash = try await dependencies.hashPassword(try Self.validPassword(password)) }
        let token = dependencies.tokens.linkToken(link.id)
        link = try await dependencies.links.createLink(link, tokenHash: TokenService.hashLinkToken(token))
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
        let link = try await link(try context.parameter("linkId"), for: me)
        return try JSONResponse.make(api(link, token: dependencies.tokens.linkToken(link.id), request: request))
    }

    @Sendable func update(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        let body = try await request.decode(as: LinkUpdate.self, context: context)
        var link = try await link(try context.parameter("linkId"), for: me)
        if let password = body.password {
            // Empty: no password any more; otherwise a new one (sessions under the old one end).
            link.passwordHash = password.isEmpty ? nil : try await dependencies.hashPassword(try Self.validPassword(password))
        }
        if let expiresAt = body.expiresAt { link.expiresAt = try Self.validExpiry(expiresAt, now: dependencies.now) }
        if let maxDownloads = body.maxDownloads { link.maxDownloads = try Self.validMaxDownloads(maxDownloads) }
        link = try await dependencies.links.updateLink(link)
        return try JSONResponse.make(api(link, token: nil, request: request))
    }

    @Sendable func delete(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        let link = try await link(try context.parameter("linkId"), for: me)
        try await dependencies.links.revokeLink(id: link.id, now: dependencies.now)
        return Response(status: .noContent)
    }

    /// A live link of an item `principal` may make links for (404 otherwise, as for an unknown id).
    private func link(_ id: String, for principal: Principal) async throws -> LinkRecord {
        guard let link = try await dependencies.links.link(id: id), link.revokedAt == nil else {
            throw dependencies.access.notFound(principal, itemId: id, .link)
        }
        _ = try await dependencies.item(link.itemId, for: principal, .link)
        return link
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
            createdAt: link.createdAt)
    }

    static func validPassword(_ password: String) throws -> String {
        guard password.count >= 8 else {
            throw DriveError.badRequest("A link's password needs at least 8 characters; no link was made or changed.", code: .weakPassword)
        }
        guard password.utf8.count <= 72 else { throw DriveError.badRequest("A link's password can be at most 72 bytes.", code: .weakPassword) }
        return password
    }

    static func validExpiry(_ date: Date?, now: Date) throws -> Date? {
        guard let date else { return nil }
        guard date > now else { throw DriveError.badRequest("'expiresAt' must be in the future.") }
        return date
    }

    static func validMaxDownloads(_ count: Int?) throws -> Int? {
        guard let count else { return nil }
        guard (1...1_000_000_000).contains(count) else { throw DriveError.badRequest("'maxDownloads' must be a whole number from 1.") }
        return count
    }
}
