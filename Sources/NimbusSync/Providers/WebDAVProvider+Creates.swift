import AsyncHTTPClient
import Foundation
import NIOCore
import NIOFoundationCompat
import NIOHTTP1
import NimbusAPI

/// Small new files in one request each instead of two, where the server allows it.
///
/// A new file normally goes to a hidden name and is then `MOVE`d into place with `Overwrite: F`: the `MOVE` is what
/// refuses to replace a file someone else made under that name meanwhile. A server that honours `If-None-Match: *` on
/// `PUT` (Nextcloud, ownCloud, Apache `mod_dav`, wsgidav, Nimbus) gives the same guarantee in one request, so there a
/// batch of small new files (``uploadBatch(_:)``, files up to 1 MiB) goes straight to their names, each one conditional
/// `PUT`; `412` means the name is taken (by this very content after a lost answer: it is this file; by a strict
/// beginning of it — this creation cut off on a server that writes in place, its client killed — replaced with
/// `If-Match`). Learnt once per provider (``smallCreates()``): a server in Nextcloud's layout or answering ownCloud's
/// `fileid` (Nextcloud, ownCloud, Nimbus) without asking; any other is asked with a hidden empty file, `PUT` twice with
/// `If-None-Match: *` and then deleted. `rclone serve webdav` (Go's `x/net/webdav`) ignores the header: files go the
/// usual way there. (Taking a WebDAV lock on the folder instead was tried: `x/net/webdav` takes one request at a time
/// under a lock, and the `PUT`s, one at a time, came out 5 % ahead of the usual way — not worth a folder locked for 30 s
/// after a crash.)
/// Bigger files always go the usual way: a server that writes a `PUT` in place shows it under its name only while a
/// small one arrives.
extension WebDAVProvider {
    /// How a small new file is made there.
    public enum SmallCreates: Sendable, Equatable {
        /// One `PUT` with `If-None-Match: *` (servers that honour it).
        case conditional
        /// A `PUT` to a hidden name, then `MOVE` into place with `Overwrite: F`.
        case moved
    }

    /// How this server takes small new files (probed once).
    @_spi(Testing) public func smallCreates() async -> SmallCreates {
        let task = smallCreatesProbe.withLock { probe -> Task<SmallCreates, Never> in
            if let probe { return probe }
            let task = Task { await self.probeSmallCreates() }
            probe = task
            return task
        }
        return await task.value
    }

    /// Takes `mode` as this server's without asking (a test runs either way against one server).
    @_spi(Testing) public func takeSmallCreates(_ mode: SmallCreates) {
        smallCreatesProbe.withLock { $0 = Task { mode } }
    }

    func probeSmallCreates() async -> SmallCreates {
        if ProcessInfo.processInfo.environment["NIMBUS_WEBDAV_CREATES"] == "moved" { return .moved }  // (to compare)
        if uploadsAddress != nil || propagatesETags { return .conditional }
        let probe = address(ProviderPath.child(PartialUploads.prefix + "probe-" + UUID.random().uuidString.lowercased(), in: ProviderPath.root))
        let headers = [("Content-Length", "0"), ("If-None-Match", "*")]
        var mode = SmallCreates.moved
        do {
            let (first, _) = try await send("PUT", probe, headers: headers, stream: .bytes(ByteBuffer()), timeout: .seconds(60))
            if (200..<300).contains(Int(first.status.code)) {
                let (second, _) = try await send("PUT", probe, headers: headers, stream: .bytes(ByteBuffer()), timeout: .seconds(60))
                if Int(second.status.code) == 412 { mode = .conditional }
            }
        } catch {}
        // (Left there, it goes with the stale hidden files a day later: see `children(of:)`.)
        _ = try? await send("DELETE", probe, timeout: .seconds(30))
        return mode
    }

