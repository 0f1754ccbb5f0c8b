import Foundation
import NimbusAPI
import NimbusSync
import Testing

@Suite("Conflicts, deletions and accounts")
struct ConflictTests {
    /// Two devices on one account with a shared file both have synced.
    static func twoDevices(
        _ world: SyncWorld, user: String, strategyB: ConflictStrategy = .keepBoth
    ) async throws -> (Device, Device, ItemID, ItemID) {
        try await world.register(user)
        let a = try world.device("A")
        let b = try world.device("B", strategy: strategyB)
        try await a.engine.signIn(server: world.server, username: user, password: "correct horse")
        try await b.engine.signIn(server: world.server, username: user, password: "correct horse")
        let onA = try await a.engine.upload(from: try world.file("plan.md", Data("v1".utf8)))
        try await a.settle()
        try await b.settle()
        let onB = try #require(try await b.engine.item(atPath: "/plan.md")).id
        return (a, b, onA, onB)
    }

    @Test("quick successive edits on one device never conflict with each other, even based on a stale revision")
    func successiveEdits() async throws {
        try await SyncWorld.run { world in
            try await world.register("quin")
            let a = try world.device("A")
            try await a.engine.signIn(server: world.server, username: "quin", password: "correct horse")
            let id = try await a.engine.upload(from: try world.file("note.txt", Data("v1".utf8)))
            try await a.settle()
            let r1 = try #require(try await a.engine.item(id)?.revisionId)
            // Version 2 reaches the server (not yet seen in the change feed) …
            try await a.engine.update(id, from: try world.file("note.txt", Data("v2".utf8)))
            #expect(try await a.engine.runNextOperation())
            #expect(try await a.engine.item(id)?.revisionId != r1)
            // … and version 3, made from version 2, is based on what version 2 made: the merge base moved with it.
            try await a.engine.update(id, from: try world.file("note.txt", Data("v3".utf8)))
            try await a.settle()
            let tree = try await world.api("quin").tree()
            #expect(tree == ["/note.txt": sha256(Data("v3".utf8))], "no conflict copy")
            #expect(try await a.engine.item(id)?.state == .synced)
        }
    }

    @Test("keepBoth: the later device's version becomes a conflict copy; both versions survive")
    func keepBoth() async throws {
        try await SyncWorld.run { world in
            let (a, b, onA, onB) = try await Self.twoDevices(world, user: "fay")
            try await a.engine.update(onA, from: try world.file("plan.md", Data("from A".utf8)))
            try await b.engine.update(onB, from: try world.file("plan.md", Data("from B".utf8)))
            try await a.settle()
            try await b.settle()
            try await a.settle()
            let tree = try await world.api("fay").tree()
            #expect(tree.count == 2)
            #expect(tree["/plan.md"] == sha256(Data("from A".utf8)))
            let copy = try #require(tree.keys.first { $0.hasPrefix("/plan (conflict from B ") && $0.hasSuffix(").md") })
            #expect(tree[copy] == sha256(Data("from B".utf8)))
            #expect(try await a.engine.tree() == tree)
            #expect(try await b.engine.tree() == tree)
        }
    }

    @Test("lastWriterWins: the later device's version is the head, the other a revision")
    func lastWriterWins() async throws {
        try await SyncWorld.run { world in
            let (a, b, onA, onB) = try await Self.twoDevices(world, user: "gus", strategyB: .lastWriterWins)
            try await a.engine.update(onA, from: try world.file("plan.md", Data("from A".utf8)))
            try await b.engine.update(onB, from: try world.file("plan.md", Data("from B".utf8)))
            try await a.settle()
            try await b.settle()
            try await a.settle()
            let api = try await world.api("gus")
            let tree = try await api.tree()
            #expect(tree == ["/plan.md": sha256(Data("from B".utf8))])
            let revisions = try await b.engine.revisions(of: onB)
            #expect(revisions.map(\.checksum).contains(sha256(Data("from A".utf8))), "the overwritten version is kept")
            #expect(try await a.engine.tree() == tree)
        }
    }

