import Foundation
import NimbusAPI
import NimbusTestSupport
import Testing

/// The servers tests start must not hold this process's standard output or error: when a test process crashes,
/// they live on, and whoever reads its output (CI) would wait for their end — CI once waited so until its time limit.
@Suite("Test servers and this process's streams")
struct TestSupportTests {
    /// Where `/proc/PID/fd/N` points (`pipe:[inode]`, a path, …).
    static func target(_ pid: Int32, _ fd: Int) throws -> String {
        try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\(fd)")
    }

    @Test("nimbus serve children and the shared WebDAV and S3 servers write neither to this process's stdout nor to its stderr")
    func streamsNotShared() throws {
        let ours = Set(try [1, 2].map { try Self.target(getpid(), $0) }).subtracting(["/dev/null"])
        let data = FileManager.default.temporaryDirectory.appending(path: "nimbus-streams-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: data) }
        let server = try ChildServer(data: data)
        defer { server.stop() }
        _ = try TestServices.webdav("rclone")
        _ = try TestServices.s3()
        var children = [server.process.pid]
        // The shared servers are this process's children too (listed under the thread that started each).
        for task in try FileManager.default.contentsOfDirectory(atPath: "/proc/\(getpid())/task") {
            let listed = (try? String(contentsOfFile: "/proc/\(getpid())/task/\(task)/children", encoding: .utf8)) ?? ""
            children += listed.split(separator: " ").compactMap { Int32($0) }
        }
        #expect(children.count >= 3)
        for pid in Set(children) {
            for fd in [1, 2] {
                guard let theirs = try? Self.target(pid, fd) else { continue }  // ended meanwhile
                #expect(!ours.contains(theirs), "process \(pid) writes its fd \(fd) to this process's (\(theirs))")
            }
        }
    }

    @Test("a child started by the tests inherits no descriptor past its standard streams, not even one that is not close-on-exec (as SwiftNIO's accepted sockets are not)")
    func nothingInherited() throws {
        let socket = Foundation.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #expect(socket > 2)
        defer { close(socket) }
        #expect(fcntl(socket, F_GETFD) & FD_CLOEXEC == 0, "the probe is inheritable by default")
        let listed = try Spawned.run("/bin/ls", ["/proc/self/fd"])
        #expect(listed.status == 0)
        let descriptors = Set(String(decoding: listed.output, as: UTF8.self).split(whereSeparator: \.isWhitespace).compactMap { Int32($0) })
        // ls sees 0, 1, 2 and the folder it reads (one more descriptor, the lowest free one).
        #expect(!descriptors.contains(socket), "the child holds this process's socket \(socket): \(descriptors.sorted())")
        #expect(descriptors.count <= 4, "\(descriptors.sorted())")
    }

    @Test("the token sniffer finds a link's token in a list, a public answer or a header, and lets the answers that make and show it be")
    func tokenSniffer() async throws {
        try await TestServer.run { server in
            let alice = try await server.signUp()
            let folder = try await alice.mkdir("Shared")
            let made = try await alice.send(.POST, "/v1/files/\(folder.id)/links", json: LinkRequest(access: .view))
            let token = try #require(try made.decode(Link.self).token)
            let listed = try await alice.get("/v1/links")
            let transcript = Transcript.take(server.baseURL)
            #expect(transcript.count >= 4)
            #expect(TokenSniffer.leaks(in: transcript).isEmpty, "the suite's own answers are clean")
            // The same answers, one of them made to leak the token three ways.
            for leak in [
                Transcript.Entry(method: "GET", path: "/v1/links", status: 200, headers: "", body: listed.text + token),
                Transcript.Entry(method: "GET", path: "/v1/public/x/items", status: 200, headers: "", body: "{\"url\":\"/v1/public/\(token)/items\"}"),
                Transcript.Entry(method: "GET", path: "/v1/files", status: 404, headers: "Location: /s/\(token)", body: ""),
            ] {
                #expect(TokenSniffer.leaks(in: transcript + [leak]).count == 1, "\(leak.path)")
            }
        }
    }
}
