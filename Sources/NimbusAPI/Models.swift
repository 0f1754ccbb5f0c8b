import Foundation

/// The MIME type that marks a `File` as a folder.
public let folderMimeType = "application/vnd.nimbus.folder"

/// A file or folder as the API returns it (`GET /v1/files/{id}`).
///
/// A folder is a file whose `mimeType` is ``folderMimeType``; it has no content, `size` 0 and no revision.
public struct File: Codable, Sendable, Hashable {
    public var id: String
    public var name: String
    public var mimeType: String
    /// The containing folder; `nil` only for the user's root folder.
    public var parentId: String?
    public var size: Int64
    /// Lowercase hex SHA-256 of the whole content (absent for folders).
    public var checksum: String?
    /// The head revision (absent for folders).
    public var revisionId: String?
    public var createdAt: Date
    public var modifiedAt: Date
    /// Where the content is (`/v1/files/{id}/content`; absent for folders).
    public var downloadUrl: String?
    public var trashed: Bool
    /// Whose tree the item is in (absent in answers that do not say).
    public var owner: UserRef?
    /// Whether the item has grants or links of its own.
    public var shared: Bool?
    /// What the asking user may do with it.
    public var capabilities: Capabilities?
    /// The mount an item of someone else's reaches this user's tree through (the mount root and everything below).
    public var mountId: String?
    /// Where the item is in the asking user's tree, e.g. `/Work/notes.txt` (search results).
    public var path: String?
    /// Whether the asking user starred it (listings, search, starred and recent say).
    public var starred: Bool?

    public init(
        id: String, name: String, mimeType: String, parentId: String?, size: Int64, checksum: String?,
        revisionId: String?, createdAt: Date, modifiedAt: Date, downloadUrl: String?, trashed: Bool
    ) {
        self.id = id
        self.name = name
        self.mimeType = mimeType
        self.parentId = parentId
        self.size = size
        self.checksum = checksum
        self.revisionId = revisionId
        self.createdAt = createdAt
        self.modifiedAt = modifiedAt
        self.downloadUrl = downloadUrl
        self.trashed = trashed
    }

    public var isFolder: Bool { mimeType == folderMimeType }

    enum CodingKeys: String, CodingKey {
        case id, name, mimeType, parentId, size, checksum, revisionId, createdAt, modifiedAt, downloadUrl, trashed
        case owner, shared, capabilities, mountId, path, starred
    }

    /// Like the synthesized encoding, except that `parentId` is always present (`null` for the root folder).
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encode(name, forKey: .name)
        try container.encode(mimeType, forKey: .mimeType)
        try container.encode(parentId, forKey: .parentId)
        try container.encode(size, forKey: .size)
        try container.encodeIfPresent(checksum, forKey: .checksum)
        try container.encodeIfPresent(revisionId, forKey: .revisionId)
        try container.encode(createdAt, forKey: .createdAt)
        try container.encode(modifiedAt, forKey: .modifiedAt)
        try container.encodeIfPresent(downloadUrl, forKey: .downloadUrl)
        try container.encode(trashed, forKey: .trashed)
        try container.encodeIfPresent(owner, forKey: .owner)
        try container.encodeIfPresent(shared, forKey: .shared)
        try container.encodeIfPresent(capabilities, forKey: .capabilities)
        try container.encodeIfPresent(mountId, forKey: .mountId)
        try container.encodeIfPresent(path, forKey: .path)
        try container.encodeIfPresent(starred, forKey: .starred)
    }
}

/// One content version of a file (`GET /v1/files/{id}/revisions/{revisionId}`).
public struct FileRevision: Codable, Sendable, Hashable {
    public var revisionId: String
    public var fileId: String
    public var mimeType: String
    public var size: Int64
    public var modifiedAt: Date
    public var downloadUrl: String
    public var checksum: String

    public init(
        revisionId: String, fileId: String, mimeType: String, size: Int64, modifiedAt: Date, downloadUrl: String,
        checksum: String
    ) {
        self.revisionId = revisionId
        self.fileId = fileId
        self.mimeType = mimeType
        self.size = size
        self.modifiedAt = modifiedAt
        self.downloadUrl = downloadUrl
        self.checksum = checksum
    }
}

/// Where a page sits in a listing; `nextPage` is absent on the last page.
public struct Pagination: Codable, Sendable, Hashable {
    public var page: Int
    public var limit: Int
    public var totalItems: Int
    public var nextPage: Int?

