import Crypto
import Foundation

/// The engine's own content files (staged uploads, the cache, partial downloads): plain, or sealed at rest in an
/// encrypted library. Everything that reads or writes them goes through here or through
/// ``UploadSource/open()`` / ``DownloadTarget/open()``.
extension SyncEngine {
    /// Whether `path` is one of the engine's own files (in an encrypted library: sealed).
    nonisolated func isStored(_ path: String) -> Bool {
        path.hasPrefix(contentDirectory.path + "/") || path.hasPrefix(stagingDirectory.path + "/")
    }

    nonisolated func sealing(for path: String) -> ContentSealing? { isStored(path) ? sealing : nil }

    /// An upload of the content at `path`.
    nonisolated func uploadSource(_ path: String, size: Int64, checksum: String) -> UploadSource {
        UploadSource(url: URL(fileURLWithPath: path), size: size, checksum: checksum, sealing: sealing(for: path))
    }

    /// A download into `url` (in the store: sealed in an encrypted library). A synced folder's sealed partial is
    /// opened into a plain file that is made durable, so the partial itself is not fsynced.
    nonisolated func downloadTarget(_ url: URL) -> DownloadTarget {
        let sealing = sealing(for: url.path)
        return DownloadTarget(url: url, sealing: sealing, durable: sealing == nil || disk == nil)
    }

    /// The content's size: of the plaintext, for a sealed file. Nil when there is no regular file.
    nonisolated func contentSize(_ path: String) -> Int64? {
        if let sealing = sealing(for: path) { return sealing.plainSize(path) }
        return FileHasher.regularFileSize(path)
    }

    /// SHA-256 and size of the content at `path` (opened, for a sealed file).
    nonisolated func hashContent(_ path: String) throws -> (checksum: String, size: Int64) {
        try downloadTarget(URL(fileURLWithPath: path)).hash()
    }

    /// Copies `source` (the caller's plain file) into the store at `destination`, hashing on the way.
    nonisolated func copyIn(_ source: URL, to destination: URL) throws -> (checksum: String, size: Int64) {
        guard let sealing = sealing(for: destination.path) else { return try FileHasher.copy(source, to: destination) }
        let input = try FileHandle(forReadingFrom: source)
        defer { try? input.close() }
        _ = FileManager.default.createFile(atPath: destination.path, contents: nil, attributes: [.posixPermissions: 0o600])
        let output = try ContentWriter(url: destination, sealing: sealing)
        var hasher = SHA256()
        var size: Int64 = 0
        do {
            while let data = try input.read(upToCount: 1 << 20), !data.isEmpty {
                hasher.update(data: data)
                try output.write(contentsOf: data)
                size += Int64(data.count)
            }
            try output.synchronize()
            try output.close()
        } catch {
            try? output.close()
            try? FileManager.default.removeItem(at: destination)
            throw error
        }
        return (FileHasher.hex(hasher.finalize()), size)
    }

    /// Writes the content of the stored file at `path` as a new plain file at `destination` (0600), checked against
    /// `checksum` when given: a sealed file swapped for another item's, or damaged, is an error, never returned.
    nonisolated func copyOut(_ path: String, to destination: URL, checksum: String?) throws {
        let reader = try ContentReader(url: URL(fileURLWithPath: path), sealing: sealing(for: path))
        defer { reader.close() }
        guard FileManager.default.createFile(atPath: destination.path, contents: nil, attributes: [.posixPermissions: 0o600]) else {
            throw SyncError.localFile("Cannot write \(destination.path).")
        }
        do {
            let output = try FileHandle(forWritingTo: destination)
            defer { try? output.close() }
            var hasher = SHA256()
            while let data = try reader.read(upToCount: 1 << 20), !data.isEmpty {
                hasher.update(data: data)
                try output.write(contentsOf: data)
            }
            if let checksum, FileHasher.hex(hasher.finalize()) != checksum {
                throw EncryptionError.tampered("the stored content of this item is another's")
            }
            try output.synchronize()
        } catch {
            try? FileManager.default.removeItem(at: destination)
            throw error
        }
    }

    // MARK: Reading content (the app)

    /// The item's current content, if it is on this device (works for plain and encrypted libraries alike; an
    /// encrypted one opens it here, checked).
    public func readContent(of id: ItemID) throws -> Data? {
        guard let (path, checksum) = try storedContent(of: id) else { return nil }
        let reader = try ContentReader(url: URL(fileURLWithPath: path), sealing: sealing(for: path))
        defer { reader.close() }
        let data = try reader.readToEnd()
        guard FileHasher.hex(SHA256.hash(data: data)) == checksum else {
            throw EncryptionError.tampered("the stored content of this item is another's or damaged")
        }
        return data
    }

    /// The item's current content for reading at any offset (a viewer, a player), if it is on this device: in an
    /// encrypted library only the 64 KiB segments read are opened, each authenticated. Close it when done.
    public func openContent(of id: ItemID) throws -> ContentReader? {
        guard let (path, _) = try storedContent(of: id) else { return nil }
        return try ContentReader(url: URL(fileURLWithPath: path), sealing: sealing(for: path))
    }

    /// Writes the item's current content to `destination` (a new file; replaced if there), if it is on this device;
    /// false if it is not.
    @discardableResult
    public func exportContent(of id: ItemID, to destination: URL) throws -> Bool {
        guard let (path, checksum) = try storedContent(of: id) else { return false }
        let temporary = destination.deletingLastPathComponent().appending(path: ".nimbus-partial-\(UUID.random().uuidString.lowercased())")
        do {
            try copyOut(path, to: temporary, checksum: checksum)
        } catch {
            try? FileManager.default.removeItem(at: temporary)  // a partial copy would keep the space it took
            throw error
        }
        guard Foundation.rename(temporary.path, destination.path) == 0 else {
            try? FileManager.default.removeItem(at: temporary)
            throw SyncError.localFile("Cannot write \(destination.path).")
        }
        return true
    }

    func storedContent(of id: ItemID) throws -> (path: String, checksum: String)? {
        try store.read { tx in
            guard let row = try tx.item(id.rawValue), let path = row.contentPath, let checksum = row.lChecksum,
                row.contentChecksum == checksum
            else { return nil }
            return (path, checksum)
        }
    }
}
