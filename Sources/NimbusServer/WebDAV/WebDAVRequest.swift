import Crypto
import Foundation
import Hummingbird
import NimbusAPI
import NIOFoundationCompat

#if canImport(FoundationXML)
import FoundationXML
#endif
/// One WebDAV request, signed in.
struct DAVRequest {
    let dependencies: Dependencies
    let request: Request
    let context: NimbusRequestContext
    let mount: DAVMount
    /// The root of the tree the request's path is in, once the access decision let the principal in
    /// (``treeRoot(_:username:action:)``); nil before signing in.
    var root: FileRecord?

    /// Whose tree the request's paths are in (the root's owner): its locks and uploads are kept under them. What a
    /// verb reads or changes is in its item's owner's tree (`item.userId`), someone else's inside a mounted share.
    var owner: String { root?.userId ?? "" }

    /// The path before the names of the request being answered (`/dav`, `/remote.php/dav/files/ana`): hrefs in
    /// answers are made under it, paths in headers read under it.
    @TaskLocal static var base = DAVMiddleware.prefix

    static let challenge: HTTPFields = [.wwwAuthenticate: "Basic realm=\"Nimbus\", charset=\"UTF-8\""]

    func respond() async throws -> Response {
        let method = request.method.rawValue
        if method == "OPTIONS" {
            // Answered before signing in: clients (Windows, Office) ask what the server speaks first.
            return Response(status: .ok, headers: [
                .init("DAV")!: "1, 2", .allow: DAVMiddleware.methods, .init("MS-Author-Via")!: "DAV", .contentLength: "0",
            ])
        }
        let (me, username) = try await signIn()
        var signedIn = self
        signedIn.root = try await treeRoot(me, username: username, action: Self.action(method, tree: mount.tree))
        return try await signedIn.dispatch(me, method: method)
    }

    /// What a method does, as the access decision knows it (for the tree's root; each item it touches is that tree's).
    static func action(_ method: String, tree: DAVMount.Tree) -> Action {
        switch (tree, method) {
        case (.uploads, _): return .create
        case (.trashbin, "MOVE"): return .restore
        case (.trashbin, "DELETE"): return .purge
        case (.trashbin, _): return .list
        case (.versions, "MOVE"): return .write
        case (.versions, _): return .read
        default: break
        }
        switch method {
        case "PROPFIND": return .list
        case "GET", "HEAD": return .read
        case "PUT", "PROPPATCH", "LOCK", "UNLOCK": return .write
        case "MKCOL", "COPY": return .create
        case "DELETE": return .trash
        case "MOVE": return .move
        default: return .read
        }
    }

    /// The root of the tree the path is in — the signed-in user's at `/dav/`, the named user's in Nextcloud's layout —
    /// through the access decision: 404 for a tree the principal may not see.
    func treeRoot(_ me: Principal, username: String, action: Action) async throws -> FileRecord {
        guard let named = mount.owner, named != username else { return try await dependencies.root(for: me, action) }
        let elsewhere = DAVError(.notFound, "'\(named)' is not the user signed in; use /remote.php/dav/files/\(username)/.")
        guard let user = try await dependencies.accounts.user(username: named) else {
            throw DAVError(dependencies.access.notFound(me, itemId: "user:" + named, action)).with(message: elsewhere.message)
        }
        do {
            return try await dependencies.item(user.rootId, for: me, action)
        } catch let error as DriveError where error.status == .notFound {
            throw elsewhere
        }
    }

    func dispatch(_ me: Principal, method: String) async throws -> Response {
        switch mount.tree {
        case .uploads: return try await uploads(me, method: method)
        case .trashbin: return try await trashbin(me, method: method)
        case .versions: return try await versions(me, method: method)
        case .files: break
        }
        let segments = try Self.segments(of: request.uri.path)
        switch method {
        case "PROPFIND": return try await propfind(me, segments)
        case "GET", "HEAD": return try await get(me, segments)
        case "PUT": return try await put(me, segments)
        case "MKCOL": return try await mkcol(me, segments)
        case "DELETE": return try await delete(me, segments)
        case "MOVE", "COPY": return try await moveOrCopy(me, segments, copy: method == "COPY")
        case "PROPPATCH": return try await proppatch(me, segments)
        case "LOCK": return try await lock(me, segments)
        case "UNLOCK": return try await unlock(me, segments)
        default:
            throw DAVError(.methodNotAllowed, "\(method) is not a WebDAV method this server takes.", headers: [.allow: DAVMiddleware.methods])
        }
    }

    // MARK: Signing in

    /// Basic auth with the user name and one of the user's app passwords (``BasicSignIn``).
    func signIn() async throws -> (Principal, String) {
        switch try await dependencies.signIn(basicAuthorization: request.headers[.authorization], remoteIP: context.remoteIP) {
        case .signedIn(let principal, let username): return (principal, username)
        case .missing:
            throw DAVError(.unauthorized, "Sign in with your user name and an app password (make one in Settings or with 'nimbus app-password add').", headers: Self.challenge)
        case .malformed:
            throw DAVError(.unauthorized, "The Authorization header must be 'Basic base64(user:app-password)'.", headers: Self.challenge)
        case .lockedOut(let wait):
            throw DAVError(.tooManyRequests, "Too many failed sign-ins for this account from this address; try again in \(wait) s.", headers: [.retryAfter: String(wait)])
        case .refused:
            throw DAVError(.unauthorized, "Wrong user name or app password (WebDAV takes app passwords, not the account password).", headers: Self.challenge)
        }
    }

