import Hummingbird
import NIOConcurrencyHelpers
import NIOCore

/// Answers a request that was refused before its body was read (a bad token, a full disk, a quota, a clash), even to
/// a client that writes its whole body before it reads anything — Python's `urllib`, and many HTTP libraries.
///
/// Without it such a client was never answered: with `Connection: close` (urllib always sends it) the server wrote
/// its answer and waited for the connection to close without reading, while the client, blocked writing the rest of
/// its body into a full socket, never got to read the answer. Here, as nginx's lingering close and Go's `net/http` do:
/// the answer goes out, then what is left of the body is read and thrown away — up to ``lingerLimit`` bytes, for at
/// most ``lingerTime``, and while the client keeps sending (a gap of ``lingerGap`` ends it). A request that asked for
/// `Connection: close` is then closed; a keep-alive one stays open for the next request when its body was drained to
/// the end (AsyncHTTPClient, which NimbusSync uses, takes an early answer only if the connection stays open while it
/// finishes sending), and is closed when it was not. A request whose handler read its body to the end is left as it was.
struct LingeringCloseMiddleware: RouterMiddleware {
    typealias Context = NimbusRequestContext

    static var lingerLimit: Int64 { 1 << 30 }
    static var lingerTime: Duration { .seconds(60) }
    static var lingerGap: Duration { .seconds(15) }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard Self.hasBody(request) else { return try await next(request, context) }
        let tap = BodyTap(request.body)
        var tapped = request
        tapped.body = RequestBody(asyncSequence: TappedBody(tap: tap))
        var response = try await next(tapped, context)
        guard !tap.ended else { return response }
        // Refused (or answered) with body bytes still on their way: answer, then linger.
        let closes = request.headers[.connection]?.lowercased().contains("close") == true
        if closes { response.headers[.connection] = "close" }
        let answer = response.body
        let channel = context.channel
        response.body = ResponseBody(contentLength: answer.contentLength) { writer in
            try await answer.write(writer)
            await tap.linger(limit: Self.lingerLimit, time: Self.lingerTime, gap: Self.lingerGap, channel: channel)
            if closes || !tap.ended { channel.close(promise: nil) }
        }
        return response
    }

    /// Whether a body follows the head (a length over 0, or chunked).
    static func hasBody(_ request: Request) -> Bool {
        if let length = request.headers[.contentLength] { return length != "0" }
        return request.headers[.transferEncoding] != nil
    }
}

/// One request body read through one iterator, whoever reads it: the handler first, then ``linger(limit:time:gap:channel:)``
/// for what it left. Reads never overlap (the handler has returned before the rest is read), so the iterator needs no
/// lock of its own; the flags are read from other tasks and are behind one.
final class BodyTap: @unchecked Sendable {
    private let body: RequestBody
    private var iterator: RequestBody.AsyncIterator?
    private let state = NIOLockedValueBox((ended: false, lastRead: ContinuousClock.now))

    init(_ body: RequestBody) { self.body = body }

    /// Whether the body was read to its end.
    var ended: Bool { state.withLockedValue { $0.ended } }

    func next() async throws -> ByteBuffer? {
        if ended { return nil }
        if iterator == nil { iterator = body.makeAsyncIterator() }
        let part = try await iterator?.next()
        state.withLockedValue {
            $0.lastRead = .now
            if part == nil { $0.ended = true }
        }
        return part
    }

    /// Reads and drops the rest of the body: until its end, `limit` bytes, `time`, or a `gap` with nothing sent —
    /// then the channel is closed, which ends a read still waiting.
    func linger(limit: Int64, time: Duration, gap: Duration, channel: any Channel) async {
        let deadline = ContinuousClock.now + time
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                var drained: Int64 = 0
                while drained < limit, let part = try? await self.next() { drained += Int64(part.readableBytes) }
            }
            group.addTask {
                while !Task.isCancelled {
                    let idle = self.state.withLockedValue { $0.lastRead } + gap
                    if ContinuousClock.now >= min(deadline, idle) {
                        channel.close(promise: nil)
                        return
                    }
                    try? await Task.sleep(for: .milliseconds(200))
                }
            }
            await group.next()
            group.cancelAll()
        }
    }
}

/// The request body a handler sees: read through the ``BodyTap``, so the middleware knows what it left.
struct TappedBody: AsyncSequence, Sendable {
    typealias Element = ByteBuffer
    let tap: BodyTap

    struct AsyncIterator: AsyncIteratorProtocol {
        let tap: BodyTap
        mutating func next() async throws -> ByteBuffer? { try await tap.next() }
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(tap: tap) }
}
