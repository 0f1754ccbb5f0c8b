import AsyncHTTPClient
import Crypto
import Foundation
import NIOCore
import NIOFoundationCompat
import NIOHTTP1

extension HTTPClient {
    /// `.shared`'s settings without transparent decompression: `.shared` asks for gzip and refuses an answer that
    /// inflates more than 25× (`DecompressionError.limit`), which a big WebDAV listing (repetitive XML) does; and a
    /// stored object must arrive as stored. The S3 client and the storage providers use it.
    ///
    /// Idle connections are dropped after 4 s (`.shared` keeps them 10 minutes): servers close theirs sooner (Apache
    /// after 5 s, cheroot under load at once), and a request sent on a connection the server is closing fails with
    /// `remoteConnectionClosed`, which for a `MOVE` or a streamed `PUT` cannot be repeated blindly.
    ///
    /// A connection that cannot be made fails the requests waiting for it at once (AsyncHTTPClient otherwise keeps
    /// them queued, trying to connect, until each one's deadline — 24 hours for an upload: `nimbus sync --once`
    /// against a server that went away hung). Callers retry on their own schedule (the engine's backoff).
    public static let storage: HTTPClient = {
        var configuration = HTTPClient.Configuration.singletonConfiguration
        configuration.decompression = .disabled
        configuration.connectionPool = .init(idleTimeout: .seconds(4))
        configuration.connectionPool.retryConnectionEstablishment = false
        // No tracing: the default no-op tracer still builds a span and its attributes for every request (2.5% of
        // the client's CPU sending 10,000 small files).
        configuration.tracing.tracer = nil
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }()
}

/// What an S3-compatible store answered when it did not do what was asked.
public struct S3Error: Error, Sendable, CustomStringConvertible {
    /// The HTTP status (0: the store could not be reached).
    public var status: Int
    /// S3's error code (`NoSuchKey`, `PreconditionFailed`, `SlowDown`, …), when the body named one.
    public var code: String?
    public var message: String
    /// Seconds the store asked to wait (`Retry-After`), if it did.
    public var retryAfter: Int?

    /// Worth trying again later: unreachable, throttled (`SlowDown`, 503) or a server-side failure.
    public var isRetryable: Bool { status == 0 || status >= 500 || code == "SlowDown" || status == 429 }

    /// A conditional write refused: the object is not (or no longer) as `If-Match`/`If-None-Match` asked.
    public var isPreconditionFailed: Bool { status == 412 || code == "PreconditionFailed" }

    /// The store does not do what was asked (conditional writes on an older store): 501, or a 500 some say it with.
    public var isNotImplemented: Bool { status == 501 || status == 500 || code == "NotImplemented" }

    public var description: String {
        status == 0 ? "The S3 store could not be reached: \(message)" : "S3 answered \(status) \(code ?? ""): \(message)"
    }
}

/// One object of a listing, or what HEAD says of one.
public struct S3Object: Sendable, Equatable {
    public var key: String
    public var size: Int64
    /// The ETag without its quotes.
    public var etag: String
    /// User metadata (`x-amz-meta-NAME`, by NAME in lowercase): HEAD reports it, listings do not.
    public var metadata: [String: String] = [:]
    /// When it was last written, if the store said.
    public var modified: Date?

    public init(key: String, size: Int64, etag: String, metadata: [String: String] = [:], modified: Date? = nil) {
        self.key = key
        self.size = size
        self.etag = etag
        self.metadata = metadata
        self.modified = modified
    }
}

/// One page of a listing with a delimiter: the objects at this level and the common prefixes ("folders") below it.
public struct S3ListPage: Sendable {
    public var objects: [S3Object]
    public var prefixes: [String]
    public var next: String?
}

/// A small S3 client: path-style requests (`ENDPOINT/BUCKET/KEY`, which every S3-compatible store accepts),
/// signed with SigV4 over async-http-client. Objects, listings (ListObjectsV2) and multipart uploads; bodies are
/// sent as given (callers keep them to a block, a few MiB) and hashed for the signature.
public struct S3Client: Sendable {
    public let endpoint: URL
    public let bucket: String
    public let signer: SigV4Signer
    let http: HTTPClient
    let timeout: TimeAmount

