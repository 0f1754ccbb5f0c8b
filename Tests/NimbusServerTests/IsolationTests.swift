import Foundation
import NimbusAPI
import NimbusServer
import Testing

@Suite("Isolation between users")
struct IsolationTests {
    @Test("another user's ids answer 404 on every route and nothing of theirs changes")
    func everyRoute() async throws {
        try await TestServer.run { server in
            let alice = try await server.signUp()
            let mallory = try await server.signUp()
            let folder = try await alice.mkdir("Private")
            let file = try await alice.upload("secret.txt", Data("secret".utf8), in: folder.id)
            let revision = try #require(file.revisionId)
            let session: UploadResponse = try await alice.send(
                .POST, "/v1/upload?uploadType=resumable",
                json: UploadRequest(requestId: "r1", name: "big.bin", mimeType: "application/octet-stream", parentId: folder.id, size: 10)
            ).decode()

            let attempts: [(HTTPMethodName, String, (any Encodable & Sendable)?)] = [
                (.GET, "/v1/files/\(file.id)", nil),
                (.GET, "/v1/files/\(folder.id)", nil),
                (.GET, "/v1/files?parentId=\(folder.id)", nil),
                (.PATCH, "/v1/files/\(file.id)", UpdateFileRequest(name: "mine.txt")),
                (.PATCH, "/v1/files/\(file.id)", UpdateFileRequest(parentId: "root")),
                (.DELETE, "/v1/files/\(file.id)", nil),
                (.DELETE, "/v1/files/\(folder.id)?permanent=true", nil),
                (.POST, "/v1/files/\(file.id)/untrash", nil),
                (.POST, "/v1/files", CreateFileRequest(name: "x", mimeType: folderMimeType, parentId: folder.id)),
                (.GET, "/v1/files/\(file.id)/content", nil),
                (.GET, "/v1/files/\(file.id)/revisions", nil),
                (.GET, "/v1/files/\(file.id)/revisions/\(revision)", nil),
                (.GET, "/v1/files/\(file.id)/revisions/\(revision)/content", nil),
                (.POST, "/v1/files/\(file.id)/revisions/\(revision)/restore", nil),
                (.POST, "/v1/upload?uploadType=media&name=x&parentId=\(folder.id)", nil),
                (.POST, "/v1/upload?uploadType=media&fileId=\(file.id)", nil),
                (.POST, "/v1/upload?uploadType=resumable",
                 UploadRequest(requestId: "m1", name: "x", mimeType: "text/plain", parentId: folder.id, size: 1)),
                (.POST, "/v1/upload?uploadType=resumable",
                 UploadRequest(requestId: "m2", name: "x", mimeType: "text/plain", parentId: nil, size: 1, fileId: file.id)),
                (.GET, "/v1/upload/\(session.uploadId)", nil),
                (.DELETE, "/v1/upload/\(session.uploadId)", nil),
            ]
            for (method, path, json) in attempts {
                let reply = try await mallory.send(method.http, path, json: json, body: json == nil ? Data("x".utf8) : nil)
                #expect(reply.status == 404, "\(method) \(path) → \(reply.status) \(reply.text)")
                #expect(reply.errorCode == "not_found")
            }
            let chunk = try await mallory.send(
                .PUT, "/v1/upload/\(session.uploadId)/chunk", body: randomData(10), headers: ["Content-Range": "bytes 0-9/10"])
            #expect(chunk.status == 404)

            // Alice's things are untouched, and Mallory's own lists show none of them.
            let still: File = try await alice.get("/v1/files/\(file.id)").decode()
            #expect(still.name == "secret.txt" && !still.trashed && still.parentId == folder.id)
            #expect(try await alice.content(file.id) == Data("secret".utf8))
            #expect(try await alice.get("/v1/upload/\(session.uploadId)").status == 200)
            #expect(try await mallory.list().files.isEmpty)
            #expect(try await mallory.get("/v1/trash").decode(FileList.self).files.isEmpty)
            let start: ChangeCursor = try await mallory.get("/v1/changes/start").decode()
            let feed: ChangeList = try await mallory.get("/v1/changes?cursor=\(start.cursor)").decode()
            #expect(feed.changes.allSatisfy { $0.fileId != file.id && $0.fileId != folder.id })
            // Alice's cursor is no cursor for Mallory: 410, never Alice's feed.
            let alices: ChangeCursor = try await alice.get("/v1/changes/start").decode()
            #expect(try await mallory.get("/v1/changes?cursor=\(alices.cursor)").status == 410)
        }
    }
}

