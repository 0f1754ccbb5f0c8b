import Foundation
import Logging
import Metrics
import NIOConcurrencyHelpers

#if canImport(Glibc)
import Glibc
#endif

/// Makes thumbnails with Debian's tools, each run as a separate process — never in the server's — under a wall-clock
/// limit, an address-space and CPU-time limit (`prlimit`), without a network (`unshare -rn`, where the kernel lets
/// it) and with nothing but its input in its folder: `vipsthumbnail` (libvips: JPEG, PNG, GIF, WebP, HEIC, TIFF),
/// `pdftoppm` (poppler: a PDF's first page) and `ffmpeg` (a video's frame). A tool not installed means no thumbnails of
/// that kind. Hostile input can only make a worker fail, alone, within its limits.
///
/// Only types the tools read safely are passed, checked by their first bytes as well as by type (libvips would
/// otherwise pick its loader by content: an SVG named `.png` could read local files); libvips' untrusted loaders are
/// blocked (`VIPS_BLOCK_UNTRUSTED`), and ffmpeg reads only the container formats named and only local files.
struct Thumbnailer: Sendable {
    /// The sizes clients may ask for (pixels, the longer side).
    static let sizes: Set<Int> = [64, 256, 1024]

    struct Limits: Sendable {
        var seconds = 20
        var memoryBytes: Int64 = 1 << 30
        /// The largest image or PDF a thumbnail is made of.
        var largestDocument: Int64 = 256 << 20
        /// The largest video (the tool needs it whole, on disk).
        var largestVideo: Int64 = 2 << 30
    }

    enum Kind: Sendable {
        case image, pdf, video
    }

    let vipsthumbnail: String?
    let pdftoppm: String?
    let ffmpeg: String?
    let prlimit: String?
    /// `unshare -rn` works here (a worker then has no network).
    let isolates: Bool
    let limits: Limits
    let logger: Logger
    let slots: WorkerSlots

    init(limits: Limits = Limits(), logger: Logger, environment: [String: String] = ProcessInfo.processInfo.environment) {
        func find(_ tool: String) -> String? {
            let path = environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
            return path.split(separator: ":").map { "\($0)/\(tool)" }.first { FileManager.default.isExecutableFile(atPath: $0) }
        }
        vipsthumbnail = find("vipsthumbnail")
        pdftoppm = find("pdftoppm")
        ffmpeg = find("ffmpeg")
        prlimit = find("prlimit")
        let unshare = find("unshare")
        isolates = unshare.map { Self.exitsCleanly([$0, "-rn", "true"]) } ?? false
        self.limits = limits
        self.logger = logger
        slots = WorkerSlots(count: 2)
        if !isolates { logger.notice("Thumbnail workers run with the network: unshare -rn is not allowed here.") }
        if prlimit == nil { logger.notice("Thumbnail workers run without memory and CPU limits: prlimit (util-linux) is not installed.") }
    }

    /// What a file of this type and first bytes can have a thumbnail made by (nil: none).
    func kind(mimeType: String, head: [UInt8]) -> Kind? {
        let type = mimeType.lowercased()
        if type.hasPrefix("image/"), vipsthumbnail != nil, Self.isSafeImage(head) { return .image }
        if type == "application/pdf", pdftoppm != nil, head.starts(with: Array("%PDF-".utf8)) { return .pdf }
        if type.hasPrefix("video/"), ffmpeg != nil, Self.isSafeVideo(head) { return .video }
        return nil
    }

