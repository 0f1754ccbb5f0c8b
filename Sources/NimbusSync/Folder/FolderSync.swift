import Foundation
import NimbusAPI

/// What one cycle of a synced folder did, for the user.
public struct FolderSyncReport: Sendable, Equatable {
    public var uploaded: [String] = []
    public var downloaded: [String] = []
    public var createdFolders: [String] = []
    public var moved: [String] = []
    public var deletedHere: [String] = []
    public var deletedThere: [String] = []
    public var conflicts: [String] = []
    /// Deleted on the server but changed here: kept here and sent again.
    public var kept: [String] = []
    /// Not synced this time (links, files still being written, paths in use), with the reason.
    public var skipped: [String] = []
    public var errors: [String] = []

    public init() {}

    /// Adds what a later round of the same run did; what it skipped replaces what this one skipped.
    public mutating func absorb(_ later: FolderSyncReport) {
        uploaded += later.uploaded
        downloaded += later.downloaded
        createdFolders += later.createdFolders
        moved += later.moved
        deletedHere += later.deletedHere
        deletedThere += later.deletedThere
        conflicts += later.conflicts
        kept += later.kept
        skipped = later.skipped
        errors = later.errors
    }

    public var changed: Int {
        uploaded.count + downloaded.count + createdFolders.count + moved.count + deletedHere.count + deletedThere.count + conflicts.count + kept.count
    }
}

