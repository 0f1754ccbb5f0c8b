#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import GRDB
import NimbusAPI

/// `nimbus admin backup` and `restore`: a consistent copy of an embedded server's store (SQLite + the packs and
/// blocks it names), taken while the server runs.
///
/// 1. The database is copied through SQLite's online backup inside one read transaction: a snapshot of one moment,
///    with every upload acknowledged before it (the server is not paused; its writes go on beside it).
/// 2. The packs and block files that snapshot names are copied — those the folder does not have yet: packs are never
///    changed once written, so a second backup into the same folder copies only new ones — each to a temporary name,
///    fsynced, then renamed.
/// 3. Only then does the snapshot take its place as `nimbus.sqlite` (fsynced, renamed): a backup cut short (`kill -9`,
///    a full disk) leaves the previous complete one as it was, and running it again finishes the job. Then the files
///    the new snapshot no longer names are removed.
///
/// If the server deletes a pack the snapshot names while it is being copied (compaction moved its blocks, a sweep),
/// a new snapshot is taken and the copy goes on from there.
public enum Backup {
    /// The file that marks a folder as a Nimbus backup (a folder holding anything else is refused).
    static let marker = "nimbus-backup.json"

    public struct Report: Sendable, Codable {
        public var files: Int
        public var users: Int
        public var copiedFiles: Int
        public var copiedBytes: Int64
        /// Packs and block files the backup had already (copied by an earlier backup into the same folder).
        public var keptFiles: Int
        public var removedFiles: Int
        public var totalBytes: Int64
    }

    struct Marker: Codable {
        var format = 1
        var createdAt: Date
        var source: String
        var files: Int
        var bytes: Int64
    }

    /// Backs up the data folder `data` into `destination` (made if absent; an earlier backup there is brought up to
    /// date). `progress` gets a line now and then.
    public static func run(data: URL, to destination: URL, progress: @escaping @Sendable (String) -> Void = { _ in }) throws -> Report {
        let source = data.standardizedFileURL.resolvingSymlinksInPath()
        let target = destination.standardizedFileURL.resolvingSymlinksInPath()
        let database = source.appending(path: "nimbus.sqlite").path
        guard FileManager.default.fileExists(atPath: database) else {
            throw DriveError.notFound("\(source.path) holds no Nimbus server (no nimbus.sqlite); pass the server's --data folder.")
        }
        guard target.path != source.path, !target.path.hasPrefix(source.path + "/"), !source.path.hasPrefix(target.path + "/") else {
            throw DriveError.badRequest("The backup must go outside the data folder (\(source.path)), on another disk if you can.")
        }
        try refuseForeign(target)
        try FileManager.default.createDirectory(at: target, withIntermediateDirectories: true)
        let partial = target.appending(path: "nimbus.sqlite.partial").path
        var report = Report(files: 0, users: 0, copiedFiles: 0, copiedBytes: 0, keptFiles: 0, removedFiles: 0, totalBytes: 0)
        for attempt in 1...5 {
            try? FileManager.default.removeItem(atPath: partial)
            try snapshot(database, into: partial)
            progress("database copied; copying the blocks it names…")
            let (needed, users) = try files(named: partial)
            var vanished = false
            report = Report(files: needed.count, users: users, copiedFiles: 0, copiedBytes: 0, keptFiles: 0, removedFiles: 0, totalBytes: 0)
            var last = Date()
            for relative in needed {
                let from = source.appending(path: relative).path
                let to = target.appending(path: relative).path
                let size: Int64
                do { size = try fileSize(from) } catch let failure as POSIXFile.Failure where failure.code == ENOENT {
                    vanished = true  // deleted since the snapshot: a newer snapshot names where its blocks went
                    break
                }
                report.totalBytes += size
                if (try? fileSize(to)) == size {
                    report.keptFiles += 1
                    continue
                }
                do { try copy(from, to: to) } catch let failure as POSIXFile.Failure where failure.code == ENOENT && !POSIXFile.exists(from) {
                    vanished = true
                    break
                }
                report.copiedFiles += 1
                report.copiedBytes += size
                if Date().timeIntervalSince(last) >= 2 {
                    last = Date()
                    progress("copied \(report.copiedFiles) files (\(ByteCount.format(report.copiedBytes)))…")
                }
            }
            if vanished {
                progress("the server moved blocks meanwhile; taking a newer snapshot (\(attempt))…")
                continue
            }
            for name in ["jwt-secret"] where FileManager.default.fileExists(atPath: source.appending(path: name).path) {
                let to = target.appending(path: name).path
                try? POSIXFile.remove(to)
                try copy(source.appending(path: name).path, to: to)
            }
            let marker = Marker(createdAt: Date(), source: source.path, files: needed.count, bytes: report.totalBytes)
            try POSIXFile.writeDurably(try JSONEncoder.nimbus.encode(marker), to: target.appending(path: Self.marker).path)
            // Last: the snapshot becomes the backup's database (everything it names is there).
            let fd = try POSIXFile.openForReading(partial)
            try POSIXFile.sync(fd, path: partial)
            POSIXFile.closeFile(fd)
            try POSIXFile.move(partial, to: target.appending(path: "nimbus.sqlite").path)
            try POSIXFile.syncDirectory(target.path)
            // After the switch: until it, the previous backup's database named some of these.
            report.removedFiles = try prune(target, keeping: Set(needed))
            return report
        }
        throw DriveError.unavailable("The server kept moving blocks while they were copied; run the backup again.", retryAfter: 60)
    }

