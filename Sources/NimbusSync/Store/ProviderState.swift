import Foundation
import GRDB
import NimbusAPI

/// The provider's small state (resumable sessions) and the device's block index, in the engine's database.
final class DatabaseStateStore: ProviderStateStore, BlockIndexStore, @unchecked Sendable {
    let pool: DatabasePool

    init(_ store: SyncStore) { pool = store.database.pool }

    func value(for key: String) throws -> String? {
        try pool.read { db in
            let stored = try String.fetchOne(db, sql: "SELECT value FROM provider_state WHERE key = ?", arguments: [db.storedKey(key)])
            return try db.storeCipher.map { cipher in try stored.map { try cipher.openText($0) } } ?? stored
        }
    }

    func setValue(_ value: String?, for key: String) throws { try setValues([key: value]) }

    func values(withPrefix prefix: String) throws -> [String: String]? {
        try pool.read { db in
            let rows = try Row.fetchAll(
                db, sql: "SELECT key, value FROM provider_state WHERE key >= ? AND key < ?", arguments: [prefix, prefix + "\u{10FFFF}"])
            let cipher = db.storeCipher
            return Dictionary(try rows.map { (try db.openedKey($0[0]), try cipher?.openText($0[1]) ?? $0[1]) }, uniquingKeysWith: { $1 })
        }
    }

    func setBlocks(_ blocks: [BlockManifest.Block], of fileId: String, revision: String) throws {
        try pool.write { db in
            let fileId = db.storedId(fileId)
            try db.execute(sql: "DELETE FROM block_index WHERE file_id = ?", arguments: [fileId])
            let insert = try db.cachedStatement(
                sql: "INSERT INTO block_index (file_id, position, revision, hash, offset, size) VALUES (?, ?, ?, ?, ?, ?)")
            // All or nothing: positions name the server's blocks by index (a base revision's runs).
            let hashes = blocks.compactMap { [UInt8](hex: $0.hash).map { Data($0) } }
            guard hashes.count == blocks.count else { return }
            var offset: Int64 = 0
            for (position, (block, hash)) in zip(blocks, hashes).enumerated() {
                try insert.execute(arguments: [fileId, position, revision, hash, offset, block.size])
                offset += block.size
            }
        }
    }

    func blocks(of fileId: String) throws -> (revision: String, blocks: [BlockManifest.Block])? {
        try pool.read { db in
            let rows = try Row.fetchAll(
                db, sql: "SELECT revision, hash, size FROM block_index WHERE file_id = ? ORDER BY position", arguments: [db.storedId(fileId)])
            guard let revision = rows.first?[0] as String? else { return nil }
            return (revision, rows.map { BlockManifest.Block(hash: FileHasher.hex($0[1] as Data), size: $0[2]) })
        }
    }

    func locations(of hashes: Set<String>) throws -> [String: [BlockLocation]] {
        try pool.read { db in
            var found: [String: [BlockLocation]] = [:]
            let statement = try db.cachedStatement(sql: "SELECT file_id, offset, size FROM block_index WHERE hash = ? LIMIT 4")
            for hash in hashes {
                guard let key = [UInt8](hex: hash).map({ Data($0) }) else { continue }
                let rows = try Row.fetchAll(statement, arguments: [key])
                if !rows.isEmpty { found[hash] = try rows.map { BlockLocation(fileId: try db.openedId($0[0]), offset: $0[1], size: $0[2]) } }
            }
            return found
        }
    }

    func setValues(_ values: [String: String?]) throws {
        try pool.write { db in
            let cipher = db.storeCipher
            for (key, value) in values {
                if let value {
                    try db.execute(
                        sql: "INSERT INTO provider_state (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                        arguments: [db.storedKey(key), cipher?.sealText(value) ?? value])
                } else {
                    try db.execute(sql: "DELETE FROM provider_state WHERE key = ?", arguments: [db.storedKey(key)])
                }
            }
        }
    }
}
