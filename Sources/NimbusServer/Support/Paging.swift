import Foundation

/// `page` (1-based) and `limit` query parameters, checked and clamped.
struct Paging: Equatable, Sendable {
    static let defaultLimit = 100
    static let maxLimit = 1000

    var page: Int
    var limit: Int
    var offset: Int { (page - 1) * limit }

    /// Parses the raw query values: a missing value takes the default, a limit over 1000 is clamped,
    /// anything else that is not a positive integer is a 400.
    static func parse(page: String?, limit: String?) throws(DriveError) -> Paging {
        var result = Paging(page: 1, limit: defaultLimit)
        if let page {
            guard let value = Int(page), (1...1_000_000_000_000).contains(value) else {
                throw .badRequest("'page' must be a whole number from 1 to 1000000000000.")
            }
            result.page = value
        }
        if let limit {
            guard let value = Int(limit), value >= 1 else { throw .badRequest("'limit' must be a whole number from 1 to \(maxLimit).") }
            result.limit = min(value, maxLimit)
        }
        guard result.page <= Int.max / result.limit else { throw .badRequest("'page' is too large.") }
        return result
    }

    /// The next page number, if items remain after this page.
    func nextPage(totalItems: Int) -> Int? {
        offset + limit < totalItems ? page + 1 : nil
    }
}
