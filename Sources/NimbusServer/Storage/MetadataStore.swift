import Foundation
import NimbusAPI

/// The server's metadata, by aggregate: accounts and devices (``AccountStore``); files, the trash and the change
/// feed (``FileStore``); content, revisions, blocks, packs and upload sessions (``ContentStore``); WebDAV's
/// properties, locks and chunked uploads (``WebDAVStore``). Each is a façade of domain verbs: every method runs as
/// one transaction and keeps the invariants (unique live names per folder, one change-feed row per committed change,
/// quota, per-user scoping). Who may call them for what is decided before, by the access decision (``AccessPolicy``).
///
/// A failure throws ``DriveError`` and leaves the store unchanged. `SQLMetadataStore` implements all four over the
/// ``SQLDatabase`` seam (SQLite and PostgreSQL), one file per aggregate.
typealias MetadataStore = AccountStore & FileStore & ContentStore & WebDAVStore & ShareStore & LinkStore & FindingStore

/// Users, devices and their refresh tokens, login failures, app passwords, settings every replica shares.
protocol AccountStore: Sendable {
    func createUser(username: String, passwordHash: String, quota: Int64?, now: Date) async throws -> UserRecord
    func user(id: String) async throws -> UserRecord?
    func user(username: String) async throws -> UserRecord?
    func setQuota(userId: String, quota: Int64?) async throws
    func setPassword(userId: String, passwordHash: String) async throws
    func createDevice(userId: String, name: String, refreshHash: String, now: Date) async throws -> DeviceRecord
    func device(id: String) async throws -> DeviceRecord?
    /// Swaps a device's refresh token for a new one. A token that was already rotated away revokes the device
    /// (it has leaked); an unknown, revoked or idle-expired one is a 401.
    /// Exchanges the presented refresh token for `newHash`. The token exchanged last, presented again within
    /// `grace` while `newHash` is still current (a retry: the successor is derived from the token), answers the same
    /// device unchanged; presented later, or after a further rotation, it is a replay and signs the device out.
    func rotateRefreshToken(presentedHash: String, newHash: String, now: Date, maxIdle: TimeInterval, grace: TimeInterval) async throws -> DeviceRecord
    func revokeDevice(id: String, now: Date) async throws
    /// Seconds until `key` may try to log in again, or `nil` if it may now.
    func loginLockout(key: String, now: Date) async throws -> Int?
    func recordLoginFailure(key: String, now: Date, allowed: Int, lockout: TimeInterval) async throws
    func clearLoginFailures(key: String) async throws

    /// A new app password for the user (at most ``appPasswordLimit``; more is a 409).
    func createAppPassword(userId: String, label: String, passwordHash: String, now: Date) async throws -> AppPasswordRecord
    /// The user's app passwords, newest first.
    func appPasswords(userId: String) async throws -> [AppPasswordRecord]
    /// Deletes one of the user's app passwords; another user's or an unknown id is a 404.
    func revokeAppPassword(userId: String, id: String) async throws
    /// The app password with this hash, if any, its last use set to `now` (at most once a minute).
    func useAppPassword(passwordHash: String, now: Date) async throws -> AppPasswordRecord?

    /// The shared setting `key`, stored as `value` by the first caller (every replica then reads the same one).
    func sharedSetting(_ key: String, orStore value: String) async throws -> String

    // Sign-ins of Nextcloud's apps (``LoginFlow``).
    func createLoginFlow(_ flow: LoginFlowRecord) async throws
    /// The flow, if it exists and has not expired.
    func loginFlow(loginToken: String, now: Date) async throws -> LoginFlowRecord?
    /// The login page signed in as `userId`: the grant form's secret is `grantHash`. False when the flow is gone.
    func signInLoginFlow(loginToken: String, userId: String, grantHash: String, now: Date) async throws -> Bool
    /// Grants the flow signed in with `grantHash`, in one transaction: a new app password (`label`, `passwordHash`),
    /// and the flow kept `sealed` for its poll (v2) or deleted (v1, `sealed` nil). Nil when the flow is gone, expired,
    /// granted already or not signed in with that secret.
    func grantLoginFlow(
        loginToken: String, grantHash: String, label: String, passwordHash: String, sealed: [UInt8]?, loginName: String, now: Date
    ) async throws -> AppPasswordRecord?
    /// A granted flow's result, once: the flow is deleted as it is read. Nil until granted (or when gone).
    func takeLoginFlow(pollHash: String, now: Date) async throws -> LoginFlowRecord?
    /// Deletes expired flows; returns how many.
    func pruneLoginFlows(now: Date) async throws -> Int
}

