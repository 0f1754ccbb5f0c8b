import Foundation
import NimbusAPI

/// The user's actions (the app library): each changes the local tree in one transaction and returns; what that
/// means there is the planner's to decide, and the network happens later.
extension SyncEngine {
    /// Creates a folder in `parent` and returns its id.
    @discardableResult
    public func createFolder(named rawName: String, in parent: ItemID = .root) throws -> ItemID {
        let name = try Self.validName(rawName)
        let id = ItemID.make()
        let now = self.now
        try store.write { tx in
            let parentRow = try self.liveFolder(tx, parent)
            try self.checkFree(tx, name: name, in: parentRow.luid, except: nil)
            var row = ItemRow.empty(id.rawValue, isFolder: true)
            row.lPresent = true
            row.lParent = parentRow.luid
            row.lName = name
            row.lMime = folderMimeType
            row.lSize = 0
            row.lModified = now.millis
            row.lastAccess = now.millis
            row.createRequest = Self.newRequestId()
            try tx.insert(row)
        }
        notifyChanged()
        return id
    }

    /// Adds a file to `folder`. With `copy` (the default) the bytes are copied into the engine's store first, so
    /// the upload is unaffected by later changes to `fileURL`; without, the upload reads `fileURL` itself (and a
    /// file that changed before it was sent is read again). A pipe (standard input) can be given with `copy`: it is
    /// read to its end into the store.
    @discardableResult
    public func upload(
        from fileURL: URL, named rawName: String? = nil, in folder: ItemID = .root, mimeType: String? = nil, copy: Bool = true,
        checksum: String? = nil
    ) throws -> ItemID {
        let name = try Self.validName(rawName ?? fileURL.lastPathComponent)
        let copy = copy || sealing != nil  // an encrypted library keeps its own sealed copy
        let staged = try stage(fileURL, copy: copy, checksum: checksum)
        let id = ItemID.make()
        let now = self.now
        do {
            try store.write { tx in
                let parentRow = try self.liveFolder(tx, folder)
                try self.insertFile(tx, id: id, name: name, parent: parentRow.luid, mimeType: mimeType, staged: staged, owned: copy, now: now)
            }
        } catch {
            if copy { try? FileManager.default.removeItem(at: staged.url) }
            throw error
        }
        notifyChanged()
        return id
    }

    /// A new file for ``upload(_:)``.
    public struct NewUpload: Sendable {
        /// The file to add.
        public var fileURL: URL
        /// Its name in the library (the file's own name when nil).
        public var name: String?
        /// The folder it goes in.
        public var folder: ItemID
        /// Its MIME type (guessed from the name when nil).
        public var mimeType: String?
        /// The content's SHA-256 if the caller has it (it is trusted: the upload is checked against it).
        public var checksum: String?

        /// A file to add, with what is known of it.
        public init(fileURL: URL, name: String? = nil, folder: ItemID = .root, mimeType: String? = nil, checksum: String? = nil) {
            self.fileURL = fileURL
            self.name = name
            self.folder = folder
            self.mimeType = mimeType
            self.checksum = checksum
        }
    }

    /// Adds many files at once in one local transaction: each as ``upload(from:named:in:mimeType:copy:checksum:)``
    /// without `copy` would, in order; each succeeds or fails on its own.
    public func upload(_ files: [NewUpload]) throws -> [Result<ItemID, SyncError>] {
        var results = [Result<ItemID, SyncError>](repeating: .failure(.invalid("not queued")), count: files.count)
        var prepared: [(index: Int, name: String, staged: (url: URL, checksum: String, size: Int64))] = []
        for (index, file) in files.enumerated() {
            do {
                prepared.append((index, try Self.validName(file.name ?? file.fileURL.lastPathComponent), try stage(file.fileURL, copy: false, checksum: file.checksum)))
            } catch {
                results[index] = .failure(error as? SyncError ?? .localFile("\(error)"))
            }
        }
        let now = self.now
        try store.write { tx in
            var folders: [ItemID: String] = [:]
            for entry in prepared {
                let file = files[entry.index]
                let id = ItemID.make()
                do {
                    let parent: String
                    if let known = folders[file.folder] {
                        parent = known
                    } else {
                        parent = try self.liveFolder(tx, file.folder).luid
                        folders[file.folder] = parent
                    }
                    // insertFile refuses (a SyncError) before its first write, so a refused file leaves nothing.
                    try self.insertFile(
                        tx, id: id, name: entry.name, parent: parent, mimeType: file.mimeType, staged: entry.staged, owned: self.sealing != nil, now: now)
                    results[entry.index] = .success(id)
                } catch let error as SyncError {
                    if self.sealing != nil { try? FileManager.default.removeItem(at: entry.staged.url) }
                    results[entry.index] = .failure(error)
                }
            }
        }
        notifyChanged()
        return results
    }

