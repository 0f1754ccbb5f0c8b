import Crypto
import Foundation
import NimbusAPI

/// Carrying out steps on this side: folders made, files fetched (checked, written durably, only what is missing where
/// blocks are kept), moves and deletions here (each checked against what the plan saw), conflict copies made.
extension SyncEngine {
    func createLocalFolder(_ row: ItemRow) async throws {
        if let disk {
            guard let parent = row.rParent, let above = try await store.read({ tx in try tx.localPath(parent) }), let name = row.rName else {
                throw LocalChanged()
            }
            let relative = above.isEmpty ? name : above + "/" + name
            if try !disk.fileSystem.makeFolder(disk.absolute(relative)) {
                guard disk.fileSystem.stat(disk.absolute(relative))?.kind == .folder else { throw LocalChanged() }
            }
            let stat = disk.fileSystem.stat(disk.absolute(relative))
            try await store.write { tx in
                guard let stored = try tx.item(row.luid) else { return }
                try self.write(tx, [stored], { $0.apply(.createLocalFolder(ItemID(row.luid))) }) { updated, _ in
                    updated.lMime = stored.rMime
                    updated.lModified = stored.rModified
                    updated.lInode = stat.map { Int64(bitPattern: $0.inode) }
                }
            }
        }
    }

    /// Brings the remote content here: for a synced folder, downloaded into the engine's store, checked, then put
    /// in place of the file — which must still be exactly as the plan saw it — or into its empty place (never over
    /// a file that appeared there meanwhile). For the app, the view takes the remote state and content is fetched
    /// when the file is kept offline.
    func download(_ row: ItemRow, _ provider: any RemoteProvider) async throws {
        guard let disk else { return }  // the app's store: database only (recordLocally)
        guard let fileId = row.fileId, let revision = row.rRevision else { return }
        // Where it goes: in place of the local file, or (new here) where the remote has it.
        let relative: String
        if row.lPresent {
            guard let path = try await store.read({ tx in try tx.localPath(row.luid) }) else { throw LocalChanged() }
            relative = path
        } else {
            guard let parent = row.rParent, let above = try await store.read({ tx in try tx.localPath(parent) }), let name = row.rName else {
                throw LocalChanged()
            }
            relative = above.isEmpty ? name : above + "/" + name
        }
        // A placeholder is replaced by the file: it is what is checked and taken aside.
        let replaced = relative + row.diskSuffix
        // The file it replaces likely holds much of the new content: a provider that can reuse it fetches the rest.
        let seeds = row.lPresent && !row.lPlaceholder && provider.features.deltaDownloads != nil ? [try? disk.fileSystem.exportFile(disk.absolute(relative))].compactMap { $0 } : []
        let partial = try await fetch(
            fileId: fileId, revision: revision, size: row.rSize ?? 0, checksum: row.rChecksum, luid: row.luid, provider, seeds: seeds)
        let target = disk.absolute(relative)
        let temporary = (target as NSString).deletingLastPathComponent + "/" + ".nimbus-partial-" + UUID.random().uuidString.lowercased()
        let modified = POSIXFileSystem.keptModificationTime(row.rModified.map { Date(timeIntervalSince1970: Double($0) / 1000) }, now: disk.fileSystem.now())
        if partial.sealed {
            // Sealed in the store: opened (and checked) into a plain file that goes straight into the folder.
            let plain = stagingDirectory.appending(path: Self.plainPrefix + UUID.random().uuidString.lowercased())
            defer { try? FileManager.default.removeItem(at: plain) }
            try copyOut(partial.url.path, to: plain, checksum: partial.checksum)
            try? FileManager.default.removeItem(at: partial.url)
            try disk.fileSystem.importFile(plain, to: temporary, modeOf: row.lPresent && !row.lPlaceholder ? target : nil, modified: modified)
        } else {
            try disk.fileSystem.importFile(partial.url, to: temporary, modeOf: row.lPresent && !row.lPlaceholder ? target : nil, modified: modified)
        }
        // The last check: the file it replaces is still what the plan saw (nothing unsent is replaced), and nothing
        // that appeared at the path meanwhile is.
        var aside: String?
        if row.lPresent {
            aside = try disk.takeAside(row, at: replaced)
            if aside == nil {
                try? disk.fileSystem.removeFile(temporary)
                throw LocalChanged()
            }
        }
        // The file as placed: its stat, taken before it is visible (a save right after must show as a change).
        let stat = disk.fileSystem.stat(temporary)
        let placed = try disk.fileSystem.renameNoReplace(temporary, to: target)
        guard placed else {
            // (A file appeared at the place: what was taken aside goes back.)
            if let aside, try !disk.fileSystem.renameNoReplace(aside, to: disk.absolute(replaced)) { try? disk.fileSystem.removeFile(aside) }
            try? disk.fileSystem.removeFile(temporary)
            throw LocalChanged()
        }
        if let aside { try? disk.fileSystem.removeFile(aside) }  // the replaced version (or placeholder): synced, on the remote
        // What came, where it was put: the version the plan saw, with its checksum as read.
        guard var came = row.remoteNode else { return }
        came.checksum = partial.checksum
        came.size = stat?.size ?? row.rSize ?? 0
        let fetched = came
        try await store.write { tx in
            guard let stored = try tx.item(row.luid) else { return }
            try self.write(tx, [stored], { $0.apply(.download(ItemID(row.luid)), .there(fetched)) }) { updated, _ in
                updated.lMime = row.rMime
                updated.lInode = stat.map { Int64(bitPattern: $0.inode) }
                updated.lMtime = stat?.mtime
                updated.lModified = stat.map { $0.mtime / 1_000_000 } ?? row.rModified
                updated.lastAccess = self.now.millis
            }
        }
    }

