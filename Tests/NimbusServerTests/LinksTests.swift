import Foundation
import NimbusAPI
import NimbusServer
import NIOHTTP1
import Testing

/// Public links over the real server: their tokens, what each kind allows anyone who has one (through the access
/// decision, as the link), passwords and their throttling per address, expiry, download limits, file drops.
@Suite("Public links")
struct LinksTests {
    /// Alice's `Project` (with `plan.txt` and `Sub/deep.txt`) beside `Private/secret.txt`.
    struct Tree {
        var alice: APIClient
        var project: File
        var plan: File
        var sub: File
        var deep: File
        var secret: File
    }

    static func tree(_ server: TestServer) async throws -> Tree {
        let alice = try await server.signUp("alice")
        let project = try await alice.mkdir("Project")
        let plan = try await alice.upload("plan.txt", Data("the plan".utf8), in: project.id)
        let sub = try await alice.mkdir("Sub", in: project.id)
        let deep = try await alice.upload("deep.txt", Data("deep".utf8), in: sub.id)
        let privateFolder = try await alice.mkdir("Private")
        let secret = try await alice.upload("secret.txt", Data("secret".utf8), in: privateFolder.id)
        return Tree(alice: alice, project: project, plan: plan, sub: sub, deep: deep, secret: secret)
    }

    static func link(_ alice: APIClient, _ itemId: String, _ request: LinkRequest) async throws -> Link {
        let reply = try await alice.send(.POST, "/v1/files/\(itemId)/links", json: request)
        #expect(reply.status == 201, "\(reply.text)")
        return try reply.decode()
    }

    @Test("a view link: its token only in the answers that made and show it; anyone lists and downloads what is beneath it, nothing else, and changes nothing")
    func viewLink() async throws {
        try await TestServer.run(configure: { $0.recordsAccessDecisions = true }) { server in
            let t = try await Self.tree(server)
            let link = try await Self.link(t.alice, t.project.id, LinkRequest(access: .view))
            let token = try #require(link.token)
            #expect(token.count >= 26, "at least 128 random bits")
            #expect(link.url.hasSuffix("/s/\(token)") && !link.passwordSet && link.downloads == 0)
            // Never in a list; in GET /v1/links/{id}, again.
            let listed = try await t.alice.get("/v1/links")
            let listedLinks = try listed.decode(LinkList.self).links.map(\.id)
            #expect(!listed.text.contains(token) && listedLinks == [link.id])
            let grants = try await t.alice.get("/v1/files/\(t.project.id)/grants")
            let grantLinks = try grants.decode(GrantList.self).links.map(\.id)
            #expect(!grants.text.contains(token) && grantLinks == [link.id])
            #expect(try await t.alice.get("/v1/links/\(link.id)").decode(Link.self).token == token)

            let anyone = APIClient(baseURL: server.baseURL)
            let info: PublicLinkInfo = try await anyone.get("/v1/public/\(token)").decode()
            #expect(info.name == "Project" && info.isFolder && info.access == .view && !info.passwordRequired)
            let top: FileList = try await anyone.get("/v1/public/\(token)/items").decode()
            #expect(top.files.map(\.name) == ["Sub", "plan.txt"])
            #expect(!(try await anyone.get("/v1/public/\(token)/items").text.contains(token)))
            #expect(try await anyone.get("/v1/public/\(token)/items?parentId=\(t.sub.id)").decode(FileList.self).files.map(\.id) == [t.deep.id])
            _ = server.parts.accessDecisions()
            let content = try await anyone.get("/v1/public/\(token)/items/\(t.plan.id)/content")
            #expect(content.status == 200 && content.body == Data("the plan".utf8))
            #expect(server.parts.accessDecisions().contains { $0.userId == "link:\(link.id)" && $0.itemId == t.plan.id && $0.allowed })
            // Outside the linked folder — a sibling, the owner's root — exactly as if it did not exist.
            for id in [t.secret.id, try #require(t.project.parentId)] {
                #expect(try await anyone.get("/v1/public/\(token)/items/\(id)/content").status == 404)
                #expect(try await anyone.get("/v1/public/\(token)/items?parentId=\(id)").status == 404)
            }
            let drop = try await anyone.send(.POST, "/v1/public/\(token)/upload?name=x.txt", body: Data("x".utf8))
            #expect(drop.status == 403 && drop.errorCode == "forbidden", "\(drop.text)")
            #expect(try await t.alice.list(t.project.id).files.count == 2)
            // The owner's session is no key to someone else's link, and a link is no key to the API.
            #expect(try await anyone.send(.GET, "/v1/files/\(t.plan.id)", headers: ["Authorization": "Bearer \(token)"]).status == 401)
        }
    }

