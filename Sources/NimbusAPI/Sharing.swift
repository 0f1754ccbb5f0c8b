import Foundation

/// A user as other users see them: in grants, as an item's owner.
public struct UserRef: Codable, Sendable, Hashable {
    public var userId: String
    public var username: String

    public init(userId: String, username: String) {
        self.userId = userId
        self.username = username
    }
}

/// What the asking user may do with an item (`File.capabilities`).
public struct Capabilities: Codable, Sendable, Hashable {
    /// New versions, new items inside (a folder).
    public var canEdit: Bool
    public var canRename: Bool
    public var canDelete: Bool
    /// Grants and links.
    public var canShare: Bool

    public init(canEdit: Bool, canRename: Bool, canDelete: Bool, canShare: Bool) {
        self.canEdit = canEdit
        self.canRename = canRename
        self.canDelete = canDelete
        self.canShare = canShare
    }
}

/// A role on a shared item, and on everything under it. Each holds the one before it.
public enum ShareRole: String, Codable, Sendable, CaseIterable, Comparable {
    /// List, read, download, preview, list revisions.
    case viewer
    /// And: upload, new versions, create, rename and move inside the share, trash and untrash inside it, restore a
    /// revision.
    case editor
    /// And: grants and links, never above its own role.
    case manager

    public static func < (lhs: ShareRole, rhs: ShareRole) -> Bool {
        allCases.firstIndex(of: lhs) ?? 0 < allCases.firstIndex(of: rhs) ?? 0
    }
}

/// A grant of a role on an item to one user.
public struct Grant: Codable, Sendable, Hashable {
    public enum State: String, Codable, Sendable {
        /// Offered: the grantee has not answered (nothing is in their tree yet).
        case pending
        /// Mounted in the grantee's tree.
        case accepted
        /// Declined, or left: it can still be accepted from the incoming list.
        case declined
    }

    public var id: String
    public var itemId: String
    public var grantee: UserRef
    public var role: ShareRole
    public var state: State
    public var createdAt: Date
    public var expiresAt: Date?

    public init(id: String, itemId: String, grantee: UserRef, role: ShareRole, state: State, createdAt: Date, expiresAt: Date?) {
        self.id = id
        self.itemId = itemId
        self.grantee = grantee
        self.role = role
        self.state = state
        self.createdAt = createdAt
        self.expiresAt = expiresAt
    }
}

/// `POST /v1/files/{fileId}/grants`: `user` is a username (or a user id).
public struct GrantRequest: Codable, Sendable, Hashable {
    public var user: String
    public var role: ShareRole
    public var expiresAt: Date?

    public init(user: String, role: ShareRole, expiresAt: Date? = nil) {
        self.user = user
        self.role = role
        self.expiresAt = expiresAt
    }
}

/// `PATCH /v1/grants/{grantId}`: what changes (absent: unchanged).
public struct GrantUpdate: Codable, Sendable, Hashable {
    public var role: ShareRole?
    public var expiresAt: Date?

    public init(role: ShareRole? = nil, expiresAt: Date? = nil) {
        self.role = role
        self.expiresAt = expiresAt
    }
}

/// A public link to an item.
public struct Link: Codable, Sendable, Hashable {
    public enum Access: String, Codable, Sendable {
        case view, edit, upload
    }

    public var id: String
    public var url: String
    /// The secret part of the URL: only in the answer that made the link and in `GET /v1/links/{id}`.
    public var token: String?
    public var access: Access
    public var expiresAt: Date?
    public var maxDownloads: Int?
    public var downloads: Int
    public var passwordSet: Bool
    public var createdAt: Date
    /// The item it links to.
    public var itemId: String?

    public init(
        id: String, url: String, token: String?, access: Access, expiresAt: Date?, maxDownloads: Int?, downloads: Int, passwordSet: Bool,
        createdAt: Date, itemId: String? = nil
    ) {
        self.itemId = itemId
        self.id = id
        self.url = url
        self.token = token
        self.access = access
        self.expiresAt = expiresAt
        self.maxDownloads = maxDownloads
        self.downloads = downloads
        self.passwordSet = passwordSet
        self.createdAt = createdAt
    }
}

/// `GET /v1/files/{fileId}/grants`: the item's grants and links (the owner and managers see all; a grantee, its own).
public struct GrantList: Codable, Sendable, Hashable {
    public var grants: [Grant]
    public var links: [Link]

