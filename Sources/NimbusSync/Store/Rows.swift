import Foundation
import GRDB
import GRDBSQLite
import NimbusAPI

/// One item with its three trees (see ``LocalDatabase``) and what this side keeps about it.
struct ItemRow: Sendable, Equatable {
    var luid: String
    /// The provider's id of the item, once it exists there.
    var fileId: String?
    var isFolder: Bool
    // remote: the provider's state as last observed
    var rPresent = false
    var rParent: String?
    var rName: String?
    var rMime: String?
    var rSize: Int64?
    var rChecksum: String?
    var rRevision: String?
    var rModified: Int64?
    /// ``RemoteAccess``'s raw value, as the remote tree has it.
    var rAccess = 0
    // synced: the merge base
    var sPresent = false
    var sParent: String?
    var sName: String?
    var sChecksum: String?
    var sRevision: String?
    /// ``RemoteAccess``'s raw value, as the merge base recorded it.
    var sAccess = 0
    // local: what is here (the app's view, or the folder on disk)
    var lPresent = false
    var lParent: String?
    var lName: String?
    var lMime: String?
    var lSize: Int64?
    var lChecksum: String?
    var lModified: Int64?
    /// Where this item's bytes are on this device (the app's store: a private copy or the cache; for a file added
    /// without a copy, the caller's file), and their SHA-256.
    var contentPath: String?
    var contentChecksum: String?
    /// The user's word on keeping the content here (``PinState``; the `pinned` column). The app library's
    /// "available offline" is ``PinState/pinned``.
    var pin = PinState.inherited
    var pinned: Bool {
        get { pin == .pinned }
        set { pin = newValue ? .pinned : .inherited }
    }
    /// Waiting for the user (``Hold``).
    var hold: Hold?
    var lastAccess: Int64 = 0
    /// The local content is still being written (a synced folder's file modified moments ago).
    var lChanging = false
    /// A synced folder's new file, settled, whose content was not read yet: it goes there hashed as it is sent
    /// (``HashesWhileSending``), so a big new file is read once, not twice. `lChecksum` is nil until then; setting
    /// it (or `lChanging`) ends this state.
    var lUnhashed = false
    /// A synced folder's cloud-only file: a placeholder (``Placeholder``, `NAME.nimbus`) stands here for it. The
    /// inode, size and time are the placeholder's; the checksum is the merge base's (`l_state = 'placeholder'`).
    var lPlaceholder = false
    /// What the item's name on disk adds to its name in the local tree: `.nimbus` for a placeholder.
    var diskSuffix: String { lPlaceholder && !isFolder ? Placeholder.suffix : "" }
    /// A synced folder's file as last observed: inode and modification time (ns), to tell "unchanged" without
    /// reading it and to check it again immediately before anything replaces, moves or deletes it.
    var lInode: Int64?
    var lMtime: Int64?
    /// The request id that creates this item there (kept until the creation is recorded) and whether a request
    /// with it was sent (then the item may exist there already: a retry with the same id tells).
    var createRequest: String?
    var createSent = false
    /// `<checksum> <request id>` of the new version being sent (a resumable session is found again by it).
    var uploadRequest: String?
    /// `contentPath` is the engine's own copy (removed or kept as the cache afterwards), not the caller's file.
    var contentOwned = true
    /// The local content is revision `sourceRevision`'s (a restore): sent by restoring it there.
    var sourceRevision: String?

    static func empty(_ luid: String, isFolder: Bool) -> ItemRow { ItemRow(luid: luid, fileId: nil, isFolder: isFolder) }

    /// The columns ``init(row:)`` reads, in its order: select rows with `SELECT \(ItemRow.columns) FROM items`.
    /// (Decoding by index, not by name: name lookups were most of the cost of applying the change feed and of
    /// listing big folders.)
    static let columns = """
        luid, file_id, is_folder, r_present, r_parent, r_name, r_mime, r_size, r_checksum, r_revision, r_modified, \
        s_present, s_parent, s_name, s_checksum, s_revision, l_present, l_parent, l_name, l_mime, l_size, l_checksum, l_modified, \
        content_path, content_checksum, pinned, flag, last_access, l_state, l_inode, l_mtime, create_request, create_sent, upload_request, \
        content_owned, source_revision, r_access, s_access
        """

