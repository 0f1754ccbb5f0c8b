import Foundation
import Logging
import Metrics
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import PostgresNIO

/// ``SQLDatabase`` on PostgreSQL, shared by any number of `nimbus serve` replicas (`--database postgres://…`).
///
/// A fixed pool of connections, each running one transaction at a time on a thread of its own pool (the store's
/// transactions are synchronous code that waits on each statement). Writes run `READ COMMITTED`; the store
/// serializes one user's writers with a transaction-scoped advisory lock (``SQLTransaction/lockUser(_:)``), which
/// keeps the schema shardable by user (Citus). A transaction that fails on a serialization failure, a deadlock or
/// a unique violation (two replicas creating the same row at once) is rolled back and run again; the next attempt
/// sees the other's row and answers as one replica would.
final class PostgresDatabase: SQLDatabase {
    var dialect: SchemaMigrations.Dialect { .postgres }
    /// `postgres://USER[:PASSWORD]@HOST[:PORT]/DB[?schema=NAME&pool=N]`; the password may come from `PGPASSWORD`.
    struct Location: Sendable, Equatable {
        var host: String
        var port: Int
        var username: String
        var password: String?
        var database: String
        /// Tables live in this schema (`public` unless given): one database can hold several independent stores.
        var schema: String
        var poolSize: Int

