import Crypto
import Foundation
import NIOConcurrencyHelpers
import NimbusAPI
@testable import NimbusSync
import NimbusSyncTestSupport
import Testing

/// The deterministic simulation with the disk inside it: three devices sync folders on simulated disks with the
/// real server (in-process) through a transport that fails at random, while users write, rename, move and delete
/// files — between rounds and *during* them, at any moment the engine touches the disk (between its look at a
/// file and its action on it) — and devices crash mid-round. After the dust settles:
/// - every device's folder is exactly the server's tree;
/// - every content a user wrote is somewhere (on a disk, or on the server as a head, a revision or in the trash),
///   unless that user overwrote or deleted it;
/// - retries made no duplicates.
///
/// `NIMBUS_SIM_SEEDS=n` runs seeds 1...n (default 200); `NIMBUS_SIM_SEED=s` replays one exactly (``Replay``).
@Suite("Deterministic simulation of synced folders")
struct FolderSimulationTests {
    @Test("a folder the engine cannot read (chmod 000) is left as it was: nothing in it is deleted there or on other devices; readable again, it syncs")
    func unreadableFolder() async throws {
        try await SyncWorld.run { world in
            let simulation = try await FolderSimulation.scripted(seed: 4_000_001, world: world)
            let (a, b) = (simulation.devices[0], simulation.devices[1])
            let round = FolderSimulation.scriptedRound
            a.disk.makeFolderDirectly(a.root + "/docs")
            a.disk.write(a.root + "/docs/plan.txt", Data("the plan".utf8))
            a.disk.makeFolderDirectly(a.root + "/docs/inner")
            a.disk.write(a.root + "/docs/inner/deep.txt", Data("deep".utf8))
            _ = try await round(a)
            _ = try await round(b)
            #expect(b.disk.files(under: b.root).keys.sorted() == ["docs/inner/deep.txt", "docs/plan.txt"])

            a.disk.setUnreadable(a.root + "/docs", true)
            let blocked = try await round(a)
            #expect(blocked.deletedHere.isEmpty, "\(blocked.deletedHere)")
            #expect(blocked.skipped.contains { $0.hasPrefix("docs/ (cannot be read") }, "\(blocked.skipped)")
            _ = try await round(b)
            #expect(b.disk.files(under: b.root).keys.sorted() == ["docs/inner/deep.txt", "docs/plan.txt"], "nothing deleted on the other device")
            let c = simulation.devices[2]
            _ = try await round(c)
            #expect(c.disk.files(under: c.root).keys.sorted() == ["docs/inner/deep.txt", "docs/plan.txt"], "still there: a new device gets it")

            a.disk.setUnreadable(a.root + "/docs", false)
            a.disk.write(a.root + "/docs/later.txt", Data("later".utf8))
            let readable = try await round(a)
            #expect(readable.uploaded == ["docs/later.txt"] && readable.deletedHere.isEmpty, "\(readable)")
            _ = try await round(b)
            #expect(b.disk.files(under: b.root).keys.sorted() == ["docs/inner/deep.txt", "docs/later.txt", "docs/plan.txt"])
        }
    }

    @Test("a listed remote whose folder versions are digests: a folder made here and deleted on another device goes here too, though its parent's version is back to what was listed")
    func digestVersionsComeBack() async throws {
        try await SyncWorld.run { world in
            // Seeds ≡ 7 (mod 8), below 16 (mod 32): listed, folder versions a digest of what is beneath, no fills.
            let simulation = try await FolderSimulation.scripted(seed: 4_000_007, world: world)
            let (a, b) = (simulation.devices[0], simulation.devices[1])
            let round = FolderSimulation.scriptedRound
            _ = try await round(a)  // the empty root listed: its version recorded
            a.disk.makeFolderDirectly(a.root + "/docs")
            #expect(try await round(a).createdFolders == ["docs"])
            _ = try await round(b)
            #expect(b.disk.folders(under: b.root) == ["docs"])
            _ = b.disk.deleteTree(b.root + "/docs")
            #expect(try await round(b).deletedHere == ["docs"])
            // The root there is empty again: the digest it had when a listed it.
            let after = try await round(a)
            #expect(a.disk.folders(under: a.root).isEmpty, "\(after)")
        }
    }

