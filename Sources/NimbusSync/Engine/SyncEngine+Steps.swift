import Crypto
import Foundation
import GRDB
import NimbusAPI

/// Carrying out the planner's steps: through the provider (there) or on the local side (the app's store, or the
/// folder on disk), each outcome recorded in the trees. A step decides nothing: an outcome that is not success
/// (the head moved there, a name taken, the file changed here meanwhile) is recorded as the new state of a tree,
/// and the next plan decides what it means.
extension SyncEngine {
    /// The disk changed since the plan was made from it: nothing was done; the folder is scanned again.
    struct LocalChanged: Error {}

    /// Carries out one step; `true` if the trees changed (it succeeded, or its outcome told something new).
    func perform(_ step: PlannedOperation, _ provider: any RemoteProvider) async throws -> Bool {
        try await perform(step, provider) { try await self.carryOut(step, provider) }
    }

    /// ``perform(_:_:)`` with `carryingOut` doing the step's work.
    func perform(_ step: PlannedOperation, _ provider: any RemoteProvider, carryingOut: () async throws -> Void) async throws -> Bool {
        do {
            var path: String?
            switch step {
            case .moveRemote:
                // Where it was: still its place there (here it has moved already).
                path = try await database.pool.read { db in try self.remotePath(db, step.item.rawValue) ?? self.localPath(db, step.item.rawValue) }
            case .deleteLocal, .deleteRemote, .fork, .moveLocal:
                path = try await database.pool.read { db in try self.localPath(db, step.item.rawValue) ?? self.remotePath(db, step.item.rawValue) }
            default:
                break
            }
            try await carryingOut()
            try await succeeded(step.item.rawValue)
            noteDone(step, path: path)
            stepErrors[step.item.rawValue] = nil
            trace("\(step) ✓")
            return true
        } catch let error as ProviderError {
            do {
                return try await outcome(error, of: step, provider)
            } catch let followUp as ProviderError {
                // Looking into what the refusal meant failed too (offline again): tried again later.
                try await failed(step, SyncError(followUp))
                return false
            }
        } catch is LocalChanged {
            trace("\(step): changed here meanwhile")
            needsScan = true
            return true
        } catch let error as SyncError {
            try await failed(step, error)
            return false
        } catch is CancellationError {
            throw CancellationError()
        } catch {
            try await failed(step, .localFile("\(error)"))
            return false
        }
    }

    func carryOut(_ step: PlannedOperation, _ provider: any RemoteProvider) async throws {
        if isDatabaseOnly(step) {
            let discard = try await database.pool.write { db in try self.recordLocally(db, step) }
            for path in discard { try? FileManager.default.removeItem(atPath: path) }
            return
        }
        guard let row = try await database.pool.read({ db in try ItemRow.fetch(db, luid: step.item.rawValue) }) else { return }
        switch step {
        case .createRemoteFolder:
            let parent = try await remoteId(of: row.lParent)
            let request = try await sendingCreation(row)
            let folder = try await provider.createFolder(named: row.lName ?? "Folder", in: parent, requestId: request)
            try await recordCreated(row.luid, folder, parent: row.lParent)
        case .upload(_, let base):
            try await upload(row, base: base, provider)
        case .moveRemote(_, let parent, let name):
            guard let fileId = row.fileId else { return }
            let moved = try await provider.move(fileId, to: try await remoteId(of: parent.rawValue), name: name)
            try await database.pool.write { db in
                guard let stored = try ItemRow.fetch(db, luid: row.luid) else { return }
                var updated = stored
                updated.setRemote(moved, parentLuid: parent.rawValue)
                // A move changes no content: content a pull brought since the plan (an edit there after this move)
                // stays; the answer's could only be that or older, and the feed has moved past it.
                if stored.rRevision != row.rRevision { updated.takeRemoteContent(from: stored) }
                updated.sParent = parent.rawValue
                updated.sName = name
                try updated.update(db, from: stored)
                if stored.isFolder, moved.id != fileId { try self.renameBeneath(db, stored.luid, from: fileId, to: moved.id) }
            }
        case .deleteRemote:
            if let fileId = row.fileId {
                do { try await provider.delete(fileId) } catch ProviderError.notFound {}
            }
            try await database.pool.write { db in
                for luid in try self.remoteSubtree(db, row.luid) {
                    guard let stored = try ItemRow.fetch(db, luid: luid) else { continue }
                    var gone = stored
                    gone.rPresent = false
                    gone.sPresent = false
                    if gone.lPresent { try gone.update(db, from: stored) } else { try ItemRow.delete(db, luid: luid) }
                }
            }
        case .createLocalFolder:
            try await createLocalFolder(row)
        case .download:
            try await download(row, provider)
        case .learnChecksum:
            try await learnChecksum(row, provider)
        case .moveLocal(_, let parent, let name):
            try await moveLocal(row, to: parent.rawValue, name: name)
        case .deleteLocal:
            try await deleteLocal(row)
        case .record, .link, .forget, .hold, .release:
            break  // database only (above)
        case .fork(_, let name):
            try await fork(row, name: name)
        }
    }

