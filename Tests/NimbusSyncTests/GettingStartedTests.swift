import Foundation
import NimbusAPI
import NimbusSync
import Testing

/// The code of the DocC article "Getting started" (`Sources/NimbusSync/NimbusSync.docc/GettingStarted.md`), word for
/// word: keep the two the same.
func keepInSync(folder: URL, state: URL, server: URL, username: String, password: String) async throws {
    // `state` is where the engine keeps its database (the three trees), its tokens and staged content.
    let configuration = SyncConfiguration(directory: state, deviceName: "My laptop")
    let sync = try FolderSync(root: folder, configuration: configuration)

    // Sign in once: the tokens are kept in `state` and refreshed as they expire.
    if await sync.engine.account == nil {
        try await sync.engine.signIn(server: server, username: username, password: password)
    }

    // One round now: scan, plan, send and receive until nothing is left to do.
    let first = try await sync.syncOnce()
    print("↑ \(first.uploaded.count)  ↓ \(first.downloaded.count)  ! \(first.conflicts.count)")

    // Then follow changes here (inotify on Linux) and there (the server's live events).
    try await sync.watch { report in
        for path in report.uploaded { print("↑ \(path)") }
        for path in report.downloaded { print("↓ \(path)") }
        for path in report.conflicts { print("! \(path): both versions kept") }
        for error in report.errors { print("error: \(error)") }
    }
}

@Suite struct GettingStartedTests {
    @Test func theArticlesCodeSyncsAFolderBothWays() async throws {
        try await SyncWorld.run { world in
            try await world.register("alice", password: "correct horse battery")
            let folder = world.root.appending(path: "Documents")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            try Data("hello".utf8).write(to: folder.appending(path: "hello.txt"))

            let syncing = Task {
                try await keepInSync(
                    folder: folder, state: world.root.appending(path: "state"), server: world.server, username: "alice",
                    password: "correct horse battery")
            }
            defer { syncing.cancel() }
            let api = try await world.api("alice", password: "correct horse battery")

            // Up: the file in the folder reaches the server.
            try await eventually("hello.txt on the server") { try await api.tree()["/hello.txt"] == sha256(Data("hello".utf8)) }

            // Down: a file another device uploads comes into the folder while `watch` runs.
            let phone = try world.device("phone")
            try await phone.engine.signIn(server: world.server, username: "alice", password: "correct horse battery")
            _ = try await phone.engine.upload(from: try world.file("from-phone.txt", Data("from the phone".utf8)))
            try await phone.settle()
            try await eventually("from-phone.txt in the folder") {
                (try? Data(contentsOf: folder.appending(path: "from-phone.txt"))) == Data("from the phone".utf8)
            }
            syncing.cancel()
            _ = await syncing.result
        }
    }

    /// Waits for `condition` (checked every 50 ms), failing after 3 minutes: far from the second it takes alone, as a
    /// CI run that starts every suite at once on two cores can make the first round take most of a minute.
    private func eventually(_ what: String, _ condition: () async throws -> Bool) async throws {
        let deadline = Date().addingTimeInterval(180)
        while Date() < deadline {
            if try await condition() { return }
            try await Task.sleep(for: .milliseconds(50))
        }
        Issue.record("\(what): not within 3 minutes")
    }
}