/// Files and folders, the trash (and the mass-deletion breaker that guards it), the change feed.
protocol FileStore: Sendable {
    /// The item with this id, whoever owns it (nil: none). Routes pass what it finds through the access decision
    /// (``Dependencies/item(_:for:_:)``); the verbs below act in the owner's tree, scoped to it.
    func item(id: String) async throws -> FileRecord?
    /// The one item whose id starts with `idPrefix`, whoever owns it; nil when none does, or more than one
    /// (Nextcloud's numeric file ids name items this way: ``NextcloudIDs``).
    func item(idPrefix: String) async throws -> FileRecord?
    /// The size of the live files beneath each of these folders, at any depth (a folder's `oc:size`).
    func contentSizes(ofFolders folderIds: [String]) async throws -> [String: Int64]
    func file(id: String, userId: String) async throws -> FileRecord
    /// A page of the folder's items, folders first, then by name; with `mountsAt`, the shares mounted in it whose
    /// grant is live at that time are among them (``FileRecord/mountId``).
    func children(of parentId: String, userId: String, paging: Paging, order: ListingOrder, mountsAt now: Date?) async throws -> (files: [FileRecord], total: Int)
    /// The live item named `name` in the folder `parentId`, if any (WebDAV walks paths with this).
    func child(named name: String, in parentId: String, userId: String) async throws -> FileRecord?
    func trashed(userId: String, paging: Paging) async throws -> (files: [FileRecord], total: Int)
    /// A folder or an empty file. `requestId` makes retries return the first result (`created == false`).
    func create(
        userId: String, parentId: String, name: String, mimeType: String, policy: ConflictPolicy, requestId: String?,
        now: Date
    ) async throws -> (file: FileRecord, created: Bool)
    func update(userId: String, fileId: String, name: String?, parentId: String?, ifMatch: String?, now: Date) async throws -> FileRecord
    /// `sourceId` (and, `deep`, what it holds) copied as `name` into `parentId` in one transaction, sharing its blocks and
    /// taking its dead properties; onto a file (`replacing`, the source a file too) as a new revision of it, onto
    /// anything else after that item went to the trash (`deleter` held to the breaker). All of it, or nothing.
    func copy(
        userId: String, sourceId: String, parentId: String, name: String, replacing existingId: String?, deep: Bool, now: Date, by deleter: Deleter?
    ) async throws -> FileRecord
    /// A rename or move onto the name `existingId` holds, which goes to the trash in the same transaction (both or
    /// neither; `deleter` held to the mass-deletion breaker).
    func move(
        userId: String, fileId: String, name: String, parentId: String, replacing existingId: String, now: Date, by deleter: Deleter?
    ) async throws -> FileRecord
    /// Moves the item and what is in it to the trash; `deleter` (the device asking) is held to the mass-deletion
    /// breaker (409 `mass_deletion_paused`, nothing trashed).
    func trash(userId: String, fileId: String, now: Date, by deleter: Deleter?) async throws -> FileRecord
    func untrash(userId: String, fileId: String, now: Date) async throws -> FileRecord
    /// Deletes the item and what is in it for good; `deleter` as for ``trash(userId:fileId:now:by:)``.
    func deletePermanently(userId: String, fileId: String, now: Date, by deleter: Deleter?) async throws
    /// Restores everything trashed at or after `since`: how many trashed items, and how many items in all.
    func untrashAll(userId: String, since: Date, now: Date) async throws -> (restored: Int, items: Int)
    /// The user's devices whose deletions the breaker paused.
    func deletionPauses(userId: String) async throws -> [DeletionPause]
    /// Lets the paused devices go on (for one more `window` each); returns what was paused.
    func confirmDeletions(userId: String, window: Duration, now: Date) async throws -> [DeletionPause]

