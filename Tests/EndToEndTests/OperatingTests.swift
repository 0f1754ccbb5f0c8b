import Foundation
import NimbusTestSupport
import Testing

/// The operator's commands as a person types them, against a `nimbus serve` process that keeps running.
@Suite("Operating a server from the command line")
struct OperatingTests {
    @Test("nimbus user list, quota, disable, enable, passwd and remove on a running server; bad input changes nothing")
    func users() async throws {
        let bench = try Bench()
        let laptop = try bench.device("laptop", user: "ana")
        let admin = laptop  // any shell on the server's machine: the commands read --data, not a login
        let data = ["--data", bench.root.appending(path: "server").path]
        #expect(try laptop.run(["put", try write("hello", named: "a.txt", in: bench), "/"]).status == 0)

        let listed = try admin.run(["user", "list"] + data)
        #expect(listed.status == 0, "\(listed.stderr)")
        let lines = listed.stdout.split(separator: "\n")
        #expect(lines.first?.hasPrefix("USER") == true && lines.count == 2, "\(listed.stdout)")
        #expect(lines.last?.hasPrefix("ana ") == true && lines.last?.contains("unlimited") == true, "\(listed.stdout)")
        let json = try JSONSerialization.jsonObject(with: Data(try admin.run(["user", "list", "--json"] + data).stdout.utf8)) as? [[String: Any]]
        #expect(json?.first?["username"] as? String == "ana" && json?.first?["devices"] as? Int == 1 && json?.first?["used"] as? Int == 5)

        // Bad input: a message on stderr, a non-zero exit, nothing changed.
        for arguments in [["user", "quota", "ana", "lots"], ["user", "disable", "nobody"], ["user", "remove", "ana"], ["user", "list", "--data", "/nonexistent/x"]] {
            let refused = try admin.run(arguments + (arguments.contains("--data") ? [] : data))
            #expect(refused.status != 0 && !refused.stderr.isEmpty, "\(arguments): \(refused.status) \(refused.stdout)")
        }
        #expect(try admin.run(["user", "remove", "ana"] + data).stderr.contains("--yes"))
        #expect(!FileManager.default.fileExists(atPath: "/nonexistent/x"))

        let quota = try admin.run(["user", "quota", "ana", "1KiB"] + data)
        #expect(quota.status == 0 && quota.stdout.contains("1 KiB"), "\(quota.stdout)\(quota.stderr)")
        #expect(try admin.run(["user", "quota", "ana", "none"] + data).stdout.contains("unlimited"))

        #expect(try admin.run(["user", "disable", "ana"] + data).stdout.contains("Disabled ana"))
        let refused = try laptop.run(["ls", "/"])
        // (A listing from the device's copy, as offline, but said: the server refused it.)
        #expect(refused.stderr.contains("refused this device") && refused.stderr.contains("disabled"), "\(refused.stdout)\(refused.stderr)")
        #expect(try admin.run(["user", "list"] + data).stdout.contains("disabled"))
        #expect(try admin.run(["user", "enable", "ana"] + data).status == 0)
        #expect(try laptop.run(["ls", "/"]).stdout.contains("a.txt"), "the same device again, the data kept")

        let passwd = try admin.run(["user", "passwd", "ana", "--password-stdin"] + data, stdin: "a brand new horse\n")
        #expect(passwd.status == 0 && passwd.stdout.contains("signed out"), "\(passwd.stderr)")
        #expect(try laptop.run(["ls", "/"]).stderr.contains("refused this device"), "signed out")

        let removed = try admin.run(["user", "remove", "ana", "--yes"] + data)
        #expect(removed.status == 0 && removed.stdout.contains("Removed ana"), "\(removed.stdout)\(removed.stderr)")
        #expect(try admin.run(["user", "list"] + data).stdout.contains("No users yet"))
    }

