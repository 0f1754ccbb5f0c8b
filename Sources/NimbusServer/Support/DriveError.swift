import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import NimbusAPI

/// Every failure the server reports, mapped to a status and a JSON body in one place (`response(from:context:)`).
public enum DriveError: Error, Sendable {
    case badRequest(String, code: APIErrorCode = .invalidRequest)
    case unauthorized(String = "Sign in first: send 'Authorization: Bearer <accessToken>'.")
    /// A 401 with its own code (a public link's password: `password_required`, `password_incorrect`).
    case unauthorizedCode(String, code: APIErrorCode)
    case forbidden(String)
    case notFound(String = "No such file or folder.")
    /// 404 `no_thumbnail`.
    case noThumbnail(String)
    case nameConflict(name: String, existingId: String)
    case versionConflict(String, current: File?)
    case conflict(String, code: APIErrorCode = .conflict)
    /// A request id that already made a file (`existingId`) with other content.
    case requestIdReused(String, existingId: String?)
    case gone(String, code: APIErrorCode = .gone)
    case preconditionFailed(String, current: File? = nil)
    case tooLarge(String)
    /// The request's header fields (431) or its target (414) are over the server's limits.
    case headersTooLarge(String)
    case uriTooLong(String)
    case rangeNotSatisfiable(String, size: Int64)
    case checksumMismatch(expected: String, actual: String)
    case tooManyRequests(String, retryAfter: Int)
    case quotaExceeded(used: Int64, limit: Int64, needed: Int64)
    /// The server's disk is full (or would be below its reserve): 507 `insufficient_storage`.
    case storageFull(String)
    case methodNotAllowed
    /// A block commit names blocks the store lacks: 409 `blocks_missing` with their hashes.
    case blocksMissing([String])
    /// A body in an encoding this route does not take: 415.
    case unsupportedEncoding(String)
    /// A store the server needs (database, blob store) cannot be reached: 503 + `Retry-After`.
    case unavailable(String, retryAfter: Int = 5)
    case internalError(String)

    public var status: HTTPResponse.Status {
        switch self {
        case .badRequest: .badRequest
        case .unauthorized, .unauthorizedCode: .unauthorized
        case .forbidden: .forbidden
        case .notFound, .noThumbnail: .notFound
        case .nameConflict, .versionConflict, .conflict, .requestIdReused: .conflict
        case .gone: .gone
        case .preconditionFailed: .preconditionFailed
        case .tooLarge: .contentTooLarge
        case .headersTooLarge: .init(code: 431, reasonPhrase: "Request Header Fields Too Large")
        case .uriTooLong: .init(code: 414, reasonPhrase: "URI Too Long")
        case .rangeNotSatisfiable: .rangeNotSatisfiable
        case .checksumMismatch: .unprocessableContent
        case .tooManyRequests: .tooManyRequests
        case .quotaExceeded, .storageFull: .init(code: 507, reasonPhrase: "Insufficient Storage")
        case .methodNotAllowed: .methodNotAllowed
        case .blocksMissing: .conflict
        case .unsupportedEncoding: .unsupportedMediaType
        case .unavailable: .serviceUnavailable
        case .internalError: .internalServerError
        }
    }

    var body: APIErrorBody {
        switch self {
        case .badRequest(let message, let code): APIErrorBody(code, message: message)
        case .unauthorized(let message): APIErrorBody(.unauthorized, message: message)
        case .unauthorizedCode(let message, let code): APIErrorBody(code, message: message)
        case .forbidden(let message): APIErrorBody(.forbidden, message: message)
        case .notFound(let message): APIErrorBody(.notFound, message: message)
        case .noThumbnail(let message): APIErrorBody(.noThumbnail, message: message)
        case .nameConflict(let name, let existingId):
            APIErrorBody(
                .nameConflict,
                message: "'\(name)' already exists in this folder (id \(existingId)); pass onConflict=rename or onConflict=replace.",
                existingId: existingId)
        case .versionConflict(let message, let current):
            APIErrorBody(.versionConflict, message: message, existingId: current?.id, file: current)
        case .conflict(let message, let code): APIErrorBody(code, message: message)
        case .requestIdReused(let message, let existingId): APIErrorBody(.requestIdReused, message: message, existingId: existingId)
        case .gone(let message, let code): APIErrorBody(code, message: message)
        case .preconditionFailed(let message, let current):
            APIErrorBody(.preconditionFailed, message: message, file: current)
        case .tooLarge(let message): APIErrorBody(.tooLarge, message: message)
        case .headersTooLarge(let message): APIErrorBody(.headersTooLarge, message: message)
        case .uriTooLong(let message): APIErrorBody(.uriTooLong, message: message)
        case .rangeNotSatisfiable(let message, _): APIErrorBody(.rangeNotSatisfiable, message: message)
        case .checksumMismatch(let expected, let actual):
            APIErrorBody(
                .checksumMismatch,
                message: "The content's SHA-256 is \(actual), not the expected \(expected); nothing was stored, upload again.")
        case .tooManyRequests(let message, _): APIErrorBody(.rateLimited, message: message)
        case .quotaExceeded(let used, let limit, let needed):
            APIErrorBody(
                .quotaExceeded,
                message: "Not enough storage: \(needed) bytes needed, \(max(0, limit - used)) of \(limit) left. Free space by emptying the trash or deleting files.")
        case .methodNotAllowed: APIErrorBody(.methodNotAllowed, message: "This route does not accept that method.")
        case .blocksMissing(let hashes):
            APIErrorBody(
                code: APIErrorCode.blocksMissing.rawValue,
                message: "\(hashes.count) of the blocks are not stored (listed in 'missing'); send them with PUT /v1/blocks/{sha256}, then commit again.",
                missing: hashes)
        case .unsupportedEncoding(let message): APIErrorBody(.unsupportedEncoding, message: message)
        case .unavailable(let message, _): APIErrorBody(.unavailable, message: message)
        case .internalError(let message): APIErrorBody(.internalError, message: message)
        case .storageFull(let message): APIErrorBody(.insufficientStorage, message: message)
        }
    }
}