    @Test("ask: the item waits in conflict; keeping the remote version keeps ours as a revision")
    func ask() async throws {
        try await SyncWorld.run { world in
            let (a, b, onA, onB) = try await Self.twoDevices(world, user: "hal", strategyB: .ask)
            try await a.engine.update(onA, from: try world.file("plan.md", Data("from A".utf8)))
            try await a.settle()
            try await b.engine.update(onB, from: try world.file("plan.md", Data("from B".utf8)))
            try await b.settle()
            #expect(try await b.engine.item(onB)?.state == .conflict)
            #expect(try await b.engine.status().conflicts == 1)
            try await b.engine.resolveConflict(onB, keeping: .keepRemote)
            try await b.settle()
            try await a.settle()
            let tree = try await world.api("hal").tree()
            #expect(tree == ["/plan.md": sha256(Data("from A".utf8))])
            let checksums = try await b.engine.revisions(of: onB).map(\.checksum)
            #expect(checksums.contains(sha256(Data("from B".utf8))), "our version stays reachable")
            #expect(try await b.engine.item(onB)?.state == .synced)
            #expect(try await b.engine.tree() == tree)
        }
    }

    @Test("ask, keeping the local version: ours becomes the head")
    func askKeepLocal() async throws {
        try await SyncWorld.run { world in
            let (a, b, onA, onB) = try await Self.twoDevices(world, user: "ida", strategyB: .ask)
            try await a.engine.update(onA, from: try world.file("plan.md", Data("from A".utf8)))
            try await a.settle()
            try await b.engine.update(onB, from: try world.file("plan.md", Data("from B".utf8)))
            try await b.settle()
            try await b.engine.resolveConflict(onB, keeping: .keepLocal)
            try await b.settle()
            try await a.settle()
            #expect(try await world.api("ida").tree() == ["/plan.md": sha256(Data("from B".utf8))])
            #expect(try await a.engine.tree() == ["/plan.md": sha256(Data("from B".utf8))])
        }
    }

    @Test("a remote deletion of a file changed here keeps it, unsynced, until the user decides")
    func deletionSafety() async throws {
        try await SyncWorld.run { world in
            let (a, b, onA, onB) = try await Self.twoDevices(world, user: "joe")
            b.faults.offline = true
            try await b.engine.update(onB, from: try world.file("plan.md", Data("precious edit".utf8)))
            try await a.engine.delete(onA)
            try await a.settle()
            b.faults.offline = false
            try await b.settle()
            let item = try #require(try await b.engine.item(onB))
            #expect(item.state == .unsynced)
            #expect(item.checksum == sha256(Data("precious edit".utf8)))
            #expect(try Data(contentsOf: try #require(try await b.engine.contentURL(of: onB))) == Data("precious edit".utf8))
            try await b.engine.keepLocalCopy(onB)
            try await b.settle()
            #expect(try await world.api("joe").tree() == ["/plan.md": sha256(Data("precious edit".utf8))])
            #expect(try await b.engine.item(atPath: "/plan.md")?.state == .synced)

            // A deletion of something unchanged here just happens.
            try await a.settle()
            let again = try #require(try await a.engine.item(atPath: "/plan.md"))
            try await a.engine.delete(again.id)
            try await a.settle()
            try await b.settle()
            #expect(try await b.engine.tree().isEmpty)
        }
    }

    @Test("confirmDeletion lets an unsynced item go")
    func confirmDeletion() async throws {
        try await SyncWorld.run { world in
            let (a, b, onA, onB) = try await Self.twoDevices(world, user: "kai")
            b.faults.offline = true
            try await b.engine.update(onB, from: try world.file("plan.md", Data("edit".utf8)))
            try await a.engine.delete(onA)
            try await a.settle()
            b.faults.offline = false
            try await b.settle()
            #expect(try await b.engine.item(onB)?.state == .unsynced)
            try await b.engine.confirmDeletion(onB)
            try await b.settle()
            #expect(try await b.engine.tree().isEmpty)
            #expect(try await world.api("kai").tree().isEmpty)
        }
    }

