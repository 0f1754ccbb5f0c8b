import Crypto
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import NimbusAPI
import NimbusTestSupport
import Testing

/// The real `nimbus` binary: a server process and client devices (separate `NIMBUS_HOME`s) as separate processes.
final class Bench: @unchecked Sendable {
    let root: URL
    let server: ChildServer

    init(serverArguments: [String] = []) throws {
        root = FileManager.default.temporaryDirectory.appending(path: "nimbus-e2e-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        server = try ChildServer(data: root.appending(path: "server"), arguments: serverArguments)
    }

    deinit {
        server.stop()
        try? FileManager.default.removeItem(at: root)
    }

    /// A device logged in as `user` (registered on first use).
    func device(_ name: String, user: String = "ana") throws -> CLIDevice {
        let work = root.appending(path: "work-\(name)")
        try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
        let device = CLIDevice(home: root.appending(path: "home-\(name)"), workingDirectory: work)
        var request = URLRequest(url: URL(string: server.baseURL + "/v1/auth/register")!)
        request.httpMethod = "POST"
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.httpBody = try JSONEncoder().encode(["username": user, "password": "correct horse"])
        let done = DispatchSemaphore(value: 0)
        URLSession.shared.dataTask(with: request) { _, _, _ in done.signal() }.resume()
        done.wait()
        let login = try device.run(["login", server.baseURL, "--username", user, "--password-stdin", "--device-name", name], stdin: "correct horse")
        #expect(login.status == 0, "login: \(login.stderr)")
        return device
    }

    func folder(_ name: String) throws -> URL {
        let url = root.appending(path: name)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }
}

/// path → sha256 of every file (and "dir" for folders) under a folder.
func tree(_ root: URL) -> [String: String] {
    var result: [String: String] = [:]
    let enumerator = FileManager.default.enumerator(at: root, includingPropertiesForKeys: [.isDirectoryKey])
    while let url = enumerator?.nextObject() as? URL {
        let relative = String(url.standardizedFileURL.path.dropFirst(root.standardizedFileURL.path.count + 1))
        if (try? url.resourceValues(forKeys: [.isDirectoryKey]).isDirectory) == true {
            result[relative] = "dir"
        } else if let data = try? Data(contentsOf: url) {
            result[relative] = SHA256.hash(data: data).map { String(format: "%02x", $0) }.joined()
        }
    }
    return result
}

/// A file's permission bits.
func mode(_ url: URL) -> Int? { (try? FileManager.default.attributesOfItem(atPath: url.path)[.posixPermissions]) as? Int }

/// What a new file's permissions are here: 0666 less this process's umask (which `nimbus` inherits).
let newFileMode: Int = {
    let mask = umask(0o022)
    umask(mask)
    return 0o666 & ~Int(mask)
}()

func write(_ text: String, to url: URL) throws {
    try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
    try Data(text.utf8).write(to: url)
    try settle(url)
}

/// Makes a file look settled: modified 5 s ago (a sync leaves a file alone while it is still being written).
func settle(_ url: URL) throws {
    try FileManager.default.setAttributes([.modificationDate: Date().addingTimeInterval(-5)], ofItemAtPath: url.path)
}

@Suite("End to end: the nimbus binary", .serialized)
struct EndToEndTests {
    @Test("file commands: login, mkdir, put, ls, mv, get, versions, restore, rm, trash, untrash, and clear errors")
    func fileCommands() throws {
        let bench = try Bench()
        let device = try bench.device("laptop")
        #expect(try device.run(["whoami"]).stdout.contains("ana on"))
        #expect(try device.run(["mkdir", "-p", "/Work/2026"]).status == 0)
        try write("first", to: device.workingDirectory.appending(path: "notes.txt"))
        #expect(try device.run(["put", "notes.txt", "/Work/"]).status == 0)
        let listing = try device.run(["ls", "/Work", "--json"])
        #expect(listing.status == 0)
        let items = try JSONSerialization.jsonObject(with: Data(listing.stdout.utf8)) as? [[String: Any]]
        #expect(Set(items?.compactMap { $0["name"] as? String } ?? []) == ["2026", "notes.txt"])

        try write("second", to: device.workingDirectory.appending(path: "notes.txt"))
        let replace = try device.run(["put", "notes.txt", "/Work/notes.txt", "--on-conflict", "replace"])
        #expect(replace.status == 0, "\(replace.stderr)")
        let clash = try device.run(["put", "notes.txt", "/Work/notes.txt"])
        #expect(clash.status == 0, "the same content again is already there")
        try write("third", to: device.workingDirectory.appending(path: "notes.txt"))
        let refused = try device.run(["put", "notes.txt", "/Work/notes.txt"])
        #expect(refused.status != 0)
        #expect(refused.stderr.contains("already exists"))

        let versions = try device.run(["versions", "/Work/notes.txt", "--json"])
        let revisions = try JSONDecoder.nimbus.decode([FileRevision].self, from: Data(versions.stdout.utf8))
        #expect(revisions.count == 2)
        #expect(try device.run(["restore", "/Work/notes.txt", revisions[1].revisionId]).status == 0)
        #expect(try device.run(["get", "/Work/notes.txt", "restored.txt"]).status == 0)
        #expect(try String(contentsOf: device.workingDirectory.appending(path: "restored.txt"), encoding: .utf8) == "first")
        #expect(mode(device.workingDirectory.appending(path: "restored.txt")) == newFileMode, "a new file's permissions, not the store's 0600")
        // It keeps the time of its last change on the server (the restore) — or, as that was a moment ago, three
        // seconds before the download, so a save right after it cannot leave the file's time as it was.
        let restored = try JSONSerialization.jsonObject(with: Data(try device.run(["ls", "/Work", "--json"]).stdout.utf8)) as? [[String: Any]]
        let changed = (restored?.first { $0["name"] as? String == "notes.txt" }?["modifiedAt"] as? String).flatMap {
            try? Date($0, strategy: .iso8601.year().month().day().time(includingFractionalSeconds: true))
        }
        let kept = try FileManager.default.attributesOfItem(atPath: device.workingDirectory.appending(path: "restored.txt").path)[.modificationDate] as? Date
        if let kept, let changed {
            #expect(kept <= changed && changed.timeIntervalSince(kept) < 5 && kept <= Date().addingTimeInterval(-3), "\(kept) \(changed)")
        } else {
            Issue.record("no time: \(String(describing: kept)) \(String(describing: changed))")
        }

        #expect(try device.run(["mv", "/Work/notes.txt", "/Work/2026"]).status == 0)
        #expect(try device.run(["mv", "/Work/2026/notes.txt", "/Work/2026/renamed.txt"]).status == 0)
        #expect(try device.run(["ls", "/Work/2026"]).stdout == "renamed.txt\n")
        #expect(try device.run(["rm", "/Work"]).stderr.contains("rm -r"))
        #expect(try device.run(["rm", "-r", "/Work"]).status == 0)
        #expect(try device.run(["trash"]).stdout.contains("Work"))
        #expect(try device.run(["untrash", "Work"]).status == 0)
        #expect(try device.run(["ls", "/Work/2026"]).stdout == "renamed.txt\n")

        let missing = try device.run(["get", "/nope.txt"])
        #expect(missing.status != 0)
        #expect(missing.stderr.contains("no such file"))
        let badTransfers = try device.run(["sync", "somewhere", "--transfers", "0"])
        #expect(badTransfers.status != 0)
        #expect(badTransfers.stderr.contains("--transfers must be between 1 and 32"))
        let stranger = CLIDevice(home: bench.root.appending(path: "home-nobody"), workingDirectory: device.workingDirectory)
        let notLoggedIn = try stranger.run(["ls"])
        #expect(notLoggedIn.status != 0)
        #expect(notLoggedIn.stderr.contains("Not logged in"))
        let about = try device.run(["about", "--json"])
        #expect(about.stdout.contains("\"username\" : \"ana\""))
    }

