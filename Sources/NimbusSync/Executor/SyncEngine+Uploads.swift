import Crypto
import Foundation
import NimbusAPI

/// Carrying out sending steps: a file's bytes, read checked against the scan, sent as a new file or a version; small
/// new files in batches, a new folder filled with its files; each outcome recorded as the trees' new state.
extension SyncEngine {
    /// The bytes the local tree says the item holds, to send: checked unchanged against the scan (a synced
    /// folder), or the engine's copy (the app). `unhashed`: a synced folder's file not read yet
    /// (``UploadSource/unhashed(url:size:unchanged:)``), checked unchanged again once it has been sent.
    func contentSource(_ row: ItemRow, folderPaths: [String: String] = [:], unhashed: Bool = false) throws -> UploadSource {
        guard let size = row.lSize, row.lChecksum != nil || (unhashed && disk != nil) else { throw LocalChanged() }
        let checksum = row.lChecksum ?? ""
        if let disk {
            var relative: String?
            if let parent = row.lParent, let above = folderPaths[parent], let name = row.lName {
                relative = above.isEmpty ? name : above + "/" + name
            } else {
                relative = try store.read { tx in try tx.localPath(row.luid) }
            }
            guard let relative, disk.isStill(row, at: relative) else { throw LocalChanged() }
            let url = try disk.fileSystem.exportFile(disk.absolute(relative))
            var source =
                row.lChecksum == nil ? .unhashed(url: url, size: size) { disk.isStill(row, at: relative) } : UploadSource(url: url, size: size, checksum: checksum)
            source.modified = row.lMtime.map { Date(timeIntervalSince1970: Double($0) / 1e9) }
            return source
        }
        guard let path = row.contentPath, row.contentChecksum == checksum || !row.contentOwned else {
            throw SyncError.localFile("The content of '\(row.lName ?? "")' is not on this device any more.")
        }
        guard FileManager.default.fileExists(atPath: path) else { throw SyncError.localFile("The file to upload is gone (\(path)).") }
        return uploadSource(path, size: size, checksum: checksum)
    }

    func upload(_ row: ItemRow, base: String?, _ provider: any RemoteProvider) async throws {
        let luid = row.luid
        let progress = self.progressBox
        let report: @Sendable (Int64) -> Void = { sent in
            progress.withLock { $0[luid] = .uploading(progress: Double(sent) / Double(max(row.lSize ?? 1, 1))) }
        }
        defer { progressBox.withLock { _ = $0.removeValue(forKey: luid) } }
        var row = row
        var unhashed = false
        if row.lUnhashed, row.lChecksum == nil, row.fileId == nil, let disk {
            // A new file not read yet: sent as it is read, where the remote hashes while it takes it (not a retried
            // creation: its answer is told by the content's checksum); otherwise read now.
            if !row.createSent, let hashing = provider.features.unhashedUploads, await hashing.takesUnhashed(size: row.lSize ?? 0) {
                unhashed = true
            } else {
                row = try await read([row], disk)[0]
                guard row.lChecksum != nil else { throw LocalChanged() }
            }
        }
        let source = try contentSource(row, unhashed: unhashed)
        report(0)
        if row.fileId == nil {
            let parent = try await remoteId(of: row.lParent)
            let request = try await sendingCreation(row)
            let made = try await provider.upload(
                source, to: .new(parentId: parent, name: row.lName ?? "file", mimeType: row.lMime), requestId: request, progress: report)
            if source.isHashed {
                try await recordCreated(luid, made, parent: row.lParent, checksum: source.checksum)
            } else {
                try await recordCreatedUnhashed(row, made)
            }
            return
        }
        guard let fileId = row.fileId else { return }
        let request = try await versionRequest(row, checksum: source.checksum)
        let made = try await provider.upload(source, to: .version(of: fileId, base: base), requestId: request, progress: report)
        try await store.write { tx in
            guard let stored = try tx.item(luid) else { return }
            var answered = stored
            answered.setRemote(made, parentLuid: stored.rParent)
            if answered.rChecksum == nil { answered.rChecksum = source.checksum }
            // A pull meanwhile brought another state than the one this version was based on: with If-Match on
            // `base` honoured, that state came after this commit (another device's edit, move or deletion), and the
            // feed has moved past it — it stays the remote state (the next plan downloads it or sees the conflict).
            let later = base != nil && (!stored.rPresent || (stored.rRevision != base && stored.rRevision != made.revision))
            let id = ItemID(luid)
            // The merge base takes what was sent (the place stays: a move goes as its own step).
            try self.write(tx, [stored], { trees in
                trees.apply(.upload(id, base: base), answered.remoteNode.map { .there($0) } ?? .done)
                if later { trees.remote[id] = stored.remoteNode }
            }) { updated, _ in
                if !later {
                    updated.rMime = made.mimeType
                    updated.rModified = made.modifiedAt.millis
                }
                updated.uploadRequest = nil
                try self.keepSentContent(&updated)
            }
        }
    }