    @Test("a pull that would delete most of the tree waits for confirmation")
    func massDeletionGuard() async throws {
        try await SyncWorld.run { world in
            try await world.register("lou")
            let a = try world.device("A")
            let b = try world.device("B")
            try await a.engine.signIn(server: world.server, username: "lou", password: "correct horse")
            try await b.engine.signIn(server: world.server, username: "lou", password: "correct horse")
            var ids: [ItemID] = []
            for index in 0..<15 { ids.append(try await a.engine.upload(from: try world.file("f\(index).txt", Data("\(index)".utf8)))) }
            try await a.settle()
            try await b.settle()
            for id in ids.prefix(12) { try await a.engine.delete(id) }
            try await a.settle()
            try await b.engine.pull()
            #expect(try await b.engine.status().phase == .awaitingDeletionConfirmation(count: 12))
            #expect(try await b.engine.tree().count == 15, "nothing deleted yet")
            try await b.engine.confirmMassDeletion()
            #expect(try await b.engine.tree().count == 3)
            #expect(try await b.engine.status().phase != .awaitingDeletionConfirmation(count: 12))
        }
    }

    @Test("signed out, changes are still recorded and go out after signing in again")
    func signedOutChanges() async throws {
        try await SyncWorld.run { world in
            try await world.register("max")
            let a = try world.device("A")
            try await a.engine.signIn(server: world.server, username: "max", password: "correct horse")
            let libraryId = a.engine.libraryId
            await a.engine.signOut()
            #expect(try await a.engine.status().phase == .signedOut)
            _ = try await a.engine.createFolder(named: "Offline work")
            await #expect(throws: SyncError.notSignedIn) { try await a.engine.syncOnce() }
            try await a.engine.signIn(server: world.server, username: "max", password: "correct horse")
            try await a.settle()
            #expect(try await world.api("max").tree() == ["/Offline work": "folder"])
            #expect(a.engine.libraryId == libraryId)
        }
    }

    @Test("a different account keeps local items, re-uploads what it lacks, and skips what it already has")
    func accountSwitch() async throws {
        try await SyncWorld.run { world in
            try await world.register("ned")
            try await world.register("oli")
            let a = try world.device("A")
            try await a.engine.signIn(server: world.server, username: "ned", password: "correct horse")
            let docs = try await a.engine.createFolder(named: "Docs")
            let shared = Data("already there".utf8)
            _ = try await a.engine.upload(from: try world.file("same.txt", shared), in: docs)
            _ = try await a.engine.upload(from: try world.file("mine.txt", Data("only here".utf8)), in: docs)
            try await a.settle()
            // The other account already holds one of the files.
            let other = try world.device("other")
            try await other.engine.signIn(server: world.server, username: "oli", password: "correct horse")
            let otherDocs = try await other.engine.createFolder(named: "Docs")
            _ = try await other.engine.upload(from: try world.file("same.txt", shared), in: otherDocs)
            try await other.settle()

            let libraryId = a.engine.libraryId
            await a.engine.signOut()
            // Content goes as chunks (PUT) or, small and new, in one simple upload.
            let sendsContent: @Sendable (TransportRequest) -> Bool = { $0.method == "PUT" || $0.path.contains("uploadType=media") }
            let sentBefore = a.faults.log.filter(sendsContent).count
            try await a.engine.signIn(server: world.server, username: "oli", password: "correct horse")
            try await a.settle()
            let tree = try await world.api("oli").tree()
            #expect(tree == ["/Docs": "folder", "/Docs/same.txt": sha256(shared), "/Docs/mine.txt": sha256(Data("only here".utf8))])
            let chunks = a.faults.log.filter(sendsContent).count - sentBefore
            #expect(chunks == 1, "only mine.txt was sent")
            #expect(a.engine.libraryId == libraryId, "the library keeps its identity")
            #expect(try await a.engine.tree() == tree)
        }
    }