    /// JPEG, PNG, GIF, WebP, HEIF/AVIF, TIFF — by their signatures (SVG, PostScript and the rest never reach libvips).
    static func isSafeImage(_ head: [UInt8]) -> Bool {
        func at(_ offset: Int, _ bytes: [UInt8]) -> Bool { head.count >= offset + bytes.count && Array(head[offset..<offset + bytes.count]) == bytes }
        return at(0, [0xFF, 0xD8, 0xFF]) || at(0, [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) || at(0, Array("GIF8".utf8))
            || (at(0, Array("RIFF".utf8)) && at(8, Array("WEBP".utf8))) || (at(4, Array("ftyp".utf8)) && isHEIF(head))
            || at(0, [0x49, 0x49, 0x2A, 0x00]) || at(0, [0x4D, 0x4D, 0x00, 0x2A])
    }

    static func isHEIF(_ head: [UInt8]) -> Bool {
        guard head.count >= 12 else { return false }
        let brand = String(decoding: head[8..<12], as: UTF8.self)
        return ["heic", "heix", "hevc", "hevx", "heim", "heis", "mif1", "msf1", "avif"].contains(brand)
    }

    /// MP4/QuickTime (`ftyp`), Matroska/WebM, AVI.
    static func isSafeVideo(_ head: [UInt8]) -> Bool {
        func at(_ offset: Int, _ bytes: [UInt8]) -> Bool { head.count >= offset + bytes.count && Array(head[offset..<offset + bytes.count]) == bytes }
        return at(4, Array("ftyp".utf8)) || at(0, [0x1A, 0x45, 0xDF, 0xA3]) || (at(0, Array("RIFF".utf8)) && at(8, Array("AVI ".utf8)))
    }

    func largest(_ kind: Kind) -> Int64 { kind == .video ? limits.largestVideo : limits.largestDocument }

    /// The thumbnail of the file at `source` (of `kind`), at most `size` pixels on its longer side: the image and its
    /// type, or nil when the worker failed, ran out of time or memory, or made nothing.
    func make(_ kind: Kind, source: URL, size: Int) async -> (data: [UInt8], mimeType: String)? {
        await slots.run {
            let folder = source.deletingLastPathComponent()
            let command: [String]
            let output: URL
            let type: String
            switch kind {
            case .image:
                output = folder.appending(path: "thumb.webp")
                type = "image/webp"
                command = [vipsthumbnail ?? "", source.path, "--size", "\(size)x\(size)>", "-o", output.path + "[Q=75,strip]"]
            case .pdf:
                output = folder.appending(path: "thumb.jpg")
                type = "image/jpeg"
                command = [pdftoppm ?? "", "-f", "1", "-l", "1", "-singlefile", "-jpeg", "-scale-to", "\(size)", source.path, folder.appending(path: "thumb").path]
            case .video:
                output = folder.appending(path: "thumb.jpg")
                type = "image/jpeg"
                command = [
                    ffmpeg ?? "", "-nostdin", "-hide_banner", "-loglevel", "error", "-threads", "1", "-protocol_whitelist", "file",
                    "-format_whitelist", "mov,mp4,m4a,3gp,3g2,mj2,matroska,webm,avi", "-ss", "1", "-i", source.path, "-frames:v", "1",
                    "-vf", "scale=w=min(iw\\,\(size)):h=min(ih\\,\(size)):force_original_aspect_ratio=decrease", "-y", output.path,
                ]
            }
            var status = await run(command, in: folder)
            if kind == .video, !FileManager.default.fileExists(atPath: output.path) {
                // Shorter than a second: its first frame.
                var first = command
                if let at = first.firstIndex(of: "-ss") { first.removeSubrange(at...at + 1) }
                status = await run(first, in: folder)
            }
            guard status == 0, let data = FileManager.default.contents(atPath: output.path), !data.isEmpty else {
                logger.warning("A thumbnail worker made nothing", metadata: ["tool": "\(command.first ?? "")", "status": "\(status)"])
                return nil
            }
            return ([UInt8](data), type)
        }
    }

    /// Runs a worker in `folder` under the limits; its exit status (a signal or the time limit: non-zero).
    private func run(_ command: [String], in folder: URL) async -> Int32 {
        var arguments = command
        if let prlimit {
            arguments = [prlimit, "--as=\(limits.memoryBytes)", "--cpu=\(limits.seconds)", "--core=0", "--fsize=\(256 << 20)", "--"] + arguments
        }
        if isolates { arguments = ["unshare", "-rn", "--"] + arguments }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: isolates ? "/usr/bin/env" : arguments[0])
        process.arguments = isolates ? arguments : Array(arguments.dropFirst())
        process.currentDirectoryURL = folder
        // No more threads and malloc arenas than a thumbnail needs (each reserves address space under the limit).
        process.environment = [
            "PATH": "/usr/bin:/bin", "HOME": folder.path, "TMPDIR": folder.path, "VIPS_BLOCK_UNTRUSTED": "1", "VIPS_CONCURRENCY": "1",
            "MALLOC_ARENA_MAX": "2", "OMP_NUM_THREADS": "1",
        ]
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        let seconds = limits.seconds
        let timer = NIOLockedValueBox<Task<Void, Never>?>(nil)
        let status = await withCheckedContinuation { (continuation: CheckedContinuation<Int32, Never>) in
            process.terminationHandler = { finished in continuation.resume(returning: finished.terminationStatus) }
            do {
                try process.run()
            } catch {
                process.terminationHandler = nil
                continuation.resume(returning: -1)
                return
            }
            // Out of time: killed (its whole process, wherever it is); the handler above then reports the signal.
            let pid = process.processIdentifier
            timer.withLockedValue {
                $0 = Task {
                    try? await Task.sleep(for: .seconds(seconds))
                    if !Task.isCancelled, process.isRunning { kill(pid, SIGKILL) }
                }
            }
        }
        timer.withLockedValue { $0?.cancel() }
        return status
    }

    static func exitsCleanly(_ command: [String]) -> Bool {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: command[0])
        process.arguments = Array(command.dropFirst())
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        do {
            try process.run()
            process.waitUntilExit()
            return process.terminationStatus == 0
        } catch {
            return false
        }
    }
}

/// At most `count` workers at once; the rest wait their turn.
actor WorkerSlots {
    private var free: Int
    private var waiting: [CheckedContinuation<Void, Never>] = []

    init(count: Int) { free = count }

    func run<T: Sendable>(_ work: @Sendable () async -> T) async -> T {
        if free > 0 {
            free -= 1
        } else {
            await withCheckedContinuation { waiting.append($0) }
        }
        let result = await work()
        if waiting.isEmpty { free += 1 } else { waiting.removeFirst().resume() }
        return result
    }
}