    /// Steps that only change the database: the merge base, links, holds — and, for the app's store, every step here
    /// (its local tree is the view; the content of a pinned file is fetched after the round).
    nonisolated func isDatabaseOnly(_ step: PlannedOperation) -> Bool {
        switch step {
        case .record, .link, .forget, .hold, .release: true
        case .createLocalFolder, .download, .moveLocal, .deleteLocal: disk == nil
        default: false
        }
    }

    /// The effect of a database-only step, inside `db`'s transaction; returns content files to delete afterwards.
    nonisolated func recordLocally(_ db: Database, _ step: PlannedOperation) throws -> [String] {
        guard let stored = try ItemRow.fetch(db, luid: step.item.rawValue) else { return [] }
        var updated = stored
        var discard: [String] = []
        switch step {
        case .record:
            switch (stored.rPresent, stored.lPresent) {
            case (false, false):
                try ItemRow.delete(db, luid: stored.luid)
                return []
            case (true, true):
                if !stored.sPresent {
                    updated.syncRemote()
                } else {
                    if stored.isFolder || stored.lChecksum == stored.rChecksum { updated.syncRemoteContent() }
                    if stored.lParent == stored.rParent && stored.lName == stored.rName {
                        updated.sParent = stored.rParent
                        updated.sName = stored.rName
                    }
                }
            default:
                return []
            }
        case .link(_, let other):
            guard try ItemRow.fetch(db, luid: other.rawValue) != nil else { return [] }
            try merge(db, from: other.rawValue, into: stored.luid)
            guard let merged = try ItemRow.fetch(db, luid: stored.luid) else { return [] }
            updated = merged
            updated.syncRemote()
            updated.createRequest = nil
            updated.createSent = false
            try updated.update(db, from: merged)
            return []
        case .forget:
            updated.forgetRemote()
        case .hold(_, let hold):
            updated.hold = hold
        case .release:
            updated.hold = nil
        case .createLocalFolder:
            updated.adoptRemote()
            updated.syncRemote()
        case .download:
            // The view takes the remote state; a copy of older content is dropped (the content of a pinned file is
            // fetched after the round).
            if stored.lPresent {
                updated.lChecksum = stored.rChecksum
                updated.lSize = stored.rSize
                updated.lMime = stored.rMime
                updated.lModified = stored.rModified
                updated.syncRemoteContent()
            } else {
                updated.adoptRemote()
                updated.syncRemote()
            }
            if let path = stored.contentPath, stored.contentChecksum != updated.lChecksum, stored.contentOwned {
                discard.append(path)
                updated.contentPath = nil
                updated.contentChecksum = nil
            }
        case .moveLocal(_, let parent, let name):
            updated.lParent = parent.rawValue
            updated.lName = name
            updated.sParent = parent.rawValue
            updated.sName = name
        case .deleteLocal:
            for luid in try localSubtree(db, stored.luid) {
                guard let item = try ItemRow.fetch(db, luid: luid) else { continue }
                if item.contentOwned, let path = item.contentPath { discard.append(path) }
                if !item.rPresent {
                    try ItemRow.delete(db, luid: luid)
                } else {
                    var gone = item
                    gone.lPresent = false
                    gone.sPresent = false
                    gone.contentPath = nil
                    gone.contentChecksum = nil
                    try gone.update(db, from: item)
                }
            }
            return discard
        default:
            return []
        }
        try updated.update(db, from: stored)
        return discard
    }

    /// Database-only steps, many in one transaction (a pull that brings 10,000 changes into the app's view is one
    /// write, not 10,000).
    func performDatabaseSteps(_ steps: [PlannedOperation]) async throws -> Bool {
        guard !steps.isEmpty else { return false }
        let discard = try await database.pool.write { db -> [String] in
            var discard: [String] = []
            for step in steps { discard += try self.recordLocally(db, step) }
            try db.execute(sql: "DELETE FROM failures WHERE luid IN (\(databaseQuestionMarks(count: steps.count)))", arguments: StatementArguments(steps.map(\.item.rawValue)))
            return discard
        }
        for path in discard { try? FileManager.default.removeItem(atPath: path) }
        for step in steps { noteDone(step) }
        if Self.tracing { trace("\(steps.count) steps recorded") }
        return true
    }

