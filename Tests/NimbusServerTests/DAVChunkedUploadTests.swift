import Foundation
import NIOHTTP1
import NimbusAPI
@testable import NimbusServer
import NimbusTestSupport
import Testing

/// Nextcloud's layout (`/remote.php/dav/files/USER/`) and its chunked uploads (`/remote.php/dav/uploads/USER/`).
@Suite("WebDAV chunked uploads (Nextcloud's)")
struct DAVChunkedUploadTests {
    static func used(_ api: APIClient) async throws -> Int64 {
        let about: About = try await api.get("/v1/about").decode()
        return about.quota.used
    }

    @Test("the user's tree at /remote.php/dav/files/USER/ (hrefs under it); another user's path is 404; MOVE takes a /dav/ destination too")
    func nextcloudLayout() async throws {
        try await TestServer.run { server in
            let name = "nc" + UUID().uuidString.prefix(6).lowercased()
            let (api, basic) = try await DAVTests.user(server, name)
            let dav = DAVClient(server, basic: basic)
            let base = "/remote.php/dav/files/\(name)"
            #expect(try await dav.send(.MKCOL, "\(base)/Docs").status == 201)
            #expect(try await dav.send(.PUT, "\(base)/Docs/a.txt", "alpha").status == 201)
            let listed = try await dav.send(.PROPFIND, "\(base)/Docs/", nil, ["Depth": "1"])
            #expect(listed.status == 207)
            #expect(listed.text.contains("<d:href>\(base)/Docs/a.txt</d:href>"), "\(listed.text)")
            #expect(try await dav.send(.GET, "/dav/Docs/a.txt").text == "alpha", "the same tree as /dav/")
            #expect(try await dav.send(.GET, "/remote.php/webdav/Docs/a.txt").text == "alpha", "and as Nextcloud's older /remote.php/webdav/")
            let moved = try await dav.send(.MOVE, "\(base)/Docs/a.txt", nil, ["Destination": "\(server.baseURL)/dav/Docs/b.txt"])
            #expect(moved.status == 201, "\(moved.text)")
            #expect(try await dav.send(.GET, "\(base)/Docs/b.txt").text == "alpha")
            let other = "other" + UUID().uuidString.prefix(6).lowercased()
            let otherDAV = DAVClient(server, basic: try await DAVTests.user(server, other).basic)
            #expect(try await dav.send(.PROPFIND, "/remote.php/dav/files/\(other)/", nil, ["Depth": "0"]).status == 404)
            #expect(try await dav.send(.PROPFIND, "/remote.php/dav/uploads/\(other)/", nil, ["Depth": "0"]).status == 404)
            #expect(try await dav.send(.PUT, "/remote.php/dav/files/\(other)/x.txt", "x").status == 404)
            #expect(try await otherDAV.send(.GET, "/remote.php/dav/files/\(other)/x.txt").status == 404, "nothing written in the other's tree")
            #expect(try await otherDAV.send(.GET, "/dav/Docs/b.txt").status == 404, "nor read from it")
            #expect(try await api.send(.GET, "/v1/about").status == 200)
        }
    }

