import Foundation
import NimbusAPI

/// Public links (``LinkStore``).
extension SQLMetadataStore {
    func createLink(_ link: LinkRecord, tokenHash: String) async throws -> LinkRecord {
        try await write(user: link.ownerId) { db, _ in
            let live = try db.value("SELECT COUNT(*) FROM links WHERE owner_id = ? AND revoked_at IS NULL", [link.ownerId], as: Int64.self) ?? 0
            guard live < Self.linkLimit else {
                throw DriveError.conflict("You have \(Self.linkLimit) links; turn off one you no longer use first ('nimbus link revoke').")
            }
            try db.insert(
                into: "links",
                ["id", "owner_id", "item_id", "token_hash", "access", "password_hash", "expires_at", "max_downloads", "downloads", "created_at"],
                [link.id, link.ownerId, link.itemId, tokenHash, link.access.rawValue, link.passwordHash, link.expiresAt?.millis, link.maxDownloads.map(Int64.init),
                 Int64(0), link.createdAt.millis])
            return link
        }
    }

    static let linkLimit = 10_000

    func link(id: String) async throws -> LinkRecord? {
        try await database.read { db in try db.fetchOne("SELECT * FROM links WHERE id = ?", [id]).map(Self.link) }
    }

    func link(tokenHash: String) async throws -> LinkRecord? {
        try await database.read { db in try db.fetchOne("SELECT * FROM links WHERE token_hash = ?", [tokenHash]).map(Self.link) }
    }

    func links(ownerId: String, itemId: String?) async throws -> [LinkRecord] {
        try await database.read { db in
            if let itemId {
                return try db.fetchAll(
                    "SELECT * FROM links WHERE owner_id = ? AND item_id = ? AND revoked_at IS NULL ORDER BY created_at DESC, id", [ownerId, itemId]
                ).map(Self.link)
            }
            return try db.fetchAll("SELECT * FROM links WHERE owner_id = ? AND revoked_at IS NULL ORDER BY created_at DESC, id", [ownerId]).map(Self.link)
        }
    }

    func updateLink(_ link: LinkRecord) async throws -> LinkRecord {
        try await write(user: link.ownerId) { db, _ in
            try db.perform(
                "UPDATE links SET password_hash = ?, expires_at = ?, max_downloads = ? WHERE id = ? AND revoked_at IS NULL",
                [link.passwordHash, link.expiresAt?.millis, link.maxDownloads.map(Int64.init), link.id])
            return link
        }
    }

    func revokeLink(id: String, now: Date) async throws {
        try await database.write { db in
            try db.perform("UPDATE links SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", [now.millis, id])
        }
    }

    func countDownload(linkId: String) async throws -> Bool {
        try await database.write { db in
            try db.execute(
                "UPDATE links SET downloads = downloads + 1 WHERE id = ? AND (max_downloads IS NULL OR downloads < max_downloads)", [linkId]) > 0
        }
    }

    func ancestors(of itemId: String) async throws -> [String] {
        try await database.read { db in try Self.ancestors(db, of: itemId) }
    }

    static func link(_ row: SQLRow) throws -> LinkRecord {
        LinkRecord(
            id: try row.get("id"), ownerId: try row.get("owner_id"), itemId: try row.get("item_id"),
            access: Link.Access(rawValue: try row.get("access")) ?? .view, passwordHash: try row.get("password_hash"),
            expiresAt: (try row.get("expires_at", as: Int64?.self)).map(Date.init(millis:)),
            maxDownloads: (try row.get("max_downloads", as: Int64?.self)).map(Int.init), downloads: Int(try row.get("downloads", as: Int64.self)),
            createdAt: Date(millis: try row.get("created_at")), revokedAt: (try row.get("revoked_at", as: Int64?.self)).map(Date.init(millis:)))
    }
}
