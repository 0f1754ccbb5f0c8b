import Foundation
import Hummingbird
import NimbusAPI
import Prometheus

/// `/v1/about`, `/healthz`, `/metrics`, `/openapi.yaml`.
struct ServiceController: Sendable {
    let drive: Drive
    let registry: PrometheusCollectorRegistry

    func register(_ routes: inout RouteTable) {
        routes.on(.get, "/v1/about", use: about)
        routes.on(.get, "/healthz", use: health)
        routes.on(.get, "/metrics", use: metrics)
        routes.on(.get, "/openapi.yaml", use: openAPI)
    }

    @Sendable func about(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await drive.identity(request)
        guard let user = try await drive.store.user(id: me.userId) else { throw DriveError.unauthorized() }
        let about = About(
            userId: user.id, username: user.username, quota: .init(used: user.usedBytes, limit: user.quotaLimit),
            maxUploadSize: drive.configuration.maxUploadSize, chunkSize: drive.configuration.chunkSize, apiVersion: "v1")
        return try JSONResponse.make(about)
    }

    @Sendable func health(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        _ = try await drive.store.latestSeq(userId: "")
        return try JSONResponse.make(["status": "ok"])
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