    public init(endpoint: URL, bucket: String, signer: SigV4Signer, http: HTTPClient = .storage, timeout: TimeAmount = .seconds(60)) {
        self.endpoint = endpoint
        self.bucket = bucket
        self.signer = signer
        self.http = http
        self.timeout = timeout
    }

    // MARK: Buckets

    /// Makes the bucket; one that this account already owns is fine.
    public func createBucket() async throws {
        do {
            _ = try await send("PUT", key: nil)
        } catch let error as S3Error where error.code == "BucketAlreadyOwnedByYou" || error.code == "BucketAlreadyExists" {
        }
    }

    // MARK: Objects

    /// Stores an object. `ifNoneMatch`: only if no object has that key (412 `PreconditionFailed` otherwise, where
    /// the store supports conditional writes); `ifMatch`: only if its ETag is that. `metadata` is stored as
    /// `x-amz-meta-NAME`. Returns the new ETag.
    @discardableResult
    public func put(_ key: String, body: ByteBuffer, metadata: [String: String] = [:], ifNoneMatch: Bool = false, ifMatch: String? = nil) async throws
        -> String
    {
        var headers: [(String, String)] = [("content-length", "\(body.readableBytes)")]
        if ifNoneMatch { headers.append(("if-none-match", "*")) }
        if let ifMatch { headers.append(("if-match", "\"\(ifMatch)\"")) }
        for (name, value) in metadata.sorted(by: { $0.key < $1.key }) { headers.append(("x-amz-meta-\(name)", value)) }
        let (head, _) = try await send("PUT", key: key, headers: headers, body: body)
        return Self.etag(head.headers)
    }

    /// The object's bytes (`range`: a part of them, offsets within the object; `ifMatch`: only if its ETag is that,
    /// else 412).
    public func get(_ key: String, range: Range<Int64>? = nil, ifMatch: String? = nil) async throws -> ByteBuffer {
        var headers: [(String, String)] = []
        if let range { headers.append(("range", "bytes=\(range.lowerBound)-\(range.upperBound - 1)")) }
        if let ifMatch { headers.append(("if-match", "\"\(ifMatch)\"")) }
        return try await send("GET", key: key, headers: headers).body
    }

    /// Copies an object within the bucket (with its metadata; at most 5 GiB, S3's limit for one copy). Returns the
    /// new ETag.
    @discardableResult
    public func copy(from source: String, to key: String, ifNoneMatch: Bool = false) async throws -> String {
        var headers = [("x-amz-copy-source", "/" + SigV4Signer.encode(bucket) + "/" + SigV4Signer.encode(source, slash: false))]
        if ifNoneMatch { headers.append(("if-none-match", "*")) }
        let (_, body) = try await send("PUT", key: key, headers: headers)
        let root = XMLTree.parse(Data(buffer: body))
        if let root, root.name == "Error" {
            throw S3Error(status: 200, code: root.value("Code"), message: root.value("Message") ?? "The copy failed.")
        }
        return Self.unquoted(root?.value("ETag") ?? "")
    }

    /// The object's size and ETag, or `nil` if there is none under `key`.
    /// Whether an object has the key, asked so that the connection is kept when it has not: a one-byte ranged `GET`
    /// (a 404 comes with a body and its length). A `HEAD` answered 404 without a `Content-Length` (`rclone serve
    /// s3`) is taken by the HTTP client as ending at the connection's close — a new connection per look.
    public func exists(_ key: String) async throws -> Bool {
        do {
            _ = try await send("GET", key: key, headers: [("range", "bytes=0-0")], readBody: false)
            return true
        } catch let error as S3Error where error.status == 404 && error.code != "NoSuchBucket" {
            return false
        } catch let error as S3Error where error.status == 416 {
            return true  // an empty object
        }
    }

