import Crypto
import Foundation
import Hummingbird
import NimbusAPI

/// How Nextcloud's apps sign in: never with the account password itself, but with an app password the person grants
/// on a page of the server, in a browser.
///
/// **Login Flow v2** (the desktop app, current phone apps):
/// 1. `POST /index.php/login/v2` → `{poll: {token, endpoint}, login}`; the app opens `login` in a browser and polls;
/// 2. the login page (`GET …/login/v2/flow/TOKEN`) names the app asking (from its `User-Agent`) and signs in with
///    the account's user name and password (failures count towards the login lockout);
/// 3. a second page asks to grant; granting makes an app password labelled with the app's name, sealed in the
///    flow with a key only the poll token gives (the database never holds it readable);
/// 4. `POST /index.php/login/v2/poll` (`token=…`) answers 404 until then, `{server, loginName, appPassword}` once
///    granted — and the flow is deleted as it is read, so a second poll is 404 again. Flows last 20 minutes.
///
/// **Login Flow v1** (older app builds, in an embedded browser): `GET /index.php/login/flow` shows the same pages;
/// granting answers with a redirect to `nc://login/server:URL&user:NAME&password:APP-PASSWORD`, which the app reads.
///
/// The pages are plain HTML forms in the web app's style (its stylesheet; no script). The grant form carries a
/// secret made when the page signed in, so no other site can submit it.
struct LoginFlow {
    let dependencies: Dependencies
    let request: Request
    let context: NimbusRequestContext

    static let lifetime: TimeInterval = 20 * 60

    func respond(route: String) async throws -> Response {
        let parts = route.split(separator: "/").map(String.init)  // ["login", "v2", …] or ["login", "flow", …]
        let v2 = parts.count >= 2 && parts[1] == "v2"
        switch (request.method, parts.count) {
        case (.post, 2) where v2: return try await start()
        case (.post, 3) where v2 && parts[2] == "poll": return try await poll()
        case (.get, 4) where v2 && parts[2] == "flow": return try await page(token: parts[3], v2: true)
        case (.post, 4) where v2 && parts[2] == "flow": return try await submit(token: parts[3], v2: true)
        case (.get, 2) where !v2: return try await startV1()
        case (.get, 3) where !v2: return try await page(token: parts[2], v2: false)
        case (.post, 3) where !v2: return try await submit(token: parts[2], v2: false)
        default:
            return NextcloudMiddleware.text(.notFound, "No such sign-in route: \(request.method.rawValue) \(request.uri.path).")
        }
    }

    var serverURL: String { NextcloudMiddleware.serverURL(request, configuration: dependencies.configuration) }

    // MARK: Login Flow v2: the app's side

    func start() async throws -> Response {
        let pollToken = randomToken(length: 64)
        let loginToken = randomToken(length: 40)
        let now = dependencies.now
        try await dependencies.accounts.createLoginFlow(
            LoginFlowRecord(
                loginToken: loginToken, pollHash: Self.pollHash(pollToken), clientName: Self.clientName(request), createdAt: now,
                expiresAt: now.addingTimeInterval(Self.lifetime)))
        let body = OCSValue.object([
            ("poll", .object([("token", .string(pollToken)), ("endpoint", .string(serverURL + "/index.php/login/v2/poll"))])),
            ("login", .string(serverURL + "/index.php/login/v2/flow/" + loginToken)),
        ]).json
        return Self.json(.ok, body)
    }

