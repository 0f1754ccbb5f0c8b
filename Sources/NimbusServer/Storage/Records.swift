import Crypto
import Foundation
import NimbusAPI

/// A user account as stored.
struct UserRecord: Sendable, Equatable {
    var id: String
    var username: String
    var passwordHash: String
    var quotaLimit: Int64?
    var usedBytes: Int64
    var rootId: String
    var createdAt: Date
    /// When the operator disabled the account (`nimbus user disable`): nothing signs in while it is set.
    var disabledAt: Date? = nil
}

/// A signed-in device: one refresh token each, rotated on every use.
struct DeviceRecord: Sendable, Equatable {
    var id: String
    var userId: String
    var name: String
    var refreshHash: String
    var lastUsedAt: Date
    var revokedAt: Date?
    /// Its user's account is disabled (read with the device, so every request sees it at once).
    var userDisabled = false
}

/// An app password (for WebDAV's Basic auth): only its SHA-256 is kept — it is 124 random bits, so a fast hash
/// is as safe as a slow one, and a sign-in finds it by its hash.
struct AppPasswordRecord: Sendable, Equatable {
    var id: String
    var userId: String
    var label: String
    var passwordHash: String
    var createdAt: Date
    var lastUsedAt: Date?
}

/// A sign-in of one of Nextcloud's apps in progress (``LoginFlow``): made when the app asks, signed in to on the
/// login page (`userId`, and the hash of the grant form's secret), granted (the new app password `sealed` to a key
/// only the app's poll token opens), and deleted when the app collects it or it expires.
struct LoginFlowRecord: Sendable, Equatable {
    var loginToken: String
    /// The public key the poll token derives, hex (Login Flow v2: the poll finds the flow by it and the grant seals
    /// to it); nil for v1, which hands the password over in a redirect.
    var pollHash: String?
    var clientName: String
    var userId: String?
    var grantHash: String?
    var sealed: [UInt8]?
    var loginName: String?
    var createdAt: Date
    var expiresAt: Date
}

/// A WebDAV dead property: what a client stored on an item with `PROPPATCH` (`value` is the property element's
/// content as XML; empty for a removal).
struct DeadProperty: Sendable, Equatable {
    var namespace: String
    var name: String
    var value: String = ""
}

/// A WebDAV write lock on a path (names from the user's root joined by "/"; "" is the root). Locks are on paths,
/// not items: a lock on a name that does not exist yet reserves it, and a MOVE does not take locks along.
struct DAVLock: Sendable, Equatable {
    var token: String
    var userId: String
    var path: String
    var infinite: Bool
    var exclusive: Bool
    var owner: String
    var timeoutSeconds: Int
    var expiresAt: Date

    /// Whether the lock applies to `other`: the same path, or one inside it for a depth-infinity lock.
    func covers(_ other: String) -> Bool {
        other == path || (infinite && (path.isEmpty || other.hasPrefix(path + "/")))
    }

    /// Whether `other` is this lock's path or inside it at any depth (what deleting `other`'s tree would touch).
    func isInside(_ other: String) -> Bool {
        path == other || other.isEmpty || path.hasPrefix(other + "/")
    }
}

/// A file or folder row.
struct FileRecord: Sendable, Equatable {
    var id: String
    var userId: String
    var parentId: String?
    var name: String
    var mimeType: String
    var isFolder: Bool
    var size: Int64
    var checksum: String?
    var headRevisionId: String?
    /// Bumped by every change to the row; a folder's `ETag`.
    var version: Int64
    /// A folder's: bumped whenever anything beneath it changes (``davETag``).
    var treeVersion: Int64 = 0
    /// The explicitly trashed item this row went to the trash with (itself, or an ancestor); `nil` = live.
    var trashRoot: String?
    var trashedAt: Date?
    var createdAt: Date
    var modifiedAt: Date
    /// Set when the record is a share's root as the grantee sees it: `name` and `parentId` are then the mount's, in
    /// the grantee's tree (``MountRecord``).
    var mountId: String? = nil
    /// How the user asking reaches this item of someone else's (set by the access decision's caller, for what the
    /// answer shows them: ``Dependencies/present(_:for:through:)``).
    var seenThrough: Reach? = nil

    /// The item as the grantee `reach` belongs to sees it: through that grant, and — the share's own root — under
    /// their mount's name, in their mount's folder.
    func seen(through reach: Reach?) -> FileRecord {
        var seen = self
        seen.seenThrough = reach
        if let reach, reach.isRoot {
            seen.mountId = reach.mount.id
            seen.name = reach.mount.name
            seen.parentId = reach.mount.parentId
        }
        return seen
    }

    var isTrashed: Bool { trashRoot != nil }

    /// The `ETag` value (unquoted): the head revision, or `v<version>` for a folder.
    var etag: String { headRevisionId ?? "v\(version)" }

    /// The WebDAV `ETag`: a file's revision; a folder's moves whenever anything beneath it does (as Nextcloud's), so
    /// a client that finds it unchanged can skip the subtree. The id makes it unique: a folder replaced by another
    /// never shows the ETag the first had.
    var davETag: String { isFolder ? "t\(id).\(treeVersion)" : etag }

    var api: File {
        File(
            id: id, name: name, mimeType: mimeType, parentId: parentId, size: size, checksum: checksum,
            revisionId: headRevisionId, createdAt: createdAt, modifiedAt: modifiedAt,
            downloadUrl: isFolder ? nil : Routes.content.path(id), trashed: isTrashed)
    }
}