    /// The user kept the remote version of a conflict (``PlannedOperation/uploadThenRestore(_:base:)``): this side's
    /// goes up as a version based on `base`, kept in the history there, then `base` is made the head again. The merge
    /// base becomes what was sent and the hold goes; the head there is `base`'s content again, so it comes here next.
    func uploadThenRestore(_ row: ItemRow, base: String, _ provider: any RemoteProvider) async throws {
        guard let fileId = row.fileId, let revisions = provider.features.revisions else { throw SyncError.invalid("This remote keeps no revisions.") }
        let source = try contentSource(row)
        let request = try await versionRequest(row, checksum: source.checksum)
        let mine = try await provider.upload(source, to: .version(of: fileId, base: base), requestId: request) { _ in }
        let head = try await revisions.restore(fileId, revision: base)
        try await store.write { tx in
            guard let stored = try tx.item(row.luid) else { return }
            var sent = stored
            sent.setRemote(mine, parentLuid: stored.rParent)
            sent.rChecksum = source.checksum
            var restored = stored
            restored.setRemote(head, parentLuid: stored.rParent)
            guard let sentNode = sent.remoteNode, let headNode = restored.remoteNode else { return }
            try self.write(tx, [stored], { $0.apply(.uploadThenRestore(ItemID(row.luid), base: base), .restored(sent: sentNode, head: headNode)) }) {
                updated, _ in
                updated.rMime = head.mimeType
                updated.rModified = head.modifiedAt.millis
                updated.uploadRequest = nil
            }
        }
    }

    /// Carries out ``PlannedOperation/restoreRevision(_:revision:)``: the revision's content is there already.
    func restoreRevision(_ row: ItemRow, _ revision: String, _ provider: any RemoteProvider) async throws {
        guard let fileId = row.fileId else { return }
        guard let revisions = provider.features.revisions else { throw SyncError.invalid("This remote keeps no revisions.") }
        let restored = try await revisions.restore(fileId, revision: revision)
        try await store.write { tx in
            guard let stored = try tx.item(row.luid) else { return }
            var answered = stored
            answered.setRemote(restored, parentLuid: stored.rParent)
            guard let node = answered.remoteNode else { return }
            try self.write(tx, [stored], { $0.apply(.restoreRevision(ItemID(row.luid), revision: revision), .there(node)) }) { updated, _ in
                updated.rMime = restored.mimeType
                updated.rModified = restored.modifiedAt.millis
            }
        }
    }

    /// Records the creation of a file sent unhashed (``ItemRow/lUnhashed``): the checksum the remote answered — of what
    /// it took — becomes the local tree's and the merge base's, unless a scan saw the file again meanwhile (then the
    /// local tree keeps what the scan found, and that change goes as a new version).
    func recordCreatedUnhashed(_ row: ItemRow, _ made: RemoteItem) async throws {
        guard let checksum = made.checksum, !checksum.isEmpty else {
            throw SyncError.invalid("The remote took '\(row.lName ?? "")' without telling what it received.")
        }
        var learnt = row
        learnt.lChecksum = checksum
        learnt.lUnhashed = false
        let pair = (row, learnt)
        try await store.write { tx in
            try self.recordRead(tx, [pair])
            try self.recordCreated(tx, row.luid, made, parent: row.lParent, checksum: checksum, asRead: nil)
        }
    }

