import Foundation
import Hummingbird
import NIOFoundationCompat
import NimbusAPI

/// Public links, the side of anyone who has one (no account): what the link is, a session (its password), the
/// folder's items, their content, a file drop. Each request acts as the link's principal through the access
/// decision (``LinkScope``: the linked item and what is beneath it, with what the link's kind allows).
///
/// Guessing is throttled per client address: tokens that name no link (enumeration) and, per link, wrong passwords
/// — 5 failures, then 429 with `Retry-After`, doubling — so one address's guesses never lock out another's.
struct PublicController: Sendable {
    let dependencies: Dependencies

    /// How long a session lasts.
    static let sessionLifetime: TimeInterval = 12 * 3600
    /// Unknown tokens an address may present within the window before it is made to wait.
    static let unknownTokensAllowed = 20

    func register(_ routes: inout RouteTable) {
        routes.on(Routes.publicLink, use: info)
        routes.on(Routes.publicSession, use: session)
        routes.on(Routes.publicItems, use: items)
        routes.on(Routes.publicContent, use: content)
        routes.on(Routes.publicUpload, use: upload)
    }

    @Sendable func info(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let link = try await live(try context.parameter("token"), context: context)
        let item = try await item(link.itemId, of: link, .list, orAction: .create)
        return try JSONResponse.make(
            PublicLinkInfo(
                itemId: item.id, name: item.name, isFolder: item.isFolder, size: item.size, mimeType: item.mimeType, access: link.access, expiresAt: link.expiresAt,
                passwordRequired: link.passwordHash != nil))
    }

    @Sendable func session(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let link = try await live(try context.parameter("token"), context: context)
        let raw = try await request.body.collect(upTo: context.maxUploadSize)
        let body = raw.readableBytes == 0 ? LinkSessionRequest() : try JSONDecoder.nimbus.decode(LinkSessionRequest.self, from: Data(buffer: raw))
        let now = dependencies.now
        if let hash = link.passwordHash {
            let key = "link:\(link.id)|ip:\(context.remoteIP)"
            if let wait = try await dependencies.accounts.loginLockout(key: key, now: now) {
                throw DriveError.tooManyRequests("Too many wrong passwords for this link from your address; wait \(wait) seconds.", retryAfter: wait)
            }
            guard let password = body.password, try await dependencies.verifyPassword(password, hash: hash) else {
                try await dependencies.accounts.recordLoginFailure(
                    key: key, now: now, allowed: 5, lockout: dependencies.configuration.loginLockout.timeInterval)
                throw DriveError.unauthorizedCode("The password is not right.", code: .passwordIncorrect)
            }
            try await dependencies.accounts.clearLoginFailures(key: key)
        }
        let expiresAt = now.addingTimeInterval(Self.sessionLifetime)
        let session = dependencies.tokens.linkSession(link.id, passwordHash: link.passwordHash, expiresAt: expiresAt)
        return try JSONResponse.make(LinkSession(session: session, expiresAt: expiresAt))
    }

    @Sendable func items(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let link = try await signedIn(request, context: context)
        let paging = try Paging.parse(page: request.query("page"), limit: request.query("limit"))
        let folder = try await item(request.query("parentId") ?? link.itemId, of: link, .list)
        guard folder.isFolder else { throw DriveError.badRequest("'\(folder.name)' is a file, not a folder.", code: .notAFolder) }
        let (files, total) = try await dependencies.files.children(of: folder.id, userId: folder.userId, paging: paging, order: .byName, mountsAt: nil)
        // What anyone with the link sees: names, sizes, times — no owner, and the linked item has no parent.
        let shown = files.map { record -> File in
            var file = record.api
            file.downloadUrl = nil
            return file
        }
        return try JSONResponse.make(
            FileList(files: shown, pagination: paging.pagination(totalItems: total)))
    }

    @Sendable func content(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let link = try await signedIn(request, context: context)
        let file = try await item(try context.parameter("itemId"), of: link, .read)
        guard !file.isFolder, let revisionId = file.headRevisionId else {
            throw DriveError.badRequest("'\(file.name)' is a folder; it has no content.", code: .isAFolder)
        }
        let revision = try await dependencies.content.revision(userId: file.userId, fileId: file.id, revisionId: revisionId)
        // A whole download counts toward the link's limit (a range of a download under way does not).
        if request.headers[.range] == nil, request.method != .head, !(try await dependencies.links.countDownload(linkId: link.id)) {
            throw DriveError.gone("This link has been used as many times as it may be.")
        }
        return try await ContentController(dependencies: dependencies).stream(revision, name: file.name, request: request, userId: file.userId)
    }

