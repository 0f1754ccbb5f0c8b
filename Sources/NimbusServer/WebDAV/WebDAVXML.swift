import Crypto
import Foundation
import Hummingbird
import NimbusAPI
import NIOFoundationCompat

#if canImport(FoundationXML)
import FoundationXML
#endif
/// What a PROPFIND asks for: everything, the names, or the listed properties.
enum PropfindBody: Equatable {
    case allprop
    case propname
    case prop([DeadProperty])

    /// An empty body is `allprop`; anything else must be a well-formed `DAV:propfind` (400 otherwise).
    static func parse(_ data: Data) throws -> PropfindBody {
        guard data.contains(where: { !($0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09) }) else { return .allprop }
        let root = try DAVXML.parse(data)
        guard root.namespace == "DAV:", root.name == "propfind" else { throw DAVError(.badRequest, "The body must be a DAV:propfind element.") }
        for child in root.children where child.namespace == "DAV:" {
            switch child.name {
            case "allprop": return .allprop
            case "propname": return .propname
            case "prop": return .prop(child.children.map { DeadProperty(namespace: $0.namespace, name: $0.name) })
            default: continue
            }
        }
        throw DAVError(.badRequest, "A DAV:propfind names allprop, propname or prop.")
    }
}

/// A PROPPATCH body: sets and removes, in document order.
enum PropertyUpdate {
    case set(DeadProperty)
    case remove(DeadProperty)

    var property: DeadProperty {
        switch self {
        case .set(let property), .remove(let property): property
        }
    }

    static func parse(_ data: Data) throws -> [PropertyUpdate] {
        let root = try DAVXML.parse(data)
        guard root.namespace == "DAV:", root.name == "propertyupdate" else {
            throw DAVError(.badRequest, "The body must be a DAV:propertyupdate element.")
        }
        var updates: [PropertyUpdate] = []
        for action in root.children where action.namespace == "DAV:" && (action.name == "set" || action.name == "remove") {
            for prop in action.children where prop.namespace == "DAV:" && prop.name == "prop" {
                for property in prop.children {
                    let dead = DeadProperty(namespace: property.namespace, name: property.name, value: property.innerXML)
                    updates.append(action.name == "set" ? .set(dead) : .remove(dead))
                }
            }
        }
        guard !updates.isEmpty else { throw DAVError(.badRequest, "The DAV:propertyupdate sets or removes nothing.") }
        return updates
    }
}

/// A small namespace-aware XML tree for request bodies (a megabyte at most), with each element's content kept
/// as XML again so a dead property's value comes back as it was given (nested elements, namespaces, Unicode).
enum DAVXML {
    final class Element {
        let namespace: String
        let name: String
        var children: [Element] = []
        /// The element's content (text and child elements), serialized with each element's namespace on it.
        var innerXML = ""

        init(namespace: String, name: String) {
            self.namespace = namespace
            self.name = name
        }
    }

    static func parse(_ data: Data) throws -> Element {
        let reader = Reader()
        let parser = XMLParser(data: data)
        parser.shouldProcessNamespaces = true
        parser.shouldReportNamespacePrefixes = true
        parser.delegate = reader
        guard parser.parse(), !reader.invalid, let root = reader.root else {
            throw DAVError(.badRequest, "The body is not well-formed XML with valid namespace declarations.")
        }
        return root
    }

    static let ownCloud = "http://owncloud.org/ns"
    static let nextcloud = "http://nextcloud.org/ns"
    static let sabre = "http://sabredav.org/ns"

    /// The prefixes answers use, declared on their root element: `d:` for `DAV:` and, as Nextcloud (SabreDAV) writes
    /// them, `oc:` and `nc:`, because some clients (Nextcloud's iOS library) read elements by those exact prefixes.
    static let prefixes = [("DAV:", "d"), (ownCloud, "oc"), (nextcloud, "nc"), (sabre, "s")]
    static let declarations = prefixes.map { "xmlns:\($0.1)=\"\($0.0)\"" }.joined(separator: " ")
    static let multistatusOpen = "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<d:multistatus \(declarations)>\n"

    /// `<d:name>value</d:name>` for a namespace with a prefix, `<name xmlns="namespace">value</name>` for any other.
    static func element(_ namespace: String, _ name: String, value: String) -> String {
        let open: String
        let close: String
        if let prefix = prefixes.first(where: { $0.0 == namespace })?.1 {
            open = "\(prefix):\(name)"
            close = open
        } else {
            open = "\(name) xmlns=\"\(DAVRequest.xmlEscape(namespace))\""
            close = name
        }
        return value.isEmpty ? "<\(open)/>" : "<\(open)>\(value)</\(close)>"
    }

    private final class Reader: NSObject, XMLParserDelegate {
        var stack: [Element] = []
        var root: Element?
        var invalid = false

        func parser(_ parser: XMLParser, didStartMappingPrefix prefix: String, toURI namespaceURI: String) {
            // "xmlns:p=''" is not allowed by Namespaces in XML 1.0 (litmus checks it is refused).
            if !prefix.isEmpty && namespaceURI.isEmpty {
                invalid = true
                parser.abortParsing()
            }
        }

        func parser(_ parser: XMLParser, didStartElement name: String, namespaceURI: String?, qualifiedName: String?, attributes: [String: String] = [:]) {
            // A prefixed name with no namespace: "xmlns:p=''" (not all parsers report the mapping itself).
            if let qualifiedName, qualifiedName.contains(":"), (namespaceURI ?? "").isEmpty {
                invalid = true
                parser.abortParsing()
                return
            }
            let element = Element(namespace: namespaceURI ?? "", name: name)
            stack.last?.children.append(element)
            if stack.isEmpty { root = element }
            // Ancestors below the property level keep this element in their content.
            let opening = "<\(name) xmlns=\"\(DAVRequest.xmlEscape(namespaceURI ?? ""))\">"
            for ancestor in stack { ancestor.innerXML += opening }
            stack.append(element)
        }

        func parser(_ parser: XMLParser, didEndElement name: String, namespaceURI: String?, qualifiedName: String?) {
            _ = stack.popLast()
            for ancestor in stack { ancestor.innerXML += "</\(name)>" }
        }

        func parser(_ parser: XMLParser, foundCharacters string: String) {
            let escaped = DAVRequest.xmlEscape(string)
            for element in stack { element.innerXML += escaped }
        }

        func parser(_ parser: XMLParser, foundCDATA block: Data) {
            let escaped = DAVRequest.xmlEscape(String(decoding: block, as: UTF8.self))
            for element in stack { element.innerXML += escaped }
        }
    }
}
