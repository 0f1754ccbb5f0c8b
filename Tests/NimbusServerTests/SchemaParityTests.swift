import Foundation
import GRDB
import Logging
@testable import NimbusServer
import NimbusTestSupport
import Testing

/// The one schema (``SchemaMigrations``) makes the same tables, columns, keys and indexes on SQLite and on
/// PostgreSQL, and so does each dialect's frozen history from before it (a database made then and upgraded) — compared
/// table by table, column by column (by type class: integer, text, bytes), index by index.
@Suite("One schema, two databases")
struct SchemaParityTests {
    /// What the comparison looks at, dialect-neutral.
    struct Shape: Equatable, CustomStringConvertible {
        /// table → column → "type NOT NULL?"
        var columns: [String: [String: String]] = [:]
        /// table → primary key and unique column lists
        var keys: [String: Set<String>] = [:]
        /// index name → "table(columns) unique? partial?"
        var indexes: [String: String] = [:]

        var description: String {
            columns.keys.sorted().map { table in
                "\(table): \(columns[table]!.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")); keys \(keys[table, default: []].sorted())"
            }.joined(separator: "\n") + "\n" + indexes.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }.joined(separator: "\n")
        }
    }

    static let bookkeeping: Set<String> = ["sqlite_sequence", "grdb_migrations", "nimbus_migrations"]

    static func typeClass(_ declared: String) -> String {
        let type = declared.lowercased()
        if type.contains("int") || type.contains("serial") { return "int" }
        if type.contains("blob") || type.contains("bytea") { return "bytes" }
        return "text"
    }

    static func sqliteShape(_ path: String) throws -> Shape {
        let queue = try DatabaseQueue(path: path)
        return try queue.read { db in
            var shape = Shape()
            // The search index is each dialect's own (SQLite's FTS5 tables here, a pg_trgm GIN index there).
            for table in try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table'")
            where !bookkeeping.contains(table) && !table.hasPrefix("files_search") {
                var primary: [(Int, String)] = []
                for row in try Row.fetchAll(db, sql: "PRAGMA table_info(\(table))") {
                    let name: String = row["name"]
                    // SQLite lets an INTEGER PRIMARY KEY be NULL in its metadata; it never is.
                    let pk: Int = row["pk"]
                    let notNull = (row["notnull"] as Int) == 1 || pk > 0
                    shape.columns[table, default: [:]][name] = typeClass(row["type"]) + (notNull ? " not null" : "")
                    if pk > 0 { primary.append((pk, name)) }
                }
                if !primary.isEmpty { shape.keys[table, default: []].insert("pk(" + primary.sorted { $0.0 < $1.0 }.map(\.1).joined(separator: ",") + ")") }
                for index in try Row.fetchAll(db, sql: "PRAGMA index_list(\(table))") {
                    let name: String = index["name"]
                    let columns = try Row.fetchAll(db, sql: "PRAGMA index_info(\(name))").sorted { ($0["seqno"] as Int) < ($1["seqno"] as Int) }
                        .map { $0["name"] as String }.joined(separator: ",")
                    let origin: String = index["origin"]
                    if origin == "u" { shape.keys[table, default: []].insert("unique(\(columns))") }
                    if origin == "c" {
                        shape.indexes[name] = "\(table)(\(columns))\((index["unique"] as Int) == 1 ? " unique" : "")\((index["partial"] as Int) == 1 ? " partial" : "")"
                    }
                }
            }
            return shape
        }
    }

    static func postgresShape(_ database: PostgresDatabase, schema: String) async throws -> Shape {
        try await database.read { db in
            var shape = Shape()
            for row in try db.fetchAll(
                "SELECT table_name, column_name, data_type, is_nullable FROM information_schema.columns WHERE table_schema = ?", [schema])
            {
                let table: String = try row.get("table_name")
                guard !bookkeeping.contains(table) else { continue }
                let notNull = try row.get("is_nullable", as: String.self) == "NO"
                shape.columns[table, default: [:]][try row.get("column_name")] = typeClass(try row.get("data_type")) + (notNull ? " not null" : "")
            }
            let constraints = try db.fetchAll(
                """
                SELECT c.conname, c.contype::text AS kind, t.relname AS table_name,
                       (SELECT string_agg(a.attname, ',' ORDER BY k.ord) FROM unnest(c.conkey) WITH ORDINALITY AS k(num, ord)
                        JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.num) AS columns
                FROM pg_constraint c JOIN pg_class t ON t.oid = c.conrelid JOIN pg_namespace n ON n.oid = t.relnamespace
                WHERE n.nspname = ? AND c.contype IN ('p', 'u')
                """, [schema])
            var constraintNames: Set<String> = []
            for row in constraints {
                let table: String = try row.get("table_name")
                guard !bookkeeping.contains(table) else { continue }
                constraintNames.insert(try row.get("conname"))
                let kind = try row.get("kind", as: String.self) == "p" ? "pk" : "unique"
                shape.keys[table, default: []].insert("\(kind)(\(try row.get("columns", as: String.self)))")
            }
            for row in try db.fetchAll("SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = ?", [schema]) {
                let table: String = try row.get("tablename")
                let name: String = try row.get("indexname")
                guard !bookkeeping.contains(table), !constraintNames.contains(name) else { continue }
                let definition: String = try row.get("indexdef")
                guard let open = definition.range(of: "USING btree ("), let close = definition[open.upperBound...].firstIndex(of: ")") else { continue }
                let columns = definition[open.upperBound..<close].split(separator: ",").map {
                    $0.trimmingCharacters(in: .whitespaces).replacingOccurrences(of: " DESC", with: "").replacingOccurrences(of: "\"", with: "")
                }.joined(separator: ",")
                shape.indexes[name] = "\(table)(\(columns))\(definition.hasPrefix("CREATE UNIQUE") ? " unique" : "")\(definition.contains(" WHERE ") ? " partial" : "")"
            }
            return shape
        }
    }

    @Test("the one schema on SQLite and on PostgreSQL, and each dialect's older history brought up to it: the same tables, columns, keys and indexes")
    func parity() async throws {
        let folder = FileManager.default.temporaryDirectory.appending(path: "nimbus-schema-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }

        // SQLite, new: the one list.
        let fresh = folder.appending(path: "fresh.sqlite").path
        _ = try SQLiteDatabase(path: fresh)
        let sqlite = try Self.sqliteShape(fresh)
        #expect(sqlite.columns.count >= 19, "\(sqlite.columns.keys.sorted())")

        // SQLite, made with the history from before the one list, then opened (upgraded) now.
        let old = folder.appending(path: "legacy.sqlite").path
        try LegacySQLiteSchema.migrator.migrate(try DatabaseQueue(path: old))
        _ = try SQLiteDatabase(path: old)
        let sqliteLegacy = try Self.sqliteShape(old)
        #expect(sqliteLegacy == sqlite, "legacy SQLite differs:\n\(sqliteLegacy)\n--- one list:\n\(sqlite)")

        // PostgreSQL, new.
        let url = try TestServices.postgresURL()
        let location = try PostgresDatabase.Location.parse(url)
        let postgres = try await PostgresDatabase.open(location, logger: Logger(label: "schema-parity"))
        let pg = try await Self.postgresShape(postgres, schema: location.schema)
        #expect(pg == sqlite, "PostgreSQL differs from SQLite:\n\(pg)\n--- SQLite:\n\(sqlite)")

        // PostgreSQL, made with its history from before the one list, then opened (upgraded) now.
        let legacySchema = location.schema + "_legacy"
        try await postgres.write { db in
            try db.execute("CREATE SCHEMA \"\(legacySchema)\"", [])
            try db.execute("SET LOCAL search_path TO \"\(legacySchema)\"", [])
            try db.execute("CREATE TABLE nimbus_migrations (id TEXT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())", [])
            for migration in LegacyPostgresSchema.migrations {
                for statement in migration.sql { try db.execute(statement, []) }
                try db.execute("INSERT INTO nimbus_migrations (id) VALUES (?)", [migration.id])
            }
        }
        var legacyLocation = location
        legacyLocation.schema = legacySchema
        let upgraded = try await PostgresDatabase.open(legacyLocation, logger: Logger(label: "schema-parity"))
        let pgLegacy = try await Self.postgresShape(upgraded, schema: legacySchema)
        #expect(pgLegacy == sqlite, "legacy PostgreSQL differs:\n\(pgLegacy)\n--- SQLite:\n\(sqlite)")
        let recorded = try await upgraded.read { db in try db.values("SELECT id FROM nimbus_migrations", [], as: String.self) }
        #expect(recorded.contains(SchemaMigrations.base), "an upgraded database counts as \(SchemaMigrations.base)")
        await upgraded.close()
        await postgres.close()
    }
}
