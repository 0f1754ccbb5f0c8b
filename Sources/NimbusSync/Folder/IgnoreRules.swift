import Foundation

/// Which paths a synced folder leaves alone: `.nimbusignore` (gitignore syntax) plus built-in temporary and
/// editor files.
///
/// Supported syntax: blank lines and `#` comments; `!` re-includes; a trailing `/` matches folders only; a
/// pattern with a `/` (other than trailing) is anchored at the folder's root, one without matches a name at any
/// depth; `*`, `?`, `[…]` and `**`.
public struct IgnoreRules: Sendable {
    struct Rule: Sendable {
        var regex: NSRegularExpression
        var negated: Bool
        var directoryOnly: Bool
        var anchored: Bool
    }

    public static let builtIn = [
        ".DS_Store", "Thumbs.db", "desktop.ini", "*.swp", "*.swo", "*~", ".#*", "#*#", "*.tmp", "*.part", "*.crdownload",
        ".nimbus-partial-*", ".~lock.*#",
    ]

    private var rules: [Rule] = []

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
        let name = relativePath.split(separator: "/").last.map(String.init) ?? relativePath
        var ignored = false
        for rule in rules {
            if rule.directoryOnly && !isDirectory { continue }
            let subject = rule.anchored ? relativePath : name
            let range = NSRange(subject.startIndex..., in: subject)
            if rule.regex.firstMatch(in: subject, range: range) != nil { ignored = !rule.negated }
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
        return Rule(regex: regex, negated: negated, directoryOnly: directoryOnly, anchored: anchored)
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
