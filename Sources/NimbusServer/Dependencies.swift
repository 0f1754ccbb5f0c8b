import Foundation
import Hummingbird
import HummingbirdBcrypt
import NIOConcurrencyHelpers
import NIOPosix
import NimbusAPI

/// Everything the request handlers share: the stores, tokens, notifier, the access decision and settings. Holds no
/// mutable state but a cache of users' root folder ids (a root never changes: `root` costs no database read after
/// the first).
struct Dependencies: Sendable {
    /// The metadata, all aggregates in one (closing it, checking it answers); routes use the aggregate they need.
    let store: any MetadataStore
    let blobs: any BlobStore
    let tokens: TokenService
    let notifier: any ChangeNotifier
    let configuration: ServerConfiguration
    /// Who may do what: every route asks it about every item it acts on (``item(_:for:_:)``).
    let access: AccessPolicy

    /// Users, devices, app passwords, login failures.
    var accounts: any AccountStore { store }
    /// Files and folders, the trash, the change feed.
    var files: any FileStore { store }
    /// Content, revisions, blocks, upload sessions.
    var content: any ContentStore { store }
    /// WebDAV properties, locks, chunked uploads.
    var webDAV: any WebDAVStore { store }
    /// Grants and mounts.
    var shares: any ShareStore { store }
    /// Public links.
    var links: any LinkStore { store }
    /// Search, stars, recent files, the activity history, thumbnails.
    var finding: any FindingStore { store }
    private let rootIds = NIOLockedValueBox<[String: String]>([:])
    /// Usernames by user id (a username never changes), for what answers show of owners and grantees.
    private let usernames = NIOLockedValueBox<[String: String]>([:])
    /// Devices signed out here: their open long-polls and event streams end at once.
    let signOuts = SignOuts()

    /// Signs the device out: its tokens stop working, and what it holds open (long-polls, event streams) ends.
    func signOut(deviceId: String) async throws {
        try await accounts.revokeDevice(id: deviceId, now: now)
        signOuts.signedOut(deviceId)
    }

    var now: Date { configuration.clock.now() }

    /// The verified identity behind `Authorization: Bearer <token>`, or a 401.
    ///
    /// The device is looked up on every request, so logging out (or a detected refresh-token replay) takes
    /// effect at once rather than when the access token expires.
    func principal(_ request: Request) async throws -> Principal {
        guard let header = request.headers[.authorization] else { throw DriveError.unauthorized() }
        let parts = header.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else {
            throw DriveError.unauthorized("The Authorization header must be 'Bearer <accessToken>'.")
        }
        guard let identity = await tokens.verify(String(parts[1]), now: now) else {
            throw DriveError.unauthorized("The access token is invalid or expired; refresh it or log in again.")
        }
        guard let device = try await accounts.device(id: identity.deviceId), device.revokedAt == nil, device.userId == identity.userId else {
            throw DriveError.unauthorized("This device was signed out; log in again.")
        }
        guard !device.userDisabled else { throw DriveError.accountDisabled }
        Acting.current?.record(identity)
        return identity
    }

    /// The device behind a request, held to the mass-deletion breaker when it deletes.
    func deleter(_ identity: Principal) -> Deleter {
        Deleter(deviceId: identity.deviceId, limits: configuration.massDeletion)
    }

    /// The item `id` names (`root`: the principal's root folder), if `principal` may take `action` on it — the
    /// access decision's answer; 404 for what it may not see, exactly as for an id that does not exist. The item's
    /// `userId` is whose tree the action then changes.
    ///
    /// Someone else's item is seen through the grant that reaches it (``FileRecord/seenThrough``); a share's root, as
    /// the grantee's mount shows it (its name and folder in their tree, ``FileRecord/mountId``): renaming, moving or
    /// deleting that acts on the mount.
    func item(_ id: String, for principal: Principal, _ action: Action) async throws -> FileRecord {
        let resolved = try await resolve(id, for: principal)
        guard let (found, reach) = try await shares.item(id: resolved, reachedBy: principal.userId, now: now) else {
            throw access.notFound(principal, itemId: resolved, action)
        }
        guard found.userId != principal.userId else { return try access.authorize(principal, found, action) }
        try access.authorize(principal, found, action, reach: reach)
        return found.seen(through: reach)
    }

