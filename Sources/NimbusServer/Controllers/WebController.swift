import Foundation
import HTTPTypes
import Hummingbird

/// The web app at `/`, and a public link's page at `/s/{token}`: embedded files (no build step, no external assets, works offline on a LAN).
struct WebController: Sendable {
    /// Scripts and styles only from this origin, no framing, no plugins; the app needs nothing else.
    static let contentSecurityPolicy =
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; media-src 'self' blob:; frame-src blob:; "
        + "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

    func register(_ routes: inout RouteTable) {
        routes.on(.get, "/", use: { request, context in try Self.asset("index.html", type: "text/html; charset=utf-8") })
        // The app's ES modules (web/js/): one flat folder, so a module's path is its name.
        routes.on(.get, "/js/{module}", use: { request, context in
            let name = try context.parameters.require("module")
            guard name.hasSuffix(".js"), !name.contains("/"), !name.hasPrefix(".") else { throw DriveError.notFound("No such script.") }
            return try Self.asset("js/" + name, type: "text/javascript; charset=utf-8")
        })
        routes.on(.get, "/app.css", use: { request, context in try Self.asset("app.css", type: "text/css; charset=utf-8") })
        // A public link's page: the same for every token (its script reads the token from the address).
        routes.on(.get, "/s/{token}", use: { request, context in try Self.asset("link.html", type: "text/html; charset=utf-8") })
        routes.on(.get, "/link.js", use: { request, context in try Self.asset("link.js", type: "text/javascript; charset=utf-8") })
    }

    static func asset(_ name: String, type: String) throws -> Response {
        guard let text = EmbeddedAssets.web[name] else { throw DriveError.notFound("The web app is not built into this server.") }
        return Response(
            status: .ok,
            headers: [
                .contentType: type, .contentSecurityPolicy: contentSecurityPolicy, .cacheControl: "no-cache",
                .init("Referrer-Policy")!: "no-referrer", .init("X-Frame-Options")!: "DENY",
            ],
            body: .init(byteBuffer: ByteBuffer(string: text)))
    }
}

/// `X-Content-Type-Options: nosniff` on every response, so nothing is ever sniffed into HTML.
struct SecurityHeadersMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var response = try await next(request, context)
        response.headers[.init("X-Content-Type-Options")!] = "nosniff"
        return response
    }
}
