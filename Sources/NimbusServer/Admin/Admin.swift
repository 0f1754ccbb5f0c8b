import Foundation
import Logging
import HummingbirdBcrypt
import NIOPosix
import NimbusAPI

/// Offline administration of a data folder (`nimbus user add`), without a running server.
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
        try FileManager.default.createDirectory(at: dataDirectory, withIntermediateDirectories: true)
        let blobs = try LocalBlobStore(root: dataDirectory)
        let store: SQLMetadataStore
        if let database {
            let postgres = try await PostgresDatabase.open(try PostgresDatabase.Location.parse(database), logger: Logger(label: "nimbus-admin"))
            store = SQLMetadataStore(database: postgres, blobs: blobs, notifier: LocalChangeNotifier(), revisionRetention: RevisionRetention())
        } else {
            store = try SQLMetadataStore(
                path: dataDirectory.appending(path: "nimbus.sqlite").path, blobs: blobs, notifier: LocalChangeNotifier(),
                revisionRetention: RevisionRetention())
        }
        do {
            let added = try await addUser(to: store, username: username, password: password, quota: quota, update: update, bcryptCost: bcryptCost)
            await store.database.close()
            return added
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
