import Foundation
import GRDB
import NimbusAPI

/// One item with its three trees (see ``LocalDatabase``).
struct ItemRow: Sendable, Equatable {
    var luid: String
    var fileId: String?
    var isFolder: Bool
    // remote
    var rPresent: Bool
    var rParent: String?
    var rName: String?
    var rMime: String?
    var rSize: Int64?
    var rChecksum: String?
    var rRevision: String?
    var rModified: Int64?
    // synced
    var sPresent: Bool
    var sParent: String?
    var sName: String?
    var sChecksum: String?
    var sRevision: String?
    // local
    var lPresent: Bool
    var lParent: String?
    var lName: String?
    var lMime: String?
    var lSize: Int64?
    var lChecksum: String?
    var lModified: Int64?
    // content on this device
    var contentPath: String?
    var contentChecksum: String?
    var pinned: Bool
    /// `conflict` or `unsynced`, when the item waits for the user.
    var flag: String?
    var lastAccess: Int64

    static func empty(_ luid: String, isFolder: Bool) -> ItemRow {
        ItemRow(
            luid: luid, fileId: nil, isFolder: isFolder, rPresent: false, rParent: nil, rName: nil, rMime: nil, rSize: nil,
            rChecksum: nil, rRevision: nil, rModified: nil, sPresent: false, sParent: nil, sName: nil, sChecksum: nil, sRevision: nil,
            lPresent: false, lParent: nil, lName: nil, lMime: nil, lSize: nil, lChecksum: nil, lModified: nil, contentPath: nil,
            contentChecksum: nil, pinned: false, flag: nil, lastAccess: 0)
    }

    init(
        luid: String, fileId: String?, isFolder: Bool, rPresent: Bool, rParent: String?, rName: String?, rMime: String?, rSize: Int64?,
        rChecksum: String?, rRevision: String?, rModified: Int64?, sPresent: Bool, sParent: String?, sName: String?, sChecksum: String?,
        sRevision: String?, lPresent: Bool, lParent: String?, lName: String?, lMime: String?, lSize: Int64?, lChecksum: String?,
        lModified: Int64?, contentPath: String?, contentChecksum: String?, pinned: Bool, flag: String?, lastAccess: Int64
    ) {
        self.luid = luid
        self.fileId = fileId
        self.isFolder = isFolder
        self.rPresent = rPresent
        self.rParent = rParent
        self.rName = rName
        self.rMime = rMime
        self.rSize = rSize
        self.rChecksum = rChecksum
        self.rRevision = rRevision
        self.rModified = rModified
        self.sPresent = sPresent
        self.sParent = sParent
        self.sName = sName
        self.sChecksum = sChecksum
        self.sRevision = sRevision
        self.lPresent = lPresent
        self.lParent = lParent
        self.lName = lName
        self.lMime = lMime
        self.lSize = lSize
        self.lChecksum = lChecksum
        self.lModified = lModified
        self.contentPath = contentPath
        self.contentChecksum = contentChecksum
        self.pinned = pinned
        self.flag = flag
        self.lastAccess = lastAccess
    }

    /// The columns ``init(row:)`` reads, in its order: select rows with `SELECT \(ItemRow.columns) FROM items`.
    /// (Decoding by index, not by name: name lookups were most of the cost of applying the change feed and of
    /// listing big folders.)
    static let columns = """
        luid, file_id, is_folder, r_present, r_parent, r_name, r_mime, r_size, r_checksum, r_revision, r_modified, \
        s_present, s_parent, s_name, s_checksum, s_revision, l_present, l_parent, l_name, l_mime, l_size, l_checksum, l_modified, \
        content_path, content_checksum, pinned, flag, last_access
        """

    /// A row selected with ``columns``.
    init(row: Row) {
        self.init(
            luid: row[0], fileId: row[1], isFolder: row[2], rPresent: row[3], rParent: row[4], rName: row[5], rMime: row[6],
            rSize: row[7], rChecksum: row[8], rRevision: row[9], rModified: row[10], sPresent: row[11], sParent: row[12],
            sName: row[13], sChecksum: row[14], sRevision: row[15], lPresent: row[16], lParent: row[17], lName: row[18],
            lMime: row[19], lSize: row[20], lChecksum: row[21], lModified: row[22], contentPath: row[23], contentChecksum: row[24],
            pinned: row[25], flag: row[26], lastAccess: row[27])
    }

    static func fetch(_ db: Database, luid: String) throws -> ItemRow? {
        try Row.fetchOne(db.cachedStatement(sql: "SELECT \(columns) FROM items WHERE luid = ?"), arguments: [luid]).map(ItemRow.init(row:))
    }

    /// New content here: its size, checksum and time, and with `copy` the private copy that holds the bytes.
    mutating func setLocalContent(_ staged: (url: URL, checksum: String, size: Int64), copy: Bool, now: Date) {
        lSize = staged.size
        lChecksum = staged.checksum
        lModified = now.millis
        lastAccess = now.millis
        if copy {
            contentPath = staged.url.path
            contentChecksum = staged.checksum
        }
    }

