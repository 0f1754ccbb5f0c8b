import Foundation
import Hummingbird
import NimbusAPI

/// `GET /v1/zip?ids=a,b`: the items (files, and folders with all they hold) as one zip, streamed as it is read —
/// memory bounded by the archive's directory, not its size. Each item must be readable by the asking user; names
/// inside are as in the tree (two chosen items of one name: the second gets ` (1)`).
struct ZipController: Sendable {
    let dependencies: Dependencies

    /// The most items one zip holds (files and folders, those inside the chosen folders included).
    static let mostEntries = 100_000
    static let mostIds = 1000

    func register(_ routes: inout RouteTable) {
        routes.on(Routes.zip, use: zip)
    }

    /// What goes into the archive, decided before a byte is sent: the path inside, and the revision (not whatever
    /// the head is later).
    struct Entry: Sendable {
        var path: String
        var isFolder: Bool
        var userId: String
        var revisionId: String?
        var size: Int64
        var modifiedAt: Date
    }

    @Sendable func zip(_ request: Request, context: NimbusRequestContext) async throws -> Response {
        let me = try await dependencies.principal(request)
        let ids = (request.query("ids") ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        guard !ids.isEmpty else { throw DriveError.badRequest("'ids' must name at least one file or folder (comma-separated ids).") }
        guard ids.count <= Self.mostIds else { throw DriveError.badRequest("'ids' may name at most \(Self.mostIds) items; zip their folder instead.") }
        var entries: [Entry] = []
        var taken: Set<String> = []
        var chosen: [FileRecord] = []
        for id in ids {
            let item = try await dependencies.item(id, for: me, .read)
            guard item.parentId != nil || item.mountId != nil else { throw DriveError.badRequest("The root folder cannot be zipped: choose what is in it.") }
            guard !item.isTrashed else { throw DriveError.badRequest("'\(item.name)' is in the trash.", code: .trashed) }
            chosen.append(item)
        }
        for item in chosen {
            var name = item.name
            var copy = 1
            while taken.contains(name) {
                name = FileName.numbered(item.name, copy)
                copy += 1
            }
            taken.insert(name)
            try await add(item, as: name, to: &entries)
        }
        var archive = ZipStream()
        for entry in entries {
            _ = archive.begin(name: entry.path, size: UInt64(entry.size), modified: entry.modifiedAt, isFolder: entry.isFolder)
            if !entry.isFolder {
                archive.skip(UInt64(entry.size))
                _ = try archive.end(written: UInt64(entry.size))
            }
        }
        let length = archive.offset + UInt64(archive.finish().readableBytes)
        let content = dependencies.content
        let listed = entries
        let blobs = dependencies.blobs
        let single = chosen.count == 1 && chosen[0].isFolder ? chosen[0].name + ".zip" : "Nimbus.zip"
        let body = ResponseBody(contentLength: Int(length)) { writer in
            var archive = ZipStream()
            for entry in listed {
                try await writer.write(archive.begin(name: entry.path, size: UInt64(entry.size), modified: entry.modifiedAt, isFolder: entry.isFolder))
                guard !entry.isFolder, let revisionId = entry.revisionId else { continue }
                var written: UInt64 = 0
                if entry.size > 0 {
                    let blocks = try await content.blocks(ofRevision: revisionId)
                    try await blobs.read(blocks, user: entry.userId, range: 0..<entry.size) { buffer in
                        archive.content(buffer)
                        written += UInt64(buffer.readableBytes)
                        try await writer.write(buffer)
                    }
                }
                try await writer.write(try archive.end(written: written))
            }
            try await writer.write(archive.finish())
            try await writer.finish(nil)
        }
        let headers: HTTPFields = [
            .contentType: "application/zip", .contentDisposition: ContentController.attachment(single),
            .contentLength: String(length), .init("X-Content-Type-Options")!: "nosniff",
        ]
        return Response(status: .ok, headers: headers, body: body)
    }

    /// The item at `path` and, for a folder, everything live in it (depth first, names in order).
    private func add(_ item: FileRecord, as path: String, to entries: inout [Entry]) async throws {
        guard entries.count < Self.mostEntries else {
            throw DriveError.badRequest("The zip would hold more than \(Self.mostEntries) items; choose fewer, or sync the folder instead.")
        }
        guard item.isFolder else {
            entries.append(Entry(path: path, isFolder: false, userId: item.userId, revisionId: item.headRevisionId, size: item.size, modifiedAt: item.modifiedAt))
            return
        }
        entries.append(Entry(path: path + "/", isFolder: true, userId: item.userId, revisionId: nil, size: 0, modifiedAt: item.modifiedAt))
        var page = 1
        while true {
            // A folder's items are its owner's (a share's, seen through the same grant): no mounts inside a zip.
            let batch = try await dependencies.files.children(
                of: item.id, userId: item.userId, paging: Paging(page: page, limit: Paging.maxLimit), order: .byName, mountsAt: nil)
            for child in batch.files { try await add(child, as: path + "/" + child.name, to: &entries) }
            if batch.files.count < Paging.maxLimit { return }
            page += 1
        }
    }
}
