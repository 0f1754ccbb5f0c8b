import Foundation

/// The real `nimbus` binary as a child process, for tests that must kill it (`SIGKILL`) and restart it on
/// the same data folder.
public final class ChildServer: @unchecked Sendable {
    public let process: Spawned
    public let port: Int
    /// The server's standard error (its log), a file: were it this process's own, a server outliving a crashed
    /// test process would hold CI's pipe open.
    public let log: URL

    public var baseURL: String { "http://127.0.0.1:\(port)" }

    /// The binary `swift build` made: `$NIMBUS_BINARY`, or `.build/debug/nimbus` in this checkout.
    public static var binary: URL {
        if let path = ProcessInfo.processInfo.environment["NIMBUS_BINARY"] { return URL(fileURLWithPath: path) }
        let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        return repository.appending(path: ".build/debug/nimbus")
    }

    /// Starts `nimbus serve --port 0 …` and waits for the line that names the port. The environment is this
    /// process's with the test S3 server's keys (for `--blobs s3://…`).
    public init(data: URL, arguments: [String] = []) throws {
        log = FileManager.default.temporaryDirectory.appending(path: "nimbus-serve-\(UUID().uuidString).log")
        process = try Spawned(
            Self.binary.path, ["serve", "--data", data.path, "--port", "0", "--allow-registration", "--log-level", "warning"] + arguments,
            environment: ProcessInfo.processInfo.environment.merging(TestServices.s3Keys) { $1 }, errors: .file(log.path))
        process.closeInput()
        var collected = Data()
        var found: Int?
        let deadline = Date().addingTimeInterval(30)
        while found == nil, Date() < deadline {
            let chunk = process.output.availableData
            if chunk.isEmpty { break }
            collected.append(chunk)
            let text = String(decoding: collected, as: UTF8.self)
            if let range = text.range(of: "http://127.0.0.1:") {
                let digits = text[range.upperBound...].prefix { $0.isNumber }
                found = Int(digits)
            }
        }
        guard let found else {
            process.signal(SIGTERM)
            process.waitUntilExit()
            let errors = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
            try? FileManager.default.removeItem(at: log)
            throw ChildServerError(
                message: "nimbus serve did not report its port; output: \(String(decoding: collected, as: UTF8.self)); errors: \(errors)")
        }
        port = found
    }

    /// `kill -9`: no shutdown code runs.
    public func kill() {
        process.signal(SIGKILL)
        process.waitUntilExit()
    }

    public func stop() {
        if process.isRunning {
            process.signal(SIGTERM)
            process.waitUntilExit()
        }
    }

    deinit {
        process.signal(SIGKILL)
        if process.isRunning { process.waitUntilExit() }
        try? FileManager.default.removeItem(at: log)
    }
}

public struct ChildServerError: Error, CustomStringConvertible {
    var message: String
    public var description: String { message }
}

/// Runs the `nimbus` binary as a client device: `NIMBUS_HOME` set to the device's home.
public struct CLIDevice: Sendable {
    public let home: URL
    public let workingDirectory: URL

    public init(home: URL, workingDirectory: URL) {
        self.home = home
        self.workingDirectory = workingDirectory
    }

    public struct Result: Sendable {
        public var status: Int32
        public var stdout: String
        public var stderr: String
    }

    /// Runs `nimbus arguments…` to completion.
    @discardableResult
    public func run(_ arguments: [String], stdin: String? = nil, environment: [String: String] = [:]) throws -> Result {
        let finished = start(arguments, stdin: stdin, environment: environment).process.finish()
        return Result(
            status: finished.status, stdout: String(decoding: finished.output, as: UTF8.self), stderr: String(decoding: finished.errors, as: UTF8.self))
    }

    public struct Running: @unchecked Sendable {
        public let process: Spawned

        public func kill9() {
            process.signal(SIGKILL)
            process.waitUntilExit()
        }

        /// Waits up to `limit` for the command to end, `kill -9` if it has not: whether it hung, and what it did.
        public func finish(within limit: Duration) async -> (hung: Bool, result: Result) {
            let deadline = ContinuousClock.now + limit
            while process.isRunning, ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(50)) }
            let hung = process.isRunning
            // A hang is rare and seen in CI only: where it waits is kept (every thread's stack, by gdb when there is one).
            let stacks = hung ? Self.stacks(of: process.pid) : nil
            if hung { kill9() }
            let finished = process.finish()
            return (
                hung,
                Result(
                    status: finished.status, stdout: String(decoding: finished.output, as: UTF8.self),
                    stderr: String(decoding: finished.errors, as: UTF8.self) + (stacks.map { "\n--- its threads when it hung ---\n" + $0 } ?? ""))
            )
        }

        /// Every thread's stack of process `pid`, by `gdb -batch` (nil without gdb).
        static func stacks(of pid: pid_t) -> String? {
            guard let gdb = ["/usr/bin/gdb", "/usr/local/bin/gdb"].first(where: { FileManager.default.isExecutableFile(atPath: $0) }),
                let dump = try? Spawned(gdb, ["-p", "\(pid)", "-batch", "-ex", "thread apply all bt 30"], environment: [:], directory: "/")
            else { return nil }
            dump.closeInput()
            let finished = dump.finish()
            return String(decoding: finished.output, as: UTF8.self).split(separator: "\n").filter { $0.hasPrefix("#") || $0.hasPrefix("Thread") }
                .joined(separator: "\n")
        }
    }

    /// Starts `nimbus arguments…` without waiting.
    public func start(_ arguments: [String], stdin: String? = nil, environment extra: [String: String] = [:]) -> Running {
        var environment = ProcessInfo.processInfo.environment
        environment["NIMBUS_HOME"] = home.path
        environment.merge(extra) { $1 }
        do {
            let process = try Spawned(ChildServer.binary.path, arguments, environment: environment, directory: workingDirectory.path)
            if let stdin { process.write(Data((stdin + "\n").utf8)) }
            process.closeInput()
            return Running(process: process)
        } catch {
            // As `Process.run` failing did before: a device that printed nothing and failed.
            fatalError("could not start nimbus: \(error)")
        }
    }
}