    @Test("when the server revokes the device, everything waits for a new sign-in, then goes on")
    func unauthorizedPauses() async throws {
        try await SyncWorld.run { world in
            try await world.register("pam")
            let a = try world.device("A")
            try await a.engine.signIn(server: world.server, username: "pam", password: "correct horse")
            let account = try #require(await a.engine.account)
            // Revoke this device from elsewhere (as "sign out all devices" would).
            let revoke = try await AsyncHTTPClientTransport(baseURL: world.server).send(
                TransportRequest(
                    method: "POST", path: "/v1/auth/logout", headers: ["Content-Type": "application/json"],
                    body: try JSONEncoder.nimbus.encode(RefreshRequest(refreshToken: account.refreshToken))))
            #expect(revoke.0.status == 204)
            _ = try await a.engine.createFolder(named: "Later")
            _ = try? await a.engine.syncOnce()
            #expect(try await a.engine.status().phase == .needsSignIn)
            #expect(try await a.engine.status().pending == 1)
            try await a.engine.signIn(server: world.server, username: "pam", password: "correct horse")
            try await a.settle()
            #expect(try await world.api("pam").tree() == ["/Later": "folder"])
        }
    }

    @Test("after the allowed attempts an operation is failed and visible; retry sends it")
    func failedAndRetry() async throws {
        try await SyncWorld.run { world in
            try await world.register("quin")
            let a = try world.device("A") { $0.maxAttempts = 3 }
            try await a.engine.signIn(server: world.server, username: "quin", password: "correct horse")
            let folder = try await a.engine.createFolder(named: "Stubborn")
            a.faults.fail(.refuse, count: 3) { $0.path == "/v1/files" }
            try await a.settle(rounds: 5)
            let item = try #require(try await a.engine.item(folder))
            guard case .failed = item.state else {
                Issue.record("expected failed, got \(item.state)")
                return
            }
            #expect(try await a.engine.status().failed == 1)
            #expect(try await a.engine.itemsNeedingAttention().map(\.id) == [folder])
            try await a.engine.retry(folder)
            try await a.settle()
            #expect(try await a.engine.item(folder)?.state == .synced)
        }
    }

    @Test("a folder's live listing updates when another device changes it")
    func liveListing() async throws {
        try await SyncWorld.run { world in
            try await world.register("rae")
            let a = try world.device("A")
            let b = try world.device("B")
            try await a.engine.signIn(server: world.server, username: "rae", password: "correct horse")
            try await b.engine.signIn(server: world.server, username: "rae", password: "correct horse")
            let stream = await b.engine.items(in: .root)
            var iterator = stream.makeAsyncIterator()
            #expect(await iterator.next()?.isEmpty == true)
            _ = try await a.engine.createFolder(named: "Shared")
            try await a.settle()
            try await b.engine.pull()
            var names: [String] = []
            while names != ["Shared"], let listing = await iterator.next() { names = listing.map(\.name) }
            #expect(names == ["Shared"])
        }
    }

    @Test("an unknown cursor (410) leads to a full resync that finds what changed and what went")
    func resyncAfterGone() async throws {
        try await SyncWorld.run { world in
            try await world.register("sol")
            let a = try world.device("A")
            let b = try world.device("B")
            try await a.engine.signIn(server: world.server, username: "sol", password: "correct horse")
            try await b.engine.signIn(server: world.server, username: "sol", password: "correct horse")
            let keep = try await a.engine.upload(from: try world.file("keep.txt", Data("k".utf8)))
            let gone = try await a.engine.upload(from: try world.file("gone.txt", Data("g".utf8)))
            try await a.settle()
            try await b.settle()
            try await a.engine.delete(gone)
            try await a.engine.rename(keep, to: "kept.txt")
            try await a.settle()
            try await b.engine.forgetCursor(replacingWith: "999999999")
            try await b.settle()
            #expect(try await b.engine.tree() == ["/kept.txt": sha256(Data("k".utf8))])
        }
    }
}
