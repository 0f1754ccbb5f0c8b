import Foundation
import Hummingbird
import NimbusAPI

/// The routes Nextcloud's apps need besides WebDAV (which ``DAVMiddleware`` serves at `/remote.php/…`), so the
/// official desktop, iOS and Android apps sign in and sync with Nimbus as with a Nextcloud server:
/// - `GET /status.php`: what the apps ask first (installed, not in maintenance, a Nextcloud version they accept);
/// - OCS at `/ocs/v1.php/…` and `/ocs/v2.php/…` (``OCSResponder``): `cloud/capabilities` (public), `cloud/user`,
///   `cloud/users/{id}`, `core/getapppassword`, `DELETE core/apppassword` (an app signing out), and the share API
///   (``OCSShares``);
/// - Login Flow v2 and v1 at `/index.php/login/…` (``LoginFlow``);
/// - previews at `/index.php/core/preview` and `…/preview.png`: 404 while the server makes no thumbnails, matching
///   `nc:has-preview` false, so an app shows its file icon rather than a broken image.
///
/// Nextcloud serves `/index.php/X` as `/X` too ("pretty URLs"); both are answered. A middleware rather than `/v1`
/// routes: these paths and shapes are Nextcloud's, not in `openapi.yaml`.
struct NextcloudMiddleware: RouterMiddleware {
    typealias Context = NimbusRequestContext
    let dependencies: Dependencies

    /// The Nextcloud release whose protocol this server follows (the apps check it is recent enough).
    static let version = (major: 28, minor: 0, micro: 0)
    static var versionString: String { "\(version.major).\(version.minor).\(version.micro)" }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let path = request.uri.path
        if path == "/status.php" { return status(request) }
        if path.hasPrefix("/ocs/v1.php/") || path.hasPrefix("/ocs/v2.php/") {
            return try await OCSRoutes(dependencies: dependencies, request: request, context: context).respond(path: path)
        }
        let route = path.hasPrefix("/index.php/") ? String(path.dropFirst("/index.php".count)) : path
        if route == "/login/v2" || route.hasPrefix("/login/v2/") || route == "/login/flow" || route.hasPrefix("/login/flow/") {
            return try await LoginFlow(dependencies: dependencies, request: request, context: context).respond(route: route)
        }
        if route == "/core/preview" || route == "/core/preview.png" {
            return try await preview(request, context: context)
        }
        if route == "/204" { return Response(status: .noContent) }
        return try await next(request, context)
    }

    func status(_ request: Request) -> Response {
        let body = OCSValue.object([
            ("installed", .bool(true)), ("maintenance", .bool(false)), ("needsDbUpgrade", .bool(false)),
            ("version", .string(Self.versionString + ".0")), ("versionstring", .string(Self.versionString)), ("edition", .string("")),
            ("productname", .string("Nimbus")), ("extendedSupport", .bool(false)),
        ]).json
        return Response(
            status: .ok, headers: [.contentType: "application/json; charset=utf-8", .cacheControl: "no-store"],
            body: .init(byteBuffer: ByteBuffer(string: body)))
    }

    /// A preview of a file the principal may see; none is made yet, so 404 — after signing in, and for a file that
    /// does not exist or is not theirs the same 404.
    func preview(_ request: Request, context: Context) async throws -> Response {
        let principal: Principal
        switch try await dependencies.signIn(basicAuthorization: request.headers[.authorization], remoteIP: context.remoteIP) {
        case .signedIn(let signedIn, _): principal = signedIn
        case .lockedOut(let wait):
            return Self.text(.tooManyRequests, "Too many failed sign-ins for this account from this address; try again in \(wait) s.", [.retryAfter: String(wait)])
        case .missing, .malformed, .refused:
            return Self.text(.unauthorized, "Sign in with your user name and an app password.", DAVRequest.challenge)
        }
        let query = request.uri.queryParameters
        var found: FileRecord?
        if let text = query.get("fileId"), let number = NextcloudIDs.number(in: text), let prefix = NextcloudIDs.idPrefix(of: number) {
            found = try await dependencies.files.item(idPrefix: prefix)
        } else if let path = query.get("file") {
            let root = try await dependencies.root(for: principal, .list)
            found = try await dependencies.walk(path.split(separator: "/").map(String.init), from: root)
        }
        guard let found, !found.isTrashed else {
            _ = dependencies.access.notFound(principal, itemId: query.get("fileId") ?? query.get("file") ?? "", .preview)
            return Self.text(.notFound, "No such file.")
        }
        do {
            var reach = found.seenThrough
            if found.userId != principal.userId, reach == nil {
                reach = try await dependencies.shares.reach(userId: principal.userId, itemId: found.id, now: dependencies.now)
            }
            try dependencies.access.authorize(principal, found, .preview, reach: reach)
        } catch {
            return Self.text(.notFound, "No such file.")
        }
        return Self.text(.notFound, "No preview of '\(found.name)': this server does not make previews yet.")
    }

    static func text(_ status: HTTPResponse.Status, _ message: String, _ headers: HTTPFields = [:]) -> Response {
        var headers = headers
        headers[.contentType] = "text/plain; charset=utf-8"
        headers[.cacheControl] = "no-store"
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(string: message + "\n")))
    }

    /// The address the apps reach this server at: ``ServerConfiguration/publicURL``, or the request's `Host` (with
    /// `https` when a proxy says so).
    static func serverURL(_ request: Request, configuration: ServerConfiguration) -> String {
        if let url = configuration.publicURL { return url }
        let proto = request.headers[.init("X-Forwarded-Proto")!]?.split(separator: ",").first.map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
        let scheme = proto == "https" ? "https" : "http"
        let host = request.head.authority ?? "\(configuration.host):\(configuration.port)"
        return "\(scheme)://\(host)"
    }
}