    nonisolated func insertFile(
        _ tx: StoreTransaction, id: ItemID, name: String, parent: String, mimeType: String?, staged: (url: URL, checksum: String, size: Int64), owned: Bool,
        now: Date
    ) throws {
        try checkFree(tx, name: name, in: parent, except: nil)  // the only refusal, before any write
        var row = ItemRow.empty(id.rawValue, isFolder: false)
        row.lPresent = true
        row.lParent = parent
        row.lName = name
        row.lMime = mimeType ?? MimeType.guess(forName: name)
        row.lSize = staged.size
        row.lChecksum = staged.checksum
        row.lModified = now.millis
        row.lastAccess = now.millis
        row.contentPath = staged.url.path
        row.contentChecksum = staged.checksum
        row.contentOwned = owned
        row.createRequest = Self.newRequestId()
        try tx.insert(row)
    }

    /// Replaces a file's content with `fileURL`'s: a new version, based on the last revision both sides agreed on
    /// (a version not yet sent is simply replaced: only the newest is sent).
    public func update(_ id: ItemID, from fileURL: URL, copy: Bool = true, checksum: String? = nil) throws {
        let copy = copy || sealing != nil  // an encrypted library keeps its own sealed copy
        let staged = try stage(fileURL, copy: copy, checksum: checksum)
        let now = self.now
        var discard: String?
        do {
            try store.write { tx in
                let stored = try self.liveItem(tx, id)
                guard !stored.isFolder else { throw SyncError.invalid("'\(stored.lName ?? "")' is a folder.") }
                var row = stored
                if row.contentOwned, let old = row.contentPath, old.hasPrefix(self.stagingDirectory.path), !self.running.contains(row.luid) {
                    discard = old
                }
                row.lSize = staged.size
                row.lChecksum = staged.checksum
                row.lModified = now.millis
                row.lastAccess = now.millis
                row.contentPath = staged.url.path
                row.contentChecksum = staged.checksum
                row.contentOwned = copy
                row.sourceRevision = nil
                try tx.update(row, from: stored)
                try tx.clearFailedForGood(row.luid)
            }
        } catch {
            if copy { try? FileManager.default.removeItem(at: staged.url) }
            throw error
        }
        if let discard, discard != staged.url.path { try? FileManager.default.removeItem(atPath: discard) }
        notifyChanged()
    }

    /// Renames the item here at once (sent later). A name taken in its folder, or an invalid one, throws
    /// ``SyncError/invalid(_:)`` and changes nothing.
    public func rename(_ id: ItemID, to rawName: String) throws {
        let name = try Self.validName(rawName)
        let now = self.now
        try store.write { tx in
            let stored = try self.liveItem(tx, id)
            guard id != .root else { throw SyncError.invalid("The root folder cannot be renamed.") }
            guard stored.lName != name else { return }
            try self.checkFree(tx, name: name, in: stored.lParent ?? "", except: stored.luid)
            var row = stored
            row.lName = name
            row.lModified = now.millis
            try tx.update(row, from: stored)
        }
        notifyChanged()
    }

    /// Moves the item into `folder` here at once (sent later). A folder cannot go into itself or below itself;
    /// a name taken there throws and changes nothing.
    public func move(_ id: ItemID, to folder: ItemID) throws {
        let now = self.now
        try store.write { tx in
            let stored = try self.liveItem(tx, id)
            guard id != .root else { throw SyncError.invalid("The root folder cannot be moved.") }
            let target = try self.liveFolder(tx, folder)
            guard stored.lParent != target.luid else { return }
            var cursor: String? = target.luid
            while let current = cursor {
                if current == stored.luid { throw SyncError.invalid("A folder cannot be moved into itself or one of its subfolders.") }
                cursor = try tx.localParent(of: current)
            }
            try self.checkFree(tx, name: stored.lName ?? "", in: target.luid, except: stored.luid)
            var row = stored
            row.lParent = target.luid
            row.lModified = now.millis
            try tx.update(row, from: stored)
        }
        notifyChanged()
    }