    // MARK: Change feed
    func latestSeq(userId: String) async throws -> Int64
    /// Changes after `seq`, oldest first; `nil` when the cursor is unknown or compacted away.
    func changes(userId: String, after seq: Int64, limit: Int) async throws -> (changes: [ChangeRecord], hasMore: Bool)?

    // MARK: Maintenance
    /// Deletes items trashed before `before`; returns how many rows went.
    func purgeTrash(trashedBefore before: Date, now: Date) async throws -> Int
    /// Forgets deletions (and lapsed confirmations) older than `before`, the start of the breaker's window.
    func pruneDeletionLog(before: Date) async throws -> Int
    /// Drops `delete` change rows older than `before` and raises each user's cursor floor.
    func compactChanges(before: Date) async throws -> Int
}

/// Content and revisions: commits of staged content, blocks (put, adopted, freed, swept), packs, resumable upload
/// sessions.
protocol ContentStore: Sendable {
    /// Commits staged content as a new file or a new revision; places the blocks, checks quota and `If-Match`,
    /// prunes revisions past retention. On failure the staged blocks are discarded.
    func commitContent(userId: String, target: ContentTarget, content: StagedContent, now: Date) async throws -> FileRecord
    /// Commits many staged contents in one transaction (one durable commit for all); each entry succeeds or fails
    /// on its own, in order, and a failed entry changes nothing. Blocks not committed are discarded.
    func commitBatch(userId: String, entries: [BatchEntry], now: Date) async throws -> [Result<(file: FileRecord, created: Bool), DriveError>]
    func revisions(userId: String, fileId: String, paging: Paging) async throws -> (revisions: [RevisionRecord], total: Int)
    func revision(userId: String, fileId: String, revisionId: String) async throws -> RevisionRecord
    func blocks(ofRevision revisionId: String) async throws -> [BlockRef]
    func restore(userId: String, fileId: String, revisionId: String, now: Date) async throws -> FileRecord

    // MARK: Blocks (`/v1/blocks/…`)
    /// The user's blocks among `hashes` with bytes in the store (live, or orphaned and not yet swept), and not damaged.
    func storedBlocks(userId: String, hashes: [String]) async throws -> [String: (block: BlockRef, live: Bool)]
    /// The user's blocks among `hashes` that are marked damaged (to be sent again).
    func damagedBlocks(userId: String, hashes: [String]) async throws -> Set<String>
    /// A revision of the user's and its blocks in order; 404 if it is not the user's.
    func revisionWithBlocks(userId: String, revisionId: String) async throws -> (revision: RevisionRecord, blocks: [BlockRef])
    /// Commits content made of blocks already stored (as ``commitContent(userId:target:content:now:)``, no put).
    func commitStoredContent(userId: String, target: ContentTarget, content: StagedContent, now: Date) async throws -> FileRecord
    /// Puts staged blocks in the blob store with their rows marked orphaned until a commit adopts them.
    func putBlocks(_ blocks: [StagedBlock], userId: String, now: Date) async throws

    // MARK: Resumable uploads
    /// Opens a session, or returns the one already opened with the same `requestId` (`created == false`).
    func createUpload(_ upload: UploadRecord, now: Date) async throws -> (upload: UploadRecord, created: Bool)
    /// The session with this id, whoever opened it (nil: none); routes pass it through the access decision.
    func uploadSession(id: String) async throws -> UploadRecord?
    /// The user's session; 404 if unknown (or another user's).
    func upload(id: String, userId: String) async throws -> UploadRecord
    /// Stores chunk `chunk` if it is the next one: places its blocks and advances `chunksProcessed` in one
    /// transaction, sliding the expiry. `stored == false` (blocks discarded) if it was already stored.
    func storeChunk(userId: String, uploadId: String, chunk: Int, blocks: [StagedBlock], now: Date, expiresAt: Date) async throws
        -> (upload: UploadRecord, stored: Bool)
    func uploadBlocks(uploadId: String) async throws -> [BlockRef]
    /// Commits a fully received session as a file or revision (target checks as ``commitContent``); idempotent.
    func finalizeUpload(userId: String, uploadId: String, checksum: String, now: Date) async throws -> (upload: UploadRecord, file: FileRecord)
    /// Deletes a session; its blocks no longer count against the quota (their bytes go with the next sweep).
    func deleteUpload(userId: String, uploadId: String, now: Date) async throws
    /// Frees the bytes of sessions past their expiry (they then answer 410) and forgets long-expired ones; WebDAV
    /// chunked uploads past theirs are deleted.
    func expireUploads(now: Date, forgetAfter: TimeInterval) async throws -> Int