    public init(page: Int, limit: Int, totalItems: Int, nextPage: Int?) {
        self.page = page
        self.limit = limit
        self.totalItems = totalItems
        self.nextPage = nextPage
    }
}

/// `GET /v1/files` and `GET /v1/trash`.
public struct FileList: Codable, Sendable, Hashable {
    public var files: [File]
    public var pagination: Pagination

    public init(files: [File], pagination: Pagination) {
        self.files = files
        self.pagination = pagination
    }
}

/// `GET /v1/files/{id}/revisions`.
public struct RevisionList: Codable, Sendable, Hashable {
    public var revisions: [FileRevision]
    public var pagination: Pagination

    public init(revisions: [FileRevision], pagination: Pagination) {
        self.revisions = revisions
        self.pagination = pagination
    }
}

/// `POST /v1/files`: a folder or an empty file.
public struct CreateFileRequest: Codable, Sendable, Hashable {
    public var name: String
    public var mimeType: String
    public var parentId: String?
    /// Makes a retried create idempotent: the same `requestId` returns the file made the first time.
    public var requestId: String?

    public init(name: String, mimeType: String, parentId: String? = nil, requestId: String? = nil) {
        self.name = name
        self.mimeType = mimeType
        self.parentId = parentId
        self.requestId = requestId
    }
}

/// `PATCH /v1/files/{id}`: rename and/or move.
public struct UpdateFileRequest: Codable, Sendable, Hashable {
    public var name: String?
    public var parentId: String?

    public init(name: String? = nil, parentId: String? = nil) {
        self.name = name
        self.parentId = parentId
    }
}

/// What to do when a name is already taken in the target folder.
public enum ConflictPolicy: String, Codable, Sendable, CaseIterable {
    /// 409 naming the existing file.
    case fail
    /// Pick a free name: `name (1).ext`, `name (2).ext`, ...
    case rename
    /// Replace: a new revision of the existing file (files only).
    case replace
}

/// `POST /v1/upload?uploadType=resumable`.
public struct UploadRequest: Codable, Sendable, Hashable {
    public var requestId: String
    public var name: String
    public var mimeType: String
    public var parentId: String?
    public var size: Int64
    /// Set to upload a new version of this file (send `If-Match` with its head revision).
    public var fileId: String?
    /// Lowercase hex SHA-256 of the whole content, checked when the last chunk arrives.
    public var checksum: String?

    public init(
        requestId: String, name: String, mimeType: String, parentId: String?, size: Int64, fileId: String? = nil,
        checksum: String? = nil
    ) {
        self.requestId = requestId
        self.name = name
        self.mimeType = mimeType
        self.parentId = parentId
        self.size = size
        self.fileId = fileId
        self.checksum = checksum
    }
}

/// The state of a resumable upload session.
public struct UploadResponse: Codable, Sendable, Hashable {
    public var uploadId: String
    public var totalChunks: Int
    public var chunksProcessed: Int
    public var chunkSize: Int64
    public var uploadUrl: String
    public var uploadExpiresAt: Date
    /// The committed file, once the last chunk is in.
    public var file: File?

    public init(
        uploadId: String, totalChunks: Int, chunksProcessed: Int, chunkSize: Int64, uploadUrl: String,
        uploadExpiresAt: Date, file: File? = nil
    ) {
        self.uploadId = uploadId
        self.totalChunks = totalChunks
        self.chunksProcessed = chunksProcessed
        self.chunkSize = chunkSize
        self.uploadUrl = uploadUrl
        self.uploadExpiresAt = uploadExpiresAt
        self.file = file
    }
}

/// One entry of the change feed.
public struct Change: Codable, Sendable, Hashable {
    public enum Kind: String, Codable, Sendable {
        case upsert
        case delete
    }

    public var seq: Int64
    public var type: Kind
    public var fileId: String
    /// The file's current state (absent for `delete`).
    public var file: File?
    /// For an item of someone else's share: the mount it reaches this user through (a `delete` of the mount's root
    /// with it: the share left this user's tree).
    public var mountId: String?

    public init(seq: Int64, type: Kind, fileId: String, file: File?, mountId: String? = nil) {
        self.seq = seq
        self.type = type
        self.fileId = fileId
        self.file = file
        self.mountId = mountId
    }
}

