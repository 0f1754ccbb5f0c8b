import Foundation
import Testing

@testable import NimbusServer

@Suite("Range parsing")
struct RangeParsingTests {
    @Test(
        "Range headers against a 1000-byte resource",
        arguments: [
            ("bytes=0-99", ByteRange.ParseResult.partial(ByteRange(first: 0, last: 99))),
            ("bytes=500-", .partial(ByteRange(first: 500, last: 999))),
            ("bytes=-100", .partial(ByteRange(first: 900, last: 999))),
            ("bytes=-5000", .partial(ByteRange(first: 0, last: 999))),
            ("bytes=990-2000", .partial(ByteRange(first: 990, last: 999))),
            ("bytes=1000-", .unsatisfiable),
            ("bytes=1000-1200", .unsatisfiable),
            ("bytes=-0", .unsatisfiable),
            ("bytes=5-1", .whole),
            ("bytes=0-1,5-6", .whole),
            ("items=0-1", .whole),
            ("bytes=a-b", .whole),
            ("bytes=+1-2", .whole),
        ])
    func parse(_ header: String, _ expected: ByteRange.ParseResult) {
        #expect(ByteRange.parse(header, size: 1000) == expected)
    }

    @Test("no header means the whole content; any range of an empty file is unsatisfiable")
    func edges() {
        #expect(ByteRange.parse(nil, size: 10) == .whole)
        #expect(ByteRange.parse("bytes=0-", size: 0) == .unsatisfiable)
        #expect(ByteRange.parse("bytes=-1", size: 0) == .unsatisfiable)
    }

    @Test(
        "Content-Range headers of chunks",
        arguments: [
            ("bytes 0-9/10", ContentRange(first: 0, last: 9, total: 10)),
            ("bytes 262144-524287/1000000", ContentRange(first: 262_144, last: 524_287, total: 1_000_000)),
        ])
    func contentRange(_ header: String, _ expected: ContentRange) {
        #expect(ContentRange.parse(header) == expected)
    }

    @Test("malformed Content-Range headers are nil", arguments: ["bytes 9-0/10", "bytes */10", "bytes 0-9", "0-9/10", "bytes a-b/c", "bytes -1-3/10"])
    func badContentRange(_ header: String) {
        #expect(ContentRange.parse(header) == nil)
    }
}

@Suite("Paging")
struct PagingTests {
    @Test("defaults, clamping and the next page")
    func paging() throws {
        #expect(try Paging.parse(page: nil, limit: nil) == Paging(page: 1, limit: 100))
        #expect(try Paging.parse(page: "3", limit: "5000") == Paging(page: 3, limit: 1000))
        let paging = try Paging.parse(page: "2", limit: "10")
        #expect(paging.offset == 10)
        #expect(paging.nextPage(totalItems: 21) == 3)
        #expect(paging.nextPage(totalItems: 20) == nil)
    }

    @Test("bad values are 400s", arguments: [("0", "10"), ("1", "0"), ("x", "10"), ("1", "-1"), ("1", "1.5")])
    func bad(_ page: String, _ limit: String) {
        #expect(throws: DriveError.self) { try Paging.parse(page: page, limit: limit) }
    }
}

@Suite("Revision retention")
struct RetentionTests {
    let now = Date(timeIntervalSince1970: 1_000_000_000)

    func ages(_ days: [Double]) -> [Date] { days.map { now.addingTimeInterval(-$0 * 86400) } }

    @Test("old revisions beyond the newest N go; young ones stay however many there are")
    func prunable() {
        let policy = RevisionRetention(keepLast: 3, keepFor: .seconds(30 * 86400))
        // Newest first: 0, 1, 40, 41, 42 days old.
        let revisions = ages([0, 1, 40, 41, 42])
        #expect(policy.prunable(revisions, now: now, date: { $0 }) == ages([41, 42]))
        let young = ages([0, 1, 2, 3, 4, 5])
        #expect(policy.prunable(young, now: now, date: { $0 }).isEmpty)
    }

    @Test("the head is never pruned, even with keepLast 0")
    func headKept() {
        let policy = RevisionRetention(keepLast: 0, keepFor: .seconds(0))
        let revisions = ages([100, 200])
        #expect(policy.prunable(revisions, now: now, date: { $0 }) == ages([200]))
    }
}

@Suite("ETags")
struct ETagTests {
    @Test("If-Match values match strongly, in lists, with or without quotes, and * matches anything")
    func matching() {
        #expect(ETag.matches("\"r1\"", "r1"))
        #expect(ETag.matches("r1", "r1"))
        #expect(ETag.matches("\"a\", \"r1\"", "r1"))
        #expect(ETag.matches("*", "anything"))
        #expect(ETag.matches("W/\"r1\"", "r1"))
        #expect(!ETag.matches("\"r2\"", "r1"))
        #expect(!ETag.matches("", "r1"))
    }
}

@Suite("Link tokens in logs")
struct LinkTokenRedactionTests {
    @Test("a public link's token is taken out of a logged path; other paths are left alone")
    func redacted() {
        #expect(LinkTokens.redacted("/s/abc123") == "/s/•")
        #expect(LinkTokens.redacted("/v1/public/abc123/items/f1/content") == "/v1/public/•/items/f1/content")
        #expect(LinkTokens.redacted("/v1/public/abc123") == "/v1/public/•")
        #expect(LinkTokens.redacted("/v1/files/f1/content") == "/v1/files/f1/content")
        #expect(LinkTokens.redacted("/") == "/")
    }
}