    /// Reads a remote file whose provider keeps no SHA-256 once, to learn it (the provider remembers it for that
    /// version); the remote tree takes it if the file is still at that version.
    func learnChecksum(_ row: ItemRow, _ provider: any RemoteProvider) async throws {
        guard let fileId = row.fileId, let revision = row.rRevision else { return }
        let fetched = try await fetch(fileId: fileId, revision: revision, size: row.rSize ?? 0, checksum: nil, luid: row.luid, provider)
        try? FileManager.default.removeItem(at: fetched.url)
        try await store.write { tx in
            guard let stored = try tx.item(row.luid), stored.rRevision == revision, stored.rChecksum == nil else { return }
            try self.write(tx, [stored], { $0.apply(.learnChecksum(ItemID(row.luid)), .checksum(fetched.checksum)) })
        }
    }

    /// Downloads a revision into the engine's store (resuming a partial earlier download of it), checked against
    /// its checksum when the provider gives one; free space is checked first.
    func fetch(
        fileId: String, revision: String, size: Int64, checksum: String?, luid: String, _ provider: any RemoteProvider, seeds: [URL] = []
    ) async throws -> (url: URL, checksum: String, sealed: Bool) {
        let key = FileHasher.hex(SHA256.hash(data: Data("\(fileId)\n\(revision)".utf8))).prefix(32)
        let partial = stagingDirectory.appending(path: "download-\(key).partial")
        // In an encrypted library the partial download is sealed as it comes (and resumed sealed) — but a small file
        // going into a synced folder is taken in memory and written plain once, beside where it goes: no sealed
        // partial to write and delete for every small file (what made downloading many small files slow).
        let inMemory = sealing != nil && disk != nil && size <= Self.memoryDownloadLimit
        let target = inMemory ? DownloadTarget(memoryNamed: partial) : downloadTarget(partial)
        var have = target.existingSize
        // Whole already (a crash came between the last byte and taking it): checked, not fetched again — asking for
        // the bytes after the end would be refused. Not this revision's bytes after all: start over.
        var complete = false
        if have >= size, have > 0, let checksum {
            if let (actual, actualSize) = try? target.hash(), actual == checksum, actualSize == size {
                complete = true
            } else {
                try? FileManager.default.removeItem(at: partial)
                have = 0
            }
        }
        if let available = Self.freeSpace(at: stagingDirectory), available < size - have {
            throw SyncError.insufficientSpace(needed: size - have, available: available)
        }
        let progress = progressBox
        defer { progressBox.withLock { _ = $0.removeValue(forKey: luid) } }
        let report: @Sendable (Int64) -> Void = { written in
            progress.withLock { $0[luid] = .downloading(progress: min(1, Double(written) / Double(max(size, 1)))) }
        }
        if complete {
            // (checked above)
        } else if let delta = provider.features.deltaDownloads, size >= delta.deltaMinimum {
            try await delta.download(fileId, revision: revision, to: target, reusing: seeds, locate: { [weak self] in await self?.localCopy(of: $0) }, progress: report)
        } else {
            try await provider.download(fileId, revision: revision, to: target, progress: report)
        }
        // A download taken in memory is written (plain, durable) where it was to go in the same trip off the actor
        // as its hash, once the hash is right.
        let plain = target.buffer == nil ? nil : stagingDirectory.appending(path: Self.plainPrefix + UUID.random().uuidString.lowercased())
        let (actual, actualSize) = try await Self.hash(target, expecting: checksum, size: size, thenWriteTo: plain)
        if let checksum, actual != checksum || actualSize != size {
            try? FileManager.default.removeItem(at: partial)
            throw SyncError.checksumMismatch(expected: checksum, actual: actual)
        }
        if let plain { return (plain, actual, false) }
        return (partial, actual, target.sealing != nil)
    }