    /// Deletes from the blob store the blocks sent but never committed before `before` (the grace period lets an
    /// upload in flight commit them), and the blocks freed — their last reference gone — before `freedBefore`;
    /// returns how many went. A pack left more than half dead by this is compacted (its live blocks moved into a new
    /// pack; the old one deleted once it is older than `freedBefore` at a later sweep).
    func sweepBlocks(orphanedBefore before: Date, freedBefore: Date, now: Date) async throws -> Int
    /// The earliest time this process freed blocks that no sweep has taken since (nil: none).
    var unsweptFreeingSince: Date? { get }
}

/// WebDAV's state: dead properties, locks, and Nextcloud's chunked uploads.
protocol WebDAVStore: Sendable {
    /// WebDAV dead properties (`PROPPATCH`) of the user's items, by item id.
    func deadProperties(userId: String, fileIds: [String]) async throws -> [String: [DeadProperty]]
    /// Sets and removes an item's dead properties in one transaction (all or nothing).
    func patchDeadProperties(userId: String, fileId: String, set: [DeadProperty], remove: [DeadProperty]) async throws

    /// The user's WebDAV locks that have not expired.
    func davLocks(userId: String, now: Date) async throws -> [DAVLock]
    /// Takes `lock` unless a lock of the user's conflicts with it (an exclusive one either way, on the same path,
    /// above it with depth infinity, or below it when `lock` is depth infinity): then returns false.
    func acquireDAVLock(_ lock: DAVLock, now: Date) async throws -> Bool
    /// A new expiry for the user's lock `token`; nil when there is no such live lock.
    func refreshDAVLock(userId: String, token: String, now: Date) async throws -> DAVLock?
    /// Removes locks by token (UNLOCK, or what a DELETE or MOVE took away); returns how many went.
    @discardableResult
    func releaseDAVLocks(userId: String, tokens: [String]) async throws -> Int

    // MARK: WebDAV chunked uploads (Nextcloud's), see SQLMetadataStore+DAVUploads
    func createDAVUpload(userId: String, name: String, destination: String?, now: Date, expiresAt: Date) async throws -> Bool
    func davUploads(userId: String, name: String?, now: Date) async throws -> [DAVUploadRecord]
    func storeDAVChunk(userId: String, upload: String, chunk: DAVUploadRecord.Chunk, blocks: [StagedBlock], now: Date, expiresAt: Date) async throws
    func davUploadBlocks(userId: String, upload: String) async throws -> [BlockRef]
    func finishDAVUpload(
        userId: String, upload: String, target: ContentTarget, blocks: [BlockRef], checksum: String, size: Int64, mimeType: String,
        modifiedAt: Date?, now: Date
    ) async throws -> FileRecord
    func deleteDAVUpload(userId: String, upload: String, chunk: Int64?, now: Date) async throws -> Bool
}

