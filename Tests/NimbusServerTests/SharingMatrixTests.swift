import Foundation
import NimbusAPI
import NimbusServer
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

    /// A route, what it asks the decision, and how to call it on a target.
    struct Route {
        var name: String
        var action: String
        var call: @Sendable (APIClient, Target) async throws -> APIClient.Reply
    }

    struct Target {
        var name: String
        var id: String
        var revisionId: String?
        var isFolder: Bool
        /// Inside the share (a grantee may see it).
        var inside: Bool
    }

    static func allowed(_ who: Who, _ action: String, inside: Bool) -> Bool? {
        if who == .owner { return true }
        guard let role = who.role, inside else { return nil }  // nil: not visible
        let viewer = ["list", "read"]
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
                Target(name: "file inside", id: file.id, revisionId: old, isFolder: false, inside: true),
                Target(name: "folder inside", id: inner.id, revisionId: nil, isFolder: true, inside: true),
                Target(name: "the share", id: share.id, revisionId: nil, isFolder: true, inside: true),
                Target(name: "trashed inside", id: trashed.id, revisionId: trashed.revisionId, isFolder: false, inside: true),
                Target(name: "sibling folder", id: sibling.id, revisionId: nil, isFolder: true, inside: false),
                Target(name: "sibling file", id: siblingFile.id, revisionId: siblingFile.revisionId, isFolder: false, inside: false),
                Target(name: "ancestor (root)", id: root.id, revisionId: nil, isFolder: true, inside: false),
            ]
            let counter = LockedCounter(start: 0)
            let routes: [Route] = [
                Route(name: "GET file", action: "read") { c, t in try await c.get("/v1/files/\(t.id)") },
                Route(name: "GET list", action: "list") { c, t in try await c.get("/v1/files?parentId=\(t.id)") },
                Route(name: "GET content", action: "read") { c, t in try await c.get("/v1/files/\(t.id)/content") },
                Route(name: "GET revisions", action: "read") { c, t in try await c.get("/v1/files/\(t.id)/revisions") },
                Route(name: "GET old revision content", action: "read") { c, t in
                    try await c.get("/v1/files/\(t.id)/revisions/\(t.revisionId ?? "none")/content")
                },
                Route(name: "GET grants", action: "read") { c, t in try await c.get("/v1/files/\(t.id)/grants") },
                Route(name: "POST folder into", action: "create") { c, t in
                    try await c.send(.POST, "/v1/files", json: CreateFileRequest(name: "new-\(counter.next())", mimeType: folderMimeType, parentId: t.id))
                },
                Route(name: "POST upload into", action: "create") { c, t in
                    try await c.send(.POST, "/v1/upload?uploadType=media&name=up-\(counter.next()).txt&parentId=\(t.id)", body: Data("u".utf8))
                },
                Route(name: "POST new version", action: "write") { c, t in
                    try await c.send(.POST, "/v1/upload?uploadType=media&fileId=\(t.id)", body: Data("v\(counter.next())".utf8))
                },
                Route(name: "POST restore old revision", action: "restore") { c, t in
                    try await c.send(.POST, "/v1/files/\(t.id)/revisions/\(t.revisionId ?? "none")/restore")
                },
                Route(name: "POST grant", action: "share") { c, t in
                    try await c.send(.POST, "/v1/files/\(t.id)/grants", json: GrantRequest(user: "third", role: .viewer))
                },
                Route(name: "POST link", action: "link") { c, t in try await c.send(.POST, "/v1/files/\(t.id)/links", json: LinkRequest(access: .view)) },
                Route(name: "DELETE for good", action: "purge") { c, t in try await c.send(.DELETE, "/v1/files/\(t.id)?permanent=true") },
            ]
            var mismatches: [String] = []
            var cells = 0
            for route in routes {
                for target in targets {
                    for who in Who.allCases {
                        // The owner purging would take the target from the other cells: its rights are plain.
                        if who == .owner && route.action == "purge" { continue }
                        // A share's root, deleted or renamed by a grantee, is their mount: not this table's.
                        if target.id == share.id && route.action == "purge" { continue }
                        let client = try #require(clients[who])
                        let reply = try await route.call(client, target)
                        cells += 1
                        let expected = Self.allowed(who, route.action, inside: target.inside)
                        let ok: Bool =
                            switch expected {
                            case nil: reply.status == 404
                            case false?: reply.status == 403
                            case true?: reply.status != 403 && reply.status != 404 || (reply.status == 404 && Self.notFoundForOtherReasons(route, target))
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
