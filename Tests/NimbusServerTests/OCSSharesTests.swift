import Foundation
import NIOHTTP1
import NimbusAPI
@testable import NimbusServer
import NimbusTestSupport
import Testing

/// Nextcloud's share API over the real server, as the apps call it (form bodies, `OCS-APIRequest`, JSON answers):
/// the same grants and links as `/v1`, with the same refusals.
@Suite("Nextcloud's apps: sharing")
struct OCSSharesTests {
    static let api = "/ocs/v2.php/apps/files_sharing/api/v1"

    /// An OCS call as the apps make it; form fields in the body for POST and PUT.
    static func call(_ dav: DAVClient, _ method: HTTPMethod, _ path: String, _ form: [String: String] = [:]) async throws -> APIClient.Reply {
        let body = form.isEmpty ? nil : Data(form.map { key, value in
            key + "=" + (value.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? value)
        }.joined(separator: "&").utf8)
        let separator = path.contains("?") ? "&" : "?"
        return try await dav.send(
            method, api + path + separator + "format=json", body,
            ["OCS-APIRequest": "true", "Content-Type": "application/x-www-form-urlencoded"])
    }

    /// `ocs.data` as an object, and as a list of objects.
    static func object(_ reply: APIClient.Reply) throws -> [String: Any] {
        try #require(try NextcloudTests.ocs(reply).data as? [String: Any], "\(reply.text)")
    }

    static func list(_ reply: APIClient.Reply) throws -> [[String: Any]] {
        try #require(try NextcloudTests.ocs(reply).data as? [[String: Any]], "\(reply.text)")
    }

    @Test("shares with people: made by path, offered, accepted, listed on both sides, changed (a new role on the next request) and ended; the apps' permission bits map onto roles")
    func userShares() async throws {
        try await TestServer.run { server in
            let (alice, aliceDAV, aliceName, _) = try await NextcloudTests.user(server, "alice")
            let (_, bobDAV, bobName, _) = try await NextcloudTests.user(server, "bob")
            let project = try await alice.mkdir("Project")
            _ = try await alice.upload("plan.txt", Data("the plan".utf8), in: project.id)

            let made = try await Self.call(aliceDAV, .POST, "/shares", ["path": "/Project", "shareType": "0", "shareWith": bobName, "permissions": "1"])
            #expect(made.status == 200, "\(made.text)")
            let share = try Self.object(made)
            let id = try #require(share["id"] as? String)
            #expect(share["share_type"] as? Int == 0 && share["share_with"] as? String == bobName && share["permissions"] as? Int == 1)
            #expect(share["path"] as? String == "/Project" && share["item_type"] as? String == "folder" && share["uid_owner"] as? String == aliceName)
            #expect(share["item_source"] as? Int64 == NextcloudIDs.number(of: project.id) || share["item_source"] as? Int == Int(NextcloudIDs.number(of: project.id)))

            let pending = try Self.list(try await Self.call(bobDAV, .GET, "/shares/pending"))
            #expect(pending.map { $0["id"] as? String } == [id] && pending.first?["state"] as? Int == 1)
            #expect(try await bobDAV.send(.PROPFIND, "/dav/Project/", nil, ["Depth": "0"]).status == 404, "not mounted before accepting")
            let accepted = try await Self.call(bobDAV, .POST, "/shares/pending/\(id)")
            #expect(accepted.status == 200, "\(accepted.text)")
            #expect(try await bobDAV.send(.GET, "/dav/Project/plan.txt").body == Data("the plan".utf8))
            let withMe = try Self.list(try await Self.call(bobDAV, .GET, "/shares?shared_with_me=true"))
            #expect(withMe.count == 1 && withMe.first?["file_target"] as? String == "/Project" && withMe.first?["state"] as? Int == 0, "\(withMe)")
            #expect(try await bobDAV.send(.PUT, "/dav/Project/mine.txt", "mine").status == 403, "a viewer")

            let mine = try Self.list(try await Self.call(aliceDAV, .GET, "/shares?path=/Project"))
            #expect(mine.map { $0["id"] as? String } == [id])
            #expect(try Self.list(try await Self.call(aliceDAV, .GET, "/shares")).count == 1)
            let changed = try await Self.call(aliceDAV, .PUT, "/shares/\(id)", ["permissions": "15"])
            let changedShare = try Self.object(changed)
            #expect(changed.status == 200 && changedShare["permissions"] as? Int == 15, "\(changed.text)")
            #expect(try await bobDAV.send(.PUT, "/dav/Project/mine.txt", "mine").status == 201, "an editor now")
            #expect(try await alice.list(project.id).files.map(\.name) == ["mine.txt", "plan.txt"])

            let ended = try await Self.call(aliceDAV, .DELETE, "/shares/\(id)")
            #expect(ended.status == 200, "\(ended.text)")
            #expect(try await bobDAV.send(.PROPFIND, "/dav/Project/", nil, ["Depth": "0"]).status == 404)
            #expect(try await alice.list(project.id).files.count == 2, "the owner's items stay")
        }
    }

