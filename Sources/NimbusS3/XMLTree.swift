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
            let local = elementName.split(separator: ":").last.map(String.init) ?? elementName
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
