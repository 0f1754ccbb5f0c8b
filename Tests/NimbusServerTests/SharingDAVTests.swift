import Foundation
import NIOHTTP1
import NimbusAPI
@testable import NimbusServer
import NimbusTestSupport
import Testing

/// Shares over WebDAV and Nextcloud's layout: a grantee's mounts are folders of their tree there too, each verb asks
/// the access decision for each item it touches, and Nextcloud's properties tell the apps what is read-only.
@Suite("Sharing over WebDAV")
struct SharingDAVTests {
    /// Alice shares `Project` (holding `plan.txt`, beside `Private/secret.txt`) with Bob in `role`; Bob accepts into his
    /// root. Both have app passwords.
    struct Shared {
        var alice: APIClient
        var bob: APIClient
        var aliceDAV: DAVClient
        var bobDAV: DAVClient
        var aliceName: String
        var bobName: String
        var project: File
        var plan: File
        var grant: Grant
    }

    static func share(_ server: TestServer, role: ShareRole) async throws -> Shared {
        let (alice, aliceDAV, aliceName, _) = try await NextcloudTests.user(server, "alice")
        let (bob, bobDAV, bobName, _) = try await NextcloudTests.user(server, "bob")
        let project = try await alice.mkdir("Project")
        let plan = try await alice.upload("plan.txt", Data("the plan".utf8), in: project.id)
        let privateFolder = try await alice.mkdir("Private")
        _ = try await alice.upload("secret.txt", Data("secret".utf8), in: privateFolder.id)
        let grant: Grant = try await alice.send(.POST, "/v1/files/\(project.id)/grants", json: GrantRequest(user: bobName, role: role)).decode()
        #expect(try await bob.send(.POST, "/v1/shares/incoming/\(grant.id)/accept").status == 200)
        return Shared(
            alice: alice, bob: bob, aliceDAV: aliceDAV, bobDAV: bobDAV, aliceName: aliceName, bobName: bobName, project: project, plan: plan,
            grant: grant)
    }

    @Test("a viewer's mount is a folder of their WebDAV tree: listed, read, downloaded; every change (PUT, MKCOL, DELETE, MOVE, COPY, PROPPATCH, LOCK) is 403 and changes nothing")
    func viewer() async throws {
        try await TestServer.run { server in
            let s = try await Self.share(server, role: .viewer)
            let dav = s.bobDAV
            let root = try await dav.send(.PROPFIND, "/dav/", nil, ["Depth": "1"])
            #expect(root.status == 207 && root.text.contains("<d:href>/dav/Project/</d:href>"), "\(root.text)")
            let inside = try await dav.send(.PROPFIND, "/dav/Project/", nil, ["Depth": "1"])
            #expect(inside.status == 207 && inside.text.contains("<d:href>/dav/Project/plan.txt</d:href>"), "\(inside.text)")
            #expect(try await dav.send(.GET, "/dav/Project/plan.txt").body == Data("the plan".utf8))
            #expect(try await dav.send(.GET, "/dav/Project/").text.contains("plan.txt"))
            #expect(try await dav.send(.PUT, "/dav/mine.txt", "mine").status == 201, "their own tree is theirs")

            let lockBody = #"<?xml version="1.0"?><d:lockinfo xmlns:d="DAV:"><d:lockscope><d:exclusive/></d:lockscope><d:locktype><d:write/></d:locktype></d:lockinfo>"#
            let propBody = #"<?xml version="1.0"?><d:propertyupdate xmlns:d="DAV:" xmlns:x="urn:x"><d:set><d:prop><x:tag>1</x:tag></d:prop></d:set></d:propertyupdate>"#
            let refused: [(HTTPMethod, String, String?, [String: String])] = [
                (.PUT, "/dav/Project/plan.txt", "mine", [:]),
                (.PUT, "/dav/Project/new.txt", "new", [:]),
                (.MKCOL, "/dav/Project/Sub", nil, [:]),
                (.DELETE, "/dav/Project/plan.txt", nil, [:]),
                (.MOVE, "/dav/Project/plan.txt", nil, ["Destination": "/dav/Project/renamed.txt"]),
                (.MOVE, "/dav/Project/plan.txt", nil, ["Destination": "/dav/plan.txt"]),
                (.MOVE, "/dav/mine.txt", nil, ["Destination": "/dav/Project/mine.txt"]),
                (.COPY, "/dav/mine.txt", nil, ["Destination": "/dav/Project/mine.txt"]),
                (.COPY, "/dav/Project/plan.txt", nil, ["Destination": "/dav/Project/copy.txt"]),
                (.PROPPATCH, "/dav/Project/plan.txt", propBody, [:]),
                (.LOCK, "/dav/Project/plan.txt", lockBody, [:]),
                (.LOCK, "/dav/Project/locked.txt", lockBody, [:]),
            ]
            for (method, path, body, headers) in refused {
                let reply = try await dav.send(method, path, body.map { Data($0.utf8) }, headers)
                #expect(reply.status == 403, "\(method) \(path) \(headers) → \(reply.status) \(reply.text)")
            }
            #expect(try await s.alice.list(s.project.id).files.map(\.name) == ["plan.txt"], "nothing changed for the owner")
            #expect(try await s.alice.content(s.plan.id) == Data("the plan".utf8))
            #expect(try await s.alice.get("/v1/trash").decode(FileList.self).files.isEmpty)
            // The owner's other folders are not in Bob's tree at all.
            #expect(try await dav.send(.PROPFIND, "/dav/Private/", nil, ["Depth": "0"]).status == 404)
            #expect(try await dav.send(.GET, "/dav/Private/secret.txt").status == 404)
        }
    }