    @Test("an item's residency through the API: here, cloud-only under a freed folder, pinned, excluded while it holds what is unsent; metadata-only waits")
    func residencyAPI() async throws {
        try await SyncWorld.run { world in
            let simulation = try await FolderSimulation.scripted(seed: 4_000_011, world: world)
            let (a, b) = (simulation.devices[0], simulation.devices[1])
            let round = FolderSimulation.scriptedRound
            a.disk.makeFolderDirectly(a.root + "/docs")
            a.disk.write(a.root + "/docs/plan.txt", Data("the plan".utf8))
            a.disk.write(a.root + "/docs/keep.txt", Data("kept".utf8))
            _ = try await round(a)
            #expect(try await a.folder.residency(at: "docs/plan.txt").state == .here)

            _ = try await a.folder.setResidency(.free, at: "docs")
            _ = try await a.folder.setResidency(.pin, at: "docs/keep.txt")
            let freed = try await round(a)
            #expect(freed.uploaded.isEmpty && freed.downloaded.isEmpty, "freeing moves no bytes: \(freed)")
            let plan = try await a.folder.residency(at: "docs/plan.txt.nimbus")
            #expect(plan == ItemResidency(path: "docs/plan.txt", isFolder: false, state: .cloudOnly, pin: .inherited, folderPin: .cloudOnly))
            #expect(try await a.folder.residency(at: a.root + "/docs/keep.txt") == ItemResidency(path: "docs/keep.txt", isFolder: false, state: .here, pin: .pinned, folderPin: .cloudOnly))

            // Metered, metadata only: a new file waits; a folder goes.
            await a.folder.setNetworkPolicy(NetworkPolicy(onMetered: .metadataOnly, pauseOnLowBattery: false), constraints: a.network)
            a.network.metered.withLockedValue { $0 = true }
            a.disk.makeFolderDirectly(a.root + "/photos")
            a.disk.write(a.root + "/photos/one.jpg", Data("jpeg".utf8))
            let metered = try await round(a)
            #expect(metered.createdFolders == ["photos"] && metered.uploaded.isEmpty && metered.waitingForNetwork == 1, "\(metered)")
            #expect(try await a.folder.residencySummary().waitingForNetwork == 1)

            // Excluded with the unsent file: it stays, said as excluded, until the network lets it go; then it leaves.
            var selection = SyncSelection()
            selection.exclude("photos")
            try await a.folder.setSelection(selection)
            _ = try await round(a)
            #expect(try await a.folder.residency(at: "photos/one.jpg").state == .excluded)
            #expect(try await a.folder.residencySummary().excludedKept == 2)
            a.network.metered.withLockedValue { $0 = false }
            let sent = try await round(a)
            #expect(sent.uploaded == ["photos/one.jpg"], "\(sent)")
            _ = try await round(a)
            #expect(a.disk.files(under: a.root).keys.sorted() == ["docs/keep.txt", "docs/plan.txt.nimbus"])
            _ = try await round(b)
            #expect(b.disk.files(under: b.root).keys.sorted() == ["docs/keep.txt", "docs/plan.txt", "photos/one.jpg"], "nothing deleted there")
        }
    }

    @Test("the remote's folder deleted there (a web UI) pauses the pair; made again empty, the pair is linked anew: nothing here is deleted, everything is sent again")
    func remoteRootMadeAgain() async throws {
        try await SyncWorld.run { world in
            // Seed ≡ 6 mod 16: ids are paths and no checksums are shown (as WebDAV).
            let simulation = try await FolderSimulation.scripted(seed: 4_000_006, world: world)
            let (a, b) = (simulation.devices[0], simulation.devices[1])
            let round = FolderSimulation.scriptedRound
            a.disk.makeFolderDirectly(a.root + "/docs")
            a.disk.write(a.root + "/docs/plan.txt", Data("the plan".utf8))
            a.disk.write(a.root + "/top.txt", Data("top".utf8))
            _ = try await round(a)
            _ = try await round(b)
            #expect(b.disk.files(under: b.root).keys.sorted() == ["docs/plan.txt", "top.txt"])

            // Deleted there, from a web UI: the remote's folder is gone (and with it everything in it).
            let web = NimbusProvider(client: a.client, state: NimbusProvider.NoState())
            for child in try await web.children(of: try await web.root().id) { try await web.delete(child.id) }
            simulation.rootGate.gone.withLockedValue { $0 = true }
            await #expect(throws: SyncError.self) { _ = try await round(a) }
            #expect(a.disk.files(under: a.root).keys.sorted() == ["docs/plan.txt", "top.txt"], "paused, nothing deleted here")

            // Made again, empty (as the pause asks); a file saved meanwhile.
            simulation.rootGate.gone.withLockedValue { $0 = false }
            a.disk.write(a.root + "/new.txt", Data("new".utf8))
            let back = try await round(a)
            #expect(back.deletedHere.isEmpty && back.deletedThere.isEmpty, "\(back)")
            #expect(a.disk.files(under: a.root).keys.sorted() == ["docs/plan.txt", "new.txt", "top.txt"])
            #expect(Set(back.uploaded) == ["docs/plan.txt", "new.txt", "top.txt"], "\(back.uploaded)")
            #expect(try await round(a).changed == 0, "in sync after it")
            // The other device never saw it gone: what is there is what it has, plus the new file.
            _ = try await round(b)
            #expect(b.disk.files(under: b.root).keys.sorted() == ["docs/plan.txt", "new.txt", "top.txt"])
            #expect(b.disk.files(under: b.root)["docs/plan.txt"] == Data("the plan".utf8))
        }
    }

    @Test("users editing folders on three devices, mid-round edits, faults and crashes: converge, nothing written is lost, no duplicates")
    func simulate() async throws {
        let answered = LockedCounter(start: 0)
        try await SyncWorld.run { world in
            try await SimulationTests.runSeeds { seed in
                var simulation = FolderSimulation(seed: seed, world: world, answered: answered)
                try await simulation.run()
            }
        }
        if SimulationTests.seeds.filter({ $0 % 5 == 1 }).count >= 20 {
            let count = answered.next() - 1
            #expect(count > 0, "the seeds that ask answered no conflict: the answers went untried")
        }
    }
}