    /// Small new files (see the extension's comment): each one request where the server allows it.
    public func uploadBatch(_ files: [BatchFile]) async throws -> [Result<RemoteItem, ProviderError>] {
        let mode = files.count > 1 ? await smallCreates() : .moved
        switch mode {
        case .moved:
            return try await uploadEach(files, width: 2)
        case .conditional:
            return try await uploadEach(files, width: 2) { file in
                guard file.source.isHashed, file.source.size <= Self.inMemoryLimit else { return try await self.uploadMoved(file) }
                return try await self.putNew(file)
            }
        }
    }

    func uploadMoved(_ file: BatchFile) async throws -> RemoteItem {
        try await upload(file.source, to: .new(parentId: file.parentId, name: file.name, mimeType: file.mimeType), requestId: file.requestId) { _ in }
    }

    /// One `PUT` straight to the new file's name, with `If-None-Match: *`.
    func putNew(_ file: BatchFile) async throws -> RemoteItem {
        let id = ProviderPath.child(try ProviderPath.validated(file.name), in: file.parentId)
        let bytes = try file.source.readChecked()
        let headers = [("Content-Length", "\(file.source.size)"), ("Content-Type", "application/octet-stream"), ("If-None-Match", "*")]
        let (put, _) = try await send("PUT", address(id), headers: headers, stream: BandwidthLimits.body(bytes), timeout: TimeAmount(stallLimit))
        let status = Int(put.status.code)
        if status == 412 {
            // Something holds the name: this very content (a retry after a lost answer) is this file.
            guard let existing = try? await item(id), !existing.isFolder else { throw ProviderError.nameTaken(existing: id) }
            if try await holds(existing, file.source.checksum, size: file.source.size) { return existing }
            if let revision = existing.revision, !revision.hasPrefix(Self.syntheticPrefix), try await isCutOff(existing, of: bytes) {
                // The first bytes of these and no more: this creation cut off (its client killed mid-`PUT` by a server
                // that writes in place, as wsgidav does). Replaced, if it is still that.
                let replacing = Array(headers.dropLast()) + [("If-Match", "\"\(revision)\"")]
                let (again, _) = try await send(
                    "PUT", address(id), headers: replacing, stream: BandwidthLimits.body(bytes), timeout: TimeAmount(stallLimit))
                guard (200..<300).contains(Int(again.status.code)) else { throw ProviderError.nameTaken(existing: id) }
                return try await placed(id, parentId: file.parentId, size: file.source.size, putTag: Self.strongTag(again.headers), checksum: file.source.checksum)
            }
            throw ProviderError.nameTaken(existing: id)
        }
        if status == 405, let existing = try? await item(id), existing.isFolder {
            throw ProviderError.nameTaken(existing: id)  // a folder holds the name (a PUT on a collection is not allowed)
        }
        guard (200..<300).contains(status) else { throw Self.failure(status, put.headers, what: "sending \(file.name)") }
        return try await placed(id, parentId: file.parentId, size: file.source.size, putTag: Self.strongTag(put.headers), checksum: file.source.checksum)
    }

    /// Whether `existing` holds a strict beginning of `bytes` (fetched to compare only when it is shorter).
    func isCutOff(_ existing: RemoteItem, of bytes: Data) async throws -> Bool {
        guard existing.size < Int64(bytes.count) else { return false }
        let scratch = FileManager.default.temporaryDirectory.appending(path: "nimbus-dav-cut-\(UUID.random().uuidString)")
        defer { try? FileManager.default.removeItem(at: scratch) }
        try await download(existing.id, revision: existing.revision, to: DownloadTarget(url: scratch)) { _ in }
        let held = try Data(contentsOf: scratch)
        return held.count < bytes.count && bytes.prefix(held.count) == held
    }

    /// Every name in a folder, hidden ones too, sorted (for tests: nothing of this provider's is left behind).
    @_spi(Testing) public func allNames(in folderId: String) async throws -> [String] {
        try await propfind(folderId, depth: 1, folder: true).filter { $0.id != folderId }.map(\.name).sorted()
    }
}