    func poll() async throws -> Response {
        let form = try await Self.form(request)
        guard let token = form["token"] ?? request.uri.queryParameters.get("token"), !token.isEmpty else {
            return Self.json(.badRequest, #"{"error":"The poll token is missing: send token=… as the form body."}"#)
        }
        guard let flow = try await dependencies.accounts.takeLoginFlow(pollHash: Self.pollHash(token), now: dependencies.now),
            let sealed = flow.sealed, let loginName = flow.loginName, let password = Self.unseal(sealed, pollToken: token)
        else {
            // Not granted yet (or never, or collected already, or expired): the apps poll again on 404.
            return Self.json(.notFound, "[]")
        }
        let body = OCSValue.object([("server", .string(serverURL)), ("loginName", .string(loginName)), ("appPassword", .string(password))]).json
        return Self.json(.ok, body)
    }

    // MARK: Login Flow v1

    func startV1() async throws -> Response {
        let loginToken = randomToken(length: 40)
        let now = dependencies.now
        try await dependencies.accounts.createLoginFlow(
            LoginFlowRecord(loginToken: loginToken, pollHash: nil, clientName: Self.clientName(request), createdAt: now, expiresAt: now.addingTimeInterval(Self.lifetime)))
        guard let flow = try await dependencies.accounts.loginFlow(loginToken: loginToken, now: now) else {
            return Self.gone()
        }
        return signInPage(flow, v2: false, error: nil, status: .ok)
    }

    // MARK: The pages

    func page(token: String, v2: Bool) async throws -> Response {
        guard let flow = try await dependencies.accounts.loginFlow(loginToken: token, now: dependencies.now), (flow.pollHash != nil) == v2, flow.sealed == nil else {
            return Self.gone()
        }
        return signInPage(flow, v2: v2, error: nil, status: .ok)
    }

    func submit(token: String, v2: Bool) async throws -> Response {
        guard let flow = try await dependencies.accounts.loginFlow(loginToken: token, now: dependencies.now), (flow.pollHash != nil) == v2, flow.sealed == nil else {
            return Self.gone()
        }
        let form = try await Self.form(request)
        if form["step"] == "grant" { return try await grant(flow, secret: form["grant"] ?? "", v2: v2) }
        let username = (form["user"] ?? "").trimmingCharacters(in: .whitespaces)
        let password = form["password"] ?? ""
        guard !username.isEmpty, !password.isEmpty else {
            return signInPage(flow, v2: v2, error: "Enter your user name and password.", status: .badRequest)
        }
        let outcome = try await dependencies.signIn(username: username, remoteIP: context.remoteIP) { () -> UserRecord? in
            let user = try await dependencies.accounts.user(username: username)
            let ok = try await dependencies.verifyPassword(password, hash: user?.passwordHash ?? Accounts.dummyHash)
            return ok ? user : nil
        }
        switch outcome {
        case .signedIn(let user):
            guard user.disabledAt == nil else {
                return signInPage(flow, v2: v2, error: DriveError.accountDisabled.body.error.message, status: .unauthorized)
            }
            let secret = randomToken(length: 32)
            guard try await dependencies.accounts.signInLoginFlow(loginToken: flow.loginToken, userId: user.id, grantHash: Self.hash(secret), now: dependencies.now) else {
                return Self.gone()
            }
            return grantPage(flow, user: user, secret: secret, v2: v2)
        case .lockedOut(let wait):
            return signInPage(flow, v2: v2, error: "Too many failed sign-ins for this account from this address; try again in \(wait) s.", status: .tooManyRequests)
        case .refused:
            return signInPage(flow, v2: v2, error: "Wrong user name or password.", status: .unauthorized)
        }
    }

    func grant(_ flow: LoginFlowRecord, secret: String, v2: Bool) async throws -> Response {
        guard let userId = flow.userId, let user = try await dependencies.accounts.user(id: userId), !secret.isEmpty else {
            return signInPage(flow, v2: v2, error: "Sign in first.", status: .badRequest)
        }
        let appPassword = AppPasswords.make()
        let sealed = v2 ? try Self.seal(appPassword, flow: flow) : nil
        guard try await dependencies.accounts.grantLoginFlow(
            loginToken: flow.loginToken, grantHash: Self.hash(secret), label: flow.clientName, passwordHash: AppPasswords.hash(appPassword),
            sealed: sealed, loginName: user.username, now: dependencies.now) != nil
        else {
            return Self.gone()
        }
        if v2 {
            return Self.html(
                .ok, title: "Connected",
                body: """
                    <div class="card narrow" id="granted"><h1>Account connected</h1>
                    <p><strong>\(Self.escape(flow.clientName))</strong> is now signed in to <strong>\(Self.escape(user.username))</strong>'s files. You can close this window.</p>
                    <p class="muted">It has its own app password, listed under Settings in the web app, where you can revoke it at any time.</p></div>
                    """)
        }
        var location = "nc://login/server:" + serverURL
        location += "&user:" + (user.username.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? user.username)
        location += "&password:" + (appPassword.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(["-"])) ?? appPassword)
        return Response(status: .seeOther, headers: [.location: location, .cacheControl: "no-store", .contentLength: "0"])
    }

