import Foundation
import Hummingbird
import NimbusAPI
import NIOFoundationCompat

/// Nextcloud's share API (`/ocs/v{1,2}.php/apps/files_sharing/api/v1/…`), so the apps' share buttons work: shares
/// with people (`shareType` 0, Nimbus's grants) and public links (`shareType` 3, Nimbus's links), made, listed,
/// changed and ended through ``SharingActions`` — the same checks as `/v1`, nothing of its own.
///
/// - `GET shares` (the user's: `path` one item's, `subfiles=true` those of the items in a folder, `reshares=true`
///   everyone's on it, `shared_with_me=true` the accepted ones offered to them), `GET shares/{id}`;
/// - `POST shares` (`path`, `shareType`, `shareWith`, `permissions`, `password`, `expireDate`, `publicUpload`),
///   `PUT shares/{id}` (`permissions`, `password`, `expireDate`), `DELETE shares/{id}` (the owner ends it; its
///   grantee leaves it);
/// - `GET shares/pending`, `POST shares/pending/{id}` (accept, into the root), `DELETE shares/pending/{id}`;
/// - `GET sharees?search=NAME`: the user of exactly that name (no listing of who has an account).
///
/// Nextcloud's permission bits map onto roles: 1 read is a viewer, any of 2 update / 4 create / 8 delete an editor,
/// 16 share a manager; a link with 1 is a view link, with 2 or 4 beside read (or `publicUpload=true`) an edit link,
/// 4 alone an upload ("file drop") link. Share ids are Nimbus's grant and link ids. A link's token (and so its URL)
/// is in the answer that makes it and in `GET shares/{id}`, never in a list.
struct OCSShares {
    let dependencies: Dependencies
    let request: Request
    let context: NimbusRequestContext
    let ocs: OCSResponder
    let me: Principal

    static let prefix = "/apps/files_sharing/api/v1/"

    func respond(route: String) async throws -> Response {
        let parts = route.dropFirst(Self.prefix.count).split(separator: "/").map(String.init)
        do {
            let parameters = try await Self.parameters(request, context: context)
            switch (request.method, parts.count, parts.first) {
            case (.get, 1, "shares"): return ocs.success(.list(try await list(parameters)))
            case (.post, 1, "shares"): return ocs.success(try await create(parameters))
            case (.get, 2, "shares") where parts[1] == "pending": return ocs.success(.list(try await pending()))
            case (.post, 3, "shares") where parts[1] == "pending":
                let (_, root) = try await dependencies.sharing.accept(me, grantId: parts[2], parentId: nil, name: nil)
                guard let grant = try await dependencies.shares.grant(id: parts[2]) else { throw DriveError.notFound("No such share.") }
                return ocs.success(try await share(grant, seen: root))
            case (.delete, 3, "shares") where parts[1] == "pending":
                try await dependencies.sharing.decline(me, grantId: parts[2])
                return ocs.success(.list([]))
            case (.get, 2, "shares"): return ocs.success(.list([try await share(id: parts[1], token: true)]))
            case (.put, 2, "shares"): return ocs.success(try await update(parts[1], parameters))
            case (.delete, 2, "shares"):
                if parts[1].hasPrefix("ln") {
                    try await dependencies.sharing.revokeLink(me, id: parts[1])
                } else {
                    try await dependencies.sharing.endGrant(me, id: parts[1])
                }
                return ocs.success(.list([]))
            case (.get, 1, "sharees"): return ocs.success(try await sharees(parameters))
            case (.get, 1, "sharees_recommended"): return ocs.success(Self.sharees(exact: []))
            default:
                return ocs.failure(OCSResponder.notFound, "Invalid query: \(request.method.rawValue) \(route) is not an OCS route this server has.")
            }
        } catch let error as DriveError {
            return ocs.failure(Int(error.status.code), error.body.error.message)
        }
    }

    // MARK: Listing

