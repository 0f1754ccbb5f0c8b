import Crypto
import Foundation
import NIOConcurrencyHelpers
@testable import NimbusSync

/// An in-memory disk for deterministic simulations of folder sync: files with inodes, sizes and modification
/// times from the simulation's clock. Before every operation the engine makes, `interference` may change the
/// disk (a user saving a file at that very moment: between the engine's look and its action).
final class SimulatedFileSystem: FileSystem, @unchecked Sendable {
    enum Node: Equatable {
        case folder(inode: UInt64, mtime: Int64)
        case file(inode: UInt64, data: Data, mtime: Int64)
    }

    struct State {
        var nodes: [String: Node] = [:]
        var nextInode: UInt64 = 100
        /// Every write gets a later modification time than the one before (a disk clock finer than the writes).
        var lastMtime: Int64 = 0
        /// Folders the engine may not read (`chmod 000`): not listed, nothing in them reached.
        var unreadable: Set<String> = []

        /// Whether `path` lies inside an unreadable folder.
        func blocked(_ path: String) -> Bool { unreadable.contains { path.hasPrefix($0 + "/") } }

        mutating func mtime(_ now: Int64) -> Int64 {
            lastMtime = max(now, lastMtime + 1)
            return lastMtime
        }
    }

    let clock: ManualClock
    private let state = NIOLockedValueBox(State())
    /// Called (outside the lock) before each operation with its name and path; may change the disk.
    let interference = NIOLockedValueBox<(@Sendable (String, String) -> Void)?>(nil)
    /// When set, the next operation throws (a crash in the middle of a round).
    let crashNext = NIOLockedValueBox(false)
    let scratch: URL

    struct Crash: Error {}

    init(root: String, clock: ManualClock, scratch: URL) {
        self.clock = clock
        self.scratch = scratch
        state.withLockedValue { $0.nodes[root] = .folder(inode: 1, mtime: 0) }
    }

    var nowNanos: Int64 { Int64((clock.now().timeIntervalSince1970 * 1e9).rounded()) }

    func touch(_ operation: String, _ path: String) throws {
        if crashNext.withLockedValue({ value in defer { value = false }; return value }) { throw Crash() }
        interference.withLockedValue { $0 }?(operation, path)
        if state.withLockedValue({ $0.blocked(path) }) { throw CocoaError(.fileWriteNoPermission) }
    }

    /// A user's `chmod 000` of a folder (`false`: readable again).
    func setUnreadable(_ path: String, _ unreadable: Bool) {
        state.withLockedValue { state in
            if unreadable { state.unreadable.insert(path) } else { state.unreadable.remove(path) }
        }
    }

    var unreadableFolders: Set<String> { state.withLockedValue { $0.unreadable } }

    func parent(_ path: String) -> String { (path as NSString).deletingLastPathComponent }

    // MARK: What users (the simulation) do

    /// Writes a file (creating it, or replacing its content in place: same inode).
    func write(_ path: String, _ data: Data) {
        state.withLockedValue { state in
            guard case .folder = state.nodes[parent(path)] else { return }
            switch state.nodes[path] {
            case .file(let inode, _, _): state.nodes[path] = .file(inode: inode, data: data, mtime: state.mtime(nowNanos))
            case .folder: return
            case nil:
                state.nextInode += 1
                state.nodes[path] = .file(inode: state.nextInode, data: data, mtime: state.mtime(nowNanos))
            }
        }
    }

    func makeFolderDirectly(_ path: String) {
        state.withLockedValue { state in
            guard case .folder = state.nodes[parent(path)], state.nodes[path] == nil else { return }
            state.nextInode += 1
            state.nodes[path] = .folder(inode: state.nextInode, mtime: state.mtime(nowNanos))
        }
    }

    /// Deletes a file or a whole folder; what it held, for the simulation's bookkeeping.
    @discardableResult
    func deleteTree(_ path: String) -> [Data] {
        state.withLockedValue { state in
            var removed: [Data] = []
            state.unreadable = state.unreadable.filter { $0 != path && !$0.hasPrefix(path + "/") }
            for key in state.nodes.keys where key == path || key.hasPrefix(path + "/") {
                if case .file(_, let data, _) = state.nodes[key] { removed.append(data) }
                state.nodes[key] = nil
            }
            return removed
        }
    }

    /// Moves a file or folder (a user's rename); false if the target is taken or would be inside itself.
    func moveTree(_ from: String, to: String) -> Bool {
        state.withLockedValue { state in
            guard state.nodes[from] != nil, state.nodes[to] == nil, case .folder = state.nodes[parent(to)], !(to + "/").hasPrefix(from + "/") else {
                return false
            }
            state.unreadable = Set(state.unreadable.map { $0 == from || $0.hasPrefix(from + "/") ? to + $0.dropFirst(from.count) : $0 })
            for key in state.nodes.keys.sorted() where key == from || key.hasPrefix(from + "/") {
                state.nodes[to + key.dropFirst(from.count)] = state.nodes[key]
                state.nodes[key] = nil
            }
            return true
        }
    }

    func node(_ path: String) -> Node? { state.withLockedValue { $0.nodes[path] } }