    /// Reads unhashed files now (``DiskFolder/readNow(_:at:)``) and records what was learnt; the rows as read.
    func read(_ rows: [ItemRow], _ disk: DiskFolder) async throws -> [ItemRow] {
        let paths = try await store.read { tx in try rows.map { try tx.localPath($0.luid) } }
        let read = zip(rows, paths).map { row, path in disk.readNow(row, at: path) }
        try await store.write { tx in try self.recordRead(tx, Array(zip(rows, read))) }
        if read.contains(where: \.lChanging) { needsScan = true }
        return read
    }

    /// What ``DiskFolder/readNow(_:at:)`` (or an upload) learnt of unhashed files, each `(as read, learnt)` — unless a
    /// scan looked at the file again meanwhile.
    nonisolated func recordRead(_ tx: StoreTransaction, _ pairs: [(ItemRow, ItemRow)]) throws {
        for (row, updated) in pairs {
            guard let stored = try tx.item(row.luid), stored.lUnhashed, stored.lChecksum == nil, !stored.lChanging,
                stored.lInode == row.lInode, stored.lMtime == row.lMtime, stored.lSize == row.lSize
            else { continue }
            var changed = stored
            changed.lUnhashed = false
            changed.lChecksum = updated.lChecksum
            changed.lSize = updated.lSize
            changed.lChanging = updated.lChanging
            try tx.update(changed, from: stored)
        }
    }

    /// The request id of a new version with this content (the same while the content is the same: a resumable
    /// session is found again by it).
    func versionRequest(_ row: ItemRow, checksum: String) async throws -> String {
        if let stored = row.uploadRequest, stored.hasPrefix(checksum + " ") { return String(stored.dropFirst(checksum.count + 1)) }
        let request = Self.newRequestId()
        try await store.write { tx in
            try tx.markUploadRequest(row.luid, "\(checksum) \(request)")
        }
        return request
    }

    /// Small new files in one request; what comes back refused is handled as it would be alone.
    func performBatch(_ steps: [PlannedOperation], _ provider: any RemoteProvider) async throws -> Bool {
        guard let batching = provider.features.batchUpload else { return false }
        let (files, sent, unprepared) = try await prepareCreations(steps, inNewFolder: false)
        var progressed = false
        for step in unprepared where try await perform(step, provider) { progressed = true }  // alone: it reports what went wrong
        defer { progressBox.withLock { for entry in sent { $0.removeValue(forKey: entry.row.luid) } } }
        guard !files.isEmpty else { return progressed }
        let results: [Result<RemoteItem, ProviderError>]
        do {
            results = try await batching.uploadBatch(files)
        } catch let error as ProviderError {
            switch error {
            case .invalid, .notAFolder:
                // A batch the provider will not take: each goes alone.
                for entry in sent where try await perform(entry.step, provider) { progressed = true }
                return progressed
            default: break
            }
            if error.isRetryable {
                // One request: its files are retried together, on one schedule.
                try await failed(sent.map(\.step), SyncError(error))
                return progressed
            }
            for entry in sent { _ = try await outcome(error, of: entry.step, provider) }
            return progressed
        }
        if try await recordCreations(sent, results, provider) { progressed = true }
        trace("batch of \(sent.count)")
        return progressed
    }

    /// A new folder made there with the small new files of it that follow it in `unit` (``FillsNewFolders``). The
    /// folder's outcome is its step's, as alone; each file's as in a batch. A file not ready to go (changed since)
    /// is left for a later plan; if the folder fails, its files wait for it (in doubt: asked again with the same
    /// request ids once it is there).
    func performFill(_ unit: [PlannedOperation], _ provider: any RemoteProvider) async throws -> Bool {
        guard let filling = provider.features.newFolderFilling, let folderStep = unit.first else { return false }
        let (files, sent, _) = try await prepareCreations(Array(unit.dropFirst()), inNewFolder: true)
        defer { progressBox.withLock { for entry in sent { $0.removeValue(forKey: entry.row.luid) } } }
        var answers: [Result<RemoteItem, ProviderError>]?
        var progressed = try await perform(folderStep, provider) {
            guard let row = try await self.store.read({ tx in try tx.item(folderStep.item.rawValue) }) else { return }
            let parent = try await self.remoteId(of: row.lParent)
            let request = try await self.sendingCreation(row)
            let name = row.lName ?? "Folder"
            // Fewer than the provider takes along (some changed since the plan): the folder, then each file.
            let made =
                files.count >= filling.fillMinimum
                ? try await filling.createFolder(named: name, in: parent, requestId: request, filledWith: files)
                : try await filling.createFolderThenFiles(named: name, in: parent, requestId: request, files: files)
            try await self.recordCreated(row.luid, made.folder, parent: row.lParent)
            answers = made.files
        }
        guard var answers else { return progressed }
        if answers.count != sent.count { answers = sent.map { _ in .failure(.network("The remote answered for some of the files only.")) } }
        if try await recordCreations(sent, answers, provider) { progressed = true }
        trace("folder with \(sent.count) files")
        return progressed
    }