    func list(_ parameters: [String: String]) async throws -> [OCSValue] {
        if Self.flag(parameters["shared_with_me"]) {
            var shares: [OCSValue] = []
            for grant in try await dependencies.shares.incomingGrants(granteeId: me.userId, now: dependencies.now) where grant.state == .accepted {
                guard let item = try? await dependencies.item(grant.itemId, for: me, .list) else { continue }
                shares.append(try await share(grant, seen: item))
            }
            return shares
        }
        let root = try await dependencies.root(for: me, .list)
        guard let path = parameters["path"], !path.isEmpty, path != "/" else {
            var shares: [OCSValue] = []
            for grant in try await dependencies.shares.grants(ownerId: me.userId) { shares.append(try await share(grant, seen: nil)) }
            for link in try await dependencies.links.links(ownerId: me.userId, itemId: nil) { shares.append(try await share(link, token: nil)) }
            return shares
        }
        guard let found = try await dependencies.walk(Self.names(path), from: root) else {
            throw DriveError.notFound("Wrong path, file/folder does not exist.")
        }
        let item = try dependencies.access.authorize(me, found, .list, reach: found.seenThrough)
        var items = [item]
        if Self.flag(parameters["subfiles"]) {
            guard item.isFolder else { throw DriveError.badRequest("Not a directory.") }
            items = try await dependencies.files.children(of: item.id, userId: item.userId, paging: Paging(page: 1, limit: Paging.maxLimit), order: .byName, mountsAt: nil).files
        }
        // The owner and managers see everyone's shares on an item; anyone else, none but their own grant.
        var shares: [OCSValue] = []
        for item in items {
            let reach = item.seenThrough ?? found.seenThrough?.beneath
            guard dependencies.access.allows(me, item, .share, reach: reach) else { continue }
            for grant in try await dependencies.shares.grants(ownerId: item.userId, itemId: item.id) { shares.append(try await share(grant, seen: nil)) }
            if dependencies.access.allows(me, item, .link, reach: reach) {
                for link in try await dependencies.links.links(ownerId: item.userId, itemId: item.id) { shares.append(try await share(link, token: nil)) }
            }
        }
        return shares
    }

    func pending() async throws -> [OCSValue] {
        var shares: [OCSValue] = []
        for grant in try await dependencies.shares.incomingGrants(granteeId: me.userId, now: dependencies.now) where grant.state == .pending {
            guard let item = try await dependencies.files.item(id: grant.itemId), !item.isTrashed else { continue }
            shares.append(try await share(grant, seen: item))
        }
        return shares
    }

    func share(id: String, token: Bool) async throws -> OCSValue {
        if id.hasPrefix("ln") {
            let link = try await dependencies.sharing.link(id, for: me)
            return try await share(link, token: token ? dependencies.tokens.linkToken(link.id) : nil)
        }
        guard let grant = try await dependencies.shares.grant(id: id) else { throw dependencies.access.notFound(me, itemId: id, .share) }
        if grant.granteeId == me.userId {
            return try await share(grant, seen: try await dependencies.item(grant.itemId, for: me, .list))
        }
        return try await share(try await dependencies.sharing.grant(id, for: me, .share), seen: nil)
    }

    // MARK: Changing

    func create(_ parameters: [String: String]) async throws -> OCSValue {
        guard let path = parameters["path"], !path.isEmpty else { throw DriveError.badRequest("Please specify a file or folder path.") }
        let root = try await dependencies.root(for: me, .list)
        guard let item = try await dependencies.walk(Self.names(path), from: root) else {
            throw DriveError.notFound("Wrong path, file/folder does not exist.")
        }
        let permissions = try Self.permissions(parameters["permissions"])
        let expiresAt = try Self.expiry(parameters["expireDate"])
        switch parameters["shareType"] {
        case "0":
            guard let user = parameters["shareWith"], !user.isEmpty else { throw DriveError.badRequest("Please specify a valid user.") }
            let grant = try await dependencies.sharing.grant(me, itemId: item.id, user: user, role: Self.role(permissions ?? 1), expiresAt: expiresAt ?? nil)
            return try await share(grant, seen: nil)
        case "3":
            var access = Self.linkAccess(permissions ?? 1)
            if Self.flag(parameters["publicUpload"]) { access = .edit }
            let password = parameters["password"].flatMap { $0.isEmpty ? nil : $0 }
            let (link, token) = try await dependencies.sharing.createLink(
                me, itemId: item.id, LinkRequest(access: access, password: password, expiresAt: expiresAt ?? nil))
            return try await share(link, token: token)
        case nil: throw DriveError.badRequest("Please specify a shareType.")
        default: throw DriveError.badRequest("Share type \(parameters["shareType"] ?? "") is not one this server has (0, a user; 3, a public link).")
        }
    }

    func update(_ id: String, _ parameters: [String: String]) async throws -> OCSValue {
        let permissions = try Self.permissions(parameters["permissions"])
        let expiry = try Self.expiry(parameters["expireDate"])
        if expiry == .some(nil) {
            throw DriveError.badRequest("Taking an expiry away is not done here; set a later date, or make the share again.")
        }
        if id.hasPrefix("ln") {
            let current = try await dependencies.sharing.link(id, for: me)
            if let permissions, Self.linkAccess(permissions) != current.access {
                throw DriveError.badRequest("A link's kind (view, edit, upload) stays as made; make another link.")
            }
            let link = try await dependencies.sharing.updateLink(me, id: id, LinkUpdate(password: parameters["password"], expiresAt: expiry ?? nil))
            return try await share(link, token: nil)
        }
        let grant = try await dependencies.sharing.updateGrant(me, id: id, role: permissions.map(Self.role), expiresAt: expiry ?? nil)
        return try await share(grant, seen: nil)
    }

