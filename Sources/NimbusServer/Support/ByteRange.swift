import Foundation

/// A satisfiable byte range of a resource, inclusive bounds as HTTP writes them.
struct ByteRange: Equatable, Sendable {
    var first: Int64
    var last: Int64
    var count: Int64 { last - first + 1 }

    enum ParseResult: Equatable {
        /// No usable `Range` header (absent, not `bytes=`, or several ranges): send the whole content.
        case whole
        case partial(ByteRange)
        /// A well-formed range outside the content: 416.
        case unsatisfiable
    }

    /// Parses a single-range `Range` header (`bytes=0-99`, `bytes=100-`, `bytes=-50`) against a size.
    ///
    /// Malformed and multi-range headers are ignored (RFC 9110 lets a server send 200 with everything).
    static func parse(_ header: String?, size: Int64) -> ParseResult {
        guard let header else { return .whole }
        let trimmed = header.trimmingCharacters(in: .whitespaces)
        guard trimmed.lowercased().hasPrefix("bytes=") else { return .whole }
        let spec = trimmed.dropFirst(6).trimmingCharacters(in: .whitespaces)
        guard !spec.contains(","), let dash = spec.firstIndex(of: "-") else { return .whole }
        let startText = spec[..<dash].trimmingCharacters(in: .whitespaces)
        let endText = spec[spec.index(after: dash)...].trimmingCharacters(in: .whitespaces)
        if startText.isEmpty {
            guard let suffix = Int64(endText), suffix >= 0, endText.allSatisfy(\.isNumber) else { return .whole }
            guard suffix > 0, size > 0 else { return .unsatisfiable }
            return .partial(ByteRange(first: max(0, size - suffix), last: size - 1))
        }
        guard let start = Int64(startText), startText.allSatisfy(\.isNumber) else { return .whole }
        var end = size - 1
        if !endText.isEmpty {
            guard let parsed = Int64(endText), endText.allSatisfy(\.isNumber) else { return .whole }
            guard parsed >= start else { return .whole }
            end = min(parsed, size - 1)
        }
        guard start < size else { return .unsatisfiable }
        return .partial(ByteRange(first: start, last: end))
    }
}

extension Range where Bound == Int64 {
    /// The number of bytes in the range, as an `Int64` (`count` is an `Int`).
    var length: Int64 { upperBound - lowerBound }
}

/// `Content-Range: bytes start-end/total` as a resumable-upload chunk carries it.
struct ContentRange: Equatable, Sendable {
    var first: Int64
    var last: Int64
    var total: Int64

    static func parse(_ header: String?) -> ContentRange? {
        guard let header else { return nil }
        let trimmed = header.trimmingCharacters(in: .whitespaces)
        guard trimmed.lowercased().hasPrefix("bytes ") else { return nil }
        let spec = trimmed.dropFirst(6)
        let halves = spec.split(separator: "/", omittingEmptySubsequences: false)
        guard halves.count == 2, let total = Int64(halves[1]), total >= 0 else { return nil }
        let bounds = halves[0].split(separator: "-", omittingEmptySubsequences: false)
        guard bounds.count == 2, let first = Int64(bounds[0]), let last = Int64(bounds[1]), first >= 0, last >= first else {
            return nil
        }
        return ContentRange(first: first, last: last, total: total)
    }
}
