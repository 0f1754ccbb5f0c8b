import Crypto
import Foundation
import Hummingbird
import HummingbirdTesting
import NIOConcurrencyHelpers
import NimbusAPI
import NimbusServer
@testable import NimbusSync
import Testing

/// A manual clock for engines (backoff schedules).
final class ManualClock: SyncClock {
    private let current = NIOLockedValueBox(Date(timeIntervalSince1970: 1_800_000_000))
    func now() -> Date { current.withLockedValue { $0 } }
    func advance(by seconds: TimeInterval) { current.withLockedValue { $0 = $0.addingTimeInterval(seconds) } }
}

/// A transport that can fail on purpose: refuse before sending (the request never arrives), or drop the
/// answer after the server acted on it (the crash-after-commit case). Records what was sent.
final class FaultyTransport: Transport, @unchecked Sendable {
    enum Fault: Sendable {
        case refuse
        case dropResponse
    }

    struct Rule: Sendable {
        var matches: @Sendable (TransportRequest) -> Bool
        var fault: Fault
        var remaining: Int
    }

    let inner: any Transport
    private let state = NIOLockedValueBox(
        (rules: [Rule](), log: [TransportRequest](), offline: false, random: SplitMix(seed: 0), failureRate: 0.0, decisions: [String]()))

    init(inner: any Transport) { self.inner = inner }

    /// Fails the next `count` requests that match.
    func fail(_ fault: Fault, count: Int = 1, where matches: @escaping @Sendable (TransportRequest) -> Bool) {
        state.withLockedValue { $0.rules.append(Rule(matches: matches, fault: fault, remaining: count)) }
    }

    var offline: Bool {
        get { state.withLockedValue { $0.offline } }
        set { state.withLockedValue { $0.offline = newValue } }
    }

    /// Random faults (half refused, half dropped answers) at `rate`, from a seed.
    func randomFaults(rate: Double, seed: UInt64) {
        state.withLockedValue {
            $0.failureRate = rate
            $0.random = SplitMix(seed: seed)
        }
    }

    var log: [TransportRequest] { state.withLockedValue { $0.log } }

    /// Every request decided so far, in order, as `METHOD path → fault` with ids, cursors and request ids (16 characters or more) left out: what
    /// a replay of a seed must repeat exactly.
    var decisions: [String] { state.withLockedValue { $0.decisions } }

    private func decide(_ request: TransportRequest) -> Fault? {
        state.withLockedValue { state in
            state.log.append(request)
            let fault = decision(request, &state)
            let path = request.path.replacing(/[A-Za-z0-9_\-]{16,}/, with: "ID")
            state.decisions.append("\(request.method) \(path) → \(fault.map { "\($0)" } ?? "-")")
            return fault
        }
    }

    private func decision(
        _ request: TransportRequest,
        _ state: inout (rules: [Rule], log: [TransportRequest], offline: Bool, random: SplitMix, failureRate: Double, decisions: [String])
    ) -> Fault? {
        if state.offline { return .refuse }
        for index in state.rules.indices where state.rules[index].remaining > 0 && state.rules[index].matches(request) {
            state.rules[index].remaining -= 1
            return state.rules[index].fault
        }
        if state.failureRate > 0, !request.path.hasPrefix("/v1/events") {
            let roll = Double(state.random.next() % 10_000) / 10_000
            if roll < state.failureRate { return state.random.next() % 2 == 0 ? .refuse : .dropResponse }
        }
        return nil
    }

    func send(_ request: TransportRequest) async throws -> (TransportResponseHead, Data) {
        await Turns.pass()  // steps running at once switch here, in a seeded order (a simulation's interleavingSeed)
        switch decide(request) {
        case .refuse: throw InjectedFault.refused
        case .dropResponse:
            _ = try await inner.send(request)
            throw InjectedFault.dropped
        case nil: return try await inner.send(request)
        }
    }

