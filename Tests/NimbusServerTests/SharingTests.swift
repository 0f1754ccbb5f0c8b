import Foundation
import NimbusAPI
import NimbusServer
import NIOHTTP1
import Testing

/// Grants, mounts and the roles' rights over the real server: what a grantee sees, may and may not do, what their
/// feed carries, and that nothing a grantee does to their mount touches the owner's items.
@Suite("Sharing")
struct SharingTests {
    /// Alice shares `Project` (holding `plan.txt`, beside `Private/secret.txt`) with Bob in `role`; Bob accepts into his
    /// root.
    struct Shared {
        var alice: APIClient
        var bob: APIClient
        var project: File
        var plan: File
        var secret: File
        var privateFolder: File
        var grant: Grant
        var mount: AcceptedShare
    }

    static func share(_ server: TestServer, role: ShareRole, expiresAt: Date? = nil) async throws -> Shared {
        let alice = try await server.signUp("alice")
        let bob = try await server.signUp("bob")
        let project = try await alice.mkdir("Project")
        let plan = try await alice.upload("plan.txt", Data("the plan".utf8), in: project.id)
        let privateFolder = try await alice.mkdir("Private")
        let secret = try await alice.upload("secret.txt", Data("secret".utf8), in: privateFolder.id)
        let granted = try await alice.send(.POST, "/v1/files/\(project.id)/grants", json: GrantRequest(user: "bob", role: role, expiresAt: expiresAt))
        #expect(granted.status == 201, "\(granted.text)")
        let grant: Grant = try granted.decode()
        let accepted = try await bob.send(.POST, "/v1/shares/incoming/\(grant.id)/accept")
        #expect(accepted.status == 200, "\(accepted.text)")
        return Shared(
            alice: alice, bob: bob, project: project, plan: plan, secret: secret, privateFolder: privateFolder, grant: grant,
            mount: try accepted.decode())
    }

    @Test("a pending share shows in the grantee's incoming list only; accepted, it is mounted in their root under its name, with its owner's ids")
    func acceptMounts() async throws {
        try await TestServer.run { server in
            let alice = try await server.signUp("alice")
            let bob = try await server.signUp("bob")
            let project = try await alice.mkdir("Project")
            let plan = try await alice.upload("plan.txt", Data("the plan".utf8), in: project.id)
            _ = try await bob.mkdir("Project")  // the name is taken in Bob's root
            let grant: Grant = try await alice.send(.POST, "/v1/files/\(project.id)/grants", json: GrantRequest(user: "bob", role: .viewer)).decode()
            #expect(grant.state == .pending && grant.role == .viewer && grant.grantee.username == "bob" && grant.itemId == project.id)
            #expect(try await bob.list().files.map(\.name) == ["Project"], "nothing mounted before accepting")
            #expect(try await bob.get("/v1/files/\(project.id)").status == 404, "not reachable before accepting")

            let incoming: IncomingShareList = try await bob.get("/v1/shares/incoming").decode()
            #expect(incoming.shares.count == 1)
            #expect(incoming.shares.first?.owner.username == "alice" && incoming.shares.first?.item.id == project.id)

            let accepted: AcceptedShare = try await bob.send(.POST, "/v1/shares/incoming/\(grant.id)/accept").decode()
            #expect(accepted.file.id == project.id, "the share keeps its owner's id")
            #expect(accepted.file.name == "Project (1)", "a taken name becomes name (1)")
            #expect(accepted.file.mountId == accepted.mountId && accepted.file.owner?.username == "alice")
            #expect(accepted.file.capabilities == Capabilities(canEdit: false, canRename: true, canDelete: true, canShare: false))
            // Accepting again answers the same mount.
            let again: AcceptedShare = try await bob.send(.POST, "/v1/shares/incoming/\(grant.id)/accept").decode()
            #expect(again.mountId == accepted.mountId)

            let bobRoot = try await bob.root()
            let listed = try await bob.list()
            #expect(listed.files.map(\.name) == ["Project", "Project (1)"])
            let mounted = try #require(listed.files.first { $0.id == project.id })
            #expect(mounted.parentId == bobRoot.id && mounted.mountId == accepted.mountId && mounted.shared == true)
            let inside = try await bob.list(project.id)
            #expect(inside.files.map(\.id) == [plan.id])
            #expect(inside.files.first?.mountId == accepted.mountId && inside.files.first?.owner?.userId == project.owner?.userId)
            #expect(inside.files.first?.capabilities == Capabilities(canEdit: false, canRename: false, canDelete: false, canShare: false), "a viewer's")
            #expect(try await bob.get("/v1/files/\(plan.id)").decode(File.self).capabilities?.canRename == false)
            #expect(try await bob.content(plan.id) == Data("the plan".utf8))
            #expect(try await alice.list().files.map(\.name) == ["Project"], "the owner's tree is unchanged")
            #expect(try await alice.get("/v1/files/\(project.id)").decode(File.self).shared == true)
            let aliceGrants: GrantList = try await alice.get("/v1/files/\(project.id)/grants").decode()
            #expect(aliceGrants.grants.map(\.state) == [.accepted])
        }
    }