    @Test("app passwords from the CLI: add prints the secret once, list shows it without, revoke removes it; errors are clear")
    func appPasswords() throws {
        let bench = try Bench()
        let device = try bench.device("laptop")
        let added = try device.run(["app-password", "add", "Finder on the laptop", "--json"])
        #expect(added.status == 0, "\(added.stderr)")
        let made = try JSONDecoder.nimbus.decode(AppPassword.self, from: Data(added.stdout.utf8))
        let secret = try #require(made.password)
        let quiet = try device.run(["app-password", "add", "phone", "--quiet"])
        #expect(quiet.status == 0 && quiet.stdout.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: "-").count == 5, "\(quiet.stdout)")

        let listed = try device.run(["app-password", "list"])
        #expect(listed.status == 0)
        #expect(listed.stdout.contains("Finder on the laptop") && listed.stdout.contains("phone") && listed.stdout.contains(made.id))
        #expect(!listed.stdout.contains(secret), "the secret is never listed")

        let revoked = try device.run(["app-password", "revoke", made.id])
        #expect(revoked.status == 0, "\(revoked.stderr)")
        let after = try JSONDecoder.nimbus.decode(AppPasswordList.self, from: Data(try device.run(["app-password", "list", "--json"]).stdout.utf8))
        #expect(after.appPasswords.map(\.label) == ["phone"])
        let again = try device.run(["app-password", "revoke", made.id])
        #expect(again.status != 0)
        #expect(again.stderr.contains("No app password \(made.id)"), "\(again.stderr)")
        let empty = try device.run(["app-password", "add", "   "])
        #expect(empty.status != 0)
        #expect(empty.stderr.contains("label"), "\(empty.stderr)")
    }

