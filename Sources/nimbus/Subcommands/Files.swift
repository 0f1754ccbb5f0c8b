import ArgumentParser
import Crypto
import Foundation
import NimbusAPI
import NimbusSync

/// A view item as `--json` prints it.
struct ItemJSON: Encodable {
    var id: String
    var fileId: String?
    var path: String
    var name: String
    var type: String
    var size: Int64
    var checksum: String?
    var modifiedAt: Date
    var state: String
    /// Why it waits for the user (``nimbus conflicts``).
    var reason: String?

    init(_ item: SyncItem, path: String) {
        id = item.id.rawValue
        fileId = item.fileId
        self.path = path
        name = item.name
        type = item.isFolder ? "folder" : "file"
        size = item.size
        checksum = item.checksum
        modifiedAt = item.modifiedAt
        state = Self.describe(item.state)
    }

    static func describe(_ state: ItemState) -> String {
        switch state {
        case .synced: "synced"
        case .pending: "pending"
        case .uploading(let p): "uploading \(Int(p * 100))%"
        case .downloading(let p): "downloading \(Int(p * 100))%"
        case .conflict: "conflict"
        case .unsynced: "unsynced"
        case .readOnly: "read-only"
        case .failed(let error): "failed: \(error.description)"
        }
    }
}

/// Pulls if the server can be reached; offline, the local view still answers (and ``Offline/reason`` says why it
/// may be behind: a path this device has not seen is then "not known here", not "no such file").
func refresh(_ engine: SyncEngine) async {
    do {
        try await engine.pull()
    } catch SyncError.network(let detail) {
        Offline.reason.withLock { $0 = "The server could not be reached (\(detail))" }
    } catch SyncError.unauthorized(let detail) {
        // Signed out, or the account disabled: said, never shown as if the listing were current.
        Offline.reason.withLock { $0 = "The server refused this device: \(detail)" }
    } catch {}
}

/// Why this command works from the device's copy alone: the server could not be reached, or refused this device
/// (nil: it answered).
enum Offline {
    static let reason = LockedBox<String?>(nil)

    /// A note on standard error that what is shown is the device's copy, when the server did not answer it.
    static func note() {
        guard let reason = reason.withLock({ $0 }) else { return }
        Output.error("\(reason); shown as this device last saw it.")
    }
}

struct List: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "ls", abstract: "List a folder (folders first).")

    @Argument(help: "A remote folder or file, e.g. /Work (default /).")
    var path: String = "/"

    @Flag(name: .shortAndLong, help: "Show type, size, modification time and sync state.")
    var long = false

    @OptionGroup var output: OutputOptions

    func run() async throws {
        let engine = try await Home.current.signedInEngine()
        await refresh(engine)
        let target = try await RemotePath.item(path, in: engine)
        Offline.note()
        let base = RemotePath.normalized(path)
        let items = target.isFolder ? try await engine.listing(in: target.id) : [target]
        if output.json {
            return try Output.json(items.map { ItemJSON($0, path: target.isFolder ? (base == "/" ? "" : base) + "/" + $0.name : base) })
        }
        for item in items {
            let name = item.name + (item.isFolder ? "/" : "")
            if long {
                let size = item.isFolder ? "-" : Output.size(item.size)
                print("\(item.isFolder ? "d" : "-")  \(size.padding(toLength: 10, withPad: " ", startingAt: 0)) \(Output.date(item.modifiedAt))  \(ItemJSON.describe(item.state).padding(toLength: 12, withPad: " ", startingAt: 0)) \(name)")
            } else {
                print(name)
            }
        }
    }
}

struct MakeDirectory: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "mkdir", abstract: "Create a folder.")

    @Flag(name: .customShort("p"), help: "Create missing parent folders too; no error if it exists.")
    var parents = false

    @Argument(help: "The folder to create, e.g. /Work/2026.")
    var path: String

    @OptionGroup var output: OutputOptions

    func run() async throws {
        let engine = try await Home.current.signedInEngine()
        await refresh(engine)
        guard let name = RemotePath.name(path) else { throw ValidationError("Give a folder path, e.g. /Work.") }
        if let existing = try await engine.item(atPath: RemotePath.normalized(path)) {
            guard parents, existing.isFolder else { throw CLIError("\(RemotePath.normalized(path)) already exists.") }
            return
        }
        if parents {
            _ = try await RemotePath.makeFolders(path, in: engine)
        } else {
            let parent = try await RemotePath.folder(RemotePath.parent(path), in: engine)
            do { _ = try await engine.createFolder(named: name, in: parent.id) } catch let error as SyncError { throw CLIError(error.description) }
        }
        try await drain(engine)
        Output.line("Created \(RemotePath.normalized(path))", options: output)
    }
}

