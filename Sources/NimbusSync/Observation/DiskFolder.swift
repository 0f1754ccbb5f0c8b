import Foundation
import NimbusAPI

/// A folder on disk as the local side of an engine (folder sync): scanning it fills the local tree, and the
/// planner's local operations are carried out on it — each destructive step checking the file once more,
/// immediately before it acts, against what the plan was made from.
struct DiskFolder: Sendable {
    let root: URL
    let fileSystem: any FileSystem
    /// A file modified this recently is still being written: its content is not known yet.
    let settleTime: TimeInterval

    var rootPath: String { root.path }

    func absolute(_ relative: String) -> String { relative.isEmpty ? rootPath : rootPath + "/" + relative }

    var ignoreRules: IgnoreRules {
        let text = fileSystem.read(absolute(".nimbusignore")).map { String(decoding: $0, as: UTF8.self) } ?? ""
        return IgnoreRules(patterns: text.components(separatedBy: .newlines))
    }

    /// What a scan found besides the tree.
    struct Scan: Sendable {
        /// Symbolic links (never followed), special files (pipes, sockets, devices) and unreadable folders and files, skipped.
        var skipped: [String] = []
        /// Files still being written; and when the first of them will have been quiet for the settle time.
        var changing: [String] = []
        var nextSettle: Date?
        /// Files whose content was read this scan.
        var hashed = 0
        /// New files left unread, to be hashed as they are sent (`unhashedFrom`).
        var unhashed = 0
    }

