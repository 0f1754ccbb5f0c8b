import Foundation
import Hummingbird
import ServiceLifecycle
import NimbusAPI

/// The change feed (`/v1/changes`, Dropbox-style cursor with long-poll) and live events (`/v1/events`, SSE).
struct ChangesController: Sendable {
    let dependencies: Dependencies

    func register(_ routes: inout RouteTable) {
        routes.on(Routes.changesStart, use: start)
        routes.on(Routes.changes, use: changes)
        routes.on(Routes.events, use: events)
    }

    @Sendable func start(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        // The principal's own feed, through the access decision on its root.
        _ = try await dependencies.root(for: me, .list)
        let seq = try await dependencies.files.latestSeq(userId: me.userId)
        return try JSONResponse.make(ChangeCursor(cursor: dependencies.tokens.cursors.encode(seq, userId: me.userId)))
    }

    /// Changes after the cursor. With `timeout > 0` and nothing new, waits (≤ 60 s) and answers as soon as a
    /// commit lands. An unknown or compacted cursor is a 410: the client lists everything again.
    @Sendable func changes(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        _ = try await dependencies.root(for: me, .list)
        guard let raw = request.query("cursor") else {
            throw DriveError.badRequest("Pass the 'cursor' from GET /v1/changes/start or the previous page.")
        }
        var limit = 100
        if let text = request.query("limit") {
            guard let value = Int(text), value >= 1 else { throw DriveError.badRequest("'limit' must be a whole number from 1 to 1000.") }
            limit = min(value, 1000)
        }
        var timeout = 0.0
        if let text = request.query("timeout") {
            guard let value = Double(text), value >= 0, value.isFinite else {
                throw DriveError.badRequest("'timeout' must be a number of seconds from 0 to 60.")
            }
            // At most 60 s, or less when the operator says so (a proxy in front that cuts idle answers sooner).
            timeout = min(value, 60, dependencies.configuration.longPollLimit.timeInterval)
        }
        guard let seq = dependencies.tokens.cursors.decode(raw, userId: me.userId) else { throw Cursor.gone }
        guard var page = try await dependencies.files.changes(userId: me.userId, after: seq, limit: limit) else { throw Cursor.gone }
        if page.changes.isEmpty && timeout > 0 {
            let notifier = dependencies.notifier
            let userId = me.userId
            let wait = Duration.milliseconds(Int64(timeout * 1000))
            // A server shutting down answers now rather than holding its shutdown for the long-poll; so does this
            // device signing out (listened for first, then checked: a sign-out in between is not missed).
            let signedOut = dependencies.signOuts.stream(for: me.deviceId)
            _ = try await dependencies.principal(request)
            await cancelWhenGracefulShutdown {
                await withTaskGroup(of: Void.self) { group in
                    group.addTask { await notifier.wait(userId: userId, after: seq, timeout: wait) }
                    group.addTask { for await _ in signedOut {} }
                    await group.next()
                    group.cancelAll()
                }
            }
            // Still signed in? A device signed out meanwhile (here or on another replica) gets 401, not data.
            _ = try await dependencies.principal(request)
            guard let again = try await dependencies.files.changes(userId: me.userId, after: seq, limit: limit) else { throw Cursor.gone }
            page = again
        }
        let next = page.changes.last?.seq ?? seq
        // Items of a share are shown as the grantee sees them: the mount they come through, once per mount.
        var reaches: [String: Reach] = [:]
        var records: [FileRecord] = []
        for change in page.changes {
            guard var record = change.file else { continue }
            if let mountId = change.mountId {
                if reaches[mountId] == nil, let mount = try await dependencies.shares.mount(id: mountId, userId: me.userId) {
                    reaches[mountId] = try await dependencies.shares.reach(userId: me.userId, itemId: mount.itemId, now: dependencies.now)
                }
                record.seenThrough = reaches[mountId].map { reach in
                    var inside = reach
                    inside.isRoot = record.id == reach.grant.itemId
                    return inside
                }
            }
            records.append(record)
        }
        var shown = try await dependencies.present(records, for: me)[...]
        let list = ChangeList(
            changes: page.changes.map { change in
                var file = change.file == nil ? nil : shown.popFirst()
                if change.mountId != nil { file?.mountId = change.mountId }
                return Change(seq: change.userSeq, type: change.kind, fileId: change.fileId, file: file, mountId: change.mountId)
            },
            cursor: dependencies.tokens.cursors.encode(next, userId: me.userId), hasMore: page.hasMore)
        return try JSONResponse.make(list)
    }

