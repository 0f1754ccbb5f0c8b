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
    /// `conditional`: one `PUT` with `If-None-Match: *`; `moved`: a hidden name, then `MOVE` (`Overwrite: F`).
    public enum SmallCreates: Sendable, Equatable { case conditional, moved }

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
        let (put, _) = try await send("PUT", address(id), headers: headers, stream: .bytes(ByteBuffer(data: bytes)), timeout: TimeAmount(stallLimit))
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
                    "PUT", address(id), headers: replacing, stream: .bytes(ByteBuffer(data: bytes)), timeout: TimeAmount(stallLimit))
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
