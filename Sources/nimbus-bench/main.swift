// NimbusSync benchmarks, each against a peer measured in the same run:
//   swift build -c release --product nimbus-bench --scratch-path .build-release
//   .build-release/release/nimbus-bench [--items 100000] [--operations 10000]
import Crypto
import Foundation
import GRDB
import Hummingbird
import NimbusAPI
@_spi(Benchmarks) import NimbusSync

func seconds(_ body: () async throws -> Void) async rethrows -> Double {
    let start = ContinuousClock.now
    try await body()
    let elapsed = ContinuousClock.now - start
    return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
}

func argument(_ name: String, _ fallback: Int) -> Int {
    let arguments = CommandLine.arguments
    guard let index = arguments.firstIndex(of: name), index + 1 < arguments.count, let value = Int(arguments[index + 1]) else { return fallback }
    return value
}

// `nimbus-bench constant --port P`: one Hummingbird route, `GET /constant`, that returns a constant — the yardstick
// scripts/bench/cpu.py sets the server's metadata requests against (the framework's own cost per request).
if CommandLine.arguments.dropFirst().first == "constant" {
    let router = Router()
    router.get("/constant") { _, _ in #"{"status":"ok"}"# }
    let app = Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: argument("--port", 8080))))
    try await app.runService()
    exit(0)
}

// `nimbus-bench chunking --file F`: FastCDC alone and FastCDC + SHA-256 per chunk over F's bytes in
// memory, on one core; scripts/bench/chunking.py runs it beside the `fastcdc` package from PyPI on the same file.
if CommandLine.arguments.dropFirst().first == "chunking" {
    let path = CommandLine.arguments.firstIndex(of: "--file").map { CommandLine.arguments[$0 + 1] } ?? ""
    let data = try Data(contentsOf: URL(fileURLWithPath: path))
    var chunks = 0
    let chunking = await seconds {
        data.withUnsafeBytes { chunks = FastCDC.lengths(of: $0).count }
    }
    var digests = 0
    let hashing = await seconds {
        data.withUnsafeBytes { all in
            var offset = 0
            for length in FastCDC.lengths(of: all) {
                let digest = SHA256.hash(data: UnsafeRawBufferPointer(rebasing: all[offset..<offset + length]))
                digests &+= Int(digest.withUnsafeBytes { $0[0] })
                offset += length
            }
        }
    }
    let gigabytes = Double(data.count) / 1e9
    print("nimbus FastCDC: \(chunks) chunks; chunking \(String(format: "%.2f", gigabytes / chunking)) GB/s; chunking + SHA-256 \(String(format: "%.2f", gigabytes / hashing)) GB/s (\(digests % 2))")
    exit(0)
}