    @Test("public links: a weak password is refused and makes no link; the token is in the answer that makes it and in GET shares/{id}, never in a list; upload-only and edit links")
    func links() async throws {
        try await TestServer.run { server in
            let (alice, aliceDAV, _, _) = try await NextcloudTests.user(server, "alice")
            let project = try await alice.mkdir("Project")
            _ = try await alice.upload("plan.txt", Data("the plan".utf8), in: project.id)

            let weak = try await Self.call(aliceDAV, .POST, "/shares", ["path": "/Project/plan.txt", "shareType": "3", "password": "short"])
            let weakMessage = try NextcloudTests.ocs(weak).meta["message"] as? String
            #expect(weak.status == 400 && weakMessage?.contains("8 characters") == true, "\(weak.text)")
            #expect(try Self.list(try await Self.call(aliceDAV, .GET, "/shares")).isEmpty, "no link without the protection asked for")

            let made = try await Self.call(aliceDAV, .POST, "/shares", ["path": "/Project/plan.txt", "shareType": "3", "password": "long enough secret"])
            #expect(made.status == 200, "\(made.text)")
            let link = try Self.object(made)
            let id = try #require(link["id"] as? String)
            let token = try #require(link["token"] as? String)
            #expect((link["url"] as? String)?.hasSuffix("/s/" + token) == true && link["permissions"] as? Int == 1 && link["share_type"] as? Int == 3)
            let listed = try await Self.call(aliceDAV, .GET, "/shares?path=/Project/plan.txt")
            #expect(try Self.list(listed).map { $0["id"] as? String } == [id])
            #expect(!listed.text.contains(token), "never in a list: \(listed.text)")
            #expect(try Self.list(try await Self.call(aliceDAV, .GET, "/shares/\(id)")).first?["token"] as? String == token)
            let links: LinkList = try await alice.get("/v1/links").decode()
            #expect(links.links.map(\.id) == [id] && links.links.first?.passwordSet == true && links.links.first?.access == .view)

            let drop = try Self.object(try await Self.call(aliceDAV, .POST, "/shares", ["path": "/Project", "shareType": "3", "permissions": "4"]))
            let edit = try Self.object(try await Self.call(aliceDAV, .POST, "/shares", ["path": "/Project", "shareType": "3", "publicUpload": "true"]))
            let kinds: LinkList = try await alice.get("/v1/links").decode()
            #expect(Set(kinds.links.map(\.access)) == [.view, .upload, .edit] && drop["permissions"] as? Int == 4 && edit["permissions"] as? Int == 15)
            let fileDrop = try await Self.call(aliceDAV, .POST, "/shares", ["path": "/Project/plan.txt", "shareType": "3", "permissions": "4"])
            #expect(fileDrop.status == 400, "an upload link is for a folder: \(fileDrop.text)")
            #expect(try await Self.call(aliceDAV, .PUT, "/shares/\(id)", ["permissions": "15"]).status == 400, "a link's kind stays")
            #expect(try await Self.call(aliceDAV, .DELETE, "/shares/\(id)").status == 200)
            let after: LinkList = try await alice.get("/v1/links").decode()
            #expect(!after.links.map(\.id).contains(id))
        }
    }