    /// Moves an item (and a folder's contents) to the server's trash.
    public func delete(_ id: ItemID) throws {
        var discard: [String] = []
        try store.write { tx in
            _ = try self.liveItem(tx, id)
            guard id != .root else { throw SyncError.invalid("The root folder cannot be deleted.") }
            for luid in try tx.localSubtree(id.rawValue) {
                guard let stored = try tx.item(luid) else { continue }
                var row = stored
                row.lPresent = false
                row.hold = nil
                // (A creation in doubt keeps its bytes: it is settled by asking again, see `settleDoubts`.)
                if row.contentOwned, let path = row.contentPath, path.hasPrefix(self.stagingDirectory.path), !self.running.contains(luid),
                    !(row.createSent && row.fileId == nil)
                {
                    discard.append(path)
                    row.contentPath = nil
                    row.contentChecksum = nil
                }
                if !row.sPresent && !row.rPresent && !row.createSent {
                    try tx.delete(luid)  // never left this device
                } else {
                    try tx.update(row, from: stored)
                }
            }
        }
        for path in discard { try? FileManager.default.removeItem(atPath: path) }
        notifyChanged()
    }

    /// Keeps the item's content on this device (`pinned`), downloading it when needed; unpinning lets it go.
    public func makeAvailableOffline(_ id: ItemID, pinned: Bool = true) throws {
        let now = self.now
        try store.write { tx in
            let stored = try self.liveItem(tx, id)
            guard !stored.isFolder else { throw SyncError.invalid("'\(stored.lName ?? "")' is a folder; pin its files.") }
            var row = stored
            row.pinned = pinned
            row.lastAccess = now.millis
            try tx.update(row, from: stored)
        }
        notifyChanged()
    }

    /// Downloads the item's current content into the engine's store now (once, without pinning it); a no-op when
    /// it is already here.
    public func download(_ id: ItemID) async throws {
        guard let row = try await store.read({ tx in try tx.item(id.rawValue) }), row.lPresent else {
            throw SyncError.invalid("No such item.")
        }
        guard !row.isFolder else { throw SyncError.invalid("'\(row.lName ?? "")' is a folder.") }
        try await fetchContent(row)
    }

    /// Makes `revisionId`'s content the file's new head (history keeps everything).
    public func restore(_ id: ItemID, revision revisionId: String) throws {
        let cached = try cachedRevisions(of: id).first { $0.revisionId == revisionId }
        let now = self.now
        try store.write { tx in
            let stored = try self.liveItem(tx, id)
            guard !stored.isFolder, stored.fileId != nil else { throw SyncError.invalid("Only a file that is on the server has revisions.") }
            var row = stored
            row.sourceRevision = revisionId
            row.lChecksum = cached?.checksum ?? "revision:\(revisionId)"
            row.lSize = cached?.size ?? row.lSize
            row.lModified = now.millis
            try tx.update(row, from: stored)
        }
        notifyChanged()
    }

    /// The file's revisions, newest first (asks the server; offline, the list fetched last time).
    public func revisions(of id: ItemID) async throws -> [FileRevision] {
        guard let fileId = try await store.read({ tx in try tx.item(id.rawValue)?.fileId }) else {
            throw SyncError.invalid("This item has not reached the server yet; it has no revisions.")
        }
        let result: [FileRevision]
        do {
            guard let provider = try requireProvider().features.revisions else {
                throw SyncError.invalid("This remote keeps no revisions.")
            }
            result = try await provider.revisions(of: fileId)
        } catch let error as ProviderError {
            let cached = try cachedRevisions(of: id)
            if cached.isEmpty || !error.isRetryable { throw SyncError(error) }
            return cached
        } catch SyncError.notSignedIn {
            let cached = try cachedRevisions(of: id)
            if cached.isEmpty { throw SyncError.notSignedIn }
            return cached
        }
        try await store.write { tx in
            try tx.cacheRevisions(result, of: fileId)
        }
        return result
    }

    /// The revisions of an item as ``revisions(of:)`` last fetched them (newest first), without the network;
    /// empty if never fetched (or dropped by the metadata cache's cap).
    public func cachedRevisions(of id: ItemID) throws -> [FileRevision] {
        try store.read { tx in
            guard let fileId = try tx.item(id.rawValue)?.fileId else { return [] }
            return try tx.cachedRevisions(of: fileId)
        }
    }

