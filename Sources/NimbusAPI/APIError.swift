import Foundation

/// The JSON body of every error: `{"error": {"code": "...", "message": "..."}}`.
///
/// Some errors carry more: a 409 on a name clash names the existing file (`existingId`), a 409 on a
/// version conflict carries the current `file` so a client can decide without another request.
public struct APIErrorBody: Codable, Sendable, Hashable, Error {
    public struct Detail: Codable, Sendable, Hashable {
        public var code: String
        public var message: String
        public var existingId: String?
        public var file: File?
        /// With `blocks_missing`: the hashes of the blocks to send before committing again.
        public var missing: [String]?

        public init(code: String, message: String, existingId: String? = nil, file: File? = nil, missing: [String]? = nil) {
            self.code = code
            self.message = message
            self.existingId = existingId
            self.file = file
            self.missing = missing
        }
    }

    public var error: Detail

    public init(code: String, message: String, existingId: String? = nil, file: File? = nil, missing: [String]? = nil) {
        self.error = Detail(code: code, message: message, existingId: existingId, file: file, missing: missing)
    }
}

extension JSONEncoder {
    /// The API's encoder: ISO-8601 UTC timestamps with milliseconds, sorted keys.
    public static var nimbus: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(ISO8601.string(from: date))
        }
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }
}

extension JSONDecoder {
    /// The API's decoder: accepts ISO-8601 timestamps with or without fractional seconds.
    public static var nimbus: JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let container = try decoder.singleValueContainer()
            let text = try container.decode(String.self)
            guard let date = ISO8601.date(from: text) else {
                throw DecodingError.dataCorruptedError(
                    in: container, debugDescription: "'\(text)' is not an ISO-8601 timestamp")
            }
            return date
        }
        return decoder
    }
}

/// ISO-8601 UTC timestamps as the API writes them (`2026-11-22T01:16:05.123Z`).
public enum ISO8601 {
    public static func string(from date: Date) -> String {
        // Plain arithmetic (Howard Hinnant's civil-from-days): Calendar is slow on Linux, and listings format
        // two timestamps per item.
        let millis = Int64((date.timeIntervalSince1970 * 1000).rounded())
        var days = millis >= 0 ? millis / 86_400_000 : (millis - 86_399_999) / 86_400_000
        let msOfDay = millis - days * 86_400_000
        days += 719_468
        let era = (days >= 0 ? days : days - 146_096) / 146_097
        let dayOfEra = days - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let mp = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        func pad(_ value: Int64, _ width: Int) -> String {
            let text = String(value)
            return text.count >= width ? text : String(repeating: "0", count: width - text.count) + text
        }
        let hour = msOfDay / 3_600_000
        let minute = msOfDay / 60_000 % 60
        let second = msOfDay / 1000 % 60
        let fraction = msOfDay % 1000
        return "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2))T\(pad(hour, 2)):\(pad(minute, 2)):\(pad(second, 2)).\(pad(fraction, 3))Z"
    }

    public static func date(from text: String) -> Date? {
        if let date = fastDate(text) { return date }
        if let date = try? Date(text, strategy: .iso8601.year().month().day().dateSeparator(.dash).time(includingFractionalSeconds: true).timeSeparator(.colon).timeZone(separator: .omitted)) {
            return date
        }
        return try? Date(text, strategy: .iso8601)
    }

    /// `YYYY-MM-DDTHH:MM:SS[.fff]Z`, the form the API writes, by hand (Foundation's parse strategy was a fifth of
    /// the cost of reading a change feed: every item has two timestamps); nil for anything else.
    static func fastDate(_ text: String) -> Date? {
        let utf8 = text.utf8
        return utf8.withContiguousStorageIfAvailable { bytes -> Date? in
            guard bytes.count >= 20, bytes[4] == UInt8(ascii: "-"), bytes[7] == UInt8(ascii: "-"), bytes[10] == UInt8(ascii: "T"),
                bytes[13] == UInt8(ascii: ":"), bytes[16] == UInt8(ascii: ":"), bytes[bytes.count - 1] == UInt8(ascii: "Z")
            else { return nil }
            func number(_ start: Int, _ length: Int) -> Int64? {
                var value: Int64 = 0
                for index in start..<(start + length) {
                    let digit = Int64(bytes[index]) - 48
                    guard digit >= 0 && digit <= 9 else { return nil }
                    value = value * 10 + digit
                }
                return value
            }
            guard let year = number(0, 4), let month = number(5, 2), let day = number(8, 2), let hour = number(11, 2), let minute = number(14, 2),
                let second = number(17, 2), (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second < 61
            else { return nil }
            var millis: Int64 = 0
            if bytes.count > 20 {
                guard bytes[19] == UInt8(ascii: "."), bytes.count - 21 >= 1, bytes.count - 21 <= 9, let fraction = number(20, bytes.count - 21) else {
                    return nil
                }
                var scaled = fraction
                var digits = bytes.count - 21
                while digits < 3 { scaled *= 10; digits += 1 }
                while digits > 3 { scaled /= 10; digits -= 1 }
                millis = scaled
            }
            // Days from civil (Howard Hinnant), the inverse of `string(from:)`.
            let y = month <= 2 ? year - 1 : year
            let era = (y >= 0 ? y : y - 399) / 400
            let yearOfEra = y - era * 400
            let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
            let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
            let days = era * 146_097 + dayOfEra - 719_468
            let total = ((days * 24 + hour) * 60 + minute) * 60 + second
            return Date(timeIntervalSince1970: TimeInterval(total) + TimeInterval(millis) / 1000)
        } ?? nil
    }
}