struct Remove: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "rm", abstract: "Move a file or folder to the trash.")

    @Flag(name: .shortAndLong, help: "Remove a folder and everything in it.")
    var recursive = false

    @Argument(help: "The remote path.")
    var path: String

    @OptionGroup var output: OutputOptions

    func run() async throws {
        let engine = try await Home.current.signedInEngine()
        await refresh(engine)
        let item = try await RemotePath.item(path, in: engine)
        guard item.id != .root else { throw CLIError("The root folder cannot be removed.") }
        if item.isFolder && !recursive { throw CLIError("\(RemotePath.normalized(path)) is a folder; use rm -r.") }
        try await engine.delete(item.id)
        try await drain(engine)
        Output.line("Moved \(RemotePath.normalized(path)) to the trash", options: output)
    }
}

struct Move: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "mv", abstract: "Rename or move a file or folder.")

    @Argument(help: "What to move.")
    var source: String

    @Argument(help: "The new path, or an existing folder to move it into.")
    var destination: String

    @OptionGroup var output: OutputOptions

    func run() async throws {
        let engine = try await Home.current.signedInEngine()
        await refresh(engine)
        let item = try await RemotePath.item(source, in: engine)
        var targetFolder: SyncItem
        var newName = item.name
        if let existing = try await engine.item(atPath: RemotePath.normalized(destination)) {
            guard existing.isFolder else { throw CLIError("\(RemotePath.normalized(destination)) already exists.") }
            targetFolder = existing
        } else {
            targetFolder = try await RemotePath.folder(RemotePath.parent(destination), in: engine)
            guard let name = RemotePath.name(destination) else { throw ValidationError("Give a destination path.") }
            newName = name
        }
        do {
            if targetFolder.id != item.parentId { try await engine.move(item.id, to: targetFolder.id) }
            if newName != item.name { try await engine.rename(item.id, to: newName) }
        } catch let error as SyncError {
            throw CLIError(error.description)
        }
        try await drain(engine)
        Output.line("Moved \(RemotePath.normalized(source)) → \(try await engine.path(of: item.id) ?? destination)", options: output)
    }
}

enum PutConflict: String, ExpressibleByArgument, CaseIterable {
    case fail, rename, replace
}

