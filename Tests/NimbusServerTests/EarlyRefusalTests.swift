#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOPosix
import NimbusAPI
@testable import NimbusServer
import Testing

/// A request the server refuses before reading its body is still answered to a client that writes its whole body
/// before it reads anything (Python's urllib, many HTTP libraries) — with `Connection: close`, which urllib always
/// sends, and without.
@Suite("Early refusals with big bodies")
struct EarlyRefusalTests {
    static let bodySize = 16 << 20

    @Test("a bad token, a wrong WebDAV password, an unknown upload session and a taken name are answered to a client that writes 16 MiB first")
    func answeredAfterTheWholeBody() async throws {
        try await TestServer.run { server in
            let alice = try await server.signUp("alice")
            _ = try await alice.upload("taken.bin", Data("here first".utf8))
            let token = try #require(alice.token)
            try await Self.expectAnswers(
                server,
                [
                    ("POST", "/v1/upload?uploadType=media&name=x.bin", ["Authorization": "Bearer not-a-token"], 401),
                    ("PUT", "/v1/blocks/" + String(repeating: "0", count: 64), ["Authorization": "Bearer not-a-token"], 401),
                    ("PUT", "/dav/big.bin", ["Authorization": "Basic " + Data("alice:wrong".utf8).base64EncodedString()], 401),
                    ("PUT", "/v1/upload/up-unknown/chunk", ["Authorization": "Bearer \(token)", "Content-Range": "bytes 0-\(Self.bodySize - 1)/\(Self.bodySize)"], 404),
                    ("POST", "/v1/upload?uploadType=media&name=taken.bin", ["Authorization": "Bearer \(token)"], 409),
                ])
            // Nothing was stored by any of them, and the server goes on answering.
            #expect(try await alice.list().files.map(\.name) == ["taken.bin"])
        }
    }

    @Test("an upload over the quota is answered 507 to a client that writes 16 MiB first")
    func quotaAnsweredAfterTheWholeBody() async throws {
        try await TestServer.run(configure: { $0.defaultQuota = 1 << 20 }) { server in
            let alice = try await server.signUp("alice")
            let token = try #require(alice.token)
            try await Self.expectAnswers(server, [("POST", "/v1/upload?uploadType=media&name=big.bin", ["Authorization": "Bearer \(token)"], 507)])
            #expect(try await alice.list().files.isEmpty)
        }
    }

    /// Each request sent with and without `Connection: close`, its whole body written before the answer is read.
    static func expectAnswers(_ server: TestServer, _ cases: [(String, String, [String: String], Int)]) async throws {
        for (method, path, headers, status) in cases {
            for close in [true, false] {
                var all = headers
                if close { all["Connection"] = "close" }
                let answer = try await RawHTTP.send(port: server.port, method: method, path: path, headers: all, bodySize: bodySize)
                #expect(answer.status == status, "\(method) \(path) (Connection: close \(close)): \(answer.status) \(answer.body.prefix(200))")
                #expect(answer.body.contains("\"error\"") || path.hasPrefix("/dav/"), "a JSON error body: \(answer.body.prefix(200))")
            }
        }
    }