    public init(grants: [Grant], links: [Link]) {
        self.grants = grants
        self.links = links
    }
}

/// One share offered to or held by the asking user.
public struct IncomingShare: Codable, Sendable, Hashable {
    public var grant: Grant
    public var item: File
    public var owner: UserRef

    public init(grant: Grant, item: File, owner: UserRef) {
        self.grant = grant
        self.item = item
        self.owner = owner
    }
}

/// `GET /v1/shares/incoming`.
public struct IncomingShareList: Codable, Sendable, Hashable {
    public var shares: [IncomingShare]

    public init(shares: [IncomingShare]) { self.shares = shares }
}

/// `POST /v1/shares/incoming/{grantId}/accept`: where the share goes in the grantee's tree (their root, under the
/// item's own name, by default).
public struct AcceptShareRequest: Codable, Sendable, Hashable {
    public var parentId: String?
    public var name: String?

    public init(parentId: String? = nil, name: String? = nil) {
        self.parentId = parentId
        self.name = name
    }
}

/// The accepted share: its mount, and the mount root as the grantee sees it.
public struct AcceptedShare: Codable, Sendable, Hashable {
    public var mountId: String
    public var file: File

    public init(mountId: String, file: File) {
        self.mountId = mountId
        self.file = file
    }
}

/// `POST /v1/files/{fileId}/links`.
public struct LinkRequest: Codable, Sendable, Hashable {
    public var access: Link.Access
    /// At least 8 characters; a weaker one is refused (never a link without the protection asked for).
    public var password: String?
    public var expiresAt: Date?
    public var maxDownloads: Int?

    public init(access: Link.Access, password: String? = nil, expiresAt: Date? = nil, maxDownloads: Int? = nil) {
        self.access = access
        self.password = password
        self.expiresAt = expiresAt
        self.maxDownloads = maxDownloads
    }
}

/// `PATCH /v1/links/{linkId}`: what changes (absent: unchanged; an empty password removes it).
public struct LinkUpdate: Codable, Sendable, Hashable {
    public var password: String?
    public var expiresAt: Date?
    public var maxDownloads: Int?

    public init(password: String? = nil, expiresAt: Date? = nil, maxDownloads: Int? = nil) {
        self.password = password
        self.expiresAt = expiresAt
        self.maxDownloads = maxDownloads
    }
}

/// `GET /v1/links`: the links on the asking user's items (their tokens are not in a list).
public struct LinkList: Codable, Sendable, Hashable {
    public var links: [Link]

    public init(links: [Link]) { self.links = links }
}

/// `GET /v1/public/{token}`: what a link shows anyone who has it.
public struct PublicLinkInfo: Codable, Sendable, Hashable {
    /// The linked item's id (its content: `/v1/public/{token}/items/{itemId}/content`).
    public var itemId: String
    public var name: String
    public var isFolder: Bool
    public var size: Int64
    public var mimeType: String
    public var access: Link.Access
    public var expiresAt: Date?
    public var passwordRequired: Bool

    public init(
        itemId: String, name: String, isFolder: Bool, size: Int64, mimeType: String, access: Link.Access, expiresAt: Date?, passwordRequired: Bool
    ) {
        self.itemId = itemId
        self.name = name
        self.isFolder = isFolder
        self.size = size
        self.mimeType = mimeType
        self.access = access
        self.expiresAt = expiresAt
        self.passwordRequired = passwordRequired
    }
}

/// `POST /v1/public/{token}/session`.
public struct LinkSessionRequest: Codable, Sendable, Hashable {
    public var password: String?

    public init(password: String? = nil) { self.password = password }
}

/// A bearer for a link's calls (`Authorization: Bearer <session>`), for a while.
public struct LinkSession: Codable, Sendable, Hashable {
    public var session: String
    public var expiresAt: Date

    public init(session: String, expiresAt: Date) {
        self.session = session
        self.expiresAt = expiresAt
    }
}

/// `POST /v1/public/{token}/upload`: the same answer whether or not the name was taken (a file drop tells nothing of
/// what the folder holds).
public struct PublicUpload: Codable, Sendable, Hashable {
    public var received: Bool
    public var size: Int64

    public init(received: Bool, size: Int64) {
        self.received = received
        self.size = size
    }
}