    public func head(_ key: String) async throws -> S3Object? {
        do {
            let (head, _) = try await send("HEAD", key: key)
            let size = head.headers.first(name: "content-length").flatMap(Int64.init) ?? 0
            var metadata: [String: String] = [:]
            for (name, value) in head.headers where name.lowercased().hasPrefix("x-amz-meta-") {
                metadata[String(name.lowercased().dropFirst("x-amz-meta-".count))] = value
            }
            let modified = head.headers.first(name: "last-modified").flatMap(HTTPDate.parse)
            return S3Object(key: key, size: size, etag: Self.etag(head.headers), metadata: metadata, modified: modified)
        } catch let error as S3Error where error.status == 404 {
            return nil
        }
    }

    /// Deletes the object (an absent one is not an error, as in S3).
    public func delete(_ key: String) async throws {
        do { _ = try await send("DELETE", key: key) } catch let error as S3Error where error.status == 404 {}
    }

    /// One page of the keys under `prefix` (ListObjectsV2), and the token of the next page if there is one.
    public func list(prefix: String = "", continuation: String? = nil, maxKeys: Int = 1000) async throws -> (objects: [S3Object], next: String?) {
        let page = try await list(prefix: prefix, delimiter: nil, continuation: continuation, maxKeys: maxKeys)
        return (page.objects, page.next)
    }

    /// One page of a listing; with a `delimiter` ("/"), keys below the next delimiter are rolled up into `prefixes`.
    public func list(prefix: String, delimiter: String?, continuation: String? = nil, maxKeys: Int = 1000) async throws -> S3ListPage {
        // Keys come URL-encoded (`encoding-type=url`, as AWS's SDKs ask): a key may hold characters XML 1.0 cannot
        // carry (a control character in a file name made the whole listing unreadable, for every file). A store
        // that ignores the parameter says nothing of it in its answer, and its keys are taken as they are.
        var query = [("list-type", "2"), ("prefix", prefix), ("max-keys", "\(maxKeys)"), ("encoding-type", "url")]
        if let delimiter { query.append(("delimiter", delimiter)) }
        if let continuation { query.append(("continuation-token", continuation)) }
        let (_, body) = try await send("GET", key: nil, query: query)
        guard let root = XMLTree.parse(Data(buffer: body)) else { throw S3Error(status: 200, code: nil, message: "The listing could not be read.") }
        let encoded = root.value("EncodingType")?.lowercased() == "url"
        func key(_ raw: String) throws -> String {
            guard encoded else { return raw }
            guard let decoded = Self.urlDecoded(raw) else { throw S3Error(status: 200, code: nil, message: "The listing holds a key that is not URL-encoded: \(raw)") }
            return decoded
        }
        let objects = try root.all("Contents").map {
            S3Object(
                key: try key($0.value("Key") ?? ""), size: Int64($0.value("Size") ?? "") ?? 0, etag: Self.unquoted($0.value("ETag") ?? ""),
                modified: $0.value("LastModified").flatMap(Self.parseISO8601))
        }
        let prefixes = try root.all("CommonPrefixes").compactMap { try $0.value("Prefix").map(key) }
        let truncated = root.value("IsTruncated") == "true"
        return S3ListPage(objects: objects, prefixes: prefixes, next: truncated ? root.value("NextContinuationToken") : nil)
    }

    /// A key of a listing asked for with `encoding-type=url`: percent-escapes decoded, `+` a space (as AWS's SDKs
    /// read it: stores escape a `+` in a key as `%2B`); nil when an escape is broken or the bytes are not UTF-8.
    static func urlDecoded(_ raw: String) -> String? {
        SigV4Signer.decode(raw.contains("+") ? raw.replacingOccurrences(of: "+", with: " ") : raw)
    }

