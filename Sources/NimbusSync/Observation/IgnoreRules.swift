import Foundation

/// Which paths a synced folder leaves alone: `.nimbusignore` (gitignore syntax) plus built-in temporary and
/// editor files.
///
/// Supported syntax: blank lines and `#` comments (`\#` for a name that starts with #); `!` re-includes; a trailing `/` matches folders only; a
/// pattern with a `/` (other than trailing) is anchored at the folder's root, one without matches a name at any
/// depth; `*`, `?`, `[…]` and `**`.
public struct IgnoreRules: Sendable {
    struct Rule: Sendable {
        var regex: NSRegularExpression
        /// For a pattern with at most one `*` and nothing else special: the text before and after it (`nil`
        /// after = no `*`, an exact name). Checked without the regex engine: most rules are like this, and a
        /// scan asks every rule about every path.
        var literal: (prefix: String, suffix: String?)?
        var negated: Bool
        var directoryOnly: Bool
        var anchored: Bool
    }

    /// Always ignored: system, editor and temporary files, and Nimbus's own partial files.
    public static let builtIn = [
        ".DS_Store", "Thumbs.db", "desktop.ini", "*.swp", "*.swo", "*~", ".#*", "\\#*#", "*.tmp", "*.part", "*.crdownload",
        ".nimbus-partial-*", ".~lock.*#",
    ]

    private var rules: [Rule] = []

    /// The built-in rules plus `patterns` (lines of a `.nimbusignore`).
    public init(patterns: [String]) {
        for line in Self.builtIn + patterns { if let rule = Self.rule(line) { rules.append(rule) } }
    }

    /// The built-in rules plus those in `<root>/.nimbusignore`, if it exists.
    public init(root: URL) {
        let text = (try? String(contentsOf: root.appending(path: ".nimbusignore"), encoding: .utf8)) ?? ""
        self.init(patterns: text.components(separatedBy: .newlines))
    }

    /// Whether `relativePath` (slash-separated, no leading slash) is ignored. The last matching rule wins.
    public func ignores(_ relativePath: String, isDirectory: Bool) -> Bool {
        let name = relativePath.lastIndex(of: "/").map { relativePath[relativePath.index(after: $0)...] } ?? relativePath[...]
        var ignored = false
        for index in rules.indices {
            if rules[index].directoryOnly && !isDirectory { continue }
            let subject = rules[index].anchored ? relativePath[...] : name
            let matches: Bool
            if let (prefix, suffix) = rules[index].literal {
                if let suffix {
                    matches = subject.utf8.count >= prefix.utf8.count + suffix.utf8.count && subject.hasPrefix(prefix) && subject.hasSuffix(suffix)
                        && (rules[index].anchored ? !subject.dropFirst(prefix.count).dropLast(suffix.count).contains("/") : true)
                } else {
                    matches = subject == prefix
                }
            } else {
                let text = String(subject)
                matches = rules[index].regex.firstMatch(in: text, range: NSRange(text.startIndex..., in: text)) != nil
            }
            if matches { ignored = !rules[index].negated }
        }
        return ignored
    }

    static func rule(_ raw: String) -> Rule? {
        var line = raw.trimmingCharacters(in: .whitespaces)
        guard !line.isEmpty, !line.hasPrefix("#") else { return nil }
        var negated = false
        if line.hasPrefix("!") {
            negated = true
            line.removeFirst()
        } else if line.hasPrefix("\\#") || line.hasPrefix("\\!") {
            line.removeFirst()  // an escaped leading # or ! is part of the name
        }
        var directoryOnly = false
        if line.hasSuffix("/") {
            directoryOnly = true
            line.removeLast()
        }
        var anchored = line.contains("/")
        if line.hasPrefix("/") { line.removeFirst() }
        if line.hasPrefix("**/") {
            anchored = true
        }
        guard !line.isEmpty, let regex = try? NSRegularExpression(pattern: "^" + globToRegex(line) + "$") else { return nil }
        var literal: (prefix: String, suffix: String?)?
        if !line.contains(where: { "?[\\".contains($0) }) {
            let parts = line.split(separator: "*", omittingEmptySubsequences: false).map(String.init)
            if parts.count == 1 { literal = (line, nil) } else if parts.count == 2 { literal = (parts[0], parts[1]) }
        }
        return Rule(regex: regex, literal: literal, negated: negated, directoryOnly: directoryOnly, anchored: anchored)
    }

    static func globToRegex(_ glob: String) -> String {
        var result = ""
        var characters = Array(glob)
        var index = 0
        while index < characters.count {
            let character = characters[index]
            switch character {
            case "*":
                if index + 1 < characters.count, characters[index + 1] == "*" {
                    if index + 2 < characters.count, characters[index + 2] == "/" {
                        result += "(?:.*/)?"
                        index += 3
                        continue
                    }
                    result += ".*"
                    index += 2
                    continue
                }
                result += "[^/]*"
            case "?":
                result += "[^/]"
            case "[":
                if let close = characters[(index + 1)...].firstIndex(of: "]") {
                    var set = String(characters[(index + 1)..<close])
                    if set.hasPrefix("!") { set = "^" + set.dropFirst() }
                    result += "[" + set.replacingOccurrences(of: "\\", with: "\\\\") + "]"
                    index = close + 1
                    continue
                }
                result += "\\["
            default:
                result += NSRegularExpression.escapedPattern(for: String(character))
            }
            index += 1
        }
        characters.removeAll()
        return result
    }
}
