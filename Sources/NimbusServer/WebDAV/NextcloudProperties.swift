import Foundation
import Hummingbird
import NimbusAPI

/// The properties Nextcloud's apps read (ownCloud's and Nextcloud's namespaces), answered under the Nextcloud mounts
/// (`/remote.php/dav/files/USER/`, `/remote.php/webdav/`) when a `PROPFIND` names them:
/// - `oc:id` and `oc:fileid`: the item's Nextcloud ids (``NextcloudIDs``), stable for its life;
/// - `oc:permissions`: what the signed-in principal may do, from the access decision (`R` share, `G` read, `D`
///   delete, `N` rename, `V` move, `W` write a file, `C`/`K` add files and folders to a folder), and `S` and `M` for
///   what they see through a share someone gave them; the root cannot be deleted, renamed or moved. A viewer's share
///   is `SMG`: the apps show it read-only and upload nothing into it;
/// - `oc:share-types`: `0` when the signed-in user shares the item with people, `3` when it has a public link;
///   `nc:mount-type` `shared` for what they see through someone's share, whose owner `oc:owner-id` names;
/// - `oc:size`: a file's size, a folder's the size of the live files beneath it;
/// - `oc:checksums`: `SHA256:hex` of a file's content; the apps compare it with a local file's before calling two
///   edits a conflict;
/// - `oc:data-fingerprint`, `oc:downloadURL`, `oc:dDC`: present and empty (no backup restores to announce, no
///   direct download links); `nc:has-preview` false and `nc:is-encrypted` 0 (previews
///   and end-to-end encryption are not served); owner and creation time as Nextcloud gives them.
struct NextcloudProperties: Sendable {
    /// Each listed item's permission letters, by id.
    var permissions: [String: String]
    /// Each listed folder's content size, by id (asked for only when `oc:size` is).
    var folderSizes: [String: Int64]
    /// The tree owner's user name.
    var ownerName: String
    /// Each listed item's owner's user name, when not the tree owner (a share's items).
    var owners: [String: String] = [:]
    /// Each listed item's share types (Nextcloud's: 0 people, 3 a public link), for the user's own items.
    var shareTypes: [String: [Int]] = [:]
    /// For items listed in the trash bin: their name, where they were (from the user's root) and when deleted.
    var trash: [String: TrashInfo] = [:]

    struct TrashInfo: Sendable {
        var filename: String
        var originalLocation: String
        var deletedAt: Date
    }

    /// The permission letters for `item` as `principal` sees it (in Nextcloud's order), asked with the grant that
    /// reaches it when it is someone else's.
    static func permissions(of item: FileRecord, for principal: Principal, access: AccessPolicy) -> String {
        let reach = item.seenThrough
        func may(_ action: Action) -> Bool { access.allows(principal, item, action, reach: reach) }
        var letters = reach == nil ? "" : "S"
        if item.parentId != nil || item.mountId != nil, may(.share) { letters += "R" }
        if reach != nil { letters += "M" }
        if may(.read) { letters += "G" }
        if item.parentId != nil || item.mountId != nil {
            if may(.trash) { letters += "D" }
            if may(.rename) { letters += "N" }
            if may(.move) { letters += "V" }
        }
        if item.isFolder {
            if may(.create) { letters += "CK" }
        } else if may(.write) {
            letters += "W"
        }
        return letters
    }

    /// The property's value (XML content) for `item`, or nil when it is not one of these.
    func value(_ item: FileRecord, _ property: DeadProperty) -> String? {
        switch (property.namespace, property.name) {
        case (DAVXML.ownCloud, "id"): NextcloudIDs.ocId(of: item.id)
        case (DAVXML.ownCloud, "fileid"): String(NextcloudIDs.number(of: item.id))
        case (DAVXML.ownCloud, "permissions"): permissions[item.id] ?? ""
        case (DAVXML.ownCloud, "size"): String(item.isFolder ? folderSizes[item.id] ?? 0 : item.size)
        case (DAVXML.ownCloud, "checksums"):
            item.checksum.map { DAVXML.element(DAVXML.ownCloud, "checksum", value: "SHA256:" + $0) } ?? ""
        case (DAVXML.ownCloud, "data-fingerprint"), (DAVXML.ownCloud, "downloadURL"), (DAVXML.ownCloud, "dDC"), (DAVXML.nextcloud, "sharees"):
            ""
        case (DAVXML.ownCloud, "share-types"):
            (shareTypes[item.id] ?? []).map { DAVXML.element(DAVXML.ownCloud, "share-type", value: String($0)) }.joined()
        case (DAVXML.nextcloud, "mount-type"): owners[item.id] == nil ? "" : "shared"
        case (DAVXML.ownCloud, "owner-id"), (DAVXML.ownCloud, "owner-display-name"): DAVRequest.xmlEscape(owners[item.id] ?? ownerName)
        case (DAVXML.nextcloud, "has-preview"): "false"
        case (DAVXML.nextcloud, "is-encrypted"): "0"
        case (DAVXML.nextcloud, "creation_time"): String(Int64(item.createdAt.timeIntervalSince1970))
        case (DAVXML.nextcloud, "upload_time"): String(Int64(item.modifiedAt.timeIntervalSince1970))
        case (DAVXML.nextcloud, "trashbin-filename"): trash[item.id].map { DAVRequest.xmlEscape($0.filename) }
        case (DAVXML.nextcloud, "trashbin-original-location"): trash[item.id].map { DAVRequest.xmlEscape($0.originalLocation) }
        case (DAVXML.nextcloud, "trashbin-deletion-time"): trash[item.id].map { String(Int64($0.deletedAt.timeIntervalSince1970)) }
        default: nil
        }
    }

