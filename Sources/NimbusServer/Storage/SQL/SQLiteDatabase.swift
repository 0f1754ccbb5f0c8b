import Foundation
import GRDB
import Metrics

/// The embedded ``SQLDatabase``: one SQLite file through GRDB — WAL, `synchronous=FULL`, one serialized writer,
/// concurrent readers. The schema is ``SchemaMigrations`` (``migrate(_:)``).
struct SQLiteDatabase: SQLDatabase {
    var dialect: SchemaMigrations.Dialect { .sqlite }
    let pool: DatabasePool

    init(path: String) throws {
        var configuration = Configuration()
        configuration.busyMode = .timeout(30)
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = FULL")
            // Savepoint journals (a batch commits each file in its own savepoint) in memory: on disk they were
            // ~50 small writes to a temporary file per file committed. They only serve rolling a savepoint
            // back; durability is the WAL's.
            try db.execute(sql: "PRAGMA temp_store = MEMORY")
        }
        pool = try DatabasePool(path: path, configuration: configuration)
        try Self.migrate(pool)
    }

    /// Brings the database to the last of ``SchemaMigrations``, each migration in a transaction of its own and
    /// recorded in `nimbus_migrations`. A database made before the one list (GRDB's `grdb_migrations` is there) first
    /// runs its frozen history (``LegacySQLiteSchema``) to the end, which is ``SchemaMigrations/base``.
    static func migrate(_ pool: DatabasePool) throws {
        let legacy = try pool.read { db in try db.tableExists("grdb_migrations") }
        if legacy { try LegacySQLiteSchema.migrator.migrate(pool) }
        let applied = try pool.write { db -> Set<String> in
            try db.execute(sql: "CREATE TABLE IF NOT EXISTS nimbus_migrations (id TEXT PRIMARY KEY, applied_at INTEGER NOT NULL)")
            if legacy {
                try db.execute(
                    sql: "INSERT INTO nimbus_migrations (id, applied_at) VALUES (?, ?) ON CONFLICT DO NOTHING", arguments: [SchemaMigrations.base, Date().millis])
            }
            return Set(try String.fetchAll(db, sql: "SELECT id FROM nimbus_migrations"))
        }
        for migration in SchemaMigrations.pending(applied: applied, legacyComplete: legacy) {
            try pool.write { db in
                for statement in migration.statements(for: .sqlite) { try db.execute(sql: SchemaMigrations.render(statement, for: .sqlite)) }
                try db.execute(sql: "INSERT INTO nimbus_migrations (id, applied_at) VALUES (?, ?)", arguments: [migration.id, Date().millis])
            }
        }
    }

    private static let writes = StoreMetrics.transaction("sqlite", kind: "write")
    private static let reads = StoreMetrics.transaction("sqlite", kind: "read")

    func write<T: Sendable>(_ body: @escaping @Sendable (any SQLTransaction) throws -> T) async throws -> T {
        let start = ContinuousClock.now
        defer { Self.writes.recordNanoseconds((ContinuousClock.now - start).nanoseconds) }
        return try await pool.write { db in try body(Transaction(db: db)) }
    }

    func read<T: Sendable>(_ body: @escaping @Sendable (any SQLTransaction) throws -> T) async throws -> T {
        let start = ContinuousClock.now
        defer { Self.reads.recordNanoseconds((ContinuousClock.now - start).nanoseconds) }
        return try await pool.read { db in try body(Transaction(db: db)) }
    }

    func close() async {}

    struct Transaction: SQLTransaction {
        let db: Database

        @discardableResult
        func execute(_ sql: String, _ arguments: [any SQLArgument]) throws -> Int {
            try db.cachedStatement(sql: sql).execute(arguments: Self.arguments(arguments))
            return db.changesCount
        }

        func perform(_ sql: String, _ arguments: [any SQLArgument]) throws {
            try db.cachedStatement(sql: sql).execute(arguments: Self.arguments(arguments))
        }

        func fetchAll(_ sql: String, _ arguments: [any SQLArgument]) throws -> [SQLRow] {
            let statement = try db.cachedStatement(sql: sql)
            let columns = SQLRow.Columns(statement.columnNames)
            var rows: [SQLRow] = []
            let cursor = try Row.fetchCursor(statement, arguments: Self.arguments(arguments))
            while let row = try cursor.next() {
                rows.append(SQLRow(columns: columns, values: row.databaseValues.map(Self.value)))
            }
            return rows
        }

        func savepoint<T>(_ body: () throws -> T) throws -> T {
            var result: T?
            try db.inSavepoint {
                result = try body()
                return .commit
            }
            guard let result else { throw DriveError.internalError("A savepoint finished without a result.") }
            return result
        }

        func lockUser(_ userId: String) throws {}

        func preferIndexOrder() throws {}

        func announce(userId: String, seq: Int64) throws {}

        static func arguments(_ arguments: [any SQLArgument]) -> StatementArguments {
            // As optional existentials: GRDB's initializer for a sequence of one concrete type maps it with a key path,
            // which the runtime builds anew on every call (a few % of the server's CPU in a big upload's commit).
            StatementArguments(arguments.map { argument -> (any DatabaseValueConvertible)? in
                switch argument.sqlValue {
                case .null: return nil
                case .integer(let value): return value
                case .text(let value): return value
                case .blob(let value): return Data(value)
                }
            })
        }

        static func value(_ value: DatabaseValue) -> SQLValue {
            switch value.storage {
            case .null: return .null
            case .int64(let value): return .integer(value)
            case .double(let value): return .integer(Int64(value))
            case .string(let value): return .text(value)
            case .blob(let data): return .blob([UInt8](data))
            }
        }
    }
}
