import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A child process started with `posix_spawn`, its standard streams on pipes (or where ``Stream`` says).
///
/// Not `Foundation.Process`: on Linux its `run()` reads `/proc/self/fd` past the end of glibc's buffer and crashes
/// the calling process now and then (swift-corelibs-foundation PR #5472, not in Swift 6.3.1); with a thousand
/// descriptors open in a parallel test run it took the whole test process down in CI.
public final class Spawned: @unchecked Sendable {
    public let pid: pid_t
    /// Write end of the child's standard input (`nil` once closed).
    public private(set) var input: FileHandle?
    /// The child's standard output (nothing when it is not ``Stream/pipe``).
    public let output: FileHandle
    /// The child's standard error when it is ``Stream/pipe``.
    public let errors: FileHandle?
    private let lock = NSLock()
    private var status: Int32?

    /// Where a child's standard output or error goes.
    public enum Stream: Sendable, Equatable {
        /// A pipe this process reads: ``output``, ``errors``.
        case pipe
        /// `/dev/null`.
        case discard
        /// Appended to this file. Never this process's own stream: a child that outlives a crashed test process
        /// (a server it started) would hold CI's pipe open, and CI waited on it until its time limit.
        case file(String)
        /// Errors only: into the output's pipe, one stream of both.
        case output
    }

