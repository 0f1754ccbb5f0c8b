import Foundation
import NimbusAPI

/// Text as search compares it: case, accents and character width folded away ("Café" and "CAFE" are "cafe"), in Swift,
/// so SQLite and PostgreSQL find exactly the same items.
enum SearchText {
    static func fold(_ text: String) -> String {
        text.folding(options: [.caseInsensitive, .diacriticInsensitive, .widthInsensitive], locale: nil)
    }

    /// A `LIKE … ESCAPE '\'` pattern for names containing `folded` (`prefix`: starting with it).
    static func pattern(_ folded: String, prefix: Bool = false) -> String {
        var escaped = ""
        for character in folded {
            if character == "%" || character == "_" || character == "\\" { escaped.append("\\") }
            escaped.append(character)
        }
        return (prefix ? "" : "%") + escaped + "%"
    }

    /// An FTS5 phrase: the text itself, its quotes doubled.
    static func phrase(_ folded: String) -> String {
        "\"" + folded.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }
}

/// One search: the folded text, and the filters.
struct SearchQuery: Sendable {
    var text: String
    var kind: FileKind?
    var modifiedAfter: Date?
}

/// A search hit: the item (someone else's carries the reach it is seen through) and the names leading to it from
/// the asking user's root, its own last.
struct SearchHit: Sendable {
    var file: FileRecord
    var names: [String]
}

/// A row of the activity history, with the item as it is now (nil: gone for good).
struct ActivityRecord: Sendable {
    var seq: Int64
    var ownerId: String
    var fileId: String
    var action: ActivityEvent.Action
    var at: Date
    var actorId: String?
    var deviceId: String?
    var deviceName: String?
    var name: String
    var mimeType: String
    var isFolder: Bool
    var current: FileRecord?
}

/// A cached thumbnail: the image, or none (nothing could be made of that revision).
struct ThumbnailRecord: Sendable {
    var mimeType: String?
    var data: [UInt8]?
}

/// Finding and seeing files: search, stars, what was opened, the activity history, thumbnails.
protocol FindingStore: Sendable {
    /// Live items whose folded names contain the query's text, in `userId`'s tree and the shares mounted in it: names
    /// starting with the text first, then the newest. `offset`/`limit` page the merged list; `total` counts it.
    func search(userId: String, query: SearchQuery, offset: Int, limit: Int, now: Date) async throws -> (hits: [SearchHit], total: Int)
    func star(userId: String, fileId: String, now: Date) async throws
    func unstar(userId: String, fileId: String) async throws
    /// The user's starred items that are not in the trash, newest star first (someone else's: the caller checks reach).
    func starred(userId: String, offset: Int, limit: Int) async throws -> (files: [FileRecord], total: Int)
    /// Those of `ids` the user starred.
    func starredAmong(userId: String, ids: [String]) async throws -> Set<String>
    /// The user opened the file (a browser fetched its content).
    func noteOpened(userId: String, fileId: String, now: Date) async throws
    /// Live files the user changed (from any of their devices) or opened, newest first.
    func recent(userId: String, offset: Int, limit: Int) async throws -> (files: [FileRecord], total: Int)
    /// What happened in the user's tree, and what the user did in shares, newest first.
    func activity(userId: String, offset: Int, limit: Int) async throws -> (events: [ActivityRecord], total: Int)
    /// Forgets activity and opened files older than `before`; returns how many rows went.
    func pruneActivity(before: Date) async throws -> Int
    func thumbnail(revisionId: String, size: Int) async throws -> ThumbnailRecord?
    func storeThumbnail(revisionId: String, size: Int, userId: String, thumbnail: ThumbnailRecord, now: Date) async throws
    /// Folds the names of rows written before search existed; returns how many.
    func foldNames() async throws -> Int
}

extension SQLMetadataStore {
    /// How many of a share's owner's matches a search looks at beneath the share (the rest of their tree filtered out).
    static let shareCandidates = 2000