/// The methods the isolation table uses, spelled as in the API docs.
enum HTTPMethodName: String, CustomStringConvertible {
    case GET, POST, PATCH, DELETE, PUT
    var description: String { rawValue }
    var http: HTTPMethod {
        switch self {
        case .GET: .GET
        case .POST: .POST
        case .PATCH: .PATCH
        case .DELETE: .DELETE
        case .PUT: .PUT
        }
    }
}

import NIOHTTP1

@Suite("OpenAPI document")
struct OpenAPITests {
    @Test("every route the router has is described in openapi.yaml, and the server serves that document")
    func routesDocumented() async throws {
        try await TestServer.run { server in
            let served = try await APIClient(baseURL: server.baseURL).get("/openapi.yaml")
            #expect(served.status == 200)
            let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            let onDisk = try String(contentsOf: repository.appending(path: "openapi.yaml"), encoding: .utf8)
            #expect(served.text == onDisk, "the embedded document is current (run scripts/embed-assets)")

            let documented = Self.operations(in: onDisk)
            #expect(!server.parts.routes.isEmpty)
            for route in server.parts.routes {
                #expect(documented.contains("\(route.method.lowercased()) \(route.path)"), "\(route) is not in openapi.yaml")
            }
            // And the document describes nothing the server does not answer (root alias aside).
            let served2 = Set(server.parts.routes.map { "\($0.method.lowercased()) \($0.path)" })
            for operation in documented where operation != "get /v1/files/root" {
                #expect(served2.contains(operation), "openapi.yaml documents \(operation), which the server lacks")
            }
        }
    }

    @Test("HEAD answers as GET without a body; a path that exists with other methods, or a method no route takes, is 405; + in a query is a space")
    func methodsAndQueries() async throws {
        try await TestServer.run { server in
            let alice = try await server.signUp()
            let content = Data(repeating: 0x41, count: 12_345)
            let made = try await alice.send(.POST, "/v1/upload?uploadType=media&name=a+b%2Bc.txt", body: content)
            #expect(made.status == 201, "\(made.text)")
            let file = try made.decode(File.self)
            #expect(file.name == "a b+c.txt", "+ is a space, %2B a plus (as forms and URLSearchParams write them): \(file.name)")
            for path in ["/healthz", "/v1/files/\(file.id)/content", "/v1/files/\(file.id)", "/openapi.yaml"] {
                let get = try await alice.send(.GET, path)
                let head = try await alice.send(.HEAD, path)
                #expect(head.status == get.status && head.status == 200, "HEAD \(path): \(head.status)")
                #expect(head.body.isEmpty, "HEAD \(path) sends no body")
                #expect(head.header("Content-Length") == get.header("Content-Length") && head.header("Content-Length") != nil, "HEAD \(path)")
                #expect(head.header("ETag") == get.header("ETag"), "HEAD \(path)")
            }
            #expect(try await alice.send(.HEAD, "/v1/files/\(file.id)/content").header("Content-Length") == String(content.count))
            #expect(try await alice.send(.HEAD, "/v1/files/nothere/content").status == 404)
            for (method, path) in [(HTTPMethod.PUT, "/v1/files/\(file.id)"), (.POST, "/healthz"), (.DELETE, "/v1/changes"), (.TRACE, "/v1/files/root"), (.TRACE, "/nothing/here")] {
                let reply = try await alice.send(method, path)
                #expect(reply.status == 405, "\(method) \(path): \(reply.status)")
                #expect(reply.errorCode == "method_not_allowed", "\(method) \(path)")
            }
            let put = try await alice.send(.PUT, "/v1/files/\(file.id)")
            #expect(put.header("Allow").map { Set($0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }) } == ["GET", "HEAD", "PATCH", "DELETE"])
            #expect(try await alice.send(.GET, "/v1/no/such/route").status == 404, "a path no route has is still 404")
            #expect(try await alice.get("/v1/files/\(file.id)").decode(File.self).name == "a b+c.txt")
        }
    }