    @Test("the server pauses a folder sync deleting most files: nothing more goes, 'nimbus untrash --since' brings them back, 'nimbus trash confirm' lets it go on")
    func massDeletionBreaker() throws {
        // The server's breaker at 6 items; the client's own guard (10 deletions) lets these through.
        let bench = try Bench(serverArguments: ["--mass-deletion-minimum", "6", "--mass-deletion-fraction", "0.5"])
        let laptop = try bench.device("laptop")
        let phone = try bench.device("phone")
        let folder = try bench.folder("laptop-files")
        for index in 0..<9 { try write("file \(index)", to: folder.appending(path: "f\(index).txt")) }
        #expect(try laptop.run(["sync", folder.path, "/Docs", "--once"]).status == 0)
        let started = ISO8601DateFormatter().string(from: Date().addingTimeInterval(-1))
        for index in 0..<9 { try FileManager.default.removeItem(at: folder.appending(path: "f\(index).txt")) }
        let paused = try laptop.run(["sync", folder.path, "--once"])
        #expect(paused.status != 0, "the refused deletions are reported")
        #expect((paused.stdout + paused.stderr).contains("nimbus trash confirm"), "\(paused.stdout)\(paused.stderr)")
        let listed = try phone.run(["ls", "/Docs"]).stdout.split(separator: "\n")
        #expect(listed.count == 4, "5 of the 10 items went before the breaker (a 6th is over half): \(listed)")
        let note = try phone.run(["trash"])
        #expect(note.status == 0)
        #expect(note.stderr.contains("'laptop' deleted 6 items"), "\(note.stderr)")

        // Undo on another device: every file comes back, and the laptop gets them again.
        let undone = try phone.run(["untrash", "--since", started])
        #expect(undone.status == 0, "\(undone.stderr)")
        #expect(undone.stdout.contains("Restored 5 trashed items"), "\(undone.stdout)")
        #expect(try phone.run(["ls", "/Docs"]).stdout.split(separator: "\n").count == 9)
        let bad = try phone.run(["untrash", "--since", "last tuesday"])
        #expect(bad.status != 0)
        #expect(bad.stderr.contains("is not a time"), "\(bad.stderr)")

        // Or it was meant: confirm, and the laptop's next syncs delete (the refused ones wait out a short backoff).
        let confirmed = try phone.run(["trash", "confirm"])
        #expect(confirmed.status == 0, "\(confirmed.stderr)")
        #expect(confirmed.stdout.contains("Confirmed: 'laptop'"), "\(confirmed.stdout)")
        #expect(try phone.run(["trash", "confirm"]).stdout.contains("No device's deletions are paused"))
        // The laptop pulls the restored files back first (they were restored on the server after it deleted them).
        var rounds = 0
        while rounds < 6 {
            rounds += 1
            if try laptop.run(["sync", folder.path, "--once"]).status == 0 { break }
        }
        #expect(rounds < 6)
        let remote = try phone.run(["ls", "/Docs"]).stdout.split(separator: "\n").count
        let local = tree(folder).count
        let remoteList = try phone.run(["ls", "/Docs"]).stdout
        #expect(remote == local, "the laptop and the server agree after the confirmation (\(local) here, \(remote) there): \(remoteList) vs \(tree(folder).keys.sorted())")
    }

