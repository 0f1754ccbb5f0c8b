/// Everything a provider can do beyond the basics (list, create, upload, download, move, delete), in one value, as
/// rclone's `Features`: behaviours are flags, extra operations are the object that carries them (the provider itself,
/// usually), nil where not offered. The engine learns what a remote can do from this value alone — never by casting a
/// provider to a protocol or a type — and stays correct without any of it; each feature makes it faster or safer.
///
/// A provider computes it on each read (``RemoteProvider/features``), so what it learns by trying (S3's conditional
/// writes, WebDAV's chunked uploads and propagating ETags, the root's identity) shows at once. A provider over
/// another (``CryptProvider``) offers what carries over and withholds what is of ciphertext.
public struct ProviderFeatures: Sendable {
    // MARK: Behaviours

    /// ``RemoteProvider/changes(since:)`` tells what changed since a cursor. Without it the engine lists the tree
    /// and compares it with what it knew.
    public var changeFeed: Bool
    /// A new version based on a revision fails with ``ProviderError/versionConflict(current:)`` if the head moved,
    /// atomically. Without it the provider compares just before writing (a short window remains).
    public var conditionalWrite: Bool
    /// Creations carry a request id: a retry after a lost answer returns what the first attempt made. Without it
    /// the engine looks for the content it sent before sending it again.
    public var idempotentCreate: Bool
    /// Big uploads resume after an interruption (even across restarts) instead of starting over.
    public var resumableUploads: Bool
    /// Deleted items go to a trash they can be restored from.
    public var trash: Bool
    /// Items carry their SHA-256 (``RemoteItem/checksum``).
    public var checksums: Bool
    /// A folder's ``RemoteItem/revision`` (its root's too) changes whenever anything beneath it does, at any depth
    /// (collection ETags that propagate, as Nextcloud's, ownCloud's and Nimbus's WebDAV do). A listing then skips
    /// every subtree whose folder still has the revision the last listing saw: a no-op round of an unchanged tree is
    /// one request.
    public var treeVersions: Bool
    /// Without a change feed, upload answers are what the next listing shows of those files (WebDAV once the `ETag`
    /// a `PUT` answers has proven to be the file's): the round that sent files does not list the remote again right
    /// after (see ``SyncEngine/syncOnce()``).
    public var answersAsListed: Bool
    /// Big new files and new versions go as content-defined blocks, only those the remote lacks (Nimbus): a synced
    /// folder's scan cuts new content into its chunks as it hashes it.
    public var blockUploads: Bool
    /// What tells the root folder from another made at its place later (WebDAV's `oc:fileid`, a local folder's inode),
    /// known once ``RemoteProvider/root()`` has answered; nil: not known yet, or the provider cannot tell. When it
    /// changes, the engine links the pair anew, as when the root comes back after it was missing: a folder deleted and
    /// made again between two rounds is not taken for "everything in it deleted there".
    public var rootIdentity: String?

    // MARK: Operations

    /// Tells when something changes there, so the engine pulls at once instead of polling.
    public var changeSignals: (any ChangeSignaling)?
    /// Lists the whole tree more cheaply than folder by folder (S3).
    public var treeListing: (any TreeListingProvider)?
    /// Keeps older versions that can be listed and restored.
    public var revisions: (any RevisionsProvider)?
    /// Tells used and available space.
    public var quota: (any QuotaProvider)?
    /// Takes many small new files in one go.
    public var batchUpload: (any BatchUploadProvider)?
    /// Makes a new folder with its small new files in it in fewer requests than one each.
    public var newFolderFilling: (any FillsNewFolders)?
    /// Takes a big new file whose SHA-256 is not known yet, hashing it as it goes (read once, not twice).
    public var unhashedUploads: (any HashesWhileSending)?
    /// Builds a download from content this device already has.
    public var deltaDownloads: (any DeltaDownloadProvider)?
    /// Finds out by trying what it cannot be told (whether an S3 store honours conditional writes); `nimbus remote
    /// about` asks it to.
    public var probe: (any ProbesFeatures)?

    /// Features with the behaviours given; operations are set one by one.
    public init(
        changeFeed: Bool = false, conditionalWrite: Bool = false, idempotentCreate: Bool = false, resumableUploads: Bool = false,
        trash: Bool = false, checksums: Bool = false, treeVersions: Bool = false, answersAsListed: Bool = false, blockUploads: Bool = false,
        rootIdentity: String? = nil
    ) {
        self.changeFeed = changeFeed
        self.conditionalWrite = conditionalWrite
        self.idempotentCreate = idempotentCreate
        self.resumableUploads = resumableUploads
        self.trash = trash
        self.checksums = checksums
        self.treeVersions = treeVersions
        self.answersAsListed = answersAsListed
        self.blockUploads = blockUploads
        self.rootIdentity = rootIdentity
    }

    /// The features a person would ask about, in words (`nimbus remote about`); empty: none beyond the basics.
    public var names: [String] {
        let all: [(Bool, String)] = [
            (changeFeed, "change feed"), (changeSignals != nil, "live change events"), (conditionalWrite, "conditional writes"),
            (idempotentCreate, "safe retries"), (resumableUploads, "resumable uploads"), (revisions != nil, "revisions"), (trash, "trash"),
            (quota != nil, "quota"), (checksums, "SHA-256 checksums"), (batchUpload != nil, "batch uploads"),
            (blockUploads, "block uploads (only changed chunks are sent)"), (deltaDownloads != nil, "delta downloads"),
            (treeVersions, "folder versions (unchanged folders are not listed)"), (treeListing != nil, "whole-tree listing"),
        ]
        return all.filter(\.0).map(\.1)
    }
}

/// A provider that finds out by trying what it cannot be told (``ProviderFeatures/probe``).
public protocol ProbesFeatures: Sendable {
    /// Tries what it needs to (leaving nothing behind); ``RemoteProvider/features`` says what it learnt.
    func probeFeatures() async throws
}
