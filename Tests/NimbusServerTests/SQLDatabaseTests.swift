import Foundation
import Logging
import NIOConcurrencyHelpers
import NimbusTestSupport
import Testing

@testable import NimbusServer

/// The ``SQLDatabase`` contract the store relies on, against SQLite and a real PostgreSQL: a statement sent without
/// waiting for its answer (``SQLTransaction/perform(_:_:)``, pipelined on PostgreSQL) still fails its transaction,
/// inside a savepoint or at the very end, and what it wrote is seen by the statements after it.
@Suite("SQLDatabase contract", .disabled(if: TestServices.scaledOut, "runs both databases itself; run once"))
struct SQLDatabaseTests {
    enum Backend: String, CaseIterable, Sendable { case sqlite, postgres }

    struct Refused: Error {}

    static func open(_ backend: Backend) async throws -> any SQLDatabase {
        switch backend {
        case .sqlite:
            let folder = FileManager.default.temporaryDirectory.appending(path: "nimbus-sqldb-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            return try SQLiteDatabase(path: folder.appending(path: "t.sqlite").path)
        case .postgres:
            return try await PostgresDatabase.open(
                PostgresDatabase.Location.parse(try TestServices.postgresURL(pool: 2)), logger: Logger(label: "test"))
        }
    }

    static func count(_ database: any SQLDatabase) async throws -> Int {
        try await database.read { db in try db.value("SELECT COUNT(*) FROM t", [], as: Int.self) ?? -1 }
    }

    @Test("a failed statement nobody waited for fails the transaction, even when a savepoint's body throws after it", arguments: Backend.allCases)
    func pipelinedFailure(_ backend: Backend) async throws {
        let database = try await Self.open(backend)
        try await database.write { db in try db.perform("CREATE TABLE t (id INTEGER PRIMARY KEY)", []) }
        // The store catches its own rule's error from a batch entry's savepoint and goes on with the next entry;
        // the savepoint must answer the database's error instead, so the transaction fails rather than commits.
        let savepointThrew = NIOLockedValueBox<String>("nothing")
        await #expect(throws: (any Error).self) {
            try await database.write { db in
                try db.perform("INSERT INTO t (id) VALUES (?)", [1])
                do {
                    _ = try db.savepoint {
                        try db.perform("INSERT INTO t (id) VALUES (?)", [1])  // a duplicate key
                        throw Refused()
                    }
                } catch {
                    savepointThrew.withLockedValue { $0 = "\(type(of: error))" }
                    if error is Refused { return }
                    throw error
                }
            }
        }
        #expect(savepointThrew.withLockedValue { $0 } != "Refused")
        let error = await #expect(throws: (any Error).self) {
            try await database.write { db in
                try db.perform("INSERT INTO t (id) VALUES (?)", [2])
                try db.perform("INSERT INTO t (id) VALUES (?)", [2])  // fails last, with nothing waited for after it
            }
        }
        #expect(!(error is Refused))
        #expect(try await Self.count(database) == 0, "neither transaction committed anything")
        // A savepoint whose body throws with no database error rolls back its part only.
        let seen = try await database.write { db -> Int in
            try db.perform("INSERT INTO t (id) VALUES (?)", [3])
            _ = try? db.savepoint { () throws -> Int in
                try db.perform("INSERT INTO t (id) VALUES (?)", [4])
                throw Refused()
            }
            try db.perform("INSERT INTO t (id) VALUES (?)", [5])
            return try db.value("SELECT COUNT(*) FROM t", [], as: Int.self) ?? -1
        }
        #expect(seen == 2, "a read sees the statements performed before it")
        #expect(try await database.read { db in try db.values("SELECT id FROM t ORDER BY id", [], as: Int.self) } == [3, 5])
        // A failure that someone swallowed (`try?`) stays the transaction's: one batch entry's failed statement, seen
        // and dropped by the next entry, must not let that entry's savepoint rollback undo the first entry (reported
        // as done) and then commit.
        await #expect(throws: (any Error).self) {
            try await database.write { db in
                _ = try db.savepoint {
                    try db.perform("INSERT INTO t (id) VALUES (?)", [30])
                    try db.perform("INSERT INTO t (id) VALUES (?)", [30])  // fails; nobody waits for it in this entry
                }
                do {
                    _ = try db.savepoint { () throws -> Int in
                        _ = try? db.fetchAll("SELECT 1", [])
                        throw Refused()
                    }
                } catch is Refused {}
            }
        }
        #expect(try await database.read { db in try db.values("SELECT id FROM t ORDER BY id", [], as: Int.self) } == [3, 5])
        await database.close()
    }
}