    func action(_ flow: LoginFlowRecord, v2: Bool) -> String {
        (v2 ? "/index.php/login/v2/flow/" : "/index.php/login/flow/") + flow.loginToken
    }

    func signInPage(_ flow: LoginFlowRecord, v2: Bool, error: String?, status: HTTPResponse.Status) -> Response {
        let alert = error.map { "<div class=\"alert\" role=\"alert\" id=\"error\">\(Self.escape($0))</div>" } ?? ""
        let host = Self.escape(serverURL)
        return Self.html(
            status, title: "Connect to your account",
            body: """
                \(alert)
                <form class="card narrow" method="post" action="\(action(flow, v2: v2))" autocomplete="on">
                <h1>Connect to your account</h1>
                <p><strong id="client-name">\(Self.escape(flow.clientName))</strong> wants to connect to your files on <span class="muted">\(host)</span>. Sign in to continue.</p>
                <input type="hidden" name="step" value="signin">
                <label>User name <input id="user" name="user" autocomplete="username" autocapitalize="none" required autofocus></label>
                <label>Password <input id="password" name="password" type="password" autocomplete="current-password" required></label>
                <button type="submit" id="submit-signin" class="primary">Sign in</button>
                </form>
                """)
    }

    func grantPage(_ flow: LoginFlowRecord, user: UserRecord, secret: String, v2: Bool) -> Response {
        var response = Self.html(
            .ok, title: "Grant access",
            body: """
                <form class="card narrow" method="post" action="\(action(flow, v2: v2))">
                <h1>Grant access</h1>
                <p>Signed in as <strong>\(Self.escape(user.username))</strong>.</p>
                <p>Give <strong id="client-name">\(Self.escape(flow.clientName))</strong> access to your files? It gets an app password of its own, which you can revoke in Settings at any time.</p>
                <input type="hidden" name="step" value="grant">
                <input type="hidden" name="grant" value="\(secret)">
                <button type="submit" id="submit-grant" class="primary">Grant access</button>
                </form>
                """)
        // v1 answers the grant with a redirect to the app's own nc:// scheme.
        if !v2 { response.headers[.contentSecurityPolicy] = WebController.contentSecurityPolicy.replacingOccurrences(of: "form-action 'self'", with: "form-action 'self' nc:") }
        return response
    }

    static func gone() -> Response {
        html(
            .notFound, title: "Sign-in expired",
            body: """
                <div class="card narrow" id="expired"><h1>This sign-in has expired</h1>
                <p>The link is used up or older than 20 minutes. Start again from the app.</p></div>
                """)
    }

    // MARK: Helpers

    /// The app's name for the page and the app password's label, from its `User-Agent`.
    static func clientName(_ request: Request) -> String {
        let agent = request.headers[.userAgent] ?? ""
        let lower = agent.lowercased()
        let name: String
        if lower.contains("mirall") || lower.contains("nextcloud desktop") || lower.contains("nextcloudcmd") {
            name = "Nextcloud desktop" + (hostPart(agent).map { " (\($0))" } ?? "")
        } else if lower.contains("nextcloud-android") {
            name = "Nextcloud Android app"
        } else if lower.contains("nextcloud-ios") {
            name = "Nextcloud iOS app"
        } else if agent.isEmpty {
            name = "An app"
        } else {
            name = agent
        }
        let line = String(name.unicodeScalars.filter { $0.value >= 32 && $0.value != 127 })
        return String(line.prefix(100))
    }

    /// The operating system a desktop client's `User-Agent` names ("Mozilla/5.0 (Linux) mirall/3.7.3 …").
    static func hostPart(_ agent: String) -> String? {
        guard let open = agent.firstIndex(of: "("), let close = agent[open...].firstIndex(of: ")") else { return nil }
        let inside = agent[agent.index(after: open)..<close].trimmingCharacters(in: .whitespaces)
        return inside.isEmpty || inside.count > 40 ? nil : inside
    }

    static func hash(_ text: String) -> String { SHA256.hash(data: Data(text.utf8)).hexString }

