import Foundation
import NimbusAPI

/// What one cycle of a synced folder did, for the user.
public struct FolderSyncReport: Sendable, Equatable {
    /// Files sent there (paths relative to the folder).
    public var uploaded: [String] = []
    /// Files brought here.
    public var downloaded: [String] = []
    /// Folders made, here or there.
    public var createdFolders: [String] = []
    /// Items renamed or moved, here or there (`old → new`).
    public var moved: [String] = []
        /// Items deleted here that were deleted there.
        public var deletedHere: [String] = []
    /// Items deleted there that were deleted here (see ``remoteKeepsTrash``).
    public var deletedThere: [String] = []
    /// Items changed on both sides; both versions are kept (or the item waits, with the `ask` policy).
    public var conflicts: [String] = []
    /// Deleted on the server but changed here: kept here and sent again.
    public var kept: [String] = []
    /// Files that became (or, changed there, stayed) placeholders here: cloud-only (``Placeholder``).
    public var cloudOnly: [String] = []
    /// Items that left this device because they are outside the selection (nothing is deleted there).
    public var excluded: [String] = []
    /// Not synced this time (links, files still being written), with the reason.
    public var skipped: [String] = []
    /// Files left for a later round because they were still being written (also in ``skipped``, with the reason).
    public var changing: [String] = []
    /// What failed this round, in words for the user; failed steps are tried again later.
    public var errors: [String] = []
    /// Whether what ``deletedHere`` lists went to a trash there it can be restored from (the Nimbus server, a folder's
    /// `.nimbus-trash/`), or is gone there too (WebDAV, S3 — unless the server keeps its own trash or versions).
    public var remoteKeepsTrash = true
    /// The remote could not be reached this round (what waits here is sent once it is back).
    public var offline = false
    /// Content transfers this round held for an unmetered network (``MeteredPolicy/metadataOnly``).
    public var waitingForNetwork = 0
    /// Nothing was synced: the network policy paused the pair (why, in words: a metered network, a low battery).
    public var paused: String?
    /// The round could not take the remote's changes in (unreachable, or it refused: see ``errors``); only what was
    /// planned from earlier rounds ran.
    public var remoteFailed = false

    /// An empty report.
    public init() {}

    /// Adds what a later round of the same run did; what it skipped replaces what this one skipped.
    public mutating func absorb(_ later: FolderSyncReport) {
        uploaded += later.uploaded
        downloaded += later.downloaded
        createdFolders += later.createdFolders
        moved += later.moved
        deletedHere += later.deletedHere
        deletedThere += later.deletedThere
        conflicts += later.conflicts
        kept += later.kept
        cloudOnly += later.cloudOnly
        excluded += later.excluded
        skipped = later.skipped
        changing = later.changing
        errors = later.errors
        offline = later.offline
        remoteFailed = later.remoteFailed
        paused = later.paused
        waitingForNetwork = later.waitingForNetwork
        remoteKeepsTrash = later.remoteKeepsTrash
    }

    /// How many items this round changed, here or there.
    public var changed: Int {
        uploaded.count + downloaded.count + createdFolders.count + moved.count + deletedHere.count + deletedThere.count + conflicts.count + kept.count
            + cloudOnly.count + excluded.count
    }
}

