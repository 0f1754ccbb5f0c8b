import Crypto
import Foundation
import Hummingbird
import NimbusAPI
import NIOFoundationCompat

#if canImport(FoundationXML)
import FoundationXML
#endif

/// WebDAV at `/dav/` (RFC 4918 class 1) over the same tree, revisions and trash as `/v1`: the metadata store is the
/// one source of truth, so a change made here is in the change feed and live events like any other.
///
/// Signed in with HTTP Basic: the user name and an app password (never the account password; failures count
/// towards the same lockout as logins). Paths are names from the user's root: `/dav/Work/report.pdf`.
/// - `PROPFIND` Depth 0 or 1 (a missing Depth is 1; `infinity` is refused with `propfind-finite-depth`);
/// - `GET`/`HEAD` with `Range` (the `/v1` content code), `PUT` streamed into a new file or a new revision;
/// - `MKCOL`, `DELETE` (to the trash), `MOVE` and `COPY` (`Overwrite`, `Depth`), `If-Match`/`If-None-Match` → 412;
/// - `getetag` is a file's revision id; a collection's moves whenever anything beneath it changes (Nextcloud's and
///   ownCloud's do too), so a client can skip a subtree whose ETag it already has; `oc:fileid` (ownCloud's namespace)
///   is the item's id, and tells such a client that collection ETags propagate here. Quota properties from RFC 4331.
///
/// It is a middleware rather than routes: WebDAV's methods and its open-ended paths are not `/v1` routes (they are
/// not in `openapi.yaml`, and the 405 logic of ``ErrorMiddleware`` does not apply to them).
struct DAVMiddleware: RouterMiddleware {
    typealias Context = NimbusRequestContext
    let dependencies: Dependencies

    static let prefix = "/dav"
    static let methods = "OPTIONS, GET, HEAD, PUT, DELETE, PROPFIND, PROPPATCH, MKCOL, COPY, MOVE, LOCK, UNLOCK"

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let mount = DAVMount(path: request.uri.path) else { return try await next(request, context) }
        do {
            return try await DAVRequest.$base.withValue(mount.base) {
                try await DAVRequest(dependencies: dependencies, request: request, context: context, mount: mount).respond()
            }
        } catch let error as DAVError {
            return error.response(nextcloud: mount.isNextcloud)
        } catch {
            return DAVError(DriveError.from(error)).response(nextcloud: mount.isNextcloud)
        }
    }
}

/// Where a WebDAV path is served from. The user's tree is at `/dav/` and, in Nextcloud's layout, at
/// `/remote.php/dav/files/USER/` (and its older `/remote.php/webdav/`), so clients made for Nextcloud (rclone's
/// `--webdav-vendor nextcloud`, Nextcloud's own) work unchanged; Nextcloud's chunked uploads are at
/// `/remote.php/dav/uploads/USER/` (see `NextcloudChunkedUploads`), its trash bin and file versions at
/// `/remote.php/dav/trashbin/USER/` and `/remote.php/dav/versions/USER/` (see `NextcloudTrashAndVersions`). A path
/// naming a user is served only to that user.
struct DAVMount: Sendable {
    enum Tree: Sendable { case files, uploads, trashbin, versions }
    var tree: Tree
    /// The path before the first name (`/dav`, `/remote.php/dav/files/ana`), as sent (percent-encoded).
    var base: String
    /// The user the path names (Nextcloud's layout), decoded; nil at `/dav/`.
    var owner: String?

    static let nextcloudFiles = "/remote.php/dav/files/"
    static let nextcloudUploads = "/remote.php/dav/uploads/"
    static let nextcloudLegacy = "/remote.php/webdav"
    static let nextcloudTrashbin = "/remote.php/dav/trashbin/"
    static let nextcloudVersions = "/remote.php/dav/versions/"

    init(tree: Tree, base: String, owner: String?) {
        self.tree = tree
        self.base = base
        self.owner = owner
    }

    init?(path: String) {
        if Self.path(path, isWithin: DAVMiddleware.prefix) {
            self.init(tree: .files, base: DAVMiddleware.prefix, owner: nil)
        } else if Self.path(path, isWithin: Self.nextcloudLegacy) {
            self.init(tree: .files, base: Self.nextcloudLegacy, owner: nil)
        } else {
            let trees = [(Self.nextcloudFiles, Tree.files), (Self.nextcloudUploads, .uploads), (Self.nextcloudTrashbin, .trashbin), (Self.nextcloudVersions, .versions)]
            for (prefix, tree) in trees where path.hasPrefix(prefix) {
                let user = path.dropFirst(prefix.count).prefix { $0 != "/" }
                guard !user.isEmpty, let owner = String(user).removingPercentEncoding else { return nil }
                self.init(tree: tree, base: prefix + user, owner: owner)
                return
            }
            return nil
        }
    }

