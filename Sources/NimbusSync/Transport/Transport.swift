import Foundation
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
    public var body: Data?

    /// A request for `path` (relative to the server).
    public init(method: String, path: String, headers: [String: String] = [:], body: Data? = nil) {
        self.method = method
        self.path = path
        self.headers = headers
        self.body = body
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
