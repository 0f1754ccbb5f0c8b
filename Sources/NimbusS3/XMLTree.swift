import Foundation

#if canImport(FoundationXML)
    import FoundationXML
#endif

/// An XML document as a tree of elements (S3 answers and WebDAV multistatus bodies are small: listings of ≤ 1,000
/// keys, one folder's entries, errors), read with Foundation's parser. Namespaces are ignored: elements are found by
/// local name (`D:href`, `d:href` and `href` are all `href`).
public struct XMLTree: Sendable {
    public var name: String
    public var text: String = ""
    public var children: [XMLTree] = []

    /// The first child named `name`.
    public func child(_ name: String) -> XMLTree? { children.first { $0.name == name } }
    /// Every child named `name`.
    public func all(_ name: String) -> [XMLTree] { children.filter { $0.name == name } }
    /// The text of the first child named `name`.
    public func value(_ name: String) -> String? { child(name)?.text }

    public static func parse(_ data: Data) -> XMLTree? {
        let builder = Builder()
        let parser = XMLParser(data: data)
        parser.delegate = builder
        guard parser.parse() else { return nil }
        return builder.root
    }

    private final class Builder: NSObject, XMLParserDelegate {
        var stack: [XMLTree] = []
        var root: XMLTree?

        func parser(
            _ parser: XMLParser, didStartElement elementName: String, namespaceURI: String?, qualifiedName: String?,
            attributes: [String: String] = [:]
        ) {
            // The local name (after a prefix, if any): a scan of the bytes, not a split nor a walk by Characters (a
            // listing has tens of thousands of elements; by Characters it was 3 % of a WebDAV no-op's CPU).
            let local =
                elementName.utf8.lastIndex(of: UInt8(ascii: ":")).map { String(elementName[elementName.utf8.index(after: $0)...]) } ?? elementName
            stack.append(XMLTree(name: local))
        }

        func parser(_ parser: XMLParser, foundCharacters string: String) {
            guard !stack.isEmpty else { return }
            stack[stack.count - 1].text += string
        }

        func parser(_ parser: XMLParser, didEndElement elementName: String, namespaceURI: String?, qualifiedName: String?) {
            guard let done = stack.popLast() else { return }
            if stack.isEmpty { root = done } else { stack[stack.count - 1].children.append(done) }
        }
    }
}

/// HTTP dates (`Tue, 24 Nov 2026 05:21:30 GMT`, RFC 9110's IMF-fixdate), read without a DateFormatter: a WebDAV
/// listing has one per entry, and ICU's parser was a third of a no-op sync's CPU.
public enum HTTPDate {
    static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    public static func parse(_ text: String) -> Date? {
        let parts = text.split(separator: " ")
        guard parts.count == 6, parts[5] == "GMT", let day = Int(parts[1]), let monthIndex = months.firstIndex(of: String(parts[2])),
            let year = Int(parts[3])
        else { return nil }
        let time = parts[4].split(separator: ":").compactMap { Int($0) }
        guard time.count == 3, (1...31).contains(day), (0...23).contains(time[0]), (0...59).contains(time[1]), (0...60).contains(time[2]) else {
            return nil
        }
        // Days since 1970-01-01 (civil-from-days inverse, proleptic Gregorian).
        let month = monthIndex + 1
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        let days = era * 146_097 + dayOfEra - 719_468
        return Date(timeIntervalSince1970: TimeInterval(days * 86_400 + time[0] * 3_600 + time[1] * 60 + time[2]))
    }
}
