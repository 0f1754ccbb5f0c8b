import Foundation
import NimbusAPI
import Testing

@Suite("File names")
struct FileNameTests {
    @Test("valid names are returned in NFC", arguments: ["a.txt", "Report 2024.pdf", ".profile", "名前.txt", "a b", String(repeating: "x", count: 255)])
    func validNames(_ name: String) throws {
        #expect(try FileName.validated(name) == name.precomposedStringWithCanonicalMapping)
    }

    @Test("NFD and NFC spellings are the same name")
    func normalisation() throws {
        let decomposed = "Cafe\u{0301}.txt"
        #expect(try FileName.validated(decomposed) == "Caf\u{00E9}.txt")
    }

    @Test(
        "invalid names are refused with the rule they break",
        arguments: [
            ("", FileName.Problem.empty), (".", .dotName), ("..", .dotName), ("a/b", .containsSlash), ("a\u{0}b", .containsNUL),
            (String(repeating: "x", count: 256), .tooLong(bytes: 256)), (String(repeating: "é", count: 128), .tooLong(bytes: 256)),
        ])
    func invalidNames(_ name: String, _ problem: FileName.Problem) {
        #expect(throws: problem) { try FileName.validated(name) }
    }

    @Test(
        "numbered alternatives keep the extension",
        arguments: [
            ("report.pdf", 1, "report (1).pdf"), ("notes", 2, "notes (2)"), (".profile", 1, ".profile (1)"),
            ("archive.tar.gz", 3, "archive (3).tar.gz"), ("a.b.c", 1, "a.b (1).c"),
        ])
    func numbered(_ name: String, _ n: Int, _ expected: String) {
        #expect(FileName.numbered(name, n) == expected)
    }

    @Test("a numbered alternative of a maximal name stays within 255 bytes")
    func numberedFits() throws {
        let long = String(repeating: "x", count: 251) + ".txt"
        let numbered = FileName.numbered(long, 12)
        #expect(numbered.utf8.count <= 255)
        #expect(numbered.hasSuffix(" (12).txt"))
        #expect(try FileName.validated(numbered) == numbered)
    }

    @Test("conflict copies name the device and the day")
    func conflictCopy() {
        let date = Date(timeIntervalSince1970: 1_700_000_000)
        #expect(FileName.conflictCopy("plan.md", device: "laptop", date: date) == "plan (conflict from laptop 2023-11-14).md")
    }
}

@Suite("Wire format")
struct WireFormatTests {
    @Test("timestamps are ISO-8601 UTC with milliseconds and read back with or without them")
    func timestamps() throws {
        let date = Date(timeIntervalSince1970: 1_700_000_000.123)
        let text = ISO8601.string(from: date)
        #expect(text == "2023-11-14T22:13:20.123Z")
        #expect(abs(try #require(ISO8601.date(from: text)).timeIntervalSince(date)) < 0.001)
        #expect(ISO8601.date(from: "2023-11-14T22:13:20Z") == Date(timeIntervalSince1970: 1_700_000_000))
        #expect(ISO8601.date(from: "yesterday") == nil)
        // Leap days, year ends, and dates before 1970 format like Foundation's formatter.
        for seconds in [0.0, 951_782_400.5, 1_709_164_800, 1_735_689_599.999, -86_400.25, 4_102_444_800] {
            let date = Date(timeIntervalSince1970: seconds)
            let expected = date.formatted(.iso8601.year().month().day().dateSeparator(.dash).time(includingFractionalSeconds: true).timeSeparator(.colon))
            #expect(ISO8601.string(from: date) == expected + "Z", "\(seconds)")
        }
    }

    @Test("a File always carries parentId, null for the root folder")
    func parentIdAlwaysPresent() throws {
        let root = File(
            id: "f1", name: "My Drive", mimeType: folderMimeType, parentId: nil, size: 0, checksum: nil, revisionId: nil,
            createdAt: Date(), modifiedAt: Date(), downloadUrl: nil, trashed: false)
        let json = try #require(String(data: try JSONEncoder.nimbus.encode(root), encoding: .utf8))
        #expect(json.contains("\"parentId\":null"))
        #expect(!json.contains("checksum"))
        let decoded = try JSONDecoder.nimbus.decode(File.self, from: Data(json.utf8))
        #expect(decoded.id == root.id)
        #expect(decoded.parentId == nil)
    }

    @Test(
        "sizes parse in binary units",
        arguments: [("1048576", Int64(1_048_576)), ("512K", 524_288), ("10MB", 10_485_760), ("1.5GiB", 1_610_612_736), ("2t", 2_199_023_255_552)])
    func sizes(_ text: String, _ bytes: Int64) {
        #expect(ByteCount.parse(text) == bytes)
    }

    @Test("nonsense sizes are nil", arguments: ["", "abc", "-1", "10XB", "1e30"])
    func badSizes(_ text: String) {
        #expect(ByteCount.parse(text) == nil)
    }
}