    /// Every key under `prefix`, page after page.
    public func listAll(prefix: String = "") async throws -> [S3Object] {
        var result: [S3Object] = []
        var token: String?
        repeat {
            let page = try await list(prefix: prefix, continuation: token)
            result += page.objects
            token = page.next
        } while token != nil
        return result
    }

    // MARK: Multipart uploads

    /// Starts a multipart upload (the object gets `metadata` as `x-amz-meta-NAME`); returns its id.
    public func createMultipartUpload(_ key: String, metadata: [String: String] = [:]) async throws -> String {
        let headers = metadata.sorted(by: { $0.key < $1.key }).map { ("x-amz-meta-\($0.key)", $0.value) }
        let (_, body) = try await send("POST", key: key, query: [("uploads", "")], headers: headers)
        guard let id = XMLTree.parse(Data(buffer: body))?.value("UploadId"), !id.isEmpty else {
            throw S3Error(status: 200, code: nil, message: "The store gave no upload id.")
        }
        return id
    }

    /// Sends part `number` (1-based; every part but the last at least 5 MiB on AWS); returns its ETag.
    public func uploadPart(_ key: String, uploadId: String, number: Int, body: ByteBuffer) async throws -> String {
        let (head, _) = try await send(
            "PUT", key: key, query: [("partNumber", "\(number)"), ("uploadId", uploadId)], headers: [("content-length", "\(body.readableBytes)")],
            body: body)
        return Self.etag(head.headers)
    }

    /// The parts the store holds for an upload (to resume after a restart), by number.
    public func listParts(_ key: String, uploadId: String) async throws -> [(number: Int, etag: String, size: Int64)] {
        var parts: [(number: Int, etag: String, size: Int64)] = []
        var marker: String?
        repeat {
            var query = [("uploadId", uploadId)]
            if let marker { query.append(("part-number-marker", marker)) }
            let (_, body) = try await send("GET", key: key, query: query)
            guard let root = XMLTree.parse(Data(buffer: body)) else { throw S3Error(status: 200, code: nil, message: "The part list could not be read.") }
            for part in root.all("Part") {
                guard let number = part.value("PartNumber").flatMap(Int.init) else { continue }
                parts.append((number, Self.unquoted(part.value("ETag") ?? ""), Int64(part.value("Size") ?? "") ?? 0))
            }
            marker = root.value("IsTruncated") == "true" ? root.value("NextPartNumberMarker") : nil
        } while marker != nil
        return parts.sorted { $0.number < $1.number }
    }

    /// Joins the parts into the object; returns its ETag.
    @discardableResult
    public func completeMultipartUpload(_ key: String, uploadId: String, parts: [(number: Int, etag: String)], ifNoneMatch: Bool = false) async throws
        -> String
    {
        let xml = "<CompleteMultipartUpload>"
            + parts.map { "<Part><PartNumber>\($0.number)</PartNumber><ETag>\"\($0.etag)\"</ETag></Part>" }.joined()
            + "</CompleteMultipartUpload>"
        let body = ByteBuffer(string: xml)
        var headers = [("content-length", "\(body.readableBytes)")]
        if ifNoneMatch { headers.append(("if-none-match", "*")) }
        let (_, answer) = try await send("POST", key: key, query: [("uploadId", uploadId)], headers: headers, body: body)
        // S3 may answer 200 with an error inside (the join failed after it started answering).
        let root = XMLTree.parse(Data(buffer: answer))
        if let root, root.name == "Error" {
            throw S3Error(status: 200, code: root.value("Code"), message: root.value("Message") ?? "The parts could not be joined.")
        }
        return Self.unquoted(root?.value("ETag") ?? "")
    }

    /// Drops an unfinished multipart upload and its parts.
    public func abortMultipartUpload(_ key: String, uploadId: String) async throws {
        do { _ = try await send("DELETE", key: key, query: [("uploadId", uploadId)]) } catch let error as S3Error where error.status == 404 {}
    }

    // MARK: Requests