    static let columnNames = columns.split(separator: ",").map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }

    /// A row selected with ``columns``.
    init(row: Row) {
        self.init(
            luid: row[0], fileId: row[1], isFolder: row[2], rPresent: row[3], rParent: row[4], rName: row[5], rMime: row[6],
            rSize: row[7], rChecksum: row[8], rRevision: row[9], rModified: row[10], sPresent: row[11], sParent: row[12],
            sName: row[13], sChecksum: row[14], sRevision: row[15], lPresent: row[16], lParent: row[17], lName: row[18],
            lMime: row[19], lSize: row[20], lChecksum: row[21], lModified: row[22], contentPath: row[23], contentChecksum: row[24],
            pin: PinState(rawValue: row[25]) ?? .inherited, hold: (row[26] as String?).flatMap(Hold.init(rawValue:)), lastAccess: row[27],
            lChanging: (row[28] as String?) == "changing", lUnhashed: (row[28] as String?) == "unhashed", lPlaceholder: (row[28] as String?) == "placeholder", lInode: row[29], lMtime: row[30], createRequest: row[31], createSent: row[32], uploadRequest: row[33], contentOwned: row[34],
            sourceRevision: row[35], rAccess: row[36], sAccess: row[37])
    }

    init(
        luid: String, fileId: String?, isFolder: Bool, rPresent: Bool = false, rParent: String? = nil, rName: String? = nil, rMime: String? = nil,
        rSize: Int64? = nil, rChecksum: String? = nil, rRevision: String? = nil, rModified: Int64? = nil, sPresent: Bool = false,
        sParent: String? = nil, sName: String? = nil, sChecksum: String? = nil, sRevision: String? = nil, lPresent: Bool = false,
        lParent: String? = nil, lName: String? = nil, lMime: String? = nil, lSize: Int64? = nil, lChecksum: String? = nil, lModified: Int64? = nil,
        contentPath: String? = nil, contentChecksum: String? = nil, pin: PinState = .inherited, hold: Hold? = nil, lastAccess: Int64 = 0,
        lChanging: Bool = false, lUnhashed: Bool = false, lPlaceholder: Bool = false, lInode: Int64? = nil, lMtime: Int64? = nil, createRequest: String? = nil, createSent: Bool = false,
        uploadRequest: String? = nil, contentOwned: Bool = true, sourceRevision: String? = nil, rAccess: Int = 0, sAccess: Int = 0
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
        self.pin = pin
        self.hold = hold
        self.lastAccess = lastAccess
        self.lChanging = lChanging
        self.lUnhashed = lUnhashed
        self.lPlaceholder = lPlaceholder
        self.lInode = lInode
        self.lMtime = lMtime
        self.createRequest = createRequest
        self.createSent = createSent
        self.uploadRequest = uploadRequest
        self.contentOwned = contentOwned
        self.sourceRevision = sourceRevision
        self.rAccess = rAccess
        self.sAccess = sAccess
    }

    /// The row's values in ``columns`` order.
    var values: [(any DatabaseValueConvertible)?] {
        [
            luid, fileId, isFolder, rPresent, rParent, rName, rMime, rSize, rChecksum, rRevision, rModified, sPresent, sParent, sName,
            sChecksum, sRevision, lPresent, lParent, lName, lMime, lSize, lChecksum, lModified, contentPath, contentChecksum, pin.rawValue,
            hold?.rawValue, lastAccess, localState, lInode, lMtime, createRequest, createSent, uploadRequest, contentOwned,
            sourceRevision, rAccess, sAccess,
        ]
    }

    /// Every row a query selecting ``columns`` returns, decoded straight from SQLite (GRDB's generic decoding of
    /// 36 columns was most of the cost of loading 10,000 rows for a plan).
    static func fetchAll(_ db: Database, where condition: String = "1", arguments: StatementArguments = []) throws -> [ItemRow] {
        let statement = try db.cachedStatement(sql: "SELECT \(columns) FROM items WHERE \(condition)")
        let sqlite = statement.sqliteStatement
        func text(_ column: Int32) -> String? {
            guard let bytes = sqlite3_column_text(sqlite, column) else { return nil }
            return String(decoding: UnsafeBufferPointer(start: bytes, count: Int(sqlite3_column_bytes(sqlite, column))), as: UTF8.self)
        }
        func integer(_ column: Int32) -> Int64? { sqlite3_column_type(sqlite, column) == SQLITE_NULL ? nil : sqlite3_column_int64(sqlite, column) }
        func flag(_ column: Int32) -> Bool { sqlite3_column_int64(sqlite, column) != 0 }
        // `sealed`: the text of a column an encrypted store seals, opened (``sealedColumns``).
        func row(_ sealed: (Int32, StoreCipher.Kind) throws -> String?) throws -> ItemRow {
            ItemRow(
                luid: text(0) ?? "", fileId: try sealed(1, .id), isFolder: flag(2), rPresent: flag(3), rParent: text(4), rName: try sealed(5, .name),
                rMime: text(6), rSize: integer(7), rChecksum: text(8), rRevision: text(9), rModified: integer(10), sPresent: flag(11),
                sParent: text(12), sName: try sealed(13, .name), sChecksum: text(14), sRevision: text(15), lPresent: flag(16), lParent: text(17),
                lName: try sealed(18, .name), lMime: text(19), lSize: integer(20), lChecksum: text(21), lModified: integer(22), contentPath: text(23),
                contentChecksum: text(24), pin: PinState(rawValue: Int(integer(25) ?? 0)) ?? .inherited, hold: text(26).flatMap(Hold.init(rawValue:)),
                lastAccess: integer(27) ?? 0, lChanging: text(28) == "changing", lUnhashed: text(28) == "unhashed", lPlaceholder: text(28) == "placeholder", lInode: integer(29), lMtime: integer(30), createRequest: text(31), createSent: flag(32),
                uploadRequest: text(33), contentOwned: flag(34), sourceRevision: text(35), rAccess: Int(integer(36) ?? 0),
                sAccess: Int(integer(37) ?? 0))
        }
        var result: [ItemRow] = []
        let rows = try Row.fetchCursor(statement, arguments: arguments)
        guard let cipher = db.storeCipher else {
            while try rows.next() != nil { result.append(try row { column, _ in text(column) }) }
            return result
        }
        // Encrypted: each sealed text is looked up in the cipher's cache by SQLite's bytes (no string made of it), and
        // a row's three names, mostly one sealed text, are looked up once.
        try cipher.withOpener { open in
            while try rows.next() != nil {
                var last: (bytes: UnsafeRawBufferPointer, plain: String)?
                result.append(
                    try row { column, kind in
                        guard let pointer = sqlite3_column_text(sqlite, column) else { return nil }
                        let bytes = UnsafeRawBufferPointer(start: pointer, count: Int(sqlite3_column_bytes(sqlite, column)))
                        if kind == .name, let last, SealedTable.same(last.bytes, bytes) {
                            return last.plain
                        }
                        let plain = try open(bytes, kind)
                        if kind == .name { last = (bytes, plain) }
                        return plain
                    })
            }
        }
        return result
    }

    /// A row selected with ``columns``, its names opened when the store is encrypted.
    static func decode(_ row: Row, _ db: Database) throws -> ItemRow {
        try ItemRow(row: row).opened(db.storeCipher)
    }

    // (Through ``fetchAll(_:where:arguments:)``: decoded straight from SQLite, an encrypted store's names looked up
    // by their bytes — a step reads its row this way several times.)
    static func fetch(_ db: Database, luid: String) throws -> ItemRow? {
        try fetchAll(db, where: "luid = ?", arguments: [luid]).first
    }

    static func fetch(_ db: Database, fileId: String) throws -> ItemRow? {
        try fetchAll(db, where: "file_id = ?", arguments: [db.storedId(fileId)]).first
    }

    /// The indexes in ``columns`` of what an encrypted store seals: file_id, r_name, s_name, l_name.
    static let sealedColumns: Set<Int> = [1, 5, 13, 18]

    /// This row as an encrypted store keeps it (names sealed, see ``StoreCipher``); itself for a plain store.
    func sealed(_ cipher: StoreCipher?) -> ItemRow {
        guard let cipher else { return self }
        var row = self
        row.fileId = fileId.map { cipher.sealId($0) }
        row.rName = cipher.sealName(rName)
        row.sName = cipher.sealName(sName)
        row.lName = cipher.sealName(lName)
        return row
    }

    /// This row as read from an encrypted store, names opened (``StoreCipher/open(_:)``).
    func opened(_ cipher: StoreCipher?) throws -> ItemRow {
        guard let cipher else { return self }
        var rows = [self]
        try cipher.open(&rows)
        return rows[0]
    }

    /// The LUID of the item that is provider item `fileId`, without decoding the row.
    static func luid(_ db: Database, fileId: String) throws -> String? {
        try String.fetchOne(db.cachedStatement(sql: "SELECT luid FROM items WHERE file_id = ?"), arguments: [db.storedId(fileId)])
    }

    static let insertSQL = """
        INSERT INTO items (\(columns)) VALUES (\(Array(repeating: "?", count: columnNames.count).joined(separator: ", ")))
        ON CONFLICT (luid) DO UPDATE SET \(columnNames.dropFirst().map { "\($0) = excluded.\($0)" }.joined(separator: ", "))
        """

    func save(_ db: Database) throws {
        try db.cachedStatement(sql: Self.insertSQL).execute(arguments: StatementArguments(sealed(db.storeCipher).values))
    }

    /// Writes what changed since `original` (this row as it was read): nothing when nothing did, else an UPDATE of
    /// just those columns. ``save(_:)`` rewrites every column, and so every index entry of the row; applying the
    /// change feed mostly changes nothing or a few columns no index holds.
    func update(_ db: Database, from original: ItemRow) throws {
        guard self != original else { return }
        guard luid == original.luid else { return try save(db) }
        var assignments: [String] = []
        var arguments: [(any DatabaseValueConvertible)?] = []
        // Compared in the clear; what changed in a sealed column (an encrypted store's id and names) is sealed.
        var sealedValues: [(any DatabaseValueConvertible)?]?
        for (index, (new, old)) in zip(values, original.values).enumerated()
        where (new?.databaseValue ?? .null) != (old?.databaseValue ?? .null) {
            assignments.append("\(Self.columnNames[index]) = ?")
            if Self.sealedColumns.contains(index), let cipher = db.storeCipher {
                if sealedValues == nil { sealedValues = sealed(cipher).values }
                arguments.append(sealedValues?[index] ?? nil)
            } else {
                arguments.append(new)
            }
        }
        guard !assignments.isEmpty else { return }
        arguments.append(luid)
        try db.cachedStatement(sql: "UPDATE items SET \(assignments.joined(separator: ", ")) WHERE luid = ?")
            .execute(arguments: StatementArguments(arguments))
    }

    static func delete(_ db: Database, luid: String) throws {
        try db.cachedStatement(sql: "DELETE FROM items WHERE luid = ?").execute(arguments: [luid])
        try db.cachedStatement(sql: "DELETE FROM failures WHERE luid = ?").execute(arguments: [luid])
    }

    // MARK: The three trees

    /// Takes a provider item as the remote state.
    mutating func setRemote(_ item: RemoteItem, parentLuid: String?) {
        fileId = item.id
        isFolder = item.isFolder
        rPresent = true
        rParent = parentLuid
        rName = item.name
        rMime = item.mimeType
        rSize = item.size
        rChecksum = item.checksum
        rRevision = item.revision
        rModified = item.modifiedAt.millis
        rAccess = item.access.rawValue
    }

    /// The remote state (presence, place, content) as `other` has it.
    mutating func takeRemote(from other: ItemRow) {
        rPresent = other.rPresent
        rParent = other.rParent
        rName = other.rName
        rMime = other.rMime
        rAccess = other.rAccess
        takeRemoteContent(from: other)
    }

    /// The remote content as `other` has it.
    mutating func takeRemoteContent(from other: ItemRow) {
        rSize = other.rSize
        rChecksum = other.rChecksum
        rRevision = other.rRevision
        rModified = other.rModified
    }

    /// The remote state becomes the merge base (both sides agree on all of it).
    mutating func syncRemote() {
        sPresent = rPresent
        sParent = rParent
        sName = rName
        sChecksum = rChecksum
        sRevision = rRevision
        sAccess = rAccess
    }

    /// The remote content becomes the merge base's (the place stays as it is).
    mutating func syncRemoteContent() {
        sChecksum = rChecksum
        sRevision = rRevision
    }

    var remoteNode: RemoteNode? {
        guard rPresent, let rName else { return nil }
        return RemoteNode(
            parent: rParent.map(ItemID.init), name: rName, isFolder: isFolder, revision: rRevision, checksum: rChecksum, size: rSize ?? 0,
            access: RemoteAccess(rawValue: rAccess))
    }

    var syncedNode: RemoteNode? {
        guard sPresent, let sName else { return nil }
        return RemoteNode(
            parent: sParent.map(ItemID.init), name: sName, isFolder: isFolder, revision: sRevision, checksum: sChecksum, access: RemoteAccess(rawValue: sAccess))
    }

    var localNode: LocalNode? {
        guard lPresent, let lName else { return nil }
        let content: LocalContent
        if lPlaceholder && !isFolder {
            content = .known(checksum: lChecksum ?? "", size: rSize ?? 0)
        } else if lUnhashed && !lChanging && !isFolder && lChecksum == nil, let lSize {
            content = .unhashed(size: lSize)
        } else {
            content = lChanging || (!isFolder && lChecksum == nil) ? .changing : .known(checksum: lChecksum ?? "", size: lSize ?? 0)
        }
        return LocalNode(
            parent: lParent.map(ItemID.init), name: lName, isFolder: isFolder, content: content, hold: hold,
            creationInDoubt: createSent && fileId == nil, restoring: sourceRevision, placeholder: lPlaceholder && !isFolder, lastUsed: lastAccess)
    }

    /// Deleted here while its creation was in doubt (``Trees/doubts``): as it was here.
    var doubtNode: LocalNode? {
        guard !lPresent, createSent, fileId == nil, let lName else { return nil }
        return LocalNode(parent: lParent.map(ItemID.init), name: lName, isFolder: isFolder)
    }

    /// Nothing differs between the trees and nothing waits: the item is synced.
    var isSynced: Bool {
        hold == nil && lPresent == sPresent && lPresent == rPresent && lParent == sParent && lName == sName
            && (isFolder || (lChecksum == sChecksum && !lChanging)) && rParent == sParent && rName == sName && rRevision == sRevision
    }
}

