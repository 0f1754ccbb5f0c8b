import Crypto
import Foundation
import NimbusAPI
import NimbusTestSupport
import Testing

/// Folder sync through the provider seam (a folder on a mounted disk as the remote) and conflicts left for the
/// user (`--conflict ask`), with the real binary.
@Suite("End to end: remotes and conflicts", .serialized)
struct RemotesAndConflictsTests {
    func text(_ url: URL) throws -> String { try String(contentsOf: url, encoding: .utf8) }

    @Test("--conflict ask: the conflict is listed, and resolving it settles the disk and the server", arguments: ["local", "remote", "both"])
    func askThenResolve(keep: String) throws {
        let bench = try Bench()
        let a = try bench.device("A")
        let b = try bench.device("B")
        let folderA = try bench.folder("A")
        let folderB = try bench.folder("B")
        try write("base", to: folderA.appending(path: "plan.md"))
        #expect(try a.run(["sync", folderA.path, "/P", "--once"]).status == 0)
        #expect(try b.run(["sync", folderB.path, "/P", "--once"]).status == 0)
        try write("from A", to: folderA.appending(path: "plan.md"))
        try write("from B", to: folderB.appending(path: "plan.md"))
        #expect(try a.run(["sync", folderA.path, "--once"]).status == 0)
        let asked = try b.run(["sync", folderB.path, "--once", "--conflict", "ask"])
        #expect(asked.status == 0, "\(asked.stdout)\(asked.stderr)")
        #expect(asked.stdout.contains("plan.md: changed here and there; resolve with 'nimbus conflicts resolve'"), "\(asked.stdout)")
        #expect(try text(folderB.appending(path: "plan.md")) == "from B", "nothing is replaced while the conflict waits")
        // Another round keeps waiting (and changes nothing).
        #expect(try b.run(["sync", folderB.path, "--once", "--conflict", "ask"]).status == 0)
        #expect(try text(folderB.appending(path: "plan.md")) == "from B")

        let listed = try b.run(["conflicts"])
        #expect(listed.status == 0)
        #expect(listed.stdout.contains(folderB.appending(path: "plan.md").path), "\(listed.stdout)")
        let resolved = try b.run(["conflicts", "resolve", folderB.appending(path: "plan.md").path, "--keep", keep])
        #expect(resolved.status == 0, "\(resolved.stdout)\(resolved.stderr)")
        #expect(try b.run(["conflicts"]).stdout.contains("No conflicts"))
        #expect(try b.run(["sync", folderB.path, "--once"]).status == 0)
        #expect(try a.run(["sync", folderA.path, "--once"]).status == 0)

        let names = try FileManager.default.contentsOfDirectory(atPath: folderB.path).filter { !$0.hasPrefix(".") }.sorted()
        let versions = try b.run(["versions", "/P/plan.md", "--json"])
        let history = try JSONDecoder.nimbus.decode([FileRevision].self, from: Data(versions.stdout.utf8))
        let all = Set(history.map(\.checksum))
        switch keep {
        case "local":
            #expect(names == ["plan.md"])
            #expect(try text(folderB.appending(path: "plan.md")) == "from B")
            #expect(try text(folderA.appending(path: "plan.md")) == "from B", "the other device gets it")
            #expect(all.contains(sha256("from A")), "the other version stays a revision")
        case "remote":
            #expect(names == ["plan.md"])
            #expect(try text(folderB.appending(path: "plan.md")) == "from A")
            #expect(all.contains(sha256("from B")), "this device's version stays a revision")
        default:
            #expect(names.count == 2, "\(names)")
            let contents = Set(try names.map { try text(folderB.appending(path: $0)) })
            #expect(contents == ["from A", "from B"])
            #expect(tree(folderA) == tree(folderB))
        }
    }