    /// Every file under `root`: relative path → content.
    func files(under root: String) -> [String: Data] {
        state.withLockedValue { state in
            var result: [String: Data] = [:]
            for (key, node) in state.nodes where key.hasPrefix(root + "/") {
                if case .file(_, let data, _) = node { result[String(key.dropFirst(root.count + 1))] = data }
            }
            return result
        }
    }

    /// Every folder under `root` (relative paths).
    func folders(under root: String) -> Set<String> {
        state.withLockedValue { state in
            Set(state.nodes.compactMap { key, node in
                guard key.hasPrefix(root + "/"), case .folder = node else { return nil }
                return String(key.dropFirst(root.count + 1))
            })
        }
    }

    // MARK: FileSystem

    func stat(_ path: String) -> FileStat? {
        try? touch("stat", path)
        return state.withLockedValue { state -> FileStat? in
            if state.blocked(path) { return nil }  // EACCES: not seen
            switch state.nodes[path] {
            case .folder(let inode, let mtime): return FileStat(kind: .folder, inode: inode, size: 0, mtime: mtime)
            case .file(let inode, let data, let mtime): return FileStat(kind: .file, inode: inode, size: Int64(data.count), mtime: mtime)
            case nil: return nil
            }
        }
    }

    func contents(ofFolder path: String) throws -> [String] {
        try touch("list", path)
        return try state.withLockedValue { state in
            if state.unreadable.contains(path) { throw CocoaError(.fileReadNoPermission) }
            guard case .folder = state.nodes[path] else { throw CocoaError(.fileReadNoSuchFile) }
            return state.nodes.keys.filter { parent($0) == path && $0 != path }.map { ($0 as NSString).lastPathComponent }
        }
    }

    func hash(_ path: String) throws -> (checksum: String, size: Int64) {
        try touch("hash", path)
        return try state.withLockedValue { state in
            guard case .file(_, let data, _) = state.nodes[path] else { throw CocoaError(.fileReadNoSuchFile) }
            return (SHA256.hash(data: data).map { String(format: "%02x", $0) }.joined(), Int64(data.count))
        }
    }

    func read(_ path: String) -> Data? {
        state.withLockedValue { state in
            if case .file(_, let data, _) = state.nodes[path] { return data }
            return nil
        }
    }

    func makeFolder(_ path: String) throws -> Bool {
        try touch("mkdir", path)
        return try state.withLockedValue { state in
            guard case .folder = state.nodes[parent(path)] else { throw CocoaError(.fileNoSuchFile) }
            guard state.nodes[path] == nil else { return false }
            state.nextInode += 1
            state.nodes[path] = .folder(inode: state.nextInode, mtime: nowNanos)
            return true
        }
    }

    func removeFile(_ path: String) throws {
        try touch("unlink", path)
        state.withLockedValue { state in
            if case .file = state.nodes[path] { state.nodes[path] = nil }
        }
    }

    func removeFolder(_ path: String) throws {
        try touch("rmdir", path)
        try state.withLockedValue { state in
            guard case .folder = state.nodes[path] else { return }
            guard !state.nodes.keys.contains(where: { $0.hasPrefix(path + "/") }) else { throw CocoaError(.fileWriteNoPermission) }
            state.nodes[path] = nil
        }
    }

    func renameNoReplace(_ from: String, to: String) throws -> Bool {
        try touch("rename", from)
        try touch("rename", to)
        return try state.withLockedValue { state in
            guard state.nodes[from] != nil else { throw CocoaError(.fileNoSuchFile) }
            guard state.nodes[to] == nil else { return false }
            guard case .folder = state.nodes[parent(to)] else { throw CocoaError(.fileNoSuchFile) }
            state.unreadable = Set(state.unreadable.map { $0 == from || $0.hasPrefix(from + "/") ? to + $0.dropFirst(from.count) : $0 })
            for key in state.nodes.keys.sorted() where key == from || key.hasPrefix(from + "/") {
                state.nodes[to + key.dropFirst(from.count)] = state.nodes[key]
                state.nodes[key] = nil
            }
            return true
        }
    }

    func rename(_ from: String, to: String) throws {
        try touch("replace", from)
        try touch("replace", to)
        try state.withLockedValue { state in
            guard case .file = state.nodes[from] else { throw CocoaError(.fileNoSuchFile) }
            if case .folder = state.nodes[to] { throw CocoaError(.fileWriteFileExists) }
            state.nodes[to] = state.nodes[from]
            state.nodes[from] = nil
        }
    }

    func importFile(_ source: URL, to path: String, modeOf existing: String?, modified: Date?) throws {
        try touch("import", path)
        let data = try Data(contentsOf: source)
        try? FileManager.default.removeItem(at: source)
        try state.withLockedValue { state in
            guard case .folder = state.nodes[parent(path)] else { throw CocoaError(.fileNoSuchFile) }
            state.nextInode += 1
            let mtime = modified.map { Int64($0.timeIntervalSince1970 * 1e9) } ?? state.mtime(nowNanos)
            state.nodes[path] = .file(inode: state.nextInode, data: data, mtime: mtime)
        }
    }

    func exportFile(_ path: String) throws -> URL {
        try touch("export", path)
        guard let data = read(path) else { throw CocoaError(.fileReadNoSuchFile) }
        let url = scratch.appending(path: "export-\(UUID().uuidString)")
        try data.write(to: url)
        return url
    }

    func now() -> Date { clock.now() }
}