struct Put: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Upload a file (resumable: after Ctrl-C or a crash, run the same command, or 'nimbus uploads resume').")

    @Argument(help: "The local file; '-' reads standard input (a pipe; then name the remote file).")
    var local: String

    @Argument(help: "Where it goes: a remote folder, or a remote file path (default: / with the same name).")
    var remote: String?

    @Option(help: "If the name is taken: fail, rename (name (1).ext) or replace (a new version).")
    var onConflict: PutConflict = .fail

    @OptionGroup var output: OutputOptions

    func run() async throws {
        if local == "-" { return try await fromStandardInput() }
        let source = URL(fileURLWithPath: local).standardizedFileURL
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: source.path, isDirectory: &isDirectory) else { throw CLIError("\(local): no such file.") }
        if isDirectory.boolValue { throw CLIError("\(local) is a folder; use 'nimbus sync \(local) /\(source.lastPathComponent)'.") }
        let engine = try await Home.current.signedInEngine()
        await refresh(engine)
        var folderPath = "/"
        var name = source.lastPathComponent
        if let remote {
            if let existing = try await engine.item(atPath: RemotePath.normalized(remote)), existing.isFolder {
                folderPath = RemotePath.normalized(remote)
            } else {
                folderPath = RemotePath.parent(remote)
                name = RemotePath.name(remote) ?? name
            }
        }
        let folder = try await RemotePath.folder(folderPath, in: engine)
        guard let size = FileHasher.regularFileSize(source.path) else { throw CLIError("\(local) is not a readable file.") }
        let targetPath = (folderPath == "/" ? "" : folderPath) + "/" + name
        var id: ItemID
        // The file is sent from where it is, not copied into the device's store first (a second durable write of
        // the whole file, and as much free space again): a file changed while it goes up is refused by the server's
        // checksum and read again, and a put interrupted by Ctrl-C or a crash goes on from the file when run again.
        // An encrypted store copies it anyway (sealed). The file is hashed here only when something is at the target
        // already (to tell a put interrupted earlier from a clash); otherwise the engine hashes it once.
        let existingItem = try await engine.item(atPath: targetPath)
        if let existing = existingItem, !existing.isFolder, try existing.checksum == FileHasher.sha256(of: source).checksum {
            // Already there, or already queued (a put interrupted earlier): finish what was started.
            id = existing.id
        } else {
            (id, name) = try await queue(source, copy: false, over: existingItem, name: name, in: folder, folderPath: folderPath, engine: engine)
        }
        try await send(id, name: name, size: size, targetPath: targetPath, engine: engine)
    }

    /// Queues `source` as `name` in `folder`; what is at that name already is refused, replaced or kept beside (the
    /// new one renamed) as `--on-conflict` says. The item and the name it got.
    func queue(
        _ source: URL, copy: Bool, over existing: SyncItem?, name: String, in folder: SyncItem, folderPath: String, engine: SyncEngine
    ) async throws -> (ItemID, String) {
        let targetPath = (folderPath == "/" ? "" : folderPath) + "/" + name
        do {
            guard let existing else { return (try await engine.upload(from: source, named: name, in: folder.id, copy: copy), name) }
            switch onConflict {
            case .fail:
                throw CLIError("\(targetPath) already exists; pass --on-conflict rename or --on-conflict replace.")
            case .replace:
                guard !existing.isFolder else { throw CLIError("\(targetPath) is a folder.") }
                try await engine.update(existing.id, from: source, copy: copy)
                return (existing.id, name)
            case .rename:
                var n = 1
                while try await engine.item(atPath: (folderPath == "/" ? "" : folderPath) + "/" + FileName.numbered(name, n)) != nil { n += 1 }
                let renamed = FileName.numbered(name, n)
                return (try await engine.upload(from: source, named: renamed, in: folder.id, copy: copy), renamed)
            }
        } catch let error as SyncError {
            throw CLIError(error.description)
        }
    }

    /// Sends what was queued, showing progress, and says where it went.
    func send(_ id: ItemID, name: String, size: Int64, targetPath: String, engine: SyncEngine) async throws {
        let progress = ProgressDisplay(options: output)
        await progress.watch(id, name: name, size: size)
        try await drain(engine, progress: progress)
        await progress.complete(id)
        let item = try await engine.item(id)
        if output.json, let item { return try Output.json(ItemJSON(item, path: try await engine.path(of: id) ?? targetPath)) }
        Output.line("Uploaded \(try await engine.path(of: id) ?? targetPath) (\(Output.size(size)))", options: output)
    }

    /// `nimbus put - /Folder/name.ext`: standard input (a pipe, or a file redirected with `<`) copied into the device's
    /// store as it comes (sealed in an encrypted store), then sent as any put; an interrupted one goes on with
    /// `nimbus uploads resume` (the input itself cannot be read again).
    func fromStandardInput() async throws {
        let input = URL(fileURLWithPath: "/dev/stdin")
        guard FileHasher.isStream(input.path) || FileHasher.regularFileSize(input.path) != nil else {
            throw CLIError("Standard input is not a pipe or a file: pipe the content in (… | nimbus put - /Folder/name.ext).")
        }
        guard let remote, RemotePath.name(remote) != nil, !remote.hasSuffix("/") else {
            throw CLIError("Reading standard input: name the remote file (nimbus put - /Folder/name.ext).")
        }
        let engine = try await Home.current.signedInEngine()
        await refresh(engine)
        let targetPath = RemotePath.normalized(remote)
        let existing = try await engine.item(atPath: targetPath)
        if let existing, existing.isFolder {
            throw CLIError("\(targetPath) is a folder: name the file to make in it (nimbus put - \(targetPath)/name.ext).")
        }
        let folderPath = RemotePath.parent(remote)
        let folder = try await RemotePath.folder(folderPath, in: engine)
        let (id, name) = try await queue(
            input, copy: true, over: existing, name: RemotePath.name(remote) ?? "", in: folder, folderPath: folderPath, engine: engine)
        try await send(id, name: name, size: try await engine.item(id)?.size ?? 0, targetPath: targetPath, engine: engine)
    }
}