    @Test("two devices sync two folders: creates, edits, renames, moves and deletes on both sides converge")
    func twoDevices() throws {
        let bench = try Bench()
        let a = try bench.device("A")
        let b = try bench.device("B")
        let folderA = try bench.folder("A")
        let folderB = try bench.folder("B")
        try write("alpha", to: folderA.appending(path: "alpha.txt"))
        try write("inner", to: folderA.appending(path: "docs/inner.md"))
        try write("beta", to: folderB.appending(path: "beta.txt"))
        func round() throws {
            for (device, folder) in [(a, folderA), (b, folderB), (a, folderA)] {
                let result = try device.run(["sync", folder.path, "/Shared", "--once"])
                #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
            }
        }
        try round()
        #expect(tree(folderA) == tree(folderB))
        #expect(tree(folderA).keys.sorted() == ["alpha.txt", "beta.txt", "docs", "docs/inner.md"])

        try write("alpha v2", to: folderA.appending(path: "alpha.txt"))
        try FileManager.default.moveItem(at: folderB.appending(path: "beta.txt"), to: folderB.appending(path: "docs/beta-moved.txt"))
        try FileManager.default.moveItem(at: folderB.appending(path: "docs/inner.md"), to: folderB.appending(path: "docs/renamed.md"))
        try FileManager.default.createDirectory(at: folderB.appending(path: "new/deep"), withIntermediateDirectories: true)
        try write("deep", to: folderB.appending(path: "new/deep/file.bin"))
        try round()
        try round()
        #expect(tree(folderA) == tree(folderB))
        #expect(tree(folderA)["alpha.txt"] == tree(folderB)["alpha.txt"])
        #expect(tree(folderA).keys.sorted() == ["alpha.txt", "docs", "docs/beta-moved.txt", "docs/renamed.md", "new", "new/deep", "new/deep/file.bin"])

        try FileManager.default.removeItem(at: folderA.appending(path: "docs"))
        try round()
        #expect(tree(folderA) == tree(folderB))
        #expect(tree(folderB)["docs"] == nil)
        #expect(try a.run(["ls", "/Shared"]).stdout == "new/\nalpha.txt\n")
    }

    @Test("simultaneous edits of one file: both versions survive, on disk and on the server")
    func simultaneousEdits() throws {
        let bench = try Bench()
        let a = try bench.device("A")
        let b = try bench.device("B")
        let folderA = try bench.folder("A")
        let folderB = try bench.folder("B")
        try write("base", to: folderA.appending(path: "plan.md"))
        #expect(try a.run(["sync", folderA.path, "/", "--once"]).status == 0)
        #expect(try b.run(["sync", folderB.path, "/", "--once"]).status == 0)
        try write("from A", to: folderA.appending(path: "plan.md"))
        try write("from B", to: folderB.appending(path: "plan.md"))
        for _ in 0..<2 {
            #expect(try a.run(["sync", folderA.path, "--once"]).status == 0)
            #expect(try b.run(["sync", folderB.path, "--once"]).status == 0)
        }
        #expect(try a.run(["sync", folderA.path, "--once"]).status == 0)
        #expect(tree(folderA) == tree(folderB))
        let contents = Set(try FileManager.default.contentsOfDirectory(atPath: folderA.path).map {
            try String(contentsOf: folderA.appending(path: $0), encoding: .utf8)
        })
        #expect(contents == ["from A", "from B"], "both versions are on disk")
        #expect(tree(folderA).keys.contains { $0.hasPrefix("plan (conflict from ") })
    }

