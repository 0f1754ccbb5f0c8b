import Foundation
import Hummingbird
import NimbusAPI
import NIOFoundationCompat

/// WebDAV class 2: `LOCK`/`UNLOCK`, the `If` header, and 423 for a write to a locked path without its token.
extension DAVRequest {
    /// Seconds a lock lasts when the client does not say (and at most, whatever it says).
    static let defaultLockTimeout = 600
    static let maxLockTimeout = 3600

    static func lockPath(_ names: [String]) -> String { names.joined(separator: "/") }

    // MARK: The If header (RFC 4918 §10.4)

    struct IfCondition {
        enum Kind {
            case token(String)
            case etag(String)
        }
        var not: Bool
        var kind: Kind
    }

    struct IfList {
        /// The tagged resource (its names), or nil for the request's own.
        var resource: [String]?
        var conditions: [IfCondition]
    }

    /// The `If` header's lists; a header that does not parse is a 400.
    func ifLists() throws -> [IfList]? {
        guard let header = request.headers[.init("If")!] else { return nil }
        var lists: [IfList] = []
        var tag: [String]?
        var index = header.startIndex
        func skipSpace() { while index < header.endIndex, header[index].isWhitespace { index = header.index(after: index) } }
        func read(until end: Character) throws -> String {
            guard let close = header[index...].firstIndex(of: end) else { throw DAVError(.badRequest, "The If header is not well-formed.") }
            let text = String(header[header.index(after: index)..<close])
            index = header.index(after: close)
            return text
        }
        while true {
            skipSpace()
            guard index < header.endIndex else { break }
            switch header[index] {
            case "<":
                // A resource under this request's mount or another of the same tree (a chunked upload's final
                // MOVE tags its destination in the files tree).
                tag = try destinationNames(try read(until: ">")) ?? ["\u{0}not-here"]
            case "(":
                index = header.index(after: index)
                var conditions: [IfCondition] = []
                while true {
                    skipSpace()
                    guard index < header.endIndex else { throw DAVError(.badRequest, "The If header has an unclosed list.") }
                    if header[index] == ")" {
                        index = header.index(after: index)
                        break
                    }
                    var not = false
                    if header[index...].lowercased().hasPrefix("not") {
                        not = true
                        index = header.index(index, offsetBy: 3)
                        skipSpace()
                    }
                    guard index < header.endIndex else { throw DAVError(.badRequest, "The If header is not well-formed.") }
                    switch header[index] {
                    case "<": conditions.append(IfCondition(not: not, kind: .token(try read(until: ">"))))
                    case "[": conditions.append(IfCondition(not: not, kind: .etag(try read(until: "]"))))
                    default: throw DAVError(.badRequest, "The If header is not well-formed.")
                    }
                }
                guard !conditions.isEmpty else { throw DAVError(.badRequest, "The If header has an empty list.") }
                lists.append(IfList(resource: tag, conditions: conditions))
            default:
                throw DAVError(.badRequest, "The If header is not well-formed.")
            }
        }
        guard !lists.isEmpty else { throw DAVError(.badRequest, "The If header has no list.") }
        return lists
    }

    /// Lock tokens the request submits (every positive state token of its `If` header).
    static func submittedTokens(_ lists: [IfList]?) -> Set<String> {
        var tokens: Set<String> = []
        for list in lists ?? [] {
            for condition in list.conditions where !condition.not {
                if case .token(let token) = condition.kind { tokens.insert(token) }
            }
        }
        return tokens
    }

    /// Whether the `If` header holds: one of its lists has every condition true (a lock token: a live lock on
    /// that resource has it; an entity tag: the resource's). False → 412, and nothing is done.
    func ifHolds(_ me: Principal, _ lists: [IfList], names: [String], locks: [DAVLock]) async throws -> Bool {
        for list in lists {
            let resource = list.resource ?? names
            let path = Self.lockPath(resource)
            var etag: String?
            var looked = false
            var holds = true
            for condition in list.conditions {
                var value: Bool
                switch condition.kind {
                case .token(let token):
                    value = locks.contains { $0.token == token && $0.covers(path) }
                case .etag(let tag):
                    if !looked {
                        etag = try await resolve(me, resource)?.davETag
                        looked = true
                    }
                    value = etag.map { ETag.matches(tag, $0) } ?? false
                }
                if condition.not { value.toggle() }
                if !value {
                    holds = false
                    break
                }
            }
            if holds { return true }
        }
        return false
    }

