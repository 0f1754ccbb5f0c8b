import ArgumentParser
import Foundation
import NimbusServer

/// `nimbus admin ...`: operations on a server's stores.
struct AdminCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "admin", abstract: "Operate on a server's stores.", subcommands: [Migrate.self])

    struct Migrate: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Copy an embedded store (SQLite + blobs/) to PostgreSQL and S3, then verify it. Stop the server first.",
            discussion:
                "Everything keeps its id: users, devices and tokens, files, revisions, trash, upload sessions and the change feed, "
                + "so clients go on syncing without a resync. Interrupted? Run it again: what was copied is skipped. "
                + "Then start every replica with the same --database and --blobs.")

        @Option(help: "The embedded server's data folder.")
        var data: String = "./nimbus-data"

        @Option(help: "The PostgreSQL database to copy to (postgres://USER@HOST:PORT/DB; it must hold no Nimbus data yet).")
        var toDatabase: String

        @Option(help: "The S3 store to copy blocks to (s3://BUCKET[/PREFIX]?endpoint=URL&region=R); blocks stay in --data when absent.")
        var toBlobs: String?

        func run() async throws {
            do {
                let report = try await StoreCopier.copyAndVerify(
                    dataDirectory: URL(fileURLWithPath: data), toDatabase: toDatabase, toBlobs: toBlobs,
                    progress: { line in FileHandle.standardError.write(Data((line + "\n").utf8)) })
                print(report)
                print("Done: the copy is verified. Start the server with --database \(toDatabase)" + (toBlobs.map { " --blobs '\($0)'" } ?? " --data \(data)"))
            } catch {
                throw CLIError("\(error)")
            }
        }
    }
}