    func sharees(_ parameters: [String: String]) async throws -> OCSValue {
        _ = try await dependencies.root(for: me, .list)
        let search = (parameters["search"] ?? "").trimmingCharacters(in: .whitespaces)
        guard !search.isEmpty, let user = try await dependencies.accounts.user(username: search), user.id != me.userId else { return Self.sharees(exact: []) }
        return Self.sharees(exact: [user.username])
    }

    static func sharees(exact: [String]) -> OCSValue {
        let users = OCSValue.list(exact.map { name in
            .object([
                ("label", .string(name)), ("icon", .string("icon-user")),
                ("value", .object([("shareType", .int(0)), ("shareWith", .string(name))])), ("shareWithDisplayNameUnique", .string(name)),
            ])
        })
        return .object([
            ("exact", .object([("users", users), ("groups", .list([])), ("remotes", .list([])), ("emails", .list([])), ("circles", .list([])), ("rooms", .list([]))])),
            ("users", .list([])), ("groups", .list([])), ("remotes", .list([])), ("emails", .list([])), ("lookup", .list([])), ("circles", .list([])),
            ("rooms", .list([])), ("lookupEnabled", .bool(false)),
        ])
    }

    // MARK: Answers

    /// A grant as Nextcloud shows a user share; `seen`: the item as the principal sees it, when they are its grantee.
    func share(_ grant: GrantRecord, seen: FileRecord?) async throws -> OCSValue {
        guard let stored = try await dependencies.files.item(id: grant.itemId) else { throw DriveError.notFound("No such share.") }
        let item = seen ?? stored
        let owner = try await dependencies.username(grant.ownerId)
        let grantee = try await dependencies.username(grant.granteeId)
        let path = try await dependencies.names(of: item, for: me).map { "/" + $0.joined(separator: "/") } ?? "/" + stored.name
        var fields = try await common(id: grant.id, type: 0, item: item, stored: stored, owner: owner, path: path, created: grant.createdAt, expires: grant.expiresAt)
        fields += [
            ("permissions", .int(Self.bits(grant.role, folder: stored.isFolder))), ("share_with", .string(grantee)),
            ("share_with_displayname", .string(grantee)), ("share_with_displayname_unique", .string(grantee)), ("token", .null),
            ("state", .int(grant.state == .accepted ? 0 : grant.state == .pending ? 1 : 2)),
            ("file_target", .string(grant.granteeId == me.userId ? path : "/" + stored.name)),
        ]
        return .object(fields)
    }

    /// A link as Nextcloud shows a public link: its token and URL only when `token` is given (never in a list).
    func share(_ link: LinkRecord, token: String?) async throws -> OCSValue {
        guard let stored = try await dependencies.files.item(id: link.itemId) else { throw DriveError.notFound("No such share.") }
        let item = stored.userId == me.userId ? stored : try await dependencies.item(stored.id, for: me, .link)
        let owner = try await dependencies.username(link.ownerId)
        let path = try await dependencies.names(of: item, for: me).map { "/" + $0.joined(separator: "/") } ?? "/" + stored.name
        var fields = try await common(id: link.id, type: 3, item: item, stored: stored, owner: owner, path: path, created: link.createdAt, expires: link.expiresAt)
        let bits: Int64 = switch link.access {
        case .view: 1
        case .edit: stored.isFolder ? 15 : 3
        case .upload: 4
        }
        let url = token.map { NextcloudMiddleware.serverURL(request, configuration: dependencies.configuration) + "/s/" + $0 }
        fields += [
            ("permissions", .int(bits)), ("share_with", .null), ("share_with_displayname", .string("(Shared link)")),
            ("token", token.map(OCSValue.string) ?? .null), ("url", url.map(OCSValue.string) ?? .null),
            ("password", .null), ("send_password_by_talk", .bool(false)), ("file_target", .string("/" + stored.name)),
            ("hide_download", .int(0)),
        ]
        return .object(fields)
    }