    @Test("the server gone: sync --once, ls and put say it cannot be reached and end at once; nothing changes here")
    func serverGone() async throws {
        let bench = try Bench()
        let device = try bench.device("A")
        let folder = try bench.folder("A")
        for index in 0..<20 { try write("file \(index)", to: folder.appending(path: "f\(index).txt")) }
        #expect(try device.run(["sync", folder.path, "/Docs", "--once"]).status == 0)
        try write("edited while the server is away", to: folder.appending(path: "f3.txt"))
        let before = tree(folder)
        bench.server.kill()
        // Each used to wait for a connection until its request's deadline (five minutes).
        for arguments in [["sync", folder.path, "--once"], ["ls", "/Docs"], ["put", folder.appending(path: "f1.txt").path, "/f1.txt"]] {
            let running = device.start(arguments)
            let (hung, result) = await running.finish(within: .seconds(60))
            #expect(!hung, "nimbus \(arguments[0]) still running 60 s after its server went away")
            #expect(result.status != 0 && result.stderr.contains("could not be reached"), "nimbus \(arguments[0]): \(result.stderr)")
        }
        #expect(tree(folder) == before, "nothing here changed")
        // The edit made while the server was away is counted as waiting to be sent (the round looked at the folder).
        let status = try device.run(["status"]).stdout
        let pair = status.split(separator: "\n").first { $0.contains("⇄ /Docs:") }.map(String.init) ?? ""
        #expect(pair.contains("1 pending"), "\(status)")
    }

    @Test("a put killed with -9 mid-transfer resumes with the same command")
    func killedPut() throws {
        let bench = try Bench(serverArguments: ["--chunk-size", "256KiB"])
        let device = try bench.device("A")
        var bytes = [UInt8](repeating: 0, count: 24 * 1024 * 1024)
        for index in bytes.indices { bytes[index] = UInt8(truncatingIfNeeded: index &* 2654435761 >> 7) }
        let big = Data(bytes)
        try big.write(to: device.workingDirectory.appending(path: "movie.bin"))
        let running = device.start(["put", "movie.bin", "/movie.bin"])
        Thread.sleep(forTimeInterval: 1.0)
        running.kill9()
        let list = try device.run(["uploads", "list"])
        #expect(list.status == 0)
        let again = try device.run(["put", "movie.bin", "/movie.bin"])
        #expect(again.status == 0, "\(again.stderr)")
        #expect(try device.run(["get", "/movie.bin", "back.bin"]).status == 0)
        #expect(try Data(contentsOf: device.workingDirectory.appending(path: "back.bin")) == big)
        #expect(try device.run(["uploads", "list"]).stdout.contains("No unfinished uploads"))
    }

