import AsyncHTTPClient
import Crypto
import Foundation
import NIOCore
import NIOFoundationCompat
import NIOHTTP1
import NimbusAPI
import NimbusS3

/// Nextcloud's chunked upload (v2), where the server takes it: Nextcloud, and Nimbus in Nextcloud's layout.
///
/// Found from the remote's URL: one in Nextcloud's layout (`…/remote.php/dav/files/USER/…`) has an uploads folder at
/// `…/remote.php/dav/uploads/USER/`; a `PROPFIND` there before the first big upload says whether the server has it
/// (remembered for the provider's life). A file bigger than ``chunkSize`` then goes as: `MKCOL` of an upload named
/// after the request, the content's checksum and the place (so a restart, even after `kill -9`, finds it again and
/// nothing else does), `PUT` of chunks `00001`, `00002`, … (``chunkSize`` each, the last shorter; v2's
/// `Destination` and `OC-Total-Length` on each), and `MOVE …/.file` onto the hidden `.nimbus-partial-…` file, which
/// is then moved into place as any upload is. Before sending, the upload's chunks are listed: a chunk already there
/// with its full size is not sent again (its bytes are still read and hashed here, so what is assembled is checked
/// against the checksum the engine froze, as for a whole upload). A chunk the server holds is complete: the server
/// stores it only once it has all of it.
extension WebDAVProvider {
    /// `…/dav/uploads/USER/` for a URL under `…/dav/files/USER/`, else nil.
    static func nextcloudUploads(_ rootAddress: String) -> String? {
        guard let range = rootAddress.range(of: "/dav/files/") else { return nil }
        let user = rootAddress[range.upperBound...].prefix { $0 != "/" }
        guard !user.isEmpty else { return nil }
        return rootAddress[..<range.lowerBound] + "/dav/uploads/" + user + "/"
    }

    /// The name of the upload for this request, content and folder: the same after a restart, another for anything else.
    static func transferName(requestId: String, checksum: String, parentId: String) -> String {
        PartialUploads.transferName(requestId: requestId, checksum: checksum, parentId: parentId)
    }

    /// The uploads folder when a file of `size` bytes should go in chunks: it is bigger than a chunk and the server
    /// takes chunked uploads (asked once).
    func chunkedUploadsFolder(for size: Int64) async throws -> String? {
        guard size > chunkSize, let uploadsAddress else { return nil }
        if let known = chunkedUploads.withLock({ $0 }) { return known ? uploadsAddress : nil }
        let (response, _) = try await send("PROPFIND", uploadsAddress, headers: [("Depth", "0")], body: Self.propfindBody)
        let status = Int(response.status.code)
        if status == 401 { throw Self.failure(status, response.headers, what: "looking for chunked uploads") }
        let takes = status == 207
        chunkedUploads.withLock { $0 = takes }
        return takes ? uploadsAddress : nil
    }

    /// The chunks of an upload already on the server, by name with their sizes; nil when there is no such upload.
    func chunksThere(_ upload: String) async throws -> [String: Int64]? {
        let (response, data) = try await send("PROPFIND", upload, headers: [("Depth", "1")], body: Self.propfindBody)
        let status = Int(response.status.code)
        if status == 404 { return nil }
        guard status == 207 else { throw Self.failure(status, response.headers, what: "listing an upload's chunks") }
        var sizes: [String: Int64] = [:]
        for entry in XMLTree.parse(data)?.all("response") ?? [] {
            guard let href = entry.value("href"), let length = Self.properties(entry)["getcontentlength"],
                let size = Int64(Self.trimmed(length.text)), let name = href.split(separator: "/").last.map(String.init)
            else { continue }
            sizes[SigV4Signer.decode(name) ?? name] = size
        }
        return sizes
    }

