import Hummingbird
import HummingbirdCore
import HummingbirdWebSocket
import Logging
import NIOCore
import ServiceLifecycle
import Synchronization

/// HTTP/1.1 with WebSocket upgrades (``HTTP1WebSocketUpgradeChannel``), and connections that never send a byte closed.
///
/// Until a connection's first request arrives, the upgrade channel waits for it with no idle timeout and does not hear
/// of a graceful shutdown. HTTP clients open spare connections (AsyncHTTPClient does when requests queue, and may never
/// use one): such a connection would stay open for ever, and a stopping server would wait on it for ever — a test run
/// hung so. Here a connection with nothing received is closed at the idle timeout and when the server stops; once
/// bytes came, the upgrade channel's own handling (idle timeout, graceful close between requests) takes over.
struct ClosingUnusedConnections: ServerChildChannel, HTTPChannelHandler {
    let inner: HTTP1WebSocketUpgradeChannel
    let idleTimeout: TimeAmount?

    var responder: HTTPChannelHandler.Responder { inner.responder }

    struct Value: ServerChildChannelValue {
        let inner: HTTP1WebSocketUpgradeChannel.Value
        let watcher: FirstBytesWatcher
        var channel: any Channel { inner.channel }
    }

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        // In the pipeline from the start (the channel initializer runs on its event loop), before the upgrade channel's
        // handlers: a stop that comes while those are still being set up still finds it.
        let watcher = FirstBytesWatcher(idleTimeout: idleTimeout, eventLoop: channel.eventLoop)
        do {
            try channel.pipeline.syncOperations.addHandler(watcher, position: .first)
        } catch {
            return channel.eventLoop.makeFailedFuture(error)
        }
        return inner.setup(channel: channel, logger: logger).map { Value(inner: $0, watcher: watcher) }
    }

    func handle(value: Value, logger: Logger) async {
        // A connection closed here unused ends the upgrade channel's wait for a request with an error it logs as one:
        // that is expected, so it is logged at debug level instead.
        var quieted = logger
        quieted.handler = QuietWhenClosedUnused(inner: logger.handler, watcher: value.watcher)
        await withGracefulShutdownHandler {
            await inner.handle(value: value.inner, logger: quieted)
        } onGracefulShutdown: {
            value.watcher.closeIfUnused()
        }
    }
}

/// Sits first in a connection's pipeline until its first bytes arrive, then leaves it; meanwhile it closes the
/// connection at the idle timeout or when asked (the server stopping).
final class FirstBytesWatcher: ChannelInboundHandler, RemovableChannelHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    private let idleTimeout: TimeAmount?
    private let eventLoop: any EventLoop
    // Touched on the channel's event loop only.
    private var context: ChannelHandlerContext?
    private var used = false
    private var timer: Scheduled<Void>?
    /// Whether this watcher closed the connection (nothing was received on it).
    let closedUnused = Atomic(false)

    init(idleTimeout: TimeAmount?, eventLoop: any EventLoop) {
        self.idleTimeout = idleTimeout
        self.eventLoop = eventLoop
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        if let idleTimeout {
            timer = context.eventLoop.scheduleTask(in: idleTimeout) { [weak self] in self?.closeNowIfUnused() }
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        timer?.cancel()
        self.context = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if !used {
            used = true
            timer?.cancel()
            context.fireChannelRead(data)
            context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
            return
        }
        context.fireChannelRead(data)
    }

    /// The server stopping asks every connection it accepted to finish (quiesce), and waits for all of them to close —
    /// also one it accepted whose handling had not begun yet (so no graceful-shutdown handler of ours was set up for
    /// it; a stop under load once waited on such a connection): an unused one is closed now.
    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is ChannelShouldQuiesceEvent, !used {
            closeNowIfUnused()
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    /// Closes the connection if nothing was received on it yet (from any thread).
    func closeIfUnused() {
        eventLoop.execute { self.closeNowIfUnused() }
    }

    private func closeNowIfUnused() {
        guard !used, let context else { return }
        closedUnused.store(true, ordering: .relaxed)
        context.close(promise: nil)
    }
}

/// A connection's log handler that logs what follows its close by ``FirstBytesWatcher`` at debug level (the upgrade
/// channel reports the ended wait as an error).
struct QuietWhenClosedUnused: LogHandler {
    var inner: any LogHandler
    let watcher: FirstBytesWatcher

    var metadataProvider: Logger.MetadataProvider? {
        get { inner.metadataProvider }
        set { inner.metadataProvider = newValue }
    }
    var metadata: Logger.Metadata {
        get { inner.metadata }
        set { inner.metadata = newValue }
    }
    var logLevel: Logger.Level {
        get { inner.logLevel }
        set { inner.logLevel = newValue }
    }
    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { inner[metadataKey: key] }
        set { inner[metadataKey: key] = newValue }
    }

    func log(event: LogEvent) {
        var event = event
        if event.level > .debug, watcher.closedUnused.load(ordering: .relaxed) {
            event.level = .debug
            guard inner.logLevel <= .debug else { return }
        }
        inner.log(event: event)
    }
}
