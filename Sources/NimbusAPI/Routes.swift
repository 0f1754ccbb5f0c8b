import Foundation

/// One route of the API, written once for both sides: its method, its path with OpenAPI's `{name}` placeholders (as
/// in `openapi.yaml`), and the types of its request body and answer. The server adds it to its router; clients
/// (NimbusSync, the CLI) build their requests from it, so a path is never spelled twice.
public struct Endpoint<Body: Sendable, Answer: Sendable>: Sendable, CustomStringConvertible {
    /// `GET`, `POST`, `PUT`, `PATCH`, `DELETE`.
    public let method: String
    /// The path as `openapi.yaml` writes it, e.g. `/v1/files/{fileId}`.
    public let template: String

    public init(_ method: String, _ template: String) {
        self.method = method
        self.template = template
    }

    public var description: String { "\(method) \(template)" }

    /// The path with each `{placeholder}` replaced, in order, by one of `parameters` (percent-encoded as a path
    /// segment), and the query items whose value is not nil appended (percent-encoded).
    public func path(_ parameters: String..., query: KeyValuePairs<String, String?> = [:]) -> String {
        path(parameters, query: query)
    }

    /// ``path(_:query:)`` with the parameters as an array.
    public func path(_ parameters: [String], query: KeyValuePairs<String, String?> = [:]) -> String {
        var result = ""
        var remaining = parameters[...]
        var rest = template[...]
        while let open = rest.firstIndex(of: "{"), let close = rest[open...].firstIndex(of: "}") {
            result += rest[..<open]
            result += (remaining.popFirst() ?? "").pathSegmentEscaped
            rest = rest[rest.index(after: close)...]
        }
        result += rest
        let items = query.compactMap { key, value in value.map { "\(key)=\($0.pathSegmentEscaped)" } }
        return items.isEmpty ? result : result + "?" + items.joined(separator: "&")
    }
}

/// No request body, or an answer without one (`204`).
public struct NoBody: Codable, Sendable, Equatable {
    public init() {}
}

/// Every `/v1` route (see `openapi.yaml` for what each does).
public enum Routes {
    // MARK: Auth
    public static let register = Endpoint<Credentials, RegisteredUser>("POST", "/v1/auth/register")
    public static let login = Endpoint<Credentials, TokenPair>("POST", "/v1/auth/login")
    public static let refresh = Endpoint<RefreshRequest, TokenPair>("POST", "/v1/auth/refresh")
    public static let logout = Endpoint<NoBody, NoBody>("POST", "/v1/auth/logout")
    public static let createAppPassword = Endpoint<AppPasswordRequest, AppPassword>("POST", "/v1/auth/app-passwords")
    public static let appPasswords = Endpoint<NoBody, AppPasswordList>("GET", "/v1/auth/app-passwords")
    public static let revokeAppPassword = Endpoint<NoBody, NoBody>("DELETE", "/v1/auth/app-passwords/{id}")

    // MARK: Files and folders
    public static let listFiles = Endpoint<NoBody, FileList>("GET", "/v1/files")
    public static let createFile = Endpoint<CreateFileRequest, File>("POST", "/v1/files")
    public static let file = Endpoint<NoBody, File>("GET", "/v1/files/{fileId}")
    public static let updateFile = Endpoint<UpdateFileRequest, File>("PATCH", "/v1/files/{fileId}")
    public static let deleteFile = Endpoint<NoBody, NoBody>("DELETE", "/v1/files/{fileId}")
    public static let untrash = Endpoint<NoBody, File>("POST", "/v1/files/{fileId}/untrash")
    public static let trash = Endpoint<NoBody, FileList>("GET", "/v1/trash")
    public static let restoreTrash = Endpoint<RestoreTrashRequest, RestoreTrashResponse>("POST", "/v1/trash/restore")
    public static let pausedDeletions = Endpoint<NoBody, DeletionPauseList>("GET", "/v1/trash/paused")
    public static let confirmDeletions = Endpoint<NoBody, DeletionPauseList>("POST", "/v1/trash/confirm")

    // MARK: Finding and seeing files
    /// Items whose names contain `q` (case, accents and width ignored), in the user's tree and accepted shares.
    public static let search = Endpoint<NoBody, FileList>("GET", "/v1/search")
    public static let thumbnail = Endpoint<NoBody, Data>("GET", "/v1/files/{fileId}/thumbnail")
    public static let star = Endpoint<NoBody, NoBody>("PUT", "/v1/files/{fileId}/star")
    public static let unstar = Endpoint<NoBody, NoBody>("DELETE", "/v1/files/{fileId}/star")
    public static let starred = Endpoint<NoBody, FileList>("GET", "/v1/starred")
    public static let recent = Endpoint<NoBody, FileList>("GET", "/v1/recent")
    public static let activity = Endpoint<NoBody, ActivityList>("GET", "/v1/activity")
    /// A streamed zip of `ids` (files and folders, comma-separated).
    public static let zip = Endpoint<NoBody, Data>("GET", "/v1/zip")

