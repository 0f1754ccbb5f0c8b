import Foundation
import Hummingbird
import NimbusAPI

/// A value in an OCS answer, written as JSON (`format=json`) or as Nextcloud's XML (keys as elements, list items as
/// `<element>`, true as `1` and false as nothing).
indirect enum OCSValue: Sendable {
    case string(String)
    case int(Int64)
    case double(Double)
    case bool(Bool)
    case null
    case list([OCSValue])
    case object([(String, OCSValue)])

    var json: String {
        switch self {
        case .string(let text): Self.jsonString(text)
        case .int(let value): String(value)
        case .double(let value): value.isFinite ? String(value) : "0"
        case .bool(let value): value ? "true" : "false"
        case .null: "null"
        case .list(let items): "[" + items.map(\.json).joined(separator: ",") + "]"
        case .object(let pairs): "{" + pairs.map { Self.jsonString($0.0) + ":" + $0.1.json }.joined(separator: ",") + "}"
        }
    }

    /// The content of this value's element.
    var xml: String {
        switch self {
        case .string(let text): DAVRequest.xmlEscape(text)
        case .int(let value): String(value)
        case .double(let value): value.isFinite ? String(value) : "0"
        case .bool(let value): value ? "1" : ""
        case .null: ""
        case .list(let items): items.map { "<element>\($0.xml)</element>" }.joined()
        case .object(let pairs): pairs.map { "<\($0.0)>\($0.1.xml)</\($0.0)>" }.joined()
        }
    }

    /// A JSON string literal, `/` escaped as PHP's `json_encode` does (Foundation's encoder, which does too).
    static func jsonString(_ text: String) -> String {
        (try? JSONEncoder().encode(text)).map { String(decoding: $0, as: UTF8.self) } ?? "\"\""
    }
}

/// Nextcloud's OCS API at `/ocs/v1.php/…` and `/ocs/v2.php/…`: every answer in the envelope
/// `{ocs: {meta: {status, statuscode, message, totalitems, itemsperpage}, data}}`, XML unless `format=json` (or an
/// `Accept: application/json`). v1 says success with statuscode 100 and answers HTTP 200 for everything but a missing
/// sign-in (401); v2 says 200 and puts the status on the HTTP answer too (404 for 998, 401 for 997).
struct OCSResponder: Sendable {
    enum Version: Sendable { case v1, v2 }
    var version: Version
    var json: Bool

    init(path: String, request: Request) {
        version = path.hasPrefix("/ocs/v2.php") ? .v2 : .v1
        let format = request.uri.queryParameters.get("format")?.lowercased()
        json = format == "json" || (format == nil && (request.headers[.accept] ?? "").contains("application/json"))
    }

    /// OCS's own status codes.
    static let ok = 100
    static let unauthorized = 997
    static let notFound = 998
    static let serverError = 996

    func success(_ data: OCSValue) -> Response {
        answer(statusCode: Self.ok, message: "OK", data: data)
    }

    func failure(_ statusCode: Int, _ message: String, headers: HTTPFields = [:]) -> Response {
        answer(statusCode: statusCode, message: message, data: .list([]), headers: headers)
    }

    func answer(statusCode: Int, message: String, data: OCSValue, headers extra: HTTPFields = [:]) -> Response {
        let succeeded = statusCode == Self.ok
        let shown = version == .v2 && succeeded ? 200 : statusCode
        let http: Int
        switch (version, statusCode) {
        case (_, Self.ok): http = 200
        case (_, Self.unauthorized): http = 401
        case (.v1, _): http = 200
        case (.v2, Self.notFound): http = 404
        case (.v2, Self.serverError): http = 500
        case (.v2, let code): http = (200..<600).contains(code) ? code : 400
        }
        let meta: [(String, OCSValue)] = [
            ("status", .string(succeeded ? "ok" : "failure")), ("statuscode", .int(Int64(shown))), ("message", .string(message)),
            ("totalitems", .string("")), ("itemsperpage", .string("")),
        ]
        let body: String
        var headers = extra
        if json {
            body = OCSValue.object([("ocs", .object([("meta", .object(meta)), ("data", data)]))]).json
            headers[.contentType] = "application/json; charset=utf-8"
        } else {
            body = "<?xml version=\"1.0\"?>\n<ocs>\n <meta>" + OCSValue.object(meta).xml + "</meta>\n <data>" + data.xml + "</data>\n</ocs>\n"
            headers[.contentType] = "text/xml; charset=UTF-8"
        }
        headers[.cacheControl] = "no-store"
        return Response(status: .init(code: http), headers: headers, body: .init(byteBuffer: ByteBuffer(string: body)))
    }
}