/// What the user sees of an item's work: "pending" — the local tree differs from the merge base, so the item has
/// something to send — defined here once, in Swift (``isPending``) and in SQL (``pendingExpression``, for listings
/// and counts), and a test holds the two to each other over random rows.
extension ItemRow {
    /// The content here is still being written (`changing`) or was not read yet (`unhashed`): the `l_state` column.
    /// A placeholder (`placeholder`) is neither: it holds the merge base's content.
    var localState: String? {
        lChanging ? "changing" : lUnhashed && lChecksum == nil && !isFolder ? "unhashed" : lPlaceholder && !isFolder ? "placeholder" : nil
    }

    /// The local tree differs from the merge base: there or not, place, name (canonically: NFD and NFC are one name),
    /// a file's content, or content still being written or read.
    var isPending: Bool {
        lPresent != sPresent
            || (lPresent && (lParent != sParent || lName != sName || (!isFolder && lChecksum != sChecksum) || (localState != nil && !lPlaceholder)))
    }

    /// ``isPending`` in SQL (1 when pending).
    static let pendingExpression = """
        (l_present != s_present OR (l_present = 1 AND (l_parent IS NOT s_parent OR (l_name IS NOT s_name AND nimbus_names_differ(l_name, s_name)) \
        OR (is_folder = 0 AND l_checksum IS NOT s_checksum) OR (l_state IS NOT NULL AND l_state <> 'placeholder'))))
        """