// `nimbus-bench crypto --mib N [--file F]`: AES-256-GCM in 64 KiB segments on one core, sealing and
// opening N MiB in memory (the goal is ≥ 1 GB/s with AES-NI); with --file, the same through
// SegmentedEncryption's files (encrypt F, decrypt it back) against a plain copy of F. scripts/bench/crypto.py runs
// it beside Python's `cryptography` (OpenSSL) on the same data.
if CommandLine.arguments.dropFirst().first == "crypto" {
    let mib = argument("--mib", 256)
    let key = SymmetricKey(size: .bits256)
    var generator = SystemRandomNumberGenerator()
    let plain = Data((0..<(mib << 20) / 8).flatMap { _ in withUnsafeBytes(of: generator.next() as UInt64) { Array($0) } })
    let segment = SegmentedEncryption.segmentSize
    // Sealed once to measure (each box dropped: no fresh memory to fault in), once more to keep for opening.
    var sealedBytes = 0
    let sealing = try await seconds {
        var offset = 0
        while offset < plain.count {
            let end = min(plain.count, offset + segment)
            sealedBytes += try AES.GCM.seal(plain[offset..<end], using: key, authenticating: [UInt8(offset & 0xff)]).ciphertext.count
            offset = end
        }
    }
    let sealed = try stride(from: 0, to: plain.count, by: segment).map { offset in
        try AES.GCM.seal(plain[offset..<min(plain.count, offset + segment)], using: key, authenticating: [UInt8(offset & 0xff)]).combined ?? Data()
    }
    var opened = 0
    let opening = try await seconds {
        for (index, box) in sealed.enumerated() {
            opened += try AES.GCM.open(try AES.GCM.SealedBox(combined: box), using: key, authenticating: [UInt8((index * segment) & 0xff)]).count
        }
    }
    let gigabytes = Double(plain.count) / 1e9
    print("nimbus AES-256-GCM, 64 KiB segments, one core: seal \(String(format: "%.2f", gigabytes / sealing)) GB/s; open \(String(format: "%.2f", gigabytes / opening)) GB/s (\(opened == plain.count && sealedBytes == plain.count ? "ok" : "MISMATCH"))")
    if let index = CommandLine.arguments.firstIndex(of: "--file"), index + 1 < CommandLine.arguments.count {
        let source = URL(fileURLWithPath: CommandLine.arguments[index + 1])
        let cipher = SegmentedEncryption(key: key)
        let encrypted = source.appendingPathExtension("nimbus-enc"), back = source.appendingPathExtension("nimbus-dec")
        let copy = source.appendingPathExtension("nimbus-copy")
        defer { for url in [encrypted, back, copy] { try? FileManager.default.removeItem(at: url) } }
        let copying = try await seconds {
            // As the encrypted file is written: read 1 MiB at a time, written, fsynced.
            let input = try FileHandle(forReadingFrom: source)
            _ = FileManager.default.createFile(atPath: copy.path, contents: nil)
            let output = try FileHandle(forWritingTo: copy)
            while let data = try input.read(upToCount: 1 << 20), !data.isEmpty { try output.write(contentsOf: data) }
            try output.synchronize()
            try output.close()
            try input.close()
        }
        let encrypting = try await seconds { try cipher.encryptFile(at: source, to: encrypted, context: "bench") }
        let decrypting = try await seconds { try cipher.decryptFile(at: encrypted, to: back, context: "bench") }
        let size = Double((try? FileManager.default.attributesOfItem(atPath: source.path)[.size] as? Int) ?? 0) / 1e9
        print("nimbus files: plain copy (fsynced) \(String(format: "%.2f", size / copying)) GB/s; encrypt \(String(format: "%.2f", size / encrypting)) GB/s (fsynced); decrypt \(String(format: "%.2f", size / decrypting)) GB/s")
    }
    exit(0)
}

let items = argument("--items", 100_000)
let operations = argument("--operations", 10_000)
let work = FileManager.default.temporaryDirectory.appending(path: "nimbus-bench-\(UUID().uuidString)")
try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
defer { try? FileManager.default.removeItem(at: work) }

// 1. Applying a change feed of `items` changes (500 per page, as pulls do) vs plain GRDB inserts of as many rows.
let engine = try SyncEngine(configuration: SyncConfiguration(directory: work.appending(path: "engine"), deviceName: "bench"))
let now = Date()
let root = File(id: "froot", name: "My Drive", mimeType: folderMimeType, parentId: nil, size: 0, checksum: nil, revisionId: nil, createdAt: now, modifiedAt: now, downloadUrl: nil, trashed: false)
let folder = File(id: "fbig", name: "Big", mimeType: folderMimeType, parentId: "froot", size: 0, checksum: nil, revisionId: nil, createdAt: now, modifiedAt: now, downloadUrl: nil, trashed: false)
try await engine.applyFeedPage([Change(seq: 1, type: .upsert, fileId: root.id, file: root), Change(seq: 2, type: .upsert, fileId: folder.id, file: folder)], cursor: "2")
let changes = (0..<items).map { index in
    let file = File(
        id: "f\(index)", name: "file-\(String(format: "%06d", index)).txt", mimeType: "text/plain", parentId: "fbig", size: Int64(index),
        checksum: String(repeating: "a", count: 64), revisionId: "r\(index)", createdAt: now, modifiedAt: now, downloadUrl: Routes.content.path("f\(index)"),
        trashed: false)
    return Change(seq: Int64(index + 3), type: .upsert, fileId: file.id, file: file)
}
let applySeconds = try await seconds {
    var start = 0
    while start < changes.count {
        let page = Array(changes[start..<min(start + 500, changes.count)])
        start += 500
        try await engine.applyFeedPage(page, cursor: String(start))
    }
}
let peer = try DatabasePool(path: work.appending(path: "peer.sqlite").path)
try peer.write { db in try db.execute(sql: "CREATE TABLE t (id TEXT PRIMARY KEY, parent TEXT, name TEXT, size INTEGER, checksum TEXT)") }
let peerApplySeconds = try await seconds {
    var start = 0
    while start < changes.count {
        let page = changes[start..<min(start + 500, changes.count)]
        start += 500
        try await peer.write { db in
            for change in page {
                try db.execute(sql: "INSERT INTO t VALUES (?, ?, ?, ?, ?)", arguments: [change.fileId, "fbig", change.file?.name, change.file?.size, change.file?.checksum])
            }
        }
    }
}
print(String(format: "apply %d feed changes: %.0f changes/s (%.2f s); plain GRDB inserts of the same rows: %.0f rows/s (ratio %.2fx)",
             items, Double(items) / applySeconds, applySeconds, Double(items) / peerApplySeconds, applySeconds / peerApplySeconds))