/// One OCS request (``OCSResponder`` writes the answers).
struct OCSRoutes {
    let dependencies: Dependencies
    let request: Request
    let context: NimbusRequestContext

    func respond(path: String) async throws -> Response {
        let ocs = OCSResponder(path: path, request: request)
        var route = String(path.dropFirst("/ocs/v1.php".count))
        while route.count > 1 && route.hasSuffix("/") { route.removeLast() }
        if request.method == .get && route == "/cloud/capabilities" { return ocs.success(capabilities()) }

        let principal: Principal
        let username: String
        switch try await dependencies.signIn(basicAuthorization: request.headers[.authorization], remoteIP: context.remoteIP) {
        case .signedIn(let signedIn, let name):
            principal = signedIn
            username = name
        case .lockedOut(let wait):
            var response = ocs.failure(OCSResponder.unauthorized, "Too many failed sign-ins for this account from this address; try again in \(wait) s.")
            response.status = .tooManyRequests
            response.headers[.retryAfter] = String(wait)
            return response
        case .missing, .malformed, .refused:
            // No Basic challenge for the apps (they send OCS-APIRequest), so a browser does not pop up a prompt.
            let challenge: HTTPFields = request.headers[.init("OCS-APIRequest")!] == nil ? DAVRequest.challenge : [:]
            return ocs.failure(OCSResponder.unauthorized, "Current user is not logged in (sign in with your user name and an app password).", headers: challenge)
        }
        guard let user = try await dependencies.accounts.user(id: principal.userId) else {
            return ocs.failure(OCSResponder.unauthorized, "Current user is not logged in.")
        }
        if route.hasPrefix(OCSShares.prefix) {
            return try await OCSShares(dependencies: dependencies, request: request, context: context, ocs: ocs, me: principal).respond(route: route)
        }
        switch (request.method, route) {
        case (.get, "/cloud/user"):
            return ocs.success(userData(user))
        case (.get, _) where route.hasPrefix("/cloud/users/"):
            let named = String(route.dropFirst("/cloud/users/".count)).removingPercentEncoding ?? ""
            guard named == username || named == user.username else { return ocs.failure(OCSResponder.notFound, "User does not exist") }
            return ocs.success(userData(user))
        case (.get, "/core/getapppassword"):
            return ocs.failure(403, "You are signed in with an app password already; keep using it.")
        case (.delete, "/core/apppassword"):
            // An app signing out gives its app password back.
            if case .appPassword(let id) = principal.kind { try await dependencies.accounts.revokeAppPassword(userId: user.id, id: id) }
            return ocs.success(.list([]))
        default:
            return ocs.failure(OCSResponder.notFound, "Invalid query: \(request.method.rawValue) \(route) is not an OCS route this server has.")
        }
    }

