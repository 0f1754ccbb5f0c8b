import Foundation
import Hummingbird
import NimbusAPI
import Prometheus

/// `/v1/about`, `/healthz`, `/metrics`, `/openapi.yaml`.
struct ServiceController: Sendable {
    let dependencies: Dependencies
    let registry: PrometheusCollectorRegistry

    func register(_ routes: inout RouteTable) {
        routes.on(Routes.about, use: about)
        routes.on(.get, "/healthz", use: health)
        routes.on(.get, "/metrics", use: metrics)
        routes.on(.get, "/openapi.yaml", use: openAPI)
    }

    @Sendable func about(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        let root = try await dependencies.root(for: me, .read)
        guard let user = try await dependencies.accounts.user(id: root.userId) else { throw DriveError.unauthorized() }
        let about = About(
            userId: user.id, username: user.username, quota: .init(used: user.usedBytes, limit: user.quotaLimit),
            maxUploadSize: dependencies.configuration.maxUploadSize, chunkSize: dependencies.configuration.chunkSize, apiVersion: "v1")
        return try JSONResponse.make(about)
    }

    /// 200 `{"status":"ok"}` when the database and the blob store answer (within 3 s each); otherwise 503 with
    /// `Retry-After` and, per store, `"ok"` or why it is not (a load balancer takes the replica out meanwhile).
    @Sendable func health(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let files = dependencies.files, blobs = dependencies.blobs
        let budget = dependencies.configuration.healthCheckBudget
        async let database = Self.problem(within: budget) { _ = try await files.latestSeq(userId: "") }
        async let blobStore = Self.problem(within: budget) { try await blobs.checkReachable() }
        let (databaseProblem, blobProblem) = await (database, blobStore)
        guard databaseProblem != nil || blobProblem != nil else { return try JSONResponse.make(["status": "ok"]) }
        var response = try JSONResponse.make(
            ["status": "unavailable", "database": databaseProblem ?? "ok", "blobs": blobProblem ?? "ok"], status: .serviceUnavailable)
        response.headers[.retryAfter] = "5"
        return response
    }

    /// Why `check` failed or did not answer within `budget`, or `nil` if it answered.
    static func problem(within budget: Duration, _ check: @escaping @Sendable () async throws -> Void) async -> String? {
        await withTaskGroup(of: String?.self) { group in
            group.addTask {
                do {
                    try await check()
                    return nil
                } catch let error as DriveError {
                    return error.body.error.message
                } catch {
                    return "\(error)"
                }
            }
            group.addTask {
                try? await Task.sleep(for: budget)
                return "no answer within \(budget)"
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
    }

    @Sendable func metrics(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        var buffer: [UInt8] = []
        registry.emit(into: &buffer)
        return Response(
            status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
            body: .init(byteBuffer: ByteBuffer(bytes: buffer)))
    }

    @Sendable func openAPI(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        Response(
            status: .ok, headers: [.contentType: "application/yaml; charset=utf-8"],
            body: .init(byteBuffer: ByteBuffer(string: EmbeddedAssets.openAPI)))
    }
}