    // Off the engine's actor (static and nonisolated, so on the global executor): reading a download back to hash
    // it and the fsync of a file written from memory held up every other step there — an encrypted library
    // downloading 10,000 small files into a folder took 1.2× a plain one's time, its fsyncs one after another.

    /// The SHA-256 and size of what a download wrote; unless they are not what was expected (`checksum` and `size`,
    /// when the checksum is known), a download taken in memory is then written to `url`, durably.
    static func hash(_ target: DownloadTarget, expecting checksum: String?, size: Int64, thenWriteTo url: URL?) async throws -> (String, Int64) {
        let (actual, actualSize) = try target.hash()
        if let url, let buffer = target.buffer, checksum == nil || (checksum == actual && actualSize == size) {
            try writeDurably(buffer, to: url)
        }
        return (actual, actualSize)
    }

    /// A new 0600 file at `url` holding `buffer`, made durable: created empty, then written and fsynced once
    /// (`createFile` with contents fsyncs on its own: two per file).
    static func writeDurably(_ buffer: LockedBox<Data>, to url: URL) throws {
        guard FileManager.default.createFile(atPath: url.path, contents: nil, attributes: [.posixPermissions: 0o600]) else {
            throw SyncError.localFile("Cannot write \(url.path).")
        }
        let handle = try FileHandle(forWritingTo: url)
        defer { try? handle.close() }
        try buffer.withLock { try handle.write(contentsOf: $0) }
        try handle.synchronize()
    }

    /// Files up to this size that an encrypted library downloads into a synced folder are taken in memory.
    static let memoryDownloadLimit: Int64 = 1 << 20

    /// The local copy of a file of this device, for a download to take blocks from: the file in the synced folder,
    /// or the content kept in the store (the app library). Its bytes are checked block by block on use.
    func localCopy(of fileId: String) async -> URL? {
        let found = try? await store.read { tx -> (row: ItemRow, path: String?)? in
            guard let row = try tx.item(fileId: fileId), !row.isFolder else { return nil }
            return (row, row.lPresent ? try tx.localPath(row.luid) : nil)
        }
        guard let found else { return nil }
        guard let disk else {
            // Sealed content is not handed to a provider to read blocks from (it reads plain files).
            guard sealing == nil else { return nil }
            return found.row.contentPath.flatMap { FileManager.default.fileExists(atPath: $0) ? URL(fileURLWithPath: $0) : nil }
        }
        guard let path = found.path else { return nil }
        return try? disk.fileSystem.exportFile(disk.absolute(path))
    }