    /// Drops the item's changes that have not been sent: it shows the last state both sides agreed on again (an
    /// item that never reached the server disappears).
    public func cancel(_ id: ItemID) async throws {
        let (discard, requests) = try await store.write { tx -> ([String], [String]) in
            var discard: [String] = []
            var requests: [String] = []
            guard let stored = try tx.item(id.rawValue) else { return ([], []) }
            var row = stored
            if let request = row.uploadRequest?.split(separator: " ").last { requests.append(String(request)) }
            if row.fileId == nil, let request = row.createRequest { requests.append(request) }
            if row.contentOwned, let path = row.contentPath, path.hasPrefix(self.stagingDirectory.path), row.contentChecksum != row.sChecksum {
                discard.append(path)
                row.contentPath = nil
                row.contentChecksum = nil
            }
            try tx.clearFailures([row.luid])
            guard row.sPresent else {
                if !row.createSent || row.fileId == nil { try tx.delete(row.luid) } else { try tx.update(row, from: stored) }
                return (discard, requests)
            }
            row.hold = nil
            row.lPresent = true
            row.lParent = row.sParent
            row.lName = row.sName
            if !row.isFolder {
                row.lChecksum = row.sChecksum
                row.lSize = row.rRevision == row.sRevision ? row.rSize : row.lSize
            }
            row.lChanging = false
            row.sourceRevision = nil
            row.uploadRequest = nil
            try tx.update(row, from: stored)
            return (discard, requests)
        }
        for path in discard { try? FileManager.default.removeItem(atPath: path) }
        if let provider {
            for request in requests { await provider.cancelUpload(requestId: request) }
        }
        notifyChanged()
    }

    /// Tries the item's failed steps again.
    public func retry(_ id: ItemID) throws {
        try store.write { tx in try tx.clearFailures([id.rawValue]) }
        notifyChanged()
    }

    /// Tries every failed step again at the next round: those failed for good (after `maxAttempts`, or with an error
    /// retrying would not mend by itself) and those waiting out a backoff. What changed since — a fixed server, a
    /// permission given back — gets its chance. The CLI calls this as each `nimbus sync` starts (running it again is
    /// asking again); returns how many items it gave another try.
    @discardableResult
    public func retryFailed() throws -> Int {
        let count = try store.write { tx in try tx.clearAllFailures() }
        if count > 0 { notifyChanged() }
        return count
    }

    /// Settles a conflict the `ask` strategy left for the user. Nothing is lost whatever the answer: the losing
    /// version stays a revision there (or, with `keepBoth` — and with `keepRemote` on a remote that keeps no
    /// revisions — a conflict copy). The answer is recorded at once; the planner carries it out in the next rounds.
    public func resolveConflict(_ id: ItemID, keeping resolution: ConflictResolution) async throws {
        try await store.write { tx in
            guard let stored = try tx.item(id.rawValue), stored.hold == .conflict else {
                throw SyncError.invalid("This item is not in conflict.")
            }
            var updated = stored
            updated.hold = Hold(resolution)
            try tx.update(updated, from: stored)
        }
        notifyChanged()
    }

    /// The user accepts the server's deletion of an `unsynced` item: the local copy goes.
    public func confirmDeletion(_ id: ItemID) throws {
        var discard: [String] = []
        try store.write { tx in
            guard let row = try tx.item(id.rawValue), row.hold == .unsynced else {
                throw SyncError.invalid("This item is not waiting for a deletion decision.")
            }
            for luid in try tx.localSubtree(row.luid) {
                guard let item = try tx.item(luid) else { continue }
                if let path = item.contentPath, item.contentOwned { discard.append(path) }
                try tx.delete(luid)
            }
        }
        for path in Set(discard) { try? FileManager.default.removeItem(atPath: path) }
        notifyChanged()
    }

    /// The user keeps an `unsynced` item: it is uploaded again as a new item (with everything in it).
    public func keepLocalCopy(_ id: ItemID) throws {
        try store.write { tx in
            guard let row = try tx.item(id.rawValue), row.hold == .unsynced else {
                throw SyncError.invalid("This item is not waiting for a deletion decision.")
            }
            for luid in try tx.localSubtree(row.luid) {
                guard let stored = try tx.item(luid), !stored.rPresent || luid == row.luid else { continue }
                if !stored.isFolder && (stored.contentPath == nil || stored.contentChecksum != stored.lChecksum) {
                    // Only its name was here (its content never was): there is nothing to keep.
                    try tx.delete(luid)
                    continue
                }
                var item = stored
                item.forgetRemote()
                try tx.update(item, from: stored)
            }
        }
        notifyChanged()
    }

