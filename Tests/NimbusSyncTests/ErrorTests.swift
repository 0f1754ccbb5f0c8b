import Foundation
import NimbusAPI
@testable import NimbusSync
import Testing

/// Errors are typed end to end: a server's error body is decoded once into an ``ErrorCode`` keyed by the API's codes,
/// each refusal becomes the ``ProviderError`` case that says what to do next, and retryability is a property of the
/// case, never read from a string.
@Suite("Typed errors")
struct ErrorTests {
    static func answer(_ status: Int, _ body: String, headers: [String: String] = [:]) -> (TransportResponseHead, Data) {
        (TransportResponseHead(status: status, headers: headers), Data(body.utf8))
    }

    static func body(_ code: String, _ message: String = "refused", extra: String = "") -> String {
        #"{"error":{"code":"\#(code)","message":"\#(message)"\#(extra)}}"#
    }

    @Test("a success carries no failure; an error body's code is the API's when known, kept as it came when not, the status when there is no body")
    func decodedOnce() throws {
        for status in [200, 201, 204, 304, 308] {
            let (head, data) = Self.answer(status, "{}")
            #expect(ServerFailure(head, data) == nil, "\(status)")
        }
        let (head, data) = Self.answer(409, Self.body("name_conflict", "taken", extra: #","existingId":"f1""#), headers: ["retry-after": "7"])
        let known = try #require(ServerFailure(head, data))
        #expect(known.code == .api(.nameConflict) && known.message == "taken" && known.existingId == "f1" && known.retryAfter == 7)
        let unknown = try #require(ServerFailure(Self.answer(400, Self.body("from_the_future")).0, Self.answer(400, Self.body("from_the_future")).1))
        #expect(unknown.code == .other("from_the_future"))
        let bare = try #require(ServerFailure(Self.answer(502, "<html>Bad Gateway</html>").0, Data("<html>Bad Gateway</html>".utf8)))
        #expect(bare.code == .other("http_502") && bare.message == "HTTP 502", "markup is not a message")
        let text = try #require(ServerFailure(TransportResponseHead(status: 502, headers: [:]), Data("upstream gone".utf8)))
        #expect(text.message == "upstream gone")
    }

    @Test("each refusal of the Nimbus server is the provider error that says what to do next")
    func providerCases() throws {
        func error(_ status: Int, _ code: String, headers: [String: String] = [:]) throws -> ProviderError {
            let (head, data) = Self.answer(status, Self.body(code), headers: headers)
            return NimbusProvider.error(try #require(ServerFailure(head, data)))
        }
        #expect(try error(409, "name_conflict") == .nameTaken(existing: nil))
        #expect(try error(409, "version_conflict") == .versionConflict(current: nil))
        #expect(try error(409, "request_id_reused") == .requestIdReused(existing: nil))
        #expect(try error(409, "mass_deletion_paused") == .deletionsPaused("refused"))
        #expect(try error(400, "trashed") == .notFound)
        #expect(try error(400, "not_a_folder") == .notAFolder("refused"))
        #expect(try error(400, "invalid_name") == .invalid("refused"))
        #expect(try error(404, "not_found") == .notFound)
        #expect(try error(410, "cursor_expired") == .gone)
        #expect(try error(429, "rate_limited", headers: ["retry-after": "3"]) == .retryAfter(seconds: 3))
        #expect(try error(507, "quota_exceeded") == .quotaExceeded("refused"))
        #expect(try error(500, "internal_error") == .server(status: 500, code: .api(.internalError), message: "refused"))
        #expect(try error(401, "unauthorized") == .unauthorized("refused"))
    }

    @Test("retryability is the case's: network, busy, expired and a paused deletion are tried again; a refusal is not")
    func retryable() {
        let again: [ProviderError] = [.network("reset"), .retryAfter(seconds: nil), .gone, .deletionsPaused("paused"),
            .server(status: 503, code: .api(.unavailable), message: "")]
        let not: [ProviderError] = [.invalid("bad"), .notAFolder("file"), .rootMissing("gone"), .unsupported("no feed"), .notFound,
            .server(status: 400, code: .other("webdav_400"), message: ""), .unauthorized("signed out")]
        for error in again { #expect(error.isRetryable, "\(error)") }
        for error in not { #expect(!error.isRetryable, "\(error)") }
        // What the engine reports keeps the meaning.
        #expect(SyncError(ProviderError.deletionsPaused("paused")).isRetryable)
        #expect(SyncError(ProviderError.deletionsPaused("paused")).code == .api(.massDeletionPaused))
        #expect(SyncError(ProviderError.rootMissing("gone")) == .remoteRootMissing("gone"))
        #expect(!SyncError.remoteRootMissing("gone").isRetryable)
        #expect(SyncError.refusedAsNotThere("not there").isRetryable)
        #expect(ServerFailure(TransportResponseHead(status: 401, headers: [:]), Data(Self.body("unauthorized", "revoked").utf8))?.syncError == .unauthorized("revoked"))
    }
}
