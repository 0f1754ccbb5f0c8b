import ArgumentParser
import Foundation
import GRDB
import NIOCore
import NIOPosix
import NimbusServer
import NimbusSync

/// `nimbus`: the Drive server, its administration, and the reference client (file commands, folder sync).
/// Client state lives in `$NIMBUS_HOME` (default `~/.nimbus`): one home, one device.
@main
struct Nimbus: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "nimbus",
        abstract: "A self-hostable file drive: the server, and the tools around it.",
        version: "0.1.0",
        subcommands: [
            Serve.self, User.self, Login.self, Logout.self, PassphraseCommand.self, UnlockCommand.self, LockCommand.self, WhoAmI.self, AboutCommand.self, List.self, MakeDirectory.self, Remove.self,
            Move.self, Put.self, Get.self, Versions.self, Restore.self, Trash.self, Untrash.self, Uploads.self, Status.self,
            Conflicts.self, SyncCommand.self, SelectCommand.self, FreeCommand.self, HydrateCommand.self, PinCommand.self, UnpinCommand.self, OpenCommand.self, ShareCommand.self, SharesCommand.self, AcceptCommand.self, DeclineCommand.self, LeaveCommand.self, LinkCommand.self,
            RemoteCommand.self, AppPasswordCommand.self, AdminCommand.self,
        ])

    /// As `AsyncParsableCommand.main()`, with errors a user can act on said so (a full disk under the client's
    /// state was "SQLite error 13: database or disk is full - while executing `COMMIT TRANSACTION`").
    static func main() async {
        MemoryTuning.keepLargeBuffers()
        do {
            var command = try parseAsRoot()
            if !(command is Serve), ProcessInfo.processInfo.environment["NIMBUS_CONCURRENCY_POOL"] == nil {
                // A client's tasks run on the event loops its HTTP connections live on: no thread hop per request.
                // Sending 10,000 small files by WebDAV: a quarter of the context switches (`perf stat`: 21–25k vs
                // 86–99k), client CPU 5.5–6.2 s vs 7.4–7.6 (this machine's noise is as large in some runs). Not the
                // server's: its handlers block on SQLite, which would hold every connection of their event loop.
                // `NIMBUS_CONCURRENCY_POOL=1` keeps Swift's own pool (to compare).
                NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()
            }
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch {
            exit(withError: explained(error))
        }
    }

    static func explained(_ error: any Error) -> any Error {
        if let database = error as? DatabaseError, database.resultCode == .SQLITE_FULL {
            return CLIError(
                "The disk holding \(Home.current.url.path) is full: this device's sync state could not be saved, and the step that "
                    + "needed it was not taken (what was saved before stays). Free some space there and run the command again.")
        }
        // A file error (a home or folder this user may not write, a disk full or read-only): the path and the reason,
        // not Foundation's dump ("Error Domain=NSCocoaErrorDomain Code=513 … UserInfo={…}").
        let nsError = error as NSError
        if nsError.domain == NSCocoaErrorDomain, LocalWriteError.posixCode(of: error) != nil {
            let path = (nsError.userInfo[NSFilePathErrorKey] as? String) ?? (nsError.userInfo[NSURLErrorKey] as? URL)?.path ?? ""
            let home = Home.current.url.path
            let whose = path.hasPrefix(home) || home.hasPrefix(path) ? " (this device's state: NIMBUS_HOME is \(home))" : ""
            return CLIError("Cannot use \(path)\(whose): \(LocalWriteError.reason(error)).")
        }
        return error
    }
}

#if canImport(Glibc)
import Glibc
#endif

/// glibc's allocator, set for a process that moves blocks in buffers of 1–16 MiB (a batch of blocks, a pack being
/// written, a download's runs).
enum MemoryTuning {
    /// Buffers up to 32 MiB come from the heap and, freed, stay there for the next one, instead of each being a fresh
    /// `mmap` the kernel faults in and zeroes page by page and `munmap`s again: `perf` put that zeroing
    /// (`clear_page_erms`) at a sixth of the client's CPU sending a big file. glibc's own adjustment never reaches
    /// it: it raises the threshold to the size of a freed mapping, and a buffer of that same size is mapped again.
    /// The heap keeps at most 64 MiB free at its top before giving memory back.
    static func keepLargeBuffers() {
        #if canImport(Glibc)
        // `mallopt` is in <malloc.h>, which the Glibc module leaves out: looked up by name, called as C.
        typealias Mallopt = @convention(c) (Int32, Int32) -> Int32
        guard let symbol = dlsym(nil, "mallopt") else { return }
        let mallopt = unsafeBitCast(symbol, to: Mallopt.self)
        _ = mallopt(-3, 32 << 20)  // M_MMAP_THRESHOLD
        _ = mallopt(-1, 64 << 20)  // M_TRIM_THRESHOLD
        #endif
    }
}
