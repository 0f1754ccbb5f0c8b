import Foundation
import NimbusTestSupport
import Testing

/// The sharing commands of the real `nimbus` binary, two users on one server: share, list, accept, read, change the
/// role, leave, revoke — and the errors a user meets (on stderr, non-zero exit, nothing changed).
@Suite("Sharing from the command line")
struct SharingCLITests {
    @Test("share, shares, accept, get, share set, leave and revoke between two users; bad input is a clear error")
    func shareAndAccept() async throws {
        let bench = try Bench()
        let ana = try bench.device("ana", user: "ana")
        let ben = try bench.device("ben", user: "ben")
        try write("the plan", to: ana.workingDirectory.appending(path: "plan.txt"))
        #expect(try ana.run(["mkdir", "/Project"]).status == 0)
        #expect(try ana.run(["put", "plan.txt", "/Project/plan.txt"]).status == 0)

        let shared = try ana.run(["share", "/Project", "--with", "ben", "--role", "viewer", "--json"])
        #expect(shared.status == 0, "\(shared.stderr)")
        let grant = try #require(try JSONSerialization.jsonObject(with: Data(shared.stdout.utf8)) as? [String: Any])
        let grantId = try #require(grant["id"] as? String)
        #expect(grant["state"] as? String == "pending")

        // Ana's lists; Ben's incoming.
        #expect(try ana.run(["share", "ls", "/Project"]).stdout.contains(grantId))
        #expect(try ana.run(["share", "ls"]).stdout.contains("ben  viewer  pending"))
        let offered = try ben.run(["shares"])
        #expect(offered.status == 0 && offered.stdout.contains(grantId) && offered.stdout.contains("from ana"), "\(offered.stdout)")

        let accepted = try ben.run(["accept", grantId, "--name", "From Ana"])
        #expect(accepted.status == 0 && accepted.stdout.contains("/From Ana"), "\(accepted.stdout) \(accepted.stderr)")
        let listed = try ben.run(["ls", "/From Ana"])
        #expect(listed.status == 0 && listed.stdout.contains("plan.txt"), "\(listed.stdout) \(listed.stderr)")
        #expect(try ben.run(["get", "/From Ana/plan.txt", "got.txt"]).status == 0)
        #expect(try String(contentsOf: ben.workingDirectory.appending(path: "got.txt"), encoding: .utf8) == "the plan")

        // A viewer's change is refused by the server; an editor's goes through.
        #expect(try ana.run(["share", "set", grantId, "--role", "editor"]).status == 0)
        try write("ben's notes", to: ben.workingDirectory.appending(path: "notes.txt"))
        #expect(try ben.run(["put", "notes.txt", "/From Ana/notes.txt"]).status == 0)
        #expect(try ana.run(["ls", "/Project"]).stdout.contains("notes.txt"))

        // Bad input: a clear message on stderr, a non-zero exit, nothing changed.
        let unknownRole = try ana.run(["share", "/Project", "--with", "ben", "--role", "owner"])
        #expect(unknownRole.status != 0 && !unknownRole.stderr.isEmpty)
        let twice = try ana.run(["share", "/Project", "--with", "ben", "--role", "viewer"])
        #expect(twice.status != 0 && twice.stderr.contains("already"), "\(twice.stderr)")
        let nobody = try ana.run(["share", "/Project", "--with", "nobody", "--role", "viewer"])
        #expect(nobody.status != 0 && !nobody.stderr.isEmpty)
        let notAShare = try ben.run(["leave", "/"])
        #expect(notAShare.status != 0)

        // Leaving takes it out of Ben's tree only; accepting again brings it back; revoking ends it.
        let left = try ben.run(["leave", "/From Ana"])
        #expect(left.status == 0, "\(left.stderr)")
        #expect(!(try ben.run(["ls", "/"]).stdout.contains("From Ana")))
        #expect(try ana.run(["ls", "/Project"]).stdout.contains("plan.txt"))
        #expect(try ben.run(["accept", grantId]).status == 0)
        #expect(try ben.run(["ls", "/"]).stdout.contains("Project"))
        #expect(try ana.run(["share", "revoke", grantId]).status == 0)
        #expect(!(try ben.run(["ls", "/"]).stdout.contains("Project")))
        #expect(try ana.run(["ls", "/Project"]).stdout.contains("notes.txt"), "the owner's items stay")
    }

