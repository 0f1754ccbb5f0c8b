import Foundation
import NimbusAPI
@testable import NimbusSync
import Testing

/// A remote as configured (`RemoteConfiguration`) and the provider made from it: what it lacks is a typed problem,
/// found before anything is made.
@Suite("Remote configuration")
struct RemoteConfigurationTests {
    @Test("the JSON form is config.json's (type and the fields of where it is); what a remote lacks is a typed problem; a local remote is made at its sub-folder")
    func configurations() throws {
        let stored = #"{"type":"webdav","url":"https://dav.example/remote.php/dav/files/alice/","user":"alice"}"#
        let webdav = try JSONDecoder().decode(RemoteConfiguration.self, from: Data(stored.utf8))
        #expect(webdav.location == "https://dav.example/remote.php/dav/files/alice/ (user alice)")
        #expect(throws: RemoteConfiguration.Problem.missingSecret("password")) { try webdav.providerMaker(path: "/", secret: nil) }
        _ = try webdav.providerMaker(path: "/Work", secret: RemoteSecret(password: "pw"))

        let s3 = RemoteConfiguration(type: "s3", endpoint: "http://127.0.0.1:9000", bucket: "bkt")
        #expect(throws: RemoteConfiguration.Problem.missingSecret("keys")) { try s3.providerMaker(path: "/", secret: RemoteSecret(password: "x")) }
        #expect(throws: RemoteConfiguration.Problem.self) { try RemoteConfiguration(type: "s3", bucket: "bkt").providerMaker(path: "/", secret: nil) }
        #expect(throws: RemoteConfiguration.Problem.unsupported("an unknown type 'ftp'")) {
            try RemoteConfiguration(type: "ftp").providerMaker(path: "/", secret: nil)
        }

        let folder = FileManager.default.temporaryDirectory.appending(path: "nimbus-remote-config-\(UUID.random().uuidString)")
        try FileManager.default.createDirectory(at: folder.appending(path: "Work/Sub"), withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let local = RemoteConfiguration(type: "local", path: folder.path)
        let provider = try local.providerMaker(path: "/Work/./Sub", secret: nil)(NimbusProvider.NoState())
        #expect((provider as? LocalFolderProvider)?.root.standardizedFileURL == folder.appending(path: "Work/Sub").standardizedFileURL)

        let crypt = RemoteConfiguration(type: "crypt", remote: "nas:/sealed")
        let inner = { try local.providerMaker(path: "/", secret: nil) }
        #expect(throws: RemoteConfiguration.Problem.missingSecret("passphrase")) {
            try crypt.providerMaker(path: "/", secret: nil, inner: inner, scratch: folder.appending(path: "scratch"))
        }
        #expect(try crypt.providerMaker(path: "/", secret: RemoteSecret(passphrase: "p"), inner: inner, scratch: folder.appending(path: "scratch"))(NimbusProvider.NoState()) is CryptProvider)
    }

    @Test("a pair's folder is made where missing only when asked (its remote's root must answer); secrets are kept 0600 and read back; a pair's status round-trips; no account kept, no Nimbus provider")
    func pairPieces() async throws {
        let folder = FileManager.default.temporaryDirectory.appending(path: "nimbus-pair-pieces-\(UUID.random().uuidString)")
        defer { try? FileManager.default.removeItem(at: folder) }
        let disk = RemoteConfiguration(type: "local", path: folder.appending(path: "disk").path)
        let unmounted = try disk.providerMaker(path: "/", secret: nil)(NimbusProvider.NoState())
        await #expect(throws: ProviderError.self, "a disk not there is not made: it may be unmounted") {
            try await unmounted.prepareFolder(["Work"], makingMissing: true)
        }
        #expect(!FileManager.default.fileExists(atPath: folder.appending(path: "disk").path))
        try FileManager.default.createDirectory(at: folder.appending(path: "disk"), withIntermediateDirectories: true)
        try await unmounted.prepareFolder(["Work", "Notes"], makingMissing: false)
        #expect(!FileManager.default.fileExists(atPath: folder.appending(path: "disk/Work").path), "a known pair's folder is never made again silently")
        try await unmounted.prepareFolder(["Work", "Notes"], makingMissing: true)
        #expect(FileManager.default.fileExists(atPath: folder.appending(path: "disk/Work/Notes").path))

        let secretURL = folder.appending(path: "remotes/nas.secret")
        let secret = RemoteSecret(accessKey: "key", secretKey: "s3cr3t")
        try secret.save(to: secretURL)
        #expect(RemoteSecret.load(from: secretURL) == secret)
        let mode = try FileManager.default.attributesOfItem(atPath: secretURL.path)[.posixPermissions] as? Int
        #expect(mode == 0o600)
        try RemoteSecret(password: "new").save(to: secretURL)
        #expect(RemoteSecret.load(from: secretURL) == RemoteSecret(password: "new"))
        #expect(RemoteSecret.load(from: folder.appending(path: "remotes/none.secret")) == nil)

        var report = FolderSyncReport()
        report.uploaded = ["a.txt"]
        report.errors = ["b.txt: refused"]
        let statusURL = folder.appending(path: "pair/status.json")
        let status = FolderSyncStatus(report, at: Date(timeIntervalSince1970: 1_800_000_000))
        status.save(to: statusURL)
        #expect(FolderSyncStatus.load(from: statusURL) == status)
        #expect(status.changed == report.changed && status.errors == ["b.txt: refused"] && status.paused == nil)
        FolderSyncStatus(paused: "signed out").save(to: statusURL)
        #expect(FolderSyncStatus.load(from: statusURL)?.paused == "signed out")

        let tokens = FileTokenStore(url: folder.appending(path: "account.json"))
        #expect(try NimbusProvider.maker(tokens: tokens) == nil)
    }
}

