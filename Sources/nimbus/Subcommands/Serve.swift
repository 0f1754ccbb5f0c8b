import ArgumentParser
import Foundation
import Hummingbird
import Logging
import NimbusAPI
import NimbusServer

/// `nimbus serve`: runs the Drive server on the embedded store (SQLite + blob folder under `--data`).
struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Run the Drive server.")

    @Option(help: "Data folder: database, blobs, JWT secret. Created on first start.")
    var data: String = "./nimbus-data"

    @Option(help: "Metadata database: the embedded SQLite file under --data (default), or postgres://USER@HOST:PORT/DB (password from PGPASSWORD or the URL; ?schema=NAME&pool=N) shared by replicas.")
    var database: String?

    @Option(help: "Block storage: blobs/ under --data (default), or s3://BUCKET[/PREFIX]?endpoint=URL&region=R (keys from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY).")
    var blobs: String?

    @Option(help: "Address to listen on.")
    var host: String = "127.0.0.1"

    @Option(help: "Port to listen on (0 picks a free one).")
    var port: Int = 8080

    @Option(help: "The address people and apps reach this server at, e.g. https://drive.example.com behind a proxy (the Nextcloud apps keep it after signing in); by default the address each request was sent to.")
    var publicUrl: String?

    @Flag(help: "Let anyone create an account with POST /v1/auth/register.")
    var allowRegistration = false

    @Option(help: "Resumable-upload chunk size in bytes (a multiple of 256 KiB, e.g. 8MiB).", transform: Serve.size)
    var chunkSize: Int64 = 8 * 1024 * 1024

    @Option(help: "Quota for users who register through the API (e.g. 10GiB); unlimited when absent.", transform: Serve.size)
    var defaultQuota: Int64?

    @Option(help: "Refuse uploads (507) that would leave less than this free on the data folder's disk (e.g. 1GiB).", transform: Serve.size)
    var minFreeSpace: Int64 = 64 * 1024 * 1024

    @Option(help: "Keep at least this many revisions per file.")
    var revisionsKeep: Int = 100

    @Option(help: "Also keep every revision younger than this many days.")
    var revisionsDays: Int = 30

    @Option(help: "Purge trashed items after this many days.")
    var trashDays: Int = 30

    @Option(help: "Re-read and check every stored block within this many days (bit rot found before anyone reads it); 0: never.")
    var scrubDays: Int = 30

    @Option(help: "Resumable upload sessions expire after this many hours without progress.")
    var uploadExpiryHours: Int = 24

    @Option(help: "Keep the change feed's record of deletions this many days; older cursors get 410.")
    var changeRetentionDays: Int = 30

    @Option(help: "A long-poll answers after at most this many seconds (1 to 60; lower it behind a proxy that cuts idle answers sooner).")
    var longPollSeconds: Int = 60

    @Option(help: "Mass-deletion breaker: pause a device that deletes more than this share of a user's items (with --mass-deletion-minimum) within an hour.")
    var massDeletionFraction: Double = 0.5

    @Option(help: "Mass-deletion breaker: ... and at least this many items.")
    var massDeletionMinimum: Int = 1000

    @Option(help: "Mass-deletion breaker: pause a device that deletes more than this many items within an hour, whatever the share.")
    var massDeletionPerHour: Int = 10000

    @Flag(help: "Turn the mass-deletion breaker off (deletions are never paused for confirmation).")
    var noMassDeletionBreaker = false

    @Option(help: "Log level: trace, debug, info, notice, warning, error, critical.")
    var logLevel: String = "info"

    static func size(_ text: String) throws -> Int64 {
        guard let value = ByteCount.parse(text) else { throw ValidationError("'\(text)' is not a size (try 8MiB or 1048576).") }
        return value
    }

    func validate() throws {
        guard chunkSize > 0, chunkSize % (256 * 1024) == 0 else {
            throw ValidationError("--chunk-size must be a positive multiple of 256 KiB (262144 bytes).")
        }
        if let publicUrl {
            guard let url = URL(string: publicUrl), ["http", "https"].contains(url.scheme ?? ""), url.host != nil, url.query == nil else {
                throw ValidationError("--public-url is an http or https address, e.g. https://drive.example.com.")
            }
        }
        guard (0...65535).contains(port) else { throw ValidationError("--port must be 0 to 65535.") }
        guard (0...3650).contains(scrubDays) else { throw ValidationError("--scrub-days must be 0 (never) to 3650.") }
        guard (1...60).contains(longPollSeconds) else { throw ValidationError("--long-poll-seconds must be 1 to 60.") }
        guard massDeletionFraction > 0, massDeletionFraction <= 1 else { throw ValidationError("--mass-deletion-fraction must be over 0 and at most 1 (e.g. 0.5).") }
        guard massDeletionMinimum >= 1, massDeletionPerHour >= 1 else {
            throw ValidationError("--mass-deletion-minimum and --mass-deletion-per-hour must be at least 1 (--no-mass-deletion-breaker turns it off).")
        }
        guard revisionsKeep >= 1 else { throw ValidationError("--revisions-keep must be at least 1.") }
        guard Logger.Level(rawValue: logLevel) != nil else { throw ValidationError("Unknown --log-level '\(logLevel)'.") }
    }

    func run() async throws {
        var configuration = ServerConfiguration(dataDirectory: URL(fileURLWithPath: data))
        configuration.host = host
        configuration.database = database
        configuration.blobs = blobs
        configuration.port = port
        configuration.allowRegistration = allowRegistration
        configuration.publicURL = publicUrl.map { $0.hasSuffix("/") ? String($0.dropLast()) : $0 }
        configuration.chunkSize = chunkSize
        configuration.defaultQuota = defaultQuota
        configuration.minimumFreeSpace = minFreeSpace
        configuration.longPollLimit = .seconds(longPollSeconds)
        configuration.revisionRetention = RevisionRetention(keepLast: revisionsKeep, keepFor: .seconds(revisionsDays * 86400))
        configuration.trashRetention = .seconds(trashDays * 86400)
        configuration.scrubDays = scrubDays
        configuration.uploadExpiry = .seconds(uploadExpiryHours * 3600)
        configuration.changeRetention = .seconds(changeRetentionDays * 86400)
        configuration.massDeletion = MassDeletionLimits(
            enabled: !noMassDeletionBreaker,
            threshold: MassDeletionThreshold(fraction: massDeletionFraction, minimum: massDeletionMinimum, absolute: massDeletionPerHour))
        configuration.logLevel = Logger.Level(rawValue: logLevel) ?? .info
        configuration.onServerRunning = { port in
            let line = "nimbus serving \(URL(fileURLWithPath: data).standardizedFileURL.path) on http://\(host):\(port)\n"
            FileHandle.standardOutput.write(Data(line.utf8))
        }
        let (app, _) = try await buildApplication(configuration: configuration)
        try await app.runService()
    }
}