    @Test("put sends the file from where it is: killed with -9, then the file rewritten, the resumed upload sends what it holds now")
    func killedPutThenRewritten() throws {
        let bench = try Bench(serverArguments: ["--chunk-size", "256KiB"])
        let device = try bench.device("A")
        // Caught mid-transfer: the kill lands while the upload is under way (a bigger file each time it came too late).
        var size = 48 * 1024 * 1024
        var caught: (name: String, file: URL)?
        for attempt in 0..<4 where caught == nil {
            let name = "draft-\(attempt).bin"
            let file = device.workingDirectory.appending(path: name)
            try Data((0..<size).map { UInt8(truncatingIfNeeded: ($0 &+ attempt) &* 2654435761 >> 9) }).write(to: file)
            let running = device.start(["put", name, "/" + name])
            Thread.sleep(forTimeInterval: 0.4)
            running.kill9()
            if !(try device.run(["uploads", "list"]).stdout.contains("No unfinished uploads")) { caught = (name, file) }
            size *= 2
        }
        let (name, file) = try #require(caught, "no put was caught mid-transfer")
        // Nothing of it sits in the device's store: the queued upload names the file itself.
        let home = device.home
        let copies = (FileManager.default.enumerator(atPath: home.path)?.allObjects as? [String] ?? []).filter { path in
            ((try? FileManager.default.attributesOfItem(atPath: home.appending(path: path).path)[.size] as? Int) ?? 0) >= 20 * 1024 * 1024
        }
        #expect(copies.isEmpty, "no copy of the file in NIMBUS_HOME: \(copies)")
        let rewritten = Data((0..<(20 * 1024 * 1024 + 7)).map { UInt8(truncatingIfNeeded: $0 &* 40503 >> 3) })
        try rewritten.write(to: file)
        let resumed = try device.run(["uploads", "resume"])
        #expect(resumed.status == 0, "\(resumed.stderr)")
        #expect(try device.run(["get", "/" + name, "back.bin"]).status == 0)
        #expect(try Data(contentsOf: device.workingDirectory.appending(path: "back.bin")) == rewritten, "what the file holds now, never a mix")
        #expect(try device.run(["uploads", "list"]).stdout.contains("No unfinished uploads"))
    }

