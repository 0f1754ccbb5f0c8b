import AsyncHTTPClient
import Foundation
import HummingbirdWSClient
import Logging
import NIOCore
import NIOHTTP1
import NimbusAPI
@testable import NimbusServer
import NimbusTestSupport
import Testing

#if canImport(FoundationXML)
import FoundationXML
#endif

/// The routes and shapes Nextcloud's apps rely on, against Nextcloud's documented answers: `status.php`, OCS, the
/// DAV properties and headers, `OC-Checksum`, the trash bin and versions over DAV, previews, the login flows and
/// notify_push. (The real desktop client, `nextcloudcmd`, drives the same server in `NextcloudClientTests`.)
@Suite("Nextcloud's apps: protocol")
struct NextcloudTests {
    /// A user with an app password: the API client, the DAV client and the user name.
    static func user(_ server: TestServer, _ prefix: String) async throws -> (api: APIClient, dav: DAVClient, name: String, password: String) {
        let name = prefix + UUID().uuidString.prefix(6).lowercased()
        let (api, password) = try await DAVTests.appUser(server, name)
        return (api, DAVClient(server, basic: "Basic " + Data("\(name):\(password)".utf8).base64EncodedString()), name, password)
    }

    static func json(_ reply: APIClient.Reply) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: reply.body) as? [String: Any], "not a JSON object: \(reply.text)")
    }

    /// `ocs.meta` and `ocs.data` of a JSON OCS answer.
    static func ocs(_ reply: APIClient.Reply) throws -> (meta: [String: Any], data: Any?) {
        let ocs = try #require(try json(reply)["ocs"] as? [String: Any], "no ocs envelope: \(reply.text)")
        return (try #require(ocs["meta"] as? [String: Any]), ocs["data"])
    }

    @Test("status.php and OCS answer as Nextcloud does: the envelope, v1 and v2 status codes, XML and JSON; capabilities without signing in; app passwords only")
    func statusAndOCS() async throws {
        try await TestServer.run(configure: { $0.defaultQuota = 10_000_000 }) { server in
            let (api, dav, name, password) = try await Self.user(server, "ocs")
            let anonymous = APIClient(baseURL: server.baseURL)
            let status = try Self.json(try await anonymous.get("/status.php"))
            #expect(status["installed"] as? Bool == true && status["maintenance"] as? Bool == false && status["needsDbUpgrade"] as? Bool == false)
            #expect((status["version"] as? String)?.hasPrefix("28.0.0") == true && status["productname"] as? String == "Nimbus")

            // Capabilities: public, XML by default, JSON on request; v1 says 100, v2 200.
            let xml = try await anonymous.get("/ocs/v1.php/cloud/capabilities")
            #expect(xml.status == 200 && xml.header("Content-Type")?.contains("xml") == true)
            #expect(xml.text.contains("<statuscode>100</statuscode>") && xml.text.contains("<chunking>1.0</chunking>"), "\(xml.text)")
            let v2 = try Self.ocs(try await anonymous.get("/ocs/v2.php/cloud/capabilities?format=json"))
            #expect(v2.meta["statuscode"] as? Int == 200 && v2.meta["status"] as? String == "ok")
            let byAccept = try Self.ocs(try await anonymous.get("/ocs/v1.php/cloud/capabilities", headers: ["Accept": "application/json"]))
            #expect(byAccept.meta["statuscode"] as? Int == 100)
            let capabilities = try #require((v2.data as? [String: Any])?["capabilities"] as? [String: Any])
            #expect((capabilities["dav"] as? [String: Any])?["chunking"] as? String == "1.0")
            let files = try #require(capabilities["files"] as? [String: Any])
            #expect(files["versioning"] as? Bool == true && files["undelete"] as? Bool == true && files["bigfilechunking"] as? Bool == true)
            let checksums = try #require(capabilities["checksums"] as? [String: Any])
            #expect(checksums["preferredUploadType"] as? String == "SHA256" && checksums["supportedTypes"] as? [String] == ["SHA256"])
            let push = try #require(capabilities["notify_push"] as? [String: Any])
            #expect((push["endpoints"] as? [String: Any])?["websocket"] as? String == "ws://127.0.0.1:\(server.port)/push/ws")
            #expect(capabilities["end-to-end-encryption"] == nil, "nothing this server does not do is promised")
            let sharing = try #require(capabilities["files_sharing"] as? [String: Any])
            #expect(sharing["api_enabled"] as? Bool == true && sharing["group_sharing"] as? Bool == false, "people and links; no groups")

            // The user: not signed in → 401/997 on both versions; the account password is refused too.
            for version in ["v1", "v2"] {
                let none = try await anonymous.get("/ocs/\(version).php/cloud/user?format=json", headers: ["OCS-APIRequest": "true"])
                let noneCode = try Self.ocs(none).meta["statuscode"] as? Int
                #expect(none.status == 401 && noneCode == 997, "\(none.status) \(none.text)")
                let account = "Basic " + Data("\(name):correct horse".utf8).base64EncodedString()
                let refused = try await anonymous.get("/ocs/\(version).php/cloud/user?format=json", headers: ["Authorization": account, "OCS-APIRequest": "true"])
                #expect(refused.status == 401, "the account password is not taken here")
            }
            let me = try Self.ocs(try await dav.send(.GET, "/ocs/v2.php/cloud/user?format=json", nil, ["OCS-APIRequest": "true"]))
            let data = try #require(me.data as? [String: Any])
            #expect(data["id"] as? String == name && data["display-name"] as? String == name)
            let quota = try #require(data["quota"] as? [String: Any])
            #expect(quota["quota"] as? Int == 10_000_000 && quota["used"] as? Int == 0 && quota["free"] as? Int == 10_000_000)
            let meXML = try await dav.send(.GET, "/ocs/v1.php/cloud/user")
            #expect(meXML.text.contains("<id>\(name)</id>") && meXML.text.contains("<statuscode>100</statuscode>"), "\(meXML.text)")
            let byId = try Self.ocs(try await dav.send(.GET, "/ocs/v1.php/cloud/users/\(name)?format=json"))
            #expect((byId.data as? [String: Any])?["id"] as? String == name)

            // Another user, an unknown route: v1 says 998 with HTTP 200, v2 puts 404 on the answer too.
            let otherV1 = try await dav.send(.GET, "/ocs/v1.php/cloud/users/nobody?format=json")
            let otherV1Code = try Self.ocs(otherV1).meta["statuscode"] as? Int
            #expect(otherV1.status == 200 && otherV1Code == 998)
            let otherV2 = try await dav.send(.GET, "/ocs/v2.php/cloud/users/nobody?format=json")
            let otherV2Code = try Self.ocs(otherV2).meta["statuscode"] as? Int
            #expect(otherV2.status == 404 && otherV2Code == 998)
            #expect(try await dav.send(.GET, "/ocs/v2.php/apps/nothing/here?format=json").status == 404)
            #expect(try await dav.send(.GET, "/ocs/v2.php/core/getapppassword?format=json").status == 403, "signed in with an app password already")

            // An app signing out gives its app password back: it no longer works anywhere.
            #expect(try await dav.send(.DELETE, "/ocs/v2.php/core/apppassword?format=json").status == 200)
            #expect(try await dav.send(.PROPFIND, "/remote.php/dav/files/\(name)/", nil, ["Depth": "0"]).status == 401)
            let list: AppPasswordList = try await api.get("/v1/auth/app-passwords").decode()
            #expect(list.appPasswords.isEmpty, "revoked: \(password.prefix(3))…")
        }
    }

    /// PROPFIND `path` (Depth 1) for Nextcloud's properties: href → property (`oc:fileid`, `d:getetag`…) → text.
    static func properties(_ dav: DAVClient, _ path: String, depth: String = "1") async throws -> [String: [String: String]] {
        let ask = """
            <?xml version="1.0"?><d:propfind xmlns:d="DAV:" xmlns:oc="http://owncloud.org/ns" xmlns:nc="http://nextcloud.org/ns"><d:prop>
            <d:getetag/><d:getlastmodified/><d:resourcetype/><oc:fileid/><oc:id/><oc:permissions/><oc:size/><oc:checksums/>
            <oc:data-fingerprint/><oc:downloadURL/><oc:share-types/><nc:has-preview/><nc:is-encrypted/><oc:owner-id/>
            <nc:trashbin-filename/><nc:trashbin-original-location/><nc:trashbin-deletion-time/><d:getcontentlength/>
            </d:prop></d:propfind>
            """
        let reply = try await dav.send(.PROPFIND, path, ask, ["Depth": depth])
        #expect(reply.status == 207, "PROPFIND \(path): \(reply.status) \(reply.text)")
        return MultiStatus.parse(reply.body)
    }

    @Test("Nextcloud's properties: a numeric oc:fileid and oc:id stable across renames, moves and the trash; permissions; a folder's oc:size; checksums; d:, oc: and nc: prefixes; OC-FileId and OC-ETag")
    func properties() async throws {
        try await TestServer.run { server in
            let (api, dav, name, _) = try await Self.user(server, "props")
            let base = "/remote.php/dav/files/\(name)"
            let made = try await dav.send(.MKCOL, "\(base)/A")
            #expect(made.status == 201 && made.header("OC-FileId")?.hasSuffix("ocnimbus") == true, "MKCOL answers the folder's oc:id")
            #expect(try await dav.send(.MKCOL, "\(base)/A/B").status == 201)
            let put = try await dav.send(.PUT, "\(base)/A/B/f.txt", "0123456789")
            #expect(put.status == 201 && put.header("OC-ETag") == put.header("ETag") && put.header("OC-ETag") != nil)
            #expect(try await dav.send(.PUT, "\(base)/A/g.txt", "abcde").status == 201)

            let raw = try await dav.send(.PROPFIND, "\(base)/A/", Data(#"<d:propfind xmlns:d="DAV:" xmlns:oc="http://owncloud.org/ns"><d:prop><oc:fileid/></d:prop></d:propfind>"#.utf8), ["Depth": "1"])
            #expect(raw.text.contains("<d:multistatus") && raw.text.contains("xmlns:oc=\"http://owncloud.org/ns\"") && raw.text.contains("<oc:fileid>"),
                "the prefixes Nextcloud writes (its iOS library reads elements by them): \(raw.text)")

            let listed = try await Self.properties(dav, "\(base)/A/")
            let folder = try #require(listed["\(base)/A/"])
            let sub = try #require(listed["\(base)/A/B/"])
            let g = try #require(listed["\(base)/A/g.txt"])
            #expect(folder["oc:size"] == "15" && sub["oc:size"] == "10" && g["oc:size"] == "5", "a folder's size is its content's: \(listed)")
            #expect(folder["oc:permissions"] == "RGDNVCK" && g["oc:permissions"] == "RGDNVW", "\(listed)")
            #expect(g["oc:checksums"] == "SHA256:" + sha256(Data("abcde".utf8)), "\(g)")
            #expect(g["nc:has-preview"] == "false" && g["nc:is-encrypted"] == "0" && g["oc:owner-id"] == name)
            #expect(g["oc:data-fingerprint"] == "" && g["oc:downloadURL"] == "" && g["oc:share-types"] == "", "present and empty: \(g)")
            let root = try #require(try await Self.properties(dav, "\(base)/", depth: "0")["\(base)/"])
            #expect(root["oc:permissions"] == "GCK", "the root cannot be deleted, renamed or moved")

            let deep = try await Self.properties(dav, "\(base)/A/B/")
            let f = try #require(deep["\(base)/A/B/f.txt"])
            let fileid = try #require(f["oc:fileid"])
            let number = try #require(Int64(fileid), "oc:fileid is a number: \(fileid)")
            #expect(number > 0 && f["oc:id"]?.hasPrefix(fileid) == true && f["oc:id"]?.hasSuffix("ocnimbus") == true, "\(f)")
            #expect(put.header("OC-FileId") == f["oc:id"], "OC-FileId is the oc:id")

            // Renamed, moved, trashed and restored: the same numbers.
            #expect(try await dav.send(.MOVE, "\(base)/A/B/f.txt", nil, ["Destination": server.baseURL + "\(base)/A/h.txt"]).status == 201)
            #expect(try await Self.properties(dav, "\(base)/A/h.txt", depth: "0")["\(base)/A/h.txt"]?["oc:fileid"] == fileid)
            let moved = try #require(try await api.list(try await api.list().files.first { $0.name == "A" }?.id).files.first { $0.name == "h.txt" })
            #expect(try await api.send(.PATCH, "/v1/files/\(moved.id)", json: UpdateFileRequest(name: "i.txt")).status == 200)
            #expect(try await api.send(.DELETE, "/v1/files/\(moved.id)").status == 204)
            #expect(try await api.send(.POST, "/v1/files/\(moved.id)/untrash").status == 200)
            #expect(try await Self.properties(dav, "\(base)/A/i.txt", depth: "0")["\(base)/A/i.txt"]?["oc:id"] == f["oc:id"])
            #expect(NextcloudIDs.idPrefix(of: number).map { moved.id.hasPrefix($0) } == true, "the number is read from the item's id")

            // A folder's ETag moves with a change beneath it; /dav/ keeps answering the item's id as oc:fileid.
            let before = try await Self.properties(dav, "\(base)/A/", depth: "0")["\(base)/A/"]?["d:getetag"]
            #expect(try await dav.send(.PUT, "\(base)/A/B/new.txt", "n").status == 201)
            #expect(try await Self.properties(dav, "\(base)/A/", depth: "0")["\(base)/A/"]?["d:getetag"] != before)
            #expect(try await Self.properties(dav, "/dav/A/i.txt", depth: "0")["/dav/A/i.txt"]?["oc:fileid"] == moved.id)
        }
    }

    @Test("OC-Checksum: a PUT or a chunked upload whose SHA256 does not match is refused (400, Sabre's error body) and stores nothing; a matching one is kept; other types are not checked")
    func checksums() async throws {
        try await TestServer.run { server in
            let (_, dav, name, _) = try await Self.user(server, "sum")
            let base = "/remote.php/dav/files/\(name)"
            let content = Data("the content".utf8)
            let wrong = "SHA256:" + sha256(Data("something else".utf8))
            let refused = try await dav.send(.PUT, "\(base)/a.txt", content, ["OC-Checksum": wrong])
            #expect(refused.status == 400 && refused.text.contains("<s:message>") && refused.text.contains("checksum"), "\(refused.text)")
            #expect(try await dav.send(.GET, "\(base)/a.txt").status == 404, "nothing stored")
            #expect(try await dav.send(.PUT, "\(base)/a.txt", content, ["OC-Checksum": "SHA256:" + sha256(content).uppercased()]).status == 201)
            #expect(try await dav.send(.PUT, "\(base)/a.txt", Data("changed".utf8), ["OC-Checksum": wrong]).status == 400)
            #expect(try await dav.send(.GET, "\(base)/a.txt").body == content, "the file keeps its content")
            #expect(try await dav.send(.PUT, "\(base)/b.txt", content, ["OC-Checksum": "SHA1:0000"]).status == 201, "SHA1 is not announced, so not checked")
            #expect(try await dav.send(.PUT, "\(base)/c.txt", content, ["OC-Checksum": "SHA256:xyz"]).status == 400, "a malformed SHA256 is an error")

            // Chunked (v2): the final MOVE checks the whole file; the desktop app's If header (an ETag on the
            // destination, tagged with its URL) holds or is a 412.
            let uploads = "/remote.php/dav/uploads/\(name)"
            let big = randomData(300_000)
            let destination = server.baseURL + "\(base)/big.bin"
            #expect(try await dav.send(.MKCOL, "\(uploads)/t1", nil, ["Destination": destination]).status == 201)
            #expect(try await dav.send(.PUT, "\(uploads)/t1/00001", big.prefix(200_000), ["Destination": destination]).status == 201)
            #expect(try await dav.send(.PUT, "\(uploads)/t1/00002", big.dropFirst(200_000), ["Destination": destination]).status == 201)
            let bad = try await dav.send(.MOVE, "\(uploads)/t1/.file", nil, ["Destination": destination, "OC-Checksum": wrong, "OC-Total-Length": "300000"])
            #expect(bad.status == 400 && bad.text.contains("checksum"))
            #expect(try await dav.send(.GET, "\(base)/big.bin").status == 404)
            let good = try await dav.send(
                .MOVE, "\(uploads)/t1/.file", nil, ["Destination": destination, "OC-Checksum": "SHA256:" + sha256(big), "OC-Total-Length": "300000"])
            #expect(good.status == 201 && good.header("OC-FileId")?.hasSuffix("ocnimbus") == true, "\(good.text)")
            #expect(try await dav.send(.GET, "\(base)/big.bin").body == big)

            let etag = try #require(good.header("ETag"))
            #expect(try await dav.send(.MKCOL, "\(uploads)/t2").status == 201)
            #expect(try await dav.send(.PUT, "\(uploads)/t2/00001", Data("v2".utf8)).status == 201)
            let stale = try await dav.send(.MOVE, "\(uploads)/t2/.file", nil, ["Destination": destination, "If": "<\(destination)> ([\"nope\"])"])
            #expect(stale.status == 412, "\(stale.text)")
            let current = try await dav.send(.MOVE, "\(uploads)/t2/.file", nil, ["Destination": destination, "If": "<\(destination)> ([\(etag)])"])
            #expect(current.status == 204, "\(current.text)")
            #expect(try await dav.send(.GET, "\(base)/big.bin").text == "v2")
        }
    }

    @Test("the trash bin over DAV: deleted items with their name, original location and deletion time; a deleted folder's content; MOVE to restore/ puts back; DELETE deletes one, or all")
    func trashbin() async throws {
        try await TestServer.run { server in
            let (api, dav, name, _) = try await Self.user(server, "trash")
            let base = "/remote.php/dav/files/\(name)"
            let trash = "/remote.php/dav/trashbin/\(name)/trash"
            #expect(try await dav.send(.MKCOL, "\(base)/Docs").status == 201)
            #expect(try await dav.send(.MKCOL, "\(base)/Docs/Old").status == 201)
            #expect(try await dav.send(.PUT, "\(base)/Docs/Old/x.txt", "xx").status == 201)
            #expect(try await dav.send(.PUT, "\(base)/Docs/report.pdf", "pdf").status == 201)
            #expect(try await dav.send(.PUT, "\(base)/note.txt", "note").status == 201)
            #expect(try await dav.send(.DELETE, "\(base)/Docs/report.pdf").status == 204)
            #expect(try await dav.send(.DELETE, "\(base)/Docs/Old").status == 204)
            #expect(try await dav.send(.DELETE, "\(base)/note.txt").status == 204)

            let listed = try await Self.properties(dav, trash)
            let entries = listed.filter { $0.key != trash + "/" }
            #expect(entries.count == 3, "\(listed)")
            let report = try #require(entries.first { $0.value["nc:trashbin-filename"] == "report.pdf" })
            #expect(report.value["nc:trashbin-original-location"] == "Docs/report.pdf", "\(report)")
            let deleted = try #require(Int64(report.value["nc:trashbin-deletion-time"] ?? ""))
            #expect(abs(Double(deleted) - server.clock.now().timeIntervalSince1970) < 5)
            #expect(report.key.hasPrefix("\(trash)/report.pdf.d"), "Nextcloud's NAME.dSECONDS: \(report.key)")
            let old = try #require(entries.first { $0.value["nc:trashbin-filename"] == "Old" })
            #expect(old.value["oc:size"] == "2")
            let inside = try await Self.properties(dav, old.key)
            #expect(inside.keys.contains(old.key + "x.txt"), "a deleted folder lists what went with it: \(inside)")
            #expect(try await dav.send(.GET, old.key + "x.txt").text == "xx", "a deleted file can be read")

            // Restore one, delete one for good, then empty the rest.
            let restore = server.baseURL + "/remote.php/dav/trashbin/\(name)/restore/" + String(report.key.split(separator: "/").last!)
            #expect(try await dav.send(.MOVE, report.key, nil, ["Destination": restore]).status == 201)
            #expect(try await dav.send(.GET, "\(base)/Docs/report.pdf").text == "pdf", "back where it was")
            let note = try #require(entries.first { $0.value["nc:trashbin-filename"] == "note.txt" })
            #expect(try await dav.send(.DELETE, note.key).status == 204)
            let trashed: FileList = try await api.get("/v1/trash").decode()
            #expect(trashed.files.map(\.name) == ["Old"], "the same trash as /v1: \(trashed.files.map(\.name))")
            #expect(try await dav.send(.MOVE, note.key, nil, ["Destination": restore]).status == 404)
            #expect(try await dav.send(.DELETE, trash).status == 204)
            #expect(try await api.get("/v1/trash").decode(FileList.self).files.isEmpty)
            #expect(try await dav.send(.PUT, trash + "/x", "x").status == 405)
        }
    }

    @Test("versions over DAV: a file's earlier versions by its oc:fileid; GET reads one; MOVE to restore/target makes it current (history keeps the replaced one); another user's id is 404")
    func versions() async throws {
        try await TestServer.run { server in
            let (_, dav, name, _) = try await Self.user(server, "ver")
            let (_, otherDAV, other, _) = try await Self.user(server, "oth")
            let base = "/remote.php/dav/files/\(name)"
            for text in ["one", "two", "three"] { #expect(try await dav.send(.PUT, "\(base)/v.txt", text).status < 300) }
            let fileid = try #require(try await Self.properties(dav, "\(base)/v.txt", depth: "0")["\(base)/v.txt"]?["oc:fileid"])
            let versions = "/remote.php/dav/versions/\(name)/versions/\(fileid)"
            let listed = try await Self.properties(dav, versions)
            let earlier = listed.filter { $0.key != versions + "/" }
            #expect(earlier.count == 2, "the current content is the file; two earlier versions: \(listed)")
            var contents: [String: String] = [:]
            for href in earlier.keys { contents[try await dav.send(.GET, href).text] = href }
            #expect(Set(contents.keys) == ["one", "two"])
            let restore = server.baseURL + "/remote.php/dav/versions/\(name)/restore/target"
            #expect(try await dav.send(.MOVE, try #require(contents["one"]), nil, ["Destination": restore]).status == 201)
            #expect(try await dav.send(.GET, "\(base)/v.txt").text == "one")
            #expect(try await Self.properties(dav, versions).count == 4, "three earlier versions now, and the folder")
            #expect(try await otherDAV.send(.PROPFIND, "/remote.php/dav/versions/\(other)/versions/\(fileid)", nil, ["Depth": "1"]).status == 404)
            #expect(try await dav.send(.PROPFIND, "/remote.php/dav/versions/\(name)/versions/12345", nil, ["Depth": "1"]).status == 404)
        }
    }

    @Test("previews: 404 for a file there is (no previews are made yet, and has-preview says so), the same 404 for one there is not; 401 without signing in")
    func previews() async throws {
        try await TestServer.run { server in
            let (_, dav, name, _) = try await Self.user(server, "pre")
            #expect(try await dav.send(.PUT, "/remote.php/dav/files/\(name)/p.png", "png").status == 201)
            let fileid = try #require(try await Self.properties(dav, "/remote.php/dav/files/\(name)/p.png", depth: "0").first?.value["oc:fileid"])
            #expect(try await dav.send(.GET, "/index.php/core/preview?fileId=\(fileid)&x=64&y=64&a=1").status == 404)
            #expect(try await dav.send(.GET, "/index.php/core/preview.png?file=/p.png&x=64&y=64").status == 404)
            #expect(try await dav.send(.GET, "/core/preview?fileId=1&x=64&y=64").status == 404)
            #expect(try await APIClient(baseURL: server.baseURL).get("/index.php/core/preview?fileId=\(fileid)&x=64&y=64").status == 401)
        }
    }

    /// An HTTP client that does not follow redirects (Login Flow v1 ends in one to the app's own `nc://` scheme).
    static let noRedirects = HTTPClient(eventLoopGroupProvider: .singleton, configuration: .init(redirectConfiguration: .disallow))

    static func form(_ client: HTTPClient, _ url: String, _ fields: [String: String], agent: String? = nil) async throws -> (status: Int, headers: HTTPHeaders, text: String) {
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded")
        if let agent { request.headers.add(name: "User-Agent", value: agent) }
        let body = fields.map { "\($0.key)=\($0.value.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "")" }.joined(separator: "&")
        request.body = .bytes(ByteBuffer(string: body))
        let response = try await client.execute(request, timeout: .seconds(30))
        let text = String(buffer: try await response.body.collect(upTo: 1 << 20))
        return (Int(response.status.code), response.headers, text)
    }

    /// The grant form's secret on the grant page.
    static func grantSecret(_ page: String) -> String? {
        guard let range = page.range(of: "name=\"grant\" value=\"") else { return nil }
        return String(page[range.upperBound...].prefix { $0 != "\"" })
    }

    @Test("Login Flow v2 by hand: the poll is 404 until granted; the page names the app and takes the account password (failures lock out); the grant makes an app password labelled with the app's name; the poll answers once; v1 redirects to nc://")
    func loginFlows() async throws {
        try await TestServer.run { server in
            let name = "flow" + UUID().uuidString.prefix(6).lowercased()
            let api = try await server.signUp(name)
            let client = Self.noRedirects
            let agent = "Mozilla/5.0 (Linux) mirall/3.7.3 (Nextcloud, debian-6.1.0 ClientArchitecture: x86_64 OsArchitecture: x86_64)"
            let started = try await Self.form(client, server.baseURL + "/index.php/login/v2", [:], agent: agent)
            #expect(started.status == 200, "\(started.text)")
            let flow = try #require(try JSONSerialization.jsonObject(with: Data(started.text.utf8)) as? [String: Any])
            let poll = try #require(flow["poll"] as? [String: String])
            let login = try #require(flow["login"] as? String)
            #expect(poll["endpoint"] == server.baseURL + "/index.php/login/v2/poll" && login.hasPrefix(server.baseURL + "/index.php/login/v2/flow/"))
            let token = try #require(poll["token"])
            #expect(try await Self.form(client, poll["endpoint"]!, ["token": token]).status == 404, "not granted yet")

            let page = try await APIClient(baseURL: "").get(login)
            #expect(page.status == 200 && page.text.contains("Nextcloud desktop (Linux)") && page.text.contains("/app.css"), "\(page.text)")
            let wrong = try await Self.form(client, login, ["step": "signin", "user": name, "password": "wrong"])
            #expect(wrong.status == 401 && wrong.text.contains("Wrong user name or password"))
            let signedIn = try await Self.form(client, login, ["step": "signin", "user": name, "password": "correct horse"])
            #expect(signedIn.status == 200 && signedIn.text.contains("Grant access"), "\(signedIn.text)")
            let secret = try #require(Self.grantSecret(signedIn.text))
            #expect(try await Self.form(client, login, ["step": "grant", "grant": "forged"]).status == 404, "the grant needs the page's secret")
            let granted = try await Self.form(client, login, ["step": "grant", "grant": secret])
            #expect(granted.status == 200 && granted.text.contains("Account connected"), "\(granted.text)")
            let answer = try await Self.form(client, poll["endpoint"]!, ["token": token])
            let credentials = try #require(try JSONSerialization.jsonObject(with: Data(answer.text.utf8)) as? [String: String], "\(answer.status) \(answer.text)")
            #expect(answer.status == 200 && credentials["server"] == server.baseURL && credentials["loginName"] == name)
            #expect(try await Self.form(client, poll["endpoint"]!, ["token": token]).status == 404, "the credentials are answered once")
            let password = try #require(credentials["appPassword"])
            let dav = DAVClient(server, basic: "Basic " + Data("\(name):\(password)".utf8).base64EncodedString())
            #expect(try await dav.send(.PROPFIND, "/remote.php/dav/files/\(name)/", nil, ["Depth": "0"]).status == 207)
            let labels: AppPasswordList = try await api.get("/v1/auth/app-passwords").decode()
            #expect(labels.appPasswords.map(\.label) == ["Nextcloud desktop (Linux)"], "\(labels.appPasswords)")
            #expect(try await APIClient(baseURL: "").get(login).status == 404, "the page is used up")

            // Login Flow v1: the same pages, then a redirect the app reads.
            var v1 = HTTPClientRequest(url: server.baseURL + "/index.php/login/flow")
            v1.headers.add(name: "User-Agent", value: "Mozilla/5.0 (Android) Nextcloud-android/3.26.0")
            v1.headers.add(name: "OCS-APIRequest", value: "true")
            let v1Page = String(buffer: try await client.execute(v1, timeout: .seconds(30)).body.collect(upTo: 1 << 20))
            #expect(v1Page.contains("Nextcloud Android app"), "\(v1Page)")
            let action = try #require(v1Page.range(of: "action=\"").map { String(v1Page[$0.upperBound...].prefix { $0 != "\"" }) })
            let v1SignedIn = try await Self.form(client, server.baseURL + action, ["step": "signin", "user": name, "password": "correct horse"])
            let v1Granted = try await Self.form(client, server.baseURL + action, ["step": "grant", "grant": try #require(Self.grantSecret(v1SignedIn.text))])
            #expect(v1Granted.status == 303)
            let location = try #require(v1Granted.headers.first(name: "Location"))
            #expect(location.hasPrefix("nc://login/server:\(server.baseURL)&user:\(name)&password:"), "\(location)")
            let v1Password = String(location.split(separator: ":").last ?? "").removingPercentEncoding ?? ""
            let v1DAV = DAVClient(server, basic: "Basic " + Data("\(name):\(v1Password)".utf8).base64EncodedString())
            #expect(try await v1DAV.send(.PROPFIND, "/remote.php/dav/files/\(name)/", nil, ["Depth": "0"]).status == 207)

            // The sign-in page counts failures like any login: locked out after five.
            let locked = try await Self.form(client, server.baseURL + "/index.php/login/v2", [:])
            let lockedLogin = try #require((try JSONSerialization.jsonObject(with: Data(locked.text.utf8)) as? [String: Any])?["login"] as? String)
            var last = 0
            for _ in 0..<6 { last = try await Self.form(client, lockedLogin, ["step": "signin", "user": name, "password": "nope"]).status }
            #expect(last == 429, "locked out")
        }
    }
}

extension NextcloudTests {
    @Test("notify_push: the user name and an app password in, 'authenticated' out, then 'notify_file' when the user's files change (through /v1 too); a wrong password gets 'err: Invalid credentials'")
    func notifyPush() async throws {
        try await TestServer.run { server in
            let (api, _, name, password) = try await Self.user(server, "push")
            let url = "ws://127.0.0.1:\(server.port)/push/ws"
            let heard = try await Self.within(seconds: 60) {
                let heard = Heard()
                try await WebSocketClient.connect(url: url, logger: Logger(label: "push-test")) { inbound, outbound, _ in
                    try await outbound.write(.text(name))
                    try await outbound.write(.text(password))
                    var messages = inbound.messages(maxSize: 1 << 16).makeAsyncIterator()
                    if case .text(let text) = try await messages.next() { await heard.add(text) }
                    _ = try await api.upload("pushed.txt", Data("x".utf8))
                    if case .text(let text) = try await messages.next() { await heard.add(text) }
                    try await outbound.close(.normalClosure, reason: nil)
                }
                return await heard.items
            }
            #expect(heard == ["authenticated", "notify_file"])
            let refused = try await Self.within(seconds: 60) {
                let heard = Heard()
                try await WebSocketClient.connect(url: url, logger: Logger(label: "push-test")) { inbound, outbound, _ in
                    try await outbound.write(.text(name))
                    try await outbound.write(.text("wrong"))
                    for try await message in inbound.messages(maxSize: 1 << 16) {
                        if case .text(let text) = message { await heard.add(text) }
                    }
                }
                return await heard.items
            }
            #expect(refused == ["err: Invalid credentials"], "and the server closes")
        }
    }

    actor Heard {
        var items: [String] = []
        func add(_ item: String) { items.append(item) }
    }

    /// `body`'s result, or a test failure (and an error) when it takes longer than `seconds`.
    static func within<T: Sendable>(seconds: Int, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
        try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask { try await body() }
            group.addTask {
                try await Task.sleep(for: .seconds(seconds))
                return nil
            }
            defer { group.cancelAll() }
            guard let first = try await group.next(), let value = first else {
                Issue.record("no answer within \(seconds) s")
                throw CancellationError()
            }
            return value
        }
    }
}

/// A `d:multistatus` read into href → property → text, the property named by prefix (`d:`, `oc:`, `nc:`) whatever
/// prefix the body used.
enum MultiStatus {
    static func parse(_ data: Data) -> [String: [String: String]] {
        let reader = Reader()
        let parser = XMLParser(data: data)
        parser.shouldProcessNamespaces = true
        parser.delegate = reader
        _ = parser.parse()
        return reader.result
    }

    private final class Reader: NSObject, XMLParserDelegate {
        var result: [String: [String: String]] = [:]
        var href = ""
        var text = ""
        var inProp = false
        var okStatus = true
        var pending: [String: String] = [:]
        var depth = 0
        var propertyDepth = 0
        var property: String?

        func prefixed(_ namespace: String?, _ name: String) -> String {
            switch namespace {
            case "DAV:": "d:" + name
            case "http://owncloud.org/ns": "oc:" + name
            case "http://nextcloud.org/ns": "nc:" + name
            default: (namespace ?? "") + " " + name
            }
        }

        func parser(_ parser: XMLParser, didStartElement name: String, namespaceURI: String?, qualifiedName: String?, attributes: [String: String] = [:]) {
            depth += 1
            if inProp && property == nil {
                property = prefixed(namespaceURI, name)
                propertyDepth = depth
                text = ""
            } else if namespaceURI == "DAV:" && name == "prop" {
                inProp = true
            } else if property == nil {
                text = ""
            }
        }

        func parser(_ parser: XMLParser, foundCharacters string: String) { text += string }

        func parser(_ parser: XMLParser, didEndElement name: String, namespaceURI: String?, qualifiedName: String?) {
            defer { depth -= 1 }
            if let current = property, depth == propertyDepth {
                pending[current] = text.trimmingCharacters(in: .whitespacesAndNewlines)
                property = nil
                return
            }
            if property != nil { return }
            switch (namespaceURI, name) {
            case ("DAV:", "href"): href = text.removingPercentEncoding ?? text
            case ("DAV:", "prop"): inProp = false
            case ("DAV:", "status"): okStatus = text.contains(" 200 ")
            case ("DAV:", "propstat"):
                if okStatus { result[href, default: [:]].merge(pending) { $1 } }
                pending = [:]
            default: break
            }
        }
    }
}