    /// What an item shows: waiting for the user (its hold) before failed or in transfer, before pending.
    static func viewState(luid: String, hold: Hold?, pending: Bool, failures: [String: ItemState]) -> ItemState {
        switch hold {
        case .conflict: return .conflict
        case .unsynced: return .unsynced
        case .readOnly: return .readOnly
        default:
            if let state = failures[luid] { return state }
            return pending ? .pending : .synced
        }
    }
}

/// A retry schedule of an item whose last step failed.
struct FailureRow: Sendable, Equatable {
    var luid: String
    var kind: String
    var attempts: Int
    var nextAttemptAt: Int64
    var lastError: String?
    var failed: Bool

    static func all(_ db: Database) throws -> [String: FailureRow] {
        var result: [String: FailureRow] = [:]
        let cipher = db.storeCipher
        for row in try Row.fetchAll(db, sql: "SELECT luid, kind, attempts, next_attempt_at, last_error, failed FROM failures") {
            let stored: String? = row[4]
            let lastError = try cipher.map { cipher in try stored.map { try cipher.openText($0) } } ?? stored
            let failure = FailureRow(luid: row[0], kind: row[1], attempts: row[2], nextAttemptAt: row[3], lastError: lastError, failed: row[5])
            result[failure.luid] = failure
        }
        return result
    }