    /// Whether `path` is `base` or below it.
    static func path(_ path: String, isWithin base: String) -> Bool { path == base || path.hasPrefix(base + "/") }

    /// The names of a path in the user's tree under any of its mounts (a `Destination`), nil when it is elsewhere.
    static func treeNames(of path: String, owner: String) throws -> [String]? {
        guard let mount = DAVMount(path: path), mount.tree == .files, mount.owner == nil || mount.owner == owner else { return nil }
        return try DAVRequest.segments(of: path, base: mount.base)
    }
}

/// A WebDAV failure: a status, and a short text (or an RFC 4918 `DAV:error` body) saying what to do.
struct DAVError: Error {
    var status: HTTPResponse.Status
    var message: String
    var headers: HTTPFields = [:]
    /// The content of a `DAV:error` body (a precondition element, e.g. `<d:propfind-finite-depth/>`).
    var condition: String?

    init(_ status: HTTPResponse.Status, _ message: String, headers: HTTPFields = [:], condition: String? = nil) {
        self.status = status
        self.message = message
        self.headers = headers
        self.condition = condition
    }

    /// The `/v1` error as WebDAV says it: a stale `If-Match` is 412 here (409 in `/v1`), a clash with a name 412.
    init(_ error: DriveError) {
        switch error {
        case .versionConflict(let message, _): self.init(.preconditionFailed, message)
        case .nameConflict(let name, _): self.init(.preconditionFailed, "'\(name)' exists already.")
        case .tooManyRequests(let message, let retryAfter): self.init(.tooManyRequests, message, headers: [.retryAfter: String(retryAfter)])
        case .unauthorized(let message): self.init(.unauthorized, message, headers: DAVRequest.challenge)
        default: self.init(error.status, error.body.error.message)
        }
    }

    /// The same failure said in other words.
    func with(message: String) -> DAVError {
        var copy = self
        copy.message = message
        return copy
    }

    var response: Response { response(nextcloud: false) }

    /// The answer. Under the Nextcloud mounts the body is always SabreDAV's XML error (`s:exception`, `s:message`),
    /// which Nextcloud's apps read to show the message to the user.
    func response(nextcloud: Bool) -> Response {
        var headers = headers
        let body: String
        if nextcloud {
            headers[.contentType] = "application/xml; charset=utf-8"
            body = "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<d:error xmlns:d=\"DAV:\" xmlns:s=\"http://sabredav.org/ns\">"
                + "<s:exception>\(DAVRequest.xmlEscape(sabreException))</s:exception><s:message>\(DAVRequest.xmlEscape(message))</s:message>"
                + (condition ?? "") + "</d:error>\n"
        } else if let condition {
            headers[.contentType] = "application/xml; charset=utf-8"
            body = "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<d:error xmlns:d=\"DAV:\">\(condition)</d:error>\n"
        } else {
            headers[.contentType] = "text/plain; charset=utf-8"
            body = message + "\n"
        }
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(string: body)))
    }

    /// The SabreDAV exception class Nextcloud names for this status.
    var sabreException: String {
        switch status.code {
        case 400: "Sabre\\DAV\\Exception\\BadRequest"
        case 401: "Sabre\\DAV\\Exception\\NotAuthenticated"
        case 403: "Sabre\\DAV\\Exception\\Forbidden"
        case 404: "Sabre\\DAV\\Exception\\NotFound"
        case 405: "Sabre\\DAV\\Exception\\MethodNotAllowed"
        case 409: "Sabre\\DAV\\Exception\\Conflict"
        case 412: "Sabre\\DAV\\Exception\\PreconditionFailed"
        case 415: "Sabre\\DAV\\Exception\\UnsupportedMediaType"
        case 423: "Sabre\\DAV\\Exception\\Locked"
        case 501: "Sabre\\DAV\\Exception\\NotImplemented"
        case 503: "Sabre\\DAV\\Exception\\ServiceUnavailable"
        case 507: "Sabre\\DAV\\Exception\\InsufficientStorage"
        default: "Sabre\\DAV\\Exception"
        }
    }
}
