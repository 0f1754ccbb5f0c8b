import ArgumentParser
import Foundation
import NimbusAPI
import NimbusServer

/// `nimbus admin ...`: operations on a server's stores.
struct AdminCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "admin", abstract: "Operate on a server's stores.", subcommands: [Migrate.self, Verify.self])

    struct Verify: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Re-read every stored block, check it against its SHA-256, and list the files that cannot be read whole.",
            discussion:
                "Works while the server runs. Damaged blocks are marked (never served); uploading the same content again, from any "
                + "device that still has it, repairs every file and version that used them, and a later verify says so. Exits 1 "
                + "when any file is damaged.")

        @Option(help: "The server's data folder.")
        var data: String = "./nimbus-data"

        @Option(help: "The server's PostgreSQL database (as given to nimbus serve --database), instead of the data folder's.")
        var database: String?

        @Option(help: "The server's block store (as given to nimbus serve --blobs); the data folder's when absent.")
        var blobs: String?

        @Flag(help: "Print the report as JSON.")
        var json = false

        func run() async throws {
            let report: Admin.Verification
            do {
                report = try await Admin.verify(
                    dataDirectory: URL(fileURLWithPath: data), database: database, blobs: blobs,
                    progress: { line in FileHandle.standardError.write(Data((line + "\n").utf8)) })
            } catch {
                throw CLIError("\(error)")
            }
            if json {
                try Output.json(report)
            } else {
                print("Checked \(report.checkedBlocks) blocks (\(ByteCount.format(report.checkedBytes))).")
                if report.healedBlocks > 0 {
                    print("\(report.healedBlocks) blocks damaged before are whole again (healed: the content was uploaded again):")
                    for file in report.healedFiles {
                        print("  \(file.username)  \(file.path)  (revision \(file.revisionId)\(file.head ? "" : ", an older version"))")
                    }
                }
                if report.damagedFiles.isEmpty {
                    print(report.damagedBlocks == 0 ? "Every block is whole." : "\(report.damagedBlocks) damaged blocks, used by no file.")
                } else {
                    print("\(report.damagedBlocks) damaged blocks; these files cannot be read whole (their damaged parts are never served):")
                    for file in report.damagedFiles {
                        print("  \(file.username)  \(file.path)  (revision \(file.revisionId)\(file.head ? "" : ", an older version"))")
                    }
                    print("Upload them again from a device that has them (a sync, nimbus put, the web app) to repair them.")
                }
            }
            if !report.damagedFiles.isEmpty { throw ExitCode(1) }
        }
    }

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
