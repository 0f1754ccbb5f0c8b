import Foundation
import NimbusTestSupport
import Testing

/// `nimbus login --encrypt`: the real binary, a real server, the device's whole `NIMBUS_HOME` scanned.
@Suite("Encrypted device store (CLI)")
struct EncryptedStoreTests {
    /// Needles found anywhere under `folder`, with the file they are in.
    static func readable(_ needles: [Data], under folder: URL) -> [String] {
        var found: [String] = []
        let files = FileManager.default.enumerator(at: folder, includingPropertiesForKeys: nil)
        while let url = files?.nextObject() as? URL {
            guard let data = try? Data(contentsOf: url) else { continue }
            for needle in needles where data.range(of: needle) != nil {
                found.append("\(String(decoding: needle.prefix(40), as: UTF8.self)) in \(url.lastPathComponent)")
            }
        }
        return found
    }

    @Test("login --encrypt: put, sync, get and a put killed with -9 work; no name or content is readable in the store; a missing or wrong passphrase is a clear error")
    func encryptedHome() throws {
        let bench = try Bench(serverArguments: ["--chunk-size", "256KiB"])
        _ = try bench.device("registrar", user: "eve")  // registers eve
        let work = try bench.folder("work-E")
        let device = CLIDevice(home: bench.root.appending(path: "home-E"), workingDirectory: work)
        let unlocked = ["NIMBUS_PASSPHRASE": "correct battery staple"]

        let login = try device.run(
            ["login", bench.server.baseURL, "--username", "eve", "--password-stdin", "--encrypt"], stdin: "correct horse", environment: unlocked)
        #expect(login.status == 0, "\(login.stderr)")
        #expect(login.stdout.contains("encrypted"))

        let memo = "The acquisition of Initech closes on March 3rd; confidential."
        try Data(memo.utf8).write(to: work.appending(path: "acquisition-memo-initech.txt"))
        let put = try device.run(["put", "acquisition-memo-initech.txt", "/"], environment: unlocked)
        #expect(put.status == 0, "\(put.stderr)")

        // Locked: every command that opens the store says what to do, and changes nothing.
        let locked = try device.run(["ls", "/"])
        #expect(locked.status != 0)
        #expect(locked.stderr.contains("NIMBUS_PASSPHRASE"), "\(locked.stderr)")
        let wrong = try device.run(["ls", "/"], environment: ["NIMBUS_PASSPHRASE": "not the passphrase"])
        #expect(wrong.status != 0)
        #expect(wrong.stderr.contains("wrong"), "\(wrong.stderr)")
        #expect(try device.run(["sync", "--help"]).status == 0)

        // A synced folder: its state (names, partial downloads) is encrypted too.
        let folder = try bench.folder("board-E")
        try Data("Minutes: the board approved the layoffs plan.".utf8).write(to: folder.appending(path: "board-minutes-secret.txt"))
        let sync = try device.run(["sync", folder.path, "/board-papers-folder", "--once"], environment: unlocked)
        #expect(sync.status == 0, "\(sync.stderr)")
        let listed = try device.run(["ls", "/board-papers-folder"], environment: unlocked)
        #expect(listed.stdout.contains("board-minutes-secret.txt"), "\(listed.stdout) \(listed.stderr)")

        // A folder pair with a remote whose ids are paths (a local-folder remote): those ids are sealed too.
        let nas = try bench.folder("nas-E")
        #expect(try device.run(["remote", "add", "nas", "local", nas.path], environment: unlocked).status == 0)
        let mirror = try bench.folder("mirror-E")
        try Data("Salary review for the whole team".utf8).write(to: mirror.appending(path: "salary-review-private.txt"))
        let toNas = try device.run(["sync", mirror.path, "nas:/mirror-private-folder", "--once"], environment: unlocked)
        #expect(toNas.status == 0, "\(toNas.stderr)")
        #expect(FileManager.default.fileExists(atPath: nas.appending(path: "mirror-private-folder/salary-review-private.txt").path))

        // A big put killed with -9 mid-transfer (its staged copy sealed) resumes with the same command.
        var bytes = [UInt8](repeating: 0, count: 24 * 1024 * 1024)
        for index in bytes.indices { bytes[index] = UInt8(truncatingIfNeeded: index &* 2654435761 >> 7) }
        let big = Data(bytes)
        try big.write(to: work.appending(path: "quarterly-video-call.bin"))
        let running = device.start(["put", "quarterly-video-call.bin", "/quarterly-video-call.bin"], environment: unlocked)
        Thread.sleep(forTimeInterval: 1.0)
        running.kill9()
        let again = try device.run(["put", "quarterly-video-call.bin", "/quarterly-video-call.bin"], environment: unlocked)
        #expect(again.status == 0, "\(again.stderr)")
        let get = try device.run(["get", "/quarterly-video-call.bin", "back.bin"], environment: unlocked)
        #expect(get.status == 0, "\(get.stderr)")
        #expect(try Data(contentsOf: work.appending(path: "back.bin")) == big)
        #expect(try device.run(["get", "/acquisition-memo-initech.txt", "memo.txt"], environment: unlocked).status == 0)
        #expect(try String(contentsOf: work.appending(path: "memo.txt"), encoding: .utf8) == memo)
        // `get REMOTE -`: the content on standard output (opened from the sealed store, never written out in the clear:
        // the scan below would find it), progress on standard error, no file named "-".
        let piped = try device.run(["get", "/acquisition-memo-initech.txt", "-"], environment: unlocked)
        #expect(piped.status == 0 && piped.stdout == memo, "\(piped.stderr)")
        func storeBytes() -> Int {
            (FileManager.default.enumerator(at: device.home, includingPropertiesForKeys: [.fileSizeKey])?.allObjects as? [URL] ?? [])
                .reduce(0) { $0 + ((try? $1.resourceValues(forKeys: [.fileSizeKey]).fileSize) ?? 0) }
        }
        let before = storeBytes()
        let bigPiped = device.start(["get", "/quarterly-video-call.bin", "-", "--quiet"], environment: unlocked).process.finish()
        #expect(bigPiped.status == 0 && bigPiped.output == big, "\(String(decoding: bigPiped.errors, as: UTF8.self))")
        #expect(storeBytes() < before + 4 * 1024 * 1024, "no copy of the 24 MiB file kept in NIMBUS_HOME: \(before) → \(storeBytes()) bytes")
        #expect(!FileManager.default.fileExists(atPath: work.appending(path: "-").path))
        let pipedMissing = try device.run(["get", "/no-such-file.txt", "-"], environment: unlocked)
        #expect(pipedMissing.status != 0 && pipedMissing.stdout.isEmpty && pipedMissing.stderr.contains("no such file"), "\(pipedMissing.stderr)")
        // `put - REMOTE`: standard input (a pipe) into the store, sealed, then sent; it needs a name; a name taken is
        // refused unless --on-conflict says otherwise.
        let pipedPut = try device.run(["put", "-", "/board-papers-folder/piped-layoffs-note.txt"], stdin: "layoffs plan, piped in", environment: unlocked)
        #expect(pipedPut.status == 0, "\(pipedPut.stderr)")
        let pipedBack = try device.run(["get", "/board-papers-folder/piped-layoffs-note.txt", "-"], environment: unlocked)
        #expect(pipedBack.stdout == "layoffs plan, piped in\n", "\(pipedBack.stderr)")  // the harness ends stdin with a newline
        let unnamed = try device.run(["put", "-"], stdin: "x", environment: unlocked)
        #expect(unnamed.status != 0 && unnamed.stderr.contains("name the remote file"), "\(unnamed.stderr)")
        let taken = try device.run(["put", "-", "/board-papers-folder/piped-layoffs-note.txt"], stdin: "other", environment: unlocked)
        #expect(taken.status != 0 && taken.stderr.contains("already exists"), "\(taken.stderr)")
        let replaced = try device.run(
            ["put", "-", "/board-papers-folder/piped-layoffs-note.txt", "--on-conflict", "replace"], stdin: "layoffs plan v2", environment: unlocked)
        #expect(replaced.status == 0, "\(replaced.stderr)")
        let replacedBack = try device.run(["get", "/board-papers-folder/piped-layoffs-note.txt", "-"], environment: unlocked)
        #expect(replacedBack.stdout == "layoffs plan v2\n", "\(replacedBack.stderr)")

        let needles = [
            "acquisition-memo-initech", "board-minutes-secret", "quarterly-video-call", "board-papers-folder", memo, "layoffs plan",
            "salary-review-private", "mirror-private-folder", "Salary review", "piped-layoffs-note", "layoffs plan, piped in",
            "layoffs plan v2",
        ]
            .map { Data($0.utf8) } + [big.subdata(in: 5_000_000..<5_000_064), big.subdata(in: 20_000_000..<20_000_064)]
        #expect(Self.readable(needles, under: device.home) == [])

        // A new passphrase: the old one no longer opens the store, the new one does.
        let change = try device.run(["passphrase", "--new-passphrase-stdin"], stdin: "a whole new phrase", environment: unlocked)
        #expect(change.status == 0, "\(change.stderr)")
        #expect(try device.run(["ls", "/"], environment: unlocked).status != 0)
        #expect(try device.run(["ls", "/"], environment: ["NIMBUS_PASSPHRASE": "a whole new phrase"]).stdout.contains("acquisition-memo-initech.txt"))

        // Wiping: the key and the store are gone; the synced folder stays.
        let wipe = try device.run(["logout", "--wipe"], environment: ["NIMBUS_PASSPHRASE": "a whole new phrase"])
        #expect(wipe.status == 0, "\(wipe.stderr)")
        #expect(!FileManager.default.fileExists(atPath: device.home.appending(path: "library/store-key.json").path))
        #expect(FileManager.default.fileExists(atPath: folder.appending(path: "board-minutes-secret.txt").path))
    }

