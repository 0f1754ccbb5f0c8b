import Foundation
import NIOConcurrencyHelpers
import NIOHTTP1

/// Every answer the tests' clients (``APIClient``, and ``DAVClient`` through it) received, per server, so that at
/// the end of each test ``TokenSniffer`` can look through all of them: the whole suite is sniffed, test by test.
enum Transcript {
    struct Entry: Sendable {
        var method: String
        var path: String
        var status: Int
        var headers: String
        var body: String
    }

    private static let entries = NIOLockedValueBox<[String: [Entry]]>([:])

    /// Keeps an answer's head and, when it is text (JSON, XML, HTML, plain), its body's first 256 KiB, which is where
    /// a token would be (a file's bytes are the test's own content, not kept).
    static func record(baseURL: String, method: HTTPMethod, path: String, status: Int, headers: HTTPHeaders, body: Data) {
        let type = headers.first(name: "Content-Type")?.lowercased() ?? ""
        let textual = type.isEmpty || ["json", "xml", "text", "html", "javascript"].contains { type.contains($0) }
        let text = textual ? String(decoding: body.prefix(256 << 10), as: UTF8.self) : ""
        let entry = Entry(
            method: method.rawValue, path: path, status: status, headers: headers.map { "\($0.name): \($0.value)" }.joined(separator: "\n"), body: text)
        entries.withLockedValue { $0[baseURL, default: []].append(entry) }
    }

    /// Everything recorded for the server at `baseURL`, forgotten here.
    static func take(_ baseURL: String) -> [Entry] {
        entries.withLockedValue { $0.removeValue(forKey: baseURL) ?? [] }
    }
}

/// A public link's token may be shown in exactly two kinds of answer: the one that makes the link, and the owner's
/// `GET` of that one link (`/v1` and Nextcloud's share API alike). The sniffer gathers every token those answers
/// gave, then looks for each in every other answer of the test — lists, listings, public pages, error bodies,
/// headers — and reports where one turned up.
enum TokenSniffer {
    /// Where a token may be shown.
    static func mayShowToken(_ entry: Transcript.Entry) -> Bool {
        let path = entry.path.split(separator: "?", maxSplits: 1).first.map(String.init) ?? entry.path
        let parts = path.split(separator: "/").map(String.init)
        switch (entry.method, parts.count) {
        case ("POST", 4): return parts[0] == "v1" && parts[1] == "files" && parts[3] == "links"  // /v1/files/{id}/links
        case ("GET", 3): return parts[0] == "v1" && parts[1] == "links"  // /v1/links/{id}
        default: break
        }
        guard path.contains("/apps/files_sharing/api/v1/shares") else { return false }
        let afterShares = path.components(separatedBy: "/apps/files_sharing/api/v1/shares").last ?? ""
        if entry.method == "POST" && afterShares.isEmpty { return true }  // made by OCS
        return entry.method == "GET" && afterShares.hasPrefix("/ln") && !afterShares.dropFirst().contains("/")  // one link by OCS
    }

    /// Token values in a JSON answer (`token`, and the last part of a `/s/` URL).
    static func tokens(in body: String) -> Set<String> {
        guard let data = body.data(using: .utf8), let json = try? JSONSerialization.jsonObject(with: data) else { return [] }
        var found: Set<String> = []
        func walk(_ value: Any) {
            if let object = value as? [String: Any] {
                for (key, inner) in object {
                    if key == "token", let text = inner as? String, text.count >= 20 { found.insert(text) }
                    if key == "url", let text = inner as? String, let range = text.range(of: "/s/") {
                        let token = String(text[range.upperBound...])
                        if token.count >= 20 { found.insert(token) }
                    }
                    walk(inner)
                }
            } else if let list = value as? [Any] {
                list.forEach(walk)
            }
        }
        walk(json)
        return found
    }

    /// Where a token turned up outside the answers that may show it.
    static func leaks(in entries: [Transcript.Entry]) -> [String] {
        var known: Set<String> = []
        for entry in entries where mayShowToken(entry) { known.formUnion(tokens(in: entry.body)) }
        guard !known.isEmpty else { return [] }
        var leaks: [String] = []
        for entry in entries where !mayShowToken(entry) {
            for token in known where entry.body.contains(token) || entry.headers.contains(token) {
                leaks.append("\(entry.method) \(entry.path) → \(entry.status) shows a link token: \(entry.body.prefix(200))")
            }
        }
        return leaks
    }
}
