import Foundation
import Logging
import HummingbirdBcrypt
import NIOPosix
import NimbusAPI

/// Administration of a server's store (`nimbus user …`), while the server runs or not: each effect is in the database,
/// which the server reads on every request.
public enum Admin {
    public struct AddedUser: Sendable {
        public var id: String
        public var username: String
        public var created: Bool
    }

    /// Adds a user, or updates the password and quota of an existing one when `update` is set.
    /// `database`: a PostgreSQL URL (as `nimbus serve --database`); `nil` for the data folder's SQLite file.
    public static func addUser(
        dataDirectory: URL, database: String? = nil, username: String, password: String, quota: Int64?, update: Bool = false,
        bcryptCost: UInt8 = 10
    ) async throws -> AddedUser {
        try Accounts.validate(username: username)
        try Accounts.validate(password: password)
        if database == nil { try FileManager.default.createDirectory(at: dataDirectory, withIntermediateDirectories: true) }
        return try await withStore(dataDirectory: dataDirectory, database: database) { store in
            try await addUser(to: store, username: username, password: password, quota: quota, update: update, bcryptCost: bcryptCost)
        }
    }

    /// Every account, by name.
    public static func users(dataDirectory: URL, database: String? = nil) async throws -> [UserSummary] {
        try await withStore(dataDirectory: dataDirectory, database: database, creating: false) { try await $0.userSummaries() }
    }

    /// A new password for `username`; every device and app password of the account is signed out.
    public static func setPassword(dataDirectory: URL, database: String? = nil, username: String, password: String, bcryptCost: UInt8 = 10) async throws {
        try Accounts.validate(password: password)
        try await withUser(username, dataDirectory: dataDirectory, database: database) { store, user in
            let hash = try await NIOThreadPool.singleton.runIfActive { Bcrypt.hash(password, cost: bcryptCost) }
            try await store.setPassword(userId: user.id, passwordHash: hash)
        }
    }

    /// Sets the account's quota in bytes (`nil`: unlimited).
    public static func setQuota(dataDirectory: URL, database: String? = nil, username: String, quota: Int64?) async throws -> UserSummary {
        try await withUser(username, dataDirectory: dataDirectory, database: database) { store, user in
            try await store.setQuota(userId: user.id, quota: quota)
            return try await summary(store, user.id)
        }
    }

    /// Disables or enables the account; whether that changed anything (it may be so already).
    public static func setDisabled(dataDirectory: URL, database: String? = nil, username: String, _ disabled: Bool) async throws -> Bool {
        try await withUser(username, dataDirectory: dataDirectory, database: database) { store, user in
            try await store.setDisabled(userId: user.id, disabled, now: Date())
        }
    }

    /// Removes the account and its data: what it held (for the message) and how many items went.
    public static func removeUser(dataDirectory: URL, database: String? = nil, username: String) async throws -> (UserSummary, items: Int) {
        try await withUser(username, dataDirectory: dataDirectory, database: database) { store, user in
            let before = try await summary(store, user.id)
            return (before, try await store.removeUser(userId: user.id, now: Date()))
        }
    }

    /// What ``verify(dataDirectory:database:blobs:progress:)`` found.
    public struct Verification: Sendable, Codable {
        public var checkedBlocks: Int
        public var checkedBytes: Int64
        /// Blocks whose bytes no longer hash to their name, or are gone (marked damaged: never served).
        public var damagedBlocks: Int
        /// Blocks damaged before that are whole again (the content was uploaded again since), reported once.
        public var healedBlocks: Int
        /// Every file revision that cannot be read whole, with its user and path.
        public var damagedFiles: [AffectedFile]
        /// The file revisions the healed blocks made whole again.
        public var healedFiles: [AffectedFile]
    }

