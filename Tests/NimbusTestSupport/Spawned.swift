import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A child process started with `posix_spawn`, its standard streams on pipes.
///
/// Not `Foundation.Process`: on Linux its `run()` reads `/proc/self/fd` past the end of glibc's buffer and crashes
/// the calling process now and then (swift-corelibs-foundation PR #5472, not in Swift 6.3.1); with a thousand
/// descriptors open in a parallel test run it took the whole test process down in CI.
public final class Spawned: @unchecked Sendable {
    public let pid: pid_t
    /// Write end of the child's standard input (`nil` once closed).
    public private(set) var input: FileHandle?
    public let output: FileHandle
    /// `nil` when the child writes to this process's standard error.
    public let errors: FileHandle?
    private let lock = NSLock()
    private var status: Int32?

    public init(_ executable: String, _ arguments: [String], environment: [String: String]? = nil, directory: String? = nil, captureErrors: Bool = true)
        throws
    {
        func makePipe() throws -> (read: Int32, write: Int32) {
            var fds: [Int32] = [0, 0]
            // Close-on-exec from the start: another test's child spawned meanwhile must not inherit our ends.
            guard Self.pipe2(&fds, O_CLOEXEC) == 0 else { throw ChildServerError(message: "pipe failed (errno \(errno))") }
            return (fds[0], fds[1])
        }
        let stdin = try makePipe(), stdout = try makePipe()
        let stderr = captureErrors ? try makePipe() : nil
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, stdin.read, 0)
        posix_spawn_file_actions_adddup2(&actions, stdout.write, 1)
        if let stderr { posix_spawn_file_actions_adddup2(&actions, stderr.write, 2) }
        if let directory { _ = Self.addChdir(&actions, directory) }
        let argv = [executable] + arguments
        var cArguments = argv.map { strdup($0) } + [nil]
        defer { for pointer in cArguments { free(pointer) } }
        let env = (environment ?? ProcessInfo.processInfo.environment).map { "\($0.key)=\($0.value)" }
        var cEnvironment = env.map { strdup($0) } + [nil]
        defer { for pointer in cEnvironment { free(pointer) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, executable, &actions, nil, &cArguments, &cEnvironment)
        close(stdin.read)
        close(stdout.write)
        if let stderr { close(stderr.write) }
        guard spawned == 0 else {
            close(stdin.write)
            close(stdout.read)
            if let stderr { close(stderr.read) }
            throw ChildServerError(message: "\(executable) could not be started (errno \(spawned))")
        }
        self.pid = pid
        input = FileHandle(fileDescriptor: stdin.write, closeOnDealloc: true)
        output = FileHandle(fileDescriptor: stdout.read, closeOnDealloc: true)
        errors = stderr.map { FileHandle(fileDescriptor: $0.read, closeOnDealloc: true) }
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