    /// What this server does, in Nextcloud's terms; what it does not do is absent, never promised.
    func capabilities() -> OCSValue {
        let version = NextcloudMiddleware.version
        return .object([
            ("version", .object([
                ("major", .int(Int64(version.major))), ("minor", .int(Int64(version.minor))), ("micro", .int(Int64(version.micro))),
                ("string", .string(NextcloudMiddleware.versionString)), ("edition", .string("")), ("extendedSupport", .bool(false)),
            ])),
            ("capabilities", .object([
                ("core", .object([("pollinterval", .int(60)), ("webdav-root", .string("remote.php/webdav"))])),
                ("bruteforce", .object([("delay", .int(0)), ("allow-listed", .bool(false))])),
                ("dav", .object([("chunking", .string("1.0"))])),
                ("files", .object([
                    ("bigfilechunking", .bool(true)), ("blacklisted_files", .list([])), ("undelete", .bool(true)), ("versioning", .bool(true)),
                ])),
                ("checksums", .object([("supportedTypes", .list([.string("SHA256")])), ("preferredUploadType", .string("SHA256"))])),
                // The desktop app uploads the conflict copies it makes, so both contents of a file edited on two
                // sides reach the server (and every other device), not only the laptop that saw the conflict.
                ("uploadConflictFiles", .bool(true)),
                // Shares with people (viewer 1, editor 15, manager 31) and public links (``OCSShares``); no groups,
                // no federation, no mail.
                ("files_sharing", .object([
                    ("api_enabled", .bool(true)), ("resharing", .bool(true)), ("group_sharing", .bool(false)), ("default_permissions", .int(31)),
                    ("public", .object([
                        ("enabled", .bool(true)), ("multiple_links", .bool(true)), ("upload", .bool(true)), ("upload_files_drop", .bool(true)),
                        ("send_mail", .bool(false)), ("password", .object([("enforced", .bool(false)), ("askForOptionalPassword", .bool(false))])),
                        ("expire_date", .object([("enabled", .bool(false))])),
                    ])),
                    ("user", .object([("send_mail", .bool(false)), ("expire_date", .object([("enabled", .bool(true))]))])),
                    ("federation", .object([("outgoing", .bool(false)), ("incoming", .bool(false))])),
                    ("sharee", .object([("query_lookup_default", .bool(false)), ("always_show_unique", .bool(true))])),
                ])),
                ("notify_push", .object([
                    ("type", .list([.string("files")])),
                    ("endpoints", .object([("websocket", .string(webSocketURL + NotifyPush.path))])),
                ])),
            ])),
        ])
    }

    /// `ws://` or `wss://` and this server's address.
    var webSocketURL: String {
        let server = NextcloudMiddleware.serverURL(request, configuration: dependencies.configuration)
        return server.hasPrefix("https://") ? "wss://" + server.dropFirst(8) : "ws://" + server.dropFirst(server.hasPrefix("http://") ? 7 : 0)
    }

    /// The account as `cloud/user` gives it: the id the apps use in DAV paths, the name shown, the quota.
    func userData(_ user: UserRecord) -> OCSValue {
        let used = user.usedBytes
        var quota: [(String, OCSValue)]
        if let limit = user.quotaLimit {
            let free = max(0, limit - used)
            quota = [("free", .int(free)), ("used", .int(used)), ("total", .int(limit)), ("relative", .double(Self.percent(used, of: limit))), ("quota", .int(limit))]
        } else {
            let configuration = dependencies.configuration
            let local = configuration.blobs == nil
            let free = local ? max(0, (DiskSpace.available(at: configuration.dataDirectory.path) ?? 0) - configuration.minimumFreeSpace) : -3
            quota = [("free", .int(free)), ("used", .int(used)), ("total", .int(free >= 0 ? used + free : -3))]
            quota += [("relative", .double(free >= 0 ? Self.percent(used, of: used + free) : 0)), ("quota", .int(-3))]
        }
        return .object([
            ("enabled", .bool(true)), ("storageLocation", .string("")), ("id", .string(user.username)), ("backend", .string("Database")),
            ("subadmin", .list([])), ("quota", .object(quota)), ("email", .null), ("displayname", .string(user.username)),
            ("display-name", .string(user.username)), ("phone", .string("")), ("address", .string("")), ("website", .string("")),
            ("twitter", .string("")), ("groups", .list([])), ("language", .string("en")), ("locale", .string("")),
            ("backendCapabilities", .object([("setDisplayName", .bool(false)), ("setPassword", .bool(false))])),
        ])
    }

    static func percent(_ part: Int64, of whole: Int64) -> Double {
        guard whole > 0 else { return 0 }
        return (Double(part) / Double(whole) * 10_000).rounded() / 100
    }
}