    func search(userId: String, query: SearchQuery, offset: Int, limit: Int, now: Date) async throws -> (hits: [SearchHit], total: Int) {
        let dialect = database.dialect
        return try await database.read { db in
            let wanted = offset + limit
            let (own, ownTotal) = try Self.matches(db, dialect, ownerId: userId, query: query, limit: wanted)
            var total = ownTotal
            var found = own.map { (file: $0, reach: Reach?.none) }
            for (grant, mount) in try Self.liveMounts(db, userId: userId, now: now) {
                // The share's root goes by the name the grantee gave its mount; what is inside, by the owner's names.
                if SearchText.fold(mount.name).contains(query.text), let item = try Self.existingFile(db, id: grant.itemId, userId: grant.ownerId),
                    query.kind.map({ $0.matches(mimeType: item.mimeType) }) ?? true, query.modifiedAfter.map({ item.modifiedAt > $0 }) ?? true
                {
                    let reach = Reach(grant: grant, mount: mount, isRoot: true)
                    found.append((item.seen(through: reach), reach))
                    total += 1
                }
                let (candidates, _) = try Self.matches(db, dialect, ownerId: grant.ownerId, query: query, limit: Self.shareCandidates)
                guard !candidates.isEmpty else { continue }
                let chains = try Self.chains(db, of: candidates.map(\.id))
                let inside = candidates.filter { $0.id != grant.itemId && chains[$0.id]?.contains { $0.id == grant.itemId } ?? false }
                total += inside.count
                let reach = Reach(grant: grant, mount: mount, isRoot: false)
                found += inside.map { ($0.seen(through: reach), reach) }
            }
            // Merged as each database query ordered its own: names starting with the text, then the newest (a short
            // text: every hit starts with it, in name order).
            let short = Self.isShort(query.text)
            let keyed = found.map { (hit: $0, folded: SearchText.fold($0.file.name)) }.sorted { a, b in
                if short { return a.folded != b.folded ? a.folded < b.folded : a.hit.file.id < b.hit.file.id }
                let pa = a.folded.hasPrefix(query.text), pb = b.folded.hasPrefix(query.text)
                if pa != pb { return pa }
                if a.hit.file.modifiedAt != b.hit.file.modifiedAt { return a.hit.file.modifiedAt > b.hit.file.modifiedAt }
                if a.hit.file.name != b.hit.file.name { return a.hit.file.name < b.hit.file.name }
                return a.hit.file.id < b.hit.file.id
            }
            found = keyed.map(\.hit)
            let page = Array(found.dropFirst(offset).prefix(limit))
            return (try Self.paths(db, of: page), total)
        }
    }

    /// Whether a search text is short: one or two characters find names starting with them, in name order.
    static func isShort(_ text: String) -> Bool { text.unicodeScalars.count < 3 }

    /// The owner's live matches (their root never: its folded name is NULL), in the order of ``SearchQuery`` results,
    /// and how many there are.
    ///
    /// Three characters or more: any part of a name — SQLite's trigram index finds the candidates and the join starts
    /// from them; PostgreSQL's pg_trgm index serves the `LIKE`. The matches are sorted by their ids and sort keys only
    /// and counted in the same pass; only the page's rows are then read whole (sorting whole rows cost twice as much).
    /// One or two characters: names starting with the text, a range of `files_search_prefix` read in its own order and
    /// counted from the index alone (any part would match most of a tree and find nothing a person looks for).
    static func matches(
        _ db: any SQLTransaction, _ dialect: SchemaMigrations.Dialect, ownerId: String, query: SearchQuery, limit: Int
    ) throws -> (files: [FileRecord], total: Int) {
        var from = "files f"
        var conditions = ["f.user_id = ?", "f.trash_root IS NULL"]
        var arguments: [any SQLArgument] = [ownerId]
        let short = isShort(query.text)
        if short {
            conditions += ["f.search_name >= ?", "f.search_name < ?"]
            arguments += [query.text, query.text + "\u{10FFFF}"]
        } else {
            conditions.append("f.search_name LIKE ? ESCAPE '\\'")
            arguments.append(SearchText.pattern(query.text))
            if dialect == .sqlite {
                // The trigram index finds the candidates (every user's); the conditions keep this user's live ones.
                from = "(SELECT rowid AS hit FROM files_search WHERE files_search MATCH ?) m CROSS JOIN files f ON f.rowid = m.hit"
                arguments.insert(SearchText.phrase(query.text), at: 0)
            }
        }
        if let kind = query.kind { conditions.append(kindCondition(kind)) }
        if let after = query.modifiedAfter {
            conditions.append("f.modified_at > ?")
            arguments.append(after.millis)
        }
        let filter = conditions.joined(separator: " AND ")
        if short {
            let total = try db.value("SELECT COUNT(*) FROM files f WHERE \(filter)", arguments, as: Int.self) ?? 0
            guard total > 0 else { return ([], 0) }
            let rows = try db.fetchAll("SELECT f.* FROM files f WHERE \(filter) ORDER BY f.search_name, f.id LIMIT ?", arguments + [limit])
            return (try rows.map(file), total)
        }
        let ranked = try db.fetchAll(
            """
            SELECT f.id, COUNT(*) OVER () AS matched FROM \(from) WHERE \(filter)
            ORDER BY CASE WHEN f.search_name LIKE ? ESCAPE '\\' THEN 0 ELSE 1 END, f.modified_at DESC, f.name, f.id LIMIT ?
            """, arguments + [SearchText.pattern(query.text, prefix: true), limit])
        guard let first = ranked.first else { return ([], 0) }
        let ids = try ranked.map { try $0.get("id", as: String.self) }
        var byId: [String: FileRecord] = [:]
        for start in stride(from: 0, to: ids.count, by: 500) {
            let part = Array(ids[start..<min(start + 500, ids.count)])
            for row in try db.fetchAll("SELECT * FROM files WHERE id IN (\(sqlPlaceholders(part.count)))", part) {
                let record = try file(row)
                byId[record.id] = record
            }
        }
        return (ids.compactMap { byId[$0] }, try first.get("matched", as: Int.self))
    }

