import Crypto
import Foundation
import NimbusTestSupport
import Testing

/// Nextcloud's desktop sync engine — Debian's `nextcloudcmd`, the engine of the desktop app — against the real
/// `nimbus serve`: signing in with an app password, a first sync up (chunked for a big file), changes made through
/// `/v1` coming down, a deletion landing in the trash, an edit on both sides, the quota, a server killed mid-upload.
@Suite("Nextcloud's desktop client (nextcloudcmd)", .serialized)
struct NextcloudClientTests {
    static let client = ["/usr/bin/nextcloudcmd", "/usr/local/bin/nextcloudcmd"].first { FileManager.default.isExecutableFile(atPath: $0) }

    @Test("a first sync up (nested, non-ASCII names, a 22 MB file by chunks), changes made through /v1 come down, and a second run changes nothing")
    func upAndDown() async throws {
        let bench = try NextcloudBench()
        let local = try bench.folder("laptop")
        try bench.write("Docs/Ünïcode Földer/naïve café.txt", "grüße", in: local)
        try bench.write("Docs/a.txt", "alpha", in: local)
        try bench.write("Zeta/deep/er/x.txt", "deep", in: local)
        try FileManager.default.createDirectory(at: local.appending(path: "Empty"), withIntermediateDirectories: true)
        let big = try randomBytes(22_000_000)
        try bench.write("Photos/big.bin", big, in: local)

        let first = try bench.sync(local)
        #expect(first.status == 0, "\(first.log.suffix(3000))")
        #expect(first.log.contains("/remote.php/dav/uploads/"), "the big file went by chunks")
        #expect(try bench.dav("GET", "Docs/Ünïcode Földer/naïve café.txt").body == Data("grüße".utf8))
        #expect(try bench.dav("GET", "Photos/big.bin").body == big)
        #expect(try bench.dav("PROPFIND", "Empty/", headers: ["Depth": "0"]).status == 207)

        // Through /v1: a new file, a rename, a deletion.
        let docs = try bench.id(of: "Docs")
        _ = try bench.api("POST", "/v1/upload?uploadType=media&name=from-web.txt&parentId=\(docs)", body: Data("from the web".utf8))
        _ = try bench.api("PATCH", "/v1/files/\(try bench.id(of: "Docs/a.txt"))", json: ["name": "b.txt"])
        _ = try bench.api("DELETE", "/v1/files/\(try bench.id(of: "Zeta/deep/er/x.txt"))")
        let second = try bench.sync(local)
        #expect(second.status == 0, "\(second.log.suffix(3000))")
        #expect(try String(contentsOf: local.appending(path: "Docs/from-web.txt"), encoding: .utf8) == "from the web")
        #expect(try String(contentsOf: local.appending(path: "Docs/b.txt"), encoding: .utf8) == "alpha")
        #expect(!FileManager.default.fileExists(atPath: local.appending(path: "Docs/a.txt").path))
        #expect(!FileManager.default.fileExists(atPath: local.appending(path: "Zeta/deep/er/x.txt").path))

        let third = try bench.sync(local)
        #expect(third.status == 0)
        #expect(!third.log.contains("Completed propagation"), "nothing to do: \(third.log.suffix(3000))")
        #expect(bench.tree(local) == (try bench.serverTree()), "the laptop and the server hold the same tree")
    }