/// One device: a synced folder on a simulated disk.
struct FolderDevice {
    var folder: FolderSync
    let disk: SimulatedFileSystem
    let faults: FaultyTransport
    let client: ServerClient
    let tokens: MemoryTokenStore
    let clock: ManualClock
    let root: String
    let state: URL
    /// Whether its network is metered now (the simulation turns it on and off).
    let network = SimulatedNetwork()
}

/// A device's network as the simulation sets it.
final class SimulatedNetwork: NetworkConstraintsProvider {
    let metered = NIOLockedValueBox(false)
    func current() async -> NetworkConstraints { NetworkConstraints(isMetered: metered.withLockedValue { $0 }, source: "simulation") }
}

struct FolderSimulation {
    let seed: UInt64
    let world: SyncWorld
    var random: SplitMix
    var devices: [FolderDevice] = []
    var counter = 0
    var log: [String] = []
    /// What a replay of this seed repeats (``Replay``), once it has run.
    var fingerprint = ""
    let ledger = ContentLedger()
    /// The user's change-feed position before anything happened: the final check reads the whole feed from it.
    var firstCursor = ""
    /// While `gone`, the listed remotes' root is not there (`remote_root_missing`: deleted from a web UI).
    let rootGate = RootGate()
    /// Conflicts the simulated users answered (every seed of a run counts into one).
    let answered: LockedCounter

    init(seed: UInt64, world: SyncWorld, answered: LockedCounter = LockedCounter(start: 0)) {
        self.seed = seed
        self.world = world
        self.answered = answered
        random = SplitMix(seed: seed &* 0x5851_F42D_4C95_7F2D &+ 11)
    }

    var user: String { "folders\(seed)" }
    /// The data key of seeds synced through an encrypted remote (≡ 5 mod 8); nil for the others.
    var encrypted: Bool { seed % 8 == 5 }
    var cryptKey: SymmetricKey { SymmetricKey(data: SHA256.hash(data: Data("simulation \(seed)".utf8))) }
    /// Seeds ≡ 0 (mod 5) let the last writer win; ≡ 1 ask the user, who answers each way in turn (by seed and
    /// device); the others keep both.
    var strategy: ConflictStrategy { seed % 5 == 0 ? .lastWriterWins : seed % 5 == 1 ? .ask : .keepBoth }
    /// Seeds whose listed remote makes a new folder with its small new files (``ListedProvider``'s `fills`).
    var fills: Bool { (seed % 4 == 3 || seed % 8 == 6) && seed % 32 >= 16 }
    /// The fewest files such a fill takes (WebDAV's is 5): 3 in half of those seeds, so folders with fewer new files go
    /// the usual way there.
    var fillMinimum: Int { seed % 64 >= 48 ? 3 : 1 }
    /// Seeds ≡ 2 or 5 (mod 8) keep each device's sync state encrypted at rest (with 5, through the
    /// encrypted remote too): partial downloads sealed, then opened into the folder; names sealed in the database.
    var storeEncrypted: Bool { seed % 8 == 2 || seed % 8 == 5 }
    /// What the seed's devices do on a metered network (the simulation makes it metered now and then).
    var meteredPolicy: MeteredPolicy { [MeteredPolicy.metadataOnly, .pause, .allow][Int(seed % 3)] }

    /// Set up for a test that plays its steps itself: three devices with empty folders, no faults.
    static func scripted(seed: UInt64, world: SyncWorld) async throws -> FolderSimulation {
        var simulation = FolderSimulation(seed: seed, world: world)
        try await simulation.setUp()
        for device in simulation.devices { device.faults.randomFaults(rate: 0, seed: 0) }
        return simulation
    }

    /// A round of a scripted test, a minute after the last (files written before it have settled).
    static func scriptedRound(_ device: FolderDevice) async throws -> FolderSyncReport {
        device.clock.advance(by: 60)
        return try await device.folder.syncOnce()
    }

    mutating func run() async throws {
        try await setUp()
        for _ in 0..<40 { try await step() }
        try await quiesce()
        try await check()
        fingerprint = Replay.fingerprint(seed: seed, kind: "folder", log: log, faults: devices.map(\.faults))
    }

    /// The user and three devices, each with an empty folder.
    mutating func setUp() async throws {
        try await world.register(user)
        let start: ChangeCursor = try await world.api(user).call("GET", "/v1/changes/start")
        firstCursor = start.cursor
        let base = world.root.appending(path: "folders-\(seed)")
        for index in 0..<3 {
            let clock = ManualClock()
            let scratch = base.appending(path: "scratch-\(index)")
            try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
            let root = "/sim/device\(index)"
            let disk = SimulatedFileSystem(root: root, clock: clock, scratch: scratch)
            let faults = FaultyTransport(inner: AsyncHTTPClientTransport(baseURL: world.server))
            let tokens = MemoryTokenStore()
            let client = ServerClient(transport: faults, tokenStore: tokens)
            _ = try await client.logIn(server: world.server, username: user, password: "correct horse", deviceName: "D\(index)")
            faults.randomFaults(rate: 0.12, seed: seed &* 31 &+ UInt64(index))
            let state = base.appending(path: "state-\(index)")
            devices.append(
                FolderDevice(
                    folder: try makeFolder(index: index, disk: disk, client: client, tokens: tokens, clock: clock, state: state), disk: disk,
                    faults: faults, client: client, tokens: tokens, clock: clock, root: root, state: state))
        }
    }