    func stream(_ request: TransportRequest, into sink: @escaping @Sendable (Data) async throws -> Void) async throws -> (TransportResponseHead, Data) {
        await Turns.pass()
        switch decide(request) {
        case .refuse: throw InjectedFault.refused
        case .dropResponse:
            // Deliver part of the body, then fail: a download interrupted midway.
            let delivered = NIOLockedValueBox(0)
            do {
                return try await inner.stream(request) { data in
                    let total = delivered.withLockedValue { $0 += data.count; return $0 }
                    if total > 100_000 { throw InjectedFault.dropped }
                    try await sink(data)
                }
            } catch {
                throw InjectedFault.dropped
            }
        case nil: return try await inner.stream(request, into: sink)
        }
    }
}

enum InjectedFault: Error { case refused, dropped }

struct SplitMix: Sendable {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    mutating func below(_ n: Int) -> Int { Int(next() % UInt64(max(n, 1))) }
    mutating func chance(_ p: Double) -> Bool { Double(next() % 1_000_000) / 1_000_000 < p }
}

/// A real server on an ephemeral port, and devices (engines) that talk to it.
struct SyncWorld: Sendable {
    let port: Int
    let root: URL
    var server: URL { URL(string: "http://127.0.0.1:\(port)")! }

    static func run(chunkSize: Int64 = 256 * 1024, _ body: @Sendable (SyncWorld) async throws -> Void) async throws {
        let root = FileManager.default.temporaryDirectory.appending(path: "nimbus-sync-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: root) }
        var configuration = ServerConfiguration(dataDirectory: root.appending(path: "server"))
        configuration.port = 0
        configuration.allowRegistration = true
        configuration.bcryptCost = 4
        configuration.chunkSize = chunkSize
        configuration.logLevel = .critical
        let (app, _) = try await buildApplication(configuration: configuration)
        try await app.test(.live) { client in
            try await body(SyncWorld(port: client.port!, root: root))
        }
    }

    /// Registers a user through the API.
    func register(_ username: String, password: String = "correct horse") async throws {
        let (head, _) = try await AsyncHTTPClientTransport(baseURL: server).send(
            TransportRequest(
                method: "POST", path: "/v1/auth/register", headers: ["Content-Type": "application/json"],
                body: try JSONEncoder.nimbus.encode(NimbusAPI.Credentials(username: username, password: password))))
        #expect(head.status == 201)
    }

    /// A device: an engine in its own folder, with a fault-injecting transport (`faults`).
    func device(
        _ name: String, directory: URL? = nil, strategy: ConflictStrategy = .keepBoth, clock: ManualClock = ManualClock(),
        faults: FaultyTransport? = nil, configure: (inout SyncConfiguration) -> Void = { _ in }
    ) throws -> Device {
        let faulty = faults ?? FaultyTransport(inner: AsyncHTTPClientTransport(baseURL: server))
        var configuration = SyncConfiguration(directory: directory ?? root.appending(path: "device-\(name)"), deviceName: name)
        configuration.conflictStrategy = strategy
        configuration.clock = clock
        configuration.backoffBase = .milliseconds(1)
        configuration.backoffCap = .milliseconds(5)
        configuration.randomSeed = 42
        configuration.transportFactory = { _ in faulty }
        configure(&configuration)
        return Device(engine: try SyncEngine(configuration: configuration), faults: faulty, clock: clock)
    }

    /// A plain API client for checking the server's side.
    func api(_ username: String, password: String = "correct horse") async throws -> ServerClient {
        let store = MemoryTokenStore()
        let client = ServerClient(transport: AsyncHTTPClientTransport(baseURL: server), tokenStore: store)
        _ = try await client.logIn(server: server, username: username, password: password, deviceName: "checker")
        return client
    }

    func file(_ name: String, _ content: Data) throws -> URL {
        let url = root.appending(path: "sources-\(UUID().uuidString)").appending(path: name)
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        try content.write(to: url)
        return url
    }
}

/// An engine with its transport and clock.
struct Device: Sendable {
    let engine: SyncEngine
    let faults: FaultyTransport
    let clock: ManualClock

