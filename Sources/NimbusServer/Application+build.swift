import Foundation
import NimbusAPI
import Hummingbird
import HummingbirdCore
import HummingbirdWebSocket
import Logging
import Metrics
import NIOCore
import NIOConcurrencyHelpers
import Prometheus
import ServiceLifecycle

/// What ``buildApplication(configuration:)`` made, for tests that want to reach inside (store, routes).
public struct NimbusServerParts: Sendable {
    let dependencies: Dependencies
    public let routes: [RouteTable.Route]
    let maintenance: MaintenanceService

    /// The access decisions made since the last call, as `(user, item, action, allowed)` (with
    /// ``ServerConfiguration/recordsAccessDecisions``; empty otherwise).
    public func accessDecisions() -> [(userId: String, itemId: String, action: String, allowed: Bool)] {
        (dependencies.access.log?.take() ?? []).map { ($0.userId, $0.itemId, $0.action.rawValue, $0.allowed) }
    }

    /// Runs one maintenance pass now (tests move the clock, then call this).
    public func runMaintenance() async { await maintenance.runOnce() }

    /// How many blocks the blob store holds (all users).
    public func storedBlockCount() async throws -> Int { try await dependencies.blobs.storedBlockCount() }

    /// Closes the database's connections once the application has stopped.
    public func close() async {
        if let store = dependencies.store as? SQLMetadataStore { await store.database.close() }
    }
}