    /// The SQL condition for items of `kind` (the same rule as ``FileKind/matches(mimeType:)``).
    static func kindCondition(_ kind: FileKind) -> String {
        func among(_ types: Set<String>) -> String { types.sorted().map { "'\($0)'" }.joined(separator: ", ") }
        let type = "LOWER(f.mime_type)"
        switch kind {
        case .folder: return "f.is_folder = 1"
        case .image: return "\(type) LIKE 'image/%'"
        case .video: return "\(type) LIKE 'video/%'"
        case .audio: return "\(type) LIKE 'audio/%'"
        case .pdf: return "\(type) = 'application/pdf'"
        case .text: return "\(type) LIKE 'text/%'"
        case .document: return "(\(type) = 'application/pdf' OR \(type) LIKE 'text/%' OR \(type) IN (\(among(FileKind.documentTypes))))"
        case .spreadsheet: return "\(type) IN (\(among(FileKind.spreadsheetTypes)))"
        case .presentation: return "\(type) IN (\(among(FileKind.presentationTypes)))"
        case .archive: return "\(type) IN (\(among(FileKind.archiveTypes)))"
        }
    }

    /// The user's mounts whose grants are accepted and live, and whose items are not in the trash.
    static func liveMounts(_ db: any SQLTransaction, userId: String, now: Date) throws -> [(grant: GrantRecord, mount: MountRecord)] {
        try db.fetchAll(
            """
            SELECT g.*, m.id AS m_id, m.parent_id AS m_parent_id, m.name AS m_name, m.created_at AS m_created_at
            FROM mounts m JOIN grants g ON g.id = m.grant_id JOIN files f ON f.id = g.item_id
            WHERE m.user_id = ? AND g.state = 'accepted' AND (g.expires_at IS NULL OR g.expires_at > ?) AND f.trash_root IS NULL
            """, [userId, now.millis]
        ).map { row in
            let grant = try grant(row)
            return (
                grant,
                MountRecord(
                    id: try row.get("m_id"), userId: userId, grantId: grant.id, itemId: grant.itemId, parentId: try row.get("m_parent_id"),
                    name: try row.get("m_name"), createdAt: Date(millis: try row.get("m_created_at")))
            )
        }
    }

    /// Each item and the folders above it, nearest first: one recursive query for them all.
    static func chains(_ db: any SQLTransaction, of ids: [String]) throws -> [String: [(id: String, name: String)]] {
        var chains: [String: [(id: String, name: String)]] = [:]
        for first in stride(from: 0, to: ids.count, by: 500) {
            let part = Array(ids[first..<min(first + 500, ids.count)])
            let rows = try db.fetchAll(
                """
                WITH RECURSIVE up(hit, id, parent_id, name, depth) AS (
                    SELECT id, id, parent_id, name, 0 FROM files WHERE id IN (\(sqlPlaceholders(part.count)))
                    UNION ALL SELECT up.hit, f.id, f.parent_id, f.name, up.depth + 1 FROM files f JOIN up ON f.id = up.parent_id WHERE up.depth < 10000
                ) SELECT hit, id, name, depth FROM up ORDER BY hit, depth
                """, part)
            for row in rows { chains[try row.get("hit"), default: []].append((try row.get("id"), try row.get("name"))) }
        }
        return chains
    }