    // MARK: Paths

    /// The decoded names after the base (`/dav/`); `..`, `.` and empty names (but a trailing slash) are refused.
    static func segments(of rawPath: String, base: String = DAVRequest.base) throws -> [String] {
        let rest = rawPath.dropFirst(base.count)
        var names: [String] = []
        let parts = rest.split(separator: "/", omittingEmptySubsequences: false)
        for (index, part) in parts.enumerated() {
            if part.isEmpty {
                // The leading "/" and a trailing one (a collection's href) are fine; "a//b" is not.
                guard index == 0 || index == parts.count - 1 else { throw DAVError(.badRequest, "The path has an empty name in it.") }
                continue
            }
            guard let name = String(part).removingPercentEncoding, name != ".", name != "..", !name.contains("/") else {
                throw DAVError(.badRequest, "'\(part)' is not a valid name in a path.")
            }
            names.append(name)
        }
        return names
    }

    /// The href of the item at `names` (percent-encoded per name; collections end with "/").
    static func href(_ names: [String], folder: Bool) -> String {
        let encoded = names.map { $0.addingPercentEncoding(withAllowedCharacters: unreserved) ?? $0 }
        let path = base + "/" + encoded.joined(separator: "/")
        return folder && !names.isEmpty ? path + "/" : path
    }

    static let unreserved = CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~!$&'()*+,;=:@")

    /// The names in the user's tree a `Destination` header (a URL or a path) points at, under this request's base
    /// or another mount of the same tree (`/dav/…`, `/remote.php/dav/files/USER/…`); nil when it points elsewhere.
    func destinationNames(_ header: String) throws -> [String]? {
        let path = URL(string: header).flatMap { $0.scheme != nil ? $0.path(percentEncoded: true) : nil } ?? header
        if DAVMount.path(path, isWithin: Self.base) { return try Self.segments(of: path) }
        guard let owner = mount.owner ?? request.headers[.authorization].flatMap({ Self.basicCredentials($0)?.user }) else { return nil }
        return try DAVMount.treeNames(of: path, owner: owner)
    }

    /// The user name and password of a Basic `Authorization` header.
    static func basicCredentials(_ header: String) -> (user: String, password: String)? { BasicCredentials.parse(header) }

    /// The live item at `names`, or nil; a missing folder on the way is nil too. A name in the user's own folders
    /// can be a share mounted there (``Dependencies/walk(_:from:)``); resolving decides nothing: each verb asks for
    /// the action it takes on each item it touches (``authorize(_:_:_:)``).
    func resolve(_ me: Principal, _ names: [String]) async throws -> FileRecord? {
        guard let root else { return nil }
        return try await dependencies.walk(names, from: root)
    }

    /// `item` if the signed-in principal may take `action` on it — the one access decision, asked with the grant that
    /// reaches a shared item; 403 for what they see but may not do.
    @discardableResult
    func authorize(_ me: Principal, _ item: FileRecord, _ action: Action) throws -> FileRecord {
        try dependencies.access.authorize(me, item, action, reach: item.seenThrough)
    }

    /// Whether `item` and `other` are in one tree for moving between them: the same owner, and the same share (or
    /// none) — only an owner takes items out of a share, and nothing moves between users' trees.
    static func sameTree(_ item: FileRecord, _ other: FileRecord) -> Bool {
        item.userId == other.userId && item.seenThrough?.grant.id == other.seenThrough?.grant.id
    }

    /// The folder a new item at `names` goes into: 409 when it does not exist (RFC 4918: intermediate collections
    /// are never made implicitly). The principal must be allowed to add to it (`.create`).
    func parentFolder(_ me: Principal, of names: [String]) async throws -> FileRecord {
        guard let parent = try await resolve(me, Array(names.dropLast())), parent.isFolder else {
            throw DAVError(.conflict, "The folder '/\(names.dropLast().joined(separator: "/"))' does not exist; create it first (MKCOL).")
        }
        return try authorize(me, parent, .create)
    }

    /// The item at `names`, if the principal may take `action` on it; 404 when there is nothing there.
    func require(_ me: Principal, _ names: [String], _ action: Action) async throws -> FileRecord {
        guard let item = try await resolve(me, names) else { throw DAVError(.notFound, "Nothing at '/\(names.joined(separator: "/"))'.") }
        return try authorize(me, item, action)
    }

    /// `If-Match` / `If-None-Match` against the item's ETag (`*` = exists): 412 when they do not hold.
    func checkPreconditions(_ item: FileRecord?) throws {
        if let condition = request.headers[.ifMatch] {
            guard let item, condition.trimmingCharacters(in: .whitespaces) == "*" || ETag.matches(condition, item.davETag) else {
                throw DAVError(.preconditionFailed, "If-Match does not hold: the item changed (or is missing) since you read it.")
            }
        }
        if let condition = request.headers[.ifNoneMatch], let item {
            if condition.trimmingCharacters(in: .whitespaces) == "*" || ETag.matches(condition, item.davETag) {
                throw DAVError(.preconditionFailed, "If-None-Match does not hold: the item exists.")
            }
        }
    }
}
