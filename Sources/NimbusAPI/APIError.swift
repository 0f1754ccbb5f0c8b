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

        public init(code: String, message: String, existingId: String? = nil, file: File? = nil) {
            self.code = code
            self.message = message
            self.existingId = existingId
            self.file = file
        }
    }

    public var error: Detail

    public init(code: String, message: String, existingId: String? = nil, file: File? = nil) {
        self.error = Detail(code: code, message: message, existingId: existingId, file: file)
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
        let millis = Int64((date.timeIntervalSince1970 * 1000).rounded())
        let seconds = Int64((Double(millis) / 1000).rounded(.down))
        let fraction = Int(millis - seconds * 1000)
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let c = calendar.dateComponents([.year, .month, .day, .hour, .minute, .second], from: Date(timeIntervalSince1970: TimeInterval(seconds)))
        func pad(_ value: Int?, _ width: Int) -> String {
            let text = String(value ?? 0)
            return String(repeating: "0", count: max(0, width - text.count)) + text
        }
        return "\(pad(c.year, 4))-\(pad(c.month, 2))-\(pad(c.day, 2))T\(pad(c.hour, 2)):\(pad(c.minute, 2)):\(pad(c.second, 2)).\(pad(fraction, 3))Z"
    }

    public static func date(from text: String) -> Date? {
        if let date = try? Date(text, strategy: .iso8601.year().month().day().dateSeparator(.dash).time(includingFractionalSeconds: true).timeSeparator(.colon).timeZone(separator: .omitted)) {
            return date
        }
        return try? Date(text, strategy: .iso8601)
    }
}