    /// Applies deletions that were held because there were so many.
    public func confirmMassDeletion() async throws {
        massDeletionConfirmed = true
        if case .awaitingDeletionConfirmation = phase { phase = .idle }
        try await syncOnce()
        notifyChanged()
    }

    /// Refuses held deletions: the items stay here, marked `unsynced`, for the user to decide one by one.
    public func rejectMassDeletion() async throws {
        let plan = try await currentPlan()
        try await store.write { tx in
            for case .deleteLocal(let id) in plan {
                try tx.setHold(id.rawValue, .unsynced)
            }
        }
        if case .awaitingDeletionConfirmation = phase { phase = .idle }
        notifyChanged()
    }

    /// Lets the item's downloaded content go once the caller has read it (``openContent(of:)``; `nimbus get … -`):
    /// the engine forgets it and deletes its file — only when it is the synced content (never an edit waiting to be
    /// sent) and the item is not pinned. False when nothing was let go.
    @discardableResult
    public func releaseContent(of id: ItemID) throws -> Bool {
        let released = try store.write { tx -> String? in
            guard let stored = try tx.item(id.rawValue), !stored.pinned, let path = stored.contentPath,
                let checksum = stored.contentChecksum, checksum == stored.lChecksum, checksum == stored.sChecksum, self.isStored(path)
            else { return nil }
            var row = stored
            row.contentPath = nil
            row.contentChecksum = nil
            try tx.update(row, from: stored)
            return path
        }
        guard let released else { return false }
        try? FileManager.default.removeItem(atPath: released)
        notifyChanged()
        return true
    }

    /// Hands the item's downloaded content file over to the caller (who moves it where it belongs); the engine
    /// forgets it. `nil` if the current content is not here.
    /// In an encrypted library the file handed over is a plain copy, opened and checked, in `directory` (pass the
    /// folder it is going to, so it is moved, not copied again) or the system's temporary folder; the sealed one is
    /// removed.
    public func takeContent(of id: ItemID, into directory: URL? = nil) throws -> URL? {
        let taken = try store.write { tx -> (path: String, checksum: String?)? in
            guard let stored = try tx.item(id.rawValue), let path = stored.contentPath, stored.contentChecksum == stored.lChecksum,
                self.isStored(path)
            else { return nil }
            var row = stored
            row.contentPath = nil
            row.contentChecksum = nil
            try tx.update(row, from: stored)
            return (path, stored.contentChecksum)
        }
        guard let taken else { return nil }
        guard sealing != nil else { return URL(fileURLWithPath: taken.path) }
        let plain = (directory ?? FileManager.default.temporaryDirectory).appending(path: ".nimbus-\(UUID.random().uuidString.lowercased())")
        defer { try? FileManager.default.removeItem(atPath: taken.path) }
        try copyOut(taken.path, to: plain, checksum: taken.checksum)
        return plain
    }

    // MARK: Helpers (inside transactions)

    static func validName(_ raw: String) throws -> String {
        do { return try FileName.validated(raw) } catch { throw SyncError.invalid(error.description) }
    }

    static func newRequestId() -> String { UUID.random().uuidString.lowercased() }

    nonisolated func liveItem(_ tx: StoreTransaction, _ id: ItemID) throws -> ItemRow {
        guard let row = try tx.item(id.rawValue), row.lPresent else { throw SyncError.invalid("No such item.") }
        return row
    }

    nonisolated func liveFolder(_ tx: StoreTransaction, _ id: ItemID) throws -> ItemRow {
        let row = try liveItem(tx, id)
        guard row.isFolder else { throw SyncError.invalid("'\(row.lName ?? "")' is not a folder.") }
        return row
    }

    nonisolated func checkFree(_ tx: StoreTransaction, name: String, in parent: String, except luid: String?) throws {
        if let other = try tx.luid(named: name, inLocal: parent), other != luid {
            throw SyncError.invalid("'\(name)' already exists in that folder.")
        }
    }

