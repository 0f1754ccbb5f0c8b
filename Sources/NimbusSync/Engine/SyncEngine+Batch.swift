import Foundation
import GRDB
import NimbusAPI

/// Batched uploads: new small files that are ready together go up in one request (`uploadType=batch`).
///
/// Each file keeps its own operation, request id and checksum, so a batch is only a way of carrying them: a
/// batch whose answer is lost is retried and the server returns the files the first attempt made; an entry the
/// server refuses (a name clash, a changed file) runs again alone through the ordinary path, which knows what
/// each refusal means.
extension SyncEngine {
    /// Whether an upload's payload may travel in a batch (the item must also be new: checked when it runs).
    func isBatchable(_ operation: OperationRow) -> Bool {
        guard operation.kind == .upload, let size = operation.payload.size else { return false }
        return operation.payload.sourcePath != nil && operation.payload.checksum != nil && size <= configuration.batchFileLimit
            && operation.payload.baseRevision == nil
    }

    /// `first` (the next operation in queue order) and, when it is a small new upload, the runnable small new
    /// uploads that follow it in queue order, up to the batch limits; one operation per item.
    func batchable(with first: OperationRow) throws -> [OperationRow] {
        guard configuration.maxBatchFiles > 1, isBatchable(first) else { return [first] }
        let limit = configuration.maxBatchFiles
        var arguments = try runnableArguments()
        arguments += [limit + 16]
        let bound = arguments
        let candidates = try database.pool.read { db in
            try Row.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT o.* FROM operations o INDEXED BY operations_runnable
                        WHERE \(Self.runnable) AND o.kind = 'upload'
                        AND NOT EXISTS (SELECT 1 FROM items i WHERE i.luid = o.luid AND i.file_id IS NOT NULL)
                        AND NOT EXISTS (SELECT 1 FROM upload_sessions s WHERE s.operation_id = o.id)
                        ORDER BY o.blocking DESC, o.seq
                        LIMIT ?
                        """),
                arguments: bound
            ).map(OperationRow.init(row:))
        }
        var batch = [first]
        var items: Set<String> = Set(running.values.map(\.luid)).union([first.luid])
        var bytes = first.payload.size ?? 0
        for candidate in candidates where candidate.id != first.id && batch.count < limit {
            guard isBatchable(candidate), !items.contains(candidate.luid) else { continue }
            let size = candidate.payload.size ?? 0
            guard bytes + size <= configuration.maxBatchBytes else { break }
            batch.append(candidate)
            items.insert(candidate.luid)
            bytes += size
        }
        return batch
    }

    /// Sends `operations` (claimed by the caller) as one batch; what cannot go or comes back refused runs alone.
    func runBatch(_ operations: [OperationRow], _ client: ServerClient) async throws {
        defer {
            for operation in operations {
                running[operation.id] = nil
                progress[operation.luid] = nil
            }
        }
        var entries: [BatchUploadRequest.Entry] = []
        var sent: [OperationRow] = []
        var alone: [OperationRow] = []
        let rows = try await database.pool.read { db in try operations.map { try ItemRow.fetch(db, luid: $0.luid) } }
        var folders: [String: String] = [:]  // parent LUID → server id, looked up once per batch
        for (operation, row) in zip(operations, rows) {
            let payload = operation.payload
            guard let row, row.lPresent, row.fileId == nil, let parent = payload.parent ?? row.lParent,
                let source = payload.sourcePath, let checksum = payload.checksum,
                let bytes = try? Data(contentsOf: URL(fileURLWithPath: source)), Int64(bytes.count) == payload.size
            else {
                alone.append(operation)
                continue
            }
            if folders[parent] == nil { folders[parent] = try? await serverId(parent) }
            guard let parentId = folders[parent] else {
                alone.append(operation)
                continue
            }
            entries.append(
                BatchUploadRequest.Entry(
                    name: payload.name ?? row.lName ?? "file", parentId: parentId, mimeType: payload.mimeType ?? row.lMime,
                    requestId: payload.requestId ?? operation.id, onConflict: payload.replace == true ? "replace" : nil, checksum: checksum,
                    content: bytes))
            sent.append(operation)
            progress[operation.luid] = .uploading(progress: 0)
        }
        notifyChanged()
        if !entries.isEmpty {
            do {
                let (head, data) = try await client.authorized(
                    TransportRequest(
                        method: "POST", path: "/v1/upload?uploadType=batch", body: try JSONEncoder.nimbus.encode(BatchUploadRequest(files: entries))),
                    json: true)
                if head.status == 400 || head.status == 404 || head.status == 413 {
                    // A server without batches, or a batch it will not take: each goes alone.
                    alone += sent
                } else {
                    try ServerClient.check(head, data)
                    let results = try ServerClient.decode(BatchUploadResponse.self, data).results
                    guard results.count == sent.count else {
                        throw SyncError.server(
                            status: head.status, code: "invalid_response",
                            message: "The batch answer has \(results.count) results for \(sent.count) files.", retryAfter: nil)
                    }
                    var done: [(OperationRow, File)] = []
                    for (operation, result) in zip(sent, results) {
                        if let file = result.file, (200..<300).contains(result.status) {
                            done.append((operation, file))
                        } else {
                            alone.append(operation)
                        }
                    }
                    try await recordBatch(done)
                    if case .offline = phase { phase = .idle }
                }
            } catch let error as SyncError {
                trace("batch of \(sent.count) → \(error)")
                for operation in sent { try await failed(operation, error) }
            } catch is CancellationError {
                throw CancellationError()
            } catch {
                for operation in sent { try await failed(operation, .localFile("\(error)")) }
            }
        }
        for operation in alone where mayRun {
            progress[operation.luid] = nil
            try await run(operation, client)
        }
        notifyChanged()
    }

    /// Records every uploaded file of a batch and marks its operation applied, in one transaction.
    func recordBatch(_ done: [(operation: OperationRow, file: File)]) async throws {
        guard !done.isEmpty else { return }
        let discards = try await database.pool.write { db -> [String] in
            let generation = try self.pullGeneration(db)
            var discards: [String] = []
            for (operation, file) in done {
                if let discard = try self.recordUploaded(db, file, operation, luid: operation.luid) { discards.append(discard) }
                try self.markApplied(db, operation.id, generation: generation)
            }
            return discards
        }
        for path in discards { try? FileManager.default.removeItem(atPath: path) }
        trace("batch: \(done.count) uploaded")
    }
}
