/// A transaction that holds inserts back and sends each table's as one multi-row `INSERT` just before any other
/// statement (or ``flush()``), so a batch of 1,000 new files costs a few statements instead of thousands of round
/// trips. Nothing else changes order: every statement that is not an insert first sends all the inserts before it.
/// Inserts into different tables may reach the database in another order than they were made; the store's tables
/// have no constraints between one another that this could break.
///
/// Used by one thread, inside one transaction body; ``flush()`` before the body returns.
final class CoalescingTransaction: SQLTransaction {
    let base: any SQLTransaction
    /// Rows per statement: SQLite accepts 32,766 parameters, PostgreSQL 65,535.
    static let maxParameters = 30_000
    static let maxRows = 500

    private struct Pending {
        var table: String
        var columns: [String]
        var rows: [[any SQLArgument]] = []
    }

    /// Held inserts, one entry per table and column list, in the order of their first row.
    private var pending: [Pending] = []

    init(_ base: any SQLTransaction) {
        self.base = base
    }

    func insert(into table: String, _ columns: [String], _ values: [any SQLArgument]) throws {
        if let index = pending.firstIndex(where: { $0.table == table && $0.columns == columns }) {
            pending[index].rows.append(values)
            if pending[index].rows.count >= Self.rowsPerStatement(columns.count) { try flush() }
        } else {
            pending.append(Pending(table: table, columns: columns, rows: [values]))
        }
    }

    /// Sends every held insert.
    func flush() throws {
        let held = pending
        pending.removeAll()
        for insert in held {
            var start = 0
            let step = Self.rowsPerStatement(insert.columns.count)
            while start < insert.rows.count {
                let rows = insert.rows[start..<min(start + step, insert.rows.count)]
                try base.perform(Self.insertSQL(insert.table, insert.columns, rows: rows.count), rows.flatMap { $0 })
                start += step
            }
        }
    }

    @discardableResult
    func execute(_ sql: String, _ arguments: [any SQLArgument]) throws -> Int {
        try flush()
        return try base.execute(sql, arguments)
    }

    func perform(_ sql: String, _ arguments: [any SQLArgument]) throws {
        try flush()
        try base.perform(sql, arguments)
    }

    func fetchAll(_ sql: String, _ arguments: [any SQLArgument]) throws -> [SQLRow] {
        try flush()
        return try base.fetchAll(sql, arguments)
    }

    func savepoint<T>(_ body: () throws -> T) throws -> T {
        try flush()
        do {
            return try base.savepoint {
                let value = try body()
                try flush()
                return value
            }
        } catch {
            pending.removeAll()  // rows the rolled-back part held back go with it
            throw error
        }
    }

    func lockUser(_ userId: String) throws {
        try flush()
        try base.lockUser(userId)
    }

    func preferIndexOrder() throws {
        try flush()
        try base.preferIndexOrder()
    }

    func announce(userId: String, seq: Int64) throws {
        try flush()
        try base.announce(userId: userId, seq: seq)
    }

    static func rowsPerStatement(_ columns: Int) -> Int {
        max(1, min(maxRows, maxParameters / max(1, columns)))
    }

    /// `INSERT INTO table (a, b) VALUES (?, ?), (?, ?), …` for `rows` rows.
    static func insertSQL(_ table: String, _ columns: [String], rows: Int) -> String {
        let row = "(" + sqlPlaceholders(columns.count) + ")"
        return "INSERT INTO \(table) (\(columns.joined(separator: ", "))) VALUES " + Array(repeating: row, count: rows).joined(separator: ", ")
    }
}

/// `?, ?, …`: `count` statement placeholders.
func sqlPlaceholders(_ count: Int) -> String {
    Array(repeating: "?", count: count).joined(separator: ", ")
}
