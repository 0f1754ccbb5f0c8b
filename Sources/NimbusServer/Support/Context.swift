import Foundation
import HTTPTypes
import Hummingbird
import NIOConcurrencyHelpers
import NIOCore
import NIOFoundationCompat
import NimbusAPI

/// The per-request context: JSON coding with the API's date format and a 1 MiB cap on JSON bodies.
public struct NimbusRequestContext: RequestContext {
    public var coreContext: CoreRequestContextStorage
    /// The client's address, used to rate-limit failed logins.
    var remoteIP: String
    /// The connection, for ``LingeringCloseMiddleware`` to close once a refused request's body is drained.
    let channel: any Channel

    public init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        remoteIP = source.channel.remoteAddress?.ipAddress ?? "unknown"
        channel = source.channel
    }

    public var maxUploadSize: Int { 1024 * 1024 }
    public var requestDecoder: JSONDecoder { .nimbus }
    public var responseEncoder: JSONEncoder { .nimbus }
}

/// The routes the server answers, recorded as they are added so a test can hold them against `openapi.yaml`.
public struct RouteTable {
    public struct Route: Sendable, Hashable, CustomStringConvertible {
        public var method: String
        public var path: String
        public var description: String { "\(method) \(path)" }
    }

    let router: Router<NimbusRequestContext>
    public private(set) var routes: [Route] = []
    /// The same routes, for the error middleware to tell "no such path" (404) from "not with this method" (405).
    let index: RouteIndex

    init(router: Router<NimbusRequestContext>, index: RouteIndex) {
        self.router = router
        self.index = index
    }

    /// Adds the route of `endpoint` (``Routes``, where every `/v1` route is written once for the server and its
    /// clients).
    mutating func on<Body, Answer>(
        _ endpoint: Endpoint<Body, Answer>, use handler: @escaping @Sendable (Request, NimbusRequestContext) async throws -> Response
    ) {
        on(HTTPRequest.Method(endpoint.method) ?? .get, endpoint.template, use: handler)
    }

    /// Adds a route; `path` uses OpenAPI's `{name}` captures, which Hummingbird understands too. A `GET` route
    /// answers `HEAD` too: the same status and headers (`Content-Length` included), no body — curl -I, rclone and
    /// browsers ask that way.
    mutating func on(
        _ method: HTTPRequest.Method, _ path: String,
        use handler: @escaping @Sendable (Request, NimbusRequestContext) async throws -> Response
    ) {
        router.on(RouterPath(path), method: method, use: handler)
        routes.append(Route(method: method.rawValue, path: path))
        index.add(method.rawValue, path)
        if method == .get {
            router.on(RouterPath(path), method: .head) { request, context in
                let response = try await handler(request, context)
                var headers = response.headers
                if headers[.contentLength] == nil, let length = response.body.contentLength { headers[.contentLength] = String(length) }
                // A new response, not `body =`: that would reset Content-Length to the empty body's.
                return Response(status: response.status, headers: headers, body: ResponseBody())
            }
            index.add("HEAD", path)
        }
    }
}

/// The methods each route path takes (`{name}` matches one segment), filled as routes are added.
final class RouteIndex: Sendable {
    private let routes = NIOLockedValueBox<[(method: String, segments: [Substring])]>([])

    func add(_ method: String, _ path: String) {
        routes.withLockedValue { $0.append((method, path.split(separator: "/"))) }
    }

    /// The methods some route with this path takes; empty when no route has it.
    func methods(for path: String) -> Set<String> {
        let segments = path.split(separator: "/")
        return routes.withLockedValue { routes in
            Set(routes.filter { route in
                route.segments.count == segments.count
                    && zip(route.segments, segments).allSatisfy { pattern, segment in pattern.hasPrefix("{") || pattern == segment }
            }.map(\.method))
        }
    }

    /// Every method some route takes.
    var allMethods: Set<String> { routes.withLockedValue { Set($0.map(\.method)) } }
}

extension Request {
    /// A query parameter, read as HTML forms and `URLSearchParams` write them: `+` is a space, `%2B` a plus.
    func query(_ name: String) -> String? {
        guard let raw = uri.query else { return nil }
        for pair in raw.split(separator: "&", omittingEmptySubsequences: true) {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard Self.formDecoded(parts[0]) == name else { continue }
            return parts.count > 1 ? Self.formDecoded(parts[1]) : ""
        }
        return nil
    }

    static func formDecoded(_ text: Substring) -> String {
        let spaced = text.replacingOccurrences(of: "+", with: " ")
        return spaced.removingPercentEncoding ?? spaced
    }

    func header(_ name: HTTPField.Name) -> String? {
        headers[name]
    }
}

extension NimbusRequestContext {
    func parameter(_ name: String) throws -> String {
        guard let value = parameters.get(name) else { throw DriveError.badRequest("Missing path parameter '\(name)'.") }
        return value
    }
}

extension Request {
    /// The JSON body, read up to `limit` bytes (`tooLarge` says what to do beyond, as a 413). A body that does not
    /// decode is a 400 through ``DriveError``'s mapping of `DecodingError`.
    func decodeJSON<T: Decodable>(_ type: T.Type, limit: Int, tooLarge: String) async throws -> T {
        let bytes: ByteBuffer
        do { bytes = try await body.collect(upTo: limit) } catch { throw DriveError.tooLarge(tooLarge) }
        return try JSONDecoder.nimbus.decode(T.self, from: Data(buffer: bytes))
    }
}

/// JSON responses with the API's encoder.
enum JSONResponse {
    static func make(_ value: some Encodable, status: HTTPResponse.Status = .ok, etag: String? = nil, headers extra: HTTPFields = [:]) throws -> Response {
        let data = try JSONEncoder.nimbus.encode(value)
        var headers: HTTPFields = [.contentType: "application/json; charset=utf-8"]
        if let etag { headers[.eTag] = "\"\(etag)\"" }
        headers.append(contentsOf: extra)
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }
}

/// `If-Match` / `If-None-Match` comparison (strong; `*` matches anything; a list matches if any entry does).
enum ETag {
    static func matches(_ header: String, _ current: String) -> Bool {
        for raw in header.split(separator: ",") {
            var value = raw.trimmingCharacters(in: .whitespaces)
            if value == "*" { return true }
            if value.hasPrefix("W/") { value.removeFirst(2) }
            if value.hasPrefix("\"") && value.hasSuffix("\"") && value.count >= 2 {
                value = String(value.dropFirst().dropLast())
            }
            if value == current { return true }
        }
        return false
    }
}