    /// A file into the linked folder (upload and edit links). A taken name gets `name (1)`; the answer is the same
    /// either way, so a file drop tells nothing of what the folder holds.
    @Sendable func upload(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let link = try await signedIn(request, context: context)
        let folder = try await item(link.itemId, of: link, .create)
        guard folder.isFolder else { throw DriveError.badRequest("Files go into a folder; this link is to a file.", code: .notAFolder) }
        guard let raw = request.query("name") else { throw DriveError.badRequest("Give the file a 'name'.") }
        let name = try FilesController.validName(raw)
        let intake = dependencies.intake
        let declared = try intake.admit(request)
        let content = try await intake.receive(
            request, declared: declared, owner: folder.userId,
            mimeType: try FilesController.validContentMimeType(UploadController.sentType(request) ?? MimeType.guess(forName: name)))
        let file = try await intake.commit(content, to: .new(parentId: folder.id, name: name, policy: .rename), owner: folder.userId)
        return try JSONResponse.make(PublicUpload(received: true, size: file.size), status: .created)
    }

    // MARK: Helpers

    /// The link a token names, if it works: unknown → 404 (counted against the address: guessing is throttled),
    /// turned off, expired or used up, or its owner's account disabled by the operator → 410.
    private func live(_ token: String, context: NimbusRequestContext) async throws -> LinkRecord {
        let key = "link-token|ip:\(context.remoteIP)"
        let now = dependencies.now
        if let wait = try await dependencies.accounts.loginLockout(key: key, now: now) {
            throw DriveError.tooManyRequests("Too many unknown links from your address; wait \(wait) seconds.", retryAfter: wait)
        }
        guard token.count <= 64, let link = try await dependencies.links.link(tokenHash: TokenService.hashLinkToken(token)) else {
            try await dependencies.accounts.recordLoginFailure(
                key: key, now: now, allowed: Self.unknownTokensAllowed, lockout: dependencies.configuration.loginLockout.timeInterval)
            throw DriveError.notFound("No such link.")
        }
        if let reason = link.ended(at: now) { throw DriveError.gone(reason) }
        // (An account disabled because it leaked may have handed out links: they stop with it, and work again if
        // it is enabled.)
        if try await dependencies.accounts.user(id: link.ownerId)?.disabledAt != nil {
            throw DriveError.gone("This link is off: its owner's account is disabled.")
        }
        return link
    }

    /// The link, for the calls that need its session when it has a password (`Authorization: Bearer <session>`).
    private func signedIn(_ request: Request, context: NimbusRequestContext) async throws -> LinkRecord {
        let link = try await live(try context.parameter("token"), context: context)
        guard link.passwordHash != nil else { return link }
        let header = request.headers[.authorization] ?? ""
        let session = header.lowercased().hasPrefix("bearer ") ? String(header.dropFirst(7)) : ""
        guard dependencies.tokens.verifyLinkSession(session, linkId: link.id, passwordHash: link.passwordHash, now: dependencies.now) else {
            throw DriveError.unauthorizedCode(
                "This link has a password: POST it to /v1/public/{token}/session, then send the session as 'Authorization: Bearer <session>'.",
                code: .passwordRequired)
        }
        return link
    }

    /// `id`, through the access decision as the link's principal (the linked item or beneath it).
    private func item(_ id: String, of link: LinkRecord, _ action: Action, orAction other: Action? = nil) async throws -> FileRecord {
        let principal = Principal.link(link.id)
        Acting.current?.record(principal)
        guard let found = try await dependencies.files.item(id: id) else { throw dependencies.access.notFound(principal, itemId: id, action) }
        var inside = false
        if found.userId == link.ownerId { inside = try await dependencies.links.ancestors(of: found.id).contains(link.itemId) }
        let scope = LinkScope(link: link, inside: inside)
        // What the link is may be seen by any of its kinds (an upload link's page names the folder it drops into).
        if let other, dependencies.access.allows(principal, found, other, link: scope) {
            return try dependencies.access.authorize(principal, found, other, link: scope)
        }
        return try dependencies.access.authorize(principal, found, action, link: scope)
    }
}