/// A role on an item for another user (``ShareStore``).
struct GrantRecord: Sendable, Equatable {
    var id: String
    var ownerId: String
    var itemId: String
    var granteeId: String
    var role: ShareRole
    var state: Grant.State
    var createdAt: Date
    var expiresAt: Date?

    func isLive(at now: Date) -> Bool { expiresAt.map { $0 > now } ?? true }
}

/// A public link to an item (``LinkStore``).
struct LinkRecord: Sendable, Equatable {
    var id: String
    var ownerId: String
    var itemId: String
    var access: Link.Access
    var passwordHash: String?
    var expiresAt: Date?
    var maxDownloads: Int?
    var downloads: Int
    var createdAt: Date
    var revokedAt: Date?

    /// Why the link no longer works (410), if it does not.
    func ended(at now: Date) -> String? {
        if revokedAt != nil { return "This link was turned off by its owner." }
        if let expiresAt, expiresAt <= now { return "This link has expired." }
        if let maxDownloads, downloads >= maxDownloads { return "This link has been used as many times as it may be." }
        return nil
    }
}

/// Where an accepted grant sits in the grantee's tree.
struct MountRecord: Sendable, Equatable {
    var id: String
    var userId: String
    var grantId: String
    var itemId: String
    var parentId: String
    var name: String
    var createdAt: Date
}

/// How a user reaches an item of someone else's: through an accepted, unexpired grant on it or a folder above it,
/// mounted in their tree.
struct Reach: Sendable, Equatable {
    var grant: GrantRecord
    var mount: MountRecord
    var role: ShareRole { grant.role }
    /// Whether the item is the share's root (the mount's own item).
    var isRoot: Bool

    /// The same grant, for an item beneath the one this reach is of (a folder's children, a path's next name).
    var beneath: Reach {
        var inside = self
        inside.isRoot = false
        return inside
    }
}

/// One content version of a file.
struct RevisionRecord: Sendable, Equatable {
    var id: String
    var fileId: String
    var userId: String
    var mimeType: String
    var size: Int64
    var checksum: String
    var createdAt: Date

    var api: FileRevision {
        FileRevision(
            revisionId: id, fileId: fileId, mimeType: mimeType, size: size, modifiedAt: createdAt,
            downloadUrl: Routes.revisionContent.path(fileId, id), checksum: checksum)
    }
}

/// A change-feed row joined with the file's current state.
struct ChangeRecord: Sendable, Equatable {
    /// The feed position (shared by all users; never shown: cursors seal it).
    var seq: Int64
    /// The user's own change number (`seq` in the API): grows by one per change of this user's.
    var userSeq: Int64
    var kind: Change.Kind
    var fileId: String
    var file: FileRecord?
    /// A grantee's row: the mount the item reaches them through.
    var mountId: String? = nil
}

/// What a content commit writes to.
enum ContentTarget: Sendable, Equatable {
    /// A new file in a folder; a name clash follows the policy. A `requestId` makes a retry return the file the
    /// first attempt made.
    case new(parentId: String?, name: String, policy: ConflictPolicy, requestId: String? = nil)
    /// A new revision of an existing file; `ifMatch` (a revision id) guards against lost updates.
    case existing(fileId: String, ifMatch: String?)
}

/// One entry of a batch upload: where the content goes and the content.
struct BatchEntry: Sendable {
    var target: ContentTarget
    var content: StagedContent
}

/// Content ready to commit: staged blocks plus what the stager measured.
struct StagedContent: Sendable {
    /// Content up to this size is kept in the metadata database (one row, written by the commit's transaction)
    /// instead of a block file: a tree of small files costs no file creation, fsync and rename per file.
    static let inlineLimit = 64 * 1024

    var blocks: [StagedBlock]
    var checksum: String
    var size: Int64
    var mimeType: String
    /// The modification time the client gave (WebDAV's `X-OC-Mtime`); nil: the commit's time.
    var modifiedAt: Date? = nil

    /// Small content held in memory, as at most one inline block.
    static func inline(_ bytes: [UInt8], mimeType: String) -> StagedContent {
        let checksum = SHA256.hash(data: bytes).hexString
        let blocks = bytes.isEmpty ? [] : [StagedBlock(ref: BlockRef(hash: checksum, size: Int64(bytes.count)), path: "", data: bytes)]
        return StagedContent(blocks: blocks, checksum: checksum, size: Int64(bytes.count), mimeType: mimeType)
    }
}

/// A resumable upload session as stored.
struct UploadRecord: Sendable, Equatable {
    enum State: String, Sendable {
        case active
        /// Past its expiry: its bytes are freed and it answers 410 until the row is removed.
        case expired
    }

    var id: String
    var userId: String
    var requestId: String
    var name: String
    var mimeType: String
    var parentId: String?
    var fileId: String?
    var ifMatch: String?
    var policy: ConflictPolicy
    var size: Int64
    var checksum: String?
    var chunkSize: Int64
    var totalChunks: Int
    var chunksProcessed: Int
    var createdAt: Date
    var expiresAt: Date
    var completedFileId: String?
    var state: State

    /// The byte range chunk `k` must cover: `[k*chunkSize, min((k+1)*chunkSize, size))`.
    func range(ofChunk k: Int) -> Range<Int64> {
        let start = Int64(k) * chunkSize
        return start..<min(start + chunkSize, size)
    }

    /// The session as the API shows it; `file`: what it made, as the asking user sees it.
    func api(file: File? = nil) -> UploadResponse {
        UploadResponse(
            uploadId: id, totalChunks: totalChunks, chunksProcessed: chunksProcessed, chunkSize: chunkSize,
            uploadUrl: Routes.uploadChunk.path(id), uploadExpiresAt: expiresAt, file: file)
    }
}
