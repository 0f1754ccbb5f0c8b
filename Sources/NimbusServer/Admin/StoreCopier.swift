import Crypto
import Foundation
import Logging
import NIOCore
import NIOPosix

/// `nimbus admin migrate`: copies an embedded store (the SQLite file and `blobs/` under `--data`) to PostgreSQL and,
/// optionally, an S3 bucket, then verifies the copy. Run it with the embedded server stopped.
///
/// Every row keeps its id — users, devices (so refresh tokens go on working), files, revisions, trash, upload
/// sessions, and the change feed with its sequence numbers (so clients' cursors go on working) — and the token
/// signing key moves into the database (so access tokens go on working): clients keep syncing without a resync.
/// Resumable: rows already copied are skipped (`ON CONFLICT DO NOTHING`), blocks already in the target are not sent
/// again, so running it again after an interruption finishes the job.
public enum StoreCopier {
    public struct Report: Sendable, CustomStringConvertible {
        /// Rows per table, in the source and in the target after the copy.
        public var rows: [(table: String, source: Int, target: Int)] = []
        public var blocksCopied = 0
        public var packsCopied = 0
        public var blocksVerified = 0
        public var bytesVerified: Int64 = 0

        public var description: String {
            var lines = rows.map { "\($0.table): \($0.source) rows → \($0.target)" }
            lines.append("blocks: \(blocksCopied) copied (and \(packsCopied) packs), \(blocksVerified) verified by SHA-256 (\(bytesVerified) bytes)")
            return lines.joined(separator: "\n")
        }
    }

    /// Tables in the order their rows can be inserted (users before what references them).
    static let tables = [
        "users", "devices", "login_failures", "files", "revisions", "revision_blocks", "packs", "blocks", "changes", "uploads", "dav_uploads", "dav_upload_chunks",
        "upload_blocks", "settings", "app_passwords", "login_flows", "dav_properties", "dav_locks", "deletion_log", "deletion_guard", "grants", "mounts", "links",
        "stars", "activity", "opened", "thumbnails",
    ]

    /// Tables without a key (so `ON CONFLICT DO NOTHING` cannot skip rows copied before): copied whole again each run.
    static let keyless: Set<String> = ["deletion_log"]

    /// Copies and verifies; `progress` gets a line per step. Throws (changing nothing more) when verification fails.
    public static func copyAndVerify(
        dataDirectory: URL, toDatabase: String, toBlobs: String?,
        environment: [String: String] = ProcessInfo.processInfo.environment, progress: @Sendable (String) -> Void = { _ in }
    ) async throws -> Report {
        let sourcePath = dataDirectory.appending(path: "nimbus.sqlite").path
        guard FileManager.default.fileExists(atPath: sourcePath) else {
            throw DriveError.badRequest("No embedded store at \(sourcePath): give the --data folder nimbus serve used.")
        }
        let source = try SQLiteDatabase(path: sourcePath)
        let sourceBlobs = try LocalBlobStore(root: dataDirectory)
        let target = try await PostgresDatabase.open(try PostgresDatabase.Location.parse(toDatabase), logger: Logger(label: "nimbus-migrate"))
        do {
            let targetBlobs: any BlobStore = try toBlobs.map { try BlobLocation.parse($0).open(data: dataDirectory, environment: environment) } ?? sourceBlobs
            let report = try await copy(from: source, sourceBlobs: sourceBlobs, to: target, targetBlobs: targetBlobs, dataDirectory: dataDirectory, progress: progress)
            await target.close()
            return report
        } catch {
            await target.close()
            throw error
        }
    }