    @Test("a local deletion lands in the trash (restorable over DAV, back on the next run); an edit on both sides keeps both contents, on the laptop and on the server")
    func trashAndConflict() async throws {
        let bench = try NextcloudBench()
        let local = try bench.folder("laptop")
        try bench.write("notes.txt", "keep me", in: local)
        try bench.write("Old/x.txt", "old", in: local)
        try bench.write("v.txt", "first", in: local)
        #expect(try bench.sync(local).status == 0)

        try FileManager.default.removeItem(at: local.appending(path: "notes.txt"))
        try FileManager.default.removeItem(at: local.appending(path: "Old"))
        #expect(try bench.sync(local).status == 0)
        let trashed = try bench.apiJSON("GET", "/v1/trash")["files"] as? [[String: Any]] ?? []
        #expect(Set(trashed.compactMap { $0["name"] as? String }) == ["notes.txt", "Old"], "\(trashed)")
        let listing = try bench.dav("PROPFIND", nil, base: "/remote.php/dav/trashbin/\(bench.user)/trash", headers: ["Depth": "1"]).text
        let entry = try #require(listing.components(separatedBy: "<d:href>").first { $0.contains("/trash/notes.txt.d") }?.prefix { $0 != "<" })
        let restore = bench.server.baseURL + "/remote.php/dav/trashbin/\(bench.user)/restore/x"
        #expect(try bench.dav("MOVE", nil, base: String(entry), headers: ["Destination": restore]).status == 201)
        #expect(try bench.sync(local).status == 0)
        #expect(try String(contentsOf: local.appending(path: "notes.txt"), encoding: .utf8) == "keep me")

        // Both sides change v.txt before the next run.
        try bench.write("v.txt", "edited on the laptop", in: local)
        _ = try bench.api("POST", "/v1/upload?uploadType=media&fileId=\(try bench.id(of: "v.txt"))", body: Data("edited on the web".utf8))
        #expect(try bench.sync(local).status == 0)
        let names = try FileManager.default.contentsOfDirectory(atPath: local.path).filter { $0.hasPrefix("v") }
        let copy = try #require(names.first { $0.contains("conflicted copy") }, "\(names)")
        #expect(try String(contentsOf: local.appending(path: "v.txt"), encoding: .utf8) == "edited on the web")
        #expect(try String(contentsOf: local.appending(path: copy), encoding: .utf8) == "edited on the laptop")
        #expect(try bench.dav("GET", copy).text == "edited on the laptop", "the conflict copy reaches the server too")
        #expect(try bench.dav("GET", "v.txt").text == "edited on the web")
    }

