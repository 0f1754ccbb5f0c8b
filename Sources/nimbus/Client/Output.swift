#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import ArgumentParser
import Foundation
import NimbusAPI
import NimbusSync

/// Flags every client command takes.
struct OutputOptions: ParsableArguments {
    @Flag(name: .shortAndLong, help: "Print nothing but errors.")
    var quiet = false

    @Flag(help: "Print machine-readable JSON.")
    var json = false
}

enum Output {
    static var isTerminal: Bool { isatty(STDERR_FILENO) == 1 }

    static func line(_ text: String, options: OutputOptions) {
        guard !options.quiet && !options.json else { return }
        print(text)
        fflush(nil)  // a line at a time into a file or a pipe too (see SyncCommand.print)
    }

    static func json(_ value: some Encodable) throws {
        let encoder = JSONEncoder.nimbus
        encoder.outputFormatting.insert(.prettyPrinted)
        print(String(decoding: try encoder.encode(value), as: UTF8.self))
    }

    /// `value` as one line of compact JSON, out at once (JSON Lines: `--watch --json`).
    static func jsonLine(_ value: some Encodable) {
        guard let data = try? JSONEncoder.nimbus.encode(value) else { return }
        print(String(decoding: data, as: UTF8.self))
        fflush(nil)
    }

    static func error(_ text: String) {
        FileHandle.standardError.write(Data((text + "\n").utf8))
    }

    static func size(_ bytes: Int64) -> String { ByteCount.format(bytes) }

    static func date(_ date: Date) -> String {
        let text = ISO8601.string(from: date)
        return String(text.prefix(16)).replacingOccurrences(of: "T", with: " ")
    }
}

/// Progress of transfers while the engine drains: a live bar per transfer on a terminal (bytes, rate, ETA),
/// plain lines elsewhere, nothing with --quiet or --json.
actor ProgressDisplay {
    struct Transfer {
        var name: String
        var size: Int64
        var started: Date
        var lastFraction: Double = 0
        var lastLine = Date.distantPast
    }

    let options: OutputOptions
    let terminal = Output.isTerminal
    var transfers: [ItemID: Transfer] = [:]
    var finished: Set<ItemID> = []
    var bytesDone: Int64 = 0
    let began = Date()

    init(options: OutputOptions) { self.options = options }

    func watch(_ id: ItemID, name: String, size: Int64) {
        transfers[id] = Transfer(name: name, size: size, started: Date())
    }

    /// Polls the engine for item states until cancelled.
    func follow(_ engine: SyncEngine) async {
        while !Task.isCancelled {
            for id in transfers.keys.sorted(by: { $0.rawValue < $1.rawValue }) where !finished.contains(id) {
                guard let item = try? await engine.item(id) else { continue }
                switch item.state {
                case .uploading(let fraction), .downloading(let fraction): show(id, fraction)
                case .synced: complete(id)
                default: break
                }
            }
            try? await Task.sleep(for: .milliseconds(200))
        }
    }

    func show(_ id: ItemID, _ fraction: Double) {
        guard var transfer = transfers[id], !options.quiet, !options.json else { return }
        if fraction + 0.005 < transfer.lastFraction {
            // Interrupted and sent again: from the start where the remote cannot resume, else from what it kept.
            if terminal { FileHandle.standardError.write(Data("\r\u{1B}[K".utf8)) }
            Output.error("\(transfer.name): interrupted at \(Int(transfer.lastFraction * 100))%; sending again (now at \(Int(fraction * 100))%)")
            transfer.started = Date()
        }
        transfer.lastFraction = fraction
        let elapsed = max(Date().timeIntervalSince(transfer.started), 0.001)
        let done = Int64(Double(transfer.size) * fraction)
        let rate = Double(done) / elapsed
        let eta = rate > 0 ? Double(transfer.size - done) / rate : 0
        if terminal {
            let width = 24
            let filled = Int(fraction * Double(width))
            let bar = String(repeating: "█", count: filled) + String(repeating: "░", count: width - filled)
            let text = "\r\(bar) \(String(format: "%3d%%", Int(fraction * 100))) \(Output.size(done))/\(Output.size(transfer.size)) \(Output.size(Int64(rate)))/s ETA \(Self.clock(eta)) \(transfer.name)"
            FileHandle.standardError.write(Data((text + "\u{1B}[K").utf8))
        } else if Date().timeIntervalSince(transfer.lastLine) > 2 {
            transfer.lastLine = Date()
            Output.error("\(transfer.name): \(Int(fraction * 100))% of \(Output.size(transfer.size))")
        }
        transfers[id] = transfer
    }

    func complete(_ id: ItemID) {
        guard let transfer = transfers[id], !finished.contains(id) else { return }
        finished.insert(id)
        bytesDone += transfer.size
        guard !options.quiet, !options.json else { return }
        let elapsed = max(Date().timeIntervalSince(transfer.started), 0.001)
        if terminal { FileHandle.standardError.write(Data("\r\u{1B}[K".utf8)) }
        Output.error("\(transfer.name): \(Output.size(transfer.size)) in \(String(format: "%.1f", elapsed)) s (\(Output.size(Int64(Double(transfer.size) / elapsed)))/s)")
    }

    static func clock(_ seconds: Double) -> String {
        guard seconds.isFinite else { return "--:--" }
        let total = Int(seconds)
        return String(format: "%d:%02d", total / 60, total % 60)
    }
}

/// Runs the engine until the queue is empty, showing progress; reports what failed.
func drain(_ engine: SyncEngine, progress: ProgressDisplay? = nil) async throws {
    try await withThrowingTaskGroup(of: Void.self) { group in
        if let progress {
            group.addTask { await progress.follow(engine) }
        }
        group.addTask { try await engine.drain() }
        try await group.next()
        group.cancelAll()
    }
    let stuck = try await engine.operations().filter { $0.state == .failed || $0.state == .parked }
    if let first = stuck.first {
        let path = (try? await engine.path(of: first.item)) ?? first.item.rawValue
        throw CLIError("\(path): \(first.lastError ?? first.state.rawValue) (see 'nimbus status')")
    }
}