    @Test("bad input changes nothing: the root, a missing path, an unknown user (404, as an invisible item), bad permissions and types, a past expiry, a viewer resharing; sharees finds exact names only")
    func refusals() async throws {
        try await TestServer.run { server in
            let (alice, aliceDAV, aliceName, _) = try await NextcloudTests.user(server, "alice")
            let (_, bobDAV, bobName, _) = try await NextcloudTests.user(server, "bob")
            let project = try await alice.mkdir("Project")
            let cases: [([String: String], Int)] = [
                (["path": "/", "shareType": "0", "shareWith": bobName], 400),
                (["path": "/Nowhere", "shareType": "0", "shareWith": bobName], 404),
                (["path": "/Project", "shareType": "0", "shareWith": "nobody-here"], 404),
                (["path": "/Project", "shareType": "0", "shareWith": bobName, "permissions": "0"], 400),
                (["path": "/Project", "shareType": "0", "shareWith": bobName, "permissions": "64"], 400),
                (["path": "/Project", "shareType": "1", "shareWith": "group"], 400),
                (["path": "/Project", "shareType": "0", "shareWith": bobName, "expireDate": "2001-01-01"], 400),
                (["path": "/Project", "shareType": "0", "shareWith": aliceName], 400),
                (["path": "/Project", "shareType": "0"], 400),
            ]
            for (form, status) in cases {
                let reply = try await Self.call(aliceDAV, .POST, "/shares", form)
                #expect(reply.status == status, "\(form) → \(reply.status) \(reply.text)")
                let answered = try NextcloudTests.ocs(reply).meta["status"] as? String
                #expect(answered == "failure")
            }
            #expect(try await alice.get("/v1/files/\(project.id)/grants").decode(GrantList.self).grants.isEmpty, "nothing was made")

            // Bob, a viewer, may not share it on (403), nor see shares of what is not his (404).
            let made = try Self.object(try await Self.call(aliceDAV, .POST, "/shares", ["path": "/Project", "shareType": "0", "shareWith": bobName, "expireDate": "2999-01-01"]))
            #expect(made["expiration"] as? String == "2999-01-01 00:00:00")
            let id = try #require(made["id"] as? String)
            #expect(try await Self.call(bobDAV, .POST, "/shares/pending/\(id)").status == 200)
            let reshare = try await Self.call(bobDAV, .POST, "/shares", ["path": "/Project", "shareType": "3"])
            #expect(reshare.status == 403, "\(reshare.text)")
            #expect(try await Self.call(bobDAV, .PUT, "/shares/\(id)", ["permissions": "31"]).status == 403, "a grantee cannot change their own grant")
            #expect(try await Self.call(bobDAV, .GET, "/shares/lnnothere").status == 404)

            let exact = try Self.object(try await Self.call(aliceDAV, .GET, "/sharees?search=\(bobName)&itemType=folder"))
            let users = try #require((exact["exact"] as? [String: Any])?["users"] as? [[String: Any]])
            #expect(users.compactMap { ($0["value"] as? [String: Any])?["shareWith"] as? String } == [bobName])
            let partial = try Self.object(try await Self.call(aliceDAV, .GET, "/sharees?search=\(bobName.prefix(3))&itemType=folder"))
            #expect(((partial["exact"] as? [String: Any])?["users"] as? [Any])?.isEmpty == true && (partial["users"] as? [Any])?.isEmpty == true)

            // The grantee leaving: DELETE shares/{id} by Bob ends his grant; Alice's folder stays.
            #expect(try await Self.call(bobDAV, .DELETE, "/shares/\(id)").status == 200)
            #expect(try await bobDAV.send(.PROPFIND, "/dav/Project/", nil, ["Depth": "0"]).status == 404)
            #expect(try await alice.get("/v1/files/\(project.id)").status == 200)

            let capabilities = try await aliceDAV.send(.GET, "/ocs/v2.php/cloud/capabilities?format=json")
            #expect(capabilities.text.contains("\"files_sharing\":{\"api_enabled\":true"), "\(capabilities.text)")
        }
    }
}
