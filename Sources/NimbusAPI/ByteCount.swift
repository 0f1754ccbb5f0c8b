import Foundation

/// Sizes as people type them: `1048576`, `512K`, `10MB`, `1.5GiB`, `2T` (binary units: K = 1024).
public enum ByteCount {
    public static func parse(_ text: String) -> Int64? {
        let trimmed = text.trimmingCharacters(in: .whitespaces).uppercased()
        guard !trimmed.isEmpty else { return nil }
        let k = 1024.0
        let units: [(String, Double)] = [
            ("TIB", k * k * k * k), ("GIB", k * k * k), ("MIB", k * k), ("KIB", k),
            ("TB", k * k * k * k), ("GB", k * k * k), ("MB", k * k), ("KB", k),
            ("T", k * k * k * k), ("G", k * k * k), ("M", k * k), ("K", k), ("B", 1),
        ]
        for (suffix, factor) in units where trimmed.hasSuffix(suffix) {
            let number = trimmed.dropLast(suffix.count).trimmingCharacters(in: .whitespaces)
            guard let value = Double(number), value >= 0, value.isFinite else { return nil }
            let bytes = value * factor
            return bytes < 9.2e18 ? Int64(bytes) : nil
        }
        guard let value = Int64(trimmed), value >= 0 else { return nil }
        return value
    }

    /// `1.5 GiB`, `12 KiB`, `300 B`.
    public static func format(_ bytes: Int64) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var value = Double(bytes)
        var unit = 0
        while value >= 1024 && unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        if unit == 0 { return "\(bytes) B" }
        let rounded = (value * 10).rounded() / 10
        return rounded == rounded.rounded() ? "\(Int(rounded)) \(units[unit])" : "\(rounded) \(units[unit])"
    }
}