    @Test("sync --watch --json prints a JSON line per round as it ends, into a pipe too, so a script can follow it (and nothing is lost when it is stopped)")
    func watchJSONLines() async throws {
        let bench = try Bench()
        let device = try bench.device("A")
        let nas = try bench.folder("nas")
        let folder = try bench.folder("W")
        #expect(try device.run(["remote", "add", "nas", "local", nas.path]).status == 0)
        let running = device.start(["sync", folder.path, "nas:/W", "--watch", "--json"])
        try await Task.sleep(for: .milliseconds(500))
        try write("while watching", to: folder.appending(path: "w.txt"))
        let deadline = Date().addingTimeInterval(30)
        while !FileManager.default.fileExists(atPath: nas.appending(path: "W/w.txt").path), Date() < deadline {
            try await Task.sleep(for: .milliseconds(50))
        }
        try await Task.sleep(for: .seconds(1))  // the round that sent it ends, and says so
        running.process.signal(SIGTERM)
        _ = running.process.waitUntilExit()
        let lines = String(decoding: running.process.output.readDataToEndOfFile(), as: UTF8.self).split(separator: "\n")
        #expect(!lines.isEmpty, "a line per round, already out when the process was stopped")
        var sent = false
        for line in lines {
            let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], "\(line)")
            #expect(object["remote"] as? String == "nas:/W" && object["at"] != nil, "\(line)")
            if (object["uploaded"] as? [String])?.contains("w.txt") == true { sent = true }
        }
        #expect(sent, "the round that sent w.txt: \(lines)")
    }

    @Test("sync --watch prints what happens, once: a quiet round prints nothing, a link skipped is said in the first round only")
    func watchPrintsOnce() async throws {
        let bench = try Bench()
        let device = try bench.device("A")
        let nas = try bench.folder("nas")
        let folder = try bench.folder("W")
        try FileManager.default.createSymbolicLink(atPath: folder.appending(path: "link.txt").path, withDestinationPath: "elsewhere")
        #expect(try device.run(["remote", "add", "nas", "local", nas.path]).status == 0)
        let running = device.start(["sync", folder.path, "nas:/W", "--watch"])
        func arrives(_ name: String) async throws {
            try write("content of \(name)", to: folder.appending(path: name))
            let deadline = Date().addingTimeInterval(30)
            while !FileManager.default.fileExists(atPath: nas.appending(path: "W/\(name)").path), Date() < deadline {
                try await Task.sleep(for: .milliseconds(50))
            }
        }
        try await Task.sleep(for: .milliseconds(500))
        try await arrives("one.txt")
        // A change the sync ignores wakes a round that has nothing to do.
        try write("scratch", to: folder.appending(path: "scratch.tmp"))
        try await Task.sleep(for: .seconds(1))
        try await arrives("two.txt")
        try await Task.sleep(for: .seconds(1))  // the round that sent it ends, and says so
        running.process.signal(SIGTERM)
        let output = String(decoding: running.process.finish().output, as: UTF8.self)
        #expect(output.contains("↑ one.txt") && output.contains("↑ two.txt"), "\(output)")
        #expect(output.components(separatedBy: "skipped link.txt").count == 2, "said once: \(output)")
        #expect(output.components(separatedBy: "0 changes").count == 2, "the first round only: \(output)")
    }

    @Test("a second sync of a pair while one runs (a --once beside a --watch) says so and does nothing; once the first is killed with -9, it runs")
    func oneSyncAtATime() async throws {
        let bench = try Bench()
        let device = try bench.device("A")
        let nas = try bench.folder("nas")
        let folder = try bench.folder("W")
        let other = try bench.folder("V")
        #expect(try device.run(["remote", "add", "nas", "local", nas.path]).status == 0)
        let watching = device.start(["sync", folder.path, "nas:/W", "--watch"])
        defer { watching.kill9() }
        try write("first", to: folder.appending(path: "first.txt"))
        let deadline = Date().addingTimeInterval(30)
        while !FileManager.default.fileExists(atPath: nas.appending(path: "W/first.txt").path), Date() < deadline {
            try await Task.sleep(for: .milliseconds(50))
        }
        let second = try device.run(["sync", folder.path, "--once"])
        #expect(second.status != 0 && second.stderr.contains("Another nimbus (pid \(watching.process.pid)) is syncing"), "\(second.stdout)\(second.stderr)")
        #expect(second.stdout.isEmpty, "nothing done: \(second.stdout)")
        // Another pair of the same device is not held by it.
        #expect(try device.run(["sync", other.path, "nas:/V", "--once"]).status == 0)

        watching.kill9()
        try write("second", to: folder.appending(path: "second.txt"))
        let after = try device.run(["sync", folder.path, "--once"])
        #expect(after.status == 0 && after.stdout.contains("↑ second.txt"), "the lock went with the process: \(after.stdout)\(after.stderr)")
    }

    @Test(
        "a folder on a disk that fills up: the download that does not fit says so plainly and leaves nothing behind (what fits comes); with room, it comes",
        .enabled(if: SmallDisk.canMount, "needs root to mount a small tmpfs"))
    func diskFull() async throws {
        let bench = try Bench()
        let device = try bench.device("A")
        let nas = try bench.folder("nas")
        let small = try SmallDisk.mount(at: try bench.folder("disk"), megabytes: 8)
        defer { small.unmount() }
        let disk = small.path
        // Two files of 5 MB there (only one fits in 8 MB) and a small one.
        let first = Data((0..<5_000_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 9) })
        let second = Data((0..<5_000_000).map { UInt8(truncatingIfNeeded: $0 &* 17 &+ $0 >> 11) })
        try FileManager.default.createDirectory(at: nas.appending(path: "R"), withIntermediateDirectories: true)
        try first.write(to: nas.appending(path: "R/first.bin"))
        try second.write(to: nas.appending(path: "R/second.bin"))
        try write("small", to: nas.appending(path: "R/small.txt"))
        #expect(try device.run(["remote", "add", "nas", "local", nas.path]).status == 0)
        let folder = disk.appending(path: "F")

        let full = try device.run(["sync", folder.path, "nas:/R", "--once"])
        #expect(full.status != 0 && full.stderr.contains("not enough space on the disk of \(folder.path)"), "\(full.stdout)\(full.stderr)")
        #expect(!full.stderr.contains("Domain="), "said plainly: \(full.stderr)")
        let there = try FileManager.default.contentsOfDirectory(atPath: folder.path)
        #expect(!there.contains { $0.hasPrefix(".nimbus-partial") }, "nothing left behind: \(there)")
        #expect(there.contains("small.txt") && there.filter { $0.hasSuffix(".bin") }.count == 1, "\(there)")

        try small.resize(megabytes: 16)
        let roomy = try device.run(["sync", folder.path, "--once"])
        #expect(roomy.status == 0, "\(roomy.stdout)\(roomy.stderr)")
        #expect(try Data(contentsOf: folder.appending(path: "first.bin")) == first)
        #expect(try Data(contentsOf: folder.appending(path: "second.bin")) == second)
        #expect(Set(try FileManager.default.contentsOfDirectory(atPath: nas.appending(path: "R").path)) == ["first.bin", "second.bin", "small.txt"])
    }

    @Test("nimbus get onto a disk without room: a plain error, non-zero, nothing left there; with room, it works", .enabled(if: SmallDisk.canMount, "needs root to mount a small tmpfs"))
    func getOntoFullDisk() throws {
        let bench = try Bench()
        let device = try bench.device("A")
        let small = try SmallDisk.mount(at: try bench.folder("disk"), megabytes: 4)
        defer { small.unmount() }
        let disk = small.path
        let content = Data((0..<6_000_000).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ $0 >> 10) })
        let source = bench.root.appending(path: "big.bin")
        try content.write(to: source)
        #expect(try device.run(["put", source.path, "/big.bin"]).status == 0)
        let full = try device.run(["get", "/big.bin", disk.appending(path: "big.bin").path])
        #expect(full.status != 0 && full.stderr.contains("Not enough space on the disk of \(disk.path)"), "\(full.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: disk.path).isEmpty, "nothing left there")
        try small.resize(megabytes: 16)
        let roomy = try device.run(["get", "/big.bin", disk.appending(path: "big.bin").path])
        #expect(roomy.status == 0, "\(roomy.stderr)")
        #expect(try Data(contentsOf: disk.appending(path: "big.bin")) == content)
    }

    @Test("a local-folder remote on a disk without room: the file that does not fit is a plain error, nothing half-written stays there; with room, it goes", .enabled(if: SmallDisk.canMount, "needs root to mount a small tmpfs"))
    func remoteDiskFull() throws {
        let bench = try Bench()
        let device = try bench.device("A")
        let nas = try bench.folder("nas")
        let folder = try bench.folder("F")
        let small = try SmallDisk.mount(at: nas, megabytes: 4)
        defer { small.unmount() }
        let content = Data((0..<6_000_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 12) })
        try content.write(to: folder.appending(path: "big.bin"))
        try write("small", to: folder.appending(path: "small.txt"))
        for name in ["big.bin", "small.txt"] {
            try settle(folder.appending(path: name))
        }
        #expect(try device.run(["remote", "add", "nas", "local", nas.path]).status == 0)
        let full = try device.run(["sync", folder.path, "nas:/F", "--once"])
        #expect(full.status != 0 && full.stderr.contains("big.bin: not enough space on the disk of"), "\(full.stdout)\(full.stderr)")
        #expect(!full.stderr.contains("Domain="), "said plainly: \(full.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: nas.appending(path: "F").path) == ["small.txt"], "nothing half-written there")
        try small.resize(megabytes: 16)
        let roomy = try device.run(["sync", folder.path, "--once"])
        #expect(roomy.status == 0 && roomy.stdout.contains("↑ big.bin"), "\(roomy.stdout)\(roomy.stderr)")
        #expect(try Data(contentsOf: nas.appending(path: "F/big.bin")) == content)
    }

    @Test("the disk holding NIMBUS_HOME full: a plain error, non-zero; with room, the same sync goes through whole", .enabled(if: SmallDisk.canMount, "needs root to mount a small tmpfs"))
    func homeDiskFull() throws {
        let bench = try Bench()
        let disk = try SmallDisk.mount(at: try bench.folder("small"), megabytes: 1)
        defer { disk.unmount() }
        let small = disk.path
        let device = CLIDevice(home: small.appending(path: "home"), workingDirectory: bench.root)
        let nas = try bench.folder("nas")
        let folder = try bench.folder("F")
        for index in 0..<3000 { try write("file number \(index)", to: folder.appending(path: "a-file-with-a-longer-name-\(index).txt")) }
        let old = Date().addingTimeInterval(-5)
        for name in try FileManager.default.contentsOfDirectory(atPath: folder.path) {
            try FileManager.default.setAttributes([.modificationDate: old], ofItemAtPath: folder.appending(path: name).path)
        }
        #expect(try device.run(["remote", "add", "nas", "local", nas.path]).status == 0)
        let full = try device.run(["sync", folder.path, "nas:/F", "--once"])
        #expect(full.status != 0 && full.stderr.contains("The disk holding \(small.path)/home is full"), "\(full.stderr)")
        try disk.resize(megabytes: 64)
        let roomy = try device.run(["sync", folder.path, "--once"])
        #expect(roomy.status == 0, "\(roomy.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: nas.appending(path: "F").path).count == 3000)
        #expect(try device.run(["status"]).stdout.contains("0 pending, 0 conflicts, 0 failed"))
    }

    @Test("links (a loop, one to a file outside, a dangling one) and a named pipe in the folder are skipped and said; the sync neither follows nor blocks on them")
    func linksAndPipes() throws {
        let bench = try Bench()
        let device = try bench.device("A")
        let nas = try bench.folder("nas")
        let folder = try bench.folder("F")
        try write("plain", to: folder.appending(path: "plain.txt"))
        try settle(folder.appending(path: "plain.txt"))
        try FileManager.default.createSymbolicLink(atPath: folder.appending(path: "loop").path, withDestinationPath: "..")
        try FileManager.default.createSymbolicLink(atPath: folder.appending(path: "passwd").path, withDestinationPath: "/etc/passwd")
        try FileManager.default.createSymbolicLink(atPath: folder.appending(path: "dangling").path, withDestinationPath: "nowhere")
        #expect(mkfifo(folder.appending(path: "pipe").path, 0o644) == 0)
        #expect(try device.run(["remote", "add", "nas", "local", nas.path]).status == 0)
        let synced = try device.run(["sync", folder.path, "nas:/F", "--once"])
        #expect(synced.status == 0, "\(synced.stdout)\(synced.stderr)")
        for name in ["loop", "passwd", "dangling"] { #expect(synced.stdout.contains("skipped \(name) (symbolic link, not followed)"), "\(synced.stdout)") }
        #expect(synced.stdout.contains("skipped pipe (not a regular file"), "\(synced.stdout)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: nas.appending(path: "F").path) == ["plain.txt"])
    }

    @Test("a folder on a mounted disk as the remote: remote add, list, sync both ways, remove")
    func localFolderRemote() throws {
        let bench = try Bench()
        let a = try bench.device("A")
        let b = try bench.device("B")
        let nas = try bench.folder("nas")
        let folderA = try bench.folder("A")
        let folderB = try bench.folder("B")
        #expect(try a.run(["remote", "add", "nas", "local", nas.path]).status == 0)
        #expect(try b.run(["remote", "add", "nas", "local", nas.path]).status == 0)
        let listed = try a.run(["remote", "list"])
        #expect(listed.stdout.contains("nas  local  \(nas.path)"), "\(listed.stdout)")
        let missing = try a.run(["remote", "add", "gone", "local", bench.root.appending(path: "unmounted").path])
        #expect(missing.status != 0 && missing.stderr.contains("is not a folder"), "\(missing.stderr)")
        let unknown = try a.run(["sync", folderA.path, "nope:/x", "--once"])
        #expect(unknown.status != 0 && unknown.stderr.contains("No remote named 'nope'"), "\(unknown.stderr)")

        try write("alpha", to: folderA.appending(path: "alpha.txt"))
        try write("inner", to: folderA.appending(path: "docs/inner.md"))
        let up = try a.run(["sync", folderA.path, "nas:/Shared", "--once"])
        #expect(up.status == 0, "\(up.stdout)\(up.stderr)")
        #expect(try text(nas.appending(path: "Shared/alpha.txt")) == "alpha", "the files are in the remote folder")
        #expect(try text(nas.appending(path: "Shared/docs/inner.md")) == "inner")
        #expect(try b.run(["sync", folderB.path, "nas:/Shared", "--once"]).status == 0)
        #expect(tree(folderB) == tree(folderA))
        // A pair that would sync the same files twice through one remote (and copy them into themselves) is refused.
        for (local, remote) in [("docs", "nas:/Shared"), ("docs", "nas:/Shared/docs"), ("", "nas:/Shared/deeper"), ("", "nas:/")] {
            let overlapping = try a.run(["sync", local.isEmpty ? folderA.path : folderA.appending(path: local).path, remote, "--once"])
            #expect(overlapping.status != 0 && overlapping.stderr.contains("already syncs"), "\(local) \(remote): \(overlapping.stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: nas.appending(path: "Shared/deeper").path), "nothing was made there")
        #expect(try a.run(["status"]).stdout.components(separatedBy: "⇄").count == 2, "no pair was added")

        // Edits, a move and a deletion travel through it; an edit made directly in the remote folder too.
        try write("alpha v2", to: folderB.appending(path: "alpha.txt"))
        try FileManager.default.moveItem(at: folderB.appending(path: "docs/inner.md"), to: folderB.appending(path: "inner.md"))
        try write("from the NAS", to: nas.appending(path: "Shared/nas.txt"))
        let changedOnTheNAS = Date(timeIntervalSince1970: 1_740_830_400)  // 2025-03-01 12:00 UTC
        try FileManager.default.setAttributes([.modificationDate: changedOnTheNAS], ofItemAtPath: nas.appending(path: "Shared/nas.txt").path)
        let moved = try b.run(["sync", folderB.path, "--once"])
        #expect(moved.status == 0)
        #expect(moved.stdout.contains("→ docs/inner.md → inner.md"), "a move made here is told from where to where: \(moved.stdout)")
        #expect(try a.run(["sync", folderA.path, "--once"]).status == 0)
        #expect(try text(folderA.appending(path: "alpha.txt")) == "alpha v2")
        #expect(try text(folderA.appending(path: "nas.txt")) == "from the NAS")
        let kept = try FileManager.default.attributesOfItem(atPath: folderA.appending(path: "nas.txt").path)[.modificationDate] as? Date
        #expect(abs((kept ?? .distantPast).timeIntervalSince(changedOnTheNAS)) < 0.002, "a download keeps the time of its change there: \(String(describing: kept))")
        #expect(tree(folderA)["inner.md"] != nil && tree(folderA)["docs/inner.md"] == nil)
        try FileManager.default.removeItem(at: folderA.appending(path: "alpha.txt"))
        let deleted = try a.run(["sync", folderA.path, "--once"])
        #expect(deleted.status == 0)
        #expect(deleted.stdout.contains("✗ alpha.txt (deleted here, now in the trash there)"), "\(deleted.stdout)")
        #expect(try b.run(["sync", folderB.path, "--once"]).status == 0)
        #expect(tree(folderB)["alpha.txt"] == nil)
        #expect(tree(folderA) == tree(folderB))
        #expect(!FileManager.default.fileExists(atPath: nas.appending(path: "Shared/alpha.txt").path))
        let trash = try FileManager.default.subpathsOfDirectory(atPath: nas.appending(path: "Shared/.nimbus-trash").path)
        #expect(trash.contains { $0.hasSuffix("alpha.txt") }, "what is deleted there goes to the folder's trash: \(trash)")

        // Permissions: a file new here is made with the usual ones (0666 less the umask), not the store's private
        // 0600; a file replaced by a newer version keeps its own (an executable stays executable).
        try write("#!/bin/sh\necho one\n", to: folderA.appending(path: "run.sh"))
        #expect(try a.run(["sync", folderA.path, "--once"]).status == 0)
        #expect(try b.run(["sync", folderB.path, "--once"]).status == 0)
        #expect(mode(folderB.appending(path: "run.sh")) == newFileMode)
        #expect(mode(folderB.appending(path: "nas.txt")) == newFileMode)
        try FileManager.default.setAttributes([.posixPermissions: 0o750], ofItemAtPath: folderB.appending(path: "run.sh").path)
        try write("#!/bin/sh\necho two\n", to: folderA.appending(path: "run.sh"))
        #expect(try a.run(["sync", folderA.path, "--once"]).status == 0)
        #expect(try b.run(["sync", folderB.path, "--once"]).status == 0)
        #expect(try text(folderB.appending(path: "run.sh")) == "#!/bin/sh\necho two\n")
        #expect(mode(folderB.appending(path: "run.sh")) == 0o750)

        let status = try a.run(["status"])
        #expect(status.stdout.contains("sync \(folderA.path) ⇄ nas:/Shared"), "\(status.stdout)")

        // The synced folder gone (moved away; a disk not mounted): it is not made again empty, which would delete
        // everything on the remote; the sync refuses and says what to do. Back in place, it syncs as before.
        let away = bench.root.appending(path: "A-away")
        try FileManager.default.moveItem(at: folderA, to: away)
        let gone = try a.run(["sync", folderA.path, "--once"])
        #expect(gone.status != 0 && gone.stderr.contains("is not there") && gone.stderr.contains("nothing was synced or deleted"), "\(gone.stderr)")
        #expect(!FileManager.default.fileExists(atPath: folderA.path), "not made again")
        #expect(FileManager.default.fileExists(atPath: nas.appending(path: "Shared/nas.txt").path), "nothing deleted there")
        // An empty folder in its place (a disk's mount point while the disk is not mounted): another folder holding
        // none of the synced files is not taken for the synced one either.
        try FileManager.default.createDirectory(at: folderA, withIntermediateDirectories: false)
        let unmounted = try a.run(["sync", folderA.path, "--once"])
        #expect(unmounted.status != 0 && unmounted.stderr.contains("is not the folder that synced") && unmounted.stderr.contains("--confirm-deletions"),
                "\(unmounted.stdout)\(unmounted.stderr)")
        #expect(FileManager.default.fileExists(atPath: nas.appending(path: "Shared/nas.txt").path), "nothing deleted there")
        #expect(tree(folderA).isEmpty, "nothing brought into it")
        try FileManager.default.removeItem(at: folderA)
        try FileManager.default.moveItem(at: away, to: folderA)
        let back = try a.run(["sync", folderA.path, "--once"])
        #expect(back.status == 0 && back.stdout.contains("0 changes"), "\(back.stdout)\(back.stderr)")

        #expect(try a.run(["remote", "remove", "nas"]).status == 0)
        #expect(try a.run(["remote", "list"]).stdout.contains("No remotes"))
        #expect(FileManager.default.fileExists(atPath: nas.appending(path: "Shared/nas.txt").path), "removing a remote deletes nothing")
    }
}

func sha256(_ text: String) -> String {
    SHA256.hash(data: Data(text.utf8)).map { String(format: "%02x", $0) }.joined()
}
