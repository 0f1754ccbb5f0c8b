import Foundation

/// The real `nimbus` binary as a child process, for tests that must kill it (`SIGKILL`) and restart it on
/// the same data folder.
public final class ChildServer: @unchecked Sendable {
    public let process: Spawned
    public let port: Int

    public var baseURL: String { "http://127.0.0.1:\(port)" }

    /// The binary `swift build` made: `$NIMBUS_BINARY`, or `.build/debug/nimbus` in this checkout.
    public static var binary: URL {
        if let path = ProcessInfo.processInfo.environment["NIMBUS_BINARY"] { return URL(fileURLWithPath: path) }
        let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        return repository.appending(path: ".build/debug/nimbus")
    }

    /// Starts `nimbus serve --port 0 …` and waits for the line that names the port.
    public init(data: URL, arguments: [String] = []) throws {
        process = try Spawned(
            Self.binary.path, ["serve", "--data", data.path, "--port", "0", "--allow-registration", "--log-level", "warning"] + arguments,
            captureErrors: false)
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
            throw ChildServerError(message: "nimbus serve did not report its port; output: \(String(decoding: collected, as: UTF8.self))")
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
        if !process.isRunning { return }
        process.waitUntilExit()
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
        let running = start(arguments, stdin: stdin, environment: environment)
        // Both streams at once: a child that fills one pipe while we wait on the other would never end.
        let errors = running.process.errors
        let stderrBox = NSLock()
        nonisolated(unsafe) var stderrData = Data()
        let reader = Thread {
            let data = errors?.readDataToEndOfFile() ?? Data()
            stderrBox.withLock { stderrData = data }
        }
        reader.start()
        let stdoutData = running.process.output.readDataToEndOfFile()
        let status = running.process.waitUntilExit()
        while reader.isExecuting || !reader.isFinished { usleep(1000) }
        return Result(
            status: status, stdout: String(decoding: stdoutData, as: UTF8.self),
            stderr: String(decoding: stderrBox.withLock { stderrData }, as: UTF8.self))
    }

    public struct Running: @unchecked Sendable {
        public let process: Spawned

        public func kill9() {
            process.signal(SIGKILL)
            process.waitUntilExit()
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
