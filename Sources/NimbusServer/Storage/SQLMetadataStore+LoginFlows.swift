import Foundation
import NimbusAPI

/// Sign-ins of Nextcloud's apps in progress (``LoginFlow``).
extension SQLMetadataStore {
    func createLoginFlow(_ flow: LoginFlowRecord) async throws {
        try await write { db, _ in
            try db.perform(
                """
                INSERT INTO login_flows (login_token, poll_hash, client_name, created_at, expires_at) VALUES (?, ?, ?, ?, ?)
                """, [flow.loginToken, flow.pollHash, flow.clientName, flow.createdAt.millis, flow.expiresAt.millis])
        }
    }

    func loginFlow(loginToken: String, now: Date) async throws -> LoginFlowRecord? {
        try await database.read { db in
            try db.fetchOne("SELECT * FROM login_flows WHERE login_token = ? AND expires_at > ?", [loginToken, now.millis]).map(Self.loginFlow)
        }
    }

    func signInLoginFlow(loginToken: String, userId: String, grantHash: String, now: Date) async throws -> Bool {
        try await write { db, _ in
            try db.execute(
                "UPDATE login_flows SET user_id = ?, grant_hash = ? WHERE login_token = ? AND expires_at > ? AND sealed IS NULL",
                [userId, grantHash, loginToken, now.millis]) > 0
        }
    }

    func grantLoginFlow(
        loginToken: String, grantHash: String, label: String, passwordHash: String, sealed: [UInt8]?, loginName: String, now: Date
    ) async throws -> AppPasswordRecord? {
        guard let flow = try await loginFlow(loginToken: loginToken, now: now), let userId = flow.userId else { return nil }
        return try await write(user: userId) { db, _ in
            // Read again inside the transaction: granted once, by the page that signed in.
            guard let row = try db.fetchOne("SELECT * FROM login_flows WHERE login_token = ? AND expires_at > ?", [loginToken, now.millis]) else { return nil }
            let current = try Self.loginFlow(row)
            guard current.userId == userId, current.grantHash == grantHash, current.sealed == nil else { return nil }
            let record = try Self.insertAppPassword(db, userId: userId, label: label, passwordHash: passwordHash, now: now)
            if let sealed {
                try db.perform(
                    "UPDATE login_flows SET sealed = ?, login_name = ?, grant_hash = NULL WHERE login_token = ?", [sealed, loginName, loginToken])
            } else {
                try db.perform("DELETE FROM login_flows WHERE login_token = ?", [loginToken])
            }
            return record
        }
    }

    func takeLoginFlow(pollHash: String, now: Date) async throws -> LoginFlowRecord? {
        try await write { db, _ in
            guard let row = try db.fetchOne(
                "SELECT * FROM login_flows WHERE poll_hash = ? AND expires_at > ? AND sealed IS NOT NULL", [pollHash, now.millis])
            else { return nil }
            let flow = try Self.loginFlow(row)
            // Only the transaction that deletes the row hands the result out.
            guard try db.execute("DELETE FROM login_flows WHERE login_token = ?", [flow.loginToken]) > 0 else { return nil }
            return flow
        }
    }

    func pruneLoginFlows(now: Date) async throws -> Int {
        try await write { db, _ in try db.execute("DELETE FROM login_flows WHERE expires_at <= ?", [now.millis]) }
    }

    static func loginFlow(_ row: SQLRow) throws -> LoginFlowRecord {
        LoginFlowRecord(
            loginToken: try row.get("login_token"), pollHash: try row.get("poll_hash"), clientName: try row.get("client_name"),
            userId: try row.get("user_id"), grantHash: try row.get("grant_hash"), sealed: try row.get("sealed"),
            loginName: try row.get("login_name"), createdAt: Date(millis: try row.get("created_at")),
            expiresAt: Date(millis: try row.get("expires_at")))
    }
}
