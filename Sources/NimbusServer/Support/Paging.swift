import Foundation
import NimbusAPI

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

    /// Where this page sits among `totalItems`, as listings answer it.
    func pagination(totalItems: Int) -> Pagination {
        Pagination(page: page, limit: limit, totalItems: totalItems, nextPage: nextPage(totalItems: totalItems))
    }
}

/// How a folder listing is sorted (`sort=name|modified|size`, `order=asc|desc`): folders always first, then by the
/// key, names breaking ties (and ids, for the listings where names repeat).
struct ListingOrder: Equatable, Sendable {
    enum Key: String, Sendable {
        case name, modified, size
    }

    var key: Key = .name
    var descending = false

    static let byName = ListingOrder()

    static func parse(sort: String?, order: String?) throws(DriveError) -> ListingOrder {
        var result = ListingOrder()
        if let sort {
            guard let key = Key(rawValue: sort) else { throw .badRequest("'sort' must be name, modified or size.") }
            result.key = key
        }
        if let order {
            switch order {
            case "asc": result.descending = false
            case "desc": result.descending = true
            default: throw .badRequest("'order' must be asc or desc.")
            }
        }
        return result
    }

    /// The `ORDER BY` terms, with `name` the column the names are shown from.
    func sql(name: String = "name") -> String {
        let direction = descending ? "DESC" : "ASC"
        switch key {
        case .name: return "is_folder DESC, \(name) \(direction)"
        case .modified: return "is_folder DESC, modified_at \(direction), \(name) ASC, id"
        case .size: return "is_folder DESC, size \(direction), \(name) ASC, id"
        }
    }
}