/// A new folder with its small new files in about one request per file, where small creations take two
/// (``SmallCreates/moved``: `rclone serve webdav`). The folder is made under a hidden name (after its request: an
/// attempt cut off is found again and emptied first), each file is `PUT` straight to its name in it — nobody else
/// writes there — and the folder is then `MOVE`d into place with `Overwrite: F`, so it appears with its files; one
/// `PROPFIND` of it tells what each became. A folder already under the name (another device's, or this one's after a
/// lost answer) refuses the `MOVE`: the files then go into it one by one, each `MOVE` refusing a name taken there
/// (the same content under it is this file), and the hidden folder goes. Against `rclone serve webdav`, 10,000 small
/// files in 100 new folders take 10,400 requests instead of 20,200. `NIMBUS_WEBDAV_FILLS=off` sends them the usual
/// way (to compare).
extension WebDAVProvider: FillsNewFolders {
    public func fillsNewFolders() async -> Bool {
        guard ProcessInfo.processInfo.environment["NIMBUS_WEBDAV_FILLS"] != "off" else { return false }
        return await smallCreates() == .moved
    }

    public var fillLimits: (fileSize: Int64, files: Int, bytes: Int64) { (Self.inMemoryLimit, 1_000, 64 << 20) }

    /// A fill takes four requests of its own (`DELETE`, `MKCOL`, the folder's `MOVE` — which waits for every request
    /// in flight — and a `PROPFIND`) and saves one per file: 100 new folders against `rclone serve webdav` (release,
    /// time of `nimbus sync --once`, fills on / off) with 1 file each 0.31 / 0.26 s, 2: 0.39 / 0.34, 4: 0.45 / 0.45,
    /// 5: 0.51 / 0.52, 8: 0.64 / 0.71.
    public var fillMinimum: Int { fewestFilled.withLock { $0 } }

