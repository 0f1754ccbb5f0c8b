import AsyncHTTPClient
import Foundation
import NIOCore
import NIOFoundationCompat
import NIOHTTP1

extension HTTPClient {
    /// `.shared`'s settings, except that a connection that cannot be made fails the requests waiting for it at once:
    /// `.shared` keeps them queued, trying to connect again, until each one's deadline (five minutes here), so a
    /// server that went away held every queued request that long. The engine retries on its own schedule.
    public static let api: HTTPClient = {
        var configuration = HTTPClient.Configuration.singletonConfiguration
        configuration.connectionPool.retryConnectionEstablishment = false
        // No tracing: the default no-op tracer still builds a span and its attributes for every request (2.5% of
        // the client's CPU sending 10,000 small files).
        configuration.tracing.tracer = nil
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }()
}

/// ``Transport`` over AsyncHTTPClient (SwiftNIO): works on Linux and Apple platforms.
public struct AsyncHTTPClientTransport: Transport {
    /// The server, e.g. `http://127.0.0.1:8080`.
    public let baseURL: URL
    let client: HTTPClient
    let timeout: TimeAmount

    /// A transport to the server at `baseURL`.
    ///
    /// - Parameters:
    ///   - baseURL: the server, e.g. `http://127.0.0.1:8080`.
    ///   - client: the HTTP client (``AsyncHTTPClient/HTTPClient/api`` by default).
    ///   - timeout: for a whole request; long-polls ask for less than this.
    public init(baseURL: URL, client: HTTPClient = .api, timeout: Duration = .seconds(300)) {
        self.baseURL = baseURL
        self.client = client
        self.timeout = TimeAmount(timeout)  // NIO's own conversion (to the nanosecond, clamped)
    }

    func makeRequest(_ request: TransportRequest) -> HTTPClientRequest {
        var base = baseURL.absoluteString
        if base.hasSuffix("/") { base.removeLast() }
        var http = HTTPClientRequest(url: base + request.path)
        http.method = HTTPMethod(rawValue: request.method)
        for (name, value) in request.headers { http.headers.replaceOrAdd(name: name, value: value) }
        if let buffer = request.bodyBuffer {
            http.body = BandwidthLimits.body(buffer)
        } else if let body = request.body {
            http.body = BandwidthLimits.body(body)
        }
        return http
    }

    static func head(_ response: HTTPClientResponse) -> TransportResponseHead {
        var headers: [String: String] = [:]
        for (name, value) in response.headers { headers[name.lowercased()] = value }
        return TransportResponseHead(status: Int(response.status.code), headers: headers)
    }

    /// Sends `request` and reads the whole answer (up to 64 MiB). Both bodies keep to ``BandwidthLimits/current``.
    public func send(_ request: TransportRequest) async throws -> (TransportResponseHead, Data) {
        let response = try await client.execute(makeRequest(request), timeout: timeout)
        let body = try await response.body.collect(upTo: 64 * 1024 * 1024)
        try await BandwidthLimits.current.down?.take(body.readableBytes)
        return (Self.head(response), Data(buffer: body))
    }

    /// Sends `request` and hands a successful answer's body to `sink` piece by piece (an error's body is returned).
    public func stream(_ request: TransportRequest, into sink: @escaping @Sendable (Data) async throws -> Void) async throws
        -> (TransportResponseHead, Data)
    {
        let response = try await client.execute(makeRequest(request), timeout: timeout)
        let head = Self.head(response)
        guard (200..<300).contains(head.status) else {
            let body = try await response.body.collect(upTo: 1024 * 1024)
            return (head, Data(buffer: body))
        }
        let limiter = BandwidthLimits.current.down
        for try await buffer in response.body {
            // Waiting here leaves the rest unread: the connection's back-pressure slows the server.
            try await limiter?.take(buffer.readableBytes)
            try await sink(Data(buffer: buffer))
        }
        return (head, Data())
    }
}