    /// A creation on its way: its step, its row as read, the checksum sent and the request id.
    struct SentCreation {
        var step: PlannedOperation
        var row: ItemRow
        var checksum: String
        var request: String
    }

    /// Reads the rows of new files about to go together, marks them sent (one write) and shows them uploading; the
    /// files to send, what they are, and the steps that could not be made ready (alone, they say why). `inNewFolder`:
    /// their folder is made with them (its id is not known yet).
    func prepareCreations(_ steps: [PlannedOperation], inNewFolder: Bool) async throws
        -> (files: [BatchFile], sent: [SentCreation], unprepared: [PlannedOperation])
    {
        // One read for the rows and their folders' ids, one write to mark the creations as sent: a batch of 100
        // small files cost 300 transactions (100 of them durable writes) when each file was looked up alone.
        let luids = steps.map(\.item.rawValue)
        let (rows, folders, folderPaths) = try await store.read { tx -> ([ItemRow], [String: String], [String: String]) in
            let rows = try tx.items(luids)
            var folders: [String: String] = [:]
            var paths: [String: String] = [:]
            for parent in Set(rows.compactMap(\.lParent)) {
                if let fileId = try tx.fileId(of: parent) { folders[parent] = fileId }
                if self.disk != nil, let path = try tx.localPath(parent) { paths[parent] = path }
            }
            return (rows, folders, paths)
        }
        let byLuid = Dictionary(rows.map { ($0.luid, $0) }, uniquingKeysWith: { first, _ in first })
        var files: [BatchFile] = []
        var sent: [SentCreation] = []
        var unprepared: [PlannedOperation] = []
        for step in steps {
            guard let row = byLuid[step.item.rawValue], row.fileId == nil else { continue }
            do {
                let parent: String
                if inNewFolder {
                    guard row.sourceRevision == nil, row.lParent.map({ folders[$0] == nil }) == true else { continue }
                    parent = ""
                } else {
                    guard let known = row.lParent.flatMap({ folders[$0] }) else { throw SyncError.invalid("A folder this change needs is not there yet.") }
                    parent = known
                }
                let source = try contentSource(row, folderPaths: folderPaths)
                let request = row.createRequest ?? Self.newRequestId()
                files.append(BatchFile(source: source, parentId: parent, name: row.lName ?? "file", mimeType: row.lMime, requestId: request))
                sent.append(SentCreation(step: step, row: row, checksum: source.checksum, request: request))
                progressBox.withLock { $0[row.luid] = .uploading(progress: 0) }
            } catch {
                unprepared.append(step)
            }
        }
        let marked = sent
        try await store.write { tx in
            for entry in marked {
                try tx.markCreationSent(entry.row.luid, request: entry.request)
            }
        }
        return (files, sent, unprepared)
    }

    /// Records what came back for creations sent together (the successes in one write); each refusal is handled as
    /// it would be alone. `true` if any changed the trees.
    func recordCreations(_ sent: [SentCreation], _ results: [Result<RemoteItem, ProviderError>], _ provider: any RemoteProvider) async throws -> Bool {
        try await store.write { tx in
            for (entry, result) in zip(sent, results) {
                guard case .success(let item) = result else { continue }
                // The row as read before the request, as the write above left it.
                var asRead = entry.row
                asRead.createSent = true
                asRead.createRequest = entry.request
                try self.recordCreated(tx, entry.row.luid, item, parent: entry.row.lParent, checksum: entry.checksum, asRead: asRead)
                try tx.clearFailures([entry.row.luid])
            }
        }
        var progressed = false
        for (entry, result) in zip(sent, results) {
            switch result {
            case .success:
                progressed = true
                noteDone(entry.step)
            case .failure(let error): if try await outcome(error, of: entry.step, provider) { progressed = true }
            }
        }
        return progressed
    }
}
