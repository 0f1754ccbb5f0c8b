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