    /// Checks the `If` header (412) and that every lock on what the request changes had its token submitted
    /// (423). `targets` are lock paths; `subtree` also counts locks inside them (DELETE, MOVE of a folder).
    @discardableResult
    func checkLocks(_ me: Principal, names: [String], targets: [(path: String, subtree: Bool)]) async throws -> [DAVLock] {
        let locks = try await dependencies.webDAV.davLocks(userId: owner, now: dependencies.now)
        let lists = try ifLists()
        if let lists, !(try await ifHolds(me, lists, names: names, locks: locks)) {
            throw DAVError(.preconditionFailed, "The If header does not hold (a lock token or entity tag in it does not match).")
        }
        let submitted = Self.submittedTokens(lists)
        for target in targets {
            for lock in locks where lock.covers(target.path) || (target.subtree && lock.isInside(target.path)) {
                guard submitted.contains(lock.token) else {
                    throw DAVError(
                        .init(code: 423, reasonPhrase: "Locked"),
                        "'/\(target.path)' is locked (\(lock.exclusive ? "exclusive" : "shared") lock on '/\(lock.path)'); send its token in an If header.",
                        condition: "<d:lock-token-submitted><d:href>\(Self.xmlEscape(Self.lockHref(lock)))</d:href></d:lock-token-submitted>")
                }
            }
        }
        return locks
    }

    /// Locks on `path` or inside it go with a DELETE or MOVE of it.
    func releaseLocks(_ me: Principal, inside path: String, from locks: [DAVLock]) async throws {
        try await dependencies.webDAV.releaseDAVLocks(userId: owner, tokens: locks.filter { $0.isInside(path) }.map(\.token))
    }

    // MARK: LOCK and UNLOCK

    /// A new lock (body: `DAV:lockinfo`), or a refresh (no body, the token in `If`). A lock on a name that does not
    /// exist makes an empty file there (201), as RFC 4918 says.
    func lock(_ me: Principal, _ names: [String]) async throws -> Response {
        let body = try await request.body.collect(upTo: 1 << 20)
        let path = Self.lockPath(names)
        let timeout = Self.lockTimeout(request.headers[.init("Timeout")!])
        if body.readableBytes == 0 || Data(buffer: body).allSatisfy({ $0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09 }) {
            let locks = try await dependencies.webDAV.davLocks(userId: owner, now: dependencies.now)
            let lists = try ifLists()
            guard let lists, try await ifHolds(me, lists, names: names, locks: locks) else {
                throw DAVError(.preconditionFailed, "A lock refresh names the lock's token in an If header.")
            }
            let submitted = Self.submittedTokens(lists)
            guard let held = locks.first(where: { submitted.contains($0.token) && $0.covers(path) }),
                let refreshed = try await dependencies.webDAV.refreshDAVLock(userId: owner, token: held.token, now: dependencies.now)
            else { throw DAVError(.preconditionFailed, "No lock of yours with that token covers '/\(path)'.") }
            return Self.lockResponse(refreshed, status: .ok)
        }
        let info = try DAVXML.parse(Data(buffer: body))
        guard info.namespace == "DAV:", info.name == "lockinfo" else { throw DAVError(.badRequest, "The body must be a DAV:lockinfo element.") }
        let scope = info.children.first { $0.namespace == "DAV:" && $0.name == "lockscope" }?.children.first
        guard let scope, scope.namespace == "DAV:", scope.name == "exclusive" || scope.name == "shared" else {
            throw DAVError(.badRequest, "A DAV:lockinfo names its lockscope: exclusive or shared.")
        }
        let type = info.children.first { $0.namespace == "DAV:" && $0.name == "locktype" }?.children.first
        guard let type, type.namespace == "DAV:", type.name == "write" else { throw DAVError(.badRequest, "Only write locks exist (DAV:locktype write).") }
        let lockOwner = info.children.first { $0.namespace == "DAV:" && $0.name == "owner" }?.innerXML ?? ""
        let depth = request.headers[.init("Depth")!]?.trimmingCharacters(in: .whitespaces).lowercased() ?? "infinity"
        guard depth == "0" || depth == "infinity" else { throw DAVError(.badRequest, "LOCK takes Depth 0 or infinity.") }

        let existing = try await resolve(me, names)
        if let existing {
            try authorize(me, existing, .write)
        } else {
            guard !names.isEmpty else { throw DAVError(.notFound, "The root is missing.") }
            _ = try await parentFolder(me, of: names)
        }
        try await checkLocks(me, names: names, targets: existing == nil ? [(path, false)] : [])
        let lock = DAVLock(
            token: "opaquelocktoken:" + UUID().uuidString.lowercased(), userId: owner, path: path, infinite: depth == "infinity",
            exclusive: scope.name == "exclusive", owner: lockOwner, timeoutSeconds: timeout, expiresAt: dependencies.now.addingTimeInterval(TimeInterval(timeout)))
        guard try await dependencies.webDAV.acquireDAVLock(lock, now: dependencies.now) else {
            throw DAVError(.init(code: 423, reasonPhrase: "Locked"), "'/\(path)' is locked by another lock that conflicts with this one.", condition: "<d:no-conflicting-lock/>")
        }
        var status = HTTPResponse.Status.ok
        if existing == nil {
            let parent = try await parentFolder(me, of: names)
            do {
                let name = try FilesController.validName(names[names.count - 1])
                _ = try await dependencies.content.commitContent(
                    userId: parent.userId, target: .new(parentId: parent.id, name: name, policy: .fail),
                    content: .inline([], mimeType: MimeType.guess(forName: name)), now: dependencies.now)
            } catch {
                try await dependencies.webDAV.releaseDAVLocks(userId: owner, tokens: [lock.token])
                throw error
            }
            status = .created
        }
        return Self.lockResponse(lock, status: status)
    }