    func makeFolder(index: Int, disk: SimulatedFileSystem, client: ServerClient, tokens: MemoryTokenStore, clock: ManualClock, state: URL) throws -> FolderSync {
        var configuration = SyncConfiguration(directory: state, deviceName: "D\(index)")
        configuration.conflictStrategy = strategy
        configuration.clock = clock
        configuration.backoffBase = .milliseconds(1)
        configuration.backoffCap = .milliseconds(5)
        configuration.randomSeed = seed &* 7 &+ UInt64(index) &+ UInt64(counter)
        configuration.maxConcurrentOperations = Simulation.width(seed)
        configuration.interleavingSeed = seed
        configuration.tokenStore = tokens
        if storeEncrypted {
            configuration.encryption = .keyStore(FileKeyStore(url: state.deletingLastPathComponent().appending(path: "key-\(index)")))
        }
        // Half of the listed remotes' seeds make a new folder with its small new files (as WebDAV does on rclone).
        let fills = self.fills
        let fillMinimum = self.fillMinimum
        if seed % 4 == 3 {
            // Half of them with folder revisions that change with anything beneath (as WebDAV collection ETags on
            // Nextcloud or Nimbus): listings skip unchanged subtrees.
            let treeVersions = seed % 8 == 7
            configuration.provider = { state in
                ListedProvider(
                    inner: NimbusProvider(client: client, state: state), treeVersions: treeVersions, unhashed: true, fills: fills,
                    fillMinimum: fillMinimum, violation: { Issue.record(Comment(rawValue: $0)) })
            }
        } else if seed % 8 == 6 {
            // Ids are paths (WebDAV, S3, local folders): a move there renames everything beneath; checksums shown on
            // half of them (S3 and local folders keep them, WebDAV does not).
            let checksums = seed % 16 == 14
            let gate = rootGate
            configuration.provider = { state in
                ListedProvider(
                    inner: NimbusProvider(client: client, state: state), pathIds: true, checksums: checksums, unhashed: !checksums, fills: fills,
                    fillMinimum: fillMinimum, rootGate: gate, violation: { Issue.record(Comment(rawValue: $0)) })
            }
        } else if seed % 8 == 5 {
            // Through an encrypted remote: names and contents sealed before they reach the server, which
            // takes the sealed files by blocks (the same low thresholds as below). The final check opens them.
            let key = cryptKey
            let scratch = state.appending(path: "crypt-scratch")
            configuration.provider = { state in
                CryptProvider.make(
                    over: NimbusProvider(client: client, state: state, simpleUploadLimit: 100_000, deltaMinimum: 60_000), dataKey: key, state: state,
                    scratch: scratch)
            }
        } else if seed % 4 == 1 {
            // Thresholds low enough for these small files: new files over 100 KB go as blocks, new versions and
            // downloads over 60 KB by blocks too, taking what the device's other files hold (the block index).
            configuration.provider = { state in NimbusProvider(client: client, state: state, simpleUploadLimit: 100_000, deltaMinimum: 60_000) }
        } else {
            configuration.provider = { state in NimbusProvider(client: client, state: state) }
        }
        return try FolderSync(root: URL(fileURLWithPath: "/sim/device\(index)"), configuration: configuration, settleTime: 1, fileSystem: disk)
    }

    /// A fresh content (or, now and then, one this path had before: an undo).
    mutating func content(for path: String? = nil, current: Data? = nil) -> Data {
        counter += 1
        if let path, random.below(5) == 0, let earlier = ledger.earlier(path) { return earlier }
        if seed % 4 == 1 {
            // Block transfers: big files, edited in place (some bytes inserted, replaced or cut) so that versions
            // share most of their chunks, and now and then a copy of another file's content with an edit.
            if var edited = current ?? (random.below(4) == 0 ? ledger.anyBig() : nil), edited.count > 1000 {
                let at = random.below(edited.count)
                switch random.below(3) {
                case 0: edited.insert(contentsOf: randomBytes(1 + random.below(20_000), seed: random.next()), at: at)
                case 1: edited.replaceSubrange(at..<min(edited.count, at + 1 + random.below(100)), with: randomBytes(1 + random.below(100), seed: random.next()))
                default: edited.removeSubrange(at..<min(edited.count, at + 1 + random.below(30_000)))
                }
                return edited
            }
            if random.below(2) == 0 { return randomBytes(70_000 + random.below(300_000), seed: random.next()) }
        }
        var size = random.below(6) == 0 ? 70_000 + random.below(300_000) : 20 + random.below(400)
        // Against the listed provider, contents of one size: a file there can only be told from one here by reading it.
        if seed % 4 == 3 { size = 64 }
        return randomBytes(size, seed: random.next())
    }

