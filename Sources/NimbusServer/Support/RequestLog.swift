import Hummingbird
import Logging

/// Logs each request (method and path, at debug level) with public links' tokens taken out (``LinkTokens``).
struct RequestLogMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        context.logger.debug("request", metadata: ["method": "\(request.method.rawValue)", "path": "\(LinkTokens.redacted(request.uri.path))"])
        return try await next(request, context)
    }
}

/// A link's token is a key to what it shares, so it never reaches a log: `/v1/public/<token>/…` and `/s/<token>` are
/// logged with `•` in its place.
enum LinkTokens {
    static func redacted(_ path: String) -> String {
        var parts = path.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        // "", "s", token — or "", "v1", "public", token, …
        if parts.count >= 3, parts[1] == "s" { parts[2] = "•" }
        if parts.count >= 4, parts[1] == "v1", parts[2] == "public" { parts[3] = "•" }
        return parts.joined(separator: "/")
    }
}