    @Test("an editor writes into the share over WebDAV (the owner's files, the owner's quota); moving across the share's edge is 403; the mount moves, renames and leaves in the grantee's tree only")
    func editor() async throws {
        try await TestServer.run { server in
            let s = try await Self.share(server, role: .editor)
            let dav = s.bobDAV
            #expect(try await dav.send(.PUT, "/dav/Project/notes.txt", "bob's notes").status == 201)
            #expect(try await dav.send(.PUT, "/dav/Project/plan.txt", "the better plan").status == 204)
            #expect(try await dav.send(.MKCOL, "/dav/Project/Sub").status == 201)
            #expect(try await dav.send(.MOVE, "/dav/Project/notes.txt", nil, ["Destination": "/dav/Project/Sub/n.txt"]).status == 201)
            #expect(try await dav.send(.COPY, "/dav/Project/plan.txt", nil, ["Destination": "/dav/Project/Sub/plan copy.txt"]).status == 201)
            let sub = try #require(try await s.alice.list(s.project.id).files.first { $0.name == "Sub" })
            #expect(try await s.alice.list(sub.id).files.map(\.name) == ["n.txt", "plan copy.txt"], "the owner's items")
            #expect(try await s.alice.content(s.plan.id) == Data("the better plan".utf8))
            let bobAbout: About = try await s.bob.get("/v1/about").decode()
            #expect(bobAbout.quota.used == 0, "the owner's quota pays")

            // Across the share's edge: out of it, into it, a copy between trees.
            #expect(try await dav.send(.PUT, "/dav/mine.txt", "mine").status == 201)
            #expect(try await dav.send(.MOVE, "/dav/Project/Sub/n.txt", nil, ["Destination": "/dav/n.txt"]).status == 403)
            #expect(try await dav.send(.MOVE, "/dav/mine.txt", nil, ["Destination": "/dav/Project/mine.txt"]).status == 403)
            #expect(try await dav.send(.COPY, "/dav/Project/plan.txt", nil, ["Destination": "/dav/plan.txt"]).status == 403)
            #expect(try await dav.send(.DELETE, "/dav/Project/Sub/n.txt").status == 204)
            #expect(try await s.alice.get("/v1/trash").decode(FileList.self).files.map(\.name) == ["n.txt"], "in the owner's trash")

            // The mount: renamed and moved in Bob's tree only; deleted, Bob leaves the share and Alice's items stay.
            #expect(try await dav.send(.MKCOL, "/dav/Inbox").status == 201)
            #expect(try await dav.send(.MOVE, "/dav/Project", nil, ["Destination": "/dav/Inbox/Alice's"]).status == 201)
            #expect(try await dav.send(.GET, "/dav/Inbox/Alice's/plan.txt").body == Data("the better plan".utf8))
            #expect(try await s.alice.get("/v1/files/\(s.project.id)").decode(File.self).name == "Project")
            #expect(try await dav.send(.MOVE, "/dav/Inbox/Alice's", nil, ["Destination": "/dav/Inbox/Alice's/Sub/x"]).status == 403)
            #expect(try await dav.send(.DELETE, "/dav/Inbox/Alice's").status == 204)
            #expect(try await dav.send(.PROPFIND, "/dav/Inbox/Alice's", nil, ["Depth": "0"]).status == 404)
            #expect(try await s.alice.list(s.project.id).files.map(\.name) == ["Sub", "plan.txt"])
            #expect(try await s.alice.get("/v1/trash").decode(FileList.self).files.map(\.name) == ["n.txt"], "nothing more trashed")
            let incoming: IncomingShareList = try await s.bob.get("/v1/shares/incoming").decode()
            #expect(incoming.shares.map(\.grant.state) == [.declined])
        }
    }

