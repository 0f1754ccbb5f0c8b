import Foundation
import NimbusAPI
import NimbusServer
import NimbusTestSupport
import Testing

/// Finding files over the real server: sorted listings, search (both databases' indexes), stars, recent files and
/// the activity history.
@Suite("Finding files")
struct FindingTests {
    func search(_ client: APIClient, _ query: String) async throws -> FileList {
        let reply = try await client.get("/v1/search?q=" + (query.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? query))
        #expect(reply.status == 200, "search \(query): \(reply.text)")
        return try reply.decode()
    }

    @Test("listings sort by name, modified or size, either way, folders always first; a bad sort or order is a 400")
    func sortedListings() async throws {
        try await TestServer.run { server in
            let alice = try await server.signUp()
            _ = try await alice.upload("b.txt", Data(repeating: 1, count: 30))
            server.clock.advance(by: 10)
            _ = try await alice.upload("a.txt", Data(repeating: 1, count: 10))
            server.clock.advance(by: 10)
            _ = try await alice.upload("c.txt", Data(repeating: 1, count: 20))
            _ = try await alice.mkdir("zeta")
            _ = try await alice.mkdir("alpha")
            func names(_ query: String) async throws -> [String] { try await alice.list(query: query).files.map(\.name) }
            #expect(try await names("") == ["alpha", "zeta", "a.txt", "b.txt", "c.txt"])
            #expect(try await names("sort=name&order=desc") == ["zeta", "alpha", "c.txt", "b.txt", "a.txt"])
            #expect(try await names("sort=size") == ["alpha", "zeta", "a.txt", "c.txt", "b.txt"])
            #expect(try await names("sort=size&order=desc") == ["alpha", "zeta", "b.txt", "c.txt", "a.txt"])
            #expect(try await names("sort=modified&order=desc").suffix(3) == ["c.txt", "a.txt", "b.txt"])
            #expect(try await names("sort=modified").suffix(3) == ["b.txt", "a.txt", "c.txt"])
            #expect(try await names("sort=size&order=desc&limit=2&page=2") == ["b.txt", "c.txt"])
            for bad in ["sort=date", "order=up", "sort="] {
                let reply = try await alice.get("/v1/files?\(bad)")
                #expect(reply.status == 400, "\(bad)")
                #expect(reply.errorCode == "invalid_request")
            }
        }
    }

    @Test("search finds any part of a name, ignoring case, accents and width, across the tree, with each hit's path")
    func searchNames() async throws {
        try await TestServer.run { server in
            let alice = try await server.signUp()
            let work = try await alice.mkdir("Work")
            let reports = try await alice.mkdir("Reports", in: work.id)
            _ = try await alice.upload("Café Menu.pdf", Data("menu".utf8), in: reports.id)
            _ = try await alice.upload("cafeteria.txt", Data("x".utf8))
            _ = try await alice.upload("notes.txt", Data("x".utf8), in: work.id)
            _ = try await alice.upload("100%_done.txt", Data("x".utf8))
            _ = try await alice.upload("1000 done.txt", Data("x".utf8))

            let cafe = try await search(alice, "CAFE")
            #expect(Set(cafe.files.map(\.name)) == ["Café Menu.pdf", "cafeteria.txt"])
            #expect(cafe.pagination.totalItems == 2)
            #expect(cafe.files.first { $0.name == "Café Menu.pdf" }?.path == "/Work/Reports/Café Menu.pdf")
            #expect(cafe.files.first { $0.name == "cafeteria.txt" }?.path == "/cafeteria.txt")
            #expect(try await search(alice, "éNU").files.map(\.name) == ["Café Menu.pdf"], "accents in the query fold too")
            #expect(try await search(alice, "ｍｅｎｕ").files.map(\.name) == ["Café Menu.pdf"], "full-width letters fold")
            #expect(try await search(alice, "eport").files.map(\.name) == ["Reports"], "folders are found")
            #expect(try await search(alice, "NO").files.map(\.name) == ["notes.txt"], "one or two characters: names starting with them")
            #expect(try await search(alice, "te").files.isEmpty, "…not any part (that would be most of a tree)")
            #expect(try await search(alice, "%_d").files.map(\.name) == ["100%_done.txt"], "LIKE's wildcards are plain characters")
            #expect(try await search(alice, "10").files.map(\.name).sorted() == ["100%_done.txt", "1000 done.txt"])
            #expect(try await search(alice, "zzz").files.isEmpty)
            #expect(try await search(alice, "My Drive").files.isEmpty, "the root is never a hit")
            // Names that start with the text come first (then the newest, then by name).
            _ = try await alice.upload("done list.txt", Data("x".utf8))
            #expect(try await search(alice, "done").files.map(\.name) == ["done list.txt", "100%_done.txt", "1000 done.txt"])
        }
    }