/// `GET /v1/changes`.
public struct ChangeList: Codable, Sendable, Hashable {
    public var changes: [Change]
    public var cursor: String
    public var hasMore: Bool

    public init(changes: [Change], cursor: String, hasMore: Bool) {
        self.changes = changes
        self.cursor = cursor
        self.hasMore = hasMore
    }
}

/// `GET /v1/changes/start`.
public struct ChangeCursor: Codable, Sendable, Hashable {
    public var cursor: String

    public init(cursor: String) { self.cursor = cursor }
}

/// `GET /v1/about`.
public struct About: Codable, Sendable, Hashable {
    public struct Quota: Codable, Sendable, Hashable {
        public var used: Int64
        /// `nil` when the user has no quota.
        public var limit: Int64?

        public init(used: Int64, limit: Int64?) {
            self.used = used
            self.limit = limit
        }

        /// `limit` is always there: `null` when unlimited (as `openapi.yaml` says), never left out.
        public func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(used, forKey: .used)
            try container.encode(limit, forKey: .limit)
        }
    }

    public var userId: String
    public var username: String
    public var quota: Quota
    public var maxUploadSize: Int64
    public var chunkSize: Int64
    public var apiVersion: String

    public init(userId: String, username: String, quota: Quota, maxUploadSize: Int64, chunkSize: Int64, apiVersion: String) {
        self.userId = userId
        self.username = username
        self.quota = quota
        self.maxUploadSize = maxUploadSize
        self.chunkSize = chunkSize
        self.apiVersion = apiVersion
    }
}

/// `POST /v1/upload?uploadType=batch`: many small files in one request and one server transaction (a tree of
/// small files costs one round trip and one durable commit per batch, not per file). Each entry is a new file
/// (`name`, `parentId`, `requestId`, `onConflict`) or a new version (`fileId`, `ifMatch`); entries succeed or
/// fail on their own, in ``BatchUploadResponse/results``, in the same order.
public struct BatchUploadRequest: Codable, Sendable, Hashable {
    /// At most ``BatchUploadRequest/maxFiles`` entries, together at most ``BatchUploadRequest/maxContentBytes``.
    public static let maxFiles = 1000
    public static let maxContentBytes = 32 * 1024 * 1024

    public struct Entry: Codable, Sendable, Hashable {
        public var name: String?
        public var parentId: String?
        public var mimeType: String?
        /// Makes the creation safe to retry: the same id returns the file the first attempt made.
        public var requestId: String?
        /// `fail` (default), `rename` or `replace`, as for the other uploads.
        public var onConflict: String?
        /// A new version of this file instead of a new file; `ifMatch` is its expected head revision.
        public var fileId: String?
        public var ifMatch: String?
        /// Lowercase hex SHA-256 of the content; a mismatch fails this entry (422).
        public var checksum: String?
        /// The bytes, base64.
        public var content: Data
        /// When the content was last changed on the client (its file's mtime); the file's `modifiedAt` then. Default:
        /// the commit's time.
        public var modifiedAt: Date?

        public init(
            name: String? = nil, parentId: String? = nil, mimeType: String? = nil, requestId: String? = nil, onConflict: String? = nil,
            fileId: String? = nil, ifMatch: String? = nil, checksum: String? = nil, content: Data, modifiedAt: Date? = nil
        ) {
            self.modifiedAt = modifiedAt
            self.name = name
            self.parentId = parentId
            self.mimeType = mimeType
            self.requestId = requestId
            self.onConflict = onConflict
            self.fileId = fileId
            self.ifMatch = ifMatch
            self.checksum = checksum
            self.content = content
        }
    }

    public var files: [Entry]

    public init(files: [Entry]) { self.files = files }
}

/// The answer to a batch: one result per entry, in order — `status` 201 (or 200 for a retried `requestId`) with
/// the `file`, or the status and `error` that entry alone would have had.
public struct BatchUploadResponse: Codable, Sendable, Hashable {
    public struct Result: Codable, Sendable, Hashable {
        public var status: Int
        public var file: File?
        public var error: APIErrorBody.Detail?

        public init(status: Int, file: File? = nil, error: APIErrorBody.Detail? = nil) {
            self.status = status
            self.file = file
            self.error = error
        }
    }

    public var results: [Result]

    public init(results: [Result]) { self.results = results }
}