    /// Files and folders on a device's disk, relative paths (not the engine's own temporary files, which a dead
    /// process may have left: no user opens a `.nimbus-partial-*`).
    func entries(_ device: FolderDevice) -> (files: [String], folders: [String]) {
        (device.disk.files(under: device.root).keys.filter { !$0.contains(".nimbus-partial") }.sorted(), device.disk.folders(under: device.root).sorted())
    }

    mutating func step() async throws {
        let index = random.below(devices.count)
        let device = devices[index]
        let roll = random.below(100)
        switch roll {
        case 0..<30:
            try await round(index)
        case 30..<38:
            // The same file saved on two devices before either syncs it: a conflict for the later one (settled by the
            // seed's strategy: a conflict copy, the last writer, or the user's answer).
            let other = (index + 1 + random.below(devices.count - 1)) % devices.count
            var shared = Set(entries(device).files).intersection(entries(devices[other]).files).sorted()
            if shared.isEmpty {
                // Nothing on both yet: a while later (what was written has settled), both sync first (the other twice:
                // its first round may have sent what it had).
                devices[index].clock.advance(by: 2)
                devices[other].clock.advance(by: 2)
                try await round(other)
                try await round(index)
                try await round(other)
                shared = Set(entries(devices[index]).files).intersection(entries(devices[other]).files).sorted()
                guard !shared.isEmpty else { break }
            }
            let path = shared[random.below(shared.count)]
            for who in [index, other] {
                var current: Data?
                if case .file(_, let old, _) = devices[who].disk.node(devices[who].root + "/" + path) { current = old }
                ledger.write(devices[who], path, content(for: path, current: current), by: "D\(who)")
            }
            log.append("D\(index) and D\(other) write \(path)")
        case 38..<52:
            // Save a file: a new one, or (mostly) a new content of one that is there.
            let (all, folders) = entries(device)
            let files = all.filter { !$0.hasSuffix(Placeholder.suffix) }
            let path: String
            if !files.isEmpty && random.below(10) < 7 {
                path = files[random.below(files.count)]
            } else {
                let folder = ([""] + folders)[random.below(folders.count + 1)]
                counter += 1
                path = (folder.isEmpty ? "" : folder + "/") + "f\(counter)-d\(index).txt"
            }
            var current: Data?
            if case .file(_, let old, _) = device.disk.node(device.root + "/" + path) { current = old }
            let data = content(for: path, current: current)
            ledger.write(device, path, data, by: "D\(index)")
            log.append("D\(index) write \(path)")
        case 52..<57:
            let folders = entries(device).folders
            let folder = ([""] + folders)[random.below(folders.count + 1)]
            counter += 1
            let made = (folder.isEmpty ? "" : folder + "/") + "dir\(counter)-d\(index)"
            device.disk.makeFolderDirectly(device.root + "/" + made)
            log.append("D\(index) mkdir")
            if fills, random.below(2) == 0 {
                // A folder copied in with files (the seeds whose remote makes a new folder with its files): settled
                // before the next round half of the time.
                for _ in 0...random.below(4) {
                    counter += 1
                    let path = made + "/f\(counter)-d\(index).txt"
                    let data = content(for: path, current: nil)
                    ledger.write(device, path, data, by: "D\(index)")
                    log.append("D\(index) write \(path)")
                }
                if random.below(2) == 0 { device.clock.advance(by: 1.5) }
            }
        case 57..<65:
            let (files, folders) = entries(device)
            let all = files.filter { !$0.hasSuffix(Placeholder.suffix) } + folders
            guard !all.isEmpty else { return }
            let path = all[random.below(all.count)]
            ledger.delete(device, path)
            log.append("D\(index) delete \(path)")
        case 65..<76:
            let (files, folders) = entries(device)
            let all = files + folders
            guard !all.isEmpty else { return }
            let path = all[random.below(all.count)]
            let target = ([""] + folders)[random.below(folders.count + 1)]
            counter += 1
            let name = random.below(2) == 0 ? ((path as NSString).lastPathComponent) : "r\(counter)-\((path as NSString).lastPathComponent)"
            let destination = (target.isEmpty ? "" : target + "/") + name
            if device.disk.moveTree(device.root + "/" + path, to: device.root + "/" + destination) {
                log.append("D\(index) move \(path) → \(destination)")
            }
        case 76..<82:
            log.append("D\(index) crash")
            try rebuild(index)
        case 82..<84:
            // A folder made unreadable (chmod 000) for a while, or readable again: the engine must leave what it
            // holds as it was, never take it for deleted.
            // (One that holds files, or readable again.)
            let holding = Set(entries(device).files.compactMap { $0.contains("/") ? ($0 as NSString).deletingLastPathComponent : nil })
            let folders = (holding.map { device.root + "/" + $0 } + device.disk.unreadableFolders).sorted()
            guard !folders.isEmpty else { return }
            let folder = folders[random.below(folders.count)]
            let unreadable = !device.disk.unreadableFolders.contains(folder)
            device.disk.setUnreadable(folder, unreadable)
            log.append("D\(index) chmod \(unreadable ? "000" : "755") \(folder.dropFirst(device.root.count + 1))")
        case 84..<86 where seed % 8 == 6:
            // The remote's folder deleted from a web UI (everything in it trashed, the root not there), or made
            // again, empty: the pairs pause meanwhile, and are linked anew after it — nothing here taken as deleted.
            let gone = rootGate.gone.withLockedValue { $0 }
            if !gone {
                let web = NimbusProvider(client: device.client, state: NimbusProvider.NoState())
                // (Through the device's faulty connection: some deletions may not happen, as with a flaky web UI.)
                let children = (try? await web.children(of: try await web.root().id)) ?? []
                for child in children { try? await web.delete(child.id) }
            }
            rootGate.gone.withLockedValue { $0 = !gone }
            log.append(gone ? "web: remote folder made again" : "web: remote folder deleted")
        case 86..<91:
            // What lives on the device: free, hydrate, pin or unpin an item, or exclude a folder (or include all again).
            let (files, folders) = entries(device)
            let all = files + folders
            guard !all.isEmpty else { return }
            let path = all[random.below(all.count)]
            let action = random.below(5)
            if action == 4 {
                var selection = SyncSelection()
                if random.below(2) == 0, let folder = folders.randomElement(using: &random) { selection.exclude(folder) }
                try await device.folder.setSelection(selection)
                log.append("D\(index) select \(selection.excluded)")
            } else {
                let what = [FolderSync.ResidencyAction.free, .hydrate, .pin, .unpin][action]
                let done = (try? await device.folder.setResidency(what, at: path)) != nil
                log.append("D\(index) \(what) \(path)\(done ? "" : " (not synced yet)")")
            }
        case 91..<94:
            // The device's network becomes metered (or not any more): the seed's policy says what may move.
            let metered = device.network.metered.withLockedValue { $0.toggle(); return $0 }
            log.append("D\(index) network \(metered ? "metered" : "unmetered")")
        default:
            device.clock.advance(by: Double(random.below(4)) * 0.5)
        }
    }