    /// The hits with the names leading to them from the asking user's root: a share's items through its mount's
    /// name and the user's folders above the mount.
    static func paths(_ db: any SQLTransaction, of found: [(file: FileRecord, reach: Reach?)]) throws -> [SearchHit] {
        let chains = try chains(db, of: found.map(\.file.id) + found.compactMap(\.reach?.mount.parentId))
        return found.map { file, reach in
            let chain = chains[file.id] ?? []
            guard let reach else { return SearchHit(file: file, names: chain.dropLast().map(\.name).reversed()) }
            // Up to the share's root (renamed: the mount's name), then the grantee's folders from the mount's.
            let inside = chain.prefix { $0.id != reach.grant.itemId }.map(\.name)
            let above = (chains[reach.mount.parentId] ?? []).dropLast().map(\.name)
            let names = above.reversed() + [reach.mount.name] + inside.reversed()
            return SearchHit(file: file, names: file.id == reach.grant.itemId ? above.reversed() + [reach.mount.name] : names)
        }
    }

    // MARK: Stars

    func star(userId: String, fileId: String, now: Date) async throws {
        try await database.write { db in
            try db.perform("INSERT INTO stars (user_id, file_id, created_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING", [userId, fileId, now.millis])
        }
    }

    func unstar(userId: String, fileId: String) async throws {
        try await database.write { db in try db.perform("DELETE FROM stars WHERE user_id = ? AND file_id = ?", [userId, fileId]) }
    }

    func starred(userId: String, offset: Int, limit: Int) async throws -> (files: [FileRecord], total: Int) {
        try await database.read { db in
            let from = "FROM stars s JOIN files f ON f.id = s.file_id WHERE s.user_id = ? AND f.trash_root IS NULL"
            let total = try db.value("SELECT COUNT(*) \(from)", [userId], as: Int.self) ?? 0
            let rows = try db.fetchAll("SELECT f.* \(from) ORDER BY s.created_at DESC, f.id LIMIT ? OFFSET ?", [userId, limit, offset])
            return (try rows.map(Self.file), total)
        }
    }

    func starredAmong(userId: String, ids: [String]) async throws -> Set<String> {
        guard !ids.isEmpty else { return [] }
        return try await database.read { db in
            var starred: Set<String> = []
            for first in stride(from: 0, to: ids.count, by: 500) {
                let part = Array(ids[first..<min(first + 500, ids.count)])
                starred.formUnion(
                    try db.values("SELECT file_id FROM stars WHERE user_id = ? AND file_id IN (\(sqlPlaceholders(part.count)))", [userId] + part, as: String.self))
            }
            return starred
        }
    }

    // MARK: Recent and activity

    func noteOpened(userId: String, fileId: String, now: Date) async throws {
        try await database.write { db in
            try db.perform(
                "INSERT INTO opened (user_id, file_id, at) VALUES (?, ?, ?) ON CONFLICT (user_id, file_id) DO UPDATE SET at = excluded.at",
                [userId, fileId, now.millis])
        }
    }

    /// What counts as the user changing a file, for "recent".
    static let changingActions = "'created', 'uploaded', 'edited', 'renamed', 'moved', 'copied', 'restored', 'restoredVersion'"

    func recent(userId: String, offset: Int, limit: Int) async throws -> (files: [FileRecord], total: Int) {
        try await database.read { db in
            let touched = """
                SELECT file_id, MAX(at) AS at FROM (
                    SELECT file_id, at FROM activity WHERE actor_id = ? AND action IN (\(Self.changingActions))
                    UNION ALL SELECT file_id, at FROM opened WHERE user_id = ?
                ) t GROUP BY file_id
                """
            let from = "FROM (\(touched)) r JOIN files f ON f.id = r.file_id WHERE f.trash_root IS NULL AND f.is_folder = 0"
            let total = try db.value("SELECT COUNT(*) \(from)", [userId, userId], as: Int.self) ?? 0
            let rows = try db.fetchAll("SELECT f.* \(from) ORDER BY r.at DESC, f.id LIMIT ? OFFSET ?", [userId, userId, limit, offset])
            return (try rows.map(Self.file), total)
        }
    }

