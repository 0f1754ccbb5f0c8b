import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import PostgresNIO
import ServiceLifecycle

/// ``ChangeNotifier`` across replicas: every commit sends `pg_notify('nimbus_changes', '<user> <seq>')` inside its
/// transaction (delivered when it commits, see ``SQLTransaction/announce(userId:seq:)``), and each replica
/// `LISTEN`s on one connection of its own and wakes its local long-polls and event streams.
///
/// A commit on this replica wakes local listeners at once, without waiting for the notification's round trip.
/// While the listening connection is down it reconnects every second; whenever `LISTEN` is (re-)established —
/// at start-up too — every local listener whose user has newer changes is woken, so a change committed meanwhile
/// is not left waiting for a timeout.
final class PostgresChangeNotifier: ChangeNotifier, Service {
    static let channel = "nimbus_changes"

    let local = LocalChangeNotifier()
    let location: PostgresDatabase.Location
    let logger: Logger
    /// Reads a user's newest change sequence number from the database (set once the store exists).
    let latestSeq = NIOLockedValueBox<(@Sendable (String) async throws -> Int64)?>(nil)

    init(location: PostgresDatabase.Location, logger: Logger) {
        self.location = location
        self.logger = logger
    }

    func notify(userId: String, seq: Int64) { local.notify(userId: userId, seq: seq) }
    func subscribe(userId: String) -> AsyncStream<Int64> { local.subscribe(userId: userId) }
    func latest(userId: String) -> Int64 { local.latest(userId: userId) }

    func run() async throws {
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            do {
                let connection = try await PostgresConnection.connect(
                    on: MultiThreadedEventLoopGroup.singleton.next(), configuration: location.configuration, id: 0, logger: logger)
                do {
                    try await cancelWhenGracefulShutdown {
                        try await connection.listen(on: Self.channel) { notifications in
                            // Listening now: whoever started waiting before (at start-up, or while the connection
                            // was down) looks again, so a commit made meanwhile is not left for the timeout.
                            await self.catchUp()
                            for try await notification in notifications {
                                let parts = notification.payload.split(separator: " ")
                                if parts.count == 2, let seq = Int64(parts[1]) { self.local.notify(userId: String(parts[0]), seq: seq) }
                            }
                        }
                    }
                } catch {
                    try? await connection.close()
                    throw error
                }
                try? await connection.close()
            } catch {
                if Task.isShuttingDownGracefully || Task.isCancelled { return }
                logger.warning("change notifications: the database connection failed; reconnecting", metadata: ["error": "\(error)"])
            }
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: .seconds(1)) }
        }
    }

    /// Once listening: whoever waits here learns of changes committed while notifications could not arrive.
    func catchUp() async {
        guard let latestSeq = latestSeq.withLockedValue({ $0 }) else { return }
        for user in local.subscribedUsers {
            if let seq = try? await latestSeq(user), seq > local.latest(userId: user) { local.notify(userId: user, seq: seq) }
        }
    }
}