    @Test("a share given as viewer: it comes down; an edit on the laptop stays there as the client's conflicted copy and the server's file stays as it is; a new file is not sent; a third run sends nothing")
    func readOnlyShare() async throws {
        let bench = try NextcloudBench()
        let base = bench.server.baseURL
        _ = try NextcloudBench.curl(["-X", "POST", base + "/v1/auth/register", "-H", "Content-Type: application/json", "-d", #"{"username":"ben","password":"correct horse"}"#])
        let login = try NextcloudBench.curl(["-X", "POST", base + "/v1/auth/login", "-H", "Content-Type: application/json", "-d", #"{"username":"ben","password":"correct horse"}"#])
        let ben = try #require((try JSONSerialization.jsonObject(with: login.body) as? [String: Any])?["accessToken"] as? String)
        func asBen(_ arguments: [String], body: Data? = nil) throws -> NextcloudBench.Reply {
            try NextcloudBench.curl(arguments + ["-H", "Authorization: Bearer \(ben)"], body: body)
        }
        let folder = try JSONSerialization.jsonObject(
            with: try asBen(["-X", "POST", base + "/v1/files", "-H", "Content-Type: application/json", "-d", #"{"name":"Project","mimeType":"application/vnd.nimbus.folder"}"#]).body) as? [String: Any]
        let folderId = try #require(folder?["id"] as? String)
        _ = try asBen(["-X", "POST", base + "/v1/upload?uploadType=media&name=plan.txt&parentId=\(folderId)", "-H", "Content-Type: text/plain"], body: Data("the plan".utf8))
        let granted = try asBen(["-X", "POST", base + "/v1/files/\(folderId)/grants", "-H", "Content-Type: application/json", "-d", #"{"user":"ana","role":"viewer"}"#])
        let grantId = try #require((try JSONSerialization.jsonObject(with: granted.body) as? [String: Any])?["id"] as? String, "\(granted.text)")
        try bench.api("POST", "/v1/shares/incoming/\(grantId)/accept")

        let local = try bench.folder("laptop")
        let first = try bench.sync(local)
        #expect(first.status == 0, "\(first.log.suffix(3000))")
        #expect(try String(contentsOf: local.appending(path: "Project/plan.txt"), encoding: .utf8) == "the plan")

        try bench.write("Project/plan.txt", "ana's edit", in: local)
        try bench.write("Project/new.txt", "ana's file", in: local)
        let second = try bench.sync(local)
        let third = try bench.sync(local)
        let listing = try asBen([base + "/v1/files?parentId=\(folderId)"])
        #expect(!listing.text.contains("new.txt"), "nothing added to the viewer's share: \(listing.text) \(second.log.suffix(2000))")
        let planId = try #require(((try JSONSerialization.jsonObject(with: listing.body) as? [String: Any])?["files"] as? [[String: Any]])?.first?["id"] as? String)
        #expect(try asBen([base + "/v1/files/\(planId)/content"]).text == "the plan", "the owner's file is as it was")
        let revisions = try asBen([base + "/v1/files/\(planId)/revisions"])
        #expect(((try JSONSerialization.jsonObject(with: revisions.body) as? [String: Any])?["revisions"] as? [Any])?.count == 1, "\(revisions.text)")
        // The client keeps the edit as its conflicted copy, whose upload (it sends conflict copies) is refused once and
        // then skipped: the third run sends nothing into the share.
        let names = try FileManager.default.contentsOfDirectory(atPath: local.appending(path: "Project").path)
        let copy = try #require(names.first { $0.contains("conflicted copy") }, "\(names)")
        #expect(try String(contentsOf: local.appending(path: "Project/\(copy)"), encoding: .utf8) == "ana's edit", "nothing lost on the laptop")
        let sent = third.log.split(separator: "\n").filter { $0.contains("PUT") && $0.contains("Project") && !$0.contains("skipped due to earlier error") }
        #expect(sent.isEmpty, "the third run sends nothing into the share: \(sent.joined(separator: "\n").suffix(3000))")
    }

    @Test("a file over the quota is refused with the quota named, nothing lost on the laptop; once space is freed a later run sends it")
    func quota() async throws {
        let bench = try NextcloudBench(serverArguments: ["--default-quota", "30MiB"])
        let local = try bench.folder("laptop")
        // Something stays on the server throughout: with everything there deleted, the client stops to ask whether
        // to delete everything here (a safeguard; nextcloudcmd then waits for an answer).
        try bench.write("keep.txt", "kept", in: local)
        let first = try randomBytes(20_000_000)
        try bench.write("first.bin", first, in: local)
        #expect(try bench.sync(local).status == 0)
        let second = try randomBytes(15_000_000)
        try bench.write("second.bin", second, in: local)
        let refused = try bench.sync(local)
        #expect(refused.status != 0)
        #expect(refused.log.contains("quota"), "\(refused.log.suffix(3000))")
        #expect(try bench.dav("GET", "second.bin").status == 404)
        #expect(try Data(contentsOf: local.appending(path: "second.bin")) == second)

        // Space freed on the server (deleted for good); the client retries once its back-off for the file ends.
        _ = try bench.api("DELETE", "/v1/files/\(try bench.id(of: "first.bin"))?permanent=true")
        let deadline = Date().addingTimeInterval(120)
        var sent = false
        while !sent && Date() < deadline {
            _ = try bench.sync(local)
            sent = try bench.dav("GET", "second.bin").body == second
            if !sent { try await Task.sleep(for: .seconds(3)) }
        }
        #expect(sent, "second.bin reached the server after space was freed")
        #expect(try Data(contentsOf: local.appending(path: "second.bin")) == second)
    }

    @Test("the server killed (kill -9) in the middle of a chunked upload: the next run resumes it from the chunks stored, and the file arrives whole")
    func killedMidUpload() async throws {
        let bench = try NextcloudBench()
        let local = try bench.folder("laptop")
        let big = try randomBytes(60_000_000)
        try bench.write("huge.bin", big, in: local)
        let running = try bench.startSync(local, extra: ["--uplimit", "6000"])
        // Killed once the first chunk is stored (listed in the uploads folder).
        let deadline = Date().addingTimeInterval(90)
        var stored = false
        while !stored && Date() < deadline {
            let uploads = try bench.dav("PROPFIND", nil, base: "/remote.php/dav/uploads/\(bench.user)/", headers: ["Depth": "1"]).text
            if let name = uploads.components(separatedBy: "<d:href>").dropFirst(2).first?.prefix(while: { $0 != "<" }) {
                stored = try bench.dav("PROPFIND", nil, base: String(name), headers: ["Depth": "1"]).text.components(separatedBy: "<d:getcontentlength>").count > 1
            }
            if !stored { try await Task.sleep(for: .milliseconds(100)) }
        }
        #expect(stored, "a chunk was stored")
        bench.server.kill()
        let interrupted = running.finish()
        #expect(interrupted.status != 0, "the first run failed with the server gone")
        try bench.restart()
        let resumed = try bench.sync(local)
        #expect(resumed.status == 0, "\(resumed.log.suffix(3000))")
        #expect(resumed.log.contains("Resuming"), "the upload went on from the chunks stored: \(resumed.log.suffix(3000))")
        #expect(try bench.dav("GET", "huge.bin").body == big)
    }
}

/// Random bytes (from the kernel: fast in a debug build), so nothing deduplicates.
func randomBytes(_ count: Int) throws -> Data {
    let handle = try #require(FileHandle(forReadingAtPath: "/dev/urandom"))
    defer { try? handle.close() }
    return handle.readData(ofLength: count)
}

/// A `nimbus serve` process, a user with an app password, and `nextcloudcmd` runs against it.
final class NextcloudBench: @unchecked Sendable {
    let root: URL
    let data: URL
    let arguments: [String]
    var server: ChildServer
    let user = "ana"
    let password: String
    let token: String

    init(serverArguments: [String] = []) throws {
        _ = try #require(NextcloudClientTests.client, "nextcloudcmd is not installed: apt-get install nextcloud-desktop-cmd")
        root = FileManager.default.temporaryDirectory.appending(path: "nimbus-nc-\(UUID().uuidString)")
        data = root.appending(path: "server")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        arguments = serverArguments
        server = try ChildServer(data: data, arguments: serverArguments)
        let base = server.baseURL
        _ = try Self.curl(["-X", "POST", base + "/v1/auth/register", "-H", "Content-Type: application/json", "-d", #"{"username":"ana","password":"correct horse"}"#])
        let login = try Self.curl(["-X", "POST", base + "/v1/auth/login", "-H", "Content-Type: application/json", "-d", #"{"username":"ana","password":"correct horse"}"#])
        let tokens = try JSONSerialization.jsonObject(with: login.body) as? [String: Any]
        token = try #require(tokens?["accessToken"] as? String, "login: \(login.text)")
        let made = try Self.curl([
            "-X", "POST", base + "/v1/auth/app-passwords", "-H", "Content-Type: application/json", "-H", "Authorization: Bearer \(token)", "-d", #"{"label":"nextcloudcmd"}"#,
        ])
        password = try #require((try JSONSerialization.jsonObject(with: made.body) as? [String: Any])?["password"] as? String, "\(made.text)")
    }

    deinit {
        server.stop()
        try? FileManager.default.removeItem(at: root)
    }

    func folder(_ name: String) throws -> URL {
        let url = root.appending(path: name)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    /// Writes a file, dated a few seconds back: the client leaves alone a file changed in the last moments (it may
    /// still be being written), as it should.
    func write(_ path: String, _ content: Data, in folder: URL) throws {
        let url = folder.appending(path: path)
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        try content.write(to: url)
        try FileManager.default.setAttributes([.modificationDate: Date().addingTimeInterval(-5)], ofItemAtPath: url.path)
    }

    func write(_ path: String, _ text: String, in folder: URL) throws { try write(path, Data(text.utf8), in: folder) }

    /// `nextcloudcmd` over `folder`: its exit status and its log. A run still going after two minutes is killed
    /// (and fails the test), so a client waiting on a question cannot hang the suite.
    func sync(_ folder: URL, extra: [String] = []) throws -> (status: Int32, log: String) {
        let process = try startSync(folder, extra: extra)
        let watchdog = DispatchWorkItem { if process.isRunning { process.signal(SIGKILL) } }
        DispatchQueue.global().asyncAfter(deadline: .now() + 120, execute: watchdog)
        let finished = process.finish()
        watchdog.cancel()
        let log = String(decoding: finished.output + finished.errors, as: UTF8.self)
        #expect(finished.status != 137 && finished.status != -9, "nextcloudcmd ran over two minutes: \(log.suffix(2000))")
        return (finished.status, log)
    }

    func startSync(_ folder: URL, extra: [String] = []) throws -> Spawned {
        let home = root.appending(path: "client-home")
        try FileManager.default.createDirectory(at: home, withIntermediateDirectories: true)
        var environment = ProcessInfo.processInfo.environment
        environment["HOME"] = home.path
        let process = try Spawned(
            try #require(NextcloudClientTests.client),
            ["--non-interactive", "-u", user, "-p", password] + extra + [folder.path, server.baseURL], environment: environment)
        process.closeInput()
        return process
    }

    /// Starts the server again on the same data folder and port (after a `kill -9`).
    func restart() throws {
        server = try ChildServer(data: data, arguments: arguments + ["--port", String(server.port)])
    }

    struct Reply {
        var status: Int
        var body: Data
        var text: String { String(decoding: body, as: UTF8.self) }
    }

    static func curl(_ arguments: [String], body: Data? = nil) throws -> Reply {
        var arguments = ["-s", "-g", "-w", "\n%{http_code}"] + arguments
        if body != nil { arguments += ["--data-binary", "@-"] }
        let run = try Spawned.run("/usr/bin/curl", arguments, input: body)
        var output = run.output
        let newline = output.lastIndex(of: UInt8(ascii: "\n")) ?? output.startIndex
        let status = Int(String(decoding: output[output.index(after: newline)...], as: UTF8.self)) ?? 0
        output = output[..<newline]
        return Reply(status: status, body: Data(output))
    }

    /// A `/v1` call with the user's access token; fails the test on an error status.
    @discardableResult
    func api(_ method: String, _ path: String, json: [String: String]? = nil, body: Data? = nil) throws -> Reply {
        var arguments = ["-X", method, server.baseURL + path, "-H", "Authorization: Bearer \(token)"]
        var payload = body
        if body != nil { arguments += ["-H", "Content-Type: application/octet-stream"] }
        if let json {
            arguments += ["-H", "Content-Type: application/json"]
            payload = try JSONSerialization.data(withJSONObject: json)
        }
        let reply = try Self.curl(arguments, body: payload)
        #expect(reply.status < 300, "\(method) \(path) → \(reply.status) \(reply.text)")
        return reply
    }

    func apiJSON(_ method: String, _ path: String) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: try api(method, path).body) as? [String: Any])
    }

    /// The `/v1` id of the item at `path` (from the root).
    func id(of path: String) throws -> String {
        var parent = "root"
        for name in path.split(separator: "/") {
            let list = try apiJSON("GET", "/v1/files?parentId=\(parent)&limit=1000")["files"] as? [[String: Any]] ?? []
            parent = try #require(list.first { $0["name"] as? String == String(name) }?["id"] as? String, "no \(name) in \(path)")
        }
        return parent
    }

    /// A WebDAV request with the app password, at `path` under the user's files (or at `base`, a whole path).
    func dav(_ method: String, _ path: String?, base: String? = nil, headers: [String: String] = [:], body: Data? = nil) throws -> Reply {
        let target: String
        if let base {
            target = base.hasPrefix("http") ? base : server.baseURL + base
        } else {
            let encoded = (path ?? "").split(separator: "/", omittingEmptySubsequences: false).map {
                String($0).addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(["-", ".", "_", "~"])) ?? String($0)
            }.joined(separator: "/")
            target = server.baseURL + "/remote.php/dav/files/\(user)/" + encoded
        }
        var arguments = ["-X", method, target, "-u", "\(user):\(password)"]
        for (name, value) in headers { arguments += ["-H", "\(name): \(value)"] }
        return try Self.curl(arguments, body: body)
    }

    func dav(_ method: String, _ path: String, headers: [String: String] = [:]) throws -> Reply { try dav(method, path, base: nil, headers: headers) }

    /// path → SHA-256 (or "dir") of what the laptop holds, the client's own files left out.
    func tree(_ folder: URL) -> [String: String] {
        var result: [String: String] = [:]
        let enumerator = FileManager.default.enumerator(at: folder, includingPropertiesForKeys: [.isDirectoryKey])
        while let url = enumerator?.nextObject() as? URL {
            let relative = String(url.standardizedFileURL.path.dropFirst(folder.standardizedFileURL.path.count + 1))
            if relative.hasPrefix(".sync_") || relative.hasPrefix(".nextcloudsync") || relative.hasPrefix("._sync") || relative == ".owncloudsync.log" { continue }
            if (try? url.resourceValues(forKeys: [.isDirectoryKey]).isDirectory) == true {
                result[relative] = "dir"
            } else if let content = try? Data(contentsOf: url) {
                result[relative] = SHA256.hash(data: content).map { String(format: "%02x", $0) }.joined()
            }
        }
        return result
    }

    /// The same for the user's tree on the server (by `/v1`, checksums as stored).
    func serverTree() throws -> [String: String] {
        var result: [String: String] = [:]
        var pending: [(id: String, path: String)] = [("root", "")]
        while let (id, path) = pending.popLast() {
            for item in try apiJSON("GET", "/v1/files?parentId=\(id)&limit=1000")["files"] as? [[String: Any]] ?? [] {
                guard let name = item["name"] as? String, let itemId = item["id"] as? String else { continue }
                let itemPath = path.isEmpty ? name : path + "/" + name
                if item["mimeType"] as? String == "application/vnd.nimbus.folder" {
                    result[itemPath] = "dir"
                    pending.append((itemId, itemPath))
                } else {
                    result[itemPath] = item["checksum"] as? String ?? ""
                }
            }
        }
        return result
    }
}