    @Test("search follows renames, moves and the trash, filters by kind and date, pages, and refuses empty or long text")
    func searchFollowsChanges() async throws {
        try await TestServer.run { server in
            let alice = try await server.signUp()
            let photo = try await alice.upload("holiday.jpg", Data("jpeg".utf8), query: "&mimeType=image/jpeg")
            let doc = try await alice.upload("holiday plan.txt", Data("plan".utf8))
            _ = try await alice.mkdir("holiday stuff")
            #expect(try await search(alice, "holiday").pagination.totalItems == 3)
            let images: FileList = try await alice.get("/v1/search?q=holiday&type=image").decode()
            #expect(images.files.map(\.id) == [photo.id])
            let folders: FileList = try await alice.get("/v1/search?q=holiday&type=folder").decode()
            #expect(folders.files.map(\.name) == ["holiday stuff"])
            let documents: FileList = try await alice.get("/v1/search?q=holiday&type=document").decode()
            #expect(documents.files.map(\.id) == [doc.id])

            server.clock.advance(by: 60)
            let cutoff = ISO8601.string(from: server.clock.now())
            server.clock.advance(by: 1)
            let renamed = try await alice.send(.PATCH, "/v1/files/\(doc.id)", json: UpdateFileRequest(name: "trip plan.txt"))
            #expect(renamed.status == 200)
            #expect(try await search(alice, "trip").files.map(\.id) == [doc.id])
            #expect(try await search(alice, "holiday").pagination.totalItems == 2, "the old name is not found")
            _ = try await alice.upload("holiday video.mp4", Data("v".utf8), query: "&mimeType=video/mp4")
            let recent: FileList = try await alice.get("/v1/search?q=holiday&modifiedAfter=\(cutoff)").decode()
            #expect(recent.files.map(\.name) == ["holiday video.mp4"])

            #expect(try await alice.send(.DELETE, "/v1/files/\(photo.id)").status == 204)
            #expect(try await search(alice, "holiday.jpg").files.isEmpty, "trashed items are not found")
            #expect(try await alice.send(.POST, "/v1/files/\(photo.id)/untrash").status == 200)
            #expect(try await search(alice, "holiday.jpg").files.map(\.id) == [photo.id], "restored, found again")

            let first: FileList = try await alice.get("/v1/search?q=holiday&limit=2").decode()
            let second: FileList = try await alice.get("/v1/search?q=holiday&limit=2&page=2").decode()
            #expect(first.files.count == 2 && first.pagination.nextPage == 2)
            #expect(second.files.count == 1 && second.pagination.nextPage == nil)
            #expect(Set(first.files.map(\.id) + second.files.map(\.id)).count == 3)

            for bad in ["q=", "q=%20%20", "", "q=a&type=movie", "q=a&modifiedAfter=yesterday", "q=" + String(repeating: "a", count: 256)] {
                let reply = try await alice.get("/v1/search?\(bad)")
                #expect(reply.status == 400, "\(bad): \(reply.text)")
                #expect(reply.errorCode == "invalid_request")
            }
        }
    }