    /// The items as `principal` is shown them: with their owner, whether they are shared, what the principal may do
    /// with them and, for someone else's, the mount they come through. `reach`: how the principal reaches them all
    /// (a folder's children), when they are someone else's.
    func present(_ records: [FileRecord], for principal: Principal, through reach: Reach? = nil) async throws -> [File] {
        let own = records.filter { $0.userId == principal.userId }.map(\.id)
        let shared = try await shares.sharedItems(ownerId: principal.userId, among: own)
        var files: [File] = []
        files.reserveCapacity(records.count)
        for record in records {
            var file = record.api
            file.owner = UserRef(userId: record.userId, username: try await username(record.userId))
            var seen = record.seenThrough ?? reach
            if record.userId == principal.userId {
                seen = nil
                file.shared = shared.contains(record.id)
            } else {
                if seen == nil || record.mountId != nil { seen = try await shares.reach(userId: principal.userId, itemId: record.id, now: now) }
                // A folder's reach, passed to its children: only the share's own root is the grantee's mount.
                if var inherited = seen {
                    inherited.isRoot = inherited.grant.itemId == record.id
                    seen = inherited
                }
                file.shared = seen.map { $0.grant.itemId == record.id } ?? false
                file.mountId = seen?.mount.id
            }
            let isRoot = record.parentId == nil
            func may(_ action: Action) -> Bool { !isRoot && access.allows(principal, record, action, reach: seen) }
            file.capabilities = Capabilities(
                canEdit: isRoot || access.allows(principal, record, record.isFolder ? .create : .write, reach: seen), canRename: may(.rename),
                canDelete: may(.trash), canShare: may(.share))
            files.append(file)
        }
        return files
    }

    /// One item as ``present(_:for:through:)`` shows it.
    func present(_ record: FileRecord, for principal: Principal) async throws -> File {
        try await present([record], for: principal)[0]
    }

    /// The user's name, for answers that show who owns or holds something.
    func username(_ userId: String) async throws -> String {
        if let known = usernames.withLockedValue({ $0[userId] }) { return known }
        guard let user = try await accounts.user(id: userId) else { return userId }
        usernames.withLockedValue { names in
            if names.count >= 100_000 { names.removeAll() }
            names[userId] = user.username
        }
        return user.username
    }

    /// The principal's own root folder, through the access decision: for routes that act on the account as a whole
    /// (its change feed, events, trash, blocks, upload sessions).
    func root(for principal: Principal, _ action: Action) async throws -> FileRecord {
        try await item("root", for: principal, action)
    }

    private func resolve(_ id: String, for identity: Principal) async throws -> String {
        guard id == "root" else { return id }
        if let known = rootIds.withLockedValue({ $0[identity.userId] }) { return known }
        guard let user = try await accounts.user(id: identity.userId) else { throw DriveError.unauthorized() }
        rootIds.withLockedValue { ids in
            if ids.count >= 100_000 { ids.removeAll() }
            ids[identity.userId] = user.rootId
        }
        return user.rootId
    }

    enum SignIn<T: Sendable>: Sendable {
        case signedIn(T)
        /// Too many failures for this account from this address: wait this many seconds.
        case lockedOut(Int)
        case refused
    }

    /// A sign-in attempt under the login lockout, counted per account *and* source address (a stranger guessing
    /// from elsewhere locks out only themself, never the owner signing in from their own machine): `attempt`
    /// returns the signed-in value, or `nil` for wrong credentials (a failure counted). `/v1/auth/login` and
    /// WebDAV's Basic auth both come here and answer in their own way; a success clears the failures when
    /// `clearsFailures` (not WebDAV, which signs in on every request: a write each time would cost too much).
    func signIn<T: Sendable>(username: String, remoteIP: String, clearsFailures: Bool = true, attempt: () async throws -> T?) async throws -> SignIn<T> {
        let key = "user:" + username.lowercased() + "|ip:" + remoteIP
        if let wait = try await accounts.loginLockout(key: key, now: now) { return .lockedOut(wait) }
        guard let value = try await attempt() else {
            try await accounts.recordLoginFailure(
                key: key, now: now, allowed: configuration.loginFailuresAllowed, lockout: configuration.loginLockout.timeInterval)
            return .refused
        }
        if clearsFailures { try await accounts.clearLoginFailures(key: key) }
        return .signedIn(value)
    }

    func hashPassword(_ password: String) async throws -> String {
        let cost = configuration.bcryptCost
        return try await NIOThreadPool.singleton.runIfActive { Bcrypt.hash(password, cost: cost) }
    }

    func verifyPassword(_ password: String, hash: String) async throws -> Bool {
        try await NIOThreadPool.singleton.runIfActive { Bcrypt.verify(password, hash: hash) }
    }
}