    /// The hidden file in `parentId` where `source` was assembled from chunks; nil where chunked uploads are not
    /// taken (the caller sends it whole). The upload is named after what is sent and where, so a restart finds the
    /// chunks already there.
    func uploadInChunks(
        _ source: UploadSource, requestId: String, parentId: String, what: String, progress: @escaping @Sendable (Int64) -> Void
    ) async throws -> String? {
        guard let uploads = try await chunkedUploadsFolder(for: source.size) else { return nil }
        let transfer = Self.transferName(requestId: requestId, checksum: source.checksum, parentId: parentId)
        let hidden = ProviderPath.child(Self.partialPrefix + transfer, in: parentId)
        do {
            try await sendInChunks(source, upload: uploads + transfer + "/", to: hidden, what: what, progress: progress)
            return hidden
        } catch ChunkedUploadRefused.refused {
            // The folder answered like Nextcloud's but does not assemble uploads: whole uploads from now on.
            chunkedUploads.withLock { $0 = false }
            return nil
        }
    }

    /// Sends `source` in chunks to `upload` (made if missing), skipping the chunks already there, and assembles it
    /// at `temporary`.
    func sendInChunks(_ source: UploadSource, upload: String, to temporary: String, what: String, progress: @escaping @Sendable (Int64) -> Void) async throws {
        let destination = address(temporary)
        let chunk = max(chunkSize, (source.size + 9_999) / 10_000)  // at most 10,000 chunks
        let common = [("Destination", destination), ("OC-Total-Length", "\(source.size)")]
        var there = try await chunksThere(upload)
        if there == nil {
            let (made, _) = try await send("MKCOL", upload, headers: [("Destination", destination)])
            let status = Int(made.status.code)
            if [403, 405, 501].contains(status) { throw ChunkedUploadRefused.refused }
            guard (200..<300).contains(status) else { throw Self.failure(status, made.headers, what: "starting a chunked upload of \(what)") }
            there = [:]
        }
        let input: ContentReader
        do { input = try source.open() } catch { throw ProviderError.checksumMismatch }
        defer { input.close() }
        var hasher = SHA256()
        var offset: Int64 = 0
        var number = 1
        while offset < source.size {
            let length = min(chunk, source.size - offset)
            guard let bytes = try input.readBuffer(upToCount: Int(length)), bytes.readableBytes == Int(length) else { break }
            bytes.withUnsafeReadableBytes { hasher.update(bufferPointer: $0) }
            let name = String(format: "%05d", number)
            if there?[name] != length {
                let (put, _) = try await send("PUT", upload + name, headers: common + [("Content-Length", "\(length)")], stream: BandwidthLimits.body(bytes))
                guard (200..<300).contains(Int(put.status.code)) else {
                    throw Self.failure(Int(put.status.code), put.headers, what: "sending \(what)")
                }
                chunksSent.withLock { $0 += 1 }
            }
            offset += length
            number += 1
            progress(offset)
        }
        guard offset == source.size, (try input.read(upToCount: 1) ?? Data()).isEmpty, FileHasher.hex(hasher.finalize()) == source.checksum else {
            // The file changed under us: this upload is of no use to anyone.
            _ = try? await send("DELETE", upload)
            throw ProviderError.checksumMismatch
        }
        let (moved, _) = try await send("MOVE", upload + ".file", headers: common + [("Overwrite", "T")])
        let status = Int(moved.status.code)
        if [403, 404, 405, 501].contains(status), (try? await chunksThere(upload)) != nil {
            // The upload is there but its `.file` is not: a plain folder, not Nextcloud's uploads. Cleaned up.
            _ = try? await send("DELETE", upload)
            throw ChunkedUploadRefused.refused
        }
        guard (200..<300).contains(status) else { throw Self.failure(status, moved.headers, what: "assembling \(what)") }
    }
}

/// A server whose uploads folder answers but does not take Nextcloud's chunked uploads (a plain folder under that
/// path): the provider sends whole files instead.
enum ChunkedUploadRefused: Error { case refused }