/// Two-way sync of a folder on disk with a folder of the engine's view: the disk is the local tree, the
/// engine's view the remote one, and a ``FolderIndex`` the synced tree (where both last agreed). All server
/// work — queue, retries, transfers, conflicts there — is the engine's; this type only maps disk changes to
/// engine actions and view changes to disk changes.
///
/// Safety rules: a file is never overwritten or deleted while it holds changes not yet sent (or while a queued
/// upload still reads it); a server-side deletion of a file changed here keeps the file; downloads land under
/// a temporary name and are renamed into place; symbolic links are skipped; files still being written wait.
public actor FolderSync {
    public let engine: SyncEngine
    public let root: URL
    public let remoteRoot: ItemID
    let index: FolderIndex
    let strategy: ConflictStrategy
    let deviceName: String
    /// Local deletions of more than this share of the folder (at least 10 items), or more than 1,000 items,
    /// wait for `confirmDeletions`.
    public var confirmDeletions = false
    /// A file modified this recently is taken as still being written.
    let settleTime: TimeInterval
    /// When the first file the last round skipped as still being written will have settled.
    public private(set) var nextSettle: Date?
    /// Sends what a round has queued while the round goes on queueing the rest (see ``queue(_:upserts:report:)``).
    var sender: Task<Void, Never>?

    public init(
        engine: SyncEngine, root: URL, remoteRoot: ItemID, indexURL: URL, strategy: ConflictStrategy, deviceName: String,
        settleTime: TimeInterval = 1
    ) throws {
        self.engine = engine
        self.root = root.standardizedFileURL
        self.remoteRoot = remoteRoot
        self.index = try FolderIndex(path: indexURL.path)
        self.strategy = strategy
        self.deviceName = deviceName
        self.settleTime = settleTime
    }

    public func setConfirmDeletions(_ value: Bool) { confirmDeletions = value }

    struct ViewEntry {
        var path: String
        var item: SyncItem
    }

    enum LocalChange {
        case unchanged
        /// Changed since the index, but still being written: its content is not known yet. Nothing from the other
        /// side may overwrite, move or delete it; it is looked at again once it has settled.
        case writing(DiskEntry)
        case touched(DiskEntry)
        case modified(DiskEntry, checksum: String)
        case moved(DiskEntry, checksum: String?)
        case deleted
    }

    /// One full cycle: pull, compare disk, index and view, queue what changed here, send and fetch, place what
    /// changed there.
    public func syncOnce(drainTimeout: Duration = .seconds(3600)) async throws -> FolderSyncReport {
        var report = FolderSyncReport()
        nextSettle = nil
        do { try await engine.pull() } catch let error as SyncError where error.isRetryable {
            report.errors.append("Offline: \(error.description)")
        }
        let ignore = IgnoreRules(root: root)
        let scan = try DiskScanner(root: root, ignore: ignore).scan()
        report.skipped += scan.skippedLinks.map { "\($0) (symbolic link, not followed)" }
        let disk = scan.entries
        let indexed = try index.all()
        var view = try await viewTree(ignore: ignore)
        let viewByLuid = Dictionary(view.values.map { ($0.item.id.rawValue, $0) }, uniquingKeysWith: { first, _ in first })
        let busySources = try await engine.pendingUploadSources()
        let indexedLuids = Set(indexed.values.map(\.luid))

        var upserts: [String: FolderIndex.Entry] = [:]
        var removals: Set<String> = []
        var downloads: [(luid: ItemID, path: String)] = []

        // Local side: what happened to each indexed path on disk.
        var local: [String: LocalChange] = [:]
        var claimed: Set<String> = []
        let unindexedByInode = Dictionary(
            disk.values.filter { indexed[$0.path] == nil }.map { ($0.inode, $0) }, uniquingKeysWith: { first, _ in first })
        for entry in indexed.values {
            if let now = disk[entry.path], now.isDirectory == entry.isDirectory {
                claimed.insert(entry.path)
                if now.isDirectory || (now.inode == entry.inode && now.size == entry.size && now.mtime == entry.mtime) {
                    local[entry.path] = .unchanged
                } else if isSettling(now) {
                    report.skipped.append("\(entry.path) (still being written)")
                    local[entry.path] = .writing(now)
                } else if let checksum = try? hash(entry.path) {
                    local[entry.path] = checksum == entry.checksum ? .touched(now) : .modified(now, checksum: checksum)
                } else {
                    local[entry.path] = .writing(now)
                }
            } else if let moved = unindexedByInode[entry.inode], moved.isDirectory == entry.isDirectory, !claimed.contains(moved.path) {
                claimed.insert(moved.path)
                var checksum: String? = entry.checksum
                if !moved.isDirectory && (moved.size != entry.size || moved.mtime != entry.mtime) { checksum = try? hash(moved.path) }
                local[entry.path] = .moved(moved, checksum: checksum)
            } else {
                local[entry.path] = .deleted
            }
        }

        // The mass-deletion guard for this side: a vanished disk (or a slip of rm -rf) must not empty the server.
        let localDeletions = local.values.filter { if case .deleted = $0 { true } else { false } }.count
        if !confirmDeletions, localDeletions > 1000 || (localDeletions >= 10 && Double(localDeletions) > Double(indexed.count) * 0.5) {
            throw SyncError.invalid(
                "\(localDeletions) of \(indexed.count) items are gone from \(root.path); nothing was changed. If you meant to delete them, run again with --confirm-deletions.")
        }

        // Indexed items: combine the local change with what the view says.
        for entry in indexed.values.sorted(by: { $0.path.count > $1.path.count }) {
            let change = local[entry.path] ?? .unchanged
            let remote = viewByLuid[entry.luid]
            let remoteModified = remote.map { !entry.isDirectory && $0.item.checksum != entry.checksum } ?? false
            let remotePath = remote?.path
            let luid = ItemID(entry.luid)
            switch change {
            case .writing:
                // Whatever happened there waits: this file's new content is not known yet (an editor may be
                // saving it). Once it settles it is a modification like any other.
                continue
            case .unchanged, .touched:
                var current = entry
                if case .touched(let now) = change { current.inode = now.inode; current.size = now.size; current.mtime = now.mtime }
                guard let remote else {
                    // Deleted there, unchanged here: delete here (folders once empty).
                    if removeLocally(current, busy: busySources) {
                        removals.insert(entry.path)
                        report.deletedThere.append(entry.path)
                    }
                    continue
                }
                if remote.path != entry.path {
                    if moveLocally(current, to: remote.path, busy: busySources) {
                        removals.insert(entry.path)
                        current.path = remote.path
                        report.moved.append("\(entry.path) → \(remote.path)")
                    } else {
                        continue
                    }
                }
                if remoteModified {
                    downloads.append((luid, current.path))
                    try await engine.download(luid)
                } else {
                    current.revision = remote.item.revisionId ?? current.revision
                    upserts[current.path] = current
                }
            case .modified(let now, let checksum):
                if let remote, remoteModified, remote.item.checksum != checksum, remote.item.state == .synced {
                    try await conflict(entry, disk: now, checksum: checksum, remote: remote, report: &report, upserts: &upserts, downloads: &downloads, view: view)
                    continue
                }
                var current = entry
                if remote == nil {
                    // Deleted there, changed here: keep it, as a new item.
                    if let kept = try await keep(entry.path, view: view, report: &report, downloads: &downloads) {
                        current.luid = kept.luid.rawValue
                        if kept.path != entry.path {
                            removals.insert(entry.path)
                            current.path = kept.path
                        }
                    }
                } else if remote?.item.checksum != checksum {
                    try await engine.update(luid, from: url(entry.path), copy: false, baseRevision: entry.revision, checksum: checksum)
                    report.uploaded.append(entry.path)
                }
                current.inode = now.inode
                current.size = now.size
                current.mtime = now.mtime
                current.checksum = checksum
                // A move made there is followed once this change is sent (a round that finds the file unchanged):
                // a file with unsent changes is never moved away under an editor that may still have it open.
                _ = remotePath
                upserts[current.path] = current
            case .moved(let now, let checksum):
                removals.insert(entry.path)
                var current = entry
                current.path = now.path
                current.inode = now.inode
                current.size = now.size
                current.mtime = now.mtime
                guard let remote else {
                    // Moved here, deleted there: keep it, as a new item.
                    if !now.isDirectory, let kept = try await keep(now.path, view: view, report: &report, downloads: &downloads) {
                        current.luid = kept.luid.rawValue
                        current.checksum = checksum
                        current.path = kept.path
                        upserts[kept.path] = current
                    }
                    continue
                }
                if remote.path != entry.path {
                    // Moved on both sides: the server's move stands. A file that also holds new content stays where
                    // the user put it until that content is sent (the next round, finding it unchanged, follows).
                    if let checksum, checksum != entry.checksum, !now.isDirectory {
                        try await engine.update(luid, from: url(now.path), copy: false, baseRevision: entry.revision, checksum: checksum)
                        current.checksum = checksum
                        report.uploaded.append(now.path)
                    } else if moveLocally(current, to: remote.path, busy: busySources) {
                        current.path = remote.path
                    }
                    upserts[current.path] = current
                    continue
                }
                if let parent = parentItem(of: now.path, in: view) {
                    do {
                        if parentPath(of: now.path) != parentPath(of: entry.path) { try await engine.move(luid, to: parent) }
                        if name(of: now.path) != name(of: entry.path) { try await engine.rename(luid, to: name(of: now.path)) }
                        report.moved.append("\(entry.path) → \(now.path)")
                        view[now.path] = ViewEntry(path: now.path, item: remote.item)
                    } catch {
                        report.errors.append("\(now.path): \(error)")
                    }
                }
                if let checksum, checksum != entry.checksum, !now.isDirectory {
                    try await engine.update(luid, from: url(now.path), copy: false, baseRevision: entry.revision, checksum: checksum)
                    current.checksum = checksum
                    report.uploaded.append(now.path)
                } else if remoteModified {
                    downloads.append((luid, now.path))
                    try await engine.download(luid)
                    continue
                }
                upserts[current.path] = current
            case .deleted:
                removals.insert(entry.path)
                guard let remote else { continue }
                if remoteModified {
                    // Deleted here, changed there: the newer content comes back rather than being destroyed.
                    downloads.append((luid, remote.path))
                    try await engine.download(luid)
                    continue
                }
                do {
                    try await engine.delete(luid)
                    report.deletedHere.append(entry.path)
                } catch {
                    report.errors.append("\(entry.path): \(error)")
                }
            }
        }

        // New on disk: folders first (parents before children), then files, queued 500 at a time, each lot in one
        // local transaction. Folders first, because the engine creates folders one at a time and before the
        // uploads that wait for them: met in path order, a tree of many folders kept the uploads of the first
        // folders waiting until the last folder was queued; this way they go up while the rest is hashed.
        var newFiles: [(entry: DiskEntry, upload: SyncEngine.NewUpload)] = []
        let unseen = disk.values.filter { !claimed.contains($0.path) && indexed[$0.path] == nil }.sorted { $0.path < $1.path }
        for entry in unseen.filter(\.isDirectory) + unseen.filter({ !$0.isDirectory }) {
            if let existing = view[entry.path], !indexedLuids.contains(existing.item.id.rawValue) {
                // The same path appeared on both sides.
                if existing.item.isFolder && entry.isDirectory {
                    upserts[entry.path] = indexEntry(entry, luid: existing.item.id, checksum: nil, revision: nil)
                    continue
                }
                if !existing.item.isFolder && !entry.isDirectory {
                    if isSettling(entry) {
                        report.skipped.append("\(entry.path) (still being written)")
                        continue
                    }
                    guard let checksum = try? hash(entry.path) else { continue }
                    if checksum == existing.item.checksum {
                        upserts[entry.path] = indexEntry(entry, luid: existing.item.id, checksum: checksum, revision: existing.item.revisionId)
                        continue
                    }
                }
                try await conflictOnCreate(entry, remote: existing, report: &report, upserts: &upserts, downloads: &downloads, view: &view)
                continue
            }
            if view[entry.path] != nil { continue }
            guard let parent = parentItem(of: entry.path, in: view) else { continue }
            do {
                if entry.isDirectory {
                    let id = try await engine.createFolder(named: name(of: entry.path), in: parent)
                    view[entry.path] = ViewEntry(path: entry.path, item: try await engine.item(id) ?? placeholder(id, folder: true))
                    upserts[entry.path] = indexEntry(entry, luid: id, checksum: nil, revision: nil)
                    report.createdFolders.append(entry.path)
                } else {
                    if isSettling(entry) {
                        report.skipped.append("\(entry.path) (still being written)")
                        continue
                    }
                    let checksum = try hash(entry.path)
                    newFiles.append((entry, SyncEngine.NewUpload(fileURL: url(entry.path), name: name(of: entry.path), folder: parent, checksum: checksum)))
                    if newFiles.count >= 500 { try await queue(&newFiles, upserts: &upserts, report: &report) }
                }
            } catch {
                report.errors.append("\(entry.path): \(error)")
            }
        }
        try await queue(&newFiles, upserts: &upserts, report: &report)

        // New on the server (parents first).
        for remote in view.values.filter({ !indexedLuids.contains($0.item.id.rawValue) }).sorted(by: { $0.path < $1.path }) {
            if disk[remote.path] != nil || upserts[remote.path] != nil { continue }
            if remote.item.isFolder {
                do {
                    try FileManager.default.createDirectory(at: url(remote.path), withIntermediateDirectories: true)
                    if let now = DiskScanner.stat(url(remote.path).path, relative: remote.path)?.entry {
                        upserts[remote.path] = indexEntry(now, luid: remote.item.id, checksum: nil, revision: nil)
                    }
                } catch {
                    report.errors.append("\(remote.path): \(error.localizedDescription)")
                }
            } else if remote.item.fileId != nil {
                downloads.append((remote.item.id, remote.path))
                try await engine.download(remote.item.id)
            }
        }

        // Only what changed is written: a no-op round over 10,000 files writes nothing.
        try index.apply(upserts: upserts.values.filter { indexed[$0.path] != $0 }, removals: Array(removals.subtracting(upserts.keys)))

        // Send and fetch.
        await sender?.value
        sender = nil
        do {
            try await engine.drain(timeout: drainTimeout)
        } catch let error as SyncError {
            report.errors.append(error.description)
        }

        // What this round sent: the index takes the revision it made, so the next round (a no-op) rewrites nothing
        // and a later edit is based on it.
        // (A new version too: the index's revision is the base of this device's next edit, and a stale one would make
        // that edit conflict with this device's own earlier version.)
        let sent = upserts.values.filter {
            !$0.isDirectory && $0.checksum != nil && ($0.revision == nil || indexed[$0.path]?.checksum != $0.checksum)
        }
        if !sent.isEmpty {
            let revisions = try await engine.serverRevisions(of: sent.map { ItemID($0.luid) })
            let recorded = sent.compactMap { entry -> FolderIndex.Entry? in
                guard let server = revisions[ItemID(entry.luid)], server.checksum == entry.checksum else { return nil }
                var entry = entry
                entry.revision = server.revision
                return entry
            }
            try index.apply(upserts: recorded, removals: [])
        }

        // Place what was fetched, then record it.
        var placed: [FolderIndex.Entry] = []
        let stillBusy = try await engine.pendingUploadSources()
        let known = downloads.isEmpty ? [:] : try index.all()
        for (luid, path) in downloads {
            guard let item = try await engine.item(luid), let checksum = item.checksum else { continue }
            // Something is there: it may be replaced only if it is what the index says (nothing unsent is lost);
            // `place` checks that again immediately before the rename.
            var expected: FolderIndex.Entry?
            if DiskScanner.stat(url(path).path, relative: path) != nil {
                guard let entry = known[path], !stillBusy.contains(url(path).path) else {
                    report.skipped.append("\(path) (changed here meanwhile; will merge next time)")
                    continue
                }
                expected = entry
            }
            guard let source = try await engine.takeContent(of: luid) else {
                report.errors.append("\(path): not downloaded yet; will retry")
                continue
            }
            do {
                guard try place(source, at: path, expected: expected) else {
                    report.skipped.append("\(path) (changed here meanwhile; will merge next time)")
                    continue
                }
                if let now = DiskScanner.stat(url(path).path, relative: path)?.entry {
                    placed.append(indexEntry(now, luid: luid, checksum: checksum, revision: item.revisionId))
                }
                report.downloaded.append(path)
            } catch {
                report.errors.append("\(path): \(error.localizedDescription)")
            }
        }
        try index.apply(upserts: placed, removals: [])
        return report
    }

    /// Queues collected new files in one engine call (one local transaction) and records what became of each.
    func queue(
        _ newFiles: inout [(entry: DiskEntry, upload: SyncEngine.NewUpload)], upserts: inout [String: FolderIndex.Entry],
        report: inout FolderSyncReport
    ) async throws {
        guard !newFiles.isEmpty else { return }
        let batch = newFiles
        newFiles = []
        let results = try await engine.upload(batch.map(\.upload))
        // Start sending now: the server commits the first files while the rest are hashed and queued. (Errors
        // are left to the drain that ends the round, which runs everything still pending again.)
        let previous = sender
        sender = Task.detached { [engine] in
            await previous?.value
            _ = try? await engine.runOperations()
        }
        for ((entry, upload), result) in zip(batch, results) {
            switch result {
            case .success(let id):
                upserts[entry.path] = indexEntry(entry, luid: id, checksum: upload.checksum, revision: nil)
                report.uploaded.append(entry.path)
            case .failure(let error):
                report.errors.append("\(entry.path): \(error)")
            }
        }
    }

    /// Sends a file the server deleted (but that changed here) again, as a new item. If another item has taken
    /// its name there meanwhile, this one is kept under a conflict name instead (both stay). `nil` when its folder
    /// is gone there too (the next round sends the folder first).
    func keep(
        _ path: String, view: [String: ViewEntry], report: inout FolderSyncReport, downloads: inout [(luid: ItemID, path: String)]
    ) async throws -> (luid: ItemID, path: String)? {
        guard let parent = parentItem(of: path, in: view) else { return nil }
        var target = path
        if let other = view[path] {
            let (_, copyPath) = conflictCopyPath(of: path, taken: view)
            guard try DiskOperations.renameNoReplace(url(path).path, to: url(copyPath).path) else { return nil }
            target = copyPath
            // The name is free here now: the other item comes down in this round.
            if !other.item.isFolder, other.item.fileId != nil {
                downloads.append((other.item.id, path))
                try await engine.download(other.item.id)
            }
            report.conflicts.append("\(path): deleted there while changed here, and the name is now another file's; this device's version is \(copyPath)")
        } else {
            report.kept.append(path)
        }
        do {
            let id = try await engine.upload(from: url(target), named: name(of: target), in: parent, copy: false)
            return (id, target)
        } catch let error as SyncError {
            report.errors.append("\(target): \(error.description)")
            return nil
        }
    }

    // MARK: Conflicts

    /// Changed here and there since the last sync.
    func conflict(
        _ entry: FolderIndex.Entry, disk: DiskEntry, checksum: String, remote: ViewEntry, report: inout FolderSyncReport,
        upserts: inout [String: FolderIndex.Entry], downloads: inout [(luid: ItemID, path: String)], view: [String: ViewEntry]
    ) async throws {
        let luid = ItemID(entry.luid)
        switch strategy {
        case .lastWriterWins:
            try await engine.update(luid, from: url(entry.path), copy: false, baseRevision: remote.item.revisionId)
            var current = entry
            current.inode = disk.inode
            current.size = disk.size
            current.mtime = disk.mtime
            current.checksum = checksum
            upserts[entry.path] = current
            report.conflicts.append("\(entry.path): kept this device's version (the other stays a revision)")
        case .keepBoth:
            // This version moves aside under the conflict name and is sent as a new file; theirs takes the name.
            let (copyName, copyPath) = conflictCopyPath(of: entry.path, taken: view)
            try FileManager.default.moveItem(at: url(entry.path), to: url(copyPath))
            if let parent = remote.item.parentId, let now = DiskScanner.stat(url(copyPath).path, relative: copyPath)?.entry {
                let id = try await engine.upload(from: url(copyPath), named: copyName, in: parent, copy: false)
                upserts[copyPath] = indexEntry(now, luid: id, checksum: checksum, revision: nil)
            }
            downloads.append((luid, entry.path))
            try await engine.download(luid)
            report.conflicts.append("\(entry.path): both kept; this device's version is \(copyPath)")
        case .ask:
            var current = entry
            current.flag = "conflict"
            upserts[entry.path] = current
            report.conflicts.append("\(entry.path): changed here and there; resolve with 'nimbus conflicts resolve'")
        }
    }

    /// Where this device's version of a conflicted path goes: `name (conflict from DEVICE DATE).ext`, numbered
    /// when that name is taken on disk or in the view (a second conflict the same day): never an existing name.
    func conflictCopyPath(of path: String, taken view: [String: ViewEntry]) -> (name: String, path: String) {
        let base = FileName.conflictCopy(name(of: path), device: deviceName, date: Date())
        var copyName = base
        var attempt = 1
        func inFolder(_ name: String) -> String { parentPath(of: path).map { $0 + "/" + name } ?? name }
        while view[inFolder(copyName)] != nil || DiskScanner.stat(url(inFolder(copyName)).path, relative: copyName) != nil, attempt < 10_000 {
            copyName = FileName.numbered(base, attempt)
            attempt += 1
        }
        return (copyName, inFolder(copyName))
    }

    /// The same new path on both sides with different content.
    func conflictOnCreate(
        _ entry: DiskEntry, remote: ViewEntry, report: inout FolderSyncReport, upserts: inout [String: FolderIndex.Entry],
        downloads: inout [(luid: ItemID, path: String)], view: inout [String: ViewEntry]
    ) async throws {
        guard let parent = parentItem(of: entry.path, in: view) else { return }
        let (copyName, copyPath) = conflictCopyPath(of: entry.path, taken: view)
        try FileManager.default.moveItem(at: url(entry.path), to: url(copyPath))
        guard let now = DiskScanner.stat(url(copyPath).path, relative: copyPath)?.entry else { return }
        if now.isDirectory {
            let id = try await engine.createFolder(named: copyName, in: parent)
            upserts[copyPath] = indexEntry(now, luid: id, checksum: nil, revision: nil)
        } else {
            let checksum = try hash(copyPath)
            let id = try await engine.upload(from: url(copyPath), named: copyName, in: parent, copy: false)
            upserts[copyPath] = indexEntry(now, luid: id, checksum: checksum, revision: nil)
        }
        if remote.item.isFolder {
            try FileManager.default.createDirectory(at: url(entry.path), withIntermediateDirectories: true)
            if let dir = DiskScanner.stat(url(entry.path).path, relative: entry.path)?.entry {
                upserts[entry.path] = indexEntry(dir, luid: remote.item.id, checksum: nil, revision: nil)
            }
        } else {
            downloads.append((remote.item.id, entry.path))
            try await engine.download(remote.item.id)
        }
        report.conflicts.append("\(entry.path): created on both sides; this device's version is \(copyPath)")
    }

    // MARK: Disk helpers

    func url(_ path: String) -> URL { root.appending(path: path) }

    func name(of path: String) -> String { String(path.split(separator: "/").last ?? Substring(path)) }

    func parentPath(of path: String) -> String? {
        guard let slash = path.lastIndex(of: "/") else { return nil }
        return String(path[..<slash])
    }

    func parentItem(of path: String, in view: [String: ViewEntry]) -> ItemID? {
        guard let parent = parentPath(of: path) else { return remoteRoot }
        return view[parent]?.item.id
    }

    func hash(_ path: String) throws -> String { try FileHasher.sha256(of: url(path)).checksum }

    func isSettling(_ entry: DiskEntry) -> Bool {
        let modified = Double(entry.mtime) / 1e9
        guard !entry.isDirectory && Date().timeIntervalSince1970 - modified < settleTime else { return false }
        let settles = Date(timeIntervalSince1970: modified + settleTime)
        nextSettle = min(nextSettle ?? settles, settles)
        return true
    }

    func indexEntry(_ entry: DiskEntry, luid: ItemID, checksum: String?, revision: String?) -> FolderIndex.Entry {
        FolderIndex.Entry(
            path: entry.path, luid: luid.rawValue, isDirectory: entry.isDirectory, inode: entry.inode, size: entry.size, mtime: entry.mtime,
            checksum: checksum, revision: revision, flag: nil)
    }

    func placeholder(_ id: ItemID, folder: Bool) -> SyncItem {
        SyncItem(
            id: id, fileId: nil, parentId: nil, name: "", mimeType: folderMimeType, isFolder: folder, size: 0, checksum: nil, revisionId: nil,
            modifiedAt: Date(), state: .pending, isPinned: false, isAvailableOffline: false)
    }

    /// Whether the file or folder at `entry.path` is still exactly what `entry` recorded (same inode, size and
    /// modification time): checked immediately before anything that would destroy or move it, so a file saved
    /// after the round looked at it is never lost.
    func isStill(_ entry: FolderIndex.Entry) -> Bool {
        guard let now = DiskScanner.stat(url(entry.path).path, relative: entry.path)?.entry, now.isDirectory == entry.isDirectory else {
            return false
        }
        return now.isDirectory ? now.inode == entry.inode : (now.inode == entry.inode && now.size == entry.size && now.mtime == entry.mtime)
    }

    /// Deletes an unchanged local copy of something deleted there; a folder only once it is empty. Refuses (and
    /// so keeps the file) if it changed since the round looked at it.
    func removeLocally(_ entry: FolderIndex.Entry, busy: Set<String>) -> Bool {
        let target = url(entry.path)
        if busy.contains(target.path) { return false }
        guard DiskScanner.stat(target.path, relative: entry.path) != nil else { return true }  // already gone
        guard isStill(entry) else { return false }
        if entry.isDirectory {
            let remaining = (try? FileManager.default.contentsOfDirectory(atPath: target.path)) ?? []
            guard remaining.isEmpty else { return false }
            return rmdir(target.path) == 0
        }
        return unlink(target.path) == 0 || errno == ENOENT
    }

    /// Follows a move made there; refuses to overwrite anything, and to move what changed since the round
    /// looked at it.
    func moveLocally(_ entry: FolderIndex.Entry, to: String, busy: Set<String>) -> Bool {
        let from = entry.path
        if busy.contains(url(from).path) || DiskScanner.stat(url(to).path, relative: to) != nil { return false }
        guard isStill(entry) else { return false }
        do {
            try FileManager.default.createDirectory(at: url(to).deletingLastPathComponent(), withIntermediateDirectories: true)
            return try DiskOperations.renameNoReplace(url(from).path, to: url(to).path)
        } catch {
            return false
        }
    }

    /// Puts a downloaded file in place: under a temporary name in the target folder first, then renamed, so
    /// the final name never holds half a file. Immediately before the rename, what is at the path must still be
    /// `expected` (the index's entry), or nothing when `expected` is nil; otherwise nothing is replaced and this
    /// returns false (the file changed here since the round looked at it: the next round merges it).
    func place(_ source: URL, at path: String, expected: FolderIndex.Entry?) throws -> Bool {
        let target = url(path)
        try FileManager.default.createDirectory(at: target.deletingLastPathComponent(), withIntermediateDirectories: true)
        let temporary = target.deletingLastPathComponent().appending(path: ".nimbus-partial-\(UUID.random().uuidString)")
        do {
            try FileManager.default.moveItem(at: source, to: temporary)
        } catch {
            // Another file system: copy, then drop the engine's copy.
            try FileManager.default.copyItem(at: source, to: temporary)
            try? FileManager.default.removeItem(at: source)
        }
        let placed: Bool
        if let expected {
            placed = isStill(expected) && rename(temporary.path, target.path) == 0
        } else {
            placed = try DiskOperations.renameNoReplace(temporary.path, to: target.path)
        }
        if !placed { try? FileManager.default.removeItem(at: temporary) }
        return placed
    }

    /// The view under the remote root: relative path → item (ignored paths left out).
    func viewTree(ignore: IgnoreRules) async throws -> [String: ViewEntry] {
        var result: [String: ViewEntry] = [:]
        var stack: [(ItemID, String)] = [(remoteRoot, "")]
        while let (id, prefix) = stack.popLast() {
            for item in try await engine.listing(in: id) {
                let path = prefix.isEmpty ? item.name : prefix + "/" + item.name
                if ignore.ignores(path, isDirectory: item.isFolder) { continue }
                result[path] = ViewEntry(path: path, item: item)
                if item.isFolder { stack.append((item.id, path)) }
            }
        }
        return result
    }
}