    @Test("a viewer reads, lists and downloads; every change is 403; everything outside the share is 404")
    func viewer() async throws {
        try await TestServer.run { server in
            let s = try await Self.share(server, role: .viewer)
            let bob = s.bob
            #expect(try await bob.get("/v1/files/\(s.plan.id)").status == 200)
            #expect(try await bob.get("/v1/files/\(s.plan.id)/revisions").status == 200)
            let refused: [(HTTPMethod, String, (any Encodable & Sendable)?)] = [
                (.POST, "/v1/files", CreateFileRequest(name: "new", mimeType: folderMimeType, parentId: s.project.id)),
                (.PATCH, "/v1/files/\(s.plan.id)", UpdateFileRequest(name: "renamed.txt")),
                (.DELETE, "/v1/files/\(s.plan.id)", nil),
                (.DELETE, "/v1/files/\(s.plan.id)?permanent=true", nil),
                (.POST, "/v1/files/\(s.plan.id)/grants", GrantRequest(user: "alice", role: .viewer)),
            ]
            for (method, path, json) in refused {
                let reply = try await bob.send(method, path, json: json)
                #expect(reply.status == 403 && reply.errorCode == "forbidden", "\(method) \(path) → \(reply.status) \(reply.text)")
            }
            let upload = try await bob.uploadReply("more.txt", Data("x".utf8), in: s.project.id)
            #expect(upload.status == 403, "\(upload.text)")
            let version = try await bob.send(.POST, "/v1/upload?uploadType=media&fileId=\(s.plan.id)", body: Data("mine".utf8))
            #expect(version.status == 403, "\(version.text)")
            // Outside the share: the owner's other folder, her root, a sibling — exactly as if they did not exist.
            for id in [s.secret.id, s.privateFolder.id, try #require(s.project.parentId)] {
                #expect(try await bob.get("/v1/files/\(id)").status == 404)
                #expect(try await bob.get("/v1/files?parentId=\(id)").status == 404)
            }
            #expect(try await bob.get("/v1/files/\(s.secret.id)/content").status == 404)
            // Nothing changed for the owner.
            #expect(try await s.alice.list(s.project.id).files.map(\.name) == ["plan.txt"])
            #expect(try await s.alice.content(s.plan.id) == Data("the plan".utf8))
        }
    }