    /// Scans the folder into the local tree (the `l_*` columns): each entry is matched to the item at its path,
    /// or, if none, to an item whose path is gone and that had the same inode (a move); the rest are new items;
    /// items not found are deleted here. A file whose inode, size and modification time are unchanged is not
    /// read; a changed one is hashed once it has settled, and marked as changing until then.
    /// `cutting`: big files it hashes are cut into chunks in the same pass (``FileSystem/hash(_:cutting:)``), for a
    /// provider that uploads new versions by blocks.
    /// `acceptingNewRoot`: take another folder at the root's path that holds none of the synced items (see below)
    /// as this one, emptied (the user confirmed deletions).
    /// `unhashedFrom`: a settled file of at least this size that was never synced nor sent is not read here: it is
    /// marked unhashed (``ItemRow/lUnhashed``), read as it is sent (the remote ``HashesWhileSending``) — or by
    /// ``readUnhashed(_:_:)`` before a plan that might compare it.
    func scan(
        _ store: SyncStore, cutting: Bool = false, acceptingNewRoot: Bool = false, unhashedFrom: Int64? = nil, makeId: () -> String
    ) throws -> Scan {
        var result = Scan()
        guard let rootStat = fileSystem.stat(rootPath), rootStat.kind == .folder else {
            throw SyncError.localFile("Cannot read the folder \(rootPath): it is not there (is the disk mounted?).")
        }
        let ignore = ignoreRules
        // The disk, parents before children.
        var entries: [(path: String, stat: FileStat, placeholder: String?)] = []
        // Folders that are there but cannot be listed (no permission, an I/O error): what they held is left as it
        // was. Taken for empty, everything in them was deleted on the remote (and on every other device).
        var unreadable: [String] = []
        var stack = [""]
        while let relative = stack.popLast() {
            let names: [String]
            do { names = try fileSystem.contents(ofFolder: absolute(relative)).sorted() } catch {
                if relative.isEmpty { throw SyncError.localFile("Cannot read the folder \(rootPath): \(error.localizedDescription)") }
                if fileSystem.stat(absolute(relative))?.kind == .folder {
                    unreadable.append(relative)
                    result.skipped.append("\(relative)/ (cannot be read: \(LocalWriteError.reason(error)); what it holds is left as it was)")
                }
                continue  // (gone meanwhile: what it held is gone too)
            }
            if names.contains(where: { $0.hasPrefix(Self.partialPrefix) }) { cleanUp(in: relative, names: names, now: fileSystem.now()) }
            var folders: [String] = []
            for name in names where !name.hasPrefix(Self.asidePrefix) {
                let path = relative.isEmpty ? name : relative + "/" + name
                guard let stat = fileSystem.stat(absolute(path)) else { continue }
                switch stat.kind {
                case .link:
                    result.skipped.append("\(path) (symbolic link, not followed)")
                    continue
                case .other:
                    // A pipe, socket or device: never read (a pipe would block the scan), and said as a link is.
                    if !ignore.ignores(path, isDirectory: false) { result.skipped.append("\(path) (not a regular file: a pipe, socket or device)") }
                    continue
                case .file, .folder:
                    break
                }
                if ignore.ignores(path, isDirectory: stat.kind == .folder) { continue }
                entries.append((path, stat, nil))
                if stat.kind == .folder { folders.append(path) }
            }
            stack += folders.reversed()
        }
        // (The walk lists a folder before what is in it: parents come first.)

        let now = fileSystem.now()
        try store.write { tx in
            let rows = try tx.itemsHere()
            var byLuid: [String: ItemRow] = [:]
            for row in rows { byLuid[row.luid] = row }
            // Each known item's path as the local tree has it.
            var pathOf: [String: String] = [ItemID.root.rawValue: ""]
            func path(_ luid: String, _ depth: Int = 0) -> String? {
                if let known = pathOf[luid] { return known }
                guard depth < 1000, let row = byLuid[luid], let parent = row.lParent, let name = row.lName, let above = path(parent, depth + 1) else {
                    return nil
                }
                let value = above.isEmpty ? name : above + "/" + name
                pathOf[luid] = value
                return value
            }
            var atPath: [String: String] = [:]
            for row in rows where row.luid != ItemID.root.rawValue {
                if let value = path(row.luid) { atPath[value] = row.luid }
            }
            entries = placeholders(in: entries, byLuid: byLuid, atPath: atPath)
            // 1. Same path, same kind.
            var assigned: [String: String] = [:]  // path → luid
            var claimed: Set<String> = [ItemID.root.rawValue]
            for entry in entries {
                if let luid = atPath[entry.path], let row = byLuid[luid], row.isFolder == (entry.stat.kind == .folder), entry.placeholder ?? luid == luid {
                    assigned[entry.path] = luid
                    claimed.insert(luid)
                }
            }
            // 2. Moves: an unclaimed item with the entry's inode whose own path is gone.
            var byInode: [Int64: [String]] = [:]
            for row in rows where !claimed.contains(row.luid) {
                if let inode = row.lInode { byInode[inode, default: []].append(row.luid) }
            }
            // A placeholder moved (or copied across disks, the original gone) is its item's, by the id it holds; one whose
            // item is claimed already (a copy) is an ordinary file.
            for (index, entry) in entries.enumerated() where assigned[entry.path] == nil {
                guard let id = entry.placeholder else { continue }
                if !claimed.contains(id) {
                    assigned[entry.path] = id
                    claimed.insert(id)
                } else {
                    entries[index] = (entry.path + Placeholder.suffix, entry.stat, nil)
                }
            }
            for entry in entries where assigned[entry.path] == nil {
                let inode = Int64(bitPattern: entry.stat.inode)
                guard let candidates = byInode[inode],
                    let luid = candidates.first(where: { luid in
                        guard !claimed.contains(luid), let row = byLuid[luid] else { return false }
                        return row.isFolder == (entry.stat.kind == .folder)
                    })
                else { continue }
                assigned[entry.path] = luid
                claimed.insert(luid)
            }
            // 3. The rest are new.
            for entry in entries where assigned[entry.path] == nil {
                assigned[entry.path] = makeId()
            }
            // The folder itself. Another folder at its path (another inode) that holds none of what the synced one
            // held is an empty mount point whose disk is not mounted, or the folder deleted and made again: taking
            // it for the folder would delete every file there. Nothing is recorded; the user is told. One holding
            // some of the synced items (restored from a backup, moved to a new disk) is the folder.
            let rootInode = Int64(bitPattern: rootStat.inode)
            if let root = try tx.item(ItemID.root.rawValue), root.lInode != rootInode {
                if root.lInode != nil, !acceptingNewRoot {
                    let held = rows.filter { $0.luid != ItemID.root.rawValue && $0.sPresent }
                    if !held.isEmpty, !held.contains(where: { claimed.contains($0.luid) }) {
                        throw SyncError.localFile(
                            "\(rootPath) is not the folder that synced: it holds none of the \(held.count) items that folder held, and it is "
                                + "another folder at that path (a disk not mounted there, or the folder deleted and made again). Nothing was "
                                + "synced or deleted. Mount the disk (or put the folder back); to delete those items on the remote too, run "
                                + "again with --confirm-deletions.")
                    }
                }
                var updated = root
                updated.lInode = rootInode
                try tx.update(updated, from: root)
            }
            // Write what changed.
            for entry in entries {
                guard let luid = assigned[entry.path] else { continue }
                let parentPath = entry.path.lastIndex(of: "/").map { String(entry.path[..<$0]) } ?? ""
                guard let parent = parentPath.isEmpty ? ItemID.root.rawValue : assigned[parentPath] else { continue }
                let name = String(entry.path.split(separator: "/").last ?? "")
                let isFolder = entry.stat.kind == .folder
                let stored = byLuid[luid]
                var row = stored ?? ItemRow.empty(luid, isFolder: isFolder)
                row.lPresent = true
                row.lParent = parent
                row.lName = name
                if isFolder {
                    row.lInode = Int64(bitPattern: entry.stat.inode)
                    row.lMime = folderMimeTypeValue
                } else if entry.placeholder != nil {
                    // A placeholder: the merge base's content, not here (its own inode, size and time, to see it change).
                    if !row.lPlaceholder || row.lChanging || !entry.stat.matches(inode: row.lInode, size: row.lSize, mtime: row.lMtime) {
                        row.lPlaceholder = true
                        row.lChanging = false
                        row.lUnhashed = false
                        row.lChecksum = row.sChecksum
                        row.lInode = Int64(bitPattern: entry.stat.inode)
                        row.lMtime = entry.stat.mtime
                        row.lSize = entry.stat.size
                    }
                } else if stored == nil || row.lChanging || row.lPlaceholder || !entry.stat.matches(inode: row.lInode, size: row.lSize, mtime: row.lMtime) {
                    row.lPlaceholder = false
                    row.lastAccess = max(row.lastAccess, entry.stat.mtime / 1_000_000)
                    row.lInode = Int64(bitPattern: entry.stat.inode)
                    row.lMtime = entry.stat.mtime
                    row.lSize = entry.stat.size
                    row.lModified = entry.stat.mtime / 1_000_000
                    let quietFor = now.timeIntervalSince1970 - Double(entry.stat.mtime) / 1e9
                    // A time in whole seconds may be a file system that keeps no finer one (FAT keeps two seconds,
                    // some network shares one): a save later in that span leaves the same time, and, were the file
                    // taken as it is now, the same size would hide it for good (a change there would then replace
                    // it as synced). Such a file settles once the span is over too.
                    let settle = entry.stat.mtime % 1_000_000_000 == 0 ? settleTime + 2 : settleTime
                    if quietFor < settle {
                        row.lChanging = true
                        row.lUnhashed = false
                        result.changing.append(entry.path)
                        let settles = Date(timeIntervalSince1970: Double(entry.stat.mtime) / 1e9 + settle)
                        result.nextSettle = min(result.nextSettle ?? settles, settles)
                    } else if let unhashedFrom, entry.stat.size >= unhashedFrom, !row.sPresent, !row.rPresent, row.fileId == nil, !row.createSent {
                        row.lChecksum = nil
                        row.lChanging = false
                        row.lUnhashed = true
                        result.unhashed += 1
                    } else if case let hashed = Result(catching: { try fileSystem.hash(absolute(entry.path), cutting: cutting) }),
                        let after = fileSystem.stat(absolute(entry.path)), after == entry.stat
                    {
                        switch hashed {
                        case .success(let (checksum, size)):
                            row.lChecksum = checksum
                            row.lSize = size
                            row.lChanging = false
                            row.lUnhashed = false
                            result.hashed += 1
                        case .failure(let error):
                            // There, unchanged, and not readable (no permission, an I/O error): not sent, said, and
                            // looked at again next time (not every moment, as a file still being written is).
                            row.lChanging = true
                            result.skipped.append("\(entry.path) (cannot be read: \(LocalWriteError.reason(error)))")
                        }
                    } else {
                        // Changed (or went) while it was read: looked at again next time.
                        row.lChanging = true
                        result.changing.append(entry.path)
                        result.nextSettle = min(result.nextSettle ?? now, now.addingTimeInterval(settleTime))
                    }
                    if row.lMime == nil { row.lMime = MimeType.guess(forName: name) }
                }
                // Opened since (its access time, coarse as it is): used, for the cache limit's order.
                if !isFolder, entry.placeholder == nil, entry.stat.atime / 1_000_000 > row.lastAccess + 60_000 {
                    row.lastAccess = entry.stat.atime / 1_000_000
                }
                try tx.record(row, from: stored)
            }
            // Not found: deleted here.
            let found = Set(assigned.values)
            for row in rows where row.luid != ItemID.root.rawValue && !found.contains(row.luid) {
                // (An ignored path is left out of the scan, not deleted: an item that became ignored keeps its row.)
                if let value = pathOf[row.luid], Self.isIgnored(value, isFolder: row.isFolder, by: ignore) { continue }
                if let value = pathOf[row.luid], unreadable.contains(where: { value.hasPrefix($0 + "/") }) { continue }
                var gone = row
                gone.lPresent = false
                gone.lChanging = false
                if !gone.sPresent && !gone.rPresent && !(gone.createSent && gone.fileId == nil) {
                    try tx.delete(row.luid)  // never synced: nothing to remember (unless its creation is in doubt)
                } else {
                    try tx.update(gone, from: row)
                }
            }
        }
        return result
    }