    /// The LUID of the item that is server file `fileId`, without decoding the row.
    static func luid(_ db: Database, fileId: String) throws -> String? {
        try String.fetchOne(db.cachedStatement(sql: "SELECT luid FROM items WHERE file_id = ?"), arguments: [fileId])
    }

    static func fetch(_ db: Database, fileId: String) throws -> ItemRow? {
        try Row.fetchOne(db.cachedStatement(sql: "SELECT \(columns) FROM items WHERE file_id = ?"), arguments: [fileId]).map(ItemRow.init(row:))
    }

    func save(_ db: Database) throws {
        try db.cachedStatement(
            sql: """
                INSERT INTO items (luid, file_id, is_folder, r_present, r_parent, r_name, r_mime, r_size, r_checksum, r_revision, r_modified,
                    s_present, s_parent, s_name, s_checksum, s_revision, l_present, l_parent, l_name, l_mime, l_size, l_checksum, l_modified,
                    content_path, content_checksum, pinned, flag, last_access)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (luid) DO UPDATE SET file_id = excluded.file_id, is_folder = excluded.is_folder,
                    r_present = excluded.r_present, r_parent = excluded.r_parent, r_name = excluded.r_name, r_mime = excluded.r_mime,
                    r_size = excluded.r_size, r_checksum = excluded.r_checksum, r_revision = excluded.r_revision, r_modified = excluded.r_modified,
                    s_present = excluded.s_present, s_parent = excluded.s_parent, s_name = excluded.s_name, s_checksum = excluded.s_checksum,
                    s_revision = excluded.s_revision, l_present = excluded.l_present, l_parent = excluded.l_parent, l_name = excluded.l_name,
                    l_mime = excluded.l_mime, l_size = excluded.l_size, l_checksum = excluded.l_checksum, l_modified = excluded.l_modified,
                    content_path = excluded.content_path, content_checksum = excluded.content_checksum, pinned = excluded.pinned,
                    flag = excluded.flag, last_access = excluded.last_access
                """
        ).execute(arguments: [
                luid, fileId, isFolder, rPresent, rParent, rName, rMime, rSize, rChecksum, rRevision, rModified, sPresent, sParent, sName,
                sChecksum, sRevision, lPresent, lParent, lName, lMime, lSize, lChecksum, lModified, contentPath, contentChecksum, pinned, flag,
                lastAccess,
            ])
    }

    /// The row's values in ``columns`` order.
    var values: [(any DatabaseValueConvertible)?] {
        [
            luid, fileId, isFolder, rPresent, rParent, rName, rMime, rSize, rChecksum, rRevision, rModified, sPresent, sParent, sName,
            sChecksum, sRevision, lPresent, lParent, lName, lMime, lSize, lChecksum, lModified, contentPath, contentChecksum, pinned, flag,
            lastAccess,
        ]
    }

    static let columnNames = columns.split(separator: ",").map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }

    /// Writes what changed since `original` (this row as it was read): nothing when nothing did, else an UPDATE of
    /// just those columns. ``save(_:)`` rewrites every column, and so every index entry of the row; applying the
    /// change feed after an upload mostly changes nothing or a few columns no index holds.
    func update(_ db: Database, from original: ItemRow) throws {
        guard self != original else { return }
        guard luid == original.luid else { return try save(db) }
        var assignments: [String] = []
        var arguments: [(any DatabaseValueConvertible)?] = []
        for (index, (new, old)) in zip(values, original.values).enumerated()
        where (new?.databaseValue ?? .null) != (old?.databaseValue ?? .null) {
            assignments.append("\(Self.columnNames[index]) = ?")
            arguments.append(new)
        }
        guard !assignments.isEmpty else { return }
        arguments.append(luid)
        try db.cachedStatement(sql: "UPDATE items SET \(assignments.joined(separator: ", ")) WHERE luid = ?")
            .execute(arguments: StatementArguments(arguments))
    }

    /// Copies the remote state into the local and synced trees (nothing pending for this item).
    mutating func adoptRemote() {
        sPresent = rPresent
        sParent = rParent
        sName = rName
        sChecksum = rChecksum
        sRevision = rRevision
        lPresent = rPresent
        lParent = rParent
        lName = rName
        lMime = rMime
        lSize = rSize
        lChecksum = rChecksum
        lModified = rModified
    }

    /// Takes a server `File` as the remote state.
    mutating func setRemote(_ file: File, parentLuid: String?) {
        fileId = file.id
        isFolder = file.isFolder
        rPresent = !file.trashed
        rParent = parentLuid
        rName = file.name
        rMime = file.mimeType
        rSize = file.size
        rChecksum = file.checksum
        rRevision = file.revisionId
        rModified = file.modifiedAt.millis
    }
}

/// What an operation does.
enum OperationKind: String, Sendable, Codable {
    case createFolder
    case upload
    case rename
    case move
    case delete
    case restore
    case download