    @Test("an editor creates, uploads, renames, moves and trashes inside the share (the owner's quota pays); moving anything out is 403")
    func editor() async throws {
        try await TestServer.run { server in
            let s = try await Self.share(server, role: .editor)
            let bob = s.bob
            let sub = try await bob.mkdir("Sub", in: s.project.id)
            #expect(sub.owner?.username == "alice" && sub.mountId == s.mount.mountId)
            let notes = try await bob.upload("notes.txt", Data("bob's notes".utf8), in: sub.id)
            let aliceAbout: About = try await s.alice.get("/v1/about").decode()
            let bobAbout: About = try await bob.get("/v1/about").decode()
            #expect(aliceAbout.quota.used == Int64("the plan".utf8.count + "secret".utf8.count + "bob's notes".utf8.count))
            #expect(bobAbout.quota.used == 0, "the owner's quota pays for what is in a share")
            let version = try await bob.send(
                .POST, "/v1/upload?uploadType=media&fileId=\(s.plan.id)", body: Data("the better plan".utf8), headers: ["If-Match": "\"\(try #require(s.plan.revisionId))\""])
            #expect(version.status == 201, "\(version.text)")
            #expect(try await bob.send(.PATCH, "/v1/files/\(notes.id)", json: UpdateFileRequest(name: "n.txt", parentId: s.project.id)).status == 200)
            #expect(try await s.alice.list(s.project.id).files.map(\.name) == ["Sub", "n.txt", "plan.txt"])
            // Out of the share, into Bob's own tree or the owner's other folders: only the owner may.
            let mine = try await bob.mkdir("Mine")
            let out = try await bob.send(.PATCH, "/v1/files/\(notes.id)", json: UpdateFileRequest(parentId: mine.id))
            #expect(out.status == 403 && out.errorCode == "forbidden", "\(out.text)")
            #expect(try await bob.send(.PATCH, "/v1/files/\(notes.id)", json: UpdateFileRequest(parentId: s.privateFolder.id)).status == 404)
            // Trash inside the share: the owner's trash; untrash by the editor; purging is the owner's alone.
            #expect(try await bob.send(.DELETE, "/v1/files/\(notes.id)").status == 204)
            #expect(try await s.alice.get("/v1/trash").decode(FileList.self).files.map(\.id) == [notes.id])
            #expect(try await bob.send(.DELETE, "/v1/files/\(notes.id)?permanent=true").status == 403)
            #expect(try await bob.send(.POST, "/v1/files/\(notes.id)/untrash").status == 200)
            #expect(try await bob.send(.POST, "/v1/files/\(s.plan.id)/grants", json: GrantRequest(user: "alice", role: .viewer)).status == 403)
            // A new role takes effect on the next request.
            #expect(try await s.alice.send(.PATCH, "/v1/grants/\(s.grant.id)", json: GrantUpdate(role: .viewer)).status == 200)
            let later = try await bob.send(.POST, "/v1/files", json: CreateFileRequest(name: "Later", mimeType: folderMimeType, parentId: s.project.id))
            #expect(later.status == 403, "\(later.text)")
        }
    }

    @Test("an editor's resumable uploads and block commits land in the share as the owner's files; blocks the editor sent are copied to the owner, a version by blocks keeps the base's")
    func editorUploadsEveryWay() async throws {
        try await TestServer.run(configure: { $0.chunkSize = 256 * 1024 }) { server in
            let s = try await Self.share(server, role: .editor)
            let bob = s.bob
            // Resumable: the session, its chunks and its file.
            let big = randomData(600_000)
            let initiated = try await bob.initiate("big.bin", size: big.count, parentId: s.project.id)
            #expect(initiated.status == 200 || initiated.status == 201, "\(initiated.text)")
            let session: UploadResponse = try initiated.decode()
            var last: APIClient.Reply?
            for chunk in 0..<session.totalChunks { last = try await bob.sendChunk(session, big, chunk: chunk) }
            #expect(last?.status == 201, "\(last?.text ?? "")")
            let bigFile = try #require(try await s.alice.list(s.project.id).files.first { $0.name == "big.bin" })
            #expect(try await s.alice.content(bigFile.id) == big)

            // Blocks: Bob's own store has them (PUT to his account), the commit copies them to Alice's.
            let block = randomData(300_000)
            let hash = sha256(block)
            #expect(try await bob.send(.PUT, "/v1/blocks/\(hash)", body: block).status == 201)
            let committed = try await bob.send(
                .POST, "/v1/blocks/commit",
                json: BlockCommitRequest(name: "blocks.bin", parentId: s.project.id, size: Int64(block.count), checksum: hash, blocks: [.block(hash)]))
            #expect(committed.status == 201, "\(committed.text)")
            let blocksFile: File = try committed.decode()
            let committedContent = try await s.alice.content(blocksFile.id)
            #expect(blocksFile.owner?.username == "alice" && committedContent == block)
            // A new version of it: the base's blocks (Alice's) and a new one (Bob's).
            let manifest: BlockManifest = try await bob.get("/v1/files/\(blocksFile.id)/blocks").decode()
            let tail = randomData(100_000)
            let tailHash = sha256(tail)
            #expect(try await bob.send(.PUT, "/v1/blocks/\(tailHash)", body: tail).status == 201)
            let version = try await bob.send(
                .POST, "/v1/blocks/commit",
                json: BlockCommitRequest(
                    fileId: blocksFile.id, baseRevisionId: manifest.revisionId, size: Int64(block.count + tail.count), checksum: sha256(block + tail),
                    blocks: [.base(from: 0, count: manifest.blocks.count), .block(tailHash)]))
            #expect(version.status == 201, "\(version.text)")
            #expect(try await s.alice.content(blocksFile.id) == block + tail)
            // A wrong checksum stores nothing.
            let wrong = try await bob.send(
                .POST, "/v1/blocks/commit",
                json: BlockCommitRequest(name: "wrong.bin", parentId: s.project.id, size: Int64(block.count), checksum: tailHash, blocks: [.block(hash)]))
            #expect(wrong.status == 422, "\(wrong.text)")
            #expect(try await s.alice.list(s.project.id).files.map(\.name) == ["big.bin", "blocks.bin", "plan.txt"])
            let bobAbout: About = try await bob.get("/v1/about").decode()
            let aliceAbout: About = try await s.alice.get("/v1/about").decode()
            #expect(aliceAbout.quota.used >= Int64(big.count + block.count + tail.count), "the owner's quota pays")
            #expect(bobAbout.quota.used == 0, "Bob's blocks, held by no file of his, are not charged to him (and are collected)")
        }
    }