struct Get: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Download a file (resumes with Range after an interruption).")

    @Argument(help: "The remote file.")
    var remote: String

    @Argument(help: "Where to save it: a file or a folder (default: the current folder); '-' writes it to standard output.")
    var local: String?

    @OptionGroup var output: OutputOptions

    func run() async throws {
        let engine = try await Home.current.signedInEngine()
        await refresh(engine)
        let item = try await RemotePath.item(remote, in: engine)
        guard !item.isFolder else { throw CLIError("\(RemotePath.normalized(remote)) is a folder; use 'nimbus sync'.") }
        if local == "-" { return try await toStandardOutput(item, engine) }
        var destination = URL(fileURLWithPath: local ?? ".").standardizedFileURL
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: destination.path, isDirectory: &isDirectory), isDirectory.boolValue {
            destination = destination.appending(path: item.name)
        }
        let progress = ProgressDisplay(options: output)
        let content = try await fetch(item, engine, progress) { try await engine.takeContent(of: item.id, into: destination.deletingLastPathComponent()) }
        let temporary = destination.deletingLastPathComponent().appending(path: ".nimbus-partial-\(UUID().uuidString)")
        do {
            // As a synced download is placed: moved (or copied, nothing left behind when that fails), the mode of the
            // file it replaces, the time of its last change there.
            try POSIXFileSystem().importFile(
                content, to: temporary.path, modeOf: destination.path, modified: POSIXFileSystem.keptModificationTime(item.modifiedAt, now: Date()))
        } catch let error as LocalWriteError {
            if error.outOfSpace {
                throw CLIError(
                    "Not enough space on the disk of \(destination.deletingLastPathComponent().path) for \(RemotePath.normalized(remote)) "
                        + "(\(Output.size(item.size))); nothing was written.")
            }
            throw CLIError("Could not write \(destination.path): \(error.code.map { String(cString: strerror($0)) } ?? "an error"); nothing was written.")
        }
        guard rename(temporary.path, destination.path) == 0 else {
            try? FileManager.default.removeItem(at: temporary)
            throw CLIError("Could not write \(destination.path).")
        }
        await progress.complete(item.id)
        Output.line("Downloaded \(RemotePath.normalized(remote)) → \(destination.path) (\(Output.size(item.size)))", options: output)
    }

    /// `nimbus get REMOTE -`: the content onto standard output (a pipe, a file), progress and errors on standard
    /// error. Read from the device's store as it is kept — an encrypted store's content is opened segment by segment,
    /// never written out in the clear — and checked against the file's checksum as it goes: a mismatch is an error
    /// (exit 1) after the bytes, as `curl` or `rclone cat` would have to.
    func toStandardOutput(_ item: SyncItem, _ engine: SyncEngine) async throws {
        let progress = ProgressDisplay(options: output)
        let reader = try await fetch(item, engine, progress) { try await engine.openContent(of: item.id) }
        await progress.complete(item.id)
        let written = Result { try copy(reader, expected: item.checksum) }
        reader.close()
        // No copy kept in NIMBUS_HOME (as `get FILE` leaves none), unless the file is pinned.
        _ = try? await engine.releaseContent(of: item.id)
        try written.get()
    }

    /// The item downloaded into the device's store (with progress), then taken from it by `take` — downloaded once
    /// more when `take` finds nothing: its upload was still under way (from a file not copied into the store), and
    /// is sent now.
    func fetch<T>(_ item: SyncItem, _ engine: SyncEngine, _ progress: ProgressDisplay, take: () async throws -> T?) async throws -> T {
        await progress.watch(item.id, name: item.name, size: item.size)
        for _ in 0..<2 {
            try await engine.download(item.id)
            try await drain(engine, progress: progress)
            if let taken = try await take() { return taken }
        }
        throw CLIError("\(RemotePath.normalized(remote)) could not be downloaded; try again.")
    }

    /// Copies the reader's bytes to standard output, hashing them; throws when they are not `expected`'s.
    func copy(_ reader: ContentReader, expected: String?) throws {
        var hasher = SHA256()
        var written: Int64 = 0
        while let piece = try reader.read(upToCount: 1 << 20), !piece.isEmpty {
            hasher.update(data: piece)
            try piece.withUnsafeBytes { bytes in
                guard let base = bytes.baseAddress else { return }
                var offset = 0
                while offset < bytes.count {
                    let count = Foundation.write(STDOUT_FILENO, base + offset, bytes.count - offset)
                    if count < 0, errno == EINTR { continue }
                    // The reader went away (`| head`): quietly, with the status a shell gives a tool SIGPIPE ended.
                    if count < 0, errno == EPIPE { throw ExitCode(141) }
                    guard count > 0 else {
                        throw CLIError("Could not write to standard output after \(Output.size(written + Int64(offset))): \(String(cString: strerror(errno))).")
                    }
                    offset += count
                }
            }
            written += Int64(piece.count)
        }
        let checksum = Hex.encode(hasher.finalize())
        if let expected, expected != checksum {
            throw CLIError("\(RemotePath.normalized(remote)): what was written (\(Output.size(written))) is not the file's content (checksum \(checksum), expected \(expected)); try again.")
        }
    }
}