    // MARK: Sharing
    public static let createGrant = Endpoint<GrantRequest, Grant>("POST", "/v1/files/{fileId}/grants")
    public static let grants = Endpoint<NoBody, GrantList>("GET", "/v1/files/{fileId}/grants")
    /// Every grant on the asking user's items ("shared by me"), newest first.
    public static let outgoingGrants = Endpoint<NoBody, GrantList>("GET", "/v1/grants")
    public static let updateGrant = Endpoint<GrantUpdate, Grant>("PATCH", "/v1/grants/{grantId}")
    public static let deleteGrant = Endpoint<NoBody, NoBody>("DELETE", "/v1/grants/{grantId}")
    public static let incomingShares = Endpoint<NoBody, IncomingShareList>("GET", "/v1/shares/incoming")
    public static let acceptShare = Endpoint<AcceptShareRequest, AcceptedShare>("POST", "/v1/shares/incoming/{grantId}/accept")
    public static let declineShare = Endpoint<NoBody, NoBody>("POST", "/v1/shares/incoming/{grantId}/decline")

    // MARK: Links
    public static let createLink = Endpoint<LinkRequest, Link>("POST", "/v1/files/{fileId}/links")
    public static let links = Endpoint<NoBody, LinkList>("GET", "/v1/links")
    public static let link = Endpoint<NoBody, Link>("GET", "/v1/links/{linkId}")
    public static let updateLink = Endpoint<LinkUpdate, Link>("PATCH", "/v1/links/{linkId}")
    public static let deleteLink = Endpoint<NoBody, NoBody>("DELETE", "/v1/links/{linkId}")
    /// Public (no account): what a link is; a session (with its password); its folder's items; their content; a drop.
    public static let publicLink = Endpoint<NoBody, PublicLinkInfo>("GET", "/v1/public/{token}")
    public static let publicSession = Endpoint<LinkSessionRequest, LinkSession>("POST", "/v1/public/{token}/session")
    public static let publicItems = Endpoint<NoBody, FileList>("GET", "/v1/public/{token}/items")
    public static let publicContent = Endpoint<NoBody, Data>("GET", "/v1/public/{token}/items/{itemId}/content")
    public static let publicUpload = Endpoint<Data, PublicUpload>("POST", "/v1/public/{token}/upload")

    // MARK: Content and revisions
    public static let content = Endpoint<NoBody, Data>("GET", "/v1/files/{fileId}/content")
    public static let revisions = Endpoint<NoBody, RevisionList>("GET", "/v1/files/{fileId}/revisions")
    public static let revision = Endpoint<NoBody, FileRevision>("GET", "/v1/files/{fileId}/revisions/{revisionId}")
    public static let revisionContent = Endpoint<NoBody, Data>("GET", "/v1/files/{fileId}/revisions/{revisionId}/content")
    public static let restoreRevision = Endpoint<NoBody, File>("POST", "/v1/files/{fileId}/revisions/{revisionId}/restore")

    // MARK: Uploads
    /// `uploadType=media` (raw body → ``File``), `resumable` (``UploadRequest`` → ``UploadResponse``) or `batch`
    /// (``BatchUploadRequest`` → ``BatchUploadResponse``).
    public static let upload = Endpoint<Data, File>("POST", "/v1/upload")
    public static let uploadSession = Endpoint<NoBody, UploadResponse>("GET", "/v1/upload/{uploadId}")
    public static let cancelUpload = Endpoint<NoBody, NoBody>("DELETE", "/v1/upload/{uploadId}")
    public static let uploadChunk = Endpoint<Data, UploadResponse>("PUT", "/v1/upload/{uploadId}/chunk")

    // MARK: Blocks
    public static let missingBlocks = Endpoint<MissingBlocksRequest, MissingBlocksResponse>("POST", "/v1/blocks/missing")
    public static let putBlock = Endpoint<Data, StoredBlock>("PUT", "/v1/blocks/{hash}")
    public static let putBlocks = Endpoint<Data, StoredBlocks>("POST", "/v1/blocks")
    public static let block = Endpoint<NoBody, Data>("GET", "/v1/blocks/{hash}")
    public static let commitBlocks = Endpoint<BlockCommitRequest, File>("POST", "/v1/blocks/commit")
    public static let manifest = Endpoint<NoBody, BlockManifest>("GET", "/v1/files/{fileId}/blocks")

    // MARK: Changes
    public static let changesStart = Endpoint<NoBody, ChangeCursor>("GET", "/v1/changes/start")
    public static let changes = Endpoint<NoBody, ChangeList>("GET", "/v1/changes")
    public static let events = Endpoint<NoBody, Data>("GET", "/v1/events")

    // MARK: Service
    public static let about = Endpoint<NoBody, About>("GET", "/v1/about")
}

extension String {
    /// Percent-encoded for one path segment or a query value: every character but RFC 3986's unreserved ones.
    public var pathSegmentEscaped: String {
        let allowed = CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~")
        return addingPercentEncoding(withAllowedCharacters: allowed) ?? self
    }
}
