import ArgumentParser
import Foundation
import NimbusAPI
import NimbusSync

/// `nimbus share`: folders and files shared with other users of the server, in a role.
struct ShareCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "share",
        abstract: "Share a folder or file with another user, list, change or revoke grants.",
        discussion: """
            Roles: viewer (read), editor (and change what is inside), manager (and share on). The other user sees the \
            share in 'nimbus shares' and accepts it with 'nimbus accept GRANT'.
            """,
        subcommands: [ShareAdd.self, ShareList.self, ShareSet.self, ShareRevoke.self], defaultSubcommand: ShareAdd.self)
}

struct ShareAdd: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "add", abstract: "Share PATH with a user (the default).")

    @Argument(help: "The remote folder or file.")
    var path: String

    @Option(name: .customLong("with"), help: "The user to share with (their user name).")
    var user: String

    @Option(help: "viewer, editor or manager.")
    var role: ShareRole

    @Option(help: "When the grant ends: 2026-12-31T23:59:59Z, '2026-12-31 18:00' (local), 2026-12-31, or how long from now (90m, 2h, 7d).")
    var expires: String?

    @OptionGroup var output: OutputOptions

    func validate() throws {
        if let expires, Expiry.date(expires, now: Date()) == nil {
            throw ValidationError("'\(expires)' is not a time: try 2026-12-31T23:59:59Z, '2026-12-31 18:00', 2026-12-31 or 7d (from now).")
        }
    }

    func run() async throws {
        let engine = try await Home.current.signedInEngine()
        await refresh(engine)
        let fileId = try await SharedPath.fileId(path, in: engine)
        let grant = try await engine.server().call(
            Routes.createGrant, fileId, body: GrantRequest(user: user, role: role, expiresAt: expires.flatMap { Expiry.date($0, now: Date()) }))
        if output.json { return try Output.json(grant) }
        Output.line(
            "Shared \(RemotePath.normalized(path)) with \(grant.grantee.username) as \(grant.role.rawValue)\(Expiry.until(grant.expiresAt)) (grant \(grant.id)); "
                + "they accept it with 'nimbus accept \(grant.id)'.", options: output)
    }
}

struct ShareList: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "ls", abstract: "List the grants on PATH, or on everything you share.")

    @Argument(help: "The remote folder or file (all your shares when absent).")
    var path: String?

    @OptionGroup var output: OutputOptions

    func run() async throws {
        let engine = try await Home.current.signedInEngine()
        let client = try await engine.server()
        let list: GrantList
        if let path {
            await refresh(engine)
            list = try await client.call(Routes.grants, try await SharedPath.fileId(path, in: engine))
        } else {
            list = try await client.call(Routes.outgoingGrants)
        }
        if output.json { return try Output.json(list) }
        if list.grants.isEmpty { Output.line(path == nil ? "You share nothing." : "\(RemotePath.normalized(path ?? "/")) is not shared.", options: output) }
        for grant in list.grants {
            print("\(grant.id)  \(grant.grantee.username)  \(grant.role.rawValue)  \(grant.state.rawValue)\(Expiry.until(grant.expiresAt))  \(grant.itemId)")
        }
    }
}

struct ShareSet: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "set", abstract: "Change a grant's role or expiry (from the next request on).")

    @Argument(help: "The grant id (see 'nimbus share ls').")
    var grant: String

    @Option(help: "viewer, editor or manager.")
    var role: ShareRole?

    @Option(help: "A new end: as for 'nimbus share --expires'.")
    var expires: String?

    @OptionGroup var output: OutputOptions

    func validate() throws {
        guard role != nil || expires != nil else { throw ValidationError("Say what changes: --role ROLE, --expires WHEN, or both.") }
        if let expires, Expiry.date(expires, now: Date()) == nil { throw ValidationError("'\(expires)' is not a time.") }
    }

    func run() async throws {
        let engine = try await Home.current.signedInEngine()
        let updated = try await engine.server().call(
            Routes.updateGrant, grant, body: GrantUpdate(role: role, expiresAt: expires.flatMap { Expiry.date($0, now: Date()) }))
        if output.json { return try Output.json(updated) }
        Output.line("\(updated.grantee.username) now has \(updated.role.rawValue)\(Expiry.until(updated.expiresAt)) (grant \(updated.id)).", options: output)
    }
}