struct Versions: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "List a file's revisions, newest first.")

    @Argument(help: "The remote file.")
    var path: String

    @OptionGroup var output: OutputOptions

    func run() async throws {
        let engine = try await Home.current.signedInEngine()
        await refresh(engine)
        let item = try await RemotePath.item(path, in: engine)
        let revisions = try await engine.revisions(of: item.id)
        if output.json { return try Output.json(revisions) }
        for (index, revision) in revisions.enumerated() {
            let marker = index == 0 ? "  (current)" : ""
            print("\(revision.revisionId)  \(Output.date(revision.modifiedAt))  \(Output.size(revision.size).padding(toLength: 10, withPad: " ", startingAt: 0)) \(revision.checksum.prefix(12))\(marker)")
        }
    }
}

struct Restore: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Make an older revision the current one (history keeps everything).")

    @Argument(help: "The remote file.")
    var path: String

    @Argument(help: "The revision id (see 'nimbus versions').")
    var revision: String

    @OptionGroup var output: OutputOptions

    func run() async throws {
        let engine = try await Home.current.signedInEngine()
        await refresh(engine)
        let item = try await RemotePath.item(path, in: engine)
        let known = try await engine.revisions(of: item.id)
        guard known.contains(where: { $0.revisionId == revision }) else {
            throw CLIError("\(RemotePath.normalized(path)) has no revision \(revision); see 'nimbus versions \(path)'.")
        }
        try await engine.restore(item.id, revision: revision)
        try await drain(engine)
        Output.line("Restored \(RemotePath.normalized(path)) to \(revision)", options: output)
    }
}

struct Trash: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List what is in the trash, or confirm deletions the server paused.",
        subcommands: [TrashList.self, TrashConfirm.self], defaultSubcommand: TrashList.self)
}

struct TrashList: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "list", abstract: "List what is in the trash (the default).")

    @OptionGroup var output: OutputOptions

    func run() async throws {
        let engine = try await Home.current.signedInEngine()
        let client = try await engine.server()
        let list = try await client.call(Routes.trash, query: ["limit": "1000"])
        let paused = try await client.call(Routes.pausedDeletions)
        if output.json { return try Output.json(list.files) }
        for pause in paused.paused {
            Output.error("Note: " + TrashConfirm.describe(pause) + "; 'nimbus trash confirm' lets it go on.")
        }
        if list.files.isEmpty { Output.line("The trash is empty.", options: output) }
        for file in list.files {
            print("\(file.id)  \(Output.date(file.modifiedAt))  \(file.isFolder ? "-" : Output.size(file.size))  \(file.name)\(file.isFolder ? "/" : "")")
        }
    }
}

