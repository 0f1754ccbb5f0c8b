import Foundation

#if canImport(FoundationXML)
    import FoundationXML
#endif

/// An XML document as a tree of elements (S3 answers are small: listings of ≤ 1,000 keys, errors, upload ids),
/// read with Foundation's parser. Namespaces are ignored: elements are found by local name.
struct XMLElement: Sendable {
    var name: String
    var text: String = ""
    var children: [XMLElement] = []

    /// The first child named `name`.
    func child(_ name: String) -> XMLElement? { children.first { $0.name == name } }
    /// Every child named `name`.
    func all(_ name: String) -> [XMLElement] { children.filter { $0.name == name } }
    /// The text of the first child named `name`.
    func value(_ name: String) -> String? { child(name)?.text }

    static func parse(_ data: Data) -> XMLElement? {
        let builder = Builder()
        let parser = XMLParser(data: data)
        parser.delegate = builder
        guard parser.parse() else { return nil }
        return builder.root
    }

    private final class Builder: NSObject, XMLParserDelegate {
        var stack: [XMLElement] = []
        var root: XMLElement?

        func parser(
            _ parser: XMLParser, didStartElement elementName: String, namespaceURI: String?, qualifiedName: String?,
            attributes: [String: String] = [:]
        ) {
            let local = elementName.split(separator: ":").last.map(String.init) ?? elementName
            stack.append(XMLElement(name: local))
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
