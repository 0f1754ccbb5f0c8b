import Foundation

/// A cloud-only file in a synced folder: `NAME.nimbus`, a small text file that stands for `NAME`. It starts with a
/// fixed magic line and says what it stands for (name, size, modified) and how to get the file:
///
/// ```
/// #nimbus-placeholder v1
/// name: report.pdf
/// size: 1048576
/// modified: 2026-12-06T12:00:00Z
/// id: 3kq2x7d5hmv4a6z
///
/// This file stands for "report.pdf", kept in the cloud only (not on this device).
/// To get it: nimbus hydrate 'report.pdf.nimbus' (or double-click it, or: nimbus open ...).
/// Deleting this file deletes report.pdf (to the trash of the remote, where it can be restored).
/// ```
///
/// A file is a placeholder by its content, never by its size: its name ends in `.nimbus`, it is at most 4 KiB, it
/// starts with the magic line, and its `id:` names an item of the pair that is not claimed by another file. Anything
/// else — a file that lost its magic line by a hand edit, a copy of a placeholder — is an ordinary file and syncs as
/// one. A file at `NAME` beside a placeholder of `NAME` is that item's content (the placeholder is removed): a
/// download that a crash interrupted, or the user putting the file back.
public struct Placeholder: Sendable, Equatable {
    public static let suffix = ".nimbus"
    public static let magic = "#nimbus-placeholder v1"
    /// Bigger files are never read as placeholders.
    public static let maximumSize: Int64 = 4096

    public var name: String
    public var size: Int64
    public var modified: Date?
    /// The item's id in the pair's library.
    public var id: String

    public init(name: String, size: Int64, modified: Date?, id: String) {
        self.name = name
        self.size = size
        self.modified = modified
        self.id = id
    }

    /// The file's text.
    public var text: String {
        var lines = [Self.magic, "name: \(name)", "size: \(size)"]
        if let modified { lines.append("modified: \(Self.dateFormat.format(modified))") }
        lines.append("id: \(id)")
        let quoted = "'" + (name + Self.suffix).replacingOccurrences(of: "'", with: "'\\''") + "'"
        lines += [
            "",
            "This file stands for \"\(name)\" (\(ByteCountFormatter.string(fromByteCount: size, countStyle: .file))), kept in the cloud only (not on this device).",
            "To get it: nimbus hydrate \(quoted) (or double-click it, or: nimbus open \(quoted)).",
            "Deleting this file deletes \(name) (to the remote's trash, where it can be restored).",
        ]
        return lines.joined(separator: "\n") + "\n"
    }

    /// The placeholder a file's content is, if it is one (nil: an ordinary file).
    public static func parse(_ data: Data) -> Placeholder? {
        guard data.count <= maximumSize, let text = String(data: data, encoding: .utf8) else { return nil }
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map { $0.hasSuffix("\r") ? String($0.dropLast()) : String($0) }
        guard lines.first == magic else { return nil }
        var fields: [String: String] = [:]
        for line in lines.dropFirst() {
            if line.isEmpty { break }
            guard let colon = line.firstIndex(of: ":") else { continue }
            fields[String(line[..<colon])] = String(line[line.index(after: colon)...]).trimmingCharacters(in: .whitespaces)
        }
        guard let id = fields["id"], !id.isEmpty, let name = fields["name"] else { return nil }
        return Placeholder(
            name: name, size: fields["size"].flatMap { Int64($0) } ?? 0, modified: fields["modified"].flatMap { try? Self.dateFormat.parse($0) }, id: id)
    }

    /// Whether a file with this name and size may be a placeholder (then it is read).
    static func mayBe(name: String, size: Int64) -> Bool {
        name.hasSuffix(suffix) && name.count > suffix.count && size <= maximumSize
    }

    static let dateFormat = Date.ISO8601FormatStyle()
}