    @Test("search reaches the shares a user accepted (under their mount's path) and nothing else of the owner's")
    func searchShares() async throws {
        try await TestServer.run { server in
            let shared = try await SharingTests.share(server, role: .viewer)
            let carol = try await server.signUp("carol")
            _ = try await carol.upload("plan of carol.txt", Data("c".utf8))
            let hits = try await search(shared.bob, "plan")
            #expect(hits.files.map(\.id) == [shared.plan.id])
            #expect(hits.files.first?.path == "/Project/plan.txt")
            #expect(hits.files.first?.capabilities?.canEdit == false, "a viewer's hit says so")
            #expect(try await search(shared.bob, "secret").files.isEmpty, "the owner's items outside the share stay hidden")
            // The mount renamed and moved by Bob: the path follows his view.
            let folder = try await shared.bob.mkdir("From Alice")
            let moved = try await shared.bob.send(.PATCH, "/v1/files/\(shared.project.id)", json: UpdateFileRequest(name: "Alice's project", parentId: folder.id))
            #expect(moved.status == 200, "\(moved.text)")
            #expect(try await search(shared.bob, "plan").files.first?.path == "/From Alice/Alice's project/plan.txt")
            #expect(try await search(shared.bob, "alice's").files.map(\.id) == [shared.project.id], "the mount root by its name for Bob")
            // Unshared: gone from his results.
            #expect(try await shared.alice.send(.DELETE, "/v1/grants/\(shared.grant.id)").status == 204)
            #expect(try await search(shared.bob, "plan").files.isEmpty)
        }
    }

    @Test("stars: put and delete answer 204, the starred list and listings say so, trash hides and deleting forgets them")
    func stars() async throws {
        try await TestServer.run { server in
            let alice = try await server.signUp()
            let bob = try await server.signUp()
            let a = try await alice.upload("a.txt", Data("a".utf8))
            let b = try await alice.upload("b.txt", Data("b".utf8))
            #expect(try await alice.send(.PUT, "/v1/files/\(a.id)/star").status == 204)
            #expect(try await alice.send(.PUT, "/v1/files/\(a.id)/star").status == 204, "starring twice is still one star")
            server.clock.advance(by: 1)
            #expect(try await alice.send(.PUT, "/v1/files/\(b.id)/star").status == 204)
            let starred: FileList = try await alice.get("/v1/starred").decode()
            #expect(starred.files.map(\.id) == [b.id, a.id], "newest star first")
            #expect(starred.files.allSatisfy { $0.starred == true })
            let listing = try await alice.list()
            #expect(listing.files.first { $0.id == a.id }?.starred == true)
            #expect(try await alice.send(.DELETE, "/v1/files/\(b.id)/star").status == 204)
            #expect(try await alice.get("/v1/starred").decode(FileList.self).files.map(\.id) == [a.id])
            #expect(try await alice.list().files.first { $0.id == b.id }?.starred == false)
            // Someone else's item: as if it did not exist.
            #expect(try await bob.send(.PUT, "/v1/files/\(a.id)/star").status == 404)
            #expect(try await bob.get("/v1/starred").decode(FileList.self).files.isEmpty)
            #expect(try await alice.send(.PUT, "/v1/files/root/star").status == 400)
            #expect(try await alice.send(.DELETE, "/v1/files/\(a.id)").status == 204)
            #expect(try await alice.get("/v1/starred").decode(FileList.self).files.isEmpty, "a trashed item is not listed")
            #expect(try await alice.send(.POST, "/v1/files/\(a.id)/untrash").status == 200)
            #expect(try await alice.get("/v1/starred").decode(FileList.self).files.map(\.id) == [a.id], "restored, starred again")
        }
    }