    /// Re-reads every stored block and checks it against its SHA-256, marks the damaged ones (and those stored again
    /// since, healed), and lists the file revisions that cannot be read whole — also those naming a block the store
    /// has no row for. Works while the server runs. `progress` gets a line now and then.
    public static func verify(
        dataDirectory: URL, database: String? = nil, blobs: String? = nil, progress: @escaping @Sendable (String) -> Void = { _ in }
    ) async throws -> Verification {
        try await withStore(dataDirectory: dataDirectory, database: database, blobs: blobs ?? "local", creating: false) { store in
            let total = try await store.blockTotal()
            var report = Verification(checkedBlocks: 0, checkedBytes: 0, damagedBlocks: 0, healedBlocks: 0, damagedFiles: [], healedFiles: [])
            var healed: [(user: String, hash: String)] = []
            var cursor: (user: String, hash: String)? = nil
            var last = Date()
            repeat {
                let slice = try await store.verifyBlocks(from: cursor, limit: 1000, now: Date())
                report.checkedBlocks += slice.checked
                report.checkedBytes += slice.bytes
                report.damagedBlocks += slice.damaged.count
                report.healedBlocks += slice.healed.count
                healed += slice.healed
                cursor = slice.next
                if Date().timeIntervalSince(last) >= 2 {
                    last = Date()
                    progress("checked \(report.checkedBlocks) of \(total) blocks (\(ByteCount.format(report.checkedBytes)))…")
                }
            } while cursor != nil
            report.damagedFiles = try await store.damagedFiles()
            report.healedFiles = try await store.files(using: healed)
            return report
        }
    }

    static func summary(_ store: SQLMetadataStore, _ id: String) async throws -> UserSummary {
        guard let found = try await store.userSummaries(id: id).first else { throw DriveError.notFound("No such user.") }
        return found
    }

    static func withUser<T: Sendable>(
        _ username: String, dataDirectory: URL, database: String?, _ body: (SQLMetadataStore, UserRecord) async throws -> T
    ) async throws -> T {
        try await withStore(dataDirectory: dataDirectory, database: database, creating: false) { store in
            guard let user = try await store.user(username: username) else {
                throw DriveError.notFound("There is no user '\(username)' (nimbus user list shows them).")
            }
            return try await body(store, user)
        }
    }

    /// Runs `body` on the server's store — the data folder's SQLite file, or the PostgreSQL database at `database`
    /// (blocks stay where they are: these commands never touch them) — and closes it. `creating`: false refuses a
    /// data folder that holds no database (a typo in `--data` says so instead of making an empty one).
    static func withStore<T: Sendable>(
        dataDirectory: URL, database: String?, blobs location: String? = nil, creating: Bool = true, _ body: (SQLMetadataStore) async throws -> T
    ) async throws -> T {
        let path = dataDirectory.appending(path: "nimbus.sqlite").path
        guard creating || database != nil || FileManager.default.fileExists(atPath: path) else {
            throw DriveError.notFound("\(dataDirectory.path) holds no Nimbus server (no nimbus.sqlite); pass the server's --data folder.")
        }
        // (With PostgreSQL and no --blobs the blocks are not what the command is about: a scratch folder stands in.)
        let scratch = database == nil || location != nil ? nil : FileManager.default.temporaryDirectory.appending(path: "nimbus-admin-\(UUID().uuidString)")
        defer { if let scratch { try? FileManager.default.removeItem(at: scratch) } }
        let blobs = try location.map { try BlobLocation.parse($0).open(data: dataDirectory) } ?? LocalBlobStore(root: scratch ?? dataDirectory)
        let store: SQLMetadataStore
        if let database {
            let postgres = try await PostgresDatabase.open(try PostgresDatabase.Location.parse(database), logger: Logger(label: "nimbus-admin"))
            store = SQLMetadataStore(database: postgres, blobs: blobs, notifier: LocalChangeNotifier(), revisionRetention: RevisionRetention())
        } else {
            store = try SQLMetadataStore(path: path, blobs: blobs, notifier: LocalChangeNotifier(), revisionRetention: RevisionRetention())
        }
        do {
            let value = try await body(store)
            await store.database.close()
            return value
        } catch {
            await store.database.close()
            throw error
        }
    }

    static func addUser(
        to store: SQLMetadataStore, username: String, password: String, quota: Int64?, update: Bool, bcryptCost: UInt8
    ) async throws -> AddedUser {
        let hash = try await NIOThreadPool.singleton.runIfActive { Bcrypt.hash(password, cost: bcryptCost) }
        if let existing = try await store.user(username: username) {
            guard update else {
                throw DriveError.conflict("The user '\(username)' exists already; pass --update to change the password or quota.")
            }
            try await store.setPassword(userId: existing.id, passwordHash: hash)
            try await store.setQuota(userId: existing.id, quota: quota)
            return AddedUser(id: existing.id, username: username, created: false)
        }
        let user = try await store.createUser(username: username, passwordHash: hash, quota: quota, now: Date())
        return AddedUser(id: user.id, username: username, created: true)
    }
}

extension DriveError: CustomStringConvertible {
    public var description: String { body.error.message }
}
