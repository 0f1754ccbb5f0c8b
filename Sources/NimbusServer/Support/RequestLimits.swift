import Hummingbird

/// Caps on what a request may carry before any handler reads it: header fields 32 KiB in all and 16 KiB for one
/// (431, like nginx's and Apache's defaults give 400/431 well below NIO's own 80 KiB parser limit, beyond which
/// the connection is answered 400 and closed), and a request target of 16 KiB (414). A JSON body's cap is the
/// request context's (1 MiB, 413); content routes stream theirs.
struct RequestLimitsMiddleware<Context: RequestContext>: RouterMiddleware {
    static var maxHeaderBytes: Int { 32 * 1024 }
    static var maxFieldBytes: Int { 16 * 1024 }
    static var maxTargetBytes: Int { 16 * 1024 }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        if let refusal = Self.refusal(request) { return try refusal.response(from: request, context: context) }
        return try await next(request, context)
    }

    static func refusal(_ request: Request) -> DriveError? {
        var total = 0
        for field in request.headers {
            // As on the wire: "Name: value\r\n".
            let size = field.name.rawName.utf8.count + field.value.utf8.count + 4
            guard size <= maxFieldBytes else {
                return .headersTooLarge("The \(field.name.rawName) header is over \(maxFieldBytes / 1024) KiB.")
            }
            total += size
        }
        guard total <= maxHeaderBytes else {
            return .headersTooLarge("The request's headers are over \(maxHeaderBytes / 1024) KiB in all.")
        }
        guard request.uri.description.utf8.count <= maxTargetBytes else {
            return .uriTooLong("The request's path and query are over \(maxTargetBytes / 1024) KiB.")
        }
        return nil
    }
}