    @Test("a viewer's share in a synced folder: an edit is kept as a conflict copy (listed with its reason, never sent), a deletion comes back; an editor role sends the copy; when the share ends, unchanged files leave and changed ones stay in '(no longer shared)'")
    func viewerInSyncedFolder() async throws {
        let bench = try Bench()
        let ana = try bench.device("ana", user: "ana")
        let ben = try bench.device("ben", user: "ben")
        try write("the plan", to: ana.workingDirectory.appending(path: "plan.txt"))
        try write("the notes", to: ana.workingDirectory.appending(path: "notes.txt"))
        #expect(try ana.run(["mkdir", "/Project"]).status == 0)
        #expect(try ana.run(["put", "plan.txt", "/Project/plan.txt"]).status == 0)
        #expect(try ana.run(["put", "notes.txt", "/Project/notes.txt"]).status == 0)
        let shared = try ana.run(["share", "/Project", "--with", "ben", "--role", "viewer", "--json"])
        let grant = try #require(try JSONSerialization.jsonObject(with: Data(shared.stdout.utf8)) as? [String: Any])
        let grantId = try #require(grant["id"] as? String)
        #expect(try ben.run(["accept", grantId]).status == 0)

        let folder = try bench.folder("ben-drive")
        let first = try ben.run(["sync", folder.path, "/", "--once"])
        #expect(first.status == 0, "\(first.stdout)\(first.stderr)")
        let plan = folder.appending(path: "Project/plan.txt")
        #expect(try String(contentsOf: plan, encoding: .utf8) == "the plan")

        // An edit in a read-only share: kept beside the original as a conflict copy, which stays on this device.
        try write("ben's plan", to: plan)
        let edited = try ben.run(["sync", folder.path, "--once"])
        #expect(edited.status == 0, "\(edited.stdout)\(edited.stderr)")
        #expect(edited.stdout.contains("in a share you may only view"), "\(edited.stdout)")
        #expect(try String(contentsOf: plan, encoding: .utf8) == "the plan", "the original comes back")
        let names = try FileManager.default.contentsOfDirectory(atPath: folder.appending(path: "Project").path).sorted()
        let copy = try #require(names.first { $0.hasPrefix("plan (conflict from") }, "\(names)")
        #expect(try String(contentsOf: folder.appending(path: "Project/\(copy)"), encoding: .utf8) == "ben's plan")
        let conflicts = try ben.run(["conflicts"])
        #expect(conflicts.stdout.contains(copy) && conflicts.stdout.contains("read-only"), "\(conflicts.stdout)")
        // Nothing is retried: another round does nothing and reports no error.
        let again = try ben.run(["sync", folder.path, "--once"])
        #expect(again.status == 0 && again.stderr.isEmpty && again.stdout.contains("0 changes, 0 errors"), "\(again.stdout)\(again.stderr)")
        #expect(try ana.run(["ls", "/Project"]).stdout.contains("conflict") == false, "nothing reached the owner")

        // A deletion in it comes back.
        try FileManager.default.removeItem(at: folder.appending(path: "Project/notes.txt"))
        #expect(try ben.run(["sync", folder.path, "--once"]).status == 0)
        #expect(try String(contentsOf: folder.appending(path: "Project/notes.txt"), encoding: .utf8) == "the notes")
        #expect(try ana.run(["ls", "/Project"]).stdout.contains("notes.txt"))

        // Made an editor: the copy goes there (the feed tells the device what it may do now).
        #expect(try ana.run(["share", "set", grantId, "--role", "editor"]).status == 0)
        let promoted = try ben.run(["sync", folder.path, "--once"])
        #expect(promoted.status == 0, "\(promoted.stdout)\(promoted.stderr)")
        #expect(try ana.run(["ls", "/Project"]).stdout.contains(copy), "the held copy is sent once it may be")

        // The share ends: what is unchanged leaves this device, what was changed here stays, renamed.
        #expect(try ana.run(["share", "set", grantId, "--role", "viewer"]).status == 0)
        #expect(try ben.run(["sync", folder.path, "--once"]).status == 0)
        try write("ben's late notes", to: folder.appending(path: "Project/notes.txt"))
        #expect(try ana.run(["share", "revoke", grantId]).status == 0)
        let ended = try ben.run(["sync", folder.path, "--once"])
        #expect(ended.status == 0, "\(ended.stdout)\(ended.stderr)")
        let top = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { !$0.hasPrefix(".") }.sorted()
        #expect(top == ["Project (no longer shared)"], "\(top) \(ended.stdout) \(ended.stderr)")
        let kept = try FileManager.default.contentsOfDirectory(atPath: folder.appending(path: "Project (no longer shared)").path).sorted()
        #expect(kept.contains("notes.txt") && !kept.contains("plan.txt"), "\(kept)")
        #expect(try String(contentsOf: folder.appending(path: "Project (no longer shared)/notes.txt"), encoding: .utf8) == "ben's late notes")
        #expect(try ana.run(["ls", "/Project"]).stdout.contains("plan.txt"), "the owner's items stay")
    }

