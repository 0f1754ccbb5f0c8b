import Foundation
import Testing

/// The real `nimbus` binary as a child process, for tests that must kill it (`SIGKILL`) and restart it on
/// the same data folder.
final class ChildServer: @unchecked Sendable {
    let process = Process()
    let port: Int
    private let output: Pipe

    var baseURL: String { "http://127.0.0.1:\(port)" }

    /// The binary `swift build` made: `$NIMBUS_BINARY`, or `.build/debug/nimbus` in this checkout.
    static var binary: URL {
        if let path = ProcessInfo.processInfo.environment["NIMBUS_BINARY"] { return URL(fileURLWithPath: path) }
        let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent()
        return repository.appending(path: ".build/debug/nimbus")
    }

    /// Starts `nimbus serve --port 0 …` and waits for the line that names the port.
    init(data: URL, arguments: [String] = []) throws {
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
    func kill() {
        Foundation.kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    func stop() {
        if process.isRunning {
            process.terminate()
            process.waitUntilExit()
        }
    }

    deinit { if process.isRunning { Foundation.kill(process.processIdentifier, SIGKILL) } }
}

struct ChildServerError: Error, CustomStringConvertible {
    var message: String
    var description: String { message }
}