    @Test("renaming, moving and deleting the mount changes the grantee's tree only; deleting it leaves the share, which can be accepted again")
    func mountIsTheGranteesOwn() async throws {
        try await TestServer.run { server in
            let s = try await Self.share(server, role: .editor)
            let bob = s.bob
            let renamed = try await bob.send(.PATCH, "/v1/files/\(s.project.id)", json: UpdateFileRequest(name: "Alice's project"))
            #expect(renamed.status == 200, "\(renamed.text)")
            #expect(try renamed.decode(File.self).name == "Alice's project")
            let inbox = try await bob.mkdir("Inbox")
            #expect(try await bob.send(.PATCH, "/v1/files/\(s.project.id)", json: UpdateFileRequest(parentId: inbox.id)).status == 200)
            #expect(try await bob.list(inbox.id).files.map(\.name) == ["Alice's project"])
            #expect(try await bob.list().files.map(\.name) == ["Inbox"])
            #expect(try await s.alice.get("/v1/files/\(s.project.id)").decode(File.self).name == "Project", "the owner's item keeps its name")
            // A name the mount holds is taken for the grantee's own items too.
            let clash = try await bob.send(.POST, "/v1/files", json: CreateFileRequest(name: "Alice's project", mimeType: folderMimeType, parentId: inbox.id))
            #expect(clash.status == 409, "\(clash.text)")
            // Into the share itself, or into someone else's tree: no.
            #expect(try await bob.send(.PATCH, "/v1/files/\(s.project.id)", json: UpdateFileRequest(parentId: s.project.id)).status == 403)

            // Deleting the mount (trash or for good) leaves the share; the owner's items are untouched.
            #expect(try await bob.send(.DELETE, "/v1/files/\(s.project.id)?permanent=true").status == 204)
            #expect(try await bob.list(inbox.id).files.isEmpty)
            #expect(try await bob.get("/v1/files/\(s.plan.id)").status == 404)
            #expect(try await s.alice.list(s.project.id).files.map(\.name) == ["plan.txt"])
            #expect(try await s.alice.get("/v1/trash").decode(FileList.self).files.isEmpty)
            let incoming: IncomingShareList = try await bob.get("/v1/shares/incoming").decode()
            #expect(incoming.shares.map(\.grant.state) == [.declined])
            let back: AcceptShareRequest = AcceptShareRequest(parentId: inbox.id, name: "Again")
            #expect(try await bob.send(.POST, "/v1/shares/incoming/\(s.grant.id)/accept", json: back).decode(AcceptedShare.self).file.name == "Again")
            // Trashing the folder that holds the mount: the share goes with it, the owner's items stay.
            #expect(try await bob.send(.DELETE, "/v1/files/\(inbox.id)?permanent=true").status == 204)
            #expect(try await bob.get("/v1/files/\(s.plan.id)").status == 404)
            #expect(try await s.alice.content(s.plan.id) == Data("the plan".utf8))
        }
    }

