import Foundation
import NimbusAPI
import NimbusTestSupport
import Testing

/// Selective sync, cloud-only files and the metered policy, with the real binary on two devices: nothing a
/// selection or a pin change does deletes anything there, and what leaves the device had been sent.
@Suite("End to end: what lives on each device", .serialized)
struct ResidencyTests {
    func read(_ url: URL) throws -> String { try String(contentsOf: url, encoding: .utf8) }
    func exists(_ url: URL) -> Bool { FileManager.default.fileExists(atPath: url.path) }

    @Test("excluding a folder sends its unsent edit first, removes it here only, and including it brings it back")
    func excludeAndInclude() throws {
        let bench = try Bench()
        let a = try bench.device("A")
        let b = try bench.device("B")
        let folderA = try bench.folder("A")
        let folderB = try bench.folder("B")
        try write("one", to: folderA.appending(path: "Docs/a.txt"))
        try write("two", to: folderA.appending(path: "Docs/Deep/b.txt"))
        try write("top", to: folderA.appending(path: "top.txt"))
        #expect(try a.run(["sync", folderA.path, "/S", "--once"]).status == 0)
        #expect(try b.run(["sync", folderB.path, "/S", "--once"]).status == 0)

        try write("one, edited on A", to: folderA.appending(path: "Docs/a.txt"))
        let excluded = try a.run(["select", folderA.path, "--exclude", "Docs"])
        #expect(excluded.status == 0, "\(excluded.stdout)\(excluded.stderr)")
        #expect(excluded.stdout.contains("↑ Docs/a.txt"), "the unsent edit went first: \(excluded.stdout)")
        #expect(!exists(folderA.appending(path: "Docs")), "the folder left this device")
        #expect(exists(folderA.appending(path: "top.txt")))
        let list = try a.run(["select", folderA.path, "--list"])
        #expect(list.stdout.contains("excluded Docs"), "\(list.stdout)")
        let status = try a.run(["status"])
        #expect(status.stdout.contains("excluded: Docs"), "\(status.stdout)")

        // Nothing was deleted there; the other device gets the edit.
        #expect(try b.run(["sync", folderB.path, "--once"]).status == 0)
        #expect(try read(folderB.appending(path: "Docs/a.txt")) == "one, edited on A")
        #expect(try read(folderB.appending(path: "Docs/Deep/b.txt")) == "two")

        // A change there to an excluded file does not come here; deleting the parent here spares what is excluded.
        try write("two, edited on B", to: folderB.appending(path: "Docs/Deep/b.txt"))
        #expect(try b.run(["sync", folderB.path, "--once"]).status == 0)
        #expect(try a.run(["sync", folderA.path, "--once"]).status == 0)
        #expect(!exists(folderA.appending(path: "Docs")))

        let included = try a.run(["select", folderA.path, "--include", "Docs"])
        #expect(included.status == 0, "\(included.stdout)\(included.stderr)")
        #expect(try read(folderA.appending(path: "Docs/a.txt")) == "one, edited on A")
        #expect(try read(folderA.appending(path: "Docs/Deep/b.txt")) == "two, edited on B")
    }

