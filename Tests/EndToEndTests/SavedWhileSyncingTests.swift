import Foundation
import NimbusAPI
import NimbusTestSupport
import Testing

/// Regression tests for edits lost by folder sync: files saved moments before (or while) a sync runs,
/// and files that return to an earlier content. The real binary, as a user runs it.
@Suite("End to end: nothing saved is lost", .serialized)
struct SavedWhileSyncingTests {
    /// Writes `text` without back-dating it: to the sync it is a file that was just saved.
    func save(_ text: String, to url: URL) throws {
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        try Data(text.utf8).write(to: url)
    }

    func contents(_ folder: URL) throws -> Set<String> {
        Set(try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { !$0.hasPrefix(".") }.map {
            try String(contentsOf: folder.appending(path: $0), encoding: .utf8)
        })
    }

    @Test("a file saved just before a sync is kept and sent when another device deleted it")
    func savedThenDeletedElsewhere() throws {
        let bench = try Bench()
        let a = try bench.device("A")
        let b = try bench.device("B")
        let folderA = try bench.folder("A")
        let folderB = try bench.folder("B")
        try write("first", to: folderA.appending(path: "f.txt"))
        #expect(try a.run(["sync", folderA.path, "/S", "--once"]).status == 0)
        #expect(try b.run(["sync", folderB.path, "/S", "--once"]).status == 0)
        try FileManager.default.removeItem(at: folderB.appending(path: "f.txt"))
        #expect(try b.run(["sync", folderB.path, "--once"]).status == 0)

        try save("saved on A", to: folderA.appending(path: "f.txt"))
        let run = try a.run(["sync", folderA.path, "--once"])
        #expect(run.status == 0, "\(run.stdout)\(run.stderr)")
        #expect(try String(contentsOf: folderA.appending(path: "f.txt"), encoding: .utf8) == "saved on A", "the edit is still on disk")
        #expect(run.stdout.contains("f.txt: deleted on the server but changed here; kept and sent again"), "\(run.stdout)")
        #expect(try b.run(["sync", folderB.path, "--once"]).status == 0)
        #expect(try String(contentsOf: folderB.appending(path: "f.txt"), encoding: .utf8) == "saved on A", "and it reached the other device")
    }

    @Test("a file saved just before a sync is never replaced by the other device's version")
    func savedThenChangedElsewhere() throws {
        let bench = try Bench()
        let a = try bench.device("A")
        let b = try bench.device("B")
        let folderA = try bench.folder("A")
        let folderB = try bench.folder("B")
        try write("first", to: folderA.appending(path: "f.txt"))
        #expect(try a.run(["sync", folderA.path, "/S", "--once"]).status == 0)
        #expect(try b.run(["sync", folderB.path, "/S", "--once"]).status == 0)

        // B edits it; A saves its own version moments before its sync.
        try write("from B", to: folderB.appending(path: "f.txt"))
        #expect(try b.run(["sync", folderB.path, "--once"]).status == 0)
        try save("from A", to: folderA.appending(path: "f.txt"))
        let run = try a.run(["sync", folderA.path, "--once"])
        #expect(run.status == 0, "\(run.stdout)\(run.stderr)")
        #expect(try contents(folderA) == ["from A", "from B"], "both versions are on A's disk: \(run.stdout)")
        #expect(try b.run(["sync", folderB.path, "--once"]).status == 0)
        #expect(try contents(folderB) == ["from A", "from B"], "and on B's")
    }

    @Test("a file saved just before a sync is never replaced by a new file another device made under its name")
    func savedThenReplacedElsewhere() throws {
        let bench = try Bench()
        let a = try bench.device("A")
        let b = try bench.device("B")
        let folderA = try bench.folder("A")
        let folderB = try bench.folder("B")
        try write("first", to: folderA.appending(path: "f.txt"))
        #expect(try a.run(["sync", folderA.path, "/S", "--once"]).status == 0)
        #expect(try b.run(["sync", folderB.path, "/S", "--once"]).status == 0)

        // B deletes the file and syncs, then makes a new file of that name; A saves its version meanwhile.
        try FileManager.default.removeItem(at: folderB.appending(path: "f.txt"))
        #expect(try b.run(["sync", folderB.path, "--once"]).status == 0)
        try write("new file from B", to: folderB.appending(path: "f.txt"))
        #expect(try b.run(["sync", folderB.path, "--once"]).status == 0)
        try save("from A", to: folderA.appending(path: "f.txt"))
        let run = try a.run(["sync", folderA.path, "--once"])
        #expect(run.status == 0, "\(run.stdout)\(run.stderr)")
        #expect(try contents(folderA) == ["from A", "new file from B"], "both are on A's disk: \(run.stdout)")
        #expect(try b.run(["sync", folderB.path, "--once"]).status == 0)
        #expect(try contents(folderB) == ["from A", "new file from B"], "and on B's")
    }

    @Test("a file that returns to an earlier content (v1, v2, v1, v3) never conflicts with itself", arguments: [1_000, 5 * 1024 * 1024])
    func revertedContent(size: Int) throws {
        let bench = try Bench()
        let a = try bench.device("A")
        let folder = try bench.folder("A")
        var generator = SystemRandomNumberGenerator()
        let versions = (0..<3).map { _ in Data((0..<size).map { _ in UInt8.random(in: 0...255, using: &generator) }) }
        for version in [0, 1, 0, 2] {
            let file = folder.appending(path: "f.bin")
            try versions[version].write(to: file)
            try settle(file)
            let run = try a.run(["sync", folder.path, "/S", "--once"])
            #expect(run.status == 0, "v\(version + 1): \(run.stdout)\(run.stderr)")
            #expect(!run.stdout.contains("conflict"), "v\(version + 1): \(run.stdout)")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { !$0.hasPrefix(".") } == ["f.bin"])
        #expect(try Data(contentsOf: folder.appending(path: "f.bin")) == versions[2])
        let listing = try a.run(["ls", "/S"])
        #expect(listing.stdout == "f.bin\n", "no conflict copy on the server: \(listing.stdout)")
        let history = try a.run(["versions", "/S/f.bin", "--json"])
        let revisions = try JSONDecoder.nimbus.decode([FileRevision].self, from: Data(history.stdout.utf8))
        #expect(revisions.count == 4, "each save is a revision of the one file")
    }
}