    @Test("content cannot take the folder type (a file would look like a folder to every client); content is served with its own type")
    func folderTypeRefusedForContent() async throws {
        try await TestServer.run { server in
            let alice = try await server.signUp()
            let folderType = "application%2Fvnd.nimbus.folder"
            let media = try await alice.uploadReply("x.bin", Data("x".utf8), query: "&mimeType=\(folderType)")
            #expect(media.status == 400)
            #expect(media.errorCode == "invalid_mime_type")
            let typed = try await alice.uploadReply("y.bin", Data("y".utf8), headers: ["Content-Type": "application/vnd.nimbus.folder"])
            #expect(typed.status == 400)
            let session = try await alice.send(
                .POST, "/v1/upload?uploadType=resumable",
                json: UploadRequest(requestId: "r1", name: "z.bin", mimeType: "application/vnd.nimbus.folder", parentId: nil, size: 1))
            #expect(session.status == 400)
            #expect(try await alice.list().files.isEmpty, "nothing was made")
            let file = try await alice.upload("notes.md", Data("# hi".utf8), query: "&mimeType=text%2Fmarkdown")
            #expect(try await alice.get("/v1/files/\(file.id)/content").header("Content-Type") == "text/markdown")
        }
    }

    @Test("oversized header fields are 431 and an oversized request target 414, with the JSON error body, signed in or not, on /v1 and /dav")
    func headerLimits() async throws {
        try await TestServer.run { server in
            let alice = try await server.signUp()
            let anonymous = APIClient(baseURL: server.baseURL)
            let big = String(repeating: "x", count: 20 * 1024)
            let several = Dictionary(uniqueKeysWithValues: (0..<5).map { ("X-Filler-\($0)", String(repeating: "y", count: 8 * 1024)) })
            for (client, path) in [(anonymous, "/v1/auth/login"), (alice, "/v1/files"), (alice, "/dav/"), (anonymous, "/healthz")] {
                let one = try await client.send(.GET, path, headers: ["X-Big": big])
                #expect(one.status == 431, "one 20 KiB field, \(path): \(one.status)")
                #expect(one.errorCode == "headers_too_large")
                #expect(one.header("X-Content-Type-Options") == "nosniff")
                let many = try await client.send(.GET, path, headers: several)
                #expect(many.status == 431, "40 KiB in all, \(path): \(many.status)")
                #expect(many.errorCode == "headers_too_large")
            }
            let long = try await alice.send(.GET, "/v1/files?parentId=" + String(repeating: "z", count: 17 * 1024))
            #expect(long.status == 414)
            #expect(long.errorCode == "uri_too_long")
            // Under the limits, all is as usual (a long but fair header, a 10 KiB query).
            #expect(try await alice.send(.GET, "/v1/files", headers: ["X-Fair": String(repeating: "f", count: 12 * 1024)]).status == 200)
            #expect(try await alice.send(.GET, "/v1/files?parentId=" + String(repeating: "z", count: 10 * 1024)).status == 404)
        }
    }

    /// `method path` for every operation under `paths:` (a line-based read of the document's own layout).
    static func operations(in yaml: String) -> Set<String> {
        var result: Set<String> = []
        var inPaths = false
        var current: String?
        for line in yaml.split(separator: "\n", omittingEmptySubsequences: false) {
            if line == "paths:" { inPaths = true; continue }
            if inPaths, !line.hasPrefix(" "), !line.isEmpty { inPaths = false }
            guard inPaths else { continue }
            if line.hasPrefix("  /"), line.hasSuffix(":"), !line.hasPrefix("   ") {
                current = String(line.dropFirst(2).dropLast())
            } else if let current, line.hasPrefix("    "), !line.hasPrefix("     ") {
                let key = line.trimmingCharacters(in: .whitespaces).dropLast()
                if ["get", "post", "put", "patch", "delete"].contains(String(key)) {
                    result.insert("\(key) \(current)")
                }
            }
        }
        return result
    }
}