// 2. Merged listing of the 100,000-item folder vs listing a directory of as many files with their sizes.
let big = try require(try await engine.item(atPath: "/Big"))
var listed = 0
let coldListingSeconds = try await seconds { listed = try await engine.listing(in: big.id).count }
var listingSeconds = Double.infinity
for _ in 0..<(ProcessInfo.processInfo.environment["NIMBUS_BENCH_LISTINGS"].flatMap { Int($0) } ?? 5) {  // best of five: the figure is the database read, not the allocator's mood
    listingSeconds = min(listingSeconds, try await seconds { listed = try await engine.listing(in: big.id).count })
    if ProcessInfo.processInfo.environment["NIMBUS_BENCH_VERBOSE"] != nil { print(listingSeconds) }
}
var first: Double = 0
// From asking for the live view to holding its first listing (and so its first item).
first = await seconds {
    let stream = await engine.items(in: big.id)
    var iterator = stream.makeAsyncIterator()
    _ = await iterator.next()
}
let directory = work.appending(path: "dir")
try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
for index in 0..<items { _ = FileManager.default.createFile(atPath: directory.appending(path: "file-\(index).txt").path, contents: nil) }
var peerCount = 0
let peerListingSeconds = try await seconds {
    let names = try FileManager.default.contentsOfDirectory(atPath: directory.path)
    for name in names { _ = try FileManager.default.attributesOfItem(atPath: directory.appending(path: name).path) }
    peerCount = names.count
}
// Time to the first item: the first screenful (100 items) of the same folder, as a list view asks for it.
var firstWindow = Double.infinity
for _ in 0..<5 { firstWindow = min(firstWindow, try await seconds { _ = try await engine.listing(in: big.id, offset: 0, limit: 100) }) }
print(String(format: "merged listing of a %d-item folder: %.1f ms (first call %.1f ms; a live items(in:) stream delivers its first listing in %.1f ms; first item, as the first window of 100: %.2f ms); FileManager listing + stat of a %d-file directory: %.1f ms (ratio %.2fx)",
             listed, listingSeconds * 1000, coldListingSeconds * 1000, first * 1000, firstWindow * 1000, peerCount, peerListingSeconds * 1000, listingSeconds / peerListingSeconds))

// 3. Cold start with `operations` pending operations: open the library until the executor has work in hand.
let queued = try SyncEngine(configuration: SyncConfiguration(directory: work.appending(path: "queued"), deviceName: "bench"))
let parent = try await queued.createFolder(named: "Queue")
for index in 0..<operations { _ = try await queued.createFolder(named: "op-\(index)", in: parent) }
var ready = false
let coldSeconds = try await seconds {
    let reopened = try SyncEngine(configuration: SyncConfiguration(directory: work.appending(path: "queued"), deviceName: "bench"))
    ready = try await reopened.nextOperationReady()
}
let peerColdSeconds = try await seconds {
    let pool = try DatabasePool(path: work.appending(path: "queued/sync.sqlite").path)
    _ = try await pool.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM operations") }
}
print(String(format: "cold start with %d pending operations: executor ready (%@) in %.1f ms; opening the same database and counting them: %.1f ms",
             operations + 1, ready ? "yes" : "no", coldSeconds * 1000, peerColdSeconds * 1000))

extension Optional {
    struct Missing: Error {}
}

func require<T>(_ value: T?) throws -> T {
    guard let value else { throw Optional<T>.Missing() }
    return value
}