    static func copy(
        from source: SQLiteDatabase, sourceBlobs: LocalBlobStore, to target: PostgresDatabase, targetBlobs: any BlobStore,
        dataDirectory: URL, progress: @Sendable (String) -> Void
    ) async throws -> Report {
        var report = Report()
        // Blocks first: a row in the target never names a block the target store lacks.
        let hashes = try await source.read { db in
            try db.fetchAll("SELECT user_id, hash, size, pack, pack_offset, pack_stored FROM blocks WHERE data IS NULL ORDER BY user_id, hash", []).map {
                (
                    user: try $0.get("user_id", as: String.self), hash: try $0.get("hash", as: String.self), size: try $0.get("size", as: Int64.self),
                    pack: try SQLMetadataStore.packLocation($0)
                )
            }
        }
        let packs = try await source.read { db in
            try db.fetchAll("SELECT user_id, id FROM packs ORDER BY user_id, id", []).map { (user: try $0.get("user_id", as: String.self), id: try $0.get("id", as: String.self)) }
        }
        if targetBlobs is LocalBlobStore {
            progress("blocks: staying in \(sourceBlobs.blobsDirectory) and \(sourceBlobs.packsDirectory)")
        } else {
            // Packs as they are (the rows that name places in them are copied unchanged).
            for pack in packs {
                let present = try await NIOThreadPool.singleton.runIfActive { try targetBlobs.containsPackBlocking(pack.id, user: pack.user) }
                guard !present else { continue }
                let staged = dataDirectory.appending(path: "tmp").path + "/migrate-" + randomToken()
                let from = sourceBlobs.packPath(pack.id, user: pack.user)
                try await NIOThreadPool.singleton.runIfActive {
                    let bytes = try POSIXFile.readAll(from)
                    let fd = try POSIXFile.openForWriting(staged)
                    defer { POSIXFile.closeFile(fd) }
                    try bytes.withUnsafeBytes { try POSIXFile.writeAll(fd, $0, path: staged) }
                }
                let place = PackLocation(pack: pack.id, offset: 0, stored: 0)
                try await targetBlobs.put([StagedBlock(ref: BlockRef(hash: "", size: 0, pack: place), path: staged)], user: pack.user)
                report.packsCopied += 1
            }
            for (index, block) in hashes.enumerated() where block.pack == nil {
                let present = try await NIOThreadPool.singleton.runIfActive { try targetBlobs.containsBlocking(block.hash, user: block.user) }
                if !present {
                    // Through a staging copy: put consumes its staged file.
                    let staged = dataDirectory.appending(path: "tmp").path + "/migrate-" + randomToken()
                    let from = sourceBlobs.path(of: block.hash, user: block.user)
                    try await NIOThreadPool.singleton.runIfActive {
                        // As the block is, not as the local store may keep it (compressed at rest).
                        let bytes = try StoredBlockCodec.expand(try POSIXFile.readAll(from), size: block.size, hash: block.hash)
                        let fd = try POSIXFile.openForWriting(staged)
                        defer { POSIXFile.closeFile(fd) }
                        try bytes.withUnsafeBytes { try POSIXFile.writeAll(fd, $0, path: staged) }
                    }
                    try await targetBlobs.put([StagedBlock(ref: BlockRef(hash: block.hash, size: block.size), path: staged)], user: block.user)
                    report.blocksCopied += 1
                }
                if (index + 1) % 100 == 0 { progress("blocks: \(index + 1) of \(hashes.count)") }
            }
            progress("blocks: \(hashes.count) in the target store (\(report.blocksCopied) copied now)")
        }
        // Rows, table by table, in pages, keeping every id.
        for table in tables {
            var last: Int64 = 0
            var copied = 0
            while true {
                let after = last
                let page = try await source.read { db in
                    try db.fetchAll("SELECT rowid AS nimbus_rowid, * FROM \(table) WHERE rowid > ? ORDER BY rowid LIMIT 500", [after])
                }
                guard let lastRow = page.last else { break }
                last = try lastRow.get("nimbus_rowid")
                let first = after == 0
                try await target.write { db in
                    if first, keyless.contains(table) { try db.perform("DELETE FROM \(table)", []) }
                    for row in page {
                        let names = row.columns.indexes.sorted { $0.value < $1.value }.map(\.key).filter { $0 != "nimbus_rowid" }
                        let values = try names.map { name -> any SQLArgument in try row.get(name, as: SQLValue.self) }
                        let placeholders = Array(repeating: "?", count: names.count).joined(separator: ", ")
                        try db.execute(
                            "INSERT INTO \(table) (\(names.joined(separator: ", "))) VALUES (\(placeholders)) ON CONFLICT DO NOTHING", values)
                    }
                }
                copied += page.count
                progress("\(table): \(copied) rows")
            }
        }
        // The change feed goes on from where it was; the signing key is the one clients' tokens were signed with.
        _ = try await target.write { db in
            try db.execute("SELECT setval(pg_get_serial_sequence('changes', 'seq'), GREATEST((SELECT MAX(seq) FROM changes), 1))", [])
            try db.execute("SELECT setval(pg_get_serial_sequence('activity', 'seq'), GREATEST((SELECT MAX(seq) FROM activity), 1))", [])
        }
        let secretFile = dataDirectory.appending(path: "jwt-secret")
        if let secret = try? String(contentsOf: secretFile, encoding: .utf8) {
            let hex = secret.trimmingCharacters(in: .whitespacesAndNewlines)
            _ = try await target.write { db in
                try db.execute("INSERT INTO settings (key, value) VALUES ('jwt-secret', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value", [hex])
            }
        }
        // Verify: the same number of rows everywhere, and every stored block's bytes hash to its name.
        for table in tables {
            let sourceCount = try await source.read { db in try db.value("SELECT COUNT(*) FROM \(table)", [], as: Int.self) ?? 0 }
            let targetCount = try await target.read { db in try db.value("SELECT COUNT(*) FROM \(table)", [], as: Int.self) ?? 0 }
            report.rows.append((table, sourceCount, targetCount))
            // The target's settings also hold the signing key moved from the jwt-secret file.
            guard table == "settings" ? targetCount >= sourceCount : targetCount == sourceCount else {
                throw DriveError.internalError(
                    "Verification failed: \(table) has \(sourceCount) rows here but \(targetCount) in the database (it must start empty: a new database, or ?schema=NAME).")
            }
        }
        for block in hashes {
            var hasher = SHA256()
            try await targetBlobs.read([BlockRef(hash: block.hash, size: block.size, pack: block.pack)], user: block.user, range: 0..<block.size) { buffer in
                buffer.withUnsafeReadableBytes { hasher.update(bufferPointer: $0) }
            }
            guard hasher.finalize().hexString == block.hash else {
                throw DriveError.internalError("Verification failed: block \(block.hash) of user \(block.user) does not hash to its name in the target store.")
            }
            report.blocksVerified += 1
            report.bytesVerified += block.size
        }
        progress("verified: \(report.rows.count) tables, \(report.blocksVerified) blocks")
        return report
    }
}

extension SQLValue: SQLArgument, SQLColumn {
    var sqlValue: SQLValue { self }
    init?(sqlValue: SQLValue) { self = sqlValue }
}