    /// Puts the item's current content in the engine's store (the app library: pinned files, `download(_:)`).
    func fetchContent(_ row: ItemRow) async throws {
        guard disk == nil, !row.isFolder, let checksum = row.lChecksum else { return }
        // A file uploaded without a copy (`copy: false`) is the caller's, not the store's: it may change or go at any
        // time, so a download keeps a copy of its own (the caller's file serving as a seed for the blocks it holds).
        if row.contentPath != nil && row.contentChecksum == checksum && row.contentOwned { return }
        guard let fileId = row.fileId, let revision = row.rRevision, row.rChecksum == checksum else { return }
        let provider = try requireProvider()
        let fetched: (url: URL, checksum: String, sealed: Bool)
        do {
            // An older version kept here may hold most of the new one.
            let seeds = sealing != nil ? [] : row.contentPath.flatMap { FileManager.default.fileExists(atPath: $0) ? [URL(fileURLWithPath: $0)] : nil } ?? []
            fetched = try await fetch(
                fileId: fileId, revision: revision, size: row.rSize ?? 0, checksum: row.rChecksum, luid: row.luid, provider, seeds: seeds)
        } catch let error as ProviderError {
            throw SyncError(error)
        }
        let destination = contentDirectory.appending(path: fileId)
        try? FileManager.default.removeItem(at: destination)
        try FileManager.default.moveItem(at: fetched.url, to: destination)
        try await store.write { tx in
            guard let stored = try tx.item(row.luid) else { return }
            var updated = stored
            updated.contentPath = destination.path
            updated.contentChecksum = fetched.checksum
            updated.contentOwned = true
            try tx.update(updated, from: stored)
        }
        notifyChanged()
    }

    /// Pinned files whose content is not here are downloaded (the app library).
    func hydratePinned(_ provider: any RemoteProvider) async throws {
        guard disk == nil else { return }
        let rows = try await store.read { tx in try tx.pinnedWithoutContent() }
        let now = self.now.millis
        let failures = try await store.read { tx in try tx.failures() }
        for row in rows {
            if let failure = failures[row.luid], failure.failed || failure.nextAttemptAt > now { continue }
            do {
                try await fetchContent(row)
                try await succeeded(row.luid)
            } catch let error as SyncError {
                try await failed(.download(ItemID(row.luid)), error)
            }
        }
    }

    func moveLocal(_ row: ItemRow, to parent: String, name: String) async throws {
        if let disk {
            let (logical, above) = try await store.read { tx in (try tx.localPath(row.luid), try tx.localPath(parent)) }
            guard let logical, let above else { throw LocalChanged() }
            let from = logical + row.diskSuffix  // a placeholder moves as NAME.nimbus
            let to = (above.isEmpty ? name : above + "/" + name) + row.diskSuffix
            guard disk.isStill(row, at: from), try disk.fileSystem.renameNoReplace(disk.absolute(from), to: disk.absolute(to)) else { throw LocalChanged() }
        }
        try await store.write { tx in
            guard let stored = try tx.item(row.luid) else { return }
            try self.write(tx, [stored], { $0.apply(.moveLocal(ItemID(row.luid), parent: ItemID(parent), name: name)) })
        }
    }

    /// Deletes the item here (a folder with everything in it), each file checked just before it goes; a file
    /// that changed since the plan stays (and stops the rest of the folder's deletion).
    func deleteLocal(_ row: ItemRow, effect: @escaping @Sendable (ItemID) -> PlannedOperation = PlannedOperation.deleteLocal) async throws {
        let subtree = try await store.read { tx -> [(ItemRow, String?)] in
            try tx.localSubtree(row.luid).reversed().compactMap { luid in
                guard let item = try tx.item(luid) else { return nil }
                return (item, try tx.localPath(luid).map { $0 + item.diskSuffix })
            }
        }
        var deleted: [ItemRow] = []
        var stopped = false
        for (item, relative) in subtree {
            if let disk {
                guard let relative else { continue }
                let path = disk.absolute(relative)
                if item.isFolder {
                    if disk.fileSystem.stat(path) != nil {
                        guard (try? disk.fileSystem.removeFolder(path)) != nil, disk.fileSystem.stat(path) == nil else {
                            stopped = true
                            break
                        }
                    }
                } else if disk.fileSystem.stat(path) != nil {
                    guard let aside = try disk.takeAside(item, at: relative) else {
                        stopped = true
                        break
                    }
                    try disk.fileSystem.removeFile(aside)
                }
            } else if item.contentOwned, let path = item.contentPath {
                try? FileManager.default.removeItem(atPath: path)
            }
            deleted.append(item)
        }
        let gone = deleted
        try await store.write { tx in
            // Each as deleted alone (deepest first): a folder whose deletion stopped part way keeps what is left.
            for item in gone {
                guard let stored = try tx.item(item.luid) else { continue }
                try self.write(tx, [stored], { $0.apply(effect(ItemID(stored.luid))) }) { updated, _ in
                    updated.contentPath = nil
                    updated.contentChecksum = nil
                }
            }
        }
        if stopped { throw LocalChanged() }
    }