        static func parse(_ text: String, environment: [String: String] = ProcessInfo.processInfo.environment) throws -> Location {
            guard let url = URLComponents(string: text), url.scheme == "postgres" || url.scheme == "postgresql", let host = url.host, !host.isEmpty
            else {
                throw DriveError.badRequest("--database must be postgres://USER@HOST:PORT/DATABASE, not '\(text)'.")
            }
            let database = url.path.hasPrefix("/") ? String(url.path.dropFirst()) : url.path
            let query = Dictionary((url.queryItems ?? []).map { ($0.name, $0.value ?? "") }, uniquingKeysWith: { $1 })
            let schema = query["schema"] ?? "public"
            guard schema.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "_" }), !schema.isEmpty else {
                throw DriveError.badRequest("--database: schema must be letters, digits and '_', not '\(schema)'.")
            }
            guard let poolSize = Int(query["pool"] ?? "8"), (1...256).contains(poolSize) else {
                throw DriveError.badRequest("--database: pool must be a number of connections from 1 to 256.")
            }
            return Location(
                host: host, port: url.port ?? 5432, username: url.user ?? environment["PGUSER"] ?? "postgres",
                password: url.password ?? environment["PGPASSWORD"], database: database.isEmpty ? (url.user ?? "postgres") : database,
                schema: schema, poolSize: poolSize)
        }

        var configuration: PostgresConnection.Configuration {
            PostgresConnection.Configuration(host: host, port: port, username: username, password: password, database: database, tls: .disable)
        }
    }

    let location: Location
    let logger: Logger
    let eventLoopGroup: any EventLoopGroup
    /// One thread per connection: a transaction holds its thread while it waits on the database.
    let threads: NIOThreadPool
    /// Open connections not in use; `nil` once ``close()`` ran (a connection coming back is then closed).
    private let idle = NIOLockedValueBox<[PostgresConnection]?>([])
    private let waiters = NIOLockedValueBox<[CheckedContinuation<Void, Never>]>([])
    private let available: NIOLockedValueBox<Int>
    private let nextID = NIOLockedValueBox(0)
    private let writes = StoreMetrics.transaction("postgres", kind: "write")
    private let reads = StoreMetrics.transaction("postgres", kind: "read")
    private let poolWait = StoreMetrics.poolWait("postgres")
    private let inUse = StoreMetrics.poolConnections("postgres", state: "in_use")
    private let retries = StoreMetrics.retries("postgres")
    private let failures = StoreMetrics.errors("postgres")

    private init(location: Location, logger: Logger, eventLoopGroup: any EventLoopGroup) {
        self.location = location
        self.logger = logger
        self.eventLoopGroup = eventLoopGroup
        self.threads = NIOThreadPool(numberOfThreads: location.poolSize)
        self.available = NIOLockedValueBox(location.poolSize)
        StoreMetrics.poolConnections("postgres", state: "size").record(location.poolSize)
        threads.start()
    }

    /// Connects, creates the schema if needed and brings it up to date (under an advisory lock, so replicas
    /// starting together migrate once).
    static func open(_ location: Location, logger: Logger, eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton) async throws
        -> PostgresDatabase
    {
        let database = PostgresDatabase(location: location, logger: logger, eventLoopGroup: eventLoopGroup)
        try await database.write { db in try PostgresSchema.migrate(db, schema: location.schema) }
        return database
    }

    func write<T: Sendable>(_ body: @escaping @Sendable (any SQLTransaction) throws -> T) async throws -> T {
        let start = ContinuousClock.now
        defer { writes.recordNanoseconds((ContinuousClock.now - start).nanoseconds) }
        return try await run(begin: "BEGIN", body)
    }

    func read<T: Sendable>(_ body: @escaping @Sendable (any SQLTransaction) throws -> T) async throws -> T {
        let start = ContinuousClock.now
        defer { reads.recordNanoseconds((ContinuousClock.now - start).nanoseconds) }
        return try await run(begin: "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", readOnly: true, body)
    }

    /// Closes every idle connection (tests; a server exits with its process).
    func close() async {
        let connections = idle.withLockedValue { connections in
            defer { connections = nil }
            return connections ?? []
        }
        for connection in connections { try? await connection.close() }
        try? await threads.shutdownGracefully()
    }

    /// Puts a connection back in the pool, or closes it if the pool is closed or the connection broken.
    private func giveBack(_ connection: PostgresConnection) async {
        guard !connection.isClosed else {
            try? await connection.close()
            return
        }
        let kept = idle.withLockedValue { connections -> Bool in
            guard connections != nil else { return false }
            connections?.append(connection)
            return true
        }
        if !kept { try? await connection.close() }
    }

    private func run<T: Sendable>(begin: String, readOnly: Bool = false, _ body: @escaping @Sendable (any SQLTransaction) throws -> T) async throws -> T {
        let waitStart = ContinuousClock.now
        await acquireSlot()
        poolWait.recordNanoseconds((ContinuousClock.now - waitStart).nanoseconds)
        inUse.record(location.poolSize - available.withLockedValue { $0 })
        defer {
            releaseSlot()
            inUse.record(location.poolSize - available.withLockedValue { $0 })
        }
        let connection = try await connection()
        do {
            let result = try await threads.runIfActive { [connection, logger, retries, failures] in
                var attempt = 0
                while true {
                    attempt += 1
                    let transaction = Transaction(connection: connection, logger: logger)
                    do {
                        try transaction.perform(begin, [])
                        let value = try body(transaction)
                        // A read-only snapshot has nothing to make durable: its end is sent, not waited for (the
                        // connection's next transaction queues behind it).
                        if readOnly { try transaction.perform("COMMIT", []) } else { try transaction.commit() }
                        return value
                    } catch {
                        transaction.abandonPending()
                        _ = try? transaction.execute("ROLLBACK", [])
                        if attempt < 10, Self.isTransient(error) {
                            retries.increment()
                            continue
                        }
                        if !(error is DriveError) { failures.increment() }
                        throw Self.mapped(error)
                    }
                }
            }
            await giveBack(connection)
            return result
        } catch {
            await giveBack(connection)
            throw error
        }
    }

    private func acquireSlot() async {
        let granted = available.withLockedValue { count -> Bool in
            guard count > 0 else { return false }
            count -= 1
            return true
        }
        if granted { return }
        await withCheckedContinuation { continuation in
            let grantedNow = available.withLockedValue { count -> Bool in
                if count > 0 {
                    count -= 1
                    return true
                }
                waiters.withLockedValue { $0.append(continuation) }
                return false
            }
            if grantedNow { continuation.resume() }
        }
    }

    private func releaseSlot() {
        let next = available.withLockedValue { count -> CheckedContinuation<Void, Never>? in
            if let waiter = waiters.withLockedValue({ $0.isEmpty ? nil : $0.removeFirst() }) { return waiter }
            count += 1
            return nil
        }
        next?.resume()
    }

    /// An idle open connection, or a new one (search path set to the store's schema).
    private func connection() async throws -> PostgresConnection {
        while let connection = idle.withLockedValue({ $0?.popLast() }) {
            if !connection.isClosed { return connection }
            try? await connection.close()
        }
        let id = nextID.withLockedValue { value in
            value += 1
            return value
        }
        do {
            let connection = try await PostgresConnection.connect(
                on: eventLoopGroup.next(), configuration: location.configuration, id: id, logger: logger)
            do {
                _ = try await connection.query(PostgresQuery(unsafeSQL: "SET search_path TO \"\(location.schema)\""), logger: logger).get()
                // The planner's default (4) prices a random page read as a spinning disk's; with the store's hot rows in
                // memory or on SSD it then sorts a whole 10,000-entry folder rather than walk the listing index
                // (25 ms against 2 ms a page). 1.1 is the usual SSD setting.
                _ = try await connection.query("SET random_page_cost = 1.1", logger: logger).get()
            } catch {
                try? await connection.close()
                throw error
            }
            return connection
        } catch {
            throw DriveError.unavailable("The database at \(location.host):\(location.port) cannot be reached (\(Self.describe(error))).")
        }
    }

    /// Serialization failures, deadlocks and unique violations (a concurrent insert of the same key): run again.
    static func isTransient(_ error: any Error) -> Bool {
        guard let error = error as? PSQLError, let state = error.serverInfo?[.sqlState] else { return false }
        return state == "40001" || state == "40P01" || state == "23505"
    }

    static func mapped(_ error: any Error) -> any Error {
        if error is DriveError { return error }
        if let error = error as? PSQLError, error.serverInfo == nil {
            return DriveError.unavailable("The database cannot be reached (\(describe(error))).")
        }
        return DriveError.internalError("The database failed: \(describe(error))")
    }

    static func describe(_ error: any Error) -> String {
        if let error = error as? PSQLError {
            if let message = error.serverInfo?[.message] { return message }
            return "\(error.code)"
        }
        return "\(error)"
    }

    struct Transaction: SQLTransaction {
        let connection: PostgresConnection
        let logger: Logger
        /// Statements sent by ``perform(_:_:)`` whose answers nobody has looked at yet, oldest first.
        private let pending = Pending()

        init(connection: PostgresConnection, logger: Logger) {
            self.connection = connection
            self.logger = logger
        }

        final class Pending: @unchecked Sendable {  // used by one thread at a time: the transaction's
            var futures: [EventLoopFuture<PostgresQueryResult>] = []
            /// The first error a sent statement answered. PostgreSQL has aborted the transaction then; every later
            /// call throws it again, so no caller can swallow it (`try?`) and go on to a savepoint rollback or a
            /// COMMIT that would hide it.
            var failure: (any Error)?
        }

        @discardableResult
        func execute(_ sql: String, _ arguments: [any SQLArgument]) throws -> Int {
            try run(sql, arguments).metadata.rows ?? 0
        }

        func perform(_ sql: String, _ arguments: [any SQLArgument]) throws {
            if let failure = pending.failure { throw failure }
            pending.futures.append(connection.query(Self.query(sql, arguments), logger: logger))
        }

        /// Commits once every statement sent before has answered without error (a failure that a later
        /// `ROLLBACK TO SAVEPOINT` recovered from must not be committed past).
        func commit() throws {
            try settle()
            try execute("COMMIT", [])
        }

        /// Forgets what ``perform(_:_:)`` sent (a transaction that failed: the rollback waits for the rest).
        func abandonPending() {
            pending.futures.removeAll()
            pending.failure = nil
        }

        func fetchAll(_ sql: String, _ arguments: [any SQLArgument]) throws -> [SQLRow] {
            let result = try run(sql, arguments)
            guard let first = result.rows.first else { return [] }
            let columns = SQLRow.Columns(first.map(\.columnName))
            return try result.rows.map { row in SQLRow(columns: columns, values: try row.map(Self.value)) }
        }

        func savepoint<T>(_ body: () throws -> T) throws -> T {
            try perform("SAVEPOINT nimbus_entry", [])
            do {
                let value = try body()
                try perform("RELEASE SAVEPOINT nimbus_entry", [])
                return value
            } catch {
                // A statement that failed inside is the transaction's failure, not the savepoint's to undo.
                try settle()
                try perform("ROLLBACK TO SAVEPOINT nimbus_entry", [])
                try perform("RELEASE SAVEPOINT nimbus_entry", [])
                throw error
            }
        }

        func lockUser(_ userId: String) throws {
            try perform("SELECT pg_advisory_xact_lock(hashtextextended(?, 0))", [userId])
        }

        func preferIndexOrder() throws {
            try perform("SET LOCAL enable_sort = off", [])
        }

        func announce(userId: String, seq: Int64) throws {
            try perform("SELECT pg_notify('nimbus_changes', ?)", ["\(userId) \(seq)"])
        }

        /// Waits for every statement ``perform(_:_:)`` sent; the first one that failed throws its error.
        private func settle() throws {
            if let failure = pending.failure { throw failure }
            let futures = pending.futures
            pending.futures.removeAll()
            do {
                for future in futures { _ = try future.wait() }
            } catch {
                pending.failure = error
                throw error
            }
        }

        private func run(_ sql: String, _ arguments: [any SQLArgument]) throws -> PostgresQueryResult {
            if let failure = pending.failure { throw failure }
            let answer = connection.query(Self.query(sql, arguments), logger: logger)
            // Statements sent before this one were answered first (one connection answers in order): an error
            // there is the cause of whatever this one says.
            try settle()
            do {
                return try answer.wait()
            } catch {
                pending.failure = error
                throw error
            }
        }

        private static func query(_ sql: String, _ arguments: [any SQLArgument]) -> PostgresQuery {
            var bindings = PostgresBindings(capacity: arguments.count)
            for argument in arguments {
                switch argument.sqlValue {
                case .null: bindings.appendNull()
                case .integer(let value): bindings.append(value)
                case .text(let value): bindings.append(value)
                case .blob(let value): bindings.append(ByteBuffer(bytes: value))
                }
            }
            return PostgresQuery(unsafeSQL: Self.numbered(sql), binds: bindings)
        }

        /// `?` placeholders as PostgreSQL's `$1, $2, …` (none of the store's statements has a `?` in a literal;
        /// quoted text is skipped anyway).
        static func numbered(_ sql: String) -> String {
            var result = ""
            result.reserveCapacity(sql.utf8.count + 16)
            var index = 0
            var quoted = false
            for character in sql {
                if character == "'" { quoted.toggle() }
                if character == "?" && !quoted {
                    index += 1
                    result += "$\(index)"
                } else {
                    result.append(character)
                }
            }
            return result
        }

        static func value(_ cell: PostgresCell) throws -> SQLValue {
            guard cell.bytes != nil else { return .null }
            switch cell.dataType {
            case .int2, .int4, .int8, .oid: return .integer(try cell.decode(Int64.self))
            case .bool: return .integer(try cell.decode(Bool.self) ? 1 : 0)
            case .bytea: return .blob(Array(buffer: try cell.decode(ByteBuffer.self)))
            default: return .text(try cell.decode(String.self))
            }
        }
    }
}
