import Foundation
import NimbusAPI

/// Carrying out what the residency rules ask (``Planner``'s `keepingHere`): placeholders made, rewritten or put in
/// place of a synced file, and items leaving the device — each checked against what the plan saw, like every step
/// that replaces or deletes here.
extension SyncEngine {
    /// Makes the item here a placeholder of the remote version: new (where the remote has it), rewritten (its file
    /// changed there), or in place of the file (freed: taken aside first, so a save that lands meanwhile is seen and
    /// the file stays; a crash before the end leaves the file, put back by the next scan).
    func makePlaceholder(_ row: ItemRow) async throws {
        guard let disk, !row.isFolder, row.rPresent, let name = row.rName else { return }
        let logical: String
        if row.lPresent {
            guard let path = try await store.read({ tx in try tx.localPath(row.luid) }) else { throw LocalChanged() }
            logical = path
        } else {
            guard let parent = row.rParent, let above = try await store.read({ tx in try tx.localPath(parent) }) else { throw LocalChanged() }
            logical = above.isEmpty ? name : above + "/" + name
        }
        let modified = row.rModified.map { Date(timeIntervalSince1970: Double($0) / 1000) }
        let placeholder = Placeholder(name: (logical as NSString).lastPathComponent, size: row.rSize ?? 0, modified: modified, id: row.luid)
        // (Named as plain staged files are: one a crash leaves is removed when the library opens.)
        let staged = stagingDirectory.appending(path: Self.plainPrefix + UUID.random().uuidString.lowercased())
        defer { try? FileManager.default.removeItem(at: staged) }
        try Data(placeholder.text.utf8).write(to: staged, options: .atomic)
        let target = disk.absolute(logical + Placeholder.suffix)
        let temporary = (target as NSString).deletingLastPathComponent + "/" + DiskFolder.partialPrefix + UUID.random().uuidString.lowercased()
        try disk.fileSystem.importFile(staged, to: temporary, modeOf: nil, modified: POSIXFileSystem.keptModificationTime(modified, now: disk.fileSystem.now()))
        if row.lPresent && row.lPlaceholder {
            guard disk.isStill(row, at: logical + Placeholder.suffix) else {
                try? disk.fileSystem.removeFile(temporary)
                throw LocalChanged()
            }
            try disk.fileSystem.rename(temporary, to: target)
        } else if row.lPresent {
            guard let aside = try disk.takeAside(row, at: logical) else {
                try? disk.fileSystem.removeFile(temporary)
                throw LocalChanged()
            }
            guard try disk.fileSystem.renameNoReplace(temporary, to: target) else {
                // Its name is taken: the file goes back, as it was.
                if try !disk.fileSystem.renameNoReplace(aside, to: disk.absolute(logical)) { try? disk.fileSystem.removeFile(aside) }
                try? disk.fileSystem.removeFile(temporary)
                throw LocalChanged()
            }
            try disk.fileSystem.removeFile(aside)  // synced, unmodified: the remote has it
        } else {
            guard try disk.fileSystem.renameNoReplace(temporary, to: target) else {
                try? disk.fileSystem.removeFile(temporary)
                throw LocalChanged()
            }
        }
        let stat = disk.fileSystem.stat(target)
        try await store.write { tx in
            guard let stored = try tx.item(row.luid) else { return }
            try self.write(tx, [stored], { $0.apply(.placeholder(ItemID(row.luid))) }) { updated, _ in
                updated.lMime = row.rMime
                updated.lModified = row.rModified
                updated.lInode = stat.map { Int64(bitPattern: $0.inode) }
                updated.lMtime = stat?.mtime
                updated.lSize = stat?.size
            }
        }
    }

    /// The item leaves this device (outside the selection): removed here as a deletion here would be (checked), and
    /// its merge base forgotten, so nothing is deleted there.
    func evict(_ row: ItemRow) async throws {
        guard row.lPresent else {
            try await store.write { tx in
                guard let stored = try tx.item(row.luid) else { return }
                try self.write(tx, [stored], { $0.apply(.evict(ItemID(row.luid))) })
            }
            return
        }
        try await deleteLocal(row, effect: PlannedOperation.evict)
    }
}