    /// The file to send: copied into the staging area (hashed on the way), or used where it is. A caller that has
    /// just hashed an uncopied file may pass its `checksum`: it is not read again, and if the bytes change before
    /// they are sent the provider refuses them and they are hashed again.
    func stage(_ fileURL: URL, copy: Bool, checksum known: String? = nil) throws -> (url: URL, checksum: String, size: Int64) {
        // A pipe (standard input) is copied in as it comes: its size and checksum are known at its end.
        let stream = (copy || sealing != nil) && FileHasher.isStream(fileURL.path)
        guard let size = FileHasher.regularFileSize(fileURL.path) ?? (stream ? 0 : nil) else {
            throw SyncError.localFile("\(fileURL.path) is not a readable file.")
        }
        do {
            // An encrypted library keeps its own sealed copy: the caller's file (and its path, a name) stay out of it.
            if copy || sealing != nil {
                let destination = stagingDirectory.appending(path: UUID.random().uuidString.lowercased())
                let (checksum, size) = try copyIn(fileURL, to: destination)
                return (destination, checksum, size)
            }
            if let known { return (fileURL, known, size) }
            let (checksum, size) = try FileHasher.sha256(of: fileURL)
            return (fileURL, checksum, size)
        } catch let error as SyncError {
            throw error
        } catch {
            throw SyncError.localFile("Could not read \(fileURL.path): \(error.localizedDescription)")
        }
    }

    /// Runs rounds until nothing is left to do (or only what failed for good, or waits for the user), sleeping
    /// through retry delays; gives up after `timeout`.
    public func drain(timeout: Duration = .seconds(3600)) async throws {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            try Task.checkCancellation()
            try await syncOnce()
            if phase == .needsSignIn { throw SyncError.unauthorized("sign in again") }
            guard let wait = try nextDue() else { return }
            try await Task.sleep(for: .milliseconds(Int64(max(0.05, min(5, wait.timeIntervalSince(now))) * 1000)))
        }
    }
}

extension ItemRow {
    /// A file whose content was saved here and not sent: what a merge of two rows must never drop.
    var hasOwnEdit: Bool { !isFolder && lPresent && contentPath != nil && lChecksum != nil && lChecksum != sChecksum }

    /// Deleted there but kept here: the item loses its remote state and identity and is sent again as a new item.
    mutating func forgetRemote() {
        rPresent = false
        rParent = nil
        rName = nil
        rRevision = nil
        rChecksum = nil
        rAccess = 0
        sPresent = false
        sParent = nil
        sName = nil
        sRevision = nil
        sChecksum = nil
        sAccess = 0
        forgetRemoteIdentity()
    }

    /// What of a forgotten remote item the trees do not hold (``Trees/apply(_:_:)`` clears the merge base): its
    /// provider id and requests; it is sent again as new, under a new request id.
    mutating func forgetRemoteIdentity() {
        fileId = nil
        hold = nil
        createRequest = UUID.random().uuidString.lowercased()
        createSent = false
        uploadRequest = nil
    }
}

extension SyncError {
    /// A provider's outcome as the engine reports it.
    init(_ error: ProviderError) {
        switch error {
        case .network(let message): self = .network(message)
        case .unauthorized(let message): self = .unauthorized(message)
        case .retryAfter(let seconds): self = .server(status: 429, code: .api(.rateLimited), message: error.description, retryAfter: seconds)
        case .server(let status, let code, let message): self = .server(status: status, code: code, message: message, retryAfter: nil)
        case .invalid(let message): self = .server(status: 400, code: .api(.invalidRequest), message: message, retryAfter: nil)
        case .notAFolder(let message): self = .server(status: 400, code: .api(.notAFolder), message: message, retryAfter: nil)
        case .rootMissing(let message): self = .remoteRootMissing(message)
        case .unsupported(let message): self = .server(status: 400, code: .other("unsupported"), message: message, retryAfter: nil)
        case .deletionsPaused(let message): self = .server(status: 409, code: .api(.massDeletionPaused), message: message, retryAfter: nil)
        case .quotaExceeded(let message): self = .server(status: 507, code: .api(.quotaExceeded), message: message, retryAfter: nil)
        case .tooLarge(let message): self = .server(status: 413, code: .api(.tooLarge), message: message, retryAfter: nil)
        case .notFound: self = .server(status: 404, code: .api(.notFound), message: error.description, retryAfter: nil)
        case .gone: self = .server(status: 410, code: .api(.gone), message: error.description, retryAfter: nil)
        case .versionConflict, .nameTaken, .requestIdReused: self = .server(status: 409, code: .api(.conflict), message: error.description, retryAfter: nil)
        case .checksumMismatch: self = .server(status: 422, code: .api(.checksumMismatch), message: error.description, retryAfter: nil)
        }
    }
}
