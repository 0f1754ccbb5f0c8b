import Foundation
import NIOCore
import NimbusAPI

/// One HTTP request as the engine makes it: a path relative to the server, small bodies in memory
/// (JSON, or one upload chunk of at most the server's chunk size).
public struct TransportRequest: Sendable {
    /// The HTTP method (`GET`, `POST`, …).
    public var method: String
    /// Path and query, e.g. `/v1/files?parentId=root`.
    public var path: String
    /// Request headers.
    public var headers: [String: String]
    /// The body, if any.
    public var body: Data? {
        get { storedBody }
        set { (storedBody, bodyBuffer) = (newValue, nil) }
    }
    private var storedBody: Data?
    /// The same bytes as ``body``, held by the buffer `body` was made over (`init(method:path:headers:bodyOf:fill:)`): a
    /// transport that sends `ByteBuffer`s takes it as it is. Setting `body` drops it.
    private(set) var bodyBuffer: ByteBuffer?

    /// A request for `path` (relative to the server).
    public init(method: String, path: String, headers: [String: String] = [:], body: Data? = nil) {
        self.method = method
        self.path = path
        self.headers = headers
        self.storedBody = body
    }

    /// A request whose body is `count` bytes that `fill` writes (all of them, or it throws), in one buffer that both
    /// ``body`` and a `ByteBuffer`-sending transport read without a copy (a batch of blocks is 8 MiB: copying it
    /// from `Data` into a fresh `ByteBuffer` was a twentieth of the client's CPU sending a big file).
    init(method: String, path: String, headers: [String: String], bodyOf count: Int, fill: (UnsafeMutableRawBufferPointer) throws -> Void) rethrows {
        self.init(method: method, path: path, headers: headers)
        var buffer = ByteBufferAllocator().buffer(capacity: count)
        try buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: count) { raw in
            try fill(UnsafeMutableRawBufferPointer(rebasing: raw[..<count]))
            return count
        }
        let kept = buffer
        storedBody = buffer.withUnsafeReadableBytes { raw in
            raw.baseAddress.map { base in
                Data(bytesNoCopy: UnsafeMutableRawPointer(mutating: base), count: raw.count, deallocator: .custom { _, _ in _ = kept })
            } ?? Data()
        }
        bodyBuffer = buffer
    }
}

/// The status and headers of a response (header names lowercased).
public struct TransportResponseHead: Sendable {
    /// The HTTP status.
    public var status: Int
    /// Response headers, names lowercased.
    public var headers: [String: String]

    /// A response head.
    public init(status: Int, headers: [String: String]) {
        self.status = status
        self.headers = headers
    }
}

/// How the engine reaches a server. ``AsyncHTTPClientTransport`` is the real one; tests wrap it to inject
/// faults (failed sends, dropped responses); an app on Apple platforms can implement it with URLSession.
///
/// A thrown error means "no usable answer": the request may or may not have reached the server, which is
/// why every request the engine sends is safe to repeat.
public protocol Transport: Sendable {
    /// Sends a request and collects the whole (small) response body.
    func send(_ request: TransportRequest) async throws -> (TransportResponseHead, Data)
    /// Sends a request and hands the response body to `sink` piece by piece (downloads, event streams).
    /// `sink` is called only for 2xx responses; otherwise the body is collected and returned.
    func stream(_ request: TransportRequest, into sink: @escaping @Sendable (Data) async throws -> Void) async throws -> (TransportResponseHead, Data)
}

extension TransportRequest {
    /// A request for `endpoint` (`Routes`), its path's placeholders filled, in order, with `parameters`.
    public init<Body, Answer>(
        _ endpoint: Endpoint<Body, Answer>, _ parameters: String..., query: KeyValuePairs<String, String?> = [:], headers: [String: String] = [:],
        body: Data? = nil
    ) {
        self.init(method: endpoint.method, path: endpoint.path(parameters, query: query), headers: headers, body: body)
    }
}
