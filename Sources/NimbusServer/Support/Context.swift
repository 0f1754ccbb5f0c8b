import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import NIOFoundationCompat
import NimbusAPI

/// The per-request context: JSON coding with the API's date format and a 1 MiB cap on JSON bodies.
public struct NimbusRequestContext: RequestContext {
    public var coreContext: CoreRequestContextStorage
    /// The client's address, used to rate-limit failed logins.
    var remoteIP: String

    public init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        remoteIP = source.channel.remoteAddress?.ipAddress ?? "unknown"
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

    init(router: Router<NimbusRequestContext>) {
        self.router = router
    }

    /// Adds a route; `path` uses OpenAPI's `{name}` captures, which Hummingbird understands too.
    mutating func on(
        _ method: HTTPRequest.Method, _ path: String,
        use handler: @escaping @Sendable (Request, NimbusRequestContext) async throws -> Response
    ) {
        router.on(RouterPath(path), method: method, use: handler)
        routes.append(Route(method: method.rawValue, path: path))
    }
}

extension Request {
    func query(_ name: String) -> String? {
        uri.queryParameters.get(name)
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