    /// What a provider's refusal tells, recorded in the trees (`true`: plan again now), or a failure to retry.
    func outcome(_ error: ProviderError, of step: PlannedOperation, _ provider: any RemoteProvider) async throws -> Bool {
        trace("\(step) → \(error)")
        let luid = step.item.rawValue
        switch error {
        case .versionConflict(let current):
            // The head moved there: that is the remote state now (the next plan sees both changes).
            let fileId = try await database.pool.read { db in try ItemRow.fetch(db, luid: luid)?.fileId }
            if let current {
                try await database.pool.write { db in try self.applyChange(db, .upsert(current)) }
            } else if let fileId {
                try await refetch(fileId, provider)
            }
            return true
        case .nameTaken(let existing):
            // Someone else's item holds the name: not this item's creation (that would have come back as itself).
            try await database.pool.write { db in try db.execute(sql: "UPDATE items SET create_sent = 0 WHERE luid = ?", arguments: [luid]) }
            if let existing {
                try await refetch(existing, provider)
            } else if let parent = try await database.pool.read({ db in try ItemRow.fetch(db, luid: luid)?.lParent }) {
                let parentId = try await remoteId(of: parent)
                let children = try await provider.children(of: parentId)
                try await database.pool.write { db in for child in children { try self.applyChange(db, .upsert(child)) } }
            }
            return true
        case .requestIdReused(let existing):
            // This item's creation landed earlier, with the content it had then: that file is this item (based on
            // what was sent then; what changed since goes as a new version).
            guard let existing else {
                // The server does not say what it made: nothing to learn, so the step fails (and is retried), in
                // view, rather than waiting unseen.
                try await failed(step, SyncError(error))
                return false
            }
            let item: RemoteItem
            do {
                item = try await provider.item(existing)
            } catch ProviderError.notFound {
                // What it made then was deleted there since: this item is new again, under a new request.
                try await database.pool.write { db in
                    try db.execute(sql: "UPDATE items SET create_request = ?, create_sent = 0 WHERE luid = ?", arguments: [Self.newRequestId(), luid])
                }
                return true
            }
            try await database.pool.write { db in
                if let other = try ItemRow.fetch(db, fileId: existing), other.luid != luid {
                    try self.merge(db, from: other.luid, into: luid)
                }
                guard let stored = try ItemRow.fetch(db, luid: luid) else { return }
                var updated = stored
                updated.setRemote(item, parentLuid: try self.parentLuid(db, item.parentId))
                updated.syncRemote()
                updated.createRequest = nil
                updated.createSent = false
                try updated.update(db, from: stored)
            }
            return true
        case .notFound:
            // The item (or the folder it goes in) is gone there.
            let row = try await database.pool.read { db in try ItemRow.fetch(db, luid: luid) }
            var itemThere: Bool?
            if let fileId = row?.fileId {
                itemThere = try await refetch(fileId, provider)
            }
            var parentThere: Bool?
            if case .upload(_, nil) = step, let parent = row?.lParent, let parentRow = try await database.pool.read({ db in try ItemRow.fetch(db, luid: parent) }),
                let parentId = parentRow.fileId
            {
                parentThere = try await refetch(parentId, provider)
            } else if case .createRemoteFolder = step, let parent = row?.lParent,
                let parentId = try await database.pool.read({ db in try ItemRow.fetch(db, luid: parent)?.fileId })
            {
                parentThere = try await refetch(parentId, provider)
            }
            // A creation refused as "not there" while its folder is there, and the item (if it was there before)
            // still is: nothing learnt, and planning again would ask the same. It fails, in view, and is retried
            // with backoff (the folder may have been replaced under its name meanwhile) — rather than the round
            // ending quietly with the file unsent (seen: a store that answers 404 to a key with a line break in it).
            if parentThere == true, itemThere != false {
                try await failed(step, .refusedAsNotThere("The remote refused it as not there, although the folder it goes in is there."))
                return false
            }
            return true
        case .checksumMismatch:
            // The bytes changed since they were hashed.
            if disk != nil {
                needsScan = true
            } else if let row = try await database.pool.read({ db in try ItemRow.fetch(db, luid: luid) }), let path = row.contentPath {
                let checksum: String
                let size: Int64
                do {
                    (checksum, size) = try hashContent(path)
                } catch let error as EncryptionError {
                    // A sealed copy that does not open is never sent (nor taken for a change).
                    try await failed(step, .localFile("The encrypted copy of this file is damaged: \(error.description)"))
                    return false
                } catch {
                    try await failed(step, .localFile("The file to upload is gone (\(path))."))
                    return false
                }
                try await database.pool.write { db in
                    guard let stored = try ItemRow.fetch(db, luid: luid) else { return }
                    var updated = stored
                    updated.lChecksum = checksum
                    updated.lSize = size
                    updated.contentChecksum = checksum
                    try updated.update(db, from: stored)
                }
            }
            return true
        case .gone:
            return true  // an expired session: the next attempt starts a new one
        case .unauthorized(let message):
            phase = .needsSignIn
            throw SyncError.unauthorized(message)
        default:
            try await failed(step, SyncError(error))
            return false
        }
    }