    @Test("free, a remote edit of a freed file, hydrate, pin, and deleting a placeholder")
    func cloudOnlyFiles() throws {
        let bench = try Bench()
        let a = try bench.device("A")
        let b = try bench.device("B")
        let folderA = try bench.folder("A")
        let folderB = try bench.folder("B")
        let big = String(repeating: "x", count: 200_000)
        try write(big, to: folderA.appending(path: "Videos/v.mp4"))
        try write("small", to: folderA.appending(path: "Videos/note.txt"))
        #expect(try a.run(["sync", folderA.path, "/S", "--once"]).status == 0)
        #expect(try b.run(["sync", folderB.path, "/S", "--once"]).status == 0)

        let freed = try a.run(["free", folderA.appending(path: "Videos").path])
        #expect(freed.status == 0, "\(freed.stdout)\(freed.stderr)")
        let placeholder = folderA.appending(path: "Videos/v.mp4.nimbus")
        #expect(!exists(folderA.appending(path: "Videos/v.mp4")))
        let text = try read(placeholder)
        #expect(text.hasPrefix("#nimbus-placeholder v1\n"), "\(text)")
        #expect(text.contains("size: 200000"), "\(text)")
        #expect(try a.run(["sync", folderA.path, "--once"]).stdout.contains("0 changes"), "a freed folder is settled")

        // Changed there: the placeholder follows, nothing is downloaded.
        try write("short now", to: folderB.appending(path: "Videos/v.mp4"))
        #expect(try b.run(["sync", folderB.path, "--once"]).status == 0)
        let synced = try a.run(["sync", folderA.path, "--once"])
        #expect(!synced.stdout.contains("↓"), "\(synced.stdout)")
        #expect(try read(placeholder).contains("size: 9"))

        // Hydrate by the placeholder's name: the file, placeholder gone, and it stays (the folder is cloud-only).
        let hydrated = try a.run(["hydrate", placeholder.path])
        #expect(hydrated.status == 0, "\(hydrated.stdout)\(hydrated.stderr)")
        #expect(try read(folderA.appending(path: "Videos/v.mp4")) == "short now")
        #expect(!exists(placeholder))
        #expect(try a.run(["sync", folderA.path, "--once"]).stdout.contains("0 changes"), "hydrated stays")

        // Pinned: a new file there in the cloud-only folder comes as a file; unpinned it is freed again.
        #expect(try a.run(["pin", folderA.appending(path: "Videos").path]).status == 0)
        #expect(try read(folderA.appending(path: "Videos/note.txt")) == "small")
        #expect(try a.run(["free", folderA.appending(path: "Videos/note.txt").path]).status == 0)
        #expect(exists(folderA.appending(path: "Videos/note.txt.nimbus")))

        // Deleting a placeholder deletes the file there, to the trash.
        try FileManager.default.removeItem(at: folderA.appending(path: "Videos/note.txt.nimbus"))
        let deleted = try a.run(["sync", folderA.path, "--once"])
        #expect(deleted.stdout.contains("note.txt (deleted here, now in the trash there)"), "\(deleted.stdout)")
        #expect(try b.run(["sync", folderB.path, "--once"]).status == 0)
        #expect(!exists(folderB.appending(path: "Videos/note.txt")))
        #expect(try b.run(["trash"]).stdout.contains("note.txt"))
    }

    @Test("a placeholder edited by hand is an ordinary file; the cloud-only file is not lost")
    func placeholderEditedByHand() throws {
        let bench = try Bench()
        let a = try bench.device("A")
        let folderA = try bench.folder("A")
        try write("the report", to: folderA.appending(path: "report.pdf"))
        #expect(try a.run(["sync", folderA.path, "/S", "--once"]).status == 0)
        #expect(try a.run(["free", folderA.appending(path: "report.pdf").path]).status == 0)
        try write("my own notes\n", to: folderA.appending(path: "report.pdf.nimbus"))
        let run = try a.run(["sync", folderA.path, "--once"])
        #expect(run.status == 0, "\(run.stdout)\(run.stderr)")
        // The inode is the placeholder's: the file renamed to report.pdf.nimbus with new content; the report stays in its history.
        let listing = try a.run(["ls", "/S"])
        #expect(listing.stdout.contains("report.pdf.nimbus"), "\(listing.stdout)")
        #expect(try a.run(["get", "/S/report.pdf.nimbus", "-"]).stdout == "my own notes\n")
        let versions = try a.run(["versions", "/S/report.pdf.nimbus"])
        #expect(versions.stdout.split(separator: "\n").count >= 2, "\(versions.stdout)")
    }