    /// Whether a `PROPFIND` asks for a folder's content size.
    static func asksForSize(_ wanted: PropfindBody) -> Bool {
        guard case .prop(let properties) = wanted else { return false }
        return properties.contains { $0.namespace == DAVXML.ownCloud && $0.name == "size" }
    }
}

extension DAVMount {
    /// Whether this is one of Nextcloud's paths (its clients read Nextcloud's properties, ids and error bodies there).
    var isNextcloud: Bool { base != DAVMiddleware.prefix }
}

extension DAVRequest {
    /// Nextcloud's properties of the listed items as the principal sees them.
    func nextcloudProperties(_ me: Principal, _ listed: [FileRecord], wanted: PropfindBody) async throws -> NextcloudProperties {
        let folders = NextcloudProperties.asksForSize(wanted) ? listed.filter(\.isFolder).map(\.id) : []
        var properties = NextcloudProperties(
            permissions: Dictionary(
                listed.map { ($0.id, NextcloudProperties.permissions(of: $0, for: me, access: dependencies.access)) }, uniquingKeysWith: { a, _ in a }),
            folderSizes: try await dependencies.files.contentSizes(ofFolders: folders),
            ownerName: try await dependencies.username(owner))
        for item in listed where item.userId != owner {
            properties.owners[item.id] = try await dependencies.username(item.userId)
        }
        let own = listed.filter { $0.userId == me.userId }.map(\.id)
        if !own.isEmpty {
            let shared = try await dependencies.shares.sharedItems(ownerId: me.userId, among: own)
            let linked = Set(try await dependencies.links.links(ownerId: me.userId, itemId: nil).map(\.itemId))
            for id in own {
                let types: [Int] = (shared.contains(id) ? [0] : []) + (linked.contains(id) ? [3] : [])
                if !types.isEmpty { properties.shareTypes[id] = types }
            }
        }
        return properties
    }

    /// The SHA-256 an `OC-Checksum` header names (`SHA256:hex`, alone or among other types), lowercased; nil when the
    /// header is absent or names only other types (those are not checked: this server announces SHA256 alone).
    func declaredSHA256() throws -> String? {
        guard let header = request.headers[.init("OC-Checksum")!] else { return nil }
        for entry in header.split(whereSeparator: { $0 == " " || $0 == "," }) {
            let parts = entry.split(separator: ":", maxSplits: 1)
            guard parts.count == 2, parts[0].uppercased() == "SHA256" else { continue }
            let hex = parts[1].lowercased()
            guard hex.count == 64, hex.allSatisfy(\.isHexDigit) else {
                throw DAVError(.badRequest, "OC-Checksum's SHA256 is 64 hexadecimal digits.")
            }
            return hex
        }
        return nil
    }

    /// Nextcloud's answer headers for an item written: its `oc:id` as `OC-FileId`, its `ETag` as `OC-ETag`.
    func nextcloudHeaders(_ file: FileRecord, into headers: inout HTTPFields) {
        guard mount.isNextcloud || mount.tree == .uploads else { return }
        headers[.init("OC-FileId")!] = NextcloudIDs.ocId(of: file.id)
        headers[.init("OC-ETag")!] = "\"\(file.davETag)\""
    }

    /// The error for content whose SHA-256 is not the one `OC-Checksum` declared (nothing was kept).
    static func checksumMismatch(expected: String, actual: String) -> DAVError {
        DAVError(
            .badRequest,
            "The computed checksum does not match the one received from the client (OC-Checksum SHA256:\(expected), received content SHA256:\(actual)); nothing was stored. Send the file again.")
    }
}