    /// The path of an item in the remote tree, relative to the root.
    nonisolated func remotePath(_ db: Database, _ luid: String) throws -> String? {
        try treePath(db, luid, sql: "SELECT r_parent, r_name, r_present FROM items WHERE luid = ?")
    }

    /// Takes an item's current state there into the remote tree (gone, if it is); whether it is there.
    @discardableResult
    func refetch(_ fileId: String, _ provider: any RemoteProvider) async throws -> Bool {
        let change: RemoteChange
        do { change = .upsert(try await provider.item(fileId)) } catch ProviderError.notFound { change = .remove(id: fileId) }
        try await database.pool.write { db in try self.applyChange(db, change) }
        if case .upsert = change { return true }
        return false
    }

    /// The provider's id of the item with LUID `luid` (a folder something goes into).
    func remoteId(of luid: String?) async throws -> String {
        guard let luid, let fileId = try await database.pool.read({ db in try ItemRow.fetch(db, luid: luid)?.fileId }) else {
            throw SyncError.invalid("A folder this change needs is not there yet.")
        }
        return fileId
    }

    /// The request id that creates the item, marked as sent before it is (after a crash the item is in doubt,
    /// and the same id asks again).
    func sendingCreation(_ row: ItemRow) async throws -> String {
        let request = row.createRequest ?? Self.newRequestId()
        if !row.createSent || row.createRequest == nil {
            try await database.pool.write { db in
                try db.execute(sql: "UPDATE items SET create_request = ?, create_sent = 1 WHERE luid = ?", arguments: [request, row.luid])
            }
        }
        return request
    }

    /// Records that the item's creation made `item` there (created in `parent`): both trees agree.
    func recordCreated(_ luid: String, _ item: RemoteItem, parent: String?, checksum: String? = nil) async throws {
        try await database.pool.write { db in
            try self.recordCreated(db, luid, item, parent: parent, checksum: checksum, asRead: nil)
        }
    }

    /// ``recordCreated(_:_:parent:checksum:)`` inside a write (a batch records all its answers in one). `asRead`: the
    /// row as read before the request, marked sent (only the columns this changes are written, so a change the user
    /// made meanwhile stays); nil: read now.
    nonisolated func recordCreated(_ db: Database, _ luid: String, _ item: RemoteItem, parent: String?, checksum: String?, asRead: ItemRow?) throws {
        var fed = false
        let stored: ItemRow
        if let other = try ItemRow.luid(db, fileId: item.id), other != luid {
            try merge(db, from: other, into: luid)  // the feed brought it first
            fed = true
            guard let merged = try ItemRow.fetch(db, luid: luid) else { return }
            stored = merged
        } else if let asRead {
            stored = asRead
        } else {
            guard let fresh = try ItemRow.fetch(db, luid: luid) else { return }
            stored = fresh
        }
        var updated = stored
        updated.setRemote(item, parentLuid: try createdParent(db, item, requested: parent))
        if updated.rChecksum == nil { updated.rChecksum = checksum }
        // The merge base is what this creation made.
        updated.syncRemote()
        updated.createRequest = nil
        updated.createSent = false
        // Made by an earlier attempt and deleted there since: that deletion is the remote state now.
        if item.isDeleted { updated.rPresent = false }
        // The feed brought the item before this answer came (a pull ran meanwhile): the feed's state can only
        // be this creation's or a later one (another device's edit, move or deletion since), and that change
        // has been read from the feed already — it must stay the remote state, or it would never be seen.
        if fed { updated.takeRemote(from: stored) }
        try keepSentContent(&updated)
        try updated.update(db, from: stored)
    }

    /// Where a creation's answer says the item is: where it was asked for — unless the request id brought back
    /// what an earlier attempt made, which may have been moved there since (or was asked for elsewhere before a
    /// move here): then the item's parent there, so the local move is still seen and sent.
    nonisolated func createdParent(_ db: Database, _ item: RemoteItem, requested: String?) throws -> String? {
        guard let parentId = item.parentId else { return requested }
        if let requested, try ItemRow.fetch(db, luid: requested)?.fileId == parentId { return requested }
        return try parentLuid(db, parentId)
    }

    /// After an upload, the engine's private copy of the bytes becomes the cached content.
    nonisolated func keepSentContent(_ row: inout ItemRow) throws {
        guard disk == nil, row.contentOwned, let path = row.contentPath, path.hasPrefix(stagingDirectory.path), let fileId = row.fileId,
            row.contentChecksum == row.rChecksum
        else { return }
        let destination = contentDirectory.appending(path: fileId).path
        try? FileManager.default.removeItem(atPath: destination)
        if (try? FileManager.default.moveItem(atPath: path, toPath: destination)) != nil { row.contentPath = destination }
    }