    @Test("a weak password makes no link; a link's calls need a session; wrong passwords from one address are throttled (429, doubling), not another's")
    func passwords() async throws {
        try await TestServer.run { server in
            let t = try await Self.tree(server)
            let weak = try await t.alice.send(.POST, "/v1/files/\(t.project.id)/links", json: LinkRequest(access: .view, password: "short"))
            #expect(weak.status == 400 && weak.errorCode == "weak_password")
            #expect(try await t.alice.get("/v1/links").decode(LinkList.self).links.isEmpty, "no link without the protection asked for")
            let link = try await Self.link(t.alice, t.project.id, LinkRequest(access: .view, password: "correct horse"))
            let token = try #require(link.token)
            #expect(link.passwordSet)
            let anyone = APIClient(baseURL: server.baseURL)
            #expect(try await anyone.get("/v1/public/\(token)").decode(PublicLinkInfo.self).passwordRequired)
            #expect(try await anyone.get("/v1/public/\(token)/items").errorCode == "password_required")
            for _ in 0..<4 {
                let wrong = try await anyone.send(.POST, "/v1/public/\(token)/session", json: LinkSessionRequest(password: "wrong horse"))
                #expect(wrong.status == 401 && wrong.errorCode == "password_incorrect")
            }
            let fifth = try await anyone.send(.POST, "/v1/public/\(token)/session", json: LinkSessionRequest(password: "wrong horse"))
            #expect(fifth.status == 401)
            let locked = try await anyone.send(.POST, "/v1/public/\(token)/session", json: LinkSessionRequest(password: "correct horse"))
            #expect(locked.status == 429 && Int(locked.header("Retry-After") ?? "") ?? 0 > 0, "\(locked.text)")
            // Another address is not locked out.
            let elsewhere = try Curl.run(["-s", "--interface", "127.0.0.2", "-X", "POST", "-H", "Content-Type: application/json",
                "-d", #"{"password":"correct horse"}"#, server.baseURL + "/v1/public/\(token)/session"])
            let session = try JSONDecoder.nimbus.decode(LinkSession.self, from: Data(elsewhere.utf8))
            let items = try await anyone.send(.GET, "/v1/public/\(token)/items", headers: ["Authorization": "Bearer \(session.session)"])
            #expect(items.status == 200, "\(items.text)")
            // A new password ends the sessions made under the old one.
            #expect(try await t.alice.send(.PATCH, "/v1/links/\(link.id)", json: LinkUpdate(password: "battery staple")).status == 200)
            #expect(try await anyone.send(.GET, "/v1/public/\(token)/items", headers: ["Authorization": "Bearer \(session.session)"]).status == 401)
        }
    }

    @Test("unknown tokens answer 404 until an address has guessed too often (429); expired, turned off and used-up links answer 410")
    func endedAndUnknown() async throws {
        try await TestServer.run { server in
            let t = try await Self.tree(server)
            let anyone = APIClient(baseURL: server.baseURL)
            let limited = try await Self.link(t.alice, t.plan.id, LinkRequest(access: .view, maxDownloads: 2))
            let limitedToken = try #require(limited.token)
            let path = "/v1/public/\(limitedToken)/items/\(t.plan.id)/content"
            #expect(try await anyone.get(path).status == 200)
            #expect(try await anyone.get(path, headers: ["Range": "bytes=0-2"]).status == 206, "a range is not a download")
            #expect(try await anyone.get(path).status == 200)
            #expect(try await anyone.get(path).status == 410)
            #expect(try await t.alice.get("/v1/links/\(limited.id)").decode(Link.self).downloads == 2)

            let expiring = try await Self.link(t.alice, t.project.id, LinkRequest(access: .view, expiresAt: server.clock.now().addingTimeInterval(60)))
            let revoked = try await Self.link(t.alice, t.project.id, LinkRequest(access: .view))
            #expect(try await t.alice.send(.DELETE, "/v1/links/\(revoked.id)").status == 204)
            server.clock.advance(by: 61)
            #expect(try await anyone.get("/v1/public/\(try #require(expiring.token))").status == 410)
            #expect(try await anyone.get("/v1/public/\(try #require(revoked.token))").status == 410)

            for index in 0..<PublicControllerLimits.unknownTokens {
                let reply = try await anyone.get("/v1/public/nosuchtoken\(index)")
                #expect(reply.status == 404 && !reply.text.contains("nosuchtoken"))
            }
            let guessed = try await anyone.get("/v1/public/nosuchtoken")
            #expect(guessed.status == 429 && guessed.header("Retry-After") != nil)
        }
    }

    @Test("an upload link drops files, answering the same whether or not the name was taken; it lists nothing and serves nothing")
    func fileDrop() async throws {
        try await TestServer.run { server in
            let t = try await Self.tree(server)
            let refused = try await t.alice.send(.POST, "/v1/files/\(t.plan.id)/links", json: LinkRequest(access: .upload))
            #expect(refused.status == 400, "an upload link is to a folder")
            let link = try await Self.link(t.alice, t.project.id, LinkRequest(access: .upload))
            let token = try #require(link.token)
            let anyone = APIClient(baseURL: server.baseURL)
            let first = try await anyone.send(.POST, "/v1/public/\(token)/upload?name=plan.txt", body: Data("dropped".utf8))
            let second = try await anyone.send(.POST, "/v1/public/\(token)/upload?name=new.txt", body: Data("dropped".utf8))
            #expect(first.status == 201 && second.status == 201 && first.body == second.body, "\(first.text) \(second.text)")
            #expect(try await t.alice.list(t.project.id).files.map(\.name) == ["Sub", "new.txt", "plan (1).txt", "plan.txt"])
            #expect(try await t.alice.content(t.plan.id) == Data("the plan".utf8), "nothing written over")
            #expect(try await anyone.get("/v1/public/\(token)/items").status == 403)
            #expect(try await anyone.get("/v1/public/\(token)/items/\(t.plan.id)/content").status == 403)
            #expect(try await anyone.get("/v1/public/\(token)").decode(PublicLinkInfo.self).access == .upload)
        }
    }
}

enum PublicControllerLimits {
    static let unknownTokens = 20
}

/// curl, for requests from another loopback address (`--interface 127.0.0.2`).
enum Curl {
    static func run(_ arguments: [String]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
        process.arguments = arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return String(decoding: data, as: UTF8.self)
    }
}
