import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdWebSocket
import NIOCore
import NIOWebSocket

/// Nextcloud's `notify_push` at `/push/ws`, so the desktop app hears of a change in seconds instead of at its next
/// poll: a WebSocket on which the app sends its user name and then its app password (two text messages, within
/// 15 s), the server answers `authenticated` (or `err: Invalid credentials`, and closes), and then sends
/// `notify_file` whenever the user's change feed moves — fed by the same notifier as `/v1`'s long-poll and events, so
/// across replicas too. Bursts are coalesced to one message a second. Sign-in failures count towards the login
/// lockout like any other. The capability names this endpoint only; its `pre_auth` (for browsers) is not offered.
struct NotifyPush: Sendable {
    static let path = "/push/ws"
    let dependencies: Dependencies

    func shouldUpgrade(_ request: HTTPRequest, channel: any Channel) -> ShouldUpgradeResult<WebSocketDataHandler<HTTP1WebSocketUpgradeChannel.Context>> {
        guard let path = request.path, path.split(separator: "?", maxSplits: 1).first.map(String.init) == Self.path else { return .dontUpgrade }
        let remoteIP = channel.remoteAddress?.ipAddress ?? "unknown"
        return .upgrade([:]) { inbound, outbound, _ in
            try await session(inbound: inbound, outbound: outbound, remoteIP: remoteIP)
        }
    }

    func session(inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter, remoteIP: String) async throws {
        // One reader for the connection's messages; it ends when the app closes.
        let (messages, received) = AsyncStream.makeStream(of: String.self)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                defer { received.finish() }
                for try await message in inbound.messages(maxSize: 16 * 1024) {
                    if case .text(let text) = message { received.yield(text) }
                }
            }
            let credentials = try await withThrowingTaskGroup(of: (String, String)?.self) { race in
                race.addTask {
                    var parts: [String] = []
                    for await text in messages {
                        parts.append(text)
                        if parts.count == 2 { return (parts[0], parts[1]) }
                    }
                    return nil
                }
                race.addTask {
                    try await Task.sleep(for: .seconds(15))
                    return nil
                }
                let first = try await race.next() ?? nil
                race.cancelAll()
                return first
            }
            guard let (user, password) = credentials else {
                try? await outbound.write(.text("err: Send your user name and app password first."))
                try? await outbound.close(.policyViolation, reason: "not signed in")
                group.cancelAll()
                return
            }
            let header = "Basic " + Data("\(user):\(password)".utf8).base64EncodedString()
            guard case .signedIn(let principal, _) = try await dependencies.signIn(basicAuthorization: header, remoteIP: remoteIP) else {
                try? await outbound.write(.text("err: Invalid credentials"))
                try? await outbound.close(.policyViolation, reason: "invalid credentials")
                group.cancelAll()
                return
            }
            // Subscribed before saying so: nothing committed after "authenticated" is missed.
            let changes = dependencies.notifier.subscribe(userId: principal.userId)
            try await outbound.write(.text("authenticated"))
            group.addTask {
                for await _ in changes {
                    try await outbound.write(.text("notify_file"))
                    // The subscription keeps only the newest change meanwhile: a burst becomes one message.
                    try await Task.sleep(for: .seconds(1))
                }
            }
            group.addTask {
                // The app's later messages ("listen notify_file_id" and the like) are read and let go; the
                // connection ends when it closes.
                for await _ in messages {}
            }
            _ = try await group.next()
            group.cancelAll()
        }
    }
}
