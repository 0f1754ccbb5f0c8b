import Hummingbird
import NIOConcurrencyHelpers

/// Who the request being served acts for, for the activity history: each request gets one (``ActingMiddleware``),
/// filled in once its principal is known (``Dependencies/principal(_:)``, Basic sign-in), and the store reads it
/// when it writes (``SQLMetadataStore/write(user:_:)``). Nothing decides anything by it: access is the access
/// decision's, with the principal the route holds.
final class Acting: Sendable {
    @TaskLocal static var current: Acting?

    private let held = NIOLockedValueBox<Principal?>(nil)

    var principal: Principal? { held.withLockedValue { $0 } }

    func record(_ principal: Principal) { held.withLockedValue { $0 = principal } }
}

/// Gives each request its ``Acting``.
struct ActingMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        try await Acting.$current.withValue(Acting()) { try await next(request, context) }
    }
}