extension DriveError: HTTPResponseError {
    public func response(from request: Request, context: some RequestContext) throws -> Response {
        var headers: HTTPFields = [.contentType: "application/json; charset=utf-8"]
        switch self {
        case .tooManyRequests(_, let retryAfter), .unavailable(_, let retryAfter):
            headers[.retryAfter] = String(retryAfter)
        case .rangeNotSatisfiable(_, let size):
            headers[.contentRange] = "bytes */\(size)"
        default:
            break
        }
        let data = (try? JSONEncoder.nimbus.encode(body)) ?? Data(#"{"error":{"code":"internal_error","message":"error encoding failed"}}"#.utf8)
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }
}

extension DriveError {
    /// Translates any error a handler or Hummingbird threw into the API's error shape.
    static func from(_ error: any Error) -> DriveError {
        switch error {
        case let error as DriveError:
            return error
        case let error as HTTPError:
            let message = error.body ?? "\(error.status.reasonPhrase)"
            switch error.status.code {
            case 400: return .badRequest(message)
            case 401: return .unauthorized()
            case 404: return .notFound("No such route: check the method and path against GET /openapi.yaml.")
            case 405: return .methodNotAllowed
            case 413: return .tooLarge("The request body is too large.")
            default: return .internalError(message)
            }
        case let error as DecodingError:
            return .badRequest("The JSON body is not valid: \(error.readableDescription)")
        case is NIOTooManyBytesError:
            // A JSON body over what `Request.decode` collects (1 MiB), on any route, signed in or not.
            return .tooLarge("The request body is too large for this route.")
        case _ where DiskSpace.isFull(error):
            return DiskSpace.fullError
        default:
            return .internalError("Something went wrong on the server; it has been logged. Try again.")
        }
    }
}

extension DecodingError {
    var readableDescription: String {
        switch self {
        case .keyNotFound(let key, _): "missing field '\(key.stringValue)'"
        case .typeMismatch(_, let context), .valueNotFound(_, let context):
            "wrong type at '\(context.codingPath.map(\.stringValue).joined(separator: "."))'"
        case .dataCorrupted(let context):
            context.codingPath.isEmpty ? "malformed JSON" : "bad value at '\(context.codingPath.map(\.stringValue).joined(separator: "."))'"
        @unknown default: "malformed JSON"
        }
    }
}

/// Turns every thrown error into the JSON error shape, so no route (or unknown route) answers otherwise.
struct ErrorMiddleware<Context: RequestContext>: RouterMiddleware {
    /// The routes, to answer 405 (with `Allow`) rather than 404 for a path that exists with other methods, and for
    /// a method no route takes (TRACE, CONNECT, …).
    var routes: RouteIndex?

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let error as HTTPError where error.status == .notFound && routes != nil {
            guard let routes else { throw error }
            let allowed = routes.methods(for: request.uri.path)
            guard !allowed.isEmpty || !routes.allMethods.contains(request.method.rawValue) else {
                return try DriveError.from(error).response(from: request, context: context)
            }
            var response = try DriveError.methodNotAllowed.response(from: request, context: context)
            if !allowed.isEmpty { response.headers[.allow] = allowed.sorted().joined(separator: ", ") }
            return response
        } catch {
            let driveError = DriveError.from(error)
            if case .internalError = driveError {
                context.logger.error("request failed", metadata: ["error": "\(String(reflecting: error))", "path": "\(LinkTokens.redacted(request.uri.path))"])
            }
            return try driveError.response(from: request, context: context)
        }
    }
}

extension DriveError {
    /// 401 `account_disabled`: the operator disabled the account; nothing signs in to it (its files are kept).
    static let accountDisabled = DriveError.unauthorizedCode(
        "This account is disabled by the server's operator; its files are kept. Ask them to enable it again.", code: .accountDisabled)
}
