import Foundation
import NimbusAPI

/// A value bound to, or read from, a SQL statement: the four storage classes both SQLite and PostgreSQL
/// agree on. Booleans are integers 0/1 (the schema's `is_folder` is an integer in both).
enum SQLValue: Sendable, Hashable {
    case null
    case integer(Int64)
    case text(String)
    case blob([UInt8])
}

/// What a Swift value becomes as a statement argument.
protocol SQLArgument: Sendable {
    var sqlValue: SQLValue { get }
}

extension Int64: SQLArgument { var sqlValue: SQLValue { .integer(self) } }
extension Int: SQLArgument { var sqlValue: SQLValue { .integer(Int64(self)) } }
extension String: SQLArgument { var sqlValue: SQLValue { .text(self) } }
extension Bool: SQLArgument { var sqlValue: SQLValue { .integer(self ? 1 : 0) } }
extension Array: SQLArgument where Element == UInt8 { var sqlValue: SQLValue { .blob(self) } }
extension Optional: SQLArgument where Wrapped: SQLArgument { var sqlValue: SQLValue { self?.sqlValue ?? .null } }

/// What a column's value can be read as.
protocol SQLColumn {
    init?(sqlValue: SQLValue)
}

extension Int64: SQLColumn {
    init?(sqlValue: SQLValue) {
        guard case .integer(let value) = sqlValue else { return nil }
        self = value
    }
}

extension Int: SQLColumn {
    init?(sqlValue: SQLValue) {
        guard case .integer(let value) = sqlValue else { return nil }
        self = Int(value)
    }
}

extension Bool: SQLColumn {
    init?(sqlValue: SQLValue) {
        guard case .integer(let value) = sqlValue else { return nil }
        self = value != 0
    }
}

extension String: SQLColumn {
    init?(sqlValue: SQLValue) {
        guard case .text(let value) = sqlValue else { return nil }
        self = value
    }
}

extension Array: SQLColumn where Element == UInt8 {
    init?(sqlValue: SQLValue) {
        guard case .blob(let value) = sqlValue else { return nil }
        self = value
    }
}

extension Optional: SQLColumn where Wrapped: SQLColumn {
    init?(sqlValue: SQLValue) {
        if case .null = sqlValue {
            self = .none
        } else if let value = Wrapped(sqlValue: sqlValue) {
            self = .some(value)
        } else {
            return nil
        }
    }
}

/// One result row: values by column name.
struct SQLRow: Sendable {
    /// Column name → index, shared by every row of one result.
    final class Columns: Sendable {
        let indexes: [String: Int]
        init(_ names: [String]) {
            var indexes: [String: Int] = [:]
            for (index, name) in names.enumerated() where indexes[name] == nil { indexes[name] = index }
            self.indexes = indexes
        }
    }

    let columns: Columns
    let values: [SQLValue]

    /// The column's value as `T`; a missing column or a value of another type is a ``DriveError/internalError(_:)``.
    func get<T: SQLColumn>(_ name: String, as type: T.Type = T.self) throws -> T {
        guard let index = columns.indexes[name] else { throw DriveError.internalError("The database answered no column '\(name)'.") }
        guard let value = T(sqlValue: values[index]) else {
            throw DriveError.internalError("The database's column '\(name)' holds \(values[index]), not a \(T.self).")
        }
        return value
    }

    /// Whether the result has a column `name` (a query that joins it in or not).
    func has(_ name: String) -> Bool { columns.indexes[name] != nil }

    /// The first column's value (for `SELECT COUNT(*)` and the like).
    func first<T: SQLColumn>(as type: T.Type = T.self) throws -> T {
        guard let value = values.first, let decoded = T(sqlValue: value) else {
            throw DriveError.internalError("The database answered \(values.first.map { "\($0)" } ?? "no column"), not a \(T.self).")
        }
        return decoded
    }
}

/// One transaction (or one read snapshot) of a ``SQLDatabase``. Statements use `?` placeholders; a
/// PostgreSQL connection renumbers them. Calls block their thread: a database runs its bodies off the
/// cooperative pool.
protocol SQLTransaction {
    /// Runs a statement; returns how many rows it changed.
    @discardableResult
    func execute(_ sql: String, _ arguments: [any SQLArgument]) throws -> Int
    /// Runs a statement whose outcome the caller does not read. A remote database may send it without waiting for
    /// the answer (PostgreSQL: queued on the connection behind the statements before it); its error, if any, is
    /// thrown by the next statement that waits, by a savepoint's end or by the commit, and is never swallowed.
    func perform(_ sql: String, _ arguments: [any SQLArgument]) throws
    /// Inserts one row (whose outcome the caller does not read, as ``perform(_:_:)``). A ``CoalescingTransaction``
    /// holds consecutive inserts back and sends them as multi-row statements.
    func insert(into table: String, _ columns: [String], _ values: [any SQLArgument]) throws
    func fetchAll(_ sql: String, _ arguments: [any SQLArgument]) throws -> [SQLRow]
    /// Runs `body` in a savepoint: if it throws, what it did is rolled back and the error rethrown.
    func savepoint<T>(_ body: () throws -> T) throws -> T
    /// Serializes writers of one user's rows (PostgreSQL: a transaction-scoped advisory lock). With SQLite's
    /// single writer this is already so.
    func lockUser(_ userId: String) throws
    /// The rest of this transaction reads pages in index order rather than sorting whole sets (PostgreSQL: `SET
    /// LOCAL enable_sort = off`). A folder listing's page 50 walks 5,000 index entries; which way PostgreSQL's
    /// planner goes there flips with its statistics (2 ms against 25–100 ms a page), so listings say it.
    func preferIndexOrder() throws
    /// Tells other processes that `userId`'s change feed reached `seq` once this transaction commits
    /// (PostgreSQL: `pg_notify`). One process needs nothing: the store notifies its own listeners.
    func announce(userId: String, seq: Int64) throws
}

extension SQLTransaction {
    func insert(into table: String, _ columns: [String], _ values: [any SQLArgument]) throws {
        try perform(CoalescingTransaction.insertSQL(table, columns, rows: 1), values)
    }

    func fetchOne(_ sql: String, _ arguments: [any SQLArgument]) throws -> SQLRow? {
        try fetchAll(sql, arguments).first
    }

    /// The first column of the first row, or `nil` when there is no row (or it holds NULL).
    func value<T: SQLColumn>(_ sql: String, _ arguments: [any SQLArgument], as type: T.Type = T.self) throws -> T? {
        guard let row = try fetchOne(sql, arguments) else { return nil }
        return try row.first(as: T?.self) ?? nil
    }

    func values<T: SQLColumn>(_ sql: String, _ arguments: [any SQLArgument], as type: T.Type = T.self) throws -> [T] {
        try fetchAll(sql, arguments).map { try $0.first(as: T.self) }
    }
}

/// A SQL database the metadata store runs on: SQLite through GRDB (embedded) or PostgreSQL (shared by replicas).
///
/// `write` runs its body as one transaction, retrying it from the start when the database reports a
/// serialization failure (so a body must do nothing outside the transaction); `read` sees one snapshot.
protocol SQLDatabase: Sendable {
    /// Which SQL it speaks, where the two differ (the search index).
    var dialect: SchemaMigrations.Dialect { get }
    func write<T: Sendable>(_ body: @escaping @Sendable (any SQLTransaction) throws -> T) async throws -> T
    func read<T: Sendable>(_ body: @escaping @Sendable (any SQLTransaction) throws -> T) async throws -> T
    /// Lets go of connections and threads (a server that stops; tests that start many).
    func close() async
}