    @Test("a big file synced to a WebDAV remote in Nextcloud's layout (Nimbus's /remote.php/dav/files/USER/) goes in chunks; killed with -9 mid-upload, the next sync sends the rest and the file arrives whole")
    func chunkedWebDAVKilled() throws {
        let bench = try Bench()
        let device = try bench.device("laptop")
        let password = try device.run(["app-password", "add", "sync", "--quiet"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let basic = "Basic " + Data("ana:\(password)".utf8).base64EncodedString()
        func dav(_ method: String, _ path: String) -> (status: Int, body: Data) {
            var request = URLRequest(url: URL(string: bench.server.baseURL + path)!)
            request.httpMethod = method
            request.setValue(basic, forHTTPHeaderField: "Authorization")
            request.setValue("1", forHTTPHeaderField: "Depth")
            let done = DispatchSemaphore(value: 0)
            nonisolated(unsafe) var result = (0, Data())
            URLSession.shared.dataTask(with: request) { data, response, _ in
                result = ((response as? HTTPURLResponse)?.statusCode ?? 0, data ?? Data())
                done.signal()
            }.resume()
            done.wait()
            return result
        }
        func waitingUploads() -> Int {
            String(decoding: dav("PROPFIND", "/remote.php/dav/uploads/ana/").body, as: UTF8.self).components(separatedBy: "<d:response>").count - 2
        }
        let added = try device.run(
            ["remote", "add", "nc", "webdav", "--url", bench.server.baseURL + "/remote.php/dav/files/ana/", "--user", "ana", "--password-stdin"],
            stdin: password + "\n")
        #expect(added.status == 0, "\(added.stderr)")
        let folder = try bench.folder("F")
        #expect(try device.run(["sync", folder.path, "nc:/Backup", "--once"]).status == 0)
        // Caught mid-transfer: chunks wait in the uploads folder (a bigger file each time the kill came too late).
        var size = 40 * 1024 * 1024
        var caught: (name: String, bytes: Data)?
        for attempt in 0..<4 where caught == nil {
            let name = "video-\(attempt).bin"
            let bytes = Data((0..<size).map { UInt8(truncatingIfNeeded: ($0 &+ attempt) &* 2654435761 >> 9) })
            try bytes.write(to: folder.appending(path: name))
            try settle(folder.appending(path: name))
            let running = device.start(["sync", folder.path, "--once"])
            Thread.sleep(forTimeInterval: 0.5)
            running.kill9()
            if waitingUploads() > 0 { caught = (name, bytes) }
            size *= 2
        }
        let (name, bytes) = try #require(caught, "no sync was caught mid-upload")
        #expect(dav("GET", "/dav/Backup/\(name)").status == 404, "nothing half-sent is visible")
        let again = try device.run(["sync", folder.path, "--once"])
        #expect(again.status == 0, "\(again.stdout)\(again.stderr)")
        let got = dav("GET", "/dav/Backup/\(name)")
        #expect(got.status == 200 && got.body == bytes, "the file arrived whole")
        #expect(waitingUploads() == 0, "the upload the kill left is the one assembled (resumed, not started over beside it)")
        let listed = String(decoding: dav("PROPFIND", "/dav/Backup/").body, as: UTF8.self)
        #expect(!listed.contains(".nimbus-partial-"), "no hidden partial file left")
    }

    @Test("a sync --watch killed with -9 mid-transfer resumes, and edits propagate while watching")
    func killedWatch() throws {
        let bench = try Bench(serverArguments: ["--chunk-size", "256KiB"])
        let a = try bench.device("A")
        let b = try bench.device("B")
        let folderA = try bench.folder("A")
        let folderB = try bench.folder("B")
        var bytes = [UInt8](repeating: 0, count: 16 * 1024 * 1024)
        for index in bytes.indices { bytes[index] = UInt8(truncatingIfNeeded: index &* 40503 >> 3) }
        try Data(bytes).write(to: folderA.appending(path: "large.bin"))
        try settle(folderA.appending(path: "large.bin"))
        let watching = a.start(["sync", folderA.path, "/", "--watch"])
        Thread.sleep(forTimeInterval: 1.5)
        watching.kill9()
        #expect(try a.run(["sync", folderA.path, "--once"]).status == 0)
        #expect(try b.run(["sync", folderB.path, "/", "--once"]).status == 0)
        #expect(tree(folderA) == tree(folderB))

        // While B watches, an edit on A arrives on its own.
        let watchingB = b.start(["sync", folderB.path, "--watch"])
        defer { watchingB.kill9() }
        try write("hello from A", to: folderA.appending(path: "note.txt"))
        #expect(try a.run(["sync", folderA.path, "--once"]).status == 0)
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline, (try? String(contentsOf: folderB.appending(path: "note.txt"), encoding: .utf8)) != "hello from A" {
            Thread.sleep(forTimeInterval: 0.2)
        }
        #expect((try? String(contentsOf: folderB.appending(path: "note.txt"), encoding: .utf8)) == "hello from A")
    }

    @Test("a 1,000-file tree makes the round trip intact")
    func thousandFiles() throws {
        let bench = try Bench()
        let a = try bench.device("A")
        let b = try bench.device("B")
        let folderA = try bench.folder("A")
        let folderB = try bench.folder("B")
        for index in 0..<1000 {
            let path = "d\(index % 10)/sub\(index % 7)/file-\(index).txt"
            try FileManager.default.createDirectory(at: folderA.appending(path: path).deletingLastPathComponent(), withIntermediateDirectories: true)
            try Data("content \(index)".utf8).write(to: folderA.appending(path: path))
        }
        Thread.sleep(forTimeInterval: 1.1)
        let up = try a.run(["sync", folderA.path, "/Tree", "--once", "--quiet"])
        #expect(up.status == 0, "\(up.stderr)")
        let down = try b.run(["sync", folderB.path, "/Tree", "--once", "--quiet"])
        #expect(down.status == 0, "\(down.stderr)")
        #expect(tree(folderA) == tree(folderB))
        #expect(tree(folderB).count == 1000 + 10 + 70)
        let again = try a.run(["sync", folderA.path, "--once"])
        #expect(again.stdout.contains("0 changes"), "a no-op sync changes nothing: \(again.stdout)")
    }
}