    /// `text/event-stream`: `event: change` with `data: {"cursor": "..."}` after every commit of the user's,
    /// and a comment every 15 s so proxies and clients know the stream is alive.
    @Sendable func events(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        _ = try await dependencies.root(for: me, .list)
        let notifier = dependencies.notifier
        let heartbeat = dependencies.configuration.heartbeatInterval
        let subscription = notifier.subscribe(userId: me.userId)
        let signedOut = dependencies.signOuts.stream(for: me.deviceId)
        let userId = me.userId
        let body = ResponseBody { writer in
            try await Self.stream(
                subscription, heartbeat: heartbeat, signedOut: signedOut, cursor: { dependencies.tokens.cursors.encode($0, userId: userId) },
                stillSignedIn: { (try? await dependencies.principal(request)) != nil }, into: &writer)
            try await writer.finish(nil)
        }
        return Response(
            status: .ok,
            headers: [.contentType: "text/event-stream", .cacheControl: "no-cache", .init("X-Accel-Buffering")!: "no"],
            body: body)
    }

    /// The event stream: ends when the server shuts down, when the device signs out here (`signedOut` finishes),
    /// or when a change or heartbeat finds it signed out elsewhere (`stillSignedIn`) — never an event after that.
    static func stream(
        _ subscription: AsyncStream<Int64>, heartbeat: Duration, signedOut: AsyncStream<Void>, cursor: @escaping @Sendable (Int64) -> String,
        stillSignedIn: @escaping @Sendable () async -> Bool, into writer: inout any ResponseBodyWriter
    ) async throws {
        enum Event: Sendable {
            case change(Int64)
            case heartbeat
        }
        let (events, continuation) = AsyncStream.makeStream(of: Event.self, bufferingPolicy: .bufferingNewest(16))
        // A server shutting down ends the stream (clients reconnect), instead of waiting for it forever.
        try await withGracefulShutdownHandler {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    for await seq in subscription { continuation.yield(.change(seq)) }
                    continuation.finish()
                }
                group.addTask {
                    while !Task.isCancelled {
                        try await Task.sleep(for: heartbeat)
                        continuation.yield(.heartbeat)
                    }
                }
                group.addTask {
                    for await _ in signedOut {}
                    continuation.finish()
                }
                // Signed out between the request's check and `signedOut` being there: end now.
                guard await stillSignedIn() else {
                    group.cancelAll()
                    return
                }
                try await writer.write(ByteBuffer(string: "retry: 3000\n: connected\n\n"))
                for await event in events {
                    guard await stillSignedIn() else { break }
                    switch event {
                    case .change(let seq):
                        try await writer.write(ByteBuffer(string: "event: change\ndata: {\"cursor\":\"\(cursor(seq))\"}\n\n"))
                    case .heartbeat:
                        try await writer.write(ByteBuffer(string: ": heartbeat\n\n"))
                    }
                }
                group.cancelAll()
            }
        } onGracefulShutdown: {
            continuation.finish()
        }
    }
}

/// Cursors are opaque to clients (``CursorCodec``); one the server cannot read is a 410.
enum Cursor {
    static var gone: DriveError {
        .gone("This cursor is unknown or too old; list the folders again and start over from GET /v1/changes/start.", code: .cursorExpired)
    }
}