struct ShareRevoke: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "revoke", abstract: "End a grant: the share leaves the other user's tree (your items stay as they are).")

    @Argument(help: "The grant id (see 'nimbus share ls').")
    var grant: String

    @OptionGroup var output: OutputOptions

    func run() async throws {
        let engine = try await Home.current.signedInEngine()
        try await engine.server().callWithoutResult("DELETE", Routes.deleteGrant.path(grant))
        Output.line("Revoked grant \(grant).", options: output)
    }
}

/// `nimbus shares`: what others share with me.
struct SharesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "shares", abstract: "List what other users share with you (pending ones to accept with 'nimbus accept GRANT').")

    @OptionGroup var output: OutputOptions

    func run() async throws {
        let engine = try await Home.current.signedInEngine()
        let list = try await engine.server().call(Routes.incomingShares)
        if output.json { return try Output.json(list) }
        if list.shares.isEmpty { Output.line("Nobody shares anything with you.", options: output) }
        for share in list.shares {
            let grant = share.grant
            print("\(grant.id)  \(grant.state.rawValue)  \(grant.role.rawValue)  from \(share.owner.username)\(Expiry.until(grant.expiresAt))  \(share.item.name)\(share.item.isFolder ? "/" : "")")
        }
    }
}

struct AcceptCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "accept", abstract: "Accept a share: it appears in your tree (your root, under its own name, unless you say).")

    @Argument(help: "The grant id (see 'nimbus shares').")
    var grant: String

    @Option(help: "The folder of yours it goes in (default: /).")
    var to: String?

    @Option(help: "Its name in your tree (default: its own; a taken name becomes 'name (1)').")
    var name: String?

    @OptionGroup var output: OutputOptions

    func run() async throws {
        let engine = try await Home.current.signedInEngine()
        await refresh(engine)
        var parentId: String?
        if let to { parentId = try await SharedPath.fileId(to, in: engine) }
        let accepted = try await engine.server().call(Routes.acceptShare, grant, body: AcceptShareRequest(parentId: parentId, name: name))
        await refresh(engine)
        if output.json { return try Output.json(accepted) }
        let path = RemotePath.normalized((to ?? "/") + "/" + accepted.file.name)
        Output.line("Accepted: \(accepted.file.owner?.username ?? "their") share is at \(path).", options: output)
    }
}

struct DeclineCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "decline", abstract: "Decline a share offered to you.")

    @Argument(help: "The grant id (see 'nimbus shares').")
    var grant: String

    @OptionGroup var output: OutputOptions

    func run() async throws {
        let engine = try await Home.current.signedInEngine()
        try await engine.server().callWithoutResult("POST", Routes.declineShare.path(grant))
        Output.line("Declined \(grant).", options: output)
    }
}

struct LeaveCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "leave", abstract: "Leave a share you accepted: it leaves your tree; its owner's items stay as they are.")

    @Argument(help: "Where the share is in your tree.")
    var path: String

    @OptionGroup var output: OutputOptions

    func run() async throws {
        let engine = try await Home.current.signedInEngine()
        await refresh(engine)
        let client = try await engine.server()
        let file = try await client.call(Routes.file, try await SharedPath.fileId(path, in: engine))
        guard file.mountId != nil, file.shared == true else {
            throw CLIError("\(RemotePath.normalized(path)) is not the top of a share someone gave you; 'nimbus shares' lists those.")
        }
        try await client.callWithoutResult("DELETE", Routes.deleteFile.path(file.id))
        await refresh(engine)
        Output.line("Left \(RemotePath.normalized(path)) (shared by \(file.owner?.username ?? "its owner")).", options: output)
    }
}

extension ShareRole: ExpressibleByArgument {}

/// A remote path's server id, for the commands that name items to the server.
enum SharedPath {
    static func fileId(_ path: String, in engine: SyncEngine) async throws -> String {
        let item = try await RemotePath.item(path, in: engine)
        if item.id == .root { return "root" }
        guard let fileId = item.fileId else {
            throw CLIError("\(RemotePath.normalized(path)) is not on the server yet; run 'nimbus status' and try again once it is sent.")
        }
        return fileId
    }
}

/// Times a grant ends, as the commands take and say them.
enum Expiry {
    /// An absolute time (as `nimbus untrash --since` takes it) or how long from now (90m, 2h, 7d).
    static func date(_ text: String, now: Date) -> Date? {
        if let amount = Double(text.dropLast()), amount > 0, let unit = text.last {
            let seconds: Double? = ["m": 60, "h": 3600, "d": 86400, "w": 604_800][unit]
            if let seconds { return now.addingTimeInterval(amount * seconds) }
        }
        return Untrash.time(text, now: now)
    }