    @Test(
        "unlock keeps the key in the kernel keyring for a while: commands need no passphrase until lock, the time is up or logout --wipe",
        .enabled(if: FileManager.default.fileExists(atPath: "/usr/lib/x86_64-linux-gnu/libkeyutils.so.1")
            || FileManager.default.fileExists(atPath: "/usr/lib/aarch64-linux-gnu/libkeyutils.so.1")))
    func unlockAndLock() throws {
        let bench = try Bench()
        _ = try bench.device("registrar", user: "uma")
        let work = try bench.folder("work-U")
        let device = CLIDevice(home: bench.root.appending(path: "home-U"), workingDirectory: work)
        let passphrase = ["NIMBUS_PASSPHRASE": "a long walk to the lighthouse"]
        let login = try device.run(["login", bench.server.baseURL, "--username", "uma", "--password-stdin", "--encrypt"], stdin: "correct horse", environment: passphrase)
        #expect(login.status == 0, "\(login.stderr)")
        #expect(try device.run(["ls", "/"]).status != 0, "locked: no passphrase, no keyring entry")

        // Bad input changes nothing.
        let bad = try device.run(["unlock", "--for", "forever"], environment: passphrase)
        #expect(bad.status != 0 && bad.stderr.contains("--for"), "\(bad.stderr)")
        let wrong = try device.run(["unlock"], environment: ["NIMBUS_PASSPHRASE": "not it"])
        #expect(wrong.status != 0 && wrong.stderr.contains("wrong"), "\(wrong.stderr)")
        #expect(try device.run(["ls", "/"]).status != 0, "a wrong passphrase unlocked nothing")

        let unlock = try device.run(["unlock", "--for", "10m"], environment: passphrase)
        #expect(unlock.status == 0 && unlock.stdout.contains("10 minutes"), "\(unlock.stdout) \(unlock.stderr)")
        try Data("unlocked".utf8).write(to: work.appending(path: "note.txt"))
        let put = try device.run(["put", "note.txt", "/"])
        #expect(put.status == 0, "no passphrase needed: \(put.stderr)")
        #expect(try device.run(["ls", "/"]).stdout.contains("note.txt"))
        let lock = try device.run(["lock"])
        #expect(lock.status == 0, "\(lock.stderr)")
        let locked = try device.run(["ls", "/"])
        #expect(locked.status != 0 && locked.stderr.contains("NIMBUS_PASSPHRASE"), "\(locked.stderr)")

        // The time runs out by itself.
        #expect(try device.run(["unlock", "--for", "2s"], environment: passphrase).status == 0)
        #expect(try device.run(["ls", "/"]).status == 0)
        Thread.sleep(forTimeInterval: 3.5)
        #expect(try device.run(["ls", "/"]).status != 0, "expired after two seconds")

        // A new passphrase ends an unlock made with the old wrapping; logout --wipe forgets the key too.
        #expect(try device.run(["unlock"], environment: passphrase).status == 0)
        let changed = try device.run(["passphrase", "--new-passphrase-stdin"], stdin: "another passphrase\n", environment: passphrase)
        #expect(changed.status == 0, "\(changed.stderr)")
        #expect(try device.run(["ls", "/"]).status != 0, "the unlock ended with the old wrapping")
        #expect(try device.run(["unlock"], environment: ["NIMBUS_PASSPHRASE": "another passphrase"]).status == 0)
        #expect(try device.run(["ls", "/"]).status == 0)
        let wipe = try device.run(["logout", "--wipe"])
        #expect(wipe.status == 0, "\(wipe.stderr)")
        let again = try device.run(
            ["login", bench.server.baseURL, "--username", "uma", "--password-stdin", "--encrypt"], stdin: "correct horse", environment: passphrase)
        #expect(again.status == 0, "\(again.stderr)")
        #expect(try device.run(["ls", "/"]).status != 0, "a new store is locked")
        #expect(try device.run(["lock"]).status == 0)
    }
}