    /// Sends one signed request; a status outside 2xx throws ``S3Error`` with the store's code and message.
    /// `readBody`: false leaves a successful answer's body unread (the connection is then closed, not reused); an
    /// error's body is always read.
    func send(
        _ method: String, key: String?, query: [(String, String)] = [], headers: [(String, String)] = [], body: ByteBuffer? = nil,
        readBody: Bool = true
    ) async throws -> (head: HTTPClientResponse, body: ByteBuffer) {
        let basePath = endpoint.path.hasSuffix("/") ? String(endpoint.path.dropLast()) : endpoint.path
        let path = basePath + "/" + SigV4Signer.encode(bucket) + (key.map { "/" + SigV4Signer.encode($0, slash: false) } ?? "")
        var host = endpoint.host ?? "localhost"
        if let port = endpoint.port { host += ":\(port)" }
        let payloadHash = body.map { SigV4Signer.hex(SHA256.hash(data: $0.readableBytesView)) } ?? SigV4Signer.emptyPayloadHash
        let signedHeaders = [("host", host)] + headers.filter { $0.0 != "content-length" }
        let auth = signer.sign(method: method, path: path, query: query, headers: signedHeaders, payloadHash: payloadHash, date: Date())
        let queryString = query.map { $0.1.isEmpty && $0.0 == "uploads" ? "uploads" : "\(SigV4Signer.encode($0.0))=\(SigV4Signer.encode($0.1))" }
            .joined(separator: "&")
        var request = HTTPClientRequest(url: "\(endpoint.scheme ?? "http")://\(host)\(path)\(queryString.isEmpty ? "" : "?" + queryString)")
        request.method = HTTPMethod(rawValue: method)
        for (name, value) in headers where name != "content-length" { request.headers.add(name: name, value: value) }
        for (name, value) in auth { request.headers.add(name: name, value: value) }
        if let body { request.body = .bytes(body) }
        let response: HTTPClientResponse
        let data: ByteBuffer
        do {
            response = try await http.execute(request, timeout: timeout)
            let ok = (200..<300).contains(Int(response.status.code))
            if ok && !readBody {
                data = ByteBuffer()
            } else if ok && method != "HEAD" {
                data = try await response.body.collect(upTo: 1 << 30)
            } else {
                // An error's answer (or a HEAD's): its first MiB is plenty for the code and message; the rest is read
                // and dropped. (Collected with a limit, a longer one failed as "could not be reached" and hid the
                // store's status.)
                var kept = ByteBuffer()
                for try await var chunk in response.body where kept.readableBytes < 1 << 20 {
                    kept.writeBuffer(&chunk)
                }
                data = kept
            }
        } catch {
            throw S3Error(status: 0, code: nil, message: "\(error)")
        }
        guard (200..<300).contains(Int(response.status.code)) else {
            let root = data.readableBytes > 0 ? XMLTree.parse(Data(buffer: data)) : nil
            // (A body cut at its first MiB is no XML document: its code and message are looked for as text.)
            let text = root == nil ? String(buffer: data) : ""
            func element(_ name: String) -> String? {
                guard let start = text.range(of: "<\(name)>"), let end = text.range(of: "</\(name)>", range: start.upperBound..<text.endIndex) else { return nil }
                return String(text[start.upperBound..<end.lowerBound])
            }
            throw S3Error(
                status: Int(response.status.code), code: root?.value("Code") ?? element("Code"),
                message: root?.value("Message") ?? element("Message") ?? response.status.reasonPhrase,
                retryAfter: response.headers.first(name: "retry-after").flatMap(Int.init))
        }
        return (response, data)
    }

    static func etag(_ headers: HTTPHeaders) -> String { unquoted(headers.first(name: "etag") ?? "") }

    static func parseISO8601(_ text: String) -> Date? {
        (try? Date.ISO8601FormatStyle(includingFractionalSeconds: true).parse(text)) ?? (try? Date.ISO8601FormatStyle().parse(text))
    }
    static func unquoted(_ value: String) -> String { value.trimmingCharacters(in: CharacterSet(charactersIn: "\"")) }
}