    @Test("nimbus admin verify on a running server names a file a flipped byte damaged (exit 1); another device's get fails; a put of the same bytes heals it")
    func verifyAndHeal() async throws {
        let bench = try Bench()
        let laptop = try bench.device("laptop", user: "ana")
        let phone = try bench.device("phone", user: "ana")
        let data = ["--data", bench.root.appending(path: "server").path]
        let content = Data((0..<1_500_000).map { _ in UInt8.random(in: 0...255) })
        let original = try bench.folder("files").appending(path: "big.bin")
        try content.write(to: original)
        #expect(try laptop.run(["put", original.path, "/"]).status == 0)
        #expect(try laptop.run(["admin", "verify"] + data).status == 0)

        let packs = bench.root.appending(path: "server/packs")
        let user = try #require(try FileManager.default.contentsOfDirectory(atPath: packs.path).first)
        let pack = packs.appending(path: user).appending(path: try #require(try FileManager.default.contentsOfDirectory(atPath: packs.appending(path: user).path).first))
        var bytes = try Data(contentsOf: pack)
        bytes[800_000] ^= 0x40
        try bytes.write(to: pack)

        let verified = try laptop.run(["admin", "verify"] + data)
        #expect(verified.status == 1 && verified.stdout.contains("ana  /big.bin"), "\(verified.stdout)\(verified.stderr)")
        let got = try phone.run(["get", "/big.bin", phone.workingDirectory.appending(path: "got.bin").path])
        #expect(got.status != 0, "\(got.stdout)")
        #expect(!FileManager.default.fileExists(atPath: phone.workingDirectory.appending(path: "got.bin").path), "no file with other bytes, nor half of one")

        let copy = try bench.folder("copies").appending(path: "same.bin")
        try content.write(to: copy)
        #expect(try laptop.run(["put", copy.path, "/"]).status == 0)
        let healed = try laptop.run(["admin", "verify"] + data)
        #expect(healed.status == 0 && healed.stdout.contains("healed") && healed.stdout.contains("/big.bin"), "\(healed.stdout)\(healed.stderr)")
        #expect(try phone.run(["get", "/big.bin", phone.workingDirectory.appending(path: "again.bin").path]).status == 0)
        #expect(try Data(contentsOf: phone.workingDirectory.appending(path: "again.bin")) == content)
    }

    @Test("nimbus admin backup while uploads run: the restored server has every upload acknowledged before it began; a second backup copies only what is new; foreign folders and live data folders are refused")
    func backupAndRestore() async throws {
        let bench = try Bench()
        let laptop = try bench.device("laptop", user: "ana")
        let data = bench.root.appending(path: "server")
        let files = try bench.folder("files")
        var contents: [String: Data] = [:]
        for index in 0..<24 {
            let name = "f\(index).bin"
            contents[name] = Data((0..<300_000).map { _ in UInt8.random(in: 0...255) })
            try contents[name]!.write(to: files.appending(path: name))
        }
        // Uploads go on, one after another, while the backup runs; each is noted when `put` has exited 0.
        let acknowledged = Acknowledged()
        let writer = Thread {
            for index in 0..<24 {
                let name = "f\(index).bin"
                if let put = try? laptop.run(["put", files.appending(path: name).path, "/"]), put.status == 0 { acknowledged.add(name) }
            }
        }
        writer.start()
        while acknowledged.all.count < 8 { try await Task.sleep(for: .milliseconds(20)) }
        let destination = bench.root.appending(path: "backup")
        let began = Date()
        let first = try laptop.run(["admin", "backup", destination.path, "--data", data.path])
        #expect(first.status == 0 && first.stdout.contains("Backed up"), "\(first.stdout)\(first.stderr)")
        let before = acknowledged.all.filter { $0.at < began }.map(\.name)
        #expect(before.count >= 8)
        while !writer.isFinished { try await Task.sleep(for: .milliseconds(50)) }

        // Restored into a new folder and served: every upload acknowledged before the backup began is there, whole.
        let restored = bench.root.appending(path: "restored")
        let restore = try laptop.run(["admin", "restore", destination.path, "--data", restored.path])
        #expect(restore.status == 0, "\(restore.stderr)")
        let second = try ChildServer(data: restored)
        defer { second.stop() }
        let reader = CLIDevice(home: bench.root.appending(path: "home-reader"), workingDirectory: try bench.folder("work-reader"))
        #expect(try reader.run(["login", second.baseURL, "--username", "ana", "--password-stdin", "--device-name", "reader"], stdin: "correct horse").status == 0)
        for name in before {
            let out = reader.workingDirectory.appending(path: name)
            let got = try reader.run(["get", "/" + name, out.path])
            #expect(got.status == 0 && (try? Data(contentsOf: out)) == contents[name], "\(name): \(got.stderr)")
        }

        // Again into the same folder — after one cut short (what a kill -9 leaves: a database copy not switched to,
        // a file half copied) — only what is new is copied, and the leftovers go.
        let user = try #require(try FileManager.default.contentsOfDirectory(atPath: destination.appending(path: "packs").path).first)
        try Data("half".utf8).write(to: destination.appending(path: "packs/\(user)/.copy-leftover"))
        try Data("half a database".utf8).write(to: destination.appending(path: "nimbus.sqlite.partial"))
        let again = try laptop.run(["admin", "backup", destination.path, "--data", data.path])
        #expect(again.status == 0 && again.stdout.contains("there already") && !again.stdout.contains(", 0 there already"), "\(again.stdout)\(again.stderr)")
        #expect(!FileManager.default.fileExists(atPath: destination.appending(path: "packs/\(user)/.copy-leftover").path))
        #expect(!FileManager.default.fileExists(atPath: destination.appending(path: "nimbus.sqlite.partial").path))
        // A backup can be verified where it is, and is still one afterwards.
        let checked = try laptop.run(["admin", "verify", "--data", destination.path])
        #expect(checked.status == 0 && checked.stdout.contains("Every block is whole"), "\(checked.stdout)\(checked.stderr)")
        #expect(try laptop.run(["admin", "backup", destination.path, "--data", data.path]).status == 0)
        // A server started on the restored folder made it a live one: no backup goes into it.
        let live = try laptop.run(["admin", "backup", restored.path, "--data", data.path])
        #expect(live.status != 0 && live.stderr.contains("data folder"), "\(live.stderr)")

        // Refused, changing nothing: a folder that is not a backup, a restore over a live data folder, PostgreSQL.
        let foreign = try bench.folder("photos")
        try Data("mine".utf8).write(to: foreign.appending(path: "holiday.jpg"))
        let refused = try laptop.run(["admin", "backup", foreign.path, "--data", data.path])
        #expect(refused.status != 0 && refused.stderr.contains("not a Nimbus backup"), "\(refused.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: foreign.path) == ["holiday.jpg"])
        let over = try laptop.run(["admin", "restore", destination.path, "--data", data.path])
        #expect(over.status != 0 && over.stderr.contains("not empty"), "\(over.stderr)")
        let postgres = try laptop.run(["admin", "backup", bench.root.appending(path: "pg").path, "--database", "postgres://x@127.0.0.1/none"])
        #expect(postgres.status != 0 && postgres.stderr.contains("pg_dump"))
        #expect(!FileManager.default.fileExists(atPath: bench.root.appending(path: "pg").path))

        // The backup folder itself serves too (it is then a live data folder).
        let inPlace = try ChildServer(data: destination)
        defer { inPlace.stop() }
        let third = CLIDevice(home: bench.root.appending(path: "home-third"), workingDirectory: try bench.folder("work-third"))
        #expect(try third.run(["login", inPlace.baseURL, "--username", "ana", "--password-stdin", "--device-name", "third"], stdin: "correct horse").status == 0)
        let name = try #require(before.first)
        #expect(try third.run(["get", "/" + name, third.workingDirectory.appending(path: name).path]).status == 0)
        #expect(try Data(contentsOf: third.workingDirectory.appending(path: name)) == contents[name])
    }

    func write(_ text: String, named name: String, in bench: Bench) throws -> String {
        let url = try bench.folder("files").appending(path: name)
        try Data(text.utf8).write(to: url)
        return url.path
    }
}

/// Uploads a test saw acknowledged, with when.
final class Acknowledged: @unchecked Sendable {
    private let lock = NSLock()
    private var done: [(name: String, at: Date)] = []

    func add(_ name: String) { lock.withLock { done.append((name, Date())) } }
    var all: [(name: String, at: Date)] { lock.withLock { done } }
}
