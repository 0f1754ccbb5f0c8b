import Crypto
import Foundation
import Hummingbird
import NimbusAPI

/// How content comes in, whatever the route — a simple upload, a batch entry, a resumable chunk, a block, a WebDAV
/// `PUT`, a Nextcloud chunk: the same admission before a byte is read (the largest file, room on the server's disk,
/// the owner's quota), the same staging into content-defined blocks (streamed, never held whole; content small enough
/// kept for the database instead), the same checksum check (422, nothing kept), the same commit.
struct ContentIntake: Sendable {
    let dependencies: Dependencies

    /// A body's first checks, before anything is read: its declared length (`Content-Length`, if any) within the
    /// largest file, and room for it on the server's disk. Returns the declared length.
    @discardableResult
    func admit(_ request: Request) throws -> Int64? {
        let max = dependencies.configuration.maxUploadSize
        let declared = request.headers[.contentLength].flatMap { Int64($0) }
        if let declared, declared > max {
            throw DriveError.tooLarge("Files can be at most \(max) bytes; this one is \(declared).")
        }
        try admit(bytes: declared ?? 0)
        return declared
    }

    /// Room for `bytes` more on the server's disk (507 `insufficient_storage` otherwise; see
    /// ``Dependencies/ensureRoom(for:)``).
    func admit(bytes: Int64) throws {
        try dependencies.ensureRoom(for: bytes)
    }

    /// 507 `quota_exceeded` when `bytes` more would take `owner` over quota: asked before the body is read when its
    /// size is known (the commit asks again, with the blocks it would really add).
    func checkQuota(owner: String, adding bytes: Int64) async throws {
        guard let user = try await dependencies.accounts.user(id: owner) else { return }
        try QuotaRule.check(adding: bytes, used: user.usedBytes, limit: user.quotaLimit)
    }

    /// A whole-file body for `owner`: refused at once when its declared length would take them over quota; small
    /// content is kept for the database (no block file), bigger content streamed into staged blocks.
    func receive(_ request: Request, declared: Int64?, owner: String, mimeType: String) async throws -> StagedContent {
        if let declared { try await checkQuota(owner: owner, adding: declared) }
        if let declared, declared <= StagedContent.inlineLimit {
            return .inline(Array(buffer: try await request.body.collect(upTo: StagedContent.inlineLimit)), mimeType: mimeType)
        }
        return try await stage(request.body, max: dependencies.configuration.maxUploadSize, mimeType: mimeType).content
    }

    /// Content already in memory (a batch entry): small content inline, the rest as staged blocks.
    func receive(_ bytes: Data, mimeType: String) async throws -> StagedContent {
        if bytes.count <= StagedContent.inlineLimit { return .inline([UInt8](bytes), mimeType: mimeType) }
        var stager = dependencies.blobs.makeStager(runningHash: SHA256())
        do {
            try await stager.append(ByteBuffer(bytes: bytes))
            let (blocks, checksum, _, size) = try await stager.finish()
            return StagedContent(blocks: blocks, checksum: checksum, size: size, mimeType: mimeType)
        } catch {
            await stager.abandon()
            throw error
        }
    }

    /// Streams a body into staged blocks, at most `max` bytes (413) — exactly `expectedSize` when given (a resumable
    /// chunk: longer is 400) — carrying on `runningHash` (the SHA-256 of what came before, for a resumable upload's
    /// whole-content checksum). On any failure nothing stays behind.
    func stage(
        _ body: some AsyncSequence<ByteBuffer, any Error>, max: Int64, mimeType: String, expectedSize: Int64? = nil, runningHash: SHA256? = nil
    ) async throws -> (content: StagedContent, runningHash: SHA256) {
        var stager = dependencies.blobs.makeStager(runningHash: runningHash ?? SHA256())
        do {
            for try await buffer in body {
                try await stager.append(buffer)
                if stager.totalSize > max {
                    throw DriveError.tooLarge("Files can be at most \(max) bytes.")
                }
                if let expectedSize, stager.totalSize > expectedSize {
                    throw DriveError.badRequest("The body is longer than Content-Range says.", code: .invalidChunk)
                }
            }
            let (blocks, checksum, running, size) = try await stager.finish()
            return (StagedContent(blocks: blocks, checksum: checksum, size: size, mimeType: mimeType), running)
        } catch {
            await stager.abandon()
            throw error
        }
    }

    /// Content already in the block store staged anew for `owner`, whose quota pays: a file made in someone else's tree
    /// (a share) from blocks its sender keeps in their own store (blocks are kept per user). `sources[i]` is the user
    /// whose store holds `blocks[i]`; each run of blocks from one store is read as one, in order, once.
    func restage(_ blocks: [BlockRef], from sources: [String], for owner: String, mimeType: String) async throws -> StagedContent {
        try await checkQuota(owner: owner, adding: blocks.reduce(Int64(0)) { $0 + $1.size })
        var stager = dependencies.blobs.makeStager(runningHash: SHA256())
        do {
            var start = 0
            while start < blocks.count {
                var end = start + 1
                while end < blocks.count, sources[end] == sources[start] { end += 1 }
                let run = Array(blocks[start..<end])
                let length = run.reduce(Int64(0)) { $0 + $1.size }
                try await dependencies.blobs.read(run, user: sources[start], range: 0..<length) { buffer in try await stager.append(buffer) }
                start = end
            }
            let (staged, checksum, _, size) = try await stager.finish()
            return StagedContent(blocks: staged, checksum: checksum, size: size, mimeType: mimeType)
        } catch {
            await stager.abandon()
            throw error
        }
    }

    /// Refuses content whose SHA-256 is not `expected` (422 `checksum_mismatch`), discarding what was staged.
    func verify(_ content: StagedContent, expected: String?) throws {
        guard let expected, content.checksum != expected else { return }
        dependencies.blobs.discard(content.blocks)
        throw DriveError.checksumMismatch(expected: expected, actual: content.checksum)
    }

    /// Commits staged content into `owner`'s tree: a new file or a new version (``ContentTarget``).
    func commit(_ content: StagedContent, to target: ContentTarget, owner: String) async throws -> FileRecord {
        try await dependencies.content.commitContent(userId: owner, target: target, content: content, now: dependencies.now)
    }
}

extension Dependencies {
    /// The one way content comes in (``ContentIntake``).
    var intake: ContentIntake { ContentIntake(dependencies: self) }
}