    /// Makes `data` (absent or empty) a data folder from the backup at `backup`: the database, the packs and blocks,
    /// the token key. A folder that holds a server's data already is refused — restoring over a live server would
    /// mix two stores.
    public static func restore(from backup: URL, to data: URL, progress: @escaping @Sendable (String) -> Void = { _ in }) throws -> Int {
        let backup = backup.standardizedFileURL.resolvingSymlinksInPath()
        let data = data.standardizedFileURL.resolvingSymlinksInPath()
        guard FileManager.default.fileExists(atPath: backup.appending(path: marker).path),
            FileManager.default.fileExists(atPath: backup.appending(path: "nimbus.sqlite").path)
        else {
            throw DriveError.notFound("\(backup.path) is not a complete Nimbus backup (no \(marker) and nimbus.sqlite); make one with nimbus admin backup.")
        }
        if let present = try? FileManager.default.contentsOfDirectory(atPath: data.path), !present.isEmpty {
            throw DriveError.conflict(
                "\(data.path) is not empty\(present.contains("nimbus.sqlite") ? " (it holds a server's data)" : ""); restore into an empty or new folder, then start the server with --data on it.")
        }
        try FileManager.default.createDirectory(at: data, withIntermediateDirectories: true)
        var count = 0
        var last = Date()
        let names = try relativeFiles(under: backup).filter { $0 != marker && !$0.hasSuffix(".partial") && !$0.hasSuffix(".tmp") && !$0.contains("/.copy-") }
        for relative in names {
            try copy(backup.appending(path: relative).path, to: data.appending(path: relative).path)
            count += 1
            if Date().timeIntervalSince(last) >= 2 {
                last = Date()
                progress("restored \(count) of \(names.count) files…")
            }
        }
        try POSIXFile.syncDirectory(data.path)
        return count
    }

    /// A folder that holds files and is not a backup is someone's: nothing is written into it. Nor into a backup a
    /// server has been started on (`nimbus serve --data` on it: the disk reserve it makes, or an open database's
    /// journal, is there): that is a live data folder now. (`nimbus admin verify --data` on a backup leaves it one.)
    static func refuseForeign(_ target: URL) throws {
        guard let present = try? FileManager.default.contentsOfDirectory(atPath: target.path), !present.isEmpty else { return }
        if present.contains(where: { ["reserve", "nimbus.sqlite-wal", "nimbus.sqlite-shm"].contains($0) }) {
            throw DriveError.conflict(
                "\(target.path) is a server's data folder (a server has run on it); back up into an empty folder or an earlier backup.")
        }
        guard present.contains(marker) || present.contains("nimbus.sqlite.partial") else {
            throw DriveError.conflict(
                "\(target.path) is not empty and is not a Nimbus backup; back up into an empty folder, or into an earlier backup of this server to bring it up to date.")
        }
    }

    /// The database as of one moment, through SQLite's online backup inside one read transaction.
    static func snapshot(_ database: String, into partial: String) throws {
        var configuration = Configuration()
        configuration.readonly = true
        configuration.busyMode = .timeout(30)
        let source = try DatabasePool(path: database, configuration: configuration)
        defer { try? source.close() }
        let copy = try DatabaseQueue(path: partial)
        try source.backup(to: copy)
        try copy.writeWithoutTransaction { db in
            let result = try String.fetchOne(db, sql: "PRAGMA quick_check") ?? "?"
            guard result == "ok" else { throw DriveError.internalError("The copied database fails SQLite's check: \(result).") }
        }
        try copy.close()
    }

    /// The packs and block files the database at `path` names (relative to the data folder), and how many users it has.
    static func files(named path: String) throws -> ([String], Int) {
        var configuration = Configuration()
        configuration.readonly = true
        let copy = try DatabaseQueue(path: path, configuration: configuration)
        defer { try? copy.close() }
        return try copy.read { db in
            let packs = try Row.fetchAll(db, sql: "SELECT DISTINCT user_id, pack FROM blocks WHERE pack IS NOT NULL").map { row -> String in
                "packs/" + (row["user_id"] as String) + "/" + (row["pack"] as String)
            }
            let own = try Row.fetchAll(db, sql: "SELECT user_id, hash FROM blocks WHERE pack IS NULL AND data IS NULL").map { row -> String in
                "blobs/" + (row["user_id"] as String) + "/" + (row["hash"] as String)
            }
            let users = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM users") ?? 0
            return ((packs + own).sorted(), users)
        }
    }

    /// Removes the packs and block files of the backup that `keeping` does not name; how many went.
    static func prune(_ target: URL, keeping: Set<String>) throws -> Int {
        var removed = 0
        for relative in try relativeFiles(under: target) where relative.hasPrefix("packs/") || relative.hasPrefix("blobs/") {
            guard !keeping.contains(relative) else { continue }
            try POSIXFile.remove(target.appending(path: relative).path)
            removed += 1
        }
        return removed
    }

    static func relativeFiles(under root: URL) throws -> [String] {
        guard let walker = FileManager.default.enumerator(atPath: root.path) else { return [] }
        var found: [String] = []
        while let relative = walker.nextObject() as? String {
            var isFolder: ObjCBool = false
            if FileManager.default.fileExists(atPath: root.appending(path: relative).path, isDirectory: &isFolder), !isFolder.boolValue {
                found.append(relative)
            }
        }
        return found.sorted()
    }

    static func fileSize(_ path: String) throws -> Int64 {
        let fd = try POSIXFile.openForReading(path)
        defer { POSIXFile.closeFile(fd) }
        return try POSIXFile.size(fd, path: path)
    }

    /// Copies `from` to `to` durably: to a temporary name beside it, fsynced, renamed, the folder fsynced.
    static func copy(_ from: String, to: String) throws {
        let folder = (to as NSString).deletingLastPathComponent
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let temporary = folder + "/.copy-" + UUID().uuidString
        let input = try POSIXFile.openForReading(from)
        defer { POSIXFile.closeFile(input) }
        let output = try POSIXFile.openForWriting(temporary)
        do {
            var buffer = [UInt8](repeating: 0, count: 1 << 20)
            var offset: Int64 = 0
            while true {
                let count = try buffer.withUnsafeMutableBytes { raw -> Int in
                    guard let base = raw.baseAddress else { return 0 }
                    return try POSIXFile.readInto(input, base, count: raw.count, at: offset, path: from)
                }
                if count == 0 { break }
                try buffer.withUnsafeBytes { try POSIXFile.writeAll(output, UnsafeRawBufferPointer(rebasing: $0[..<count]), path: temporary) }
                offset += Int64(count)
            }
            try POSIXFile.sync(output, path: temporary)
            POSIXFile.closeFile(output)
        } catch {
            POSIXFile.closeFile(output)
            try? POSIXFile.remove(temporary)
            throw error
        }
        try POSIXFile.move(temporary, to: to)
        try POSIXFile.syncDirectory(folder)
    }
}