    @Test("Nextcloud's properties: oc:permissions tell a viewer's share read-only (SMG) and an editor's writable, the mount root deletable and movable; owner, mount-type, share-types")
    func nextcloudProperties() async throws {
        try await TestServer.run { server in
            let s = try await Self.share(server, role: .viewer)
            let base = "/remote.php/dav/files/\(s.bobName)"
            let listed = try await NextcloudTests.properties(s.bobDAV, "\(base)/Project/")
            let mount = try #require(listed["\(base)/Project/"], "\(listed)")
            let plan = try #require(listed["\(base)/Project/plan.txt"])
            #expect(mount["oc:permissions"] == "SMGDNV", "the grantee's own mount: deletable, renamable, movable; nothing added inside: \(mount)")
            #expect(plan["oc:permissions"] == "SMG", "read-only: \(plan)")
            #expect(plan["oc:owner-id"] == s.aliceName && plan["oc:fileid"] != nil)
            let mountType = try await s.bobDAV.send(
                .PROPFIND, "\(base)/Project/", #"<d:propfind xmlns:d="DAV:" xmlns:nc="http://nextcloud.org/ns"><d:prop><nc:mount-type/></d:prop></d:propfind>"#,
                ["Depth": "0"])
            #expect(mountType.text.contains("<nc:mount-type>shared</nc:mount-type>"), "\(mountType.text)")

            // Editor: writable inside; the owner's listing says what is shared (0 people, 3 a link).
            #expect(try await s.alice.send(.PATCH, "/v1/grants/\(s.grant.id)", json: GrantUpdate(role: .editor)).status == 200)
            let edited = try await NextcloudTests.properties(s.bobDAV, "\(base)/Project/")
            #expect(edited["\(base)/Project/"]?["oc:permissions"] == "SMGDNVCK" && edited["\(base)/Project/plan.txt"]?["oc:permissions"] == "SMGDNVW", "\(edited)")
            #expect(try await s.alice.send(.POST, "/v1/files/\(s.plan.id)/links", json: LinkRequest(access: .view)).status == 201)
            let aliceBase = "/remote.php/dav/files/\(s.aliceName)"
            let own = try await NextcloudTests.properties(s.aliceDAV, "\(aliceBase)/")
            #expect(own["\(aliceBase)/Project/"]?["oc:share-types"] == "0" && own["\(aliceBase)/Private/"]?["oc:share-types"] == "", "\(own)")
            #expect(own["\(aliceBase)/Project/"]?["oc:permissions"] == "RGDNVCK")
            let inProject = try await NextcloudTests.properties(s.aliceDAV, "\(aliceBase)/Project/")
            #expect(inProject["\(aliceBase)/Project/plan.txt"]?["oc:share-types"] == "3", "\(inProject)")
        }
    }

    @Test("a chunked upload into a share (Nextcloud's, as the desktop client sends a big file) becomes the owner's file, counted in the owner's quota only")
    func chunkedUploadIntoShare() async throws {
        try await TestServer.run { server in
            let s = try await Self.share(server, role: .editor)
            let uploads = "/remote.php/dav/uploads/\(s.bobName)"
            let files = "\(server.baseURL)/remote.php/dav/files/\(s.bobName)"
            let one = randomData(700_000), two = randomData(300_000)
            #expect(try await s.bobDAV.send(.MKCOL, "\(uploads)/u1", nil, ["Destination": "\(files)/Project/big.bin"]).status == 201)
            #expect(try await s.bobDAV.send(.PUT, "\(uploads)/u1/1", one).status == 201)
            #expect(try await s.bobDAV.send(.PUT, "\(uploads)/u1/2", two).status == 201)
            let done = try await s.bobDAV.send(.MOVE, "\(uploads)/u1/.file", nil, ["Destination": "\(files)/Project/big.bin", "OC-Total-Length": "1000000"])
            #expect(done.status == 201, "\(done.text)")
            let big = try #require(try await s.alice.list(s.project.id).files.first { $0.name == "big.bin" })
            #expect(big.checksum == sha256(one + two) && big.owner?.username == s.aliceName)
            #expect(try await s.alice.content(big.id) == one + two)
            let aliceAbout: About = try await s.alice.get("/v1/about").decode()
            let bobAbout: About = try await s.bob.get("/v1/about").decode()
            #expect(aliceAbout.quota.used == 1_000_000 + Int64("the plan".utf8.count + "secret".utf8.count))
            #expect(bobAbout.quota.used == 0, "the chunks left the uploader's quota with the upload")
            #expect(try await s.bobDAV.send(.PROPFIND, "\(uploads)/u1/", nil, ["Depth": "0"]).status == 404, "the upload is gone")

            // A viewer's chunked upload into the share is refused at assembly, and nothing is made.
            #expect(try await s.alice.send(.PATCH, "/v1/grants/\(s.grant.id)", json: GrantUpdate(role: .viewer)).status == 200)
            #expect(try await s.bobDAV.send(.MKCOL, "\(uploads)/u2").status == 201)
            #expect(try await s.bobDAV.send(.PUT, "\(uploads)/u2/1", one).status == 201)
            let refused = try await s.bobDAV.send(.MOVE, "\(uploads)/u2/.file", nil, ["Destination": "\(files)/Project/other.bin"])
            #expect(refused.status == 403, "\(refused.text)")
            #expect(try await s.alice.list(s.project.id).files.map(\.name) == ["big.bin", "plan.txt"])
        }
    }
}
