import ArgumentParser
import Foundation
import NimbusAPI
import NimbusSync

struct Login: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Sign this device in to a Nimbus server.")

    @Argument(help: "The server, e.g. http://127.0.0.1:8080")
    var url: String

    @Option(help: "Your username.")
    var username: String

    @Flag(help: "Read the password from standard input.")
    var passwordStdin = false

    @Option(help: "This device's name (shown in conflict copies).")
    var deviceName: String?

    func run() async throws {
        guard let server = URL(string: url), server.scheme == "http" || server.scheme == "https", server.host != nil else {
            throw ValidationError("'\(url)' is not a server URL (e.g. http://127.0.0.1:8080).")
        }
        let password: String
        if passwordStdin {
            guard let line = readLine(strippingNewline: true), !line.isEmpty else { throw CLIError("No password on standard input.") }
            password = line
        } else {
            guard let line = Terminal.readSecret(prompt: "Password for \(username): ") else {
                throw CLIError("No terminal to ask for a password; use --password-stdin.")
            }
            password = line
        }
        let home = Home.current
        var config = try home.loadConfig()
        if let deviceName { config.deviceName = deviceName }
        try home.save(config)
        let engine = try home.engine()
        do {
            try await engine.signIn(server: server, username: username, password: password)
        } catch let error as SyncError {
            throw CLIError("Login failed: \(error.description)")
        }
        config.server = server
        config.username = username
        try home.save(config)
        print("Logged in to \(server.absoluteString) as \(username) (device \(config.deviceName)).")
    }
}

struct Logout: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Sign this device out (local files and queued changes stay).")

    func run() async throws {
        let home = Home.current
        let engine = try home.engine()
        await engine.signOut()
        var config = try home.loadConfig()
        config.username = nil
        try home.save(config)
        print("Logged out.")
    }
}

struct WhoAmI: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "whoami", abstract: "Show the signed-in account.")

    @OptionGroup var output: OutputOptions

    func run() async throws {
        let home = Home.current
        let engine = try home.engine()
        guard let account = await engine.account else { throw CLIError("Not logged in. Run: nimbus login URL --username NAME") }
        let config = try home.loadConfig()
        if output.json {
            try Output.json(["username": account.username, "userId": account.userId, "server": account.server.absoluteString, "device": config.deviceName])
        } else {
            print("\(account.username) on \(account.server.absoluteString) (device \(config.deviceName))")
        }
    }
}

struct AboutCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "about", abstract: "Show the account's quota and the server's limits.")

    @OptionGroup var output: OutputOptions

    func run() async throws {
        let engine = try await Home.current.signedInEngine()
        let about: About = try await engine.server().call("GET", "/v1/about")
        if output.json { return try Output.json(about) }
        let limit = about.quota.limit.map(Output.size) ?? "unlimited"
        print("\(about.username): \(Output.size(about.quota.used)) used of \(limit)")
        print("largest file \(Output.size(about.maxUploadSize)), chunk size \(Output.size(about.chunkSize)), API \(about.apiVersion)")
    }
}
