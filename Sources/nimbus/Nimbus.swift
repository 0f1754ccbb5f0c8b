import ArgumentParser
import Foundation
import NimbusServer

/// `nimbus`: the Drive server, its administration, and the reference client (file commands, folder sync).
/// Client state lives in `$NIMBUS_HOME` (default `~/.nimbus`): one home, one device.
@main
struct Nimbus: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "nimbus",
        abstract: "A self-hostable file drive: the server, and the tools around it.",
        version: "0.1.0",
        subcommands: [
            Serve.self, User.self, Login.self, Logout.self, PassphraseCommand.self, UnlockCommand.self, LockCommand.self, WhoAmI.self, AboutCommand.self, List.self, MakeDirectory.self, Remove.self,
            Move.self, Put.self, Get.self, Versions.self, Restore.self, Trash.self, Untrash.self, Uploads.self, Status.self,
            Conflicts.self, SyncCommand.self, RemoteCommand.self, AppPasswordCommand.self, AdminCommand.self,
        ])
}
