import ArgumentParser
import Foundation
import NimbusServer

/// `nimbus`: the Drive server and its administration (client commands join as they land).
@main
struct Nimbus: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "nimbus",
        abstract: "A self-hostable file drive: the server, and the tools around it.",
        version: "0.1.0",
        subcommands: [Serve.self, User.self])
}