/// The server's mass-deletion breaker paused a device (409 `mass_deletion_paused`): the user says it was meant.
struct TrashConfirm: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "confirm",
        abstract: "Let devices whose deletions the server paused (too many in a short time) go on deleting.",
        discussion: "Shows what was paused first. To undo deletions instead, use 'nimbus untrash --since TIME'.")

    @OptionGroup var output: OutputOptions

    func run() async throws {
        let engine = try await Home.current.signedInEngine()
        let lifted = try await engine.server().call(Routes.confirmDeletions)
        if output.json { return try Output.json(lifted.paused) }
        if lifted.paused.isEmpty { Output.line("No device's deletions are paused.", options: output) }
        for pause in lifted.paused {
            Output.line("Confirmed: " + Self.describe(pause) + "; its deletions go on.", options: output)
        }
    }

    static func describe(_ pause: DeletionPause) -> String {
        "\(pause.deviceName.map { "'\($0)'" } ?? pause.deviceId) deleted \(pause.deletions) items within the hour before \(Output.date(pause.pausedAt)) and was paused"
    }
}

struct Untrash: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Restore an item from the trash (by its name, path or id), or everything trashed since a time.")

    @Argument(help: "The trashed item: its former path (/Work/old.txt), its name, or its id from 'nimbus trash'.")
    var path: String?

    @Option(help: "Restore everything trashed at or after this time: 2026-11-24T10:00:00Z, 2026-11-24 10:00 (local), 2026-11-24, or how long ago (90m, 2h, 3d).")
    var since: String?

    @OptionGroup var output: OutputOptions

    func validate() throws {
        guard (path == nil) != (since == nil) else { throw ValidationError("Give either an item to restore or --since TIME, not both.") }
        if let since, Self.time(since, now: Date()) == nil {
            throw ValidationError("'\(since)' is not a time: try 2026-11-24T10:00:00Z, '2026-11-24 10:00', 2026-11-24 or 2h (ago).")
        }
    }

    func run() async throws {
        let engine = try await Home.current.signedInEngine()
        let client = try await engine.server()
        if let since, let time = Self.time(since, now: Date()) {
            let result = try await client.call(Routes.restoreTrash, body: RestoreTrashRequest(since: time))
            try await engine.pull()
            if output.json { return try Output.json(result) }
            Output.line(
                result.restored == 0
                    ? "Nothing was trashed since \(Output.date(time))."
                    : "Restored \(result.restored) trashed item\(result.restored == 1 ? "" : "s") (\(result.items) in all) trashed since \(Output.date(time)).",
                options: output)
            return
        }
        guard let path else { return }
        let list = try await client.call(Routes.trash, query: ["limit": "1000"])
        let name = RemotePath.name(path) ?? path
        let matches = list.files.filter { $0.id == path || $0.name == name }
        guard !matches.isEmpty else { throw CLIError("Nothing called \(path) is in the trash; see 'nimbus trash'.") }
        guard matches.count == 1 else {
            throw CLIError("Several trashed items are called \(name): \(matches.map(\.id).joined(separator: ", ")); pass the id.")
        }
        let restored = try await client.call(Routes.untrash, matches[0].id)
        try await engine.pull()
        Output.line("Restored \(restored.name)", options: output)
    }

    /// A time as a user types it: ISO 8601 (with or without seconds or zone; no zone = local), a date (local
    /// midnight), or a duration ago (`90m`, `2h`, `3d`, `1w`).
    static func time(_ text: String, now: Date) -> Date? {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        if let unit = trimmed.last, let amount = Double(trimmed.dropLast()), amount >= 0 {
            let seconds: Double? = switch unit {
            case "s": 1
            case "m": 60
            case "h": 3600
            case "d": 86400
            case "w": 7 * 86400
            default: nil
            }
            if let seconds { return now.addingTimeInterval(-amount * seconds) }
        }
        let iso = ISO8601DateFormatter()
        for options: ISO8601DateFormatter.Options in [[.withInternetDateTime, .withFractionalSeconds], [.withInternetDateTime]] {
            iso.formatOptions = options
            if let date = iso.date(from: trimmed) { return date }
        }
        let local = DateFormatter()
        local.locale = Locale(identifier: "en_US_POSIX")
        local.timeZone = .current
        for format in ["yyyy-MM-dd'T'HH:mm:ss", "yyyy-MM-dd HH:mm:ss", "yyyy-MM-dd'T'HH:mm", "yyyy-MM-dd HH:mm", "yyyy-MM-dd"] {
            local.dateFormat = format
            if let date = local.date(from: trimmed) { return date }
        }
        return nil
    }
}