    /// The scan's entries with placeholders (``Placeholder``) recognised: `NAME.nimbus` that is one stands for `NAME`
    /// (its path becomes NAME's, its `placeholder` the item's id). A placeholder beside the file it stands for goes:
    /// the file is the item's content.
    func placeholders(
        in entries: [(path: String, stat: FileStat, placeholder: String?)], byLuid: [String: ItemRow], atPath: [String: String]
    ) -> [(path: String, stat: FileStat, placeholder: String?)] {
        let paths = Set(entries.map(\.path))
        return entries.compactMap { entry in
            let name = (entry.path as NSString).lastPathComponent
            guard entry.stat.kind == .file, Placeholder.mayBe(name: name, size: entry.stat.size), let data = fileSystem.read(absolute(entry.path)),
                let placeholder = Placeholder.parse(data), let row = byLuid[placeholder.id], !row.isFolder, row.sPresent || row.rPresent
            else { return entry }
            let logical = String(entry.path.dropLast(Placeholder.suffix.count))
            guard paths.contains(logical) else { return (logical, entry.stat, placeholder.id) }
            guard atPath[logical] == placeholder.id else { return entry }
            try? fileSystem.removeFile(absolute(entry.path))
            return nil
        }
    }

    /// An unhashed file (``ItemRow/lUnhashed``) read now: its checksum and size, or — changed since the scan, gone or
    /// unreadable (`relative` nil: not in the local tree) — marked changing, to be looked at again by the next scan.
    func readNow(_ row: ItemRow, at relative: String?) -> ItemRow {
        var updated = row
        updated.lUnhashed = false
        if let relative, let before = fileSystem.stat(absolute(relative)), before.kind == .file,
            before.matches(inode: row.lInode, size: row.lSize, mtime: row.lMtime),
            let (checksum, size) = try? fileSystem.hash(absolute(relative)), fileSystem.stat(absolute(relative)) == before
        {
            updated.lChecksum = checksum
            updated.lSize = size
        } else {
            updated.lChanging = true
        }
        return updated
    }