    @Test("chunks in any order, one sent again, listed while waiting, assembled by MOVE …/.file; a wrong total, Overwrite F and a stale If-Match change nothing")
    func protocolByHand() async throws {
        try await TestServer.run { server in
            let name = "ch" + UUID().uuidString.prefix(6).lowercased()
            let (api, basic) = try await DAVTests.user(server, name)
            let dav = DAVClient(server, basic: basic)
            let uploads = "/remote.php/dav/uploads/\(name)"
            let files = "\(server.baseURL)/remote.php/dav/files/\(name)"
            let one = randomData(700_000), two = randomData(300_000)
            #expect(try await dav.send(.PUT, "\(uploads)/u1/1", one).status == 409, "no upload started")
            #expect(try await dav.send(.MKCOL, "\(uploads)/u1", nil, ["Destination": "\(files)/big.bin"]).status == 201)
            #expect(try await dav.send(.MKCOL, "\(uploads)/u1").status == 405, "started already")
            #expect(try await dav.send(.PUT, "\(uploads)/u1/two", two).status == 400, "a chunk is named by a number")
            #expect(try await dav.send(.PUT, "\(uploads)/u1/2", two, ["OC-Total-Length": "1000000"]).status == 201)
            #expect(try await dav.send(.PUT, "\(uploads)/u1/1", randomData(10), ["OC-Total-Length": "1000000"]).status == 201)
            #expect(try await dav.send(.PUT, "\(uploads)/u1/1", one, ["OC-Total-Length": "1000000"]).status == 204, "sent again: replaced")
            #expect(try await Self.used(api) == 1_000_000, "waiting chunks count in the quota, the replaced one no more")
            let listed = try await dav.send(.PROPFIND, "\(uploads)/u1/", nil, ["Depth": "1"])
            #expect(listed.status == 207)
            #expect(listed.text.contains("\(uploads)/u1/1</d:href>") && listed.text.contains("<d:getcontentlength>700000<"), "\(listed.text)")
            #expect(listed.text.contains("\(uploads)/u1/2</d:href>") && listed.text.contains("<d:getcontentlength>300000<"), "\(listed.text)")
            #expect(try await dav.send(.PROPFIND, "\(uploads)/", nil, ["Depth": "1"]).text.contains("\(uploads)/u1/</d:href>"))
            #expect(try await dav.send(.GET, "\(uploads)/u1/1").status == 405, "chunks are not read back")

            let wrongTotal = try await dav.send(.MOVE, "\(uploads)/u1/.file", nil, ["Destination": "\(files)/big.bin", "OC-Total-Length": "999999"])
            #expect(wrongTotal.status == 400)
            #expect(try await dav.send(.GET, "/dav/big.bin").status == 404, "nothing made")
            let done = try await dav.send(
                .MOVE, "\(uploads)/u1/.file", nil, ["Destination": "\(files)/big.bin", "OC-Total-Length": "1000000", "X-OC-Mtime": "1577934245"])
            #expect(done.status == 201, "\(done.text)")
            let got = try await dav.send(.GET, "/dav/big.bin")
            #expect(got.body == one + two)
            #expect(done.header("ETag") == got.header("ETag") && done.header("OC-FileId") != nil)
            let list: FileList = try await api.get("/v1/files?parentId=root").decode()
            let file = try #require(list.files.first { $0.name == "big.bin" })
            #expect(done.header("OC-FileId") == NextcloudIDs.ocId(of: file.id), "OC-FileId is the item's oc:id")
            #expect(file.checksum == sha256(one + two) && file.size == 1_000_000)
            #expect(file.modifiedAt == Date(timeIntervalSince1970: 1_577_934_245), "X-OC-Mtime kept")
            #expect(try await dav.send(.PROPFIND, "\(uploads)/u1/", nil, ["Depth": "0"]).status == 404, "the upload is gone with the MOVE")
            #expect(try await Self.used(api) == 1_000_000, "the file holds the chunks' bytes: counted once")

            // A second upload onto the same file: Overwrite F and a stale If-Match refuse and keep the upload.
            #expect(try await dav.send(.MKCOL, "\(uploads)/u2").status == 201)
            let three = randomData(200_000)
            #expect(try await dav.send(.PUT, "\(uploads)/u2/000000000000000-000000000199999", three).status == 201, "the older naming by byte range")
            #expect(try await dav.send(.MOVE, "\(uploads)/u2/.file", nil, ["Destination": "\(files)/big.bin", "Overwrite": "F"]).status == 412)
            #expect(try await dav.send(.MOVE, "\(uploads)/u2/.file", nil, ["Destination": "\(files)/big.bin", "If-Match": "\"stale\""]).status == 412)
            #expect(try await dav.send(.GET, "/dav/big.bin").body == one + two)
            let version = try await dav.send(
                .MOVE, "\(uploads)/u2/.file", nil, ["Destination": "\(files)/big.bin", "If-Match": try #require(got.header("ETag"))])
            #expect(version.status == 204, "\(version.text)")
            #expect(try await dav.send(.GET, "/dav/big.bin").body == three)
            let revisions: RevisionList = try await api.get("/v1/files/\(file.id)/revisions").decode()
            #expect(revisions.revisions.count == 2, "a new revision; history keeps the first")

            // Dropped: its bytes leave the quota at once.
            #expect(try await dav.send(.MKCOL, "\(uploads)/u3").status == 201)
            #expect(try await dav.send(.PUT, "\(uploads)/u3/1", randomData(50_000)).status == 201)
            let before = try await Self.used(api)
            #expect(try await dav.send(.DELETE, "\(uploads)/u3/").status == 204)
            #expect(try await Self.used(api) == before - 50_000)
            #expect(try await dav.send(.DELETE, "\(uploads)/u3/").status == 404)
        }
    }

    @Test("OC-Total-Length over the quota or the size limit is refused before a byte is stored (507, 413); an upload untouched for a day expires")
    func limitsAndExpiry() async throws {
        try await TestServer.run(configure: { $0.defaultQuota = 1_000_000 }) { server in
            let name = "lim" + UUID().uuidString.prefix(6).lowercased()
            let (api, basic) = try await DAVTests.user(server, name)
            let dav = DAVClient(server, basic: basic)
            let uploads = "/remote.php/dav/uploads/\(name)"
            #expect(try await dav.send(.MKCOL, "\(uploads)/big").status == 201)
            #expect(try await dav.send(.PUT, "\(uploads)/big/1", randomData(1000), ["OC-Total-Length": "1000001"]).status == 507)
            #expect(try await dav.send(.PUT, "\(uploads)/big/1", randomData(1000), ["OC-Total-Length": "\(11 << 30)"]).status == 413)
            #expect(try await Self.used(api) == 0)
            #expect(try await dav.send(.PUT, "\(uploads)/big/1", randomData(600_000), ["OC-Total-Length": "900000"]).status == 201)
            #expect(try await dav.send(.PUT, "\(uploads)/big/2", randomData(300_000), ["OC-Total-Length": "900000"]).status == 201, "its own chunks are not counted twice")
            #expect(try await Self.used(api) == 900_000)
            server.clock.advance(by: 24 * 3600 + 1)
            await server.parts.runMaintenance()
            let later = try await server.logIn(name)
            #expect(try await Self.used(later) == 0, "expired: its bytes freed")
            #expect(try await dav.send(.PROPFIND, "\(uploads)/big/", nil, ["Depth": "0"]).status == 404)
        }
    }

    @Test("rclone's Nextcloud backend (--webdav-vendor nextcloud) sends a big file in chunks: identical, and no upload left behind")
    func rcloneChunked() async throws {
        try await TestServer.run { server in
            let name = "rcnc" + UUID().uuidString.prefix(6).lowercased()
            let (_, password) = try await DAVTests.appUser(server, name)
            let work = FileManager.default.temporaryDirectory.appending(path: "rclone-nc-\(UUID().uuidString)")
            defer { try? FileManager.default.removeItem(at: work) }
            let up = work.appending(path: "up")
            try FileManager.default.createDirectory(at: up, withIntermediateDirectories: true)
            let big = randomData(5_500_000)
            try big.write(to: up.appending(path: "big.bin"))
            try Data("small".utf8).write(to: up.appending(path: "small.txt"))
            let obscured = try await DAVTests.rclone(["obscure", password], in: work).output.trimmingCharacters(in: .whitespacesAndNewlines)
            let remote = ":webdav,url='\(server.baseURL)/remote.php/dav/files/\(name)/',vendor=nextcloud,nextcloud_chunk_size=1Mi,user=\(name),pass='\(obscured)':"
            let copied = try await DAVTests.rclone(["copy", "up", remote + "tree", "-vv"], in: work)
            #expect(copied.status == 0, "\(copied.output)")
            #expect(copied.output.contains("/remote.php/dav/uploads/\(name)/"), "rclone sent it in chunks: \(copied.output.suffix(3000))")
            let checked = try await DAVTests.rclone(["check", "up", remote + "tree"], in: work)
            #expect(checked.status == 0 && checked.output.contains("0 differences found"), "\(checked.output)")
            let basic = "Basic " + Data("\(name):\(password)".utf8).base64EncodedString()
            #expect(try await DAVClient(server, basic: basic).send(.GET, "/dav/tree/big.bin").body == big)
            let left = try await DAVClient(server, basic: basic).send(.PROPFIND, "/remote.php/dav/uploads/\(name)/", nil, ["Depth": "1"])
            #expect(left.status == 207 && left.text.components(separatedBy: "<d:response>").count == 2, "only the uploads folder itself: \(left.text)")
        }
    }
}
