import Foundation

/// A user's storage quota: the bytes stored for them (each distinct block once, revisions and trash included) may not
/// go over their limit. Checked wherever content comes in — before a body is read when its size is declared (a simple
/// upload's `Content-Length`, a resumable session's `size`, a chunked upload's `OC-Total-Length`), and again at the
/// commit, when the blocks it would add are known.
enum QuotaRule {
    /// Throws 507 `quota_exceeded` if `needed` more bytes would take `used` over `limit` (nil: no limit).
    static func check(adding needed: Int64, used: Int64, limit: Int64?) throws {
        guard let limit, needed > 0, used + needed > limit else { return }
        throw DriveError.quotaExceeded(used: used, limit: limit, needed: needed)
    }
}