    static func until(_ date: Date?) -> String { date.map { " until \(Output.date($0))" } ?? "" }
}

/// `nimbus link`: public links — anyone with one views, edits or drops files, no account needed.
struct LinkCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "link", abstract: "Make, list and turn off public links; fetch what a link shares.",
        subcommands: [LinkCreate.self, LinkList.self, LinkRevoke.self, LinkGet.self])
}

struct LinkCreate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "create", abstract: "A public link to PATH (view only unless you say).")

    @Argument(help: "The remote folder or file.")
    var path: String

    @Flag(help: "Read the link's password from standard input (at least 8 characters).")
    var passwordStdin = false

    @Option(help: "When the link stops working: as for 'nimbus share --expires'.")
    var expires: String?

    @Option(help: "How many whole downloads it allows.")
    var maxDownloads: Int?

    @Flag(help: "Visitors may also add files and new versions.")
    var edit = false

    @Flag(help: "A file drop: visitors add files to the folder and see nothing in it.")
    var uploadOnly = false

    @OptionGroup var output: OutputOptions

    func validate() throws {
        if edit && uploadOnly { throw ValidationError("Choose --edit or --upload-only, not both.") }
        if let expires, Expiry.date(expires, now: Date()) == nil { throw ValidationError("'\(expires)' is not a time.") }
    }

    func run() async throws {
        var password: String?
        if passwordStdin {
            password = readLine(strippingNewline: true)
            guard let given = password, !given.isEmpty else { throw CLIError("--password-stdin: no password on standard input.") }
        }
        let engine = try await Home.current.signedInEngine()
        await refresh(engine)
        let fileId = try await SharedPath.fileId(path, in: engine)
        let request = LinkRequest(
            access: edit ? .edit : uploadOnly ? .upload : .view, password: password, expiresAt: expires.flatMap { Expiry.date($0, now: Date()) },
            maxDownloads: maxDownloads)
        let link = try await engine.server().call(Routes.createLink, fileId, body: request)
        if output.json { return try Output.json(link) }
        if output.quiet { return }
        print(link.url)
        Output.error("A \(link.access.rawValue) link to \(RemotePath.normalized(path))\(link.passwordSet ? ", with a password" : "")\(Expiry.until(link.expiresAt)) (link \(link.id)).")
    }
}

struct LinkList: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "ls", abstract: "List your public links (their URLs: 'nimbus link ls --id ID').")

    @Option(help: "Show this link with its URL.")
    var id: String?

    @OptionGroup var output: OutputOptions

    func run() async throws {
        let engine = try await Home.current.signedInEngine()
        let client = try await engine.server()
        if let id {
            let link = try await client.call(Routes.link, id)
            if output.json { return try Output.json(link) }
            print(link.url)
            return
        }
        let list = try await client.call(Routes.links)
        if output.json { return try Output.json(list) }
        if list.links.isEmpty { Output.line("You have no links.", options: output) }
        for link in list.links {
            let limit = link.maxDownloads.map { " \(link.downloads)/\($0) downloads" } ?? " \(link.downloads) downloads"
            print("\(link.id)  \(link.access.rawValue)\(link.passwordSet ? "  password" : "")\(Expiry.until(link.expiresAt))\(limit)")
        }
    }
}

struct LinkRevoke: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "revoke", abstract: "Turn a link off (it answers 'gone' from then on).")

    @Argument(help: "The link id (see 'nimbus link ls').")
    var id: String

    @OptionGroup var output: OutputOptions

    func run() async throws {
        let engine = try await Home.current.signedInEngine()
        try await engine.server().callWithoutResult("DELETE", Routes.deleteLink.path(id))
        Output.line("Turned off \(id).", options: output)
    }
}