    @Test("bad grants change nothing: unknown users look like invisible items, the root, trashed items, past expiries, twice, nested")
    func badGrants() async throws {
        try await TestServer.run { server in
            let s = try await Self.share(server, role: .manager)
            let alice = s.alice
            let unknown = try await alice.send(.POST, "/v1/files/\(s.project.id)/grants", json: GrantRequest(user: "nobody", role: .viewer))
            let invisible = try await alice.send(.GET, "/v1/files/nosuchid")
            #expect(unknown.status == 404 && unknown.body == invisible.body, "\(unknown.text)")
            let root = try await alice.root()
            let rootGrant = try await alice.send(.POST, "/v1/files/\(root.id)/grants", json: GrantRequest(user: "bob", role: .viewer))
            #expect(rootGrant.status == 400 && rootGrant.errorCode == "cannot_share_root")
            let past = try await alice.send(.POST, "/v1/files/\(s.secret.id)/grants", json: GrantRequest(user: "bob", role: .viewer, expiresAt: server.clock.now().addingTimeInterval(-60)))
            #expect(past.status == 400)
            #expect(try await alice.send(.POST, "/v1/files/\(s.project.id)/grants", json: GrantRequest(user: "bob", role: .viewer)).errorCode == "already_granted")
            #expect(try await alice.send(.POST, "/v1/files/\(s.plan.id)/grants", json: GrantRequest(user: "bob", role: .viewer)).errorCode == "already_granted")
            #expect(try await alice.send(.POST, "/v1/files/\(s.project.id)/grants", json: GrantRequest(user: "alice", role: .viewer)).status == 400)
            #expect(try await alice.send(.DELETE, "/v1/files/\(s.privateFolder.id)").status == 204)
            let trashed = try await alice.send(.POST, "/v1/files/\(s.privateFolder.id)/grants", json: GrantRequest(user: "bob", role: .viewer))
            #expect(trashed.status == 400 && trashed.errorCode == "trashed")
            // A manager shares on (as the owner's grant), never above its own role; the grantee cannot change its own.
            _ = try await server.signUp("carol")
            let carols = try await s.bob.send(.POST, "/v1/files/\(s.plan.id)/grants", json: GrantRequest(user: "carol", role: .manager))
            #expect(carols.status == 201, "\(carols.text)")
            _ = try await server.signUp("dave")
            let daves = try await s.bob.send(.POST, "/v1/files/\(s.project.id)/grants", json: GrantRequest(user: "dave", role: .editor))
            #expect(daves.status == 201, "a manager shares the share's root on: \(daves.text)")
            #expect(try await s.bob.send(.PATCH, "/v1/grants/\(s.grant.id)", json: GrantUpdate(expiresAt: server.clock.now().addingTimeInterval(3600))).status == 403)
            let grants: GrantList = try await alice.get("/v1/files/\(s.plan.id)/grants").decode()
            #expect(grants.grants.map(\.grantee.username) == ["carol"] && grants.links.isEmpty)
        }
    }