    /// Sync rounds, moving the clock past any backoff, until nothing is left to run (or `rounds` pass).
    func settle(rounds: Int = 20) async throws {
        for _ in 0..<rounds {
            clock.advance(by: 1)
            try await engine.syncOnce()
            let status = try await engine.status()
            if status.pending == 0 { return }
        }
    }
}

final class MemoryTokenStore: TokenStore, @unchecked Sendable {
    private let value = NIOLockedValueBox<Account?>(nil)
    func load() throws -> Account? { value.withLockedValue { $0 } }
    func save(_ credentials: Account?) throws { value.withLockedValue { $0 = credentials } }
}

func sha256(_ data: Data) -> String { SHA256.hash(data: data).map { String(format: "%02x", $0) }.joined() }

func randomBytes(_ count: Int, seed: UInt64? = nil) -> Data {
    var generator = SplitMix(seed: seed ?? UInt64.random(in: 0...UInt64.max))
    var bytes = [UInt8](repeating: 0, count: count)
    for index in 0..<count { bytes[index] = UInt8(truncatingIfNeeded: generator.next()) }
    return Data(bytes)
}

extension ServerClient {
    /// The live tree on the server: path → checksum (folders map to "folder").
    /// Every live item's id → its path.
    func fileIds() async throws -> [(id: String, path: String)] {
        var result: [(id: String, path: String)] = []
        var stack: [(String, String)] = [("root", "")]
        while let (id, path) = stack.popLast() {
            let list: FileList = try await call("GET", "/v1/files?parentId=\(id)&limit=1000")
            for file in list.files {
                result.append((file.id, path + "/" + file.name))
                if file.isFolder { stack.append((file.id, path + "/" + file.name)) }
            }
        }
        return result
    }

    /// ``tree()`` of a tree written through an encrypted remote: names and contents opened with `key` (an item that
    /// does not open — the key file — is left out).
    func tree(openingWith key: SymmetricKey) async throws -> [String: String] {
        let names = NameCipher(dataKey: key)
        var result: [String: String] = [:]
        var stack: [(String, String)] = [("root", "")]
        while let (id, path) = stack.popLast() {
            let list: FileList = try await call("GET", "/v1/files?parentId=\(id)&limit=1000")
            for file in list.files {
                guard let name = try? names.open(file.name) else { continue }
                let childPath = path + "/" + name
                if file.isFolder {
                    result[childPath] = "folder"
                    stack.append((file.id, childPath))
                } else {
                    result[childPath] = try await openedChecksum("/v1/files/\(file.id)/content", key: key)
                }
            }
        }
        return result
    }

    /// The SHA-256 of what a sealed content opens to.
    func openedChecksum(_ path: String, key: SymmetricKey) async throws -> String {
        let (head, data) = try await authorized(TransportRequest(method: "GET", path: path))
        guard head.status == 200 else { throw SyncError.invalid("GET \(path): \(head.status)") }
        let folder = FileManager.default.temporaryDirectory.appending(path: "sim-open-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        try data.write(to: folder.appending(path: "sealed"))
        return try ChunkedEncryption.openReporting(folder.appending(path: "sealed"), to: folder.appending(path: "open"), key: key, context: CryptProvider.context)
            .checksum
    }

    func tree() async throws -> [String: String] {
        var result: [String: String] = [:]
        var stack: [(String, String)] = [("root", "")]
        while let (id, path) = stack.popLast() {
            var page = 1
            while true {
                let list: FileList = try await call("GET", "/v1/files?parentId=\(id)&page=\(page)&limit=1000")
                for file in list.files {
                    let childPath = path + "/" + file.name
                    result[childPath] = file.isFolder ? "folder" : (file.checksum ?? "")
                    if file.isFolder { stack.append((file.id, childPath)) }
                }
                guard let next = list.pagination.nextPage else { break }
                page = next
            }
        }
        return result
    }
}

extension SyncEngine {
    /// The view's tree: path → checksum (folders map to "folder").
    func tree() async throws -> [String: String] {
        var result: [String: String] = [:]
        var stack: [(ItemID, String)] = [(.root, "")]
        while let (id, path) = stack.popLast() {
            for item in try listing(in: id) {
                let childPath = path + "/" + item.name
                result[childPath] = item.isFolder ? "folder" : (item.checksum ?? "")
                if item.isFolder { stack.append((item.id, childPath)) }
            }
        }
        return result
    }
}
