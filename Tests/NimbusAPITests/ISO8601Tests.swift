import Foundation
@testable import NimbusAPI
import Testing

@Suite("ISO-8601 timestamps")
struct ISO8601Tests {
    @Test("the hand-written parser reads what the API writes, exactly as Foundation does, and refuses the rest")
    func fastParser() throws {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<2000 {
            let millis = Int64.random(in: -2_000_000_000_000...5_000_000_000_000, using: &generator)
            let date = Date(timeIntervalSince1970: TimeInterval(millis) / 1000)
            let text = ISO8601.string(from: date)
            let parsed = try #require(ISO8601.fastDate(text), "\(text)")
            #expect(Int64((parsed.timeIntervalSince1970 * 1000).rounded()) == millis, "\(text)")
            let slow = try Date(text, strategy: .iso8601.year().month().day().dateSeparator(.dash).time(includingFractionalSeconds: true).timeSeparator(.colon).timeZone(separator: .omitted))
            #expect(abs(slow.timeIntervalSince1970 - parsed.timeIntervalSince1970) < 0.0005, "\(text)")
        }
        #expect(ISO8601.fastDate("2026-11-23T10:20:30Z") == Date(timeIntervalSince1970: 1_795_429_230))
        #expect(ISO8601.fastDate("2026-11-23T10:20:30.5Z") == Date(timeIntervalSince1970: 1_795_429_230.5))
        for bad in ["", "2026-11-23", "2026-13-01T00:00:00Z", "2026-11-23T10:20:30+01:00", "2026-11-23 10:20:30Z", "20x6-11-23T10:20:30Z"] {
            #expect(ISO8601.fastDate(bad) == nil, "\(bad)")
        }
        // Other ISO-8601 forms still parse, through Foundation.
        #expect(ISO8601.date(from: "2026-11-23T10:20:30+01:00") == Date(timeIntervalSince1970: 1_795_429_230 - 3600))
    }
}
