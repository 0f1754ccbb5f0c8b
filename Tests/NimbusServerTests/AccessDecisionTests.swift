import Foundation
import NimbusAPI
import NimbusServer
import NIOHTTP1
import AsyncHTTPClient
import Testing

/// Every route and every WebDAV verb asks the one access decision (`Sources/NimbusServer/Access/`): a second user
/// aiming at the first user's items gets 404 *because the decision said no* — the test reads the decisions the server
/// made during each request — not because some query happened to filter. A route added without a probe here fails the
/// test, so a new route cannot skip the decision unnoticed.
@Suite("One access decision")
struct AccessDecisionTests {
    /// What a probe expects of the decisions made while it ran.
    enum Expected {
        /// 404 (or, in a batch, an entry's 404), and a refusal for this item of the first user's.
        case refused(String)
        /// The route acts on the asking user's own account: a decision allowing them on their own root.
        case ownAccount
    }

    struct Probe {
        var method: HTTPMethod
        var path: String
        var json: (any Encodable & Sendable)?
        var body: Data?
        var headers: [String: String] = [:]
        var expected: Expected
    }

    @Test("every /v1 route of openapi.yaml and every WebDAV verb consults the access decision; another user's items are refused by it (404)")
    func everyRouteAsks() async throws {
        try await TestServer.run(configure: { $0.recordsAccessDecisions = true }) { server in
            let alice = try await server.signUp("alice")
            let bob = try await server.signUp("bob")
            let aliceRoot = try await alice.root()
            let bobRoot = try await bob.root()
            let bobId = try await bob.get("/v1/about").decode(About.self).userId
            let folder = try await alice.mkdir("Private")
            let file = try await alice.upload("secret.txt", Data("secret".utf8), in: folder.id)
            let revision = try #require(file.revisionId)
            let session: UploadResponse = try await alice.send(
                .POST, "/v1/upload?uploadType=resumable",
                json: UploadRequest(requestId: "r1", name: "big.bin", mimeType: "application/octet-stream", parentId: folder.id, size: 10)
            ).decode()
            let block = randomData(20_000)
            let hash = sha256(block)
            #expect(try await alice.send(.PUT, "/v1/blocks/\(hash)", body: block).status == 201)
            let bobsApp: AppPassword = try await bob.send(.POST, "/v1/auth/app-passwords", json: AppPasswordRequest(label: "dav")).decode()
            _ = try await server.signUp("carol")
            let carolsGrant: Grant = try await alice.send(.POST, "/v1/files/\(folder.id)/grants", json: GrantRequest(user: "carol", role: .editor)).decode()
            let alicesLink: Link = try await alice.send(.POST, "/v1/files/\(folder.id)/links", json: LinkRequest(access: .view)).decode()

            let fileRoute = "/v1/files/\(file.id)"
            let framed = Data("\(hash) \(block.count)\n".utf8) + block
            let probes: [String: [Probe]] = [
                "GET /v1/files": [Probe(method: .GET, path: "/v1/files?parentId=\(folder.id)", expected: .refused(folder.id))],
                "POST /v1/files": [
                    Probe(method: .POST, path: "/v1/files", json: CreateFileRequest(name: "x", mimeType: folderMimeType, parentId: folder.id), expected: .refused(folder.id))
                ],
                "GET /v1/files/{fileId}": [Probe(method: .GET, path: fileRoute, expected: .refused(file.id))],
                "PATCH /v1/files/{fileId}": [
                    Probe(method: .PATCH, path: fileRoute, json: UpdateFileRequest(name: "mine.txt"), expected: .refused(file.id)),
                    Probe(method: .PATCH, path: "/v1/files/\(bobRoot.id)", json: UpdateFileRequest(parentId: folder.id), expected: .refused(folder.id)),
                ],
                "DELETE /v1/files/{fileId}": [
                    Probe(method: .DELETE, path: fileRoute, expected: .refused(file.id)),
                    Probe(method: .DELETE, path: fileRoute + "?permanent=true", expected: .refused(file.id)),
                ],
                "POST /v1/files/{fileId}/untrash": [Probe(method: .POST, path: fileRoute + "/untrash", expected: .refused(file.id))],
                "GET /v1/files/{fileId}/content": [Probe(method: .GET, path: fileRoute + "/content", expected: .refused(file.id))],
                "GET /v1/files/{fileId}/revisions": [Probe(method: .GET, path: fileRoute + "/revisions", expected: .refused(file.id))],
                "GET /v1/files/{fileId}/revisions/{revisionId}": [Probe(method: .GET, path: fileRoute + "/revisions/\(revision)", expected: .refused(file.id))],
                "GET /v1/files/{fileId}/revisions/{revisionId}/content": [
                    Probe(method: .GET, path: fileRoute + "/revisions/\(revision)/content", expected: .refused(file.id))
                ],
                "POST /v1/files/{fileId}/revisions/{revisionId}/restore": [
                    Probe(method: .POST, path: fileRoute + "/revisions/\(revision)/restore", expected: .refused(file.id))
                ],
                "GET /v1/files/{fileId}/blocks": [Probe(method: .GET, path: fileRoute + "/blocks", expected: .refused(file.id))],
                "POST /v1/upload": [
                    Probe(method: .POST, path: "/v1/upload?uploadType=media&name=x&parentId=\(folder.id)", body: Data("x".utf8), expected: .refused(folder.id)),
                    Probe(method: .POST, path: "/v1/upload?uploadType=media&fileId=\(file.id)", body: Data("x".utf8), expected: .refused(file.id)),
                    Probe(
                        method: .POST, path: "/v1/upload?uploadType=resumable",
                        json: UploadRequest(requestId: "m1", name: "x", mimeType: "text/plain", parentId: folder.id, size: 1), expected: .refused(folder.id)),
                    Probe(
                        method: .POST, path: "/v1/upload?uploadType=batch",
                        json: BatchUploadRequest(files: [.init(name: "x", parentId: folder.id, requestId: "b1", content: Data("x".utf8))]),
                        expected: .refused(folder.id)),
                ],
                "GET /v1/upload/{uploadId}": [Probe(method: .GET, path: "/v1/upload/\(session.uploadId)", expected: .refused(folder.id))],
                "DELETE /v1/upload/{uploadId}": [Probe(method: .DELETE, path: "/v1/upload/\(session.uploadId)", expected: .refused(folder.id))],
                "PUT /v1/upload/{uploadId}/chunk": [
                    Probe(
                        method: .PUT, path: "/v1/upload/\(session.uploadId)/chunk", body: randomData(10), headers: ["Content-Range": "bytes 0-9/10"],
                        expected: .refused(folder.id))
                ],
                "POST /v1/blocks/commit": [
                    Probe(
                        method: .POST, path: "/v1/blocks/commit",
                        json: BlockCommitRequest(name: "x", parentId: folder.id, size: Int64(block.count), checksum: hash, blocks: [.block(hash)]),
                        expected: .refused(folder.id))
                ],
                "POST /v1/files/{fileId}/grants": [
                    Probe(method: .POST, path: fileRoute + "/grants", json: GrantRequest(user: "bob", role: .manager), expected: .refused(file.id))
                ],
                "GET /v1/files/{fileId}/grants": [Probe(method: .GET, path: fileRoute + "/grants", expected: .refused(file.id))],
                "PATCH /v1/grants/{grantId}": [
                    Probe(method: .PATCH, path: "/v1/grants/\(carolsGrant.id)", json: GrantUpdate(role: .manager), expected: .refused(folder.id))
                ],
                "DELETE /v1/grants/{grantId}": [Probe(method: .DELETE, path: "/v1/grants/\(carolsGrant.id)", expected: .refused(folder.id))],
                // The user's own account: their feed, trash, blocks and about, through the decision on their root.
                "POST /v1/files/{fileId}/links": [
                    Probe(method: .POST, path: fileRoute + "/links", json: LinkRequest(access: .view), expected: .refused(file.id))
                ],
                "GET /v1/links": [Probe(method: .GET, path: "/v1/links", expected: .ownAccount)],
                "GET /v1/links/{linkId}": [Probe(method: .GET, path: "/v1/links/\(alicesLink.id)", expected: .refused(folder.id))],
                "PATCH /v1/links/{linkId}": [
                    Probe(method: .PATCH, path: "/v1/links/\(alicesLink.id)", json: LinkUpdate(maxDownloads: 1), expected: .refused(folder.id))
                ],
                "DELETE /v1/links/{linkId}": [Probe(method: .DELETE, path: "/v1/links/\(alicesLink.id)", expected: .refused(folder.id))],
                "GET /v1/grants": [Probe(method: .GET, path: "/v1/grants", expected: .ownAccount)],
                "GET /v1/search": [Probe(method: .GET, path: "/v1/search?q=a", expected: .ownAccount)],
                "GET /v1/starred": [Probe(method: .GET, path: "/v1/starred", expected: .ownAccount)],
                "GET /v1/recent": [Probe(method: .GET, path: "/v1/recent", expected: .ownAccount)],
                "GET /v1/activity": [Probe(method: .GET, path: "/v1/activity", expected: .ownAccount)],
                "PUT /v1/files/{fileId}/star": [Probe(method: .PUT, path: fileRoute + "/star", expected: .refused(file.id))],
                "DELETE /v1/files/{fileId}/star": [Probe(method: .DELETE, path: fileRoute + "/star", expected: .refused(file.id))],
                "GET /v1/files/{fileId}/thumbnail": [Probe(method: .GET, path: fileRoute + "/thumbnail", expected: .refused(file.id))],
                "GET /v1/zip": [
                    Probe(method: .GET, path: "/v1/zip?ids=\(file.id)", expected: .refused(file.id)),
                    Probe(method: .GET, path: "/v1/zip?ids=\(folder.id)", expected: .refused(folder.id)),
                ],
                "GET /v1/shares/incoming": [Probe(method: .GET, path: "/v1/shares/incoming", expected: .ownAccount)],
                "POST /v1/shares/incoming/{grantId}/accept": [
                    Probe(method: .POST, path: "/v1/shares/incoming/\(carolsGrant.id)/accept", json: AcceptShareRequest(), expected: .ownAccount)
                ],
                "POST /v1/shares/incoming/{grantId}/decline": [
                    Probe(method: .POST, path: "/v1/shares/incoming/\(carolsGrant.id)/decline", expected: .ownAccount)
                ],
                "GET /v1/changes/start": [Probe(method: .GET, path: "/v1/changes/start", expected: .ownAccount)],
                "GET /v1/changes": [Probe(method: .GET, path: "/v1/changes?cursor=none", expected: .ownAccount)],
                "GET /v1/events": [],  // a stream: checked below
                "GET /v1/trash": [Probe(method: .GET, path: "/v1/trash", expected: .ownAccount)],
                "POST /v1/trash/restore": [Probe(method: .POST, path: "/v1/trash/restore", json: RestoreTrashRequest(since: Date()), expected: .ownAccount)],
                "GET /v1/trash/paused": [Probe(method: .GET, path: "/v1/trash/paused", expected: .ownAccount)],
                "POST /v1/trash/confirm": [Probe(method: .POST, path: "/v1/trash/confirm", expected: .ownAccount)],
                "GET /v1/about": [Probe(method: .GET, path: "/v1/about", expected: .ownAccount)],
                "POST /v1/blocks/missing": [Probe(method: .POST, path: "/v1/blocks/missing", json: MissingBlocksRequest(hashes: [hash]), expected: .ownAccount)],
                "GET /v1/blocks/{hash}": [Probe(method: .GET, path: "/v1/blocks/\(hash)", expected: .ownAccount)],
                "PUT /v1/blocks/{hash}": [Probe(method: .PUT, path: "/v1/blocks/\(hash)", body: block, expected: .ownAccount)],
                "POST /v1/blocks": [
                    Probe(method: .POST, path: "/v1/blocks", body: framed, headers: ["Content-Type": "application/x-nimbus-blocks"], expected: .ownAccount)
                ],
            ]
            // Routes outside the item decision: signing in and account credentials, and the service's own pages.
            let outside: Set<String> = ["/healthz", "/metrics", "/openapi.yaml", "/"]

            var probed = 0
            for route in server.parts.routes {
                let key = "\(route.method) \(route.path)"
                // Public-link routes act as the link, not as a user: LinksTests holds them to the decision.
                if route.path.hasPrefix("/v1/auth/") || route.path.hasPrefix("/v1/public/") || outside.contains(route.path) || !route.path.hasPrefix("/v1/") {
                    continue
                }
                guard let list = probes[key] else {
                    Issue.record("\(key) has no access probe: say what it does for another user's items")
                    continue
                }
                for probe in list {
                    _ = server.parts.accessDecisions()
                    let reply = try await bob.send(probe.method, probe.path, json: probe.json, body: probe.body, headers: probe.headers, timeout: .seconds(20))
                    let decisions = server.parts.accessDecisions()
                    probed += 1
                    switch probe.expected {
                    case .refused(let itemId):
                        let status = probe.path.contains("uploadType=batch") ? (try? reply.decode(BatchUploadResponse.self).results.first?.status) : reply.status
                        #expect(status == 404, "\(probe.method) \(probe.path) → \(reply.status) \(reply.text)")
                        #expect(
                            decisions.contains { $0.userId == bobId && $0.itemId == itemId && !$0.allowed },
                            "\(probe.method) \(probe.path): no refusal of \(itemId) by the access decision (\(decisions))")
                    case .ownAccount:
                        #expect(reply.status < 500, "\(probe.method) \(probe.path) → \(reply.status) \(reply.text)")
                        #expect(
                            decisions.contains { $0.itemId == bobRoot.id && $0.allowed },
                            "\(probe.method) \(probe.path): the route did not ask the access decision about the user's own root (\(decisions))")
                    }
                }
            }
            #expect(probed >= 30, "\(probed) probes")