    /// The key pair a poll token stands for: its private key is the token's SHA-256, and the flow stores only the
    /// public key (hex, as `pollHash`) — the poll finds the flow by it, and the grant seals the app password to it,
    /// so only whoever holds the token can open it (not the database, not the server after the grant).
    static func pollKey(_ token: String) -> Curve25519.KeyAgreement.PrivateKey? {
        try? Curve25519.KeyAgreement.PrivateKey(rawRepresentation: SHA256.hash(data: Data(("nimbus-login-flow:" + token).utf8)))
    }

    static func pollHash(_ token: String) -> String {
        pollKey(token).map { Hex.encode([UInt8]($0.publicKey.rawRepresentation)) } ?? hash(token)
    }

    static func sealingKey(_ shared: SharedSecret) -> SymmetricKey {
        shared.hkdfDerivedSymmetricKey(using: SHA256.self, salt: Data(), sharedInfo: Data("nimbus-login-flow".utf8), outputByteCount: 32)
    }

    /// The password sealed to the flow's public key: an ephemeral public key (32 bytes), then an AES-GCM box.
    static func seal(_ password: String, flow: LoginFlowRecord) throws -> [UInt8] {
        guard let pollHash = flow.pollHash, let raw = [UInt8](hex: pollHash) else { throw DriveError.internalError("The sign-in has no poll key.") }
        let recipient = try Curve25519.KeyAgreement.PublicKey(rawRepresentation: raw)
        let ephemeral = Curve25519.KeyAgreement.PrivateKey()
        let box = try AES.GCM.seal(Data(password.utf8), using: sealingKey(try ephemeral.sharedSecretFromKeyAgreement(with: recipient)))
        guard let combined = box.combined else { throw DriveError.internalError("Could not seal the app password.") }
        return [UInt8](ephemeral.publicKey.rawRepresentation) + [UInt8](combined)
    }

    static func unseal(_ sealed: [UInt8], pollToken: String) -> String? {
        guard sealed.count > 32, let key = pollKey(pollToken),
            let ephemeral = try? Curve25519.KeyAgreement.PublicKey(rawRepresentation: sealed.prefix(32)),
            let shared = try? key.sharedSecretFromKeyAgreement(with: ephemeral),
            let box = try? AES.GCM.SealedBox(combined: Data(sealed.dropFirst(32))),
            let plain = try? AES.GCM.open(box, using: sealingKey(shared))
        else { return nil }
        return String(data: plain, encoding: .utf8)
    }

    /// An `application/x-www-form-urlencoded` body (at most 16 KiB).
    static func form(_ request: Request) async throws -> [String: String] {
        let body = try await request.body.collect(upTo: 16 * 1024)
        var fields: [String: String] = [:]
        for pair in String(buffer: body).split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            func decode(_ text: Substring) -> String { String(text).replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? "" }
            guard let key = parts.first else { continue }
            fields[decode(key)] = parts.count > 1 ? decode(parts[1]) : ""
        }
        return fields
    }

    static func json(_ status: HTTPResponse.Status, _ body: String) -> Response {
        Response(
            status: status, headers: [.contentType: "application/json; charset=utf-8", .cacheControl: "no-store"],
            body: .init(byteBuffer: ByteBuffer(string: body)))
    }

    static func html(_ status: HTTPResponse.Status, title: String, body: String) -> Response {
        let page = """
            <!doctype html>
            <html lang="en">
            <head>
            <meta charset="utf-8">
            <meta name="viewport" content="width=device-width, initial-scale=1">
            <title>\(escape(title)) – Nimbus</title>
            <link rel="icon" href="data:,">
            <link rel="stylesheet" href="/app.css">
            </head>
            <body>
            <header class="bar"><span class="brand">Nimbus</span></header>
            <main>
            \(body)
            </main>
            </body>
            </html>

            """
        return Response(
            status: status,
            headers: [
                .contentType: "text/html; charset=utf-8", .contentSecurityPolicy: WebController.contentSecurityPolicy, .cacheControl: "no-store",
                .init("Referrer-Policy")!: "no-referrer", .init("X-Frame-Options")!: "DENY",
            ],
            body: .init(byteBuffer: ByteBuffer(string: page)))
    }

    static func escape(_ text: String) -> String {
        DAVRequest.xmlEscape(text).replacingOccurrences(of: "'", with: "&#39;")
    }
}