    /// Moves bytes of one item and changes no names or folders: may overlap with other transfers.
    var isTransfer: Bool { self == .upload || self == .download }
}

/// What the executor knows of an operation it is running.
struct RunningOperation: Sendable {
    var luid: String
    var isTransfer: Bool
}

/// An operation's details, stored as JSON. Item references are LUIDs.
struct OperationPayload: Codable, Sendable, Equatable {
    var name: String?
    var parent: String?
    var mimeType: String?
    /// Where the bytes to upload are (a staged copy in the engine's store, or the user's file).
    var sourcePath: String?
    /// The staged copy belongs to the engine and is removed (or kept as the offline copy) afterwards.
    var ownsSource: Bool?
    var checksum: String?
    var size: Int64?
    /// The revision this change is based on (`If-Match`); `nil` for a new file.
    var baseRevision: String?
    /// Restore: the revision to restore.
    var revisionId: String?
    /// Upload: replace whatever holds the name (last-writer-wins on a name clash).
    var replace: Bool?
    /// Upload: the idempotency key sent as `requestId` (the operation's id until its content is replaced).
    var requestId: String?
}

/// A persisted operation of the queue.
struct OperationRow: Sendable, Equatable {
    enum State: String, Sendable {
        /// Waiting to run (maybe after `nextAttemptAt`, maybe behind its dependencies).
        case pending
        /// Done on the server; kept (and replayed in the view) until a pull shows its effect.
        case applied
        /// Held: its item is in `conflict` or `unsynced`, waiting for the user.
        case parked
        /// Gave up after the allowed attempts.
        case failed
    }

    var seq: Int64
    var id: String
    var luid: String
    var kind: OperationKind
    var payload: OperationPayload
    var dependsOn: [String]
    var state: State
    var attempts: Int
    var nextAttemptAt: Int64
    var lastError: String?

    init(row: Row) {
        seq = row["seq"]
        id = row["id"]
        luid = row["luid"]
        kind = OperationKind(rawValue: row["kind"]) ?? .download
        payload = (try? JSONDecoder().decode(OperationPayload.self, from: Data((row["payload"] as String).utf8))) ?? OperationPayload()
        dependsOn = (row["depends_on"] as String?).map { $0.split(separator: ",").map(String.init) } ?? []
        state = State(rawValue: row["state"]) ?? .pending
        attempts = row["attempts"]
        nextAttemptAt = row["next_attempt_at"]
        lastError = row["last_error"]
    }

    static func insert(
        _ db: Database, luid: String, kind: OperationKind, payload: OperationPayload, dependsOn: [String], now: Date, id: String = UUID.random().uuidString.lowercased()
    ) throws -> String {
        let json = String(decoding: try JSONEncoder().encode(payload), as: UTF8.self)
        try db.cachedStatement(sql: "INSERT INTO operations (id, luid, kind, payload, depends_on, created_at) VALUES (?, ?, ?, ?, ?, ?)")
            .execute(arguments: [id, luid, kind.rawValue, json, dependsOn.isEmpty ? nil : dependsOn.joined(separator: ","), now.millis])
        for dependency in Set(dependsOn) {
            try db.cachedStatement(sql: "INSERT INTO operation_dependencies (operation_id, depends_on) VALUES (?, ?) ON CONFLICT DO NOTHING")
                .execute(arguments: [id, dependency])
            try db.cachedStatement(sql: "UPDATE operations SET blocking = 1 WHERE id = ? AND blocking = 0").execute(arguments: [dependency])
        }
        return id
    }

    static func updatePayload(_ db: Database, id: String, _ payload: OperationPayload) throws {
        let json = String(decoding: try JSONEncoder().encode(payload), as: UTF8.self)
        try db.execute(sql: "UPDATE operations SET payload = ? WHERE id = ?", arguments: [json, id])
    }

    /// Whether anything is queued (in any state) for `luid`.
    static func any(_ db: Database, for luid: String) throws -> Bool {
        try Bool.fetchOne(db.cachedStatement(sql: "SELECT EXISTS (SELECT 1 FROM operations WHERE luid = ?)"), arguments: [luid]) ?? false
    }

    static func forItem(_ db: Database, _ luid: String) throws -> [OperationRow] {
        try Row.fetchAll(db.cachedStatement(sql: "SELECT * FROM operations WHERE luid = ? ORDER BY seq"), arguments: [luid]).map(OperationRow.init(row:))
    }

    /// The id of the last unfinished operation that creates or uploads `luid` (what others must wait for).
    static func creator(_ db: Database, of luid: String) throws -> String? {
        try String.fetchOne(
            db.cachedStatement(
                sql: """
                SELECT id FROM operations WHERE luid = ? AND kind IN ('createFolder', 'upload') AND state IN ('pending', 'parked', 'failed')
                ORDER BY seq DESC LIMIT 1
                """),
            arguments: [luid])
    }
}