    func common(
        id: String, type: Int64, item: FileRecord, stored: FileRecord, owner: String, path: String, created: Date, expires: Date?
    ) async throws -> [(String, OCSValue)] {
        let seen = try? await dependencies.item(stored.id, for: me, .list)
        return [
            ("id", .string(id)), ("share_type", .int(type)), ("uid_owner", .string(owner)), ("displayname_owner", .string(owner)),
            ("can_edit", .bool(seen.map { dependencies.access.allows(me, $0, .share, reach: $0.seenThrough) } ?? false)),
            ("can_delete", .bool(true)), ("stime", .int(Int64(created.timeIntervalSince1970))), ("parent", .null),
            ("expiration", expires.map { .string(Self.dateFormatter.string(from: $0)) } ?? .null),
            ("uid_file_owner", .string(owner)), ("displayname_file_owner", .string(owner)), ("note", .string("")), ("label", .string("")),
            ("path", .string(path)), ("item_type", .string(stored.isFolder ? "folder" : "file")), ("mimetype", .string(stored.mimeType)),
            ("has_preview", .bool(false)), ("storage_id", .string("home::" + owner)), ("storage", .int(1)),
            ("item_source", .int(NextcloudIDs.number(of: stored.id))), ("file_source", .int(NextcloudIDs.number(of: stored.id))),
            ("file_parent", .int(stored.parentId.map(NextcloudIDs.number(of:)) ?? 0)), ("item_size", .int(stored.size)),
            ("item_mtime", .int(Int64(stored.modifiedAt.timeIntervalSince1970))), ("mail_send", .int(0)), ("attributes", .null),
        ]
    }

    // MARK: Parameters

    /// The query's parameters and the body's (a form, as the apps send, or a JSON object).
    static func parameters(_ request: Request, context: NimbusRequestContext) async throws -> [String: String] {
        var parameters: [String: String] = [:]
        for (key, value) in request.uri.queryParameters { parameters[String(key)] = String(value) }
        guard request.method == .post || request.method == .put else { return parameters }
        let body = try await request.body.collect(upTo: 1 << 16)
        guard body.readableBytes > 0 else { return parameters }
        let data = Data(buffer: body)
        if (request.headers[.contentType] ?? "").contains("json") {
            guard let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else {
                throw DriveError.badRequest("The body is not a JSON object.")
            }
            for (key, value) in object { parameters[key] = "\(value)" }
        } else {
            for pair in String(decoding: data, as: UTF8.self).split(separator: "&") {
                let parts = pair.split(separator: "=", maxSplits: 1).map { String($0).replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? String($0) }
                guard let key = parts.first, !key.isEmpty else { continue }
                parameters[key] = parts.count > 1 ? parts[1] : ""
            }
        }
        return parameters
    }

    static func names(_ path: String) -> [String] { path.split(separator: "/").map(String.init) }

    static func flag(_ value: String?) -> Bool { value == "true" || value == "1" }

    /// Nextcloud's permission bits, 1 to 31 (nil when not given).
    static func permissions(_ text: String?) throws -> Int? {
        guard let text, !text.isEmpty else { return nil }
        guard let bits = Int(text), (1...31).contains(bits) else { throw DriveError.badRequest("Permissions are a number from 1 to 31 (Nextcloud's bits).") }
        return bits
    }

    static func role(_ bits: Int) -> ShareRole {
        if bits & 16 != 0 { return .manager }
        if bits & (2 | 4 | 8) != 0 { return .editor }
        return .viewer
    }

    static func linkAccess(_ bits: Int) -> Link.Access {
        if bits & 1 == 0, bits & 4 != 0 { return .upload }
        if bits & (2 | 4) != 0 { return .edit }
        return .view
    }

    static func bits(_ role: ShareRole, folder: Bool) -> Int64 {
        switch role {
        case .viewer: 1
        case .editor: folder ? 15 : 3
        case .manager: folder ? 31 : 19
        }
    }

    /// `expireDate` as the apps send it (`YYYY-MM-DD`, the share ending as that day begins in UTC, or a full ISO 8601
    /// time): nil when not given, `.some(nil)` when given empty (taking the expiry away).
    static func expiry(_ text: String?) throws -> Date?? {
        guard let text else { return nil }
        if text.isEmpty { return .some(nil) }
        if let date = dateFormatter.date(from: text + " 00:00:00") ?? dateFormatter.date(from: text) { return .some(date) }
        let iso = ISO8601DateFormatter()
        if let date = iso.date(from: text) { return .some(date) }
        throw DriveError.badRequest("Invalid date. Format must be YYYY-MM-DD.")
    }

    /// Nextcloud's way of writing a share's expiry (UTC).
    static var dateFormatter: DateFormatter {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "yyyy-MM-dd HH:mm:ss"
        return formatter
    }
}
