import Foundation
import NimbusS3

/// Small new files in batches: one listing of each folder a batch writes into stands for every file's looks.
///
/// A new file alone costs two looks beside its `PUT` (a file under its name, a folder under its name: a ranged
/// `GET` and a listing). A batch (up to 32 small files, mostly into one folder) lists each of its folders once —
/// one request for a folder of up to 1,000 entries — and each file then goes as its `PUT` alone: a name the listing
/// shows as a folder is that file's `nameTaken`, a name it shows as a file is looked at (`HEAD`: the same content is
/// a retry that landed, anything else `nameTaken`), a folder the listing finds empty and unmarked is gone
/// (`notFound`). On a store proven to refuse overwrites the `PUT` is conditional, as for one file. A folder with
/// more than 1,000 entries is not listed: its files take the looks of a single upload. Like those looks, the listing
/// is taken just before: what changes between it and the `PUT` is what a store without conditions cannot refuse.
extension S3Provider {
    public func uploadBatch(_ files: [BatchFile]) async throws -> [Result<RemoteItem, ProviderError>] {
        var looks: [String: FolderLook] = [:]
        for parent in Set(files.map(\.parentId)).sorted() {
            looks[parent] = try await look(into: parent)
        }
        let known = looks
        return try await uploadEach(files, width: 2) { file in
            guard let look = known[file.parentId] ?? nil, file.source.size <= self.singlePutLimit else {
                return try await self.upload(
                    file.source, to: .new(parentId: file.parentId, name: file.name, mimeType: file.mimeType), requestId: file.requestId) { _ in }
            }
            return try await self.uploadNew(file, look: look)
        }
    }

    /// What a folder holds by name, from one listing page; nil when it holds more than a page (the files look for
    /// themselves then).
    struct FolderLook: Sendable {
        var exists: Bool
        var files: Set<String>
        var folders: Set<String>
    }

    func look(into parentId: String) async throws -> FolderLook? {
        let base = folderPrefix(parentId)
        let page = try await call("looking in \(parentId)") { try await client.list(prefix: base, delimiter: "/", maxKeys: 1000) }
        guard page.next == nil else { return nil }
        func name(_ key: String) -> String { String(key.dropFirst(base.count).split(separator: "/").first ?? "") }
        let exists = (parentId == ProviderPath.root && prefix.isEmpty) || !page.objects.isEmpty || !page.prefixes.isEmpty
        if exists { seenFolders.withLock { $0[parentId] = ContinuousClock.now } }
        return FolderLook(exists: exists, files: Set(page.objects.map { name($0.key) }), folders: Set(page.prefixes.map(name)))
    }

    /// A new small file into a folder just looked at.
    func uploadNew(_ file: BatchFile, look: FolderLook) async throws -> RemoteItem {
        let name = try ProviderPath.validated(file.name)
        let id = ProviderPath.child(name, in: file.parentId)
        guard look.exists else { throw ProviderError.notFound }
        if look.folders.contains(name) { throw ProviderError.nameTaken(existing: id) }
        if look.files.contains(name), let existing = try await head(id) {
            let item = self.file(id, existing)
            if item.checksum == file.source.checksum { return item }  // a retry after a lost answer
            throw ProviderError.nameTaken(existing: id)
        }
        let proven = try await probeConditions()
        let etag: String
        do {
            etag = try await putWhole(file.source, key: key(id), isNew: true, base: nil, conditionRequired: proven) { _ in }
        } catch ProviderError.versionConflict {
            // The store honoured the condition: something was written under the name since the listing.
            if let current = try await head(id), self.file(id, current).checksum == file.source.checksum { return self.file(id, current) }
            throw ProviderError.nameTaken(existing: id)
        }
        return try await answer(id, etag: etag, source: file.source, look: etag.isEmpty)
    }
}