            // Every WebDAV verb: Bob (his own app password) aiming at Alice's tree in Nextcloud's layout is refused by
            // the decision about Alice's root.
            let basic = "Basic " + Data("bob:\(try #require(bobsApp.password))".utf8).base64EncodedString()
            let path = "/remote.php/dav/files/alice/Private/secret.txt"
            for verb in ["GET", "HEAD", "PUT", "DELETE", "PROPFIND", "PROPPATCH", "MKCOL", "COPY", "MOVE", "LOCK", "UNLOCK"] {
                _ = server.parts.accessDecisions()
                var headers = ["Authorization": basic, "Destination": server.baseURL + "/remote.php/dav/files/alice/Private/moved.txt", "Depth": "0"]
                if verb == "UNLOCK" { headers["Lock-Token"] = "<urn:uuid:00000000-0000-0000-0000-000000000000>" }
                let body: Data? = ["PUT", "PROPPATCH", "LOCK"].contains(verb) ? Data(Self.davBody(verb).utf8) : nil
                let reply = try await APIClient(baseURL: server.baseURL).send(HTTPMethod(rawValue: verb), path, body: body, headers: headers, timeout: .seconds(20))
                let decisions = server.parts.accessDecisions()
                #expect(reply.status == 404, "\(verb) \(path) → \(reply.status) \(reply.text)")
                #expect(decisions.contains { $0.itemId == aliceRoot.id && !$0.allowed }, "\(verb): no refusal by the access decision (\(decisions))")
            }
            // Nextcloud's trees: Bob aiming at Alice's trash bin is refused on her root; at her file's versions, or its
            // preview, by its number (which he could guess), on the file itself.
            let alicesApp: AppPassword = try await alice.send(.POST, "/v1/auth/app-passwords", json: AppPasswordRequest(label: "dav")).decode()
            let aliceBasic = "Basic " + Data("alice:\(try #require(alicesApp.password))".utf8).base64EncodedString()
            let askId = Data(#"<d:propfind xmlns:d="DAV:" xmlns:oc="http://owncloud.org/ns"><d:prop><oc:fileid/></d:prop></d:propfind>"#.utf8)
            let listed = try await APIClient(baseURL: server.baseURL).send(
                HTTPMethod(rawValue: "PROPFIND"), "/remote.php/dav/files/alice/Private/secret.txt", body: askId, headers: ["Authorization": aliceBasic, "Depth": "0"])
            let number = try #require(listed.text.range(of: "<oc:fileid>").map { String(listed.text[$0.upperBound...].prefix { $0.isNumber }) })
            #expect(try await alice.send(.DELETE, "/v1/files/\(folder.id)").status == 204)
            #expect(try await alice.send(.POST, "/v1/files/\(folder.id)/untrash").status == 200)
            let nextcloud: [(String, String, [String: String], String)] = [
                ("PROPFIND", "/remote.php/dav/trashbin/alice/trash", ["Depth": "1"], aliceRoot.id),
                ("DELETE", "/remote.php/dav/trashbin/alice/trash", [:], aliceRoot.id),
                ("MOVE", "/remote.php/dav/trashbin/alice/trash/x.d1", ["Destination": "/remote.php/dav/trashbin/alice/restore/x.d1"], aliceRoot.id),
                ("PROPFIND", "/remote.php/dav/versions/bob/versions/\(number)", ["Depth": "1"], file.id),
                ("MOVE", "/remote.php/dav/versions/bob/versions/\(number)/\(revision)", ["Destination": "/remote.php/dav/versions/bob/restore/target"], file.id),
                ("GET", "/index.php/core/preview?fileId=\(number)&x=64&y=64", [:], file.id),
            ]
            for (verb, path, extra, itemId) in nextcloud {
                _ = server.parts.accessDecisions()
                let reply = try await APIClient(baseURL: server.baseURL).send(
                    HTTPMethod(rawValue: verb), path, headers: extra.merging(["Authorization": basic]) { a, _ in a }, timeout: .seconds(20))
                let decisions = server.parts.accessDecisions()
                #expect(reply.status == 404, "\(verb) \(path) → \(reply.status) \(reply.text)")
                #expect(decisions.contains { $0.itemId == itemId && !$0.allowed }, "\(verb) \(path): no refusal by the access decision (\(decisions))")
            }
            #expect(try await alice.send(.GET, "/v1/trash").decode(FileList.self).files.isEmpty, "Alice's trash as it was")

            // The event stream asks before it streams (a device of Bob's that then signs out, which ends its stream).
            let streaming = try await server.logIn("bob", device: "streaming")
            _ = server.parts.accessDecisions()
            var events = HTTPClientRequest(url: server.baseURL + "/v1/events")
            events.headers.add(name: "Authorization", value: "Bearer \(try #require(streaming.token))")
            let opened = try await HTTPClient.shared.execute(events, timeout: .seconds(60))
            #expect(opened.status.code == 200)
            #expect(server.parts.accessDecisions().contains { $0.itemId == bobRoot.id && $0.allowed }, "GET /v1/events asks the access decision")
            #expect(try await streaming.send(.POST, "/v1/auth/logout").status == 204)
            for try await _ in opened.body {}

            // Alice's things are as they were.
            #expect(try await alice.content(file.id) == Data("secret".utf8))
            #expect(try await alice.list(folder.id).files.map(\.name) == ["secret.txt"])
        }
    }

    static func davBody(_ verb: String) -> String {
        switch verb {
        case "PROPPATCH":
            return #"<?xml version="1.0"?><D:propertyupdate xmlns:D="DAV:" xmlns:Z="urn:x"><D:set><D:prop><Z:a>1</Z:a></D:prop></D:set></D:propertyupdate>"#
        case "LOCK":
            return #"<?xml version="1.0"?><D:lockinfo xmlns:D="DAV:"><D:lockscope><D:exclusive/></D:lockscope><D:locktype><D:write/></D:locktype></D:lockinfo>"#
        default:
            return "mine"
        }
    }
}