/// Sharing: grants of a role on an item to another user, and the mounts that place accepted ones in the grantee's
/// tree (``SQLMetadataStore`` keeps them in `grants` and `mounts`). Who may grant what is the access decision's
/// (``AccessPolicy``); these verbs keep the invariants: one grant per item and grantee and none nested inside
/// another for the same grantee, mount names unique among a folder's names, the grantee's feed told of every mount
/// that comes and goes.
protocol ShareStore: Sendable {
    /// A pending grant on the owner's item; 400 for the root or a trashed item, 409 `already_granted` when the
    /// grantee reaches it already (a grant on it, above it or below it).
    func createGrant(ownerId: String, itemId: String, granteeId: String, role: ShareRole, expiresAt: Date?, now: Date) async throws -> GrantRecord
    /// The grant with this id, whoever's (routes pass it through the access decision).
    func grant(id: String) async throws -> GrantRecord?
    /// Every grant on the owner's items, newest first.
    func grants(ownerId: String) async throws -> [GrantRecord]
    /// The grants on one of the owner's items, oldest first.
    func grants(ownerId: String, itemId: String) async throws -> [GrantRecord]
    /// A new role or expiry (nil: unchanged); takes effect on the next request. A new role puts the share in the
    /// grantee's feed again (what they may do with each item changed).
    func updateGrant(id: String, role: ShareRole?, expiresAt: Date?, now: Date) async throws -> GrantRecord
    /// Ends a grant: its mount leaves the grantee's tree (their feed sees the mount root deleted).
    func deleteGrant(id: String, now: Date) async throws
    /// The grants offered to the user that have not expired, newest first, whatever their state.
    func incomingGrants(granteeId: String, now: Date) async throws -> [GrantRecord]
    /// Mounts the grant in the grantee's folder `parentId` under `name` (the item's name by default; a taken one
    /// becomes `name (1)`); accepted already, the same mount again. 404 for a grant that is not theirs or expired.
    func acceptGrant(id: String, granteeId: String, parentId: String, name: String?, now: Date) async throws -> (mount: MountRecord, file: FileRecord)
    /// Declines a grant, or leaves an accepted one (its mount goes; the grant can be accepted again).
    func declineGrant(id: String, granteeId: String, now: Date) async throws
    /// The user's mount with this id.
    func mount(id: String, userId: String) async throws -> MountRecord?
    /// The share mounted under `name` in the user's folder `parentId` (its grant live, its item not trashed), as they
    /// see it (``FileRecord/mountId``; WebDAV walks paths through it); nil when there is none.
    func mountedChild(named name: String, in parentId: String, userId: String, now: Date) async throws -> FileRecord?
    /// A new name or folder for the user's mount (their view only); returns the mount root as they see it.
    func updateMount(userId: String, mountId: String, name: String?, parentId: String?, now: Date) async throws -> FileRecord
    /// How `userId` reaches `itemId`, someone else's item, if at all: the accepted, live grant on it or above it.
    func reach(userId: String, itemId: String, now: Date) async throws -> Reach?
    /// The item with this id and, when it is not `userId`'s, how they reach it — in one read (the access decision's
    /// question on every request).
    func item(id: String, reachedBy userId: String, now: Date) async throws -> (item: FileRecord, reach: Reach?)?
    /// Those of `ids` (the owner's items) that have grants of their own.
    func sharedItems(ownerId: String, among ids: [String]) async throws -> Set<String>
    /// Takes the mounts of grants past their expiry out of their grantees' trees; returns how many.
    func expireGrants(now: Date) async throws -> Int
}

/// Public links: a token (kept only as its hash) that lets anyone who has it view, edit or drop files into one item.
protocol LinkStore: Sendable {
    func createLink(_ link: LinkRecord, tokenHash: String) async throws -> LinkRecord
    /// The link with this id, whoever's (routes pass its item through the access decision).
    func link(id: String) async throws -> LinkRecord?
    /// The link a token names (revoked ones too: they answer 410, not 404).
    func link(tokenHash: String) async throws -> LinkRecord?
    /// The owner's links (not revoked), newest first; on one item when `itemId` is given.
    func links(ownerId: String, itemId: String?) async throws -> [LinkRecord]
    func updateLink(_ link: LinkRecord) async throws -> LinkRecord
    func revokeLink(id: String, now: Date) async throws
    /// Counts one whole download, unless the link is used up (false: nothing counted).
    func countDownload(linkId: String) async throws -> Bool
    /// The item and the folders above it, nearest first (empty: no such item): whether an item is beneath a link's.
    func ancestors(of itemId: String) async throws -> [String]
}
