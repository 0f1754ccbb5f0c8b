import Foundation
import NimbusAPI
import NimbusServer
import NimbusTestSupport
import NIOHTTP1
import Testing

/// The authorization matrix: every item route × every kind of principal × targets inside and outside a share. The
/// expected answer is computed from the roles' table, not written per cell: 404 for what the principal may not see,
/// 403 for what it may see but not do, anything else when it may (then the route's own checks decide).
@Suite("Sharing authorization matrix")
struct SharingMatrixTests {
    /// What a principal is to the share.
    enum Who: String, CaseIterable {
        case owner, manager, editor, viewer, stranger, revoked, expired

        var role: ShareRole? {
            switch self {
            case .manager: .manager
            case .editor: .editor
            case .viewer: .viewer
            default: nil
            }
        }
    }

    /// A route (its `openapi.yaml` operation), what it asks the decision, how to call it on a target, and how the
    /// owner puts things back after it succeeded (so the next cells find the targets as they were).
    struct Route {
        var name: String
        var operation: String
        var action: String
        var call: @Sendable (APIClient, Target) async throws -> APIClient.Reply
        var undo: (@Sendable (APIClient, Target) async throws -> Void)? = nil
    }

    struct Target {
        var name: String
        var itemName: String = ""
        var id: String
        var revisionId: String?
        var isFolder: Bool
        /// Inside the share (a grantee may see it).
        var inside: Bool
    }

    static func allowed(_ who: Who, _ action: String, inside: Bool) -> Bool? {
        if who == .owner { return true }
        guard let role = who.role, inside else { return nil }  // nil: not visible
        let viewer = ["list", "read", "preview"]
        let editor = viewer + ["write", "create", "rename", "trash", "restore"]
        switch role {
        case .viewer: return viewer.contains(action)
        case .editor: return editor.contains(action)
        case .manager: return (editor + ["share", "link"]).contains(action)
        }
    }

