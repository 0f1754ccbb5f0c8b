import Foundation
import Logging

/// Everything `nimbus serve` can be told; tests build one with a temporary data folder and port 0.
public struct ServerConfiguration: Sendable {
    /// Root of the embedded store: `nimbus.sqlite`, `blobs/`, `tmp/`, `jwt-secret`.
    public var dataDirectory: URL
    /// Metadata database: `nil` for the embedded SQLite file under ``dataDirectory``, or
    /// `postgres://USER[:PASSWORD]@HOST:PORT/DB[?schema=S&pool=N]` (password also from `PGPASSWORD`), shared by replicas.
    public var database: String?
    /// Block storage: `nil` for `blobs/` under ``dataDirectory``, or `s3://BUCKET[/PREFIX]?endpoint=URL&region=R`
    /// (keys from `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` in ``environment``).
    public var blobs: String?
    /// Where the S3 keys of ``blobs`` are read: the process's environment (tests give theirs here rather than
    /// `setenv`, which races every thread reading the environment — a child process being started, say).
    public var environment: [String: String] = ProcessInfo.processInfo.environment
    public var host: String = "127.0.0.1"
    public var port: Int = 8080
    /// The address people and apps reach this server at (`https://drive.example.com`, behind a proxy), for the
    /// addresses the server hands out (Nextcloud's Login Flow: its poll endpoint, its login page, the server the app
    /// keeps). nil: the request's own `Host`, with `https` when a proxy says `X-Forwarded-Proto: https`.
    public var publicURL: String?
    /// When false, `POST /v1/auth/register` answers 403 and users are added with `nimbus user add`.
    public var allowRegistration: Bool = false
    /// Resumable upload chunk size: a multiple of 256 KiB (default 8 MiB).
    public var chunkSize: Int64 = 8 * 1024 * 1024
    /// Uploads are refused (507) when they would leave less than this free on the disk of the embedded database or
    /// block folder, so sign-ins, deletions and emptying the trash always have room.
    public var minimumFreeSpace: Int64 = 64 * 1024 * 1024
    /// Largest file accepted (10 GiB).
    public var maxUploadSize: Int64 = 10 * 1024 * 1024 * 1024
    /// Quota for users that register through the API (`nil` = unlimited).
    public var defaultQuota: Int64?
    public var revisionRetention = RevisionRetention()
    /// Trashed items are purged after this long.
    public var trashRetention: Duration = .seconds(30 * 24 * 3600)
    /// Resumable upload sessions expire after this long.
    public var uploadExpiry: Duration = .seconds(24 * 3600)
    /// Change-feed rows for deleted files are compacted after this long; older cursors get 410.
    public var changeRetention: Duration = .seconds(30 * 24 * 3600)
    /// How long the activity history and "recent" remember what happened.
    public var activityRetention: Duration = .seconds(90 * 24 * 3600)
    /// Blocks nothing references any more are deleted from the blob store this long after (an upload in flight
    /// may still adopt them meanwhile; a re-upload of recently deleted content is deduplicated).
    public var blockGracePeriod: Duration = .seconds(24 * 3600)
    /// The maintenance pass re-reads a slice of the stored blocks each time, so that every block is checked against
    /// its SHA-256 within this many days (at least 100 blocks a pass: a small store is done sooner); 0: never.
    public var scrubDays = 30
    /// Blocks freed by a deletion (a file purged, the trash emptied, a revision pruned, an upload cancelled) are
    /// deleted this long after, so the space is usable again soon. nil: a minute with the local blob store (a read
    /// already running keeps the packs it has open: unlinking is safe under open readers), an hour with S3 (its reads
    /// are ranged `GET`s issued as a download goes, and an object deleted meanwhile would cut a download short; the
    /// server's own disk is not where S3 blocks live, so nothing waits for that space).
    public var freedBlockGracePeriod: Duration?
    /// How often the maintenance service looks whether blocks freed in this process are due for a sweep.
    public var freedSweepCheck: Duration = .seconds(5)
    /// Access tokens live this long (at most 15 minutes).
    public var accessTokenLifetime: Duration = .seconds(15 * 60)
    /// Refresh tokens expire when unused for this long.
    public var refreshTokenLifetime: Duration = .seconds(90 * 24 * 3600)
    /// `/healthz` answers 503 when the database or the blob store does not answer within this.
    public var healthCheckBudget: Duration = .seconds(3)
    /// A refresh retried this soon with the token it exchanged (its answer was lost, or parallel refreshes raced)
    /// gets the same new refresh token back instead of signing the device out as a replay.
    public var refreshRetryGrace: Duration = .seconds(60)
    /// Failed logins before a username is locked out for a while (429 + Retry-After).
    public var loginFailuresAllowed: Int = 5
    public var loginLockout: Duration = .seconds(60)
    /// When one device's deletions pause until the user confirms (409 `mass_deletion_paused`).
    public var massDeletion = MassDeletionLimits()
    /// bcrypt cost (≥ 10).
    public var bcryptCost: UInt8 = 10
    /// Connections idle this long are closed.
    public var idleTimeout: Duration = .seconds(90)
    /// How often background services (trash purge, expired uploads, compaction) run.
    public var maintenanceInterval: Duration = .seconds(600)
    /// A long-poll (`GET /v1/changes?timeout=S`) waits at most this long (≤ 60 s), whatever `S` asks for.
    public var longPollLimit: Duration = .seconds(60)
    /// SSE heartbeat period.
    public var heartbeatInterval: Duration = .seconds(15)
    public var clock: any WallClock = SystemWallClock()
    /// Keep every access decision (who, which item, which action, allowed or not) for a test to read
    /// (``NimbusServerParts/accessDecisions()``).
    public var recordsAccessDecisions = false
    /// Called once the server listens, with the bound port (useful with port 0).
    public var onServerRunning: (@Sendable (Int) async -> Void)?
    public var logLevel: Logger.Level = .info

    public init(dataDirectory: URL) {
        self.dataDirectory = dataDirectory
    }
}

/// The server's source of "now": tests inject a clock they can move forward.
public protocol WallClock: Sendable {
    func now() -> Date
}

public struct SystemWallClock: WallClock {
    public init() {}
    public func now() -> Date { Date() }
}

extension Duration {
    var timeInterval: TimeInterval {
        let (seconds, attoseconds) = components
        return TimeInterval(seconds) + TimeInterval(attoseconds) / 1e18
    }
}