    @Test("the grantee's feed: the mount root on accepting, the share's changes with the mount's id, nothing from outside it, a delete when it ends")
    func feed() async throws {
        try await TestServer.run { server in
            let s = try await Self.share(server, role: .editor)
            let bob = s.bob
            let start: ChangeCursor = try await bob.get("/v1/changes/start").decode()
            // Outside the share: nothing reaches Bob.
            for index in 0..<20 { _ = try await s.alice.upload("private-\(index).txt", Data("\(index)".utf8), in: s.privateFolder.id) }
            #expect(try await bob.get("/v1/changes?cursor=\(start.cursor)").decode(ChangeList.self).changes.isEmpty)
            // Inside it: the owner's change, carrying the mount.
            let added = try await s.alice.upload("added.txt", Data("new".utf8), in: s.project.id)
            let page: ChangeList = try await bob.get("/v1/changes?cursor=\(start.cursor)").decode()
            #expect(page.changes.map(\.fileId) == [added.id])
            #expect(page.changes.first?.mountId == s.mount.mountId && page.changes.first?.file?.mountId == s.mount.mountId)
            // Moved out of the share by its owner: a delete for Bob.
            #expect(try await s.alice.send(.PATCH, "/v1/files/\(added.id)", json: UpdateFileRequest(parentId: s.privateFolder.id)).status == 200)
            let moved: ChangeList = try await bob.get("/v1/changes?cursor=\(page.cursor)").decode()
            #expect(moved.changes.map(\.type) == [.delete] && moved.changes.first?.fileId == added.id)
            // Revoked: the mount root is deleted, and nothing after.
            #expect(try await s.alice.send(.DELETE, "/v1/grants/\(s.grant.id)").status == 204)
            let ended: ChangeList = try await bob.get("/v1/changes?cursor=\(moved.cursor)").decode()
            #expect(ended.changes.map(\.type) == [.delete] && ended.changes.first?.fileId == s.project.id)
            _ = try await s.alice.upload("after.txt", Data("late".utf8), in: s.project.id)
            #expect(try await bob.get("/v1/changes?cursor=\(ended.cursor)").decode(ChangeList.self).changes.isEmpty)
            #expect(try await bob.get("/v1/files/\(s.plan.id)").status == 404)
            #expect(try await bob.list().files.isEmpty)
        }
    }

    @Test("accepting puts the share as it is into the grantee's feed (root first, then what it holds); a folder moved into it brings its contents")
    func feedOnAccept() async throws {
        try await TestServer.run { server in
            let alice = try await server.signUp("alice")
            let bob = try await server.signUp("bob")
            let project = try await alice.mkdir("Project")
            let docs = try await alice.mkdir("Docs", in: project.id)
            let deep = try await alice.upload("deep.txt", Data("deep".utf8), in: docs.id)
            let outside = try await alice.mkdir("Outside")
            let later = try await alice.upload("later.txt", Data("later".utf8), in: outside.id)
            let start: ChangeCursor = try await bob.get("/v1/changes/start").decode()
            let grant: Grant = try await alice.send(.POST, "/v1/files/\(project.id)/grants", json: GrantRequest(user: "bob", role: .viewer)).decode()
            let mount: AcceptedShare = try await bob.send(.POST, "/v1/shares/incoming/\(grant.id)/accept").decode()
            let page: ChangeList = try await bob.get("/v1/changes?cursor=\(start.cursor)").decode()
            #expect(page.changes.map(\.fileId) == [project.id, docs.id, deep.id])
            #expect(page.changes.allSatisfy { $0.mountId == mount.mountId && $0.type == .upsert })
            #expect(page.changes.first?.file?.parentId == (try await bob.root()).id, "the root where Bob's mount is")
            #expect(try await alice.send(.PATCH, "/v1/files/\(outside.id)", json: UpdateFileRequest(parentId: project.id)).status == 200)
            let moved: ChangeList = try await bob.get("/v1/changes?cursor=\(page.cursor)").decode()
            #expect(moved.changes.map(\.fileId) == [outside.id, later.id])
        }
    }

    @Test("a grant past its expiry stops at once; maintenance then takes the mount out of the grantee's tree and feed")
    func expiry() async throws {
        try await TestServer.run { server in
            let s = try await Self.share(server, role: .viewer, expiresAt: server.clock.now().addingTimeInterval(60))
            let start: ChangeCursor = try await s.bob.get("/v1/changes/start").decode()
            #expect(try await s.bob.get("/v1/files/\(s.plan.id)").status == 200)
            server.clock.advance(by: 61)
            #expect(try await s.bob.get("/v1/files/\(s.plan.id)").status == 404)
            #expect(try await s.bob.list().files.isEmpty, "an expired share is not listed")
            await server.parts.runMaintenance()
            let page: ChangeList = try await s.bob.get("/v1/changes?cursor=\(start.cursor)").decode()
            #expect(page.changes.map(\.type) == [.delete] && page.changes.first?.fileId == s.project.id)
        }
    }