    /// A sync round on a device; users may save files while it runs, and the device may crash mid-way.
    mutating func round(_ index: Int) async throws {
        let device = devices[index]
        let interferenceRandom = NIOLockedValueBox(SplitMix(seed: random.next()))
        let crash = random.below(6) == 0
        let crashAt = random.below(40)
        let ledger = self.ledger
        let root = device.root
        let disk = device.disk
        let name = "D\(index)"
        let counter = LockedCounter(start: self.counter * 1000)
        let operations = LockedCounter(start: 0)
        disk.interference.withLockedValue { hook in
            hook = { operation, path in
                let count = operations.next()
                if crash && count == crashAt { disk.crashNext.withLockedValue { $0 = true } }
                // Now and then a user saves a file at that very moment — most often right before the engine renames,
                // replaces or deletes one (between its last look and its action).
                let risky = ["rename", "replace", "unlink", "export"].contains(operation)
                let (save, size, contentSeed) = interferenceRandom.withLockedValue { random in
                    (random.chance(risky ? 0.15 : 0.02), 30 + random.below(200), random.next())
                }
                guard save, path.hasPrefix(root + "/"), !path.contains(".nimbus-partial") else { return }
                var relative = String(path.dropFirst(root.count + 1))
                if contentSeed % 3 == 0 {
                    // Another file of the folder, not the one the engine is at.
                    let files = disk.files(under: root).keys.filter { !$0.contains(".nimbus-partial") }.sorted()
                    if !files.isEmpty { relative = files[Int(contentSeed / 3 % UInt64(files.count))] }
                }
                switch disk.node(root + "/" + relative) {
                case .file:
                    ledger.write(disk, root, relative, randomBytes(size, seed: contentSeed), by: name)
                case .folder:
                    ledger.write(disk, root, relative + "/mid\(counter.next())-\(name).txt", randomBytes(size, seed: contentSeed), by: name)
                case nil:
                    ledger.write(disk, root, "mid\(counter.next())-\(name).txt", randomBytes(size, seed: contentSeed), by: name)
                }
            }
        }
        defer { disk.interference.withLockedValue { $0 = nil } }
        log.append("D\(index) sync\(crash ? " (crash at \(crashAt))" : "")")
        let unreadable = disk.unreadableFolders.map { String($0.dropFirst(root.count + 1)) }
        var report: FolderSyncReport?
        let metered = device.network.metered.withLockedValue { $0 }
        let placeholders = Set(disk.files(under: root).keys.filter { $0.hasSuffix(Placeholder.suffix) })
        await device.folder.setNetworkPolicy(NetworkPolicy(onMetered: meteredPolicy, pauseOnLowBattery: false), constraints: device.network)
        do {
            report = try await device.folder.syncOnce()
        } catch is SimulatedFileSystem.Crash {
            log.append("D\(index) crashed mid-round")
        } catch {
            log.append("D\(index) round error \(error)")
        }
        // What an unreadable folder holds is not seen, so never deleted there. (A file its user deleted before the folder
        // became unreadable is deleted there, rightly: the deletion was seen while it could be read.)
        let present = disk.files(under: root)
        if let path = report?.deletedHere.first(where: { path in unreadable.contains { path.hasPrefix($0 + "/") } && present[path] != nil }) {
            throw SimulationFailure(message: "D\(index) deleted there \(path), inside a folder it could not read\n\(log.joined(separator: "\n"))")
        }
        if metered, let report {
            // A metered network delays content: nothing is sent under metadata-only (a file is fetched only when
            // asked for), and nothing at all moves under pause.
            if meteredPolicy == .metadataOnly, !report.uploaded.isEmpty {
                throw SimulationFailure(message: "D\(index) sent \(report.uploaded) on a metered network (metadata only)\n\(log.joined(separator: "\n"))")
            }
            let fetched = report.downloaded.filter { !$0.hasSuffix("/") && !placeholders.contains($0 + Placeholder.suffix) }
            if meteredPolicy == .metadataOnly, !fetched.isEmpty {
                throw SimulationFailure(message: "D\(index) fetched \(fetched), not asked for, on a metered network (metadata only)\n\(log.joined(separator: "\n"))")
            }
            if meteredPolicy == .pause, report.paused == nil || report.changed > 0 {
                throw SimulationFailure(message: "D\(index) synced on a metered network (pause): \(report)\n\(log.joined(separator: "\n"))")
            }
        }
        disk.crashNext.withLockedValue { $0 = false }
        if crash { try rebuild(index) }
    }