    /// How many times each of `luids` has failed so far (absent: never). One indexed look-up each: a step that
    /// fails must not read every failure (10,000 steps failing in one outage made that quadratic, minutes of CPU).
    static func attempts(_ db: Database, of luids: some Sequence<String>) throws -> [String: Int] {
        let statement = try db.cachedStatement(sql: "SELECT attempts FROM failures WHERE luid = ?")
        var result: [String: Int] = [:]
        for luid in luids {
            if let attempts = try Int.fetchOne(statement, arguments: [luid]) { result[luid] = attempts }
        }
        return result
    }

    func save(_ db: Database) throws {
        try db.execute(
            sql: """
                INSERT INTO failures (luid, kind, attempts, next_attempt_at, last_error, failed) VALUES (?, ?, ?, ?, ?, ?)
                ON CONFLICT (luid) DO UPDATE SET kind = excluded.kind, attempts = excluded.attempts, next_attempt_at = excluded.next_attempt_at,
                last_error = excluded.last_error, failed = excluded.failed
                """,
            arguments: [luid, kind, attempts, nextAttemptAt, db.storeCipher.map { cipher in lastError.map { cipher.sealText($0) } } ?? lastError, failed])
    }
}

/// The trees' nodes written back into a row: what ``Trees/apply(_:_:)`` changed, and only that.
extension ItemRow {
    /// Takes what `after` holds for this item where it differs from `before` (the nodes rows gave, ``remoteNode``,
    /// ``syncedNode``, ``localNode``): presence, place, revision, checksum, a file's content here, the hold, a creation
    /// no longer in doubt. What the trees do not hold (ids, MIME types, times, content files) stays as it is.
    mutating func take(_ id: ItemID, from before: Trees, to after: Trees) {
        let (oldRemote, newRemote) = (before.remote[id], after.remote[id])
        if oldRemote != newRemote {
            rPresent = newRemote != nil
            if let node = newRemote {
                if node.parent != oldRemote?.parent { rParent = node.parent?.rawValue }
                if node.name != oldRemote?.name { rName = node.name }
                if node.revision != oldRemote?.revision { rRevision = node.revision }
                if node.checksum != oldRemote?.checksum { rChecksum = node.checksum }
                if node.size != oldRemote?.size { rSize = node.size }
                if node.access != oldRemote?.access { rAccess = node.access.rawValue }
            }
        }
        let (oldSynced, newSynced) = (before.synced[id], after.synced[id])
        if oldSynced != newSynced {
            sPresent = newSynced != nil
            if let node = newSynced {
                if node.parent != oldSynced?.parent { sParent = node.parent?.rawValue }
                if node.name != oldSynced?.name { sName = node.name }
                if node.revision != oldSynced?.revision { sRevision = node.revision }
                if node.checksum != oldSynced?.checksum { sChecksum = node.checksum }
                if node.access != oldSynced?.access { sAccess = node.access.rawValue }
            }
        }
        let (oldLocal, newLocal) = (before.local[id], after.local[id])
        if oldLocal != newLocal {
            lPresent = newLocal != nil
            if let node = newLocal {
                if node.parent != oldLocal?.parent { lParent = node.parent?.rawValue }
                if node.name != oldLocal?.name { lName = node.name }
                if !isFolder, node.content != oldLocal?.content {
                    switch node.content {
                    case .known(let checksum, let size):
                        // (A remote without checksums gives none: "" is the planner's unknown, nil here.)
                        lChecksum = checksum.isEmpty ? nil : checksum
                        lSize = size
                        lChanging = false
                    case .changing:
                        lChanging = true
                    case .unhashed(let size):
                        lSize = size
                        lUnhashed = true
                    }
                }
                if node.placeholder != (oldLocal?.placeholder ?? false) { lPlaceholder = node.placeholder }
                if node.hold != oldLocal?.hold { hold = node.hold }
                if oldLocal?.creationInDoubt == true, !node.creationInDoubt { createSent = false }
                if node.restoring != oldLocal?.restoring { sourceRevision = node.restoring }
            } else {
                lPlaceholder = false
            }
        }
        if before.pins[id] != after.pins[id] { pin = after.pins[id] ?? .inherited }
    }

    /// The item's three nodes as a fragment of the trees (with the root).
    static func trees(_ rows: [ItemRow]) -> Trees {
        var trees = Trees()
        for row in rows {
            let id = ItemID(row.luid)
            trees.remote[id] = row.remoteNode
            trees.synced[id] = row.syncedNode
            trees.local[id] = row.localNode
            trees.doubts[id] = row.doubtNode
            if row.pin != .inherited { trees.pins[id] = row.pin }
        }
        return trees
    }
}