    @Test("every item route answers each principal as the roles' table says, inside the share and outside it")
    func matrix() async throws {
        try await TestServer.run { server in
            let owner = try await server.signUp("owner")
            var clients: [Who: APIClient] = [.owner: owner]
            for who in Who.allCases where who != .owner { clients[who] = try await server.signUp(who.rawValue) }
            _ = try await server.signUp("third")
            let share = try await owner.mkdir("Share")
            let inner = try await owner.mkdir("Inner", in: share.id)
            let file = try await owner.upload("file.txt", Data("one".utf8), in: share.id)
            let old = try #require(file.revisionId)
            _ = try await owner.send(.POST, "/v1/upload?uploadType=media&fileId=\(file.id)", body: Data("two".utf8))
            let trashed = try await owner.upload("trashed.txt", Data("t".utf8), in: share.id)
            #expect(try await owner.send(.DELETE, "/v1/files/\(trashed.id)").status == 204)
            let sibling = try await owner.mkdir("Sibling")
            let siblingFile = try await owner.upload("sibling.txt", Data("s".utf8), in: sibling.id)
            let root = try await owner.root()
            for who in [Who.manager, .editor, .viewer, .revoked, .expired] {
                let role = who.role ?? .editor
                let expiry: Date? = who == .expired ? server.clock.now().addingTimeInterval(60) : nil
                let grant: Grant = try await owner.send(.POST, "/v1/files/\(share.id)/grants", json: GrantRequest(user: who.rawValue, role: role, expiresAt: expiry)).decode()
                let client = try #require(clients[who])
                #expect(try await client.send(.POST, "/v1/shares/incoming/\(grant.id)/accept").status == 200)
                if who == .revoked { #expect(try await owner.send(.DELETE, "/v1/grants/\(grant.id)").status == 204) }
            }
            server.clock.advance(by: 61)
            // Access tokens outlive the minute; sign the expired grantee's device in again anyway, to be sure.
            clients[.expired] = try await server.logIn("expired")

            let targets = [
                Target(name: "file inside", itemName: "file.txt", id: file.id, revisionId: old, isFolder: false, inside: true),
                Target(name: "folder inside", itemName: "Inner", id: inner.id, revisionId: nil, isFolder: true, inside: true),
                Target(name: "the share", itemName: "Share", id: share.id, revisionId: nil, isFolder: true, inside: true),
                Target(name: "trashed inside", itemName: "trashed.txt", id: trashed.id, revisionId: trashed.revisionId, isFolder: false, inside: true),
                Target(name: "sibling folder", itemName: "Sibling", id: sibling.id, revisionId: nil, isFolder: true, inside: false),
                Target(name: "sibling file", itemName: "sibling.txt", id: siblingFile.id, revisionId: siblingFile.revisionId, isFolder: false, inside: false),
                Target(name: "ancestor (root)", id: root.id, revisionId: nil, isFolder: true, inside: false),
            ]
            let counter = LockedCounter(start: 0)
            let blockData = randomData(5_000)
            let blockHash = sha256(blockData)
            let routes: [Route] = [
                Route(name: "GET file", operation: "GET /v1/files/{fileId}", action: "read") { c, t in try await c.get("/v1/files/\(t.id)") },
                Route(name: "GET list", operation: "GET /v1/files", action: "list") { c, t in try await c.get("/v1/files?parentId=\(t.id)") },
                Route(name: "GET content", operation: "GET /v1/files/{fileId}/content", action: "read") { c, t in try await c.get("/v1/files/\(t.id)/content") },
                Route(name: "GET revisions", operation: "GET /v1/files/{fileId}/revisions", action: "read") { c, t in
                    try await c.get("/v1/files/\(t.id)/revisions")
                },
                Route(name: "GET old revision", operation: "GET /v1/files/{fileId}/revisions/{revisionId}", action: "read") { c, t in
                    try await c.get("/v1/files/\(t.id)/revisions/\(t.revisionId ?? "none")")
                },
                Route(name: "GET old revision content", operation: "GET /v1/files/{fileId}/revisions/{revisionId}/content", action: "read") { c, t in
                    try await c.get("/v1/files/\(t.id)/revisions/\(t.revisionId ?? "none")/content")
                },
                Route(name: "GET block manifest", operation: "GET /v1/files/{fileId}/blocks", action: "read") { c, t in
                    try await c.get("/v1/files/\(t.id)/blocks")
                },
                Route(name: "GET grants", operation: "GET /v1/files/{fileId}/grants", action: "read") { c, t in try await c.get("/v1/files/\(t.id)/grants") },
                Route(name: "POST folder into", operation: "POST /v1/files", action: "create") { c, t in
                    try await c.send(.POST, "/v1/files", json: CreateFileRequest(name: "new-\(counter.next())", mimeType: folderMimeType, parentId: t.id))
                },
                Route(name: "POST upload into", operation: "POST /v1/upload", action: "create") { c, t in
                    try await c.send(.POST, "/v1/upload?uploadType=media&name=up-\(counter.next()).txt&parentId=\(t.id)", body: Data("u".utf8))
                },
                Route(name: "POST block commit into", operation: "POST /v1/blocks/commit", action: "create") { c, t in
                    // The asker's blocks: the block is put first (to their own account), then committed into the target.
                    _ = try await c.send(.PUT, "/v1/blocks/\(blockHash)", body: blockData)
                    return try await c.send(
                        .POST, "/v1/blocks/commit",
                        json: BlockCommitRequest(
                            name: "blocks-\(counter.next()).bin", parentId: t.id, size: Int64(blockData.count), checksum: blockHash, blocks: [.block(blockHash)]))
                },
                Route(name: "POST new version", operation: "POST /v1/upload", action: "write") { c, t in
                    try await c.send(.POST, "/v1/upload?uploadType=media&fileId=\(t.id)", body: Data("v\(counter.next())".utf8))
                },
                Route(name: "POST restore old revision", operation: "POST /v1/files/{fileId}/revisions/{revisionId}/restore", action: "restore") { c, t in
                    try await c.send(.POST, "/v1/files/\(t.id)/revisions/\(t.revisionId ?? "none")/restore")
                },
                Route(name: "PATCH rename", operation: "PATCH /v1/files/{fileId}", action: "rename") { c, t in
                    try await c.send(.PATCH, "/v1/files/\(t.id)", json: UpdateFileRequest(name: "renamed-\(counter.next())"))
                } undo: { owner, t in
                    _ = try await owner.send(.PATCH, "/v1/files/\(t.id)", json: UpdateFileRequest(name: t.itemName))
                },
                Route(name: "DELETE to the trash", operation: "DELETE /v1/files/{fileId}", action: "trash") { c, t in
                    try await c.send(.DELETE, "/v1/files/\(t.id)")
                } undo: { owner, t in
                    if t.name != "trashed inside" { _ = try await owner.send(.POST, "/v1/files/\(t.id)/untrash") }
                },
                Route(name: "POST untrash", operation: "POST /v1/files/{fileId}/untrash", action: "restore") { c, t in
                    try await c.send(.POST, "/v1/files/\(t.id)/untrash")
                } undo: { owner, t in
                    if t.name == "trashed inside" { _ = try await owner.send(.DELETE, "/v1/files/\(t.id)") }
                },
                Route(name: "POST grant", operation: "POST /v1/files/{fileId}/grants", action: "share") { c, t in
                    try await c.send(.POST, "/v1/files/\(t.id)/grants", json: GrantRequest(user: "third", role: .viewer))
                },
                Route(name: "POST link", operation: "POST /v1/files/{fileId}/links", action: "link") { c, t in
                    try await c.send(.POST, "/v1/files/\(t.id)/links", json: LinkRequest(access: .view))
                },
                Route(name: "PUT star", operation: "PUT /v1/files/{fileId}/star", action: "read") { c, t in
                    try await c.send(.PUT, "/v1/files/\(t.id)/star")
                },
                Route(name: "DELETE star", operation: "DELETE /v1/files/{fileId}/star", action: "read") { c, t in
                    try await c.send(.DELETE, "/v1/files/\(t.id)/star")
                },
                Route(name: "GET thumbnail", operation: "GET /v1/files/{fileId}/thumbnail", action: "preview") { c, t in
                    try await c.get("/v1/files/\(t.id)/thumbnail?size=64")
                },
                Route(name: "GET zip", operation: "GET /v1/zip", action: "read") { c, t in
                    try await c.get("/v1/zip?ids=\(t.id)")
                },
                Route(name: "DELETE for good", operation: "DELETE /v1/files/{fileId}", action: "purge") { c, t in
                    try await c.send(.DELETE, "/v1/files/\(t.id)?permanent=true")
                },
            ]
            // Generated from the API's own description: every route that takes an item is in the table.
            let covered = Set(routes.map(\.operation))
            for route in server.parts.routes where route.path.contains("{fileId}") || ["/v1/files", "/v1/upload", "/v1/blocks/commit"].contains(route.path) {
                let operation = "\(route.method) \(route.path)"
                #expect(covered.contains(operation), "\(operation) takes an item and is not in the authorization matrix")
            }
            var mismatches: [String] = []
            var cells = 0
            for route in routes {
                for target in targets {
                    for who in Who.allCases {
                        // The owner purging would take the target from the other cells: its rights are plain.
                        if who == .owner && route.action == "purge" { continue }
                        // A share's root, deleted or renamed by a grantee, is their mount: not this table's.
                        if target.id == share.id && ["purge", "trash", "rename"].contains(route.action) && who != .owner { continue }
                        let client = try #require(clients[who])
                        let reply = try await route.call(client, target)
                        if reply.status < 300, let undo = route.undo { try await undo(owner, target) }
                        cells += 1
                        let expected = Self.allowed(who, route.action, inside: target.inside)
                        let ok: Bool =
                            switch expected {
                            case nil: reply.status == 404
                            case false?: reply.status == 403
                            case true?:
                                reply.status != 403 && reply.status != 404
                                    || (reply.status == 404 && (Self.notFoundForOtherReasons(route, target) || reply.text.contains("no_thumbnail")))
                            }
                        if !ok {
                            mismatches.append(
                                "\(route.name) on \(target.name) as \(who.rawValue): \(reply.status) (expected \(expected.map { $0 ? "allowed" : "403" } ?? "404")) \(reply.text.prefix(120))")
                        }
                    }
                }
            }
            #expect(mismatches.isEmpty, "\(mismatches.count) of \(cells) cells:\n\(mismatches.joined(separator: "\n"))")
            #expect(cells > 500)
            // Nothing of the owner's went: the sibling is whole.
            #expect(try await owner.content(siblingFile.id) == Data("s".utf8))
        }
    }

    /// A WebDAV verb on a target path, what it asks the decision, and whether it needs a fresh file (it trashes, moves
    /// or locks what it acts on).
    struct Verb {
        var name: String
        var action: String
        var fresh: Bool = false
        var call: @Sendable (DAVClient, String) async throws -> APIClient.Reply
    }

    @Test("every WebDAV verb answers each principal as the roles' table says: through their mount inside the share, 404 for the owner's paths and other folders")
    func davMatrix() async throws {
        try await TestServer.run { server in
            var clients: [Who: DAVClient] = [:]
            var apis: [Who: APIClient] = [:]
            for who in Who.allCases {
                let (api, password) = try await DAVTests.appUser(server, who.rawValue)
                apis[who] = api
                clients[who] = DAVClient(server, basic: "Basic " + Data("\(who.rawValue):\(password)".utf8).base64EncodedString())
            }
            let owner = try #require(apis[.owner])
            let share = try await owner.mkdir("Share")
            let inner = try await owner.mkdir("Inner", in: share.id)
            _ = try await owner.upload("file.txt", Data("one".utf8), in: share.id)
            let sibling = try await owner.mkdir("Sibling")
            _ = try await owner.upload("sibling.txt", Data("s".utf8), in: sibling.id)
            for who in [Who.manager, .editor, .viewer, .revoked, .expired] {
                let expiry: Date? = who == .expired ? server.clock.now().addingTimeInterval(60) : nil
                let grant: Grant = try await owner.send(
                    .POST, "/v1/files/\(share.id)/grants", json: GrantRequest(user: who.rawValue, role: who.role ?? .editor, expiresAt: expiry)).decode()
                #expect(try await apis[who]?.send(.POST, "/v1/shares/incoming/\(grant.id)/accept").status == 200)
                if who == .revoked { #expect(try await owner.send(.DELETE, "/v1/grants/\(grant.id)").status == 204) }
            }
            server.clock.advance(by: 61)

            let counter = LockedCounter(start: 0)
            let lockBody = #"<?xml version="1.0"?><d:lockinfo xmlns:d="DAV:"><d:lockscope><d:exclusive/></d:lockscope><d:locktype><d:write/></d:locktype></d:lockinfo>"#
            let propBody = #"<?xml version="1.0"?><d:propertyupdate xmlns:d="DAV:" xmlns:x="urn:x"><d:set><d:prop><x:tag>1</x:tag></d:prop></d:set></d:propertyupdate>"#
            @Sendable func parent(_ path: String) -> String { String(path[..<(path.lastIndex(of: "/") ?? path.endIndex)]) }
            let verbs: [Verb] = [
                Verb(name: "PROPFIND", action: "list") { c, p in try await c.send(.PROPFIND, p, nil, ["Depth": "1"]) },
                Verb(name: "GET", action: "read") { c, p in try await c.send(.GET, p) },
                Verb(name: "PUT a version", action: "write") { c, p in try await c.send(.PUT, p, "v\(counter.next())") },
                Verb(name: "PUT beside", action: "create") { c, p in try await c.send(.PUT, parent(p) + "/put-\(counter.next()).txt", "n") },
                Verb(name: "MKCOL beside", action: "create") { c, p in try await c.send(.MKCOL, parent(p) + "/dir-\(counter.next())") },
                Verb(name: "PROPPATCH", action: "write") { c, p in try await c.send(.PROPPATCH, p, propBody) },
                Verb(name: "COPY beside", action: "create") { c, p in
                    try await c.send(.COPY, p, nil, ["Destination": parent(p) + "/copy-\(counter.next()).txt"])
                },
                Verb(name: "LOCK", action: "write", fresh: true) { c, p in try await c.send(.LOCK, p, lockBody) },
                Verb(name: "MOVE (rename)", action: "rename", fresh: true) { c, p in
                    try await c.send(.MOVE, p, nil, ["Destination": parent(p) + "/moved-\(counter.next()).txt"])
                },
                Verb(name: "DELETE", action: "trash", fresh: true) { c, p in try await c.send(.DELETE, p) },
            ]
            // Targets as each principal names them: the share through their mount (the owner's folder for the owner),
            // the owner's other folder, and the owner's own path in Nextcloud's layout.
            struct DAVTarget {
                var name: String
                var folder: String
                var file: String
                var inside: Bool
                var ownerPath: Bool = false
            }
            let targets = [
                DAVTarget(name: "file inside", folder: "Share", file: "file.txt", inside: true),
                DAVTarget(name: "folder inside", folder: "Share/Inner", file: "", inside: true),
                DAVTarget(name: "sibling", folder: "Sibling", file: "sibling.txt", inside: false),
                DAVTarget(name: "owner's path", folder: "Share", file: "file.txt", inside: false, ownerPath: true),
            ]
            var mismatches: [String] = []
            var cells = 0
            for verb in verbs {
                for target in targets {
                    // A folder takes no version (405 whoever asks).
                    if verb.name == "PUT a version" && target.file.isEmpty { continue }
                    for who in Who.allCases {
                        let client = try #require(clients[who])
                        var name = target.file
                        if verb.fresh {
                            // The owner puts a file there for this cell alone.
                            name = "fresh-\(counter.next()).txt"
                            let folder = target.folder == "Share/Inner" ? inner.id : target.folder == "Sibling" ? sibling.id : share.id
                            _ = try await owner.upload(name, Data("f".utf8), in: folder)
                        }
                        let base = target.ownerPath ? "/remote.php/dav/files/owner" : "/dav"
                        let path = base + "/" + target.folder + (name.isEmpty ? "" : "/" + name)
                        let reply = try await verb.call(client, path)
                        cells += 1
                        let expected = who == .owner ? true : Self.allowed(who, verb.action, inside: target.inside)
                        let ok: Bool =
                            switch expected {
                            // A path whose folder is not in the asker's own tree is 409 (RFC 4918: no intermediate
                            // collection), the same whether or not someone else has such a folder.
                            case nil: reply.status == 404 || reply.status == 409 && reply.text.contains("does not exist")
                            case false?: reply.status == 403
                            case true?: reply.status < 400
                            }
                        if !ok {
                            mismatches.append(
                                "\(verb.name) \(path) as \(who.rawValue): \(reply.status) (expected \(expected.map { $0 ? "allowed" : "403" } ?? "404")) \(reply.text.prefix(120))")
                        }
                    }
                }
            }
            #expect(mismatches.isEmpty, "\(mismatches.count) of \(cells) cells:\n\(mismatches.joined(separator: "\n"))")
            #expect(cells == (verbs.count * targets.count - 1) * Who.allCases.count)
            #expect(try await owner.list(sibling.id).files.contains { $0.name == "sibling.txt" })
        }
    }

    @Test("every public-link route answers each kind of link — view, edit, upload, a wrong password, a dead link — as the table says, on targets inside the linked folder, trashed, beside it and above it")
    func linkMatrix() async throws {
        try await TestServer.run { server in
            let owner = try await server.signUp("owner")
            let share = try await owner.mkdir("Share")
            let inner = try await owner.mkdir("Inner", in: share.id)
            let file = try await owner.upload("file.txt", Data("one".utf8), in: share.id)
            let trashed = try await owner.upload("trashed.txt", Data("t".utf8), in: share.id)
            #expect(try await owner.send(.DELETE, "/v1/files/\(trashed.id)").status == 204)
            let trashedFolder = try await owner.mkdir("Gone", in: share.id)
            #expect(try await owner.send(.DELETE, "/v1/files/\(trashedFolder.id)").status == 204)
            let sibling = try await owner.mkdir("Sibling")
            let siblingFile = try await owner.upload("sibling.txt", Data("s".utf8), in: sibling.id)
            let root = try await owner.root()
            func token(_ request: LinkRequest) async throws -> String {
                let made = try await owner.send(.POST, "/v1/files/\(share.id)/links", json: request)
                let link: Link = try made.decode()
                #expect(link.token != nil, "the answer that makes a link shows its token")
                return link.token ?? ""
            }
            let kinds: [(String, String, Link.Access?)] = [
                ("view", try await token(LinkRequest(access: .view)), .view),
                ("edit", try await token(LinkRequest(access: .edit)), .edit),
                ("upload", try await token(LinkRequest(access: .upload)), .upload),
                ("wrong password", try await token(LinkRequest(access: .view, password: "the right one")), nil),
            ]
            let deadToken = try await token(LinkRequest(access: .view, maxDownloads: 7))  // (told apart by its limit)
            let links: LinkList = try await owner.get("/v1/links").decode()
            let dead = try #require(links.links.first { $0.maxDownloads == 7 })
            #expect(try await owner.send(.DELETE, "/v1/links/\(dead.id)").status == 204)
            let anyone = APIClient(baseURL: server.baseURL)
            // The wrong password's session is asked for and refused; its calls then go without one.
            let wrong = try await anyone.send(.POST, "/v1/public/\(kinds[3].1)/session", json: ["password": "not it at all"])
            #expect(wrong.status == 401)

            struct Target {
                var name: String
                var id: String
                var isFolder: Bool
                var inside: Bool
            }
            let targets = [
                Target(name: "the linked folder", id: share.id, isFolder: true, inside: true),
                Target(name: "folder inside", id: inner.id, isFolder: true, inside: true),
                Target(name: "file inside", id: file.id, isFolder: false, inside: true),
                Target(name: "trashed file inside", id: trashed.id, isFolder: false, inside: false),
                Target(name: "trashed folder inside", id: trashedFolder.id, isFolder: true, inside: false),
                Target(name: "sibling folder", id: sibling.id, isFolder: true, inside: false),
                Target(name: "sibling file", id: siblingFile.id, isFolder: false, inside: false),
                Target(name: "ancestor (root)", id: root.id, isFolder: true, inside: false),
            ]
            var mismatches: [String] = []
            var cells = 0
            for (name, token, access) in kinds + [("dead", deadToken, Link.Access?.none)] {
                for target in targets {
                    for (route, path) in [
                        ("list", "/v1/public/\(token)/items?parentId=\(target.id)"),
                        ("content", "/v1/public/\(token)/items/\(target.id)/content"),
                    ] {
                        let reply = try await anyone.get(path)
                        cells += 1
                        let expected: String
                        if name == "dead" {
                            expected = "410"
                        } else if access == nil {
                            expected = "401"
                        } else if !target.inside {
                            expected = "404"
                        } else if access == .upload {
                            expected = "403"
                        } else if (route == "list") != target.isFolder {
                            expected = "400"  // a file has no listing, a folder no content
                        } else {
                            expected = "200"
                        }
                        if String(reply.status) != expected {
                            mismatches.append("\(route) of \(target.name) by a \(name) link: \(reply.status), expected \(expected) \(reply.text.prefix(100))")
                        }
                    }
                }
            }
            #expect(mismatches.isEmpty, "\(mismatches.count) of \(cells) cells:\n\(mismatches.joined(separator: "\n"))")
            #expect(try await owner.content(siblingFile.id) == Data("s".utf8))
        }
    }

    /// Allowed cells where the route itself answers 404 for the target (a folder has no content or revision).
    static func notFoundForOtherReasons(_ route: Route, _ target: Target) -> Bool {
        (route.name.contains("revision") || route.name.contains("content")) && (target.isFolder || target.revisionId == nil)
    }
}

/// A counter several tasks may take numbers from.
final class LockedCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Int

    init(start: Int) { value = start }

    func next() -> Int {
        lock.lock()
        defer { lock.unlock() }
        value += 1
        return value
    }
}