    @Test("the owner purging a shared folder ends its grants; the grantee's mount goes")
    func purgeEndsGrants() async throws {
        try await TestServer.run { server in
            let s = try await Self.share(server, role: .editor)
            #expect(try await s.alice.send(.DELETE, "/v1/files/\(s.project.id)?permanent=true").status == 204)
            #expect(try await s.bob.list().files.isEmpty)
            #expect(try await s.bob.get("/v1/shares/incoming").decode(IncomingShareList.self).shares.isEmpty)
        }
    }

    @Test("an editor's deletions in a share count against the editor's device: it is paused, the owner's devices are not, and the owner confirms")
    func breakerCountsTheEditor() async throws {
        try await TestServer.run(configure: { $0.massDeletion = MassDeletionLimits(threshold: MassDeletionThreshold(fraction: 0.5, minimum: 1_000, absolute: 3)) }) { server in
            let s = try await Self.share(server, role: .editor)
            var files: [File] = []
            for index in 0..<6 { files.append(try await s.alice.upload("f\(index).txt", Data("\(index)".utf8), in: s.project.id)) }
            var statuses: [Int] = []
            for file in files.prefix(5) { statuses.append(try await s.bob.send(.DELETE, "/v1/files/\(file.id)").status) }
            #expect(statuses.contains(409), "the editor's device is paused past the threshold: \(statuses)")
            let paused = try await s.bob.send(.DELETE, "/v1/files/\(files[5].id)")
            #expect(paused.status == 409 && paused.errorCode == "mass_deletion_paused")
            // The owner's own device deletes on; the owner sees the editor's device paused, and lets it go on.
            #expect(try await s.alice.send(.DELETE, "/v1/files/\(s.plan.id)").status == 204)
            let pauses: DeletionPauseList = try await s.alice.get("/v1/trash/paused").decode()
            #expect(pauses.paused.count == 1 && pauses.paused.first?.deviceId == s.bob.tokens?.deviceId, "the editor's device, not the owner's")
            #expect(try await s.alice.send(.POST, "/v1/trash/confirm").status == 200)
            #expect(try await s.bob.send(.DELETE, "/v1/files/\(files[5].id)").status == 204)
        }
    }

    @Test("a grantee's feed after 1,000 owner changes outside the share is empty; one change inside a share with 100 grantees reaches all their feeds")
    func feedScale() async throws {
        try await TestServer.run { server in
            let alice = try await server.signUp("alice")
            let project = try await alice.mkdir("Project")
            let elsewhere = try await alice.mkdir("Elsewhere")
            var grantees: [(client: APIClient, cursor: String)] = []
            for index in 0..<100 {
                let client = try await server.signUp("grantee\(index)")
                let grant: Grant = try await alice.send(.POST, "/v1/files/\(project.id)/grants", json: GrantRequest(user: "grantee\(index)", role: .viewer)).decode()
                #expect(try await client.send(.POST, "/v1/shares/incoming/\(grant.id)/accept").status == 200)
                let start: ChangeCursor = try await client.get("/v1/changes/start").decode()
                grantees.append((client, start.cursor))
            }
            for batch in 0..<4 {
                let files = (0..<250).map { BatchUploadRequest.Entry(name: "o\(batch)-\($0).txt", parentId: elsewhere.id, content: Data("\($0)".utf8)) }
                #expect(try await alice.send(.POST, "/v1/upload?uploadType=batch", json: BatchUploadRequest(files: files)).status == 200)
            }
            let first = try #require(grantees.first)
            #expect(try await first.client.get("/v1/changes?cursor=\(first.cursor)").decode(ChangeList.self).changes.isEmpty)
            let added = try await alice.upload("news.txt", Data("news".utf8), in: project.id)
            for grantee in grantees {
                let page: ChangeList = try await grantee.client.get("/v1/changes?cursor=\(grantee.cursor)").decode()
                #expect(page.changes.map(\.fileId) == [added.id])
            }
        }
    }
}