    mutating func rebuild(_ index: Int) throws {
        let device = devices[index]
        counter += 1
        // The same sign-in (tokens survive a crash), a new engine on the same database and disk.
        devices[index].folder = try makeFolder(
            index: index, disk: device.disk, client: device.client, tokens: device.tokens, clock: device.clock, state: device.state)
    }

    /// No more faults or users: rounds on every device until all are idle.
    mutating func quiesce() async throws {
        rootGate.gone.withLockedValue { $0 = false }
        for device in devices {
            // Everything on every device again (the check compares each folder with the server).
            try await device.folder.setSelection(SyncSelection())
            device.network.metered.withLockedValue { $0 = false }
            _ = try? await device.folder.setResidency(.hydrate, at: "")
            device.faults.randomFaults(rate: 0, seed: 0)
            for folder in device.disk.unreadableFolders { device.disk.setUnreadable(folder, false) }
        }
        var quiet = 0
        var lastErrors: [String] = []
        for _ in 0..<30 {
            var busy = false
            for (index, device) in devices.enumerated() {
                device.clock.advance(by: 600)
                let report: FolderSyncReport
                do { report = try await device.folder.syncOnce() } catch {
                    busy = true
                    lastErrors.append("D\(index): \(error)")
                    continue
                }
                if report.changed > 0 || !report.errors.isEmpty || !report.skipped.isEmpty { busy = true }
                lastErrors += report.errors.map { "D\(index): \($0)" }
                for item in try await device.folder.engine.itemsNeedingAttention() {
                    busy = true
                    switch item.state {
                    case .failed: try await device.folder.engine.retry(item.id)
                    case .conflict:
                        // Each answer in turn, by seed and device: keeping the remote version keeps this one as a
                        // conflict copy on a remote without revisions (the listed ones).
                        let answer = ConflictResolution.allCases[Int((seed &+ UInt64(index)) % 3)]
                        if (try? await device.folder.engine.resolveConflict(item.id, keeping: answer)) != nil { _ = answered.next() }
                    default: break
                    }
                }
            }
            quiet = busy ? 0 : quiet + 1
            if quiet >= 2 { return }
        }
        throw SimulationFailure(message: "did not settle: \(lastErrors.suffix(10))\n\(log.joined(separator: "\n"))")
    }