    /// Whether a path or a folder above it is ignored.
    static func isIgnored(_ path: String, isFolder: Bool, by ignore: IgnoreRules) -> Bool {
        if ignore.ignores(path, isDirectory: isFolder) { return true }
        var current = path
        while let slash = current.lastIndex(of: "/") {
            current = String(current[..<slash])
            if ignore.ignores(current, isDirectory: true) { return true }
        }
        return false
    }

    /// Takes the file at `relative` out of the way — renamed aside, atomically — when it is still exactly what the
    /// local tree recorded, and returns where it went (the caller replaces or deletes it: it holds nothing that is
    /// not synced). Checking after the rename closes the window between a check and the step: a save that lands
    /// before the rename is seen (the file goes back to its place, nil is returned), one that lands after it makes
    /// a new file at the path, which the caller's no-replace rename then leaves alone.
    func takeAside(_ row: ItemRow, at relative: String) throws -> String? {
        guard isStill(row, at: relative) else { return nil }
        let path = absolute(relative)
        let aside =
            (path as NSString).deletingLastPathComponent + "/" + Self.asidePrefix + UUID.random().uuidString.lowercased().prefix(8) + "-"
            + (relative as NSString).lastPathComponent
        guard (try? fileSystem.rename(path, to: aside)) != nil else { return nil }
        if let stat = fileSystem.stat(aside), stat.kind == .file, stat.matches(inode: row.lInode, size: row.lSize, mtime: row.lMtime) { return aside }
        // Changed just now: it goes back (or, if its place was taken meanwhile, beside it under a free name).
        if try !fileSystem.renameNoReplace(aside, to: path) {
            var attempt = 1
            while try !fileSystem.renameNoReplace(aside, to: absolute(Self.sibling(relative, FileName.numbered((relative as NSString).lastPathComponent, attempt)))),
                attempt < 1000
            {
                attempt += 1
            }
        }
        return nil
    }