    @Test("on a metered network, metadata-only sends folders and deletions, content waits; pause syncs nothing")
    func metered() throws {
        let bench = try Bench()
        let a = try bench.device("A")
        let folderA = try bench.folder("A")
        #expect(try a.run(["sync", folderA.path, "/S", "--once"]).status == 0)
        try write("content", to: folderA.appending(path: "New/file.txt"))
        let metered = ["NIMBUS_NETWORK_METERED": "1"]
        let paused = try a.run(["sync", folderA.path, "--once", "--on-metered", "pause"], environment: metered)
        #expect(paused.status == 0)
        #expect(paused.stdout.contains("Paused: the network is metered"), "\(paused.stdout)")
        #expect(!(try a.run(["ls", "/S"]).stdout.contains("New")))
        let metadata = try a.run(["sync", folderA.path, "--once", "--on-metered", "metadata-only"], environment: metered)
        #expect(metadata.stdout.contains("+ New/"), "\(metadata.stdout)")
        #expect(metadata.stdout.contains("1 transfer wait for an unmetered network"), "\(metadata.stdout)")
        #expect(!(try a.run(["ls", "/S/New"]).stdout.contains("file.txt")))
        let json = try a.run(["sync", folderA.path, "--once", "--on-metered", "metadata-only", "--json"], environment: metered)
        let summary = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any]
        #expect(summary?["waitingForNetwork"] as? Int == 1, "\(json.stdout)")
        #expect(summary?["cloudOnly"] as? [String] == [], "\(json.stdout)")
        let free = try a.run(["sync", folderA.path, "--once", "--on-metered", "metadata-only"], environment: ["NIMBUS_NETWORK_METERED": "0"])
        #expect(free.stdout.contains("↑ New/file.txt"), "\(free.stdout)")
    }

    @Test("--cache-limit frees the least recently used files first (opening one counts), never a pinned one")
    func cacheLimit() throws {
        let bench = try Bench()
        let a = try bench.device("A")
        let folderA = try bench.folder("A")
        let body = String(repeating: "x", count: 100_000)
        try write(body, to: folderA.appending(path: "old.txt"))
        #expect(try a.run(["sync", folderA.path, "/S", "--once"]).status == 0)
        for name in ["b.txt", "c.txt", "kept.txt"] { try write(body, to: folderA.appending(path: name)) }
        #expect(try a.run(["sync", folderA.path, "--once"]).status == 0)
        #expect(try a.run(["pin", folderA.appending(path: "kept.txt").path]).status == 0)
        // old.txt, synced first, is opened now (its access time moves): the least recently used are b and c.
        let opened = try Spawned.run("/usr/bin/touch", ["-a", "-d", "@\(Int(Date().timeIntervalSince1970) + 600)", folderA.appending(path: "old.txt").path])
        #expect(opened.status == 0)
        let run = try a.run(["sync", folderA.path, "--once", "--cache-limit", "250K"])
        #expect(run.status == 0, "\(run.stdout)\(run.stderr)")
        for name in ["b.txt", "c.txt"] {
            #expect(exists(folderA.appending(path: name + ".nimbus")) && !exists(folderA.appending(path: name)), "\(name) freed: \(run.stdout)")
        }
        for name in ["old.txt", "kept.txt"] { #expect(try read(folderA.appending(path: name)) == body, "\(name) stays: \(run.stdout)") }
        #expect(try a.run(["sync", folderA.path, "--once", "--cache-limit", "250K"]).stdout.contains("0 changes"), "settled")
    }

    /// Seconds `body` takes.
    func timed(_ body: () throws -> Void) rethrows -> Double {
        let start = Date()
        try body()
        return Date().timeIntervalSince(start)
    }

    @Test("--bwlimit holds uploads and downloads within 10 % of the rate")
    func bandwidthLimit() throws {
        let bench = try Bench()
        let a = try bench.device("A")
        let b = try bench.device("B")
        let folderA = try bench.folder("A")
        let folderB = try bench.folder("B")
        #expect(try a.run(["sync", folderA.path, "/S", "--once"]).status == 0)
        #expect(try b.run(["sync", folderB.path, "/S", "--once"]).status == 0)
        let size = 16 << 20
        let rate = 2.0 * 1024 * 1024
        func random() throws -> Data { try FileHandle(forReadingFrom: URL(fileURLWithPath: "/dev/urandom")).read(upToCount: size) ?? Data() }
        func sync(_ device: CLIDevice, _ folder: URL, _ extra: [String]) throws {
            let run = try device.run(["sync", folder.path, "--once"] + extra)
            #expect(run.status == 0, "\(run.stdout)\(run.stderr)")
        }

        // The same round without a limit: what the process, the scan and the hashing take around the transfer.
        try random().write(to: folderA.appending(path: "free.bin"))
        let freeUp = try timed { try sync(a, folderA, []) }
        let freeDown = try timed { try sync(b, folderB, []) }
        let limited = try random()
        try limited.write(to: folderA.appending(path: "limited.bin"))
        let up = try timed { try sync(a, folderA, ["--bwlimit", "2M:off"]) } - freeUp
        let down = try timed { try sync(b, folderB, ["--bwlimit", "off:2M"]) } - freeDown
        #expect(try Data(contentsOf: folderB.appending(path: "limited.bin")) == limited)
        let expected = Double(size) / rate
        // Never faster than the rate allows (its tolerance is a tenth of a second's worth), nor much slower.
        #expect(up >= expected * 0.9 && up <= expected * 1.1, "upload: \(up) s for \(expected) s at the rate (\(freeUp) s unlimited)")
        #expect(down >= expected * 0.9 && down <= expected * 1.1, "download: \(down) s for \(expected) s at the rate (\(freeDown) s unlimited)")
    }

    @Test("the desktop handler: its install makes *.nimbus and the magic line a MIME type opened by nimbus open; its command fetches, then opens")
    func desktopHandler() throws {
        let bench = try Bench()
        let a = try bench.device("A")
        let folderA = try bench.folder("A")
        try write("the report", to: folderA.appending(path: "report.pdf"))
        #expect(try a.run(["sync", folderA.path, "/S", "--once"]).status == 0)
        #expect(try a.run(["free", folderA.appending(path: "report.pdf").path]).status == 0)
        let placeholder = folderA.appending(path: "report.pdf.nimbus")
        #expect(exists(placeholder))

        let desktop = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appending(path: "../../deploy/desktop").standardizedFileURL
        let entry = try read(desktop.appending(path: "nimbus-open.desktop"))
        let exec = entry.split(separator: "\n").first { $0.hasPrefix("Exec=") }.map { $0.dropFirst("Exec=".count).split(separator: " ").map(String.init) }
        #expect(exec?.first == "nimbus" && exec?.last == "%f", "\(entry)")
        #expect(entry.contains("MimeType=application/x-nimbus-placeholder;"))

        // The double-click: the entry's command with the placeholder for %f; the opener records what it was given.
        let opened = bench.root.appending(path: "opened.txt")
        let opener = bench.root.appending(path: "opener.sh")
        try write("#!/bin/sh\nprintf '%s' \"$1\" > \(opened.path)\n", to: opener)
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: opener.path)
        let arguments = (exec ?? []).dropFirst().map { $0 == "%f" ? placeholder.path : $0 }
        let run = try a.run(Array(arguments), environment: ["NIMBUS_OPENER": opener.path])
        #expect(run.status == 0, "\(run.stdout)\(run.stderr)")
        #expect(try read(folderA.appending(path: "report.pdf")) == "the report")
        #expect(!exists(placeholder))
        #expect(try read(opened) == folderA.appending(path: "report.pdf").path)

        // Installed for a user: the type is known by name and by content, and nimbus-open is its default.
        let data = bench.root.appending(path: "xdg-data")
        let config = bench.root.appending(path: "xdg-config")
        let install = try Spawned.run(
            "/bin/sh", [desktop.appending(path: "install.sh").path],
            environment: ["HOME": bench.root.path, "XDG_DATA_HOME": data.path, "XDG_CONFIG_HOME": config.path, "PATH": "/usr/bin:/bin"])
        #expect(install.status == 0, "\(String(decoding: install.errors, as: UTF8.self))")
        #expect(try read(data.appending(path: "mime/globs2")).contains("application/x-nimbus-placeholder:*.nimbus"))
        let magic = try Data(contentsOf: data.appending(path: "mime/magic"))
        #expect(magic.range(of: Data("#nimbus-placeholder v1\n".utf8)) != nil)
        #expect(try read(config.appending(path: "mimeapps.list")).contains("application/x-nimbus-placeholder=nimbus-open.desktop"))
        #expect(exists(data.appending(path: "applications/nimbus-open.desktop")))
    }

    @Test("bad input: a path outside any synced folder, a folder with two remotes")
    func badInput() throws {
        let bench = try Bench()
        let a = try bench.device("A")
        let folderA = try bench.folder("A")
        let run = try a.run(["free", folderA.appending(path: "x").path])
        #expect(run.status != 0)
        #expect(run.stderr.contains("is not in a synced folder"), "\(run.stderr)")
        #expect(try a.run(["sync", folderA.path, "/S", "--once"]).status == 0)
        let missing = try a.run(["free", folderA.appending(path: "nothing.txt").path])
        #expect(missing.status != 0)
        #expect(missing.stderr.contains("is not in the synced folder"), "\(missing.stderr)")
        let select = try a.run(["select", folderA.path])
        #expect(select.status != 0)
        for rate in ["fast", "1M:2M:3M", "10"] {
            let run = try a.run(["sync", folderA.path, "--once", "--bwlimit", rate])
            #expect(run.status != 0)
            #expect(run.stderr.contains("--bwlimit: not a rate"), "\(run.stderr)")
        }
    }
}