    public init(
        _ executable: String, _ arguments: [String], environment: [String: String]? = nil, directory: String? = nil, output: Stream = .pipe,
        errors: Stream = .pipe
    ) throws {
        func makePipe() throws -> (read: Int32, write: Int32) {
            var fds: [Int32] = [0, 0]
            // Close-on-exec from the start: another test's child spawned meanwhile must not inherit our ends.
            guard Self.pipe2(&fds, O_CLOEXEC) == 0 else { throw ChildServerError(message: "pipe failed (errno \(errno))") }
            return (fds[0], fds[1])
        }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        // The child's ends of the pipes, closed here once it has them.
        var childEnds: [Int32] = []
        defer { for fd in childEnds { close(fd) } }
        let stdin = try makePipe()
        childEnds.append(stdin.read)
        posix_spawn_file_actions_adddup2(&actions, stdin.read, 0)
        func route(_ stream: Stream, to fd: Int32) throws -> Int32? {
            switch stream {
            case .pipe:
                let pipe = try makePipe()
                childEnds.append(pipe.write)
                posix_spawn_file_actions_adddup2(&actions, pipe.write, fd)
                return pipe.read
            case .discard:
                posix_spawn_file_actions_addopen(&actions, fd, "/dev/null", O_WRONLY, 0)
            case .file(let path):
                posix_spawn_file_actions_addopen(&actions, fd, path, O_WRONLY | O_CREAT | O_APPEND, 0o644)
            case .output:
                posix_spawn_file_actions_adddup2(&actions, 1, fd)
            }
            return nil
        }
        let outputRead = try route(output == .output ? .pipe : output, to: 1)
        let errorsRead = try route(errors, to: 2)
        if let directory { _ = Self.addChdir(&actions, directory) }
        Self.closeInheritedDescriptors(&actions)
        let argv = [executable] + arguments
        var cArguments = argv.map { strdup($0) } + [nil]
        defer { for pointer in cArguments { free(pointer) } }
        let env = (environment ?? ProcessInfo.processInfo.environment).map { "\($0.key)=\($0.value)" }
        var cEnvironment = env.map { strdup($0) } + [nil]
        defer { for pointer in cEnvironment { free(pointer) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, executable, &actions, nil, &cArguments, &cEnvironment)
        guard spawned == 0 else {
            close(stdin.write)
            for fd in [outputRead, errorsRead].compactMap({ $0 }) { close(fd) }
            throw ChildServerError(message: "\(executable) could not be started (errno \(spawned))")
        }
        self.pid = pid
        input = FileHandle(fileDescriptor: stdin.write, closeOnDealloc: true)
        self.output = outputRead.map { FileHandle(fileDescriptor: $0, closeOnDealloc: true) } ?? FileHandle.nullDevice
        self.errors = errorsRead.map { FileHandle(fileDescriptor: $0, closeOnDealloc: true) }
    }

    /// Runs a program to its end, `input` on its standard input: its status and both streams (read at once: a
    /// child that fills one pipe while we wait on the other would never end). Blocks the calling thread.
    public static func run(
        _ executable: String, _ arguments: [String], input: Data? = nil, environment: [String: String]? = nil, directory: String? = nil
    ) throws -> (status: Int32, output: Data, errors: Data) {
        let process = try Spawned(executable, arguments, environment: environment, directory: directory)
        if let input { process.write(input) }
        process.closeInput()
        return process.finish()
    }

    /// Reads both streams to their end and waits for the child: its status and what it wrote.
    public func finish() -> (status: Int32, output: Data, errors: Data) {
        let errorsRead = NSLock()
        nonisolated(unsafe) var errorData = Data()
        let reader = Thread { [errors] in
            let data = errors?.readDataToEndOfFile() ?? Data()
            errorsRead.withLock { errorData = data }
        }
        reader.start()
        let outputData = output.readDataToEndOfFile()
        let status = waitUntilExit()
        while !reader.isFinished { usleep(1000) }
        return (status, outputData, errorsRead.withLock { errorData })
    }

    // glibc's `pipe2` and `posix_spawn_file_actions_addchdir_np` are declared only under _GNU_SOURCE, which the
    // Swift Glibc module does not set: looked up by name.
    private static let pipe2: @convention(c) (UnsafeMutablePointer<Int32>, Int32) -> Int32 = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "pipe2") else { fatalError("glibc has no pipe2") }
        return unsafeBitCast(symbol, to: (@convention(c) (UnsafeMutablePointer<Int32>, Int32) -> Int32).self)
    }()

    private static let addChdir: @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, UnsafePointer<CChar>) -> Int32 = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addchdir_np") else {
            fatalError("glibc has no posix_spawn_file_actions_addchdir_np")
        }
        return unsafeBitCast(symbol, to: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, UnsafePointer<CChar>) -> Int32).self)
    }()

    /// The child closes every descriptor past its standard streams before it starts. Not every descriptor here is
    /// close-on-exec — SwiftNIO's accepted sockets are not —, and a long-lived child (a WebDAV server, PostgreSQL)
    /// that inherits an in-process server's connection keeps it open after both ends here closed it: the peer then
    /// waits for an end that never comes, and a full run hung so, every test slot taken by a wait.
    public static func closeInheritedDescriptors(_ actions: inout posix_spawn_file_actions_t) {
        _ = addCloseFrom(&actions, 3)
    }

    private static let addCloseFrom: @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32 = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addclosefrom_np") else {
            fatalError("glibc has no posix_spawn_file_actions_addclosefrom_np (glibc 2.34 and later do)")
        }
        return unsafeBitCast(symbol, to: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32).self)
    }()

    /// Writes `data` to the child's standard input (nothing if it was closed).
    public func write(_ data: Data) {
        lock.withLock { input }?.write(data)
    }

    public func closeInput() {
        let handle = lock.withLock { () -> FileHandle? in
            defer { input = nil }
            return input
        }
        try? handle?.close()
    }

    /// Waits for the child to end; its exit status, or 128 + the signal that ended it.
    @discardableResult
    public func waitUntilExit() -> Int32 {
        if let status = lock.withLock({ status }) { return status }
        var raw: Int32 = 0
        var result: pid_t
        repeat { result = waitpid(pid, &raw, 0) } while result == -1 && errno == EINTR
        let code = Self.exitCode(raw)
        return lock.withLock {
            if status == nil { status = result == pid ? code : -1 }
            return status ?? -1
        }
    }

    public var isRunning: Bool {
        if lock.withLock({ status }) != nil { return false }
        var raw: Int32 = 0
        let result = waitpid(pid, &raw, WNOHANG)
        guard result == pid else { return result == 0 }
        let code = Self.exitCode(raw)
        lock.withLock { status = code }
        return false
    }

    /// A `waitpid` status as an exit code: the code a normal exit gave, or 128 + the signal that ended it.
    static func exitCode(_ raw: Int32) -> Int32 {
        raw & 0x7f == 0 ? (raw >> 8) & 0xff : 128 + (raw & 0x7f)
    }

    public func signal(_ signal: Int32) {
        if isRunning { Glibc.kill(pid, signal) }
    }
}