    func unlock(_ me: Principal, _ names: [String]) async throws -> Response {
        guard let header = request.headers[.init("Lock-Token")!] else { throw DAVError(.badRequest, "UNLOCK needs a Lock-Token header.") }
        let token = header.trimmingCharacters(in: CharacterSet(charactersIn: " <>"))
        let locks = try await dependencies.webDAV.davLocks(userId: owner, now: dependencies.now)
        guard locks.contains(where: { $0.token == token && $0.covers(Self.lockPath(names)) }) else {
            throw DAVError(.conflict, "No lock with that token covers this path.", condition: "<d:lock-token-matches-request-uri/>")
        }
        try await dependencies.webDAV.releaseDAVLocks(userId: owner, tokens: [token])
        return Response(status: .noContent)
    }

    /// `Timeout: Second-N` or `Infinite` (the first the server takes), capped at an hour.
    static func lockTimeout(_ header: String?) -> Int {
        guard let header else { return defaultLockTimeout }
        for part in header.split(separator: ",") {
            let value = part.trimmingCharacters(in: .whitespaces).lowercased()
            if value == "infinite" { return maxLockTimeout }
            if value.hasPrefix("second-"), let seconds = Int(value.dropFirst(7)), seconds > 0 { return min(seconds, maxLockTimeout) }
        }
        return defaultLockTimeout
    }

    static func lockHref(_ lock: DAVLock) -> String {
        href(lock.path.isEmpty ? [] : lock.path.components(separatedBy: "/"), folder: false)
    }

    static func activeLock(_ lock: DAVLock) -> String {
        let root = lockHref(lock)
        return "<d:activelock><d:locktype><d:write/></d:locktype><d:lockscope><d:\(lock.exclusive ? "exclusive" : "shared")/></d:lockscope>"
            + "<d:depth>\(lock.infinite ? "infinity" : "0")</d:depth>"
            + (lock.owner.isEmpty ? "" : "<d:owner>\(lock.owner)</d:owner>")
            + "<d:timeout>Second-\(lock.timeoutSeconds)</d:timeout>"
            + "<d:locktoken><d:href>\(xmlEscape(lock.token))</d:href></d:locktoken>"
            + "<d:lockroot><d:href>\(xmlEscape(root))</d:href></d:lockroot></d:activelock>"
    }

    static func lockResponse(_ lock: DAVLock, status: HTTPResponse.Status) -> Response {
        let xml = "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<d:prop xmlns:d=\"DAV:\"><d:lockdiscovery>\(activeLock(lock))</d:lockdiscovery></d:prop>\n"
        return Response(
            status: status,
            headers: [
                .contentType: "application/xml; charset=utf-8", .init("Lock-Token")!: "<\(lock.token)>", .contentLength: String(xml.utf8.count),
            ],
            body: .init(byteBuffer: ByteBuffer(string: xml)))
    }

    static let supportedLock =
        "<d:lockentry><d:lockscope><d:exclusive/></d:lockscope><d:locktype><d:write/></d:locktype></d:lockentry>"
        + "<d:lockentry><d:lockscope><d:shared/></d:lockscope><d:locktype><d:write/></d:locktype></d:lockentry>"
}
