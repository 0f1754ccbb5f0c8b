import Crypto
import Foundation
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
                path = try await store.read { tx in try tx.remotePath(step.item.rawValue) ?? tx.localPath(step.item.rawValue) }
            case .deleteLocal, .deleteRemote, .fork, .moveLocal, .evict:
                path = try await store.read { tx in try tx.localPath(step.item.rawValue) ?? tx.remotePath(step.item.rawValue) }
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
            let discard = try await store.write { tx in try self.recordLocally(tx, step) }
            for path in discard { try? FileManager.default.removeItem(atPath: path) }
            return
        }
        guard let row = try await store.read({ tx in try tx.item(step.item.rawValue) }) else { return }
        switch step {
        case .createRemoteFolder:
            let parent = try await remoteId(of: row.lParent)
            let request = try await sendingCreation(row)
            let folder = try await provider.createFolder(named: row.lName ?? "Folder", in: parent, requestId: request)
            try await recordCreated(row.luid, folder, parent: row.lParent)
        case .upload(_, let base):
            try await upload(row, base: base, provider)
        case .uploadThenRestore(_, let base):
            try await uploadThenRestore(row, base: base, provider)
        case .restoreRevision(_, let revision):
            try await restoreRevision(row, revision, provider)
        case .moveRemote(_, let parent, let name):
            guard let fileId = row.fileId else { return }
            let moved = try await provider.move(fileId, to: try await remoteId(of: parent.rawValue), name: name)
            try await store.write { tx in
                guard let stored = try tx.item(row.luid) else { return }
                var answered = stored
                answered.setRemote(moved, parentLuid: parent.rawValue)
                // A move changes no content: content a pull brought since the plan (an edit there after this move)
                // stays; the answer's could only be that or older, and the feed has moved past it.
                if stored.rRevision != row.rRevision { answered.takeRemoteContent(from: stored) }
                try self.write(tx, [stored], { $0.apply(step, answered.remoteNode.map { .there($0) } ?? .done) }) { updated, _ in
                    updated.fileId = moved.id
                    updated.rMime = answered.rMime
                    updated.rModified = answered.rModified
                }
                if stored.isFolder, moved.id != fileId { try self.renameBeneath(tx, stored.luid, from: fileId, to: moved.id) }
            }
        case .deleteRemote:
            if let fileId = row.fileId {
                do { try await provider.delete(fileId) } catch ProviderError.notFound {}
            }
            // (Here still, an item stays: the next plan sends it again, or it was deleted here too.)
            _ = try await store.write { tx in try self.write(tx, try tx.remoteSubtree(row.luid).compactMap { try tx.item($0) }, { $0.apply(step) }) }
        case .createLocalFolder:
            try await createLocalFolder(row)
        case .download:
            try await download(row, provider)
        case .learnChecksum:
            try await learnChecksum(row, provider)
        case .settleDoubt:
            try await settleDoubt(row, provider)
        case .moveLocal(_, let parent, let name):
            try await moveLocal(row, to: parent.rawValue, name: name)
        case .deleteLocal:
            try await deleteLocal(row)
        case .placeholder:
            try await makePlaceholder(row)
        case .evict:
            try await evict(row)
        case .record, .link, .forget, .hold, .release:
            break  // database only (above)
        case .fork(_, let name):
            try await fork(row, name: name)
        }
    }

    /// Writes an effect on the trees (``Trees/apply(_:_:)``, with whatever observation saw meanwhile kept) into
    /// `rows` as stored: each row takes what the trees changed, then `adjust` sets what the trees do not hold (ids,
    /// MIME types, times, content files); a row no tree holds any more is deleted. Returns the trees after.
    @discardableResult
    nonisolated func write(
        _ tx: StoreTransaction, _ rows: [ItemRow], _ effect: (inout Trees) -> Void, adjust: (inout ItemRow, Trees) throws -> Void = { _, _ in }
    ) throws -> Trees {
        let before = ItemRow.trees(rows)
        var after = before
        effect(&after)
        for row in rows {
            let id = ItemID(row.luid)
            var updated = row
            updated.take(id, from: before, to: after)
            try adjust(&updated, after)
            if after.remote[id] == nil, after.synced[id] == nil, after.local[id] == nil, after.doubts[id] == nil {
                try tx.delete(row.luid)
            } else {
                try tx.update(updated, from: row)
            }
        }
        return after
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

    /// The effect of a database-only step, inside the transaction `tx`; returns content files to delete afterwards.
    /// What it does to the trees is ``Trees/apply(_:_:)``'s, written back into the rows (``ItemRow/take(_:from:to:)``);
    /// here only what the trees do not hold: MIME types and times taken from there, content files let go, identities.
    /// An item no tree holds any more is forgotten.
    nonisolated func recordLocally(_ tx: StoreTransaction, _ step: PlannedOperation) throws -> [String] {
        guard let stored = try tx.item(step.item.rawValue) else { return [] }
        if case .link(_, let other) = step {
            // One item from two rows: the remote row's identity (its provider id, MIME type, time) and what refers
            // to it (its children) come to this one; the remote row, which no tree holds then, goes.
            guard let remoteRow = try tx.item(other.rawValue) else { return [] }
            try tx.reparentAll(from: remoteRow.luid, into: stored.luid)
            try write(tx, [remoteRow, stored], { $0.apply(step) }) { updated, _ in  // (the remote row goes first: one provider id, one row)
                guard updated.luid == stored.luid else { return }
                updated.fileId = remoteRow.fileId
                updated.rMime = remoteRow.rMime
                updated.rModified = remoteRow.rModified
                updated.createRequest = nil
                updated.createSent = false
            }
            return []
        }
        switch step {
        case .record, .forget, .hold, .release, .createLocalFolder, .download, .moveLocal, .deleteLocal: break
        default: return []
        }
        let rows: [ItemRow]
        if case .deleteLocal = step {
            rows = try tx.localSubtree(stored.luid).compactMap { try tx.item($0) }
        } else {
            rows = [stored]
        }
        var discard: [String] = []
        try write(tx, rows, { $0.apply(step) }) { updated, _ in
            let row = updated
            switch step {
            case .forget:
                updated.forgetRemoteIdentity()  // sent again as a new item: a new identity
            case .createLocalFolder, .download:
                updated.lMime = row.rMime
                updated.lModified = row.rModified
                if case .createLocalFolder = step {
                    updated.lSize = row.rSize
                    updated.lChecksum = row.rChecksum
                }
                // The view takes the remote state; a copy of older content is dropped (the content of a pinned file is
                // fetched after the round).
                if let path = row.contentPath, row.contentChecksum != updated.lChecksum, row.contentOwned {
                    discard.append(path)
                    updated.contentPath = nil
                    updated.contentChecksum = nil
                }
            case .deleteLocal:
                if row.contentOwned, let path = row.contentPath { discard.append(path) }
                updated.contentPath = nil
                updated.contentChecksum = nil
            default:
                break
            }
        }
        return discard
    }

    /// Database-only steps, many in one transaction (a pull that brings 10,000 changes into the app's view is one
    /// write, not 10,000).
    func performDatabaseSteps(_ steps: [PlannedOperation]) async throws -> Bool {
        guard !steps.isEmpty else { return false }
        let discard = try await store.write { tx -> [String] in
            var discard: [String] = []
            for step in steps { discard += try self.recordLocally(tx, step) }
            try tx.clearFailures(steps.map(\.item.rawValue))
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
            let fileId = try await store.read { tx in try tx.item(luid)?.fileId }
            if let current {
                try await store.write { tx in try self.applyChange(tx, .upsert(current)) }
            } else if let fileId {
                try await refetch(fileId, provider)
            }
            return true
        case .nameTaken(let existing):
            // Someone else's item holds the name: not this item's creation (that would have come back as itself).
            try await store.write { tx in try tx.markCreationUnsent(luid) }
            if let existing {
                try await refetch(existing, provider)
            } else if let parent = try await store.read({ tx in try tx.item(luid)?.lParent }) {
                let parentId = try await remoteId(of: parent)
                let children = try await provider.children(of: parentId)
                try await store.write { tx in for child in children { try self.applyChange(tx, .upsert(child)) } }
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
                try await store.write { tx in
                    try tx.markCreationUnsent(luid, request: Self.newRequestId())
                }
                return true
            }
            try await store.write { tx in
                if let other = try tx.item(fileId: existing), other.luid != luid {
                    // The feed brought that file here first, as another item. Changed here since (edited, renamed,
                    // something added in it), that item stays what the user worked on — merging would drop its
                    // changes — and this one is new again, under a new request; untouched, it is this item.
                    if other.lPresent, try tx.hasChangesHere(under: other.luid) {
                        try tx.markCreationUnsent(luid, request: Self.newRequestId())
                        return
                    }
                    try self.merge(tx, from: other.luid, into: luid)
                }
                guard let stored = try tx.item(luid) else { return }
                var updated = stored
                updated.setRemote(item, parentLuid: try self.parentLuid(tx, item.parentId))
                updated.syncRemote()
                updated.createRequest = nil
                updated.createSent = false
                try tx.update(updated, from: stored)
            }
            return true
        case .notFound:
            // The item (or the folder it goes in) is gone there.
            let row = try await store.read { tx in try tx.item(luid) }
            var itemThere: Bool?
            if let fileId = row?.fileId {
                itemThere = try await refetch(fileId, provider)
            }
            // A file sent as new while it still named the file it was there, gone since (the feed's deletion taken,
            // the identity kept): it is a new file now, sent again under a new request — its content is here.
            if case .upload(_, nil) = step, itemThere == false, let row, !row.isFolder, !row.rPresent {
                try await store.write { tx in
                    guard let stored = try tx.item(luid), stored.fileId == row.fileId else { return }
                    var renewed = stored
                    renewed.forgetRemote()
                    try tx.update(renewed, from: stored)
                }
                return true
            }
            var parentThere: Bool?
            if case .upload(_, nil) = step, let parent = row?.lParent, let parentRow = try await store.read({ tx in try tx.item(parent) }),
                let parentId = parentRow.fileId
            {
                parentThere = try await refetch(parentId, provider)
            } else if case .createRemoteFolder = step, let parent = row?.lParent,
                let parentId = try await store.read({ tx in try tx.item(parent)?.fileId })
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
            } else if let row = try await store.read({ tx in try tx.item(luid) }), let path = row.contentPath {
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
                try await store.write { tx in
                    guard let stored = try tx.item(luid) else { return }
                    var updated = stored
                    updated.lChecksum = checksum
                    updated.lSize = size
                    updated.contentChecksum = checksum
                    try tx.update(updated, from: stored)
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

    /// Takes an item's current state there into the remote tree (gone, if it is); whether it is there.
    @discardableResult
    func refetch(_ fileId: String, _ provider: any RemoteProvider) async throws -> Bool {
        let change: RemoteChange
        do { change = .upsert(try await provider.item(fileId)) } catch ProviderError.notFound { change = .remove(id: fileId) }
        try await store.write { tx in try self.applyChange(tx, change) }
        if case .upsert = change { return true }
        return false
    }

    /// The provider's id of the item with LUID `luid` (a folder something goes into).
    func remoteId(of luid: String?) async throws -> String {
        guard let luid, let fileId = try await store.read({ tx in try tx.item(luid)?.fileId }) else {
            throw SyncError.invalid("A folder this change needs is not there yet.")
        }
        return fileId
    }

    /// The request id that creates the item, marked as sent before it is (after a crash the item is in doubt,
    /// and the same id asks again).
    func sendingCreation(_ row: ItemRow) async throws -> String {
        let request = row.createRequest ?? Self.newRequestId()
        if !row.createSent || row.createRequest == nil {
            try await store.write { tx in
                try tx.markCreationSent(row.luid, request: request)
            }
        }
        return request
    }

    /// Records that the item's creation made `item` there (created in `parent`): both trees agree. `operation`: the
    /// step that made it (by default the creation the item's kind asks for).
    func recordCreated(_ luid: String, _ item: RemoteItem, parent: String?, checksum: String? = nil, as operation: PlannedOperation? = nil) async throws {
        try await store.write { tx in
            try self.recordCreated(tx, luid, item, parent: parent, checksum: checksum, asRead: nil, as: operation)
        }
    }

    /// ``recordCreated(_:_:parent:checksum:)`` inside a write (a batch records all its answers in one). `asRead`: the
    /// row as read before the request, marked sent (only the columns this changes are written, so a change the user
    /// made meanwhile stays); nil: read now.
    nonisolated func recordCreated(
        _ tx: StoreTransaction, _ luid: String, _ item: RemoteItem, parent: String?, checksum: String?, asRead: ItemRow?, as operation: PlannedOperation? = nil
    ) throws {
        var fed = false
        let stored: ItemRow
        if let other = try tx.luid(fileId: item.id), other != luid, let edited = try tx.item(other), edited.hasOwnEdit {
            // The feed brought it first, and the user has saved that file since: merging would drop the save. That
            // item is let go of the file and sent as a new one (nothing lost); this creation is the file.
            var detached = edited
            detached.forgetRemote()
            try tx.update(detached, from: edited)
            guard let fresh = try tx.item(luid) else { return }
            stored = asRead ?? fresh
        } else if let other = try tx.luid(fileId: item.id), other != luid {
            try merge(tx, from: other, into: luid)  // the feed brought it first
            fed = true
            guard let merged = try tx.item(luid) else { return }
            stored = merged
        } else if let asRead {
            stored = asRead
        } else {
            guard let fresh = try tx.item(luid) else { return }
            stored = fresh
        }
        var answered = stored
        answered.setRemote(item, parentLuid: try createdParent(tx, item, requested: parent))
        if answered.rChecksum == nil { answered.rChecksum = checksum }
        let id = ItemID(luid)
        let made = answered.remoteNode
        try write(tx, [stored], { trees in
            // The merge base is what this creation made.
            trees.apply(operation ?? (stored.isFolder ? .createRemoteFolder(id) : .upload(id, base: nil)), made.map { .there($0) } ?? .done)
            // Made by an earlier attempt and deleted there since: that deletion is the remote state now.
            if item.isDeleted { trees.remote[id] = nil }
            // The feed brought the item before this answer came (a pull ran meanwhile): the feed's state can only
            // be this creation's or a later one (another device's edit, move or deletion since), and that change
            // has been read from the feed already — it must stay the remote state, or it would never be seen.
            if fed { trees.remote[id] = stored.remoteNode }
        }) { updated, _ in
            updated.fileId = item.id
            if !fed {
                updated.rMime = item.mimeType
                updated.rModified = item.modifiedAt.millis
            }
            updated.createRequest = nil
            updated.createSent = false
            try self.keepSentContent(&updated)
        }
    }

    /// Where a creation's answer says the item is: where it was asked for — unless the request id brought back
    /// what an earlier attempt made, which may have been moved there since (or was asked for elsewhere before a
    /// move here): then the item's parent there, so the local move is still seen and sent.
    nonisolated func createdParent(_ tx: StoreTransaction, _ item: RemoteItem, requested: String?) throws -> String? {
        guard let parentId = item.parentId else { return requested }
        if let requested, try tx.item(requested)?.fileId == parentId { return requested }
        return try parentLuid(tx, parentId)
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
}