    public func createFolder(named name: String, in parentId: String, requestId: String, filledWith files: [BatchFile]) async throws
        -> (folder: RemoteItem, files: [Result<RemoteItem, ProviderError>])
    {
        guard files.count >= fillMinimum, await fillsNewFolders(), fillsAndStreams.beginFill() else {
            return try await createFolderThenFiles(named: name, in: parentId, requestId: requestId, files: files)
        }
        var filling = true
        defer { if filling { fillsAndStreams.endFill() } }
        fillsDone.withLock { $0 += 1 }
        let id = ProviderPath.child(try ProviderPath.validated(name), in: parentId)
        let staging = ProviderPath.child(PartialUploads.name(requestId: requestId, parentId: parentId), in: parentId)
        try await makeEmptyFolder(staging)
        // One file per name (a server that folds case would take two names as one): a second goes after, as usual.
        var seen = Set<String>()
        var staged: [Int] = []
        var after: [Int] = []
        for (index, file) in files.enumerated() {
            let key = file.name.precomposedStringWithCanonicalMapping.lowercased()
            if file.source.isHashed, file.source.size <= Self.inMemoryLimit, (try? ProviderPath.validated(file.name)) != nil, seen.insert(key).inserted {
                staged.append(index)
            } else {
                after.append(index)
            }
        }
        let sent = try await inOrder(staged, width: 2) { index in try await outcome { try await self.putStaged(files[index], in: staging) } }
        var results = [Result<RemoteItem, ProviderError>](repeating: .failure(.network("not sent")), count: files.count)
        for (slot, index) in staged.enumerated() {
            if case .failure(let error) = sent[slot] { results[index] = .failure(error) }
        }
        let (moved, _) = try await send("MOVE", address(staging, folder: true), headers: [("Destination", address(id, folder: true)), ("Overwrite", "F")])
        let status = Int(moved.status.code)
        let folder: RemoteItem
        if (200..<300).contains(status) {
            let listed = try await propfind(id, depth: 1, folder: true)
            guard let made = listed.first(where: { $0.id == id && $0.isFolder }) else {
                throw ProviderError.network("The folder \(name) was not there once moved into place.")
            }
            folder = made
            let byName = Dictionary(listed.filter { $0.id != id }.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
            for (slot, index) in staged.enumerated() {
                guard case .success(let putTag) = sent[slot] else { continue }
                let file = files[index]
                guard var item = byName[file.name], !item.isFolder, item.size == file.source.size else {
                    results[index] = .failure(.network("\(file.name) was not in its folder once moved into place."))
                    continue
                }
                etagTrust.withLock { $0.learn(put: putTag, stored: item.revision) }
                checksums.remember(file.source.checksum, of: item.id, revision: item.revision)
                item.checksum = file.source.checksum
                results[index] = .success(item)
            }
        } else if status == 412 {
            // A folder is there under the name already: it is this one; the files go into it one by one.
            guard let existing = try? await item(id), existing.isFolder else {
                _ = try? await send("DELETE", address(staging, folder: true))
                throw ProviderError.nameTaken(existing: id)
            }
            folder = existing
            for (slot, index) in staged.enumerated() {
                guard case .success(let putTag) = sent[slot] else { continue }
                results[index] = try await outcome { try await placeStaged(files[index], from: staging, in: id, putTag: putTag) }
            }
            _ = try? await send("DELETE", address(staging, folder: true))
        } else {
            _ = try? await send("DELETE", address(staging, folder: true))
            throw Self.failure(status, moved.headers, what: "making the folder \(name)")
        }
        // (The fill is over: what follows may be streamed, and a stream waits for fills.)
        fillsAndStreams.endFill()
        filling = false
        for index in after {
            var file = files[index]
            file.parentId = folder.id
            results[index] = try await outcome { try await uploadMoved(file) }
        }
        return (folder, results)
    }

    /// A hidden folder made empty: one left by an attempt cut off is deleted first (what it holds may no longer be
    /// wanted). Always asked: `rclone serve webdav` answers `201` to a `MKCOL` of a folder that is there.
    func makeEmptyFolder(_ id: String) async throws {
        let (gone, _) = try await send("DELETE", address(id, folder: true))
        let deleted = Int(gone.status.code)
        guard (200..<300).contains(deleted) || deleted == 404 else { throw Self.failure(deleted, gone.headers, what: "making a folder for new files") }
        let (made, _) = try await send("MKCOL", address(id, folder: true))
        let status = Int(made.status.code)
        guard (200..<300).contains(status) else { throw Self.failure(status, made.headers, what: "making a folder for new files") }
    }

    /// One file `PUT` into the hidden folder (no condition: nobody else writes there); the strong ETag it answered.
    func putStaged(_ file: BatchFile, in staging: String) async throws -> String? {
        let bytes = try file.source.readChecked()
        let headers = [("Content-Length", "\(file.source.size)"), ("Content-Type", "application/octet-stream")]
        let (answer, _) = try await send(
            "PUT", address(ProviderPath.child(file.name, in: staging)), headers: headers, stream: BandwidthLimits.body(bytes),
            timeout: TimeAmount(stallLimit))
        let status = Int(answer.status.code)
        guard (200..<300).contains(status) else { throw Self.failure(status, answer.headers, what: "sending \(file.name)") }
        return Self.strongTag(answer.headers)
    }

    /// A file from the hidden folder `MOVE`d to its name in `folderId` with `Overwrite: F`; a name taken there by the same
    /// content is this file (a retry after a lost answer), by another is ``ProviderError/nameTaken(existing:)``.
    func placeStaged(_ file: BatchFile, from staging: String, in folderId: String, putTag: String?) async throws -> RemoteItem {
        let id = ProviderPath.child(file.name, in: folderId)
        let (moved, _) = try await send(
            "MOVE", address(ProviderPath.child(file.name, in: staging)), headers: [("Destination", address(id)), ("Overwrite", "F")])
        let status = Int(moved.status.code)
        if (200..<300).contains(status) {
            return try await placed(id, parentId: folderId, size: file.source.size, putTag: putTag, checksum: file.source.checksum)
        }
        if status == 412 {
            guard let existing = try await sameFile(at: id, checksum: file.source.checksum, size: file.source.size) else {
                throw ProviderError.nameTaken(existing: id)
            }
            return existing
        }
        throw Self.failure(status, moved.headers, what: "placing \(file.name)")
    }
}