    // MARK: Uploads

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
                relative = try database.pool.read { db in try self.localPath(db, row.luid) }
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
        if let revision = row.sourceRevision, let fileId = row.fileId {
            // A restore: the content is that revision's, already there.
            guard let revisions = provider as? any RevisionsProvider else { throw SyncError.invalid("This remote keeps no revisions.") }
            let restored = try await revisions.restore(fileId, revision: revision)
            try await database.pool.write { db in
                guard let stored = try ItemRow.fetch(db, luid: luid) else { return }
                var updated = stored
                updated.setRemote(restored, parentLuid: stored.rParent)
                updated.syncRemoteContent()
                updated.lChecksum = restored.checksum
                updated.lSize = restored.size
                updated.sourceRevision = nil
                try updated.update(db, from: stored)
            }
            return
        }
        var row = row
        var unhashed = false
        if row.lUnhashed, row.lChecksum == nil, row.fileId == nil, let disk {
            // A new file not read yet: sent as it is read, where the remote hashes while it takes it (not a retried
            // creation: its answer is told by the content's checksum); otherwise read now.
            if !row.createSent, let hashing = provider as? any HashesWhileSending, await hashing.takesUnhashed(size: row.lSize ?? 0) {
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
        try await database.pool.write { db in
            guard let stored = try ItemRow.fetch(db, luid: luid) else { return }
            var updated = stored
            updated.setRemote(made, parentLuid: stored.rParent)
            if updated.rChecksum == nil { updated.rChecksum = source.checksum }
            // The merge base takes what was sent (the place stays: a move goes as its own step).
            updated.sRevision = updated.rRevision
            updated.sChecksum = source.checksum
            // A pull meanwhile brought another state than the one this version was based on: with If-Match on
            // `base` honoured, that state came after this commit (another device's edit, move or deletion), and the
            // feed has moved past it — it stays the remote state (the next plan downloads it or sees the conflict).
            if base != nil, !stored.rPresent || (stored.rRevision != base && stored.rRevision != made.revision) {
                updated.takeRemote(from: stored)
            }
            updated.uploadRequest = nil
            try self.keepSentContent(&updated)
            try updated.update(db, from: stored)
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
        try await database.pool.write { db in
            try self.recordRead(db, [pair])
            try self.recordCreated(db, row.luid, made, parent: row.lParent, checksum: checksum, asRead: nil)
        }
    }

    /// Reads unhashed files now (``DiskFolder/readNow(_:at:)``) and records what was learnt; the rows as read.
    func read(_ rows: [ItemRow], _ disk: DiskFolder) async throws -> [ItemRow] {
        let paths = try await database.pool.read { db in try rows.map { try self.localPath(db, $0.luid) } }
        let read = zip(rows, paths).map { row, path in disk.readNow(row, at: path) }
        try await database.pool.write { db in try self.recordRead(db, Array(zip(rows, read))) }
        if read.contains(where: \.lChanging) { needsScan = true }
        return read
    }

    /// What ``DiskFolder/readNow(_:at:)`` (or an upload) learnt of unhashed files, each `(as read, learnt)` — unless a
    /// scan looked at the file again meanwhile.
    nonisolated func recordRead(_ db: Database, _ pairs: [(ItemRow, ItemRow)]) throws {
        for (row, updated) in pairs {
            guard let stored = try ItemRow.fetch(db, luid: row.luid), stored.lUnhashed, stored.lChecksum == nil, !stored.lChanging,
                stored.lInode == row.lInode, stored.lMtime == row.lMtime, stored.lSize == row.lSize
            else { continue }
            var changed = stored
            changed.lUnhashed = false
            changed.lChecksum = updated.lChecksum
            changed.lSize = updated.lSize
            changed.lChanging = updated.lChanging
            try changed.update(db, from: stored)
        }
    }

    /// The request id of a new version with this content (the same while the content is the same: a resumable
    /// session is found again by it).
    func versionRequest(_ row: ItemRow, checksum: String) async throws -> String {
        if let stored = row.uploadRequest, stored.hasPrefix(checksum + " ") { return String(stored.dropFirst(checksum.count + 1)) }
        let request = Self.newRequestId()
        try await database.pool.write { db in
            try db.execute(sql: "UPDATE items SET upload_request = ? WHERE luid = ?", arguments: ["\(checksum) \(request)", row.luid])
        }
        return request
    }

    /// Small new files in one request; what comes back refused is handled as it would be alone.
    func performBatch(_ steps: [PlannedOperation], _ provider: any RemoteProvider) async throws -> Bool {
        guard let batching = provider as? any BatchUploadProvider else { return false }
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
        guard let filling = provider as? any FillsNewFolders, let folderStep = unit.first else { return false }
        let (files, sent, _) = try await prepareCreations(Array(unit.dropFirst()), inNewFolder: true)
        defer { progressBox.withLock { for entry in sent { $0.removeValue(forKey: entry.row.luid) } } }
        var answers: [Result<RemoteItem, ProviderError>]?
        var progressed = try await perform(folderStep, provider) {
            guard let row = try await self.database.pool.read({ db in try ItemRow.fetch(db, luid: folderStep.item.rawValue) }) else { return }
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
        let (rows, folders, folderPaths) = try await database.pool.read { db -> ([ItemRow], [String: String], [String: String]) in
            let rows = try ItemRow.fetchAll(db, where: "luid IN (\(databaseQuestionMarks(count: luids.count)))", arguments: StatementArguments(luids))
            var folders: [String: String] = [:]
            var paths: [String: String] = [:]
            for parent in Set(rows.compactMap(\.lParent)) {
                if let fileId = try String.fetchOne(db.cachedStatement(sql: "SELECT file_id FROM items WHERE luid = ?"), arguments: [parent])
                    .map({ try db.openedId($0) })
                {
                    folders[parent] = fileId
                }
                if self.disk != nil, let path = try self.localPath(db, parent) { paths[parent] = path }
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
        try await database.pool.write { db in
            for entry in marked {
                try db.cachedStatement(sql: "UPDATE items SET create_request = ?, create_sent = 1 WHERE luid = ?").execute(arguments: [entry.request, entry.row.luid])
            }
        }
        return (files, sent, unprepared)
    }

    /// Records what came back for creations sent together (the successes in one write); each refusal is handled as
    /// it would be alone. `true` if any changed the trees.
    func recordCreations(_ sent: [SentCreation], _ results: [Result<RemoteItem, ProviderError>], _ provider: any RemoteProvider) async throws -> Bool {
        try await database.pool.write { db in
            for (entry, result) in zip(sent, results) {
                guard case .success(let item) = result else { continue }
                // The row as read before the request, as the write above left it.
                var asRead = entry.row
                asRead.createSent = true
                asRead.createRequest = entry.request
                try self.recordCreated(db, entry.row.luid, item, parent: entry.row.lParent, checksum: entry.checksum, asRead: asRead)
                try db.cachedStatement(sql: "DELETE FROM failures WHERE luid = ?").execute(arguments: [entry.row.luid])
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

    // MARK: Here

    func createLocalFolder(_ row: ItemRow) async throws {
        if let disk {
            guard let parent = row.rParent, let above = try await database.pool.read({ db in try self.localPath(db, parent) }), let name = row.rName else {
                throw LocalChanged()
            }
            let relative = above.isEmpty ? name : above + "/" + name
            if try !disk.fileSystem.makeFolder(disk.absolute(relative)) {
                guard disk.fileSystem.stat(disk.absolute(relative))?.kind == .folder else { throw LocalChanged() }
            }
            let stat = disk.fileSystem.stat(disk.absolute(relative))
            try await database.pool.write { db in
                guard let stored = try ItemRow.fetch(db, luid: row.luid) else { return }
                var updated = stored
                updated.adoptRemote()
                updated.lInode = stat.map { Int64(bitPattern: $0.inode) }
                updated.syncRemote()
                try updated.update(db, from: stored)
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
            guard let path = try await database.pool.read({ db in try self.localPath(db, row.luid) }) else { throw LocalChanged() }
            relative = path
        } else {
            guard let parent = row.rParent, let above = try await database.pool.read({ db in try self.localPath(db, parent) }), let name = row.rName else {
                throw LocalChanged()
            }
            relative = above.isEmpty ? name : above + "/" + name
        }
        // The file it replaces likely holds much of the new content: a provider that can reuse it fetches the rest.
        let seeds = row.lPresent && provider is any DeltaDownloadProvider ? [try? disk.fileSystem.exportFile(disk.absolute(relative))].compactMap { $0 } : []
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
            try disk.fileSystem.importFile(plain, to: temporary, modeOf: row.lPresent ? target : nil, modified: modified)
        } else {
            try disk.fileSystem.importFile(partial.url, to: temporary, modeOf: row.lPresent ? target : nil, modified: modified)
        }
        // The last check: the file it replaces is still what the plan saw (nothing unsent is replaced), and nothing
        // that appeared at the path meanwhile is.
        var aside: String?
        if row.lPresent {
            aside = try disk.takeAside(row, at: relative)
            if aside == nil {
                try? disk.fileSystem.removeFile(temporary)
                throw LocalChanged()
            }
        }
        // The file as placed: its stat, taken before it is visible (a save right after must show as a change).
        let stat = disk.fileSystem.stat(temporary)
        let placed = try disk.fileSystem.renameNoReplace(temporary, to: target)
        if let aside { try? disk.fileSystem.removeFile(aside) }  // the replaced version: synced, on the remote
        guard placed else {
            try? disk.fileSystem.removeFile(temporary)
            throw LocalChanged()
        }
        try await database.pool.write { db in
            guard let stored = try ItemRow.fetch(db, luid: row.luid) else { return }
            var updated = stored
            if !stored.lPresent {
                updated.adoptRemote()
                updated.syncRemote()
            } else {
                updated.lMime = stored.rMime
                updated.syncRemoteContent()
            }
            updated.lChecksum = partial.checksum
            updated.lSize = stat?.size ?? stored.rSize
            updated.lInode = stat.map { Int64(bitPattern: $0.inode) }
            updated.lMtime = stat?.mtime
            updated.lModified = stat.map { $0.mtime / 1_000_000 } ?? stored.rModified
            updated.lChanging = false
            if updated.sChecksum == nil { updated.sChecksum = partial.checksum }
            if updated.rChecksum == nil, updated.rRevision == revision { updated.rChecksum = partial.checksum }
            try updated.update(db, from: stored)
        }
    }

    /// Reads a remote file whose provider keeps no SHA-256 once, to learn it (the provider remembers it for that
    /// version); the remote tree takes it if the file is still at that version.
    func learnChecksum(_ row: ItemRow, _ provider: any RemoteProvider) async throws {
        guard let fileId = row.fileId, let revision = row.rRevision else { return }
        let fetched = try await fetch(fileId: fileId, revision: revision, size: row.rSize ?? 0, checksum: nil, luid: row.luid, provider)
        try? FileManager.default.removeItem(at: fetched.url)
        try await database.pool.write { db in
            guard let stored = try ItemRow.fetch(db, luid: row.luid), stored.rRevision == revision, stored.rChecksum == nil else { return }
            var updated = stored
            updated.rChecksum = fetched.checksum
            try updated.update(db, from: stored)
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
        } else if let delta = provider as? any DeltaDownloadProvider, size >= delta.deltaMinimum {
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
        let found = try? await database.pool.read { db -> (row: ItemRow, path: String?)? in
            guard let row = try ItemRow.fetch(db, fileId: fileId), !row.isFolder else { return nil }
            return (row, row.lPresent ? try self.localPath(db, row.luid) : nil)
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
        try await database.pool.write { db in
            guard let stored = try ItemRow.fetch(db, luid: row.luid) else { return }
            var updated = stored
            updated.contentPath = destination.path
            updated.contentChecksum = fetched.checksum
            updated.contentOwned = true
            try updated.update(db, from: stored)
        }
        notifyChanged()
    }

    /// Pinned files whose content is not here are downloaded (the app library).
    func hydratePinned(_ provider: any RemoteProvider) async throws {
        guard disk == nil else { return }
        let rows = try await database.pool.read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT \(ItemRow.columns) FROM items WHERE pinned = 1 AND l_present = 1 AND is_folder = 0 AND file_id IS NOT NULL
                    AND (content_path IS NULL OR content_checksum IS NOT l_checksum) AND l_checksum IS r_checksum
                    """
            ).map { try ItemRow.decode($0, db) }
        }
        let now = self.now.millis
        let failures = try await database.pool.read { db in try FailureRow.all(db) }
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
            let (from, above) = try await database.pool.read { db in (try self.localPath(db, row.luid), try self.localPath(db, parent)) }
            guard let from, let above else { throw LocalChanged() }
            let to = above.isEmpty ? name : above + "/" + name
            guard disk.isStill(row, at: from), try disk.fileSystem.renameNoReplace(disk.absolute(from), to: disk.absolute(to)) else { throw LocalChanged() }
        }
        try await database.pool.write { db in
            guard let stored = try ItemRow.fetch(db, luid: row.luid) else { return }
            var updated = stored
            updated.lParent = parent
            updated.lName = name
            updated.sParent = parent
            updated.sName = name
            try updated.update(db, from: stored)
        }
    }

    /// Deletes the item here (a folder with everything in it), each file checked just before it goes; a file
    /// that changed since the plan stays (and stops the rest of the folder's deletion).
    func deleteLocal(_ row: ItemRow) async throws {
        let subtree = try await database.pool.read { db -> [(ItemRow, String?)] in
            try self.localSubtree(db, row.luid).reversed().compactMap { luid in
                guard let item = try ItemRow.fetch(db, luid: luid) else { return nil }
                return (item, try self.localPath(db, luid))
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
        try await database.pool.write { db in
            for item in gone {
                guard let stored = try ItemRow.fetch(db, luid: item.luid) else { continue }
                if !stored.rPresent {
                    try ItemRow.delete(db, luid: stored.luid)
                } else {
                    var updated = stored
                    updated.lPresent = false
                    updated.sPresent = false
                    updated.contentPath = nil
                    updated.contentChecksum = nil
                    try updated.update(db, from: stored)
                }
            }
        }
        if stopped { throw LocalChanged() }
    }

    /// This side's version becomes a new item beside it under `name`; the item takes the remote version next.
    func fork(_ row: ItemRow, name: String) async throws {
        if let disk {
            guard let from = try await database.pool.read({ db in try self.localPath(db, row.luid) }) else { throw LocalChanged() }
            let to = (from.contains("/") ? String(from[..<from.lastIndex(of: "/")!]) + "/" : "") + name
            guard !row.lChanging, try disk.fileSystem.renameNoReplace(disk.absolute(from), to: disk.absolute(to)) else { throw LocalChanged() }
        }
        try await database.pool.write { db in
            guard let stored = try ItemRow.fetch(db, luid: row.luid) else { return }
            if !stored.sPresent && !stored.rPresent {
                // Only here: it just takes the other name.
                var renamed = stored
                renamed.lName = name
                try renamed.update(db, from: stored)
                return
            }
            var copy = ItemRow.empty(ItemID.make().rawValue, isFolder: stored.isFolder)
            copy.lPresent = true
            copy.lParent = stored.lParent
            copy.lName = name
            copy.lMime = stored.lMime
            copy.lSize = stored.lSize
            copy.lChecksum = stored.lChecksum
            copy.lModified = stored.lModified
            copy.lInode = stored.lInode
            copy.lMtime = stored.lMtime
            copy.contentPath = stored.contentPath
            copy.contentChecksum = stored.contentChecksum
            copy.contentOwned = stored.contentOwned
            copy.createRequest = Self.newRequestId()
            copy.lastAccess = stored.lastAccess
            try copy.save(db)
            try db.execute(sql: "UPDATE items SET l_parent = ? WHERE l_parent = ? AND l_present = 1", arguments: [copy.luid, stored.luid])
            var original = stored
            original.lPresent = false
            original.lChanging = false
            original.sPresent = false
            original.hold = nil
            original.contentPath = nil
            original.contentChecksum = nil
            original.uploadRequest = nil
            original.sourceRevision = nil
            try original.update(db, from: stored)
        }
    }

    /// The user settles a held conflict by keeping both: this side's version becomes the conflict copy.
    func settleFork(_ row: ItemRow) async throws {
        let name = try await database.pool.read { db -> String in
            let base = FileName.conflictCopy(row.lName ?? "file", device: self.configuration.deviceName, date: self.now)
            return try self.freeName(db, base, in: row.lParent ?? ItemID.root.rawValue)
        }
        try await fork(row, name: name)
    }

    /// `name`, or `name (1)`, `name (2)`… — the first that nothing in folder `parent` holds, here or there.
    nonisolated func freeName(_ db: Database, _ name: String, in parent: String) throws -> String {
        var candidate = name
        var attempt = 1
        while try String.fetchOne(
            db.cachedStatement(sql: "SELECT luid FROM items WHERE ((l_parent = ? AND l_present = 1) OR (r_parent = ? AND r_present = 1)) AND (l_name = ? OR r_name = ?)"),
            arguments: [parent, parent, db.storeCipher?.sealName(candidate) ?? candidate, db.storeCipher?.sealName(candidate) ?? candidate]) != nil,
            attempt < 10_000
        {
            candidate = FileName.numbered(name, attempt)
            attempt += 1
        }
        return candidate
    }

    /// A folder this device moved there got a new id: a provider whose ids are paths (WebDAV, S3, a local folder, a
    /// crypt remote over one). What is beneath it moved with it, so the ids of the remote tree beneath it take the
    /// new path (and the folders' listed revisions follow) — otherwise the next listing would show each of them gone
    /// and a new item at its new place, reported as deleted there and fetched again.
    nonisolated func renameBeneath(_ db: Database, _ luid: String, from old: String, to new: String) throws {
        for below in try remoteSubtree(db, luid) where below != luid {
            guard let stored = try ItemRow.fetch(db, luid: below), let id = stored.fileId, id.hasPrefix(old + "/") else { continue }
            let renamed = new + id.dropFirst(old.count)
            // (A row that still holds the new path — something once there — keeps it; this one is then found by listing.)
            guard try ItemRow.luid(db, fileId: renamed) == nil else { continue }
            var row = stored
            row.fileId = renamed
            try row.update(db, from: stored)
            if stored.isFolder {
                try db.execute(
                    sql: "UPDATE listed_folders SET file_id = ? WHERE file_id = ?", arguments: [db.storedId(renamed), db.storedId(id)])
            }
        }
    }

    /// An item and everything under it in the remote tree.
    nonisolated func remoteSubtree(_ db: Database, _ luid: String) throws -> [String] {
        try String.fetchAll(
            db,
            sql: """
                WITH RECURSIVE tree(luid) AS (
                    SELECT ? UNION ALL SELECT i.luid FROM items i JOIN tree t ON i.r_parent = t.luid WHERE i.r_present = 1
                ) SELECT luid FROM tree
                """,
            arguments: [luid])
    }

    static func freeSpace(at url: URL) -> Int64? {
        guard let attributes = try? FileManager.default.attributesOfFileSystem(forPath: url.path),
            let free = attributes[.systemFreeSize] as? NSNumber
        else { return nil }
        return free.int64Value
    }
}