    func check() async throws {
        let api = try await world.api(user)
        let server = encrypted ? try await api.tree(openingWith: cryptKey) : try await api.tree()
        if encrypted {
            // The server holds sealed names only (and the key file is not there: the key was given).
            let raw = try await api.tree()
            let plainNames = Set(server.keys.flatMap { $0.split(separator: "/").map(String.init) })
            let rawNames = Set(raw.keys.flatMap { $0.split(separator: "/").map(String.init) })
            if raw.count != server.count || !plainNames.isDisjoint(with: rawNames) {
                throw SimulationFailure(message: "an encrypted seed's server tree is not all sealed: \(raw.keys.sorted())")
            }
        }
        if storeEncrypted {
            // No name the folders hold is readable in any device's sync state (database, journal, staged files).
            let names = Set(server.keys.flatMap { $0.split(separator: "/").map(String.init) }).filter { $0.count >= 5 }
            for (index, device) in devices.enumerated() {
                guard let files = FileManager.default.enumerator(at: device.state, includingPropertiesForKeys: nil) else { continue }
                for case let url as URL in files {
                    guard let data = try? Data(contentsOf: url) else { continue }
                    for name in names where data.range(of: Data(name.utf8)) != nil {
                        throw SimulationFailure(message: "'\(name)' is readable in D\(index)'s encrypted sync state (\(url.lastPathComponent))\n\(log.joined(separator: "\n"))")
                    }
                }
            }
        }
        for (index, device) in devices.enumerated() {
            var disk: [String: String] = [:]
            for (path, data) in device.disk.files(under: device.root) { disk["/" + path] = sha256(data) }
            for path in device.disk.folders(under: device.root) { disk["/" + path] = "folder" }
            if disk != server {
                let rows = (try? await device.folder.engine.unsyncedRows(all: true)) ?? []
                throw SimulationFailure(
                    message: """
                        device D\(index)'s folder differs from the server:
                         only on disk: \(disk.filter { server[$0.key] != $0.value }.sorted { $0.key < $1.key })
                         only on the server: \(server.filter { disk[$0.key] != $0.value }.keys.sorted())
                         rows: \(rows)
                        \(log.joined(separator: "\n"))
                        D\(index) activity: \(await device.folder.engine.recentActivity.suffix(40).joined(separator: "\n"))
                        writes: \(ledger.events.joined(separator: "\n"))
                        """)
            }
        }
        // Every content written is somewhere, unless its own user overwrote or deleted it.
        var stored: Set<String> = []
        var cursor = firstCursor
        while true {
            let page: ChangeList = try await api.call("GET", "/v1/changes?cursor=\(cursor)&limit=1000")
            for change in page.changes where change.file?.isFolder == false {
                let revisions: RevisionList = try await api.call("GET", "/v1/files/\(change.fileId)/revisions?limit=1000")
                if encrypted {
                    for revision in revisions.revisions {
                        if let opened = try? await api.openedChecksum(revision.downloadUrl, key: cryptKey) { stored.insert(opened) }
                    }
                } else {
                    stored.formUnion(revisions.revisions.map(\.checksum))
                }
            }
            cursor = page.cursor
            if !page.hasMore { break }
        }
        for device in devices { for data in device.disk.files(under: device.root).values { stored.insert(sha256(data)) } }
        let lost = ledger.unexcused().subtracting(stored)
        if !lost.isEmpty {
            throw SimulationFailure(message: "contents written were lost: \(lost.map { ledger.origin($0) })\n\(log.joined(separator: "\n"))")
        }
        for path in server.keys where path.range(of: #" \(\d+\)"#, options: .regularExpression) != nil && !path.contains("conflict from") {
            throw SimulationFailure(message: "duplicate \(path) on the server\n\(log.joined(separator: "\n"))")
        }
    }
}

/// What users wrote, and which contents they themselves replaced or deleted (whose loss is theirs).
final class ContentLedger: @unchecked Sendable {
    private let lock = NSLock()
    private var written: [String: String] = [:]  // checksum → who wrote it where
    private var excused: Set<String> = []
    private var history: [String: [Data]] = [:]  // path → contents it had (for undos)
    private(set) var events: [String] = []

    func write(_ device: FolderDevice, _ path: String, _ data: Data, by name: String) {
        write(device.disk, device.root, path, data, by: name)
    }

    /// A user saves `data` at `path`: what the file held before is the user's to lose.
    func write(_ disk: SimulatedFileSystem, _ root: String, _ path: String, _ data: Data, by name: String) {
        let absolute = root + "/" + path
        if case .file(_, let old, _) = disk.node(absolute) { excuse(old) }
        disk.write(absolute, data)
        guard case .file(_, let now, _) = disk.node(absolute), now == data else { return }
        lock.lock()
        let key = sha256(data)
        events.append("\(name) wrote \(path) \(key.prefix(6)) at \(disk.clock.now().timeIntervalSince1970)")
        if written[key] == nil { written[key] = "\(name) \(path)" }
        excused.remove(key)
        history[path, default: []].append(data)
        lock.unlock()
    }

    func delete(_ device: FolderDevice, _ path: String) {
        for data in device.disk.deleteTree(device.root + "/" + path) { excuse(data) }
    }

    func excuse(_ data: Data) {
        lock.lock()
        excused.insert(sha256(data))
        lock.unlock()
    }

    /// The biggest content over 64 KiB that a path was last given (first path in order on a tie: seeds replay),
    /// for a copy with an edit.
    func anyBig() -> Data? {
        lock.lock()
        defer { lock.unlock() }
        var best: Data?
        for (_, contents) in history.sorted(by: { $0.key < $1.key }) {
            if let last = contents.last, last.count > 65_536, last.count > best?.count ?? 0 { best = last }
        }
        return best
    }

    func earlier(_ path: String) -> Data? {
        lock.lock()
        defer { lock.unlock() }
        return history[path]?.dropLast().last
    }

    func unexcused() -> Set<String> {
        lock.lock()
        defer { lock.unlock() }
        return Set(written.keys).subtracting(excused)
    }

    func origin(_ checksum: String) -> String {
        lock.lock()
        defer { lock.unlock() }
        return "\(written[checksum] ?? "?") (\(checksum.prefix(8)))"
    }
}

final class LockedCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Int
    init(start: Int) { value = start }
    func next() -> Int {
        lock.lock()
        defer { lock.unlock() }
        value += 1
        return value
    }
}
