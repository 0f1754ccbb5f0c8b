import ArgumentParser
import Foundation
import NimbusAPI
import NimbusServer

/// `nimbus admin ...`: operations on a server's stores.
struct AdminCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "admin", abstract: "Operate on a server's stores.", subcommands: [Migrate.self, Verify.self, BackupCommand.self, RestoreCommand.self])

    struct BackupCommand: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "backup",
            abstract: "Copy a running embedded server's store (database, packs, blocks) consistently into a folder; again: only what is new.",
            discussion:
                "The copy is of one moment: every upload acknowledged before the backup began is in it, whatever is in flight meanwhile. "
                + "Cut short, the folder still holds the previous complete backup; run it again. Restore with 'nimbus admin restore DEST "
                + "--data NEWDIR'. With PostgreSQL and S3, use pg_dump or point-in-time recovery, and bucket versioning (docs/operating.md).")

        @Argument(help: "The backup folder: empty or absent, or an earlier backup of this server (brought up to date).")
        var destination: String

        @Option(help: "The server's data folder.")
        var data: String = "./nimbus-data"

        @Option(help: "A PostgreSQL server's database: refused, with what to use instead.")
        var database: String?

        func run() async throws {
            if database != nil {
                throw CLIError(
                    "nimbus admin backup copies an embedded server (SQLite and its data folder). For PostgreSQL use pg_dump, or "
                        + "continuous archiving for point-in-time recovery; for S3 blocks turn on bucket versioning (or replicate the "
                        + "bucket). docs/operating.md says how, in that order. Nothing was copied.")
            }
            let report: Backup.Report
            do {
                report = try Backup.run(
                    data: URL(fileURLWithPath: data), to: URL(fileURLWithPath: destination),
                    progress: { line in FileHandle.standardError.write(Data((line + "\n").utf8)) })
            } catch {
                throw CLIError("\(error)")
            }
            print(
                "Backed up \(data) into \(destination): \(report.users) users, \(report.files) packs and block files (\(ByteCount.format(report.totalBytes))); "
                    + "copied \(report.copiedFiles) (\(ByteCount.format(report.copiedBytes))), \(report.keptFiles) there already, \(report.removedFiles) no longer needed removed.")
        }
    }

    struct RestoreCommand: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "restore", abstract: "Make a new data folder from a backup; then start the server with --data on it.")

        @Argument(help: "The backup folder (made by nimbus admin backup).")
        var backup: String

        @Option(help: "The data folder to make: absent or empty (a folder holding a server's data is refused).")
        var data: String

        func run() async throws {
            do {
                let count = try Backup.restore(
                    from: URL(fileURLWithPath: backup), to: URL(fileURLWithPath: data),
                    progress: { line in FileHandle.standardError.write(Data((line + "\n").utf8)) })
                print("Restored \(count) files into \(data). Start the server with: nimbus serve --data \(data)")
            } catch {
                throw CLIError("\(error)")
            }
        }
    }

    struct Verify: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Re-read every stored block, check it against its SHA-256, and list the files that cannot be read whole.",
            discussion:
                "Works while the server runs. Damaged blocks are marked (never served); uploading the same content again, from any "
                + "device that still has it, repairs every file and version that used them, and a later verify says so. Exits 1 "
                + "when any file is damaged.")

        @OptionGroup var store: ServerStore

        @Option(help: "The server's block store (as given to nimbus serve --blobs); the data folder's when absent.")
        var blobs: String?

        @Flag(help: "Print the report as JSON.")
        var json = false

        /// A file revision as the report lists it: who, where, which version.
        static func line(_ file: AffectedFile) -> String {
            "  \(file.username)  \(file.path)  (revision \(file.revisionId)\(file.head ? "" : ", an older version"))"
        }

        func run() async throws {
            let report: Admin.Verification
            do {
                report = try await Admin.verify(
                    dataDirectory: store.folder, database: store.database, blobs: blobs,
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
                        print(Self.line(file))
                    }
                }
                if report.damagedFiles.isEmpty {
                    print(report.damagedBlocks == 0 ? "Every block is whole." : "\(report.damagedBlocks) damaged blocks, used by no file.")
                } else {
                    print("\(report.damagedBlocks) damaged blocks; these files cannot be read whole (their damaged parts are never served):")
                    for file in report.damagedFiles {
                        print(Self.line(file))
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