    @Test("link create (view, password from stdin, upload-only), link ls, link get of a file and a folder, link revoke; a wrong password is a clear error")
    func links() async throws {
        let bench = try Bench()
        let ana = try bench.device("ana", user: "ana")
        try write("the plan", to: ana.workingDirectory.appending(path: "plan.txt"))
        #expect(try ana.run(["mkdir", "-p", "/Project/Sub"]).status == 0)
        #expect(try ana.run(["put", "plan.txt", "/Project/plan.txt"]).status == 0)
        #expect(try ana.run(["put", "plan.txt", "/Project/Sub/deep.txt"]).status == 0)

        let made = try ana.run(["link", "create", "/Project/plan.txt"])
        #expect(made.status == 0, "\(made.stderr)")
        let url = made.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(url.contains("/s/"))
        // Anyone, no account: a device that never signed in.
        let stranger = CLIDevice(home: bench.root.appending(path: "home-stranger"), workingDirectory: try bench.folder("work-stranger"))
        let fetched = try stranger.run(["link", "get", url, "-"])
        #expect(fetched.status == 0 && fetched.stdout == "the plan", "\(fetched.stderr)")

        let folder = try ana.run(["link", "create", "/Project", "--password-stdin", "--max-downloads", "10"], stdin: "correct horse\n")
        #expect(folder.status == 0, "\(folder.stderr)")
        let folderURL = folder.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let wrong = try stranger.run(["link", "get", folderURL, "copy", "--password-stdin"], stdin: "wrong horse\n")
        #expect(wrong.status != 0 && wrong.stderr.contains("password"), "\(wrong.stderr)")
        let copied = try stranger.run(["link", "get", folderURL, "copy", "--password-stdin"], stdin: "correct horse\n")
        #expect(copied.status == 0, "\(copied.stderr)")
        #expect(tree(stranger.workingDirectory.appending(path: "copy")).keys.sorted() == ["Sub", "Sub/deep.txt", "plan.txt"])
        let weak = try ana.run(["link", "create", "/Project", "--password-stdin"], stdin: "short\n")
        #expect(weak.status != 0 && weak.stderr.contains("8 characters"), "\(weak.stderr)")

        let listed = try ana.run(["link", "ls"])
        #expect(listed.status == 0 && !listed.stdout.contains("/s/"), "a list shows no link's token")
        let id = try #require(listed.stdout.split(separator: "\n").first.map { String($0.prefix { $0 != " " }) })
        #expect(try ana.run(["link", "revoke", id]).status == 0)
        let drop = try ana.run(["link", "create", "/Project", "--upload-only"])
        #expect(drop.status == 0)
        let refused = try stranger.run(["link", "get", drop.stdout.trimmingCharacters(in: .whitespacesAndNewlines), "x"])
        #expect(refused.status != 0 && refused.stderr.contains("file drop"))
    }
}
