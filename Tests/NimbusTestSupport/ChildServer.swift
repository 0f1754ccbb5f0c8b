import Foundation

/// The real `nimbus` binary as a child process, for tests that must kill it (`SIGKILL`) and restart it on
/// the same data folder.
public final class ChildServer: @unchecked Sendable {
    public let process = Process()
    public let port: Int
    private let output: Pipe

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
        process.executableURL = Self.binary
        process.arguments = ["serve", "--data", data.path, "--port", "0", "--allow-registration", "--log-level", "warning"] + arguments
        output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.standardError
        try process.run()
        var collected = Data()
        var found: Int?
        let deadline = Date().addingTimeInterval(30)
        while found == nil, Date() < deadline {
            let chunk = output.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            collected.append(chunk)
            let text = String(decoding: collected, as: UTF8.self)
            if let range = text.range(of: "http://127.0.0.1:") {
                let digits = text[range.upperBound...].prefix { $0.isNumber }
                found = Int(digits)
            }
        }
        guard let found else {
            process.terminate()
            throw ChildServerError(message: "nimbus serve did not report its port; output: \(String(decoding: collected, as: UTF8.self))")
        }
        port = found
    }

    /// `kill -9`: no shutdown code runs.
    public func kill() {
        Foundation.kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    public func stop() {
        if process.isRunning {
            process.terminate()
            process.waitUntilExit()
        }
    }

    deinit { if process.isRunning { Foundation.kill(process.processIdentifier, SIGKILL) } }
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
    public func run(_ arguments: [String], stdin: String? = nil) throws -> Result {
        let process = start(arguments, stdin: stdin)
        let output = process.output
        let stdoutData = output.stdout.fileHandleForReading.readDataToEndOfFile()
        let stderrData = output.stderr.fileHandleForReading.readDataToEndOfFile()
        process.process.waitUntilExit()
        return Result(
            status: process.process.terminationStatus, stdout: String(decoding: stdoutData, as: UTF8.self),
            stderr: String(decoding: stderrData, as: UTF8.self))
    }

    public struct Running: @unchecked Sendable {
        public let process: Process
        let output: (stdout: Pipe, stderr: Pipe)

        public func kill9() {
            Foundation.kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }

    /// Starts `nimbus arguments…` without waiting.
    public func start(_ arguments: [String], stdin: String? = nil) -> Running {
        let process = Process()
        process.executableURL = ChildServer.binary
        process.arguments = arguments
        process.currentDirectoryURL = workingDirectory
        var environment = ProcessInfo.processInfo.environment
        environment["NIMBUS_HOME"] = home.path
        process.environment = environment
        let stdoutPipe = Pipe()
        let stderrPipe = Pipe()
        process.standardOutput = stdoutPipe
        process.standardError = stderrPipe
        let input = Pipe()
        process.standardInput = input
        try? process.run()
        if let stdin { input.fileHandleForWriting.write(Data((stdin + "\n").utf8)) }
        try? input.fileHandleForWriting.close()
        return Running(process: process, output: (stdoutPipe, stderrPipe))
    }
}