/// Builds the whole server: stores under `configuration.dataDirectory`, routes, background services.
///
/// `nimbus serve` and the tests call this same function.
public func buildApplication(configuration: ServerConfiguration) async throws -> (some ApplicationProtocol, NimbusServerParts) {
    var logger = Logger(label: "nimbus")
    logger.logLevel = configuration.logLevel
    let data = configuration.dataDirectory
    try FileManager.default.createDirectory(at: data, withIntermediateDirectories: true)
    guard configuration.chunkSize > 0, configuration.chunkSize % (256 * 1024) == 0 else {
        throw DriveError.badRequest("--chunk-size must be a positive multiple of 256 KiB (262144 bytes).")
    }
    _ = MetricsRegistry.shared  // before any store makes its metrics
    let opened = try BlobLocation.parse(configuration.blobs ?? "local").open(data: data, environment: configuration.environment)
    try opened.clearStaging()
    if let s3 = opened as? S3BlobStore {
        // A store that is down now does not stop the replica: /healthz says 503 until it answers.
        do { try await s3.ensureBucket() } catch { logger.warning("the blob store does not answer yet", metadata: ["error": "\(error)"]) }
    }
    let damage = DamageReports()
    let blobs: any BlobStore = MeteredBlobStore(opened, name: opened is S3BlobStore ? "s3" : "local", damage: damage)
    let store: SQLMetadataStore
    let notifier: any ChangeNotifier
    var services: [any Service] = []
    let secret: [UInt8]
    if let url = configuration.database {
        let location = try PostgresDatabase.Location.parse(url)
        let database = try await PostgresDatabase.open(location, logger: logger)
        let shared = PostgresChangeNotifier(location: location, logger: logger)
        store = SQLMetadataStore(database: database, blobs: blobs, notifier: shared, revisionRetention: configuration.revisionRetention)
        shared.latestSeq.withLockedValue { $0 = { [store] user in try await store.latestSeq(userId: user) } }
        notifier = shared
        services.append(shared)
        // One signing key for every replica, so a token issued by one is accepted by all.
        let made = Hex.encode(SecretFile.random())
        guard let key = [UInt8](hex: try await store.sharedSetting("jwt-secret", orStore: made)), key.count >= 32 else {
            throw DriveError.internalError("The database's jwt-secret setting is not a valid key.")
        }
        secret = key
    } else {
        let local = LocalChangeNotifier()
        // On a disk something filled to the brim, the reserve makes room for opening the database; it comes back
        // once there is room again.
        let reserve = DiskReserve(directory: data, minimumFreeSpace: configuration.minimumFreeSpace)
        if let free = DiskSpace.available(at: data.path), free < reserve.size { _ = reserve.release() }
        store = try SQLMetadataStore(
            path: data.appending(path: "nimbus.sqlite").path, blobs: blobs, notifier: local,
            revisionRetention: configuration.revisionRetention, reserve: reserve)
        reserve.replenish(spare: configuration.minimumFreeSpace)
        notifier = local
        secret = try SecretFile.loadOrCreate(at: data.appending(path: "jwt-secret"))
    }
    damage.setHandler { [store, logger, clock = configuration.clock] damaged in
        do {
            guard try await store.markDamaged(userId: damaged.user, hash: damaged.hash, now: clock.now()) else { return }
            let files = try await store.files(using: [(damaged.user, damaged.hash)])
            logger.error(
                "a stored block is damaged (its bytes no longer hash to its name): not served; uploading the file again repairs it",
                metadata: [
                    "user": "\(files.first?.username ?? damaged.user)", "block": "\(damaged.hash)",
                    "files": "\(files.map { $0.path + ($0.head ? "" : " (an older version)") })",
                ])
        } catch {
            logger.error("a damaged block could not be marked", metadata: ["block": "\(damaged.hash)", "error": "\(error)"])
        }
    }
    // Names written before search existed get their folded form (once: later writes fold their own).
    let folded = try await store.foldNames()
    if folded > 0 { logger.info("Folded \(folded) names for search.") }
    let tokens = await TokenService(secret: secret, lifetime: min(configuration.accessTokenLifetime, .seconds(900)).timeInterval)
    let access = AccessPolicy(log: configuration.recordsAccessDecisions ? AccessLog() : nil)
    let dependencies = Dependencies(store: store, blobs: blobs, tokens: tokens, notifier: notifier, configuration: configuration, access: access)

    let registry = MetricsRegistry.shared
    let router = Router(context: NimbusRequestContext.self)
    // Outermost: a request refused before its body was read is still answered to a client that writes it all first.
    router.add(middleware: LingeringCloseMiddleware())
    router.add(middleware: SecurityHeadersMiddleware())
    router.add(middleware: RequestLimitsMiddleware())
    router.add(middleware: ActingMiddleware())
    // WebDAV (/dav/) answers its own methods and paths before the /v1 router and its 405 logic.
    router.add(middleware: DAVMiddleware(dependencies: dependencies))
    // Nextcloud's own routes (status.php, OCS, the login flows, previews) for its apps.
    router.add(middleware: NextcloudMiddleware(dependencies: dependencies))
    let index = RouteIndex()
    router.add(middleware: ErrorMiddleware(routes: index))
    router.add(middleware: MetricsMiddleware())
    router.add(middleware: RequestLogMiddleware())
    var routes = RouteTable(router: router, index: index)
    AuthController(dependencies: dependencies).register(&routes)
    FilesController(dependencies: dependencies).register(&routes)
    SharingController(dependencies: dependencies).register(&routes)
    LinksController(dependencies: dependencies).register(&routes)
    PublicController(dependencies: dependencies).register(&routes)
    ContentController(dependencies: dependencies).register(&routes)
    UploadController(dependencies: dependencies, resumable: ResumableUploadController(dependencies: dependencies, hashes: RunningHashes())).register(&routes)
    ChangesController(dependencies: dependencies).register(&routes)
    FindingController(dependencies: dependencies, thumbnailer: Thumbnailer(logger: logger)).register(&routes)
    ZipController(dependencies: dependencies).register(&routes)
    BlocksController(dependencies: dependencies).register(&routes)
    ServiceController(dependencies: dependencies, registry: registry).register(&routes)
    WebController().register(&routes)

    let push = NotifyPush(dependencies: dependencies)
    let maintenance = MaintenanceService(store: store, configuration: configuration, logger: logger, blobsAreRemote: opened is S3BlobStore)
    let app = Application(
        router: router,
        // HTTP/1.1, and WebSocket upgrades for Nextcloud's notify_push (``NotifyPush``) only; a connection that never
        // sends anything is closed at the idle timeout and when the server stops (``ClosingUnusedConnections``).
        server: HTTPServerBuilder { responder in
            let idleTimeout = TimeAmount.seconds(Int64(configuration.idleTimeout.timeInterval))
            return ClosingUnusedConnections(
                inner: HTTP1WebSocketUpgradeChannel(
                    responder: responder,
                    configuration: .init(http1: .init(idleTimeout: idleTimeout), ws: .init(autoPing: .enabled(timePeriod: .seconds(30)))),
                    shouldUpgrade: { [push] request, channel, _ in push.shouldUpgrade(request, channel: channel) }),
                idleTimeout: idleTimeout)
        },
        configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: "nimbus"),
        services: services + [maintenance],
        onServerRunning: { channel in
            if let port = channel.localAddress?.port { await configuration.onServerRunning?(port) }
        },
        logger: logger)
    return (app, NimbusServerParts(dependencies: dependencies, routes: routes.routes, maintenance: maintenance))
}

/// The process-wide Prometheus registry; swift-metrics can be bootstrapped only once per process.
enum MetricsRegistry {
    static let shared: PrometheusCollectorRegistry = {
        let registry = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
        return registry
    }()
}