/// Fetches what a public link shares, as anyone would (no account): a file to DEST (or `-`, standard output), a
/// folder into DEST as a folder.
struct LinkGet: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "get", abstract: "Download what a public link shares (no account needed).")

    @Argument(help: "The link: https://server/s/TOKEN.")
    var url: String

    @Argument(help: "Where to put it (default: its name here; - for standard output, a file only).")
    var destination: String?

    @Flag(help: "Read the link's password from standard input.")
    var passwordStdin = false

    @OptionGroup var output: OutputOptions

    func run() async throws {
        guard let parsed = URL(string: url), let scheme = parsed.scheme, let host = parsed.host, parsed.pathComponents.count >= 3,
            parsed.pathComponents[parsed.pathComponents.count - 2] == "s"
        else { throw CLIError("'\(url)' is not a link: it looks like https://server/s/TOKEN.") }
        let token = parsed.lastPathComponent
        guard let base = URL(string: "\(scheme)://\(host)\(parsed.port.map { ":\($0)" } ?? "")") else { throw CLIError("'\(url)' is not a link.") }
        let transport = AsyncHTTPClientTransport(baseURL: base)
        let info: PublicLinkInfo = try await Self.call(transport, TransportRequest(Routes.publicLink, token))
        var headers: [String: String] = [:]
        if info.passwordRequired {
            guard passwordStdin, let password = readLine(strippingNewline: true) else {
                throw CLIError("This link has a password: pass it on standard input with --password-stdin.")
            }
            let body = try JSONEncoder.nimbus.encode(LinkSessionRequest(password: password))
            let session: LinkSession = try await Self.call(
                transport, TransportRequest(Routes.publicSession, token, headers: ["Content-Type": "application/json"], body: body))
            headers["Authorization"] = "Bearer \(session.session)"
        }
        guard info.access != .upload else { throw CLIError("This link is a file drop: it lets you add files, not fetch them.") }
        if !info.isFolder {
            let target = destination ?? info.name
            try await Self.fetch(transport, token: token, itemId: info.itemId, headers: headers, to: target)
            if target != "-" { Output.line("Saved \(info.name) (\(Output.size(info.size))) to \(target)", options: output) }
            return
        }
        guard destination != "-" else { throw CLIError("A folder cannot go to standard output; give a folder to put it in.") }
        let root = URL(fileURLWithPath: destination ?? info.name)
        var count = 0
        var folders = [(info.itemId, root)]
        while let (folderId, url) = folders.popLast() {
            try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
            var page = 1
            while true {
                let list: FileList = try await Self.call(
                    transport, TransportRequest(Routes.publicItems, token, query: ["parentId": folderId, "page": String(page), "limit": "1000"], headers: headers))
                for file in list.files {
                    let name = try FileName.validated(file.name)
                    if file.isFolder {
                        folders.append((file.id, url.appending(path: name)))
                    } else {
                        try await Self.fetch(transport, token: token, itemId: file.id, headers: headers, to: url.appending(path: name).path)
                        count += 1
                    }
                }
                guard let next = list.pagination.nextPage else { break }
                page = next
            }
        }
        Output.line("Saved \(count) files of \(info.name) to \(root.path)", options: output)
    }

    static func call<T: Decodable>(_ transport: any Transport, _ request: TransportRequest) async throws -> T {
        let (head, data) = try await transport.send(request)
        try check(head, data)
        return try JSONDecoder.nimbus.decode(T.self, from: data)
    }

    static func check(_ head: TransportResponseHead, _ data: Data) throws {
        guard (200..<300).contains(head.status) else {
            let message = (try? JSONDecoder.nimbus.decode(APIErrorBody.self, from: data))?.error.message ?? "HTTP \(head.status)"
            throw CLIError("The link answered \(head.status): \(message)")
        }
    }

    /// One file's bytes to `path` (written to a temporary file, then moved there) or to standard output (`-`).
    static func fetch(_ transport: any Transport, token: String, itemId: String, headers: [String: String], to path: String) async throws {
        let request = TransportRequest(Routes.publicContent, token, itemId, headers: headers)
        if path == "-" {
            let (head, data) = try await transport.stream(request) { chunk in FileHandle.standardOutput.write(chunk) }
            try check(head, data)
            return
        }
        let partial = path + ".nimbus-partial"
        guard FileManager.default.createFile(atPath: partial, contents: nil), let handle = FileHandle(forWritingAtPath: partial) else {
            throw CLIError("Cannot write \(partial).")
        }
        do {
            let (head, data) = try await transport.stream(request) { chunk in try handle.write(contentsOf: chunk) }
            try handle.close()
            try check(head, data)
            if FileManager.default.fileExists(atPath: path) { try FileManager.default.removeItem(atPath: path) }
            try FileManager.default.moveItem(atPath: partial, toPath: path)
        } catch {
            try? handle.close()
            try? FileManager.default.removeItem(atPath: partial)
            throw error
        }
    }
}