    @Test("a connection opened and never used (an HTTP client's spare) neither keeps a stopping server waiting nor outlives the idle timeout")
    func unusedConnections() async throws {
        let spare = NIOLockedValueBox<Int32>(-1)
        let stopped = NIOLockedValueBox(false)
        let stopBegan = NIOLockedValueBox<Date?>(nil)
        // Stopping: the server ends the connection and stops (it used to wait for the client for ever). Run apart,
        // so a server still waiting long after its stop began is a failure, not a hang: the client then lets go
        // itself. The wait is counted from the stop, and generous: a whole test run in parallel on two cores can
        // make a plain start, request and stop take over a minute.
        let run = Task {
            defer { stopped.withLockedValue { $0 = true } }
            try await TestServer.run { server in
                let fd = try RawHTTP.connected(port: server.port, timeout: 30)
                spare.withLockedValue { $0 = fd }
                #expect(try await APIClient(baseURL: server.baseURL).get("/healthz").status == 200, "others are served meanwhile")
                stopBegan.withLockedValue { $0 = Date() }
            }
        }
        let latest = Date().addingTimeInterval(600)
        while !stopped.withLockedValue({ $0 }), Date() < latest {
            if let began = stopBegan.withLockedValue({ $0 }), Date().timeIntervalSince(began) > 120 { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        let fd = spare.withLockedValue { $0 }
        #expect(stopped.withLockedValue { $0 }, "the server stopped while an unused connection was open")
        if stopped.withLockedValue({ $0 }) {
            #expect(RawHTTP.closedByServer(fd), "the stopping server closed the unused connection")
        }
        close(fd)
        try await run.value
        // Running: an unused connection goes after the idle timeout, like a used one.
        try await TestServer.run(configure: { $0.idleTimeout = .seconds(1) }) { server in
            let idle = try RawHTTP.connected(port: server.port, timeout: 30)
            defer { close(idle) }
            let started = Date()
            #expect(RawHTTP.closedByServer(idle), "closed for idleness")
            #expect(Date().timeIntervalSince(started) < 25, "at the idle timeout (1 s), not at the read timeout")
        }
    }

    @Test("what the upgrade channel logs after a connection was closed unused is debug, not an error; before that, errors stay errors")
    func closedUnusedIsQuiet() {
        let seen = NIOLockedValueBox<[Logger.Level]>([])
        struct Capture: LogHandler {
            let seen: NIOLockedValueBox<[Logger.Level]>
            var metadata: Logger.Metadata = [:]
            var metadataProvider: Logger.MetadataProvider?
            var logLevel: Logger.Level
            subscript(metadataKey key: String) -> Logger.Metadata.Value? {
                get { metadata[key] }
                set { metadata[key] = newValue }
            }
            func log(event: LogEvent) { seen.withLockedValue { $0.append(event.level) } }
        }
        let watcher = FirstBytesWatcher(idleTimeout: nil, eventLoop: MultiThreadedEventLoopGroup.singleton.any())
        for level in [Logger.Level.debug, .info] {
            var logger = Logger(label: "test") { _ in Capture(seen: seen, logLevel: level) }
            logger.handler = QuietWhenClosedUnused(inner: logger.handler, watcher: watcher)
            watcher.closedUnused.store(false, ordering: .relaxed)
            logger.error("Error handling upgrade result")
            watcher.closedUnused.store(true, ordering: .relaxed)
            logger.error("Error handling upgrade result")
            logger.trace("below the level")
        }
        #expect(seen.withLockedValue { $0 } == [.error, .debug, .error], "at info level the quieted error is not written at all")
    }

}

/// HTTP/1.1 over a blocking socket, written the way a simple client writes: the head, the whole body, then the answer.
/// Send and receive time-outs (20 s) turn a server that never answers into a failure instead of a hang.
enum RawHTTP {
    struct Answer: Sendable {
        var status: Int
        var body: String
    }

    /// On a thread of its own: blocking calls on Swift's cooperative pool would starve the server under test.
    static func send(port: Int, method: String, path: String, headers: [String: String], bodySize: Int) async throws -> Answer {
        try await withCheckedThrowingContinuation { continuation in
            Thread {
                continuation.resume(with: Result { try sendBlocking(port: port, method: method, path: path, headers: headers, bodySize: bodySize) })
            }.start()
        }
    }

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// A TCP connection to the server, reads and writes timing out after `timeout` seconds.
    static func connected(port: Int, timeout seconds: Int = 20) throws -> Int32 {
        #if canImport(Glibc)
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
            let fd = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard fd >= 0 else { throw Failure(description: "socket: errno \(errno)") }
        var timeout = timeval(tv_sec: seconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            close(fd)
            throw Failure(description: "connect: errno \(errno)")
        }
        return fd
    }

    /// Whether the server ended the connection (end of stream, or a reset) before `fd`'s read timeout.
    static func closedByServer(_ fd: Int32) -> Bool {
        var byte: UInt8 = 0
        let count = recv(fd, &byte, 1, 0)
        return count == 0 || (count < 0 && errno == ECONNRESET)
    }

    static func sendBlocking(port: Int, method: String, path: String, headers: [String: String], bodySize: Int) throws -> Answer {
        let fd = try connected(port: port)
        defer { close(fd) }

        var head = "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nContent-Length: \(bodySize)\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        head += "\r\n"
        try writeAll(fd, Array(head.utf8))
        let piece = [UInt8](repeating: 0x61, count: 1 << 20)
        var sent = 0
        while sent < bodySize {
            let count = min(piece.count, bodySize - sent)
            do { try writeAll(fd, Array(piece[0..<count])) } catch {
                throw Failure(description: "\(method) \(path): the body could not be written after \(sent) bytes (\(error)): the server neither read it nor answered")
            }
            sent += count
        }
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = recv(fd, &buffer, buffer.count, 0)
            if count > 0 {
                received += buffer[0..<count]
                if let answer = complete(received) { return answer }
            } else if count == 0 {
                break
            } else {
                throw Failure(description: "\(method) \(path): no answer after the whole body (errno \(errno))")
            }
        }
        guard let answer = complete(received) else { throw Failure(description: "\(method) \(path): the connection closed without a whole answer") }
        return answer
    }

    static func writeAll(_ fd: Int32, _ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard written > 0 else { throw Failure(description: "errno \(errno)") }
            offset += written
        }
    }

    /// The answer, once its head and `Content-Length` bytes of body are in.
    static func complete(_ bytes: [UInt8]) -> Answer? {
        let text = String(decoding: bytes, as: UTF8.self)
        guard let end = text.range(of: "\r\n\r\n") else { return nil }
        let head = text[..<end.lowerBound]
        let statusLine = head.split(separator: "\r\n").first ?? ""
        guard let status = Int(statusLine.split(separator: " ").dropFirst().first ?? "") else { return nil }
        let length = head.split(separator: "\r\n").dropFirst().compactMap { line -> Int? in
            let parts = line.split(separator: ":", maxSplits: 1)
            guard parts.count == 2, parts[0].lowercased() == "content-length" else { return nil }
            return Int(parts[1].trimmingCharacters(in: .whitespaces))
        }.first ?? 0
        let body = String(text[end.upperBound...])
        guard body.utf8.count >= length else { return nil }
        return Answer(status: status, body: body)
    }
}