/// Two-way sync of a folder on disk with a folder of a remote: a ``SyncEngine`` whose local side is the folder
/// (``LocalSide/folder(_:fileSystem:settleTime:)``). The disk is scanned into the local tree, the remote's changes
/// into the remote tree, and the planner decides from them and the merge base — the same planner, the same
/// rules, as the app library. The pair's state (the three trees) lives in the engine's database.
///
/// Safety, all from the planner and the steps that carry it out: a file that is still being written, or that
/// holds changes not yet sent, is never overwritten, moved or deleted by a change made there; every disk step
/// that replaces, moves or deletes checks the file again immediately before it acts; downloads land under a
/// temporary name and are renamed into place, never over a file that appeared meanwhile; symbolic links are
/// skipped; a deletion there of a file changed here keeps the file (sent again as a new file).
public actor FolderSync {
    /// The engine underneath: its status, items, conflicts and sign-in.
    public nonisolated let engine: SyncEngine
    /// The synced folder.
    public nonisolated let root: URL
    /// When the first file the last round found still being written will have settled.
    public private(set) var nextSettle: Date?

    /// A pair of `root` (a folder on disk) and the remote `configuration` names (its `provider`, or the signed-in
    /// Nimbus account's folder); `configuration.local` is set to the folder.
    public init(root: URL, configuration: SyncConfiguration, settleTime: TimeInterval = 1, fileSystem: any FileSystem = POSIXFileSystem()) throws {
        self.root = root.standardizedFileURL
        var configuration = configuration
        configuration.local = .folder(self.root, fileSystem: fileSystem, settleTime: settleTime)
        engine = try SyncEngine(configuration: configuration)
    }

    /// Many items gone from the folder (or from the remote) are deleted on the other side only when this is set
    /// (an unmounted disk or an `rm -rf` slip must not empty the other side).
    public func setConfirmDeletions(_ value: Bool) async { await engine.setConfirmDeletions(value) }

    /// Steps that failed and wait out a backoff before they are tried again: how many, and when the first is due.
    public func waitingRetries() async throws -> (count: Int, next: Date?) {
        try await engine.waitingRetries()
    }

    /// Looks at the folder again (no remote call): how many files changed since the last look — saved while the
    /// last cycle ran, say, after it had sent them. The local tree takes what it finds; the next cycle sends it.
    public func changedSinceLastLook() async throws -> Int {
        try await engine.observeLocal()
        let scan = await engine.lastScan
        return scan.hashed + scan.unhashed + scan.changing.count
    }

    /// One full cycle: the remote's changes, a scan of the folder, then plans carried out until nothing is left
    /// that can run now.
    public func syncOnce() async throws -> FolderSyncReport {
        var report = FolderSyncReport()
        report.remoteKeepsTrash = await engine.remoteFeatures.trash
        if case .paused(let why) = await engine.refreshAllowance() {
            report.paused = why
            return report
        }
        do {
            try await engine.syncOnce()
        } catch let error as SyncError {
            switch error {
            case .unauthorized, .notSignedIn, .localFile, .invalid: throw error
            case .remoteRootMissing(let message), .server(_, .api(.notAFolder), let message, _):
                // The remote's folder vanished (deleted from a web UI, a disk unmounted): nothing is planned from an
                // empty listing; the pair waits.
                throw SyncError.invalid(
                    "\(message) Syncing with it is paused and nothing was deleted here; make the folder again there, or remove the pair.")
            default:
                report.errors.append("Offline: \(error.description)")
                report.remoteFailed = true
                if case .network = error { report.offline = true }
            }
        }
        let (done, errors, scan, held, heldThere) = await engine.roundSummary()
        let paths = done.isEmpty && errors.isEmpty ? [:] : try await engine.paths()
        func path(_ id: ItemID) -> String { paths[id.rawValue] ?? id.rawValue }
        for (step, before) in done {
            switch step {
            case .upload, .uploadThenRestore, .restoreRevision: report.uploaded.append(path(step.item))
            case .createRemoteFolder: report.createdFolders.append(path(step.item))
            case .download: report.downloaded.append(path(step.item))
            case .createLocalFolder: report.downloaded.append(path(step.item) + "/")
            case .moveRemote, .moveLocal: report.moved.append("\(before ?? "?") → \(path(step.item))")
            case .deleteRemote: report.deletedHere.append(before ?? path(step.item))
            case .deleteLocal: report.deletedThere.append(before ?? path(step.item))
            case .forget: report.kept.append(path(step.item))
            case .placeholder: report.cloudOnly.append(path(step.item))
            case .evict: report.excluded.append(before ?? path(step.item))
            case .fork(_, let name):
                let original = before ?? path(step.item)
                let copy = original.lastIndex(of: "/").map { String(original[...$0]) + name } ?? name
                report.conflicts.append("\(original): changed here and there; both kept, this device's version is \(copy)")
            case .hold(_, .conflict):
                report.conflicts.append("\(path(step.item)): changed here and there; resolve with 'nimbus conflicts resolve'")
            case .hold(_, .unsynced):
                report.conflicts.append("\(path(step.item)): deleted there but changed here; resolve with 'nimbus conflicts resolve'")
            case .hold(_, .readOnly):
                report.conflicts.append("\(path(step.item)): in a share you may only view; kept on this device, not sent")
            case .record, .link, .release, .learnChecksum, .hold, .settleDoubt:
                break
            }
        }
        report.skipped += scan.skipped
        report.skipped += scan.changing.map { "\($0) (still being written)" }
        report.changing = scan.changing
        nextSettle = scan.nextSettle
        for (luid, error) in errors.sorted(by: { $0.key < $1.key }) { report.errors.append("\(paths[luid] ?? luid): \(error)") }
        if heldThere > 0 {
            report.errors.append(
                "\(heldThere) items are gone from \(root.path); they were not deleted there. If you meant to delete them, run again with --confirm-deletions.")
        }
        report.waitingForNetwork = await engine.waitingForNetwork
        if held > 0 {
            report.errors.append(
                "\(held) items deleted there would be deleted here; nothing was deleted. If that is what you want, run again with --confirm-deletions.")
        }
        return report
    }
}

extension SyncEngine {
    /// What the rounds since the last call did (for a synced folder's report).
    func roundSummary() -> (
        done: [(step: PlannedOperation, path: String?)], errors: [String: String], scan: DiskFolder.Scan, held: Int, heldThere: Int
    ) {
        let (done, errors) = takeRoundReport()
        defer {
            heldDeletions = 0
            heldLocalDeletions = 0
        }
        return (done, errors, lastScan, heldDeletions, heldLocalDeletions)
    }

    /// Every item's path in the local tree (or, not here, in the remote tree), relative to the root: one read.
    func paths() throws -> [String: String] {
        let rows = try store.read { tx in try tx.places() }
        var local: [String: (String?, String?)] = [:]
        var remote: [String: (String?, String?)] = [:]
        for row in rows {
            local[row.luid] = row.local
            remote[row.luid] = row.remote
        }
        var known: [String: String] = [ItemID.root.rawValue: ""]
        func path(_ luid: String, _ tree: [String: (String?, String?)], _ depth: Int) -> String? {
            if luid == ItemID.root.rawValue { return "" }
            guard depth < 1000, let (parent, name) = tree[luid], let parent, let name, let above = path(parent, tree, depth + 1) else { return nil }
            return above.isEmpty ? name : above + "/" + name
        }
        for row in rows where row.luid != ItemID.root.rawValue {
            if let value = path(row.luid, local, 0) ?? path(row.luid, remote, 0) { known[row.luid] = value }
        }
        return known
    }
}
