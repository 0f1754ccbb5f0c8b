import Foundation

/// How many revisions a file keeps: the newest `keepLast`, and every one younger than `keepFor`
/// (`--revisions-keep`, `--revisions-days`). Trashed items are purged after ``ServerConfiguration/trashRetention``.
public struct RevisionRetention: Sendable, Equatable {
    public var keepLast: Int = 100
    public var keepFor: Duration = .seconds(30 * 24 * 3600)

    public init(keepLast: Int = 100, keepFor: Duration = .seconds(30 * 24 * 3600)) {
        self.keepLast = keepLast
        self.keepFor = keepFor
    }

    /// The revisions to delete, given all revisions of one file ordered newest first: those past the newest
    /// `keepLast` that are also older than `keepFor`. The head (first) is never pruned.
    public func prunable<R>(_ newestFirst: [R], now: Date, date: (R) -> Date) -> [R] {
        var result: [R] = []
        for (index, revision) in newestFirst.enumerated() where index >= max(keepLast, 1) {
            if now.timeIntervalSince(date(revision)) > keepFor.timeInterval {
                result.append(revision)
            }
        }
        return result
    }
}
