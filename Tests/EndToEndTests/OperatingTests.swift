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

    func write(_ text: String, named name: String, in bench: Bench) throws -> String {
        let url = try bench.folder("files").appending(path: name)
        try Data(text.utf8).write(to: url)
        return url.path
    }
}