    static let partialPrefix = ".nimbus-partial-"
    static let asidePrefix = ".nimbus-partial-aside-"

    /// What a step that did not finish (the process died in between) left behind: a file taken aside goes back
    /// to its place, or, when its place holds the file that replaced it, away (it was synced: the remote has it);
    /// a download not yet put in place goes once it has been untouched for five minutes.
    func cleanUp(in folder: String, names: [String], now: Date) {
        for name in names where name.hasPrefix(Self.partialPrefix) && !name.hasPrefix(Self.asidePrefix) {
            let path = absolute(folder.isEmpty ? name : folder + "/" + name)
            if let stat = fileSystem.stat(path), stat.kind == .file, now.timeIntervalSince1970 - Double(stat.mtime) / 1e9 > 300 {
                try? fileSystem.removeFile(path)
            }
        }
        for name in names where name.hasPrefix(Self.asidePrefix) {
            let original = String(name.dropFirst(Self.asidePrefix.count + 9))
            let aside = absolute(folder.isEmpty ? name : folder + "/" + name)
            let target = absolute(folder.isEmpty ? original : folder + "/" + original)
            if original.isEmpty || (try? fileSystem.renameNoReplace(aside, to: target)) != true { try? fileSystem.removeFile(aside) }
        }
    }

    /// `name` in the folder of `relative`.
    static func sibling(_ relative: String, _ name: String) -> String {
        guard let slash = relative.lastIndex(of: "/") else { return name }
        return String(relative[..<slash]) + "/" + name
    }

    /// Whether the entry at `path` is still the file or folder the local tree recorded (same kind, inode, and for a
    /// file size and modification time): checked immediately before anything replaces, moves or deletes it.
    func isStill(_ row: ItemRow, at path: String) -> Bool {
        guard let stat = fileSystem.stat(absolute(path)), (stat.kind == .folder) == row.isFolder, stat.kind == .file || stat.kind == .folder
        else { return false }
        return !row.lChanging && stat.matches(inode: row.lInode, size: row.lSize, mtime: row.lMtime)
    }
}

let folderMimeTypeValue = "application/vnd.nimbus.folder"