    /// This side's version becomes a new item beside it under `name`; the item takes the remote version next.
    func fork(_ row: ItemRow, name: String) async throws {
        if let disk {
            guard let from = try await store.read({ tx in try tx.localPath(row.luid) }) else { throw LocalChanged() }
            let to = from.lastIndex(of: "/").map { String(from[...$0]) + name } ?? name
            // (Under its own name — a move here that cannot be made there, kept as a new item — nothing is renamed.)
            guard try !row.lChanging && (to == from || disk.fileSystem.renameNoReplace(disk.absolute(from), to: disk.absolute(to))) else { throw LocalChanged() }
        }
        try await store.write { tx in
            guard let stored = try tx.item(row.luid) else { return }
            let id = ItemID(stored.luid)
            guard stored.sPresent || stored.rPresent else {
                // Only here: it just takes the other name.
                try self.write(tx, [stored], { $0.apply(.fork(id, name: name)) })
                return
            }
            // The copy: a new item, with what the trees do not hold of this side's version (its content file, times).
            var copy = ItemRow.empty(ItemID.make().rawValue, isFolder: stored.isFolder)
            copy.lMime = stored.lMime
            copy.lModified = stored.lModified
            copy.lInode = stored.lInode
            copy.lMtime = stored.lMtime
            copy.contentPath = stored.contentPath
            copy.contentChecksum = stored.contentChecksum
            copy.contentOwned = stored.contentOwned
            copy.createRequest = Self.newRequestId()
            copy.lastAccess = stored.lastAccess
            try tx.insert(copy)
            let children = try tx.localSubtree(stored.luid).compactMap { try tx.item($0) }.filter { $0.lParent == stored.luid && $0.lPresent }
            try self.write(tx, [stored, copy] + children, { $0.apply(.fork(id, name: name), .forked(copy: ItemID(copy.luid))) }) { updated, _ in
                guard updated.luid == stored.luid else { return }
                updated.lChanging = false
                updated.hold = nil
                updated.contentPath = nil
                updated.contentChecksum = nil
                updated.uploadRequest = nil
                updated.sourceRevision = nil
            }
        }
    }

    /// A folder this device moved there got a new id: a provider whose ids are paths (WebDAV, S3, a local folder, a
    /// crypt remote over one). What is beneath it moved with it, so the ids of the remote tree beneath it take the
    /// new path (and the folders' listed revisions follow) — otherwise the next listing would show each of them gone
    /// and a new item at its new place, reported as deleted there and fetched again.
    nonisolated func renameBeneath(_ tx: StoreTransaction, _ luid: String, from old: String, to new: String) throws {
        for below in try tx.remoteSubtree(luid) where below != luid {
            guard let stored = try tx.item(below), let id = stored.fileId, id.hasPrefix(old + "/") else { continue }
            let renamed = new + id.dropFirst(old.count)
            // (A row that still holds the new path — something once there — keeps it; this one is then found by listing.)
            guard try tx.luid(fileId: renamed) == nil else { continue }
            var row = stored
            row.fileId = renamed
            try tx.update(row, from: stored)
            if stored.isFolder {
                try tx.renameListedFolder(from: id, to: renamed)
            }
        }
    }

    static func freeSpace(at url: URL) -> Int64? {
        guard let attributes = try? FileManager.default.attributesOfFileSystem(forPath: url.path),
            let free = attributes[.systemFreeSize] as? NSNumber
        else { return nil }
        return free.int64Value
    }
}