    @Test("recent: what the user's devices changed and what a browser of theirs opened, newest first; a sync download is not opening")
    func recent() async throws {
        try await TestServer.run { server in
            let alice = try await server.signUp("alice")
            let laptop = try await server.logIn("alice", device: "laptop")
            let old = try await alice.upload("old.txt", Data("o".utf8))
            server.clock.advance(by: 10)
            let edited = try await laptop.upload("edited.txt", Data("e".utf8))
            _ = try await alice.mkdir("a folder")
            server.clock.advance(by: 10)
            var names = try await alice.get("/v1/recent").decode(FileList.self).files.map(\.name)
            #expect(names == ["edited.txt", "old.txt"], "changes from every device of hers, folders not listed")
            _ = try await alice.get("/v1/files/\(old.id)/content")
            names = try await alice.get("/v1/recent").decode(FileList.self).files.map(\.name)
            #expect(names == ["edited.txt", "old.txt"], "a download without a browser's headers is not an opening")
            server.clock.advance(by: 10)
            _ = try await alice.get("/v1/files/\(old.id)/content", headers: ["Sec-Fetch-Site": "same-origin", "Sec-Fetch-Dest": "empty"])
            names = try await alice.get("/v1/recent").decode(FileList.self).files.map(\.name)
            #expect(names == ["old.txt", "edited.txt"], "opened in a browser: most recent")
            #expect(try await alice.send(.DELETE, "/v1/files/\(edited.id)").status == 204)
            #expect(try await alice.get("/v1/recent").decode(FileList.self).files.map(\.name) == ["old.txt"])
        }
    }

    @Test("activity: who did what, with which device, in words; a grantee's change shows in the owner's history; nobody else sees it")
    func activity() async throws {
        try await TestServer.run { server in
            let shared = try await SharingTests.share(server, role: .editor)
            let alice = shared.alice
            let phone = try await server.logIn("alice", device: "Alice's phone")
            let note = try await phone.upload("note.txt", Data("1".utf8))
            server.clock.advance(by: 1)
            #expect(try await alice.send(.PATCH, "/v1/files/\(note.id)", json: UpdateFileRequest(name: "renamed.txt")).status == 200)
            server.clock.advance(by: 1)
            #expect(try await alice.send(.DELETE, "/v1/files/\(note.id)").status == 204)
            server.clock.advance(by: 1)
            // Bob edits the shared plan.
            let edit = try await shared.bob.send(.POST, "/v1/upload?uploadType=media&fileId=\(shared.plan.id)", body: Data("new plan".utf8))
            #expect(edit.status == 200 || edit.status == 201, "\(edit.text)")

            let events = try await alice.get("/v1/activity").decode(ActivityList.self).events
            #expect(Array(events.prefix(4).map(\.action)) == [.edited, .trashed, .renamed, .uploaded], "\(events.map(\.summary))")
            #expect(events[0].by.username == "bob" && events[0].file.id == shared.plan.id)
            #expect(events[0].summary == "bob (test) edited plan.txt")
            #expect(events[3].by.deviceName == "Alice's phone")
            #expect(events[3].summary == "alice (Alice's phone) uploaded note.txt")
            #expect(events[1].file.trashed)
            #expect(events[2].summary == "alice (test) renamed a file to renamed.txt")
            // Bob sees his own action in a share, not Alice's private history.
            let bobs = try await shared.bob.get("/v1/activity").decode(ActivityList.self).events
            #expect(bobs.map(\.file.id).contains(shared.plan.id))
            #expect(!bobs.map(\.file.id).contains(note.id))
            // Purged for good: the event stays, with the item as it was.
            #expect(try await alice.send(.DELETE, "/v1/files/\(note.id)?permanent=true").status == 204)
            let after = try await alice.get("/v1/activity").decode(ActivityList.self).events
            #expect(after.first?.action == .deleted)
            #expect(after.first?.file.name == "renamed.txt" && after.first?.file.downloadUrl == nil)
        }
    }
}
