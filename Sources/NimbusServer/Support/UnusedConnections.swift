import Hummingbird
import HummingbirdCore
import HummingbirdWebSocket
import Logging
import NIOCore
import ServiceLifecycle

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
        inner.setup(channel: channel, logger: logger).flatMapThrowing { value in
            let watcher = FirstBytesWatcher(idleTimeout: idleTimeout, eventLoop: channel.eventLoop)
            try channel.pipeline.syncOperations.addHandler(watcher, position: .first)
            return Value(inner: value, watcher: watcher)
        }
    }

    func handle(value: Value, logger: Logger) async {
        await withGracefulShutdownHandler {
            await inner.handle(value: value.inner, logger: logger)
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

    /// Closes the connection if nothing was received on it yet (from any thread).
    func closeIfUnused() {
        eventLoop.execute { self.closeNowIfUnused() }
    }

    private func closeNowIfUnused() {
        guard !used, let context else { return }
        context.close(promise: nil)
    }
}
