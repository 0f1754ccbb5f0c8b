import Foundation
import Hummingbird
import HummingbirdTesting
import NIOCore
@testable import NimbusS3
import Testing

/// A store (or a proxy before it) whose error answer is long: the status and the code still come through.
@Suite("S3 error answers")
struct S3ErrorBodyTests {
    @Test("an error whose body is longer than a MiB is still the store's error (status and code), not 'could not be reached'")
    func longErrorBody() async throws {
        let router = Router()
        router.get("/bucket/{key}") { _, _ -> Response in
            let padding = String(repeating: "x", count: 3 << 20)
            let xml = "<?xml version=\"1.0\"?><Error><Code>AccessDenied</Code><Message>no</Message><Padding>\(padding)</Padding></Error>"
            return Response(status: .forbidden, headers: [.contentType: "application/xml"], body: .init(byteBuffer: ByteBuffer(string: xml)))
        }
        let app = Application(router: router)
        try await app.test(.live) { client in
            let s3 = S3Client(
                endpoint: URL(string: "http://127.0.0.1:\(client.port!)")!, bucket: "bucket",
                signer: SigV4Signer(accessKey: "a", secretKey: "b", region: "us-east-1"))
            do {
                _ = try await s3.get("object")
                Issue.record("a 403 was taken for content")
            } catch let error as S3Error {
                #expect(error.status == 403 && error.code == "AccessDenied", "\(error)")
            }
        }
    }
}
