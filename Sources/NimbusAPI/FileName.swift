import Foundation

/// File-name rules shared by server and clients.
public enum FileName {
    public static let maxUTF8Bytes = 255

    public enum Problem: Error, Equatable, Sendable, CustomStringConvertible {
        case empty
        case dotName
        case containsSlash
        case containsNUL
        case tooLong(bytes: Int)

        public var description: String {
            switch self {
            case .empty: "A name cannot be empty."
            case .dotName: "'.' and '..' are not valid names."
            case .containsSlash: "A name cannot contain '/'."
            case .containsNUL: "A name cannot contain the NUL character."
            case .tooLong(let bytes): "A name can be at most 255 UTF-8 bytes; this one has \(bytes)."
            }
        }
    }

    /// The name in Unicode NFC, or the rule it breaks.
    ///
    /// Names are compared after normalisation and case-sensitively, so `Café` typed on macOS (NFD) and on
    /// Linux (NFC) is the same name, while `a.txt` and `A.txt` are two names.
    public static func validated(_ raw: String) throws(Problem) -> String {
        let name = raw.precomposedStringWithCanonicalMapping
        if name.isEmpty { throw .empty }
        if name == "." || name == ".." { throw .dotName }
        if name.utf8.contains(UInt8(ascii: "/")) { throw .containsSlash }
        if name.utf8.contains(0) { throw .containsNUL }
        let bytes = name.utf8.count
        if bytes > maxUTF8Bytes { throw .tooLong(bytes: bytes) }
        return name
    }

    /// The `n`th alternative for a name that is taken: `report (1).pdf`, `archive (2).tar.gz`, `notes (3)`.
    ///
    /// The suffix goes before the extension; a leading dot (`.profile`) is not an extension.
    public static func numbered(_ name: String, _ n: Int) -> String {
        let (stem, ext) = split(name)
        return fitted(stem: stem, suffix: " (\(n))", ext: ext)
    }

    /// `name (no longer shared).ext` (a folder: `name (no longer shared)`): where what was changed on a device in a
    /// share that ended is kept.
    public static func noLongerShared(_ name: String, isFolder: Bool) -> String {
        if isFolder { return fitted(stem: name, suffix: " (no longer shared)", ext: "") }
        let (stem, ext) = split(name)
        return fitted(stem: stem, suffix: " (no longer shared)", ext: ext)
    }

    /// `name (conflict from DEVICE YYYY-MM-DD).ext`: the name a conflict copy gets.
    public static func conflictCopy(_ name: String, device: String, date: Date) -> String {
        let (stem, ext) = split(name)
        let day = date.formatted(.iso8601.year().month().day().dateSeparator(.dash))
        return fitted(stem: stem, suffix: " (conflict from \(device) \(day))", ext: ext)
    }

    static func split(_ name: String) -> (stem: String, ext: String) {
        var ext = ""
        var stem = name
        let lowered = name.lowercased()
        for compound in [".tar.gz", ".tar.bz2", ".tar.xz", ".tar.zst"] where lowered.hasSuffix(compound) && lowered.count > compound.count {
            ext = String(name.suffix(compound.count))
            stem = String(name.dropLast(compound.count))
            return (stem, ext)
        }
        if let dot = name.lastIndex(of: "."), dot != name.startIndex {
            ext = String(name[dot...])
            stem = String(name[..<dot])
        }
        return (stem, ext)
    }

    /// Shortens the stem so the result stays within 255 UTF-8 bytes.
    static func fitted(stem: String, suffix: String, ext: String) -> String {
        var stem = stem
        while (stem + suffix + ext).utf8.count > maxUTF8Bytes, !stem.isEmpty {
            stem.removeLast()
        }
        return stem + suffix + ext
    }
}