    func activity(userId: String, offset: Int, limit: Int) async throws -> (events: [ActivityRecord], total: Int) {
        try await database.read { db in
            let mine = "a.user_id = ? OR a.actor_id = ?"
            let total = try db.value("SELECT COUNT(*) FROM activity a WHERE \(mine)", [userId, userId], as: Int.self) ?? 0
            let rows = try db.fetchAll(
                """
                SELECT a.seq AS a_seq, a.user_id AS a_user_id, a.file_id AS a_file_id, a.action AS a_action, a.at AS a_at,
                    a.actor_id AS a_actor_id, a.device_id AS a_device_id, a.name AS a_name, a.mime_type AS a_mime_type,
                    a.is_folder AS a_is_folder, COALESCE(d.name, p.label) AS device_name, f.*
                FROM activity a LEFT JOIN files f ON f.id = a.file_id
                LEFT JOIN devices d ON d.id = a.device_id LEFT JOIN app_passwords p ON 'app-password:' || p.id = a.device_id
                WHERE \(mine) ORDER BY a.seq DESC LIMIT ? OFFSET ?
                """, [userId, userId, limit, offset])
            let events = try rows.map { row in
                ActivityRecord(
                    seq: try row.get("a_seq"), ownerId: try row.get("a_user_id"), fileId: try row.get("a_file_id"),
                    action: ActivityEvent.Action(rawValue: try row.get("a_action")) ?? .edited, at: Date(millis: try row.get("a_at")),
                    actorId: try row.get("a_actor_id"), deviceId: try row.get("a_device_id"), deviceName: try row.get("device_name"),
                    name: try row.get("a_name"), mimeType: try row.get("a_mime_type"), isFolder: try row.get("a_is_folder"),
                    current: try row.get("id", as: String?.self) == nil ? nil : try Self.file(row))
            }
            return (events, total)
        }
    }

    func pruneActivity(before: Date) async throws -> Int {
        try await database.write { db in
            try db.execute("DELETE FROM activity WHERE at < ?", [before.millis]) + db.execute("DELETE FROM opened WHERE at < ?", [before.millis])
        }
    }

    // MARK: Thumbnails

    func thumbnail(revisionId: String, size: Int) async throws -> ThumbnailRecord? {
        try await database.read { db in
            try db.fetchOne("SELECT mime_type, data FROM thumbnails WHERE revision_id = ? AND size = ?", [revisionId, size]).map { row in
                ThumbnailRecord(mimeType: try row.get("mime_type"), data: try row.get("data"))
            }
        }
    }

    func storeThumbnail(revisionId: String, size: Int, userId: String, thumbnail: ThumbnailRecord, now: Date) async throws {
        try await database.write { db in
            // Only while the revision is there: one pruned meanwhile takes no thumbnail with it.
            try db.perform(
                """
                INSERT INTO thumbnails (revision_id, size, user_id, mime_type, data, created_at)
                SELECT ?, ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM revisions WHERE id = ?) ON CONFLICT DO NOTHING
                """, [revisionId, size, userId, thumbnail.mimeType, thumbnail.data, now.millis, revisionId])
        }
    }

    // MARK: Folding

    func foldNames() async throws -> Int {
        var folded = 0
        while true {
            let rows = try await database.read { db in
                try db.fetchAll("SELECT id, name FROM files WHERE search_name IS NULL AND parent_id IS NOT NULL LIMIT 1000", [])
                    .map { (id: try $0.get("id", as: String.self), name: try $0.get("name", as: String.self)) }
            }
            guard !rows.isEmpty else { return folded }
            try await database.write { db in
                for row in rows { try db.perform("UPDATE files SET search_name = ? WHERE id = ? AND name = ?", [SearchText.fold(row.name), row.id, row.name]) }
            }
            folded += rows.count
            // A row renamed between the read and the write keeps NULL here, and its rename folded it already.
            if rows.count < 1000 { return folded }
        }
    }
}
