import Foundation
import NimbusAPI
@testable import NimbusServer
import NimbusTestSupport
import Testing

/// Seeing files over the real server: thumbnails made by Debian's tools in limited worker processes (real images,
/// PDFs and videos made here with ffmpeg; hostile ones too), and zips checked by Python's `zipfile`.
@Suite("Thumbnails and zips")
struct PreviewTests {
    /// Runs a tool; its standard output. Fails the test (naming the Debian package) when it is not installed.
    @discardableResult
    static func tool(_ arguments: [String], in folder: URL? = nil) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = arguments
        if let folder { process.currentDirectoryURL = folder }
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw TestFailure("\(arguments.joined(separator: " ")) failed (\(process.terminationStatus)): install libvips-tools, poppler-utils, ffmpeg")
        }
        return String(decoding: data, as: UTF8.self)
    }

    struct TestFailure: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }

    /// A one-page PDF with a filled rectangle, written by hand (the smallest a reader accepts).
    static let pdf: Data = {
        let stream = "0 0 1 rg 20 20 160 100 re f"
        let objects = [
            "<< /Type /Catalog /Pages 2 0 R >>", "<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 140] /Contents 4 0 R >>",
            "<< /Length \(stream.utf8.count) >>\nstream\n\(stream)\nendstream",
        ]
        var text = "%PDF-1.4\n"
        var offsets: [Int] = []
        for (index, object) in objects.enumerated() {
            offsets.append(text.utf8.count)
            text += "\(index + 1) 0 obj\n\(object)\nendobj\n"
        }
        let xref = text.utf8.count
        text += "xref\n0 \(objects.count + 1)\n0000000000 65535 f \n"
        for offset in offsets { text += String(format: "%010d 00000 n \n", offset) }
        text += "trailer\n<< /Size \(objects.count + 1) /Root 1 0 R >>\nstartxref\n\(xref)\n%%EOF\n"
        return Data(text.utf8)
    }()

    /// The width and height of an image (libvips' header tool).
    static func dimensions(_ data: Data, in folder: URL) throws -> (Int, Int) {
        let file = folder.appending(path: "thumb-\(UUID().uuidString)")
        try data.write(to: file)
        let width = Int(try tool(["vipsheader", "-f", "width", file.path]).trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
        let height = Int(try tool(["vipsheader", "-f", "height", file.path]).trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
        return (width, height)
    }

    @Test("images, a PDF's first page and a video's frame get thumbnails of the asked size, made once per revision; the rest get 404 no_thumbnail")
    func thumbnails() async throws {
        let folder = FileManager.default.temporaryDirectory.appending(path: "nimbus-thumbs-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        for (name, extra) in [("photo.png", ["-frames:v", "1"]), ("photo.jpg", ["-frames:v", "1"]), ("anim.gif", ["-t", "1"]), ("photo.webp", ["-frames:v", "1"])] {
            try Self.tool(["ffmpeg", "-v", "error", "-f", "lavfi", "-i", "testsrc=size=640x480:rate=5"] + extra + [name], in: folder)
        }
        try Self.tool(["ffmpeg", "-v", "error", "-f", "lavfi", "-i", "testsrc=duration=3:size=320x240:rate=10", "-pix_fmt", "yuv420p", "clip.mp4"], in: folder)
        // HEIC, as phones take photos (libvips writes it through Debian's libheif).
        try Self.tool(["vips", "copy", "photo.png", "photo.heic"], in: folder)
        try await TestServer.run { server in
            let alice = try await server.signUp()
            let types = [
                "photo.png": "image/png", "photo.jpg": "image/jpeg", "anim.gif": "image/gif", "photo.webp": "image/webp", "photo.heic": "image/heic",
                "clip.mp4": "video/mp4",
            ]
            for (name, type) in types.sorted(by: { $0.key < $1.key }) {
                let file = try await alice.upload(name, try Data(contentsOf: folder.appending(path: name)), query: "&mimeType=\(type)")
                for size in [64, 256, 1024] {
                    let reply = try await alice.get("/v1/files/\(file.id)/thumbnail?size=\(size)")
                    #expect(reply.status == 200, "\(name) at \(size): \(reply.status) \(reply.text.prefix(200))")
                    guard reply.status == 200 else { continue }
                    #expect(reply.header("Content-Type") == "image/webp" || reply.header("Content-Type") == "image/jpeg")
                    #expect(reply.header("X-Content-Type-Options") == "nosniff")
                    let (width, height) = try Self.dimensions(reply.body, in: folder)
                    let longest = name == "clip.mp4" ? min(size, 320) : min(size, 640)
                    #expect(max(width, height) == longest, "\(name) at \(size): \(width)×\(height)")
                }
            }
            let pdf = try await alice.upload("doc.pdf", Self.pdf, query: "&mimeType=application/pdf")
            let page = try await alice.get("/v1/files/\(pdf.id)/thumbnail?size=256")
            #expect(page.status == 200, "\(page.text.prefix(200))")
            #expect(try Self.dimensions(page.body, in: folder).0 == 256)

            // Cached: the same bytes, and a conditional request is 304.
            let photo = try await alice.upload("again.png", try Data(contentsOf: folder.appending(path: "photo.png")), query: "&mimeType=image/png")
            let first = try await alice.get("/v1/files/\(photo.id)/thumbnail")
            let second = try await alice.get("/v1/files/\(photo.id)/thumbnail")
            #expect(first.body == second.body)
            let etag = try #require(first.header("ETag"))
            #expect(try await alice.get("/v1/files/\(photo.id)/thumbnail", headers: ["If-None-Match": etag]).status == 304)
            let metrics = try await APIClient(baseURL: server.baseURL).get("/metrics").text
            #expect(metrics.contains("nimbus_thumbnails_total{result=\"cached\"}"), "thumbnails counted in /metrics")
            #expect(metrics.contains("nimbus_thumbnails_total{result=\"made\"}"))

            // A new version: a new thumbnail (another ETag).
            let replaced = try await alice.send(.POST, "/v1/upload?uploadType=media&fileId=\(photo.id)&mimeType=image/jpeg",
                body: try Data(contentsOf: folder.appending(path: "photo.jpg")))
            #expect(replaced.status == 200 || replaced.status == 201)
            let fresh = try await alice.get("/v1/files/\(photo.id)/thumbnail")
            #expect(fresh.status == 200 && fresh.header("ETag") != etag)

            // Nothing to make one of, or input the workers must never see: 404 no_thumbnail, never a broken image.
            let folderItem = try await alice.mkdir("Pictures")
            let text = try await alice.upload("notes.txt", Data("hello".utf8))
            let svg = try await alice.upload("drawing.svg", Data("<svg xmlns='http://www.w3.org/2000/svg'><image href='file:///etc/passwd'/></svg>".utf8), query: "&mimeType=image/svg%2Bxml")
            let disguised = try await alice.upload("disguised.png", Data("<svg xmlns='http://www.w3.org/2000/svg'/>".utf8), query: "&mimeType=image/png")
            var corrupt = Data([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A])
            corrupt.append(randomData(4096))
            let broken = try await alice.upload("broken.png", corrupt, query: "&mimeType=image/png")
            let fakeVideo = try await alice.upload("playlist.mp4", Data("#EXTM3U\n#EXTINF:1,\nfile:///etc/passwd\n".utf8), query: "&mimeType=video/mp4")
            for item in [folderItem, text, svg, disguised, broken, fakeVideo] {
                let reply = try await alice.get("/v1/files/\(item.id)/thumbnail")
                #expect(reply.status == 404, "\(item.name): \(reply.status)")
                #expect(reply.errorCode == "no_thumbnail", "\(item.name)")
                #expect(try await alice.get("/v1/files/\(item.id)/thumbnail").status == 404, "\(item.name), asked again (remembered)")
            }
            #expect(try await alice.get("/v1/files/\(photo.id)/thumbnail?size=100").status == 400)
            #expect(try await alice.get("/v1/files/\(photo.id)/thumbnail?size=big").status == 400)
            // The server is well after all that.
            #expect(try await alice.get("/v1/files/\(photo.id)/thumbnail").status == 200)
            // Thumbnails go with their revision: the file deleted for good, nothing of them is left.
            let kept = try #require(fresh.header("ETag")?.trimmingCharacters(in: CharacterSet(charactersIn: "\"")).split(separator: "-").first)
            let finding = server.parts.dependencies.finding
            #expect(try await finding.thumbnail(revisionId: String(kept), size: 256) != nil)
            #expect(try await alice.send(.DELETE, "/v1/files/\(photo.id)?permanent=true").status == 204)
            #expect(try await finding.thumbnail(revisionId: String(kept), size: 256) == nil)
        }
    }

    /// What Python's zipfile reads from an archive: each entry's name and content (hex), after checking every CRC.
    static func unzip(_ data: Data) throws -> [String: String] {
        let file = FileManager.default.temporaryDirectory.appending(path: "nimbus-\(UUID().uuidString).zip")
        try data.write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let script = """
            import json, sys, zipfile
            z = zipfile.ZipFile(sys.argv[1])
            bad = z.testzip()
            assert bad is None, bad
            print(json.dumps({i.filename: z.read(i).hex() for i in z.infolist()}))
            """
        let output = try tool(["python3", "-c", script, file.path])
        return try JSONDecoder().decode([String: String].self, from: Data(output.utf8))
    }

    @Test("a zip of files and folders keeps paths and Unicode names, every CRC checks, a second item of one name gets ' (1)'; bad asks are 400s")
    func zip() async throws {
        try await TestServer.run { server in
            let alice = try await server.signUp()
            let photos = try await alice.mkdir("Fotos Größe")
            let trip = try await alice.mkdir("旅行", in: photos.id)
            let big = seededData(3 << 20, seed: "zip")
            _ = try await alice.upload("día 1.jpg", big, in: trip.id)
            _ = try await alice.upload("empty.txt", Data(), in: photos.id)
            _ = try await alice.mkdir("empty folder", in: photos.id)
            let inTrash = try await alice.upload("gone.txt", Data("gone".utf8), in: photos.id)
            #expect(try await alice.send(.DELETE, "/v1/files/\(inTrash.id)").status == 204)
            let other = try await alice.mkdir("Other")
            let note = try await alice.upload("Fotos Größe", Data("a file of the same name".utf8), in: other.id)

            let reply = try await alice.get("/v1/zip?ids=\(photos.id),\(note.id)")
            #expect(reply.status == 200, "\(reply.text.prefix(300))")
            #expect(reply.header("Content-Type") == "application/zip")
            #expect(reply.header("Content-Length") == String(reply.body.count), "the length is known before the first byte")
            let entries = try Self.unzip(reply.body)
            #expect(
                Set(entries.keys) == [
                    "Fotos Größe/", "Fotos Größe/旅行/", "Fotos Größe/旅行/día 1.jpg", "Fotos Größe/empty.txt", "Fotos Größe/empty folder/",
                    "Fotos Größe (1)",
                ])
            #expect(entries["Fotos Größe/旅行/día 1.jpg"] == big.map { String(format: "%02x", $0) }.joined())
            #expect(entries["Fotos Größe (1)"] == Data("a file of the same name".utf8).map { String(format: "%02x", $0) }.joined())
            #expect(entries["Fotos Größe/empty.txt"] == "")

            let single = try await alice.get("/v1/zip?ids=\(trip.id)")
            #expect(single.header("Content-Disposition")?.contains("filename*=UTF-8''%E6%97%85%E8%A1%8C.zip") == true)
            #expect(Set(try Self.unzip(single.body).keys) == ["旅行/", "旅行/día 1.jpg"])

            for bad in ["", "ids=", "ids=,,", "ids=\(inTrash.id)", "ids=root"] {
                let answer = try await alice.get("/v1/zip?\(bad)")
                #expect(answer.status == 400, "\(bad): \(answer.status) \(answer.text.prefix(200))")
            }
            #expect(try await alice.get("/v1/zip?ids=fnope").status == 404)
        }
    }
}
