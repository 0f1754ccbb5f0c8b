import Foundation
import NimbusAPI
@testable import NimbusServer
import Testing

/// The server's rules as pure functions (`Sources/NimbusServer/Policy/`, and the access decision): no database, no
/// server — what every route that needs them gets.
@Suite("Policy rules")
struct PolicyTests {
    static func item(_ id: String, owner: String = "alice", folder: Bool = false, trashed: Bool = false) -> FileRecord {
        FileRecord(
            id: id, userId: owner, parentId: "root-\(owner)", name: id, mimeType: folder ? folderMimeType : "text/plain", isFolder: folder, size: 0,
            checksum: nil, headRevisionId: folder ? nil : "r-\(id)", version: 1, trashRoot: trashed ? id : nil, trashedAt: nil,
            createdAt: Date(timeIntervalSince1970: 0), modifiedAt: Date(timeIntervalSince1970: 0))
    }

    @Test("quota: up to the limit is fine, one byte over is 507 quota_exceeded, no limit takes anything, nothing added passes even over it")
    func quota() throws {
        try QuotaRule.check(adding: 10, used: 90, limit: 100)
        try QuotaRule.check(adding: 1 << 40, used: 0, limit: nil)
        try QuotaRule.check(adding: 0, used: 150, limit: 100)
        #expect(throws: DriveError.self) { try QuotaRule.check(adding: 11, used: 90, limit: 100) }
        do {
            try QuotaRule.check(adding: 11, used: 90, limit: 100)
        } catch let error as DriveError {
            #expect(error.status.code == 507)
            #expect(error.body.error.code == APIErrorCode.quotaExceeded.rawValue)
        }
    }

    @Test("name clash: a free name, fail → 409 naming the holder, rename → a numbered name, replace a file with a file only, an item's own name")
    func nameClash() throws {
        let file = Self.item("report.pdf")
        let folder = Self.item("Work", folder: true)
        guard case .free = try NameClashRule.resolve("new.txt", held: nil, policy: .fail, isFolder: false) else { Issue.record("free"); return }
        do {
            _ = try NameClashRule.resolve("report.pdf", held: file, policy: .fail, isFolder: false)
            Issue.record("a taken name with fail must throw")
        } catch let error as DriveError {
            #expect(error.status.code == 409)
            #expect(error.body.error.existingId == file.id)
        }
        guard case .renamed = try NameClashRule.resolve("report.pdf", held: file, policy: .rename, isFolder: false) else { Issue.record("rename"); return }
        guard case .replace(let replaced) = try NameClashRule.resolve("report.pdf", held: file, policy: .replace, isFolder: false) else {
            Issue.record("replace")
            return
        }
        #expect(replaced == file)
        #expect(throws: DriveError.self) { try NameClashRule.resolve("Work", held: folder, policy: .replace, isFolder: false) }
        #expect(throws: DriveError.self) { try NameClashRule.resolve("report.pdf", held: file, policy: .replace, isFolder: true) }
        guard case .free = try NameClashRule.resolve("report.pdf", held: file, policy: .fail, isFolder: false, itself: file.id) else {
            Issue.record("its own name")
            return
        }
        let taken: Set = ["report (1).pdf", "report (2).pdf"]
        #expect(try NameClashRule.freeName(for: "report.pdf") { taken.contains($0) } == "report (3).pdf")
        #expect(try NameClashRule.freeName(for: ".profile") { _ in false } == ".profile (1)")
    }

    @Test("retention: the newest N and everything younger than D days stay; the head never goes")
    func retention() {
        let now = Date(timeIntervalSince1970: 100 * 86400)
        let rule = RevisionRetention(keepLast: 2, keepFor: .seconds(10 * 86400))
        // Newest first: ages 0, 1, 20, 30, 5 days.
        let ages = [0, 1, 20, 30, 5]
        let pruned = rule.prunable(ages, now: now) { now.addingTimeInterval(-Double($0) * 86400) }
        #expect(pruned == [20, 30], "past the newest two and older than ten days")
        #expect(RevisionRetention(keepLast: 0, keepFor: .seconds(0)).prunable([50], now: now) { now.addingTimeInterval(-Double($0) * 86400) }.isEmpty)
    }

    @Test("mass deletion: one rule for both ends, tripped by a share with a minimum or by an absolute count; the server's breaker can be off")
    func massDeletion() {
        let client = MassDeletionThreshold.client
        #expect(!client.trips(deleting: 9, of: 10), "under the minimum: a small tree may be emptied")
        #expect(client.trips(deleting: 10, of: 10))
        #expect(!client.trips(deleting: 500, of: 1000), "half is not over half")
        #expect(client.trips(deleting: 501, of: 1000))
        #expect(client.trips(deleting: 1001, of: 1_000_000), "over the absolute count, whatever the share")
        #expect(client.trips(deleting: 10, of: 0), "nothing left to compare with")
        let server = MassDeletionLimits()
        #expect(server.threshold == .server)
        #expect(!server.trips(deleted: 999, before: 1000))
        #expect(server.trips(deleted: 1000, before: 1500))
        #expect(server.trips(deleted: 10_001, before: 10_000_000))
        #expect(!MassDeletionLimits(enabled: false).trips(deleted: 1_000_000, before: 1))
    }

    @Test("access: a principal has full rights on its own tree; another user's item is invisible (404), exactly like a missing one, and both are recorded")
    func access() throws {
        let log = AccessLog()
        let policy = AccessPolicy(log: log)
        let alice = Principal(userId: "alice", deviceId: "laptop")
        let bob = Principal(userId: "bob", deviceId: Principal.appPasswordPrefix + "ap1")
        #expect(bob.kind == .appPassword(id: "ap1"))
        #expect(alice.kind == .device(id: "laptop"))
        let item = Self.item("a1")
        for action in Action.allCases {
            #expect(try policy.authorize(alice, item, action) == item)
            do {
                try policy.authorize(bob, item, action)
                Issue.record("\(action): another user's item must be refused")
            } catch let error as DriveError {
                #expect(error.status.code == 404)
                #expect(error.body.error.message == policy.notFound(bob, itemId: "missing", action).body.error.message)
            }
        }
        let decisions = log.take()
        #expect(decisions.filter { $0.userId == "alice" && $0.allowed }.count == Action.allCases.count)
        #expect(decisions.filter { $0.userId == "bob" && !$0.allowed && $0.itemId == "a1" }.count == Action.allCases.count)
        #expect(decisions.contains { $0.itemId == "missing" && !$0.allowed })
        #expect(log.take().isEmpty, "taking empties the log")
    }
}
