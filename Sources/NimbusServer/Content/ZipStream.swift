import Foundation
import NIOCore

/// A zip archive written as it streams (`GET /v1/zip`): each entry stored as is (no compression: most large files
/// do not shrink, and the bytes go out at the speed they are read), its CRC-32 computed on the way and written in a
/// data descriptor after it; names in UTF-8 (flag bit 11); ZIP64 records for entries or archives over 4 GiB or
/// 65,535 entries. Memory: the central directory, about 100 bytes per entry, and nothing of the content.
struct ZipStream {
    private struct Entry {
        var name: [UInt8]
        var offset: UInt64
        var size: UInt64
        var crc: UInt32
        var dosTime: UInt16
        var dosDate: UInt16
        var isFolder: Bool
    }

    private var entries: [Entry] = []
    private(set) var offset: UInt64 = 0
    private var crc = CRC32()
    private var current: Entry?

    /// The header that opens an entry (`name` ends in `/` for a folder; `size` is the content's, known in advance).
    mutating func begin(name: String, size: UInt64, modified: Date, isFolder: Bool) -> ByteBuffer {
        let (time, date) = Self.dos(modified)
        let bytes = Array((isFolder && !name.hasSuffix("/") ? name + "/" : name).utf8)
        let entry = Entry(name: bytes, offset: offset, size: size, crc: 0, dosTime: time, dosDate: date, isFolder: isFolder)
        let zip64 = size >= 0xFFFF_FFFF
        var header = ByteBuffer()
        header.writeInteger(UInt32(0x0403_4B50), endianness: .little)
        header.writeInteger(UInt16(zip64 ? 45 : 20), endianness: .little)
        header.writeInteger(UInt16(isFolder ? 0x0800 : 0x0808), endianness: .little)  // UTF-8; sizes and CRC after the data
        header.writeInteger(UInt16(0), endianness: .little)  // stored
        header.writeInteger(time, endianness: .little)
        header.writeInteger(date, endianness: .little)
        header.writeInteger(UInt32(0), endianness: .little)  // CRC: in the data descriptor
        header.writeInteger(UInt32(zip64 ? 0xFFFF_FFFF : UInt32(size)), endianness: .little)
        header.writeInteger(UInt32(zip64 ? 0xFFFF_FFFF : UInt32(size)), endianness: .little)
        header.writeInteger(UInt16(bytes.count), endianness: .little)
        header.writeInteger(UInt16(zip64 ? 20 : 0), endianness: .little)
        header.writeBytes(bytes)
        if zip64 {
            header.writeInteger(UInt16(0x0001), endianness: .little)
            header.writeInteger(UInt16(16), endianness: .little)
            header.writeInteger(size, endianness: .little)
            header.writeInteger(size, endianness: .little)
        }
        offset += UInt64(header.readableBytes)
        crc = CRC32()
        if isFolder {
            var folder = entry
            folder.size = 0
            entries.append(folder)
        } else {
            current = entry
        }
        return header
    }

    /// Content of the entry begun last, on its way out.
    mutating func content(_ buffer: ByteBuffer) {
        buffer.withUnsafeReadableBytes { crc.update($0) }
        offset += UInt64(buffer.readableBytes)
    }

    /// Counts content without reading it: to work out the archive's length before writing it.
    mutating func skip(_ count: UInt64) { offset += count }

    /// The data descriptor that closes the entry begun last. Throws when the content was not the size announced
    /// (the archive would be corrupt: the response must fail rather than end as if whole).
    mutating func end(written: UInt64) throws -> ByteBuffer {
        guard var entry = current else { return ByteBuffer() }
        current = nil
        guard written == entry.size else { throw ZipError.sizeChanged(String(decoding: entry.name, as: UTF8.self)) }
        entry.crc = crc.value
        entries.append(entry)
        var descriptor = ByteBuffer()
        descriptor.writeInteger(UInt32(0x0807_4B50), endianness: .little)
        descriptor.writeInteger(entry.crc, endianness: .little)
        if entry.size >= 0xFFFF_FFFF {
            descriptor.writeInteger(entry.size, endianness: .little)
            descriptor.writeInteger(entry.size, endianness: .little)
        } else {
            descriptor.writeInteger(UInt32(entry.size), endianness: .little)
            descriptor.writeInteger(UInt32(entry.size), endianness: .little)
        }
        offset += UInt64(descriptor.readableBytes)
        return descriptor
    }

    /// The central directory and its end record(s): the archive's last bytes.
    func finish() -> ByteBuffer {
        var out = ByteBuffer()
        let start = offset
        for entry in entries {
            let bigSize = entry.size >= 0xFFFF_FFFF
            let bigOffset = entry.offset >= 0xFFFF_FFFF
            var extra = ByteBuffer()
            if bigSize || bigOffset {
                extra.writeInteger(UInt16(0x0001), endianness: .little)
                extra.writeInteger(UInt16((bigSize ? 16 : 0) + (bigOffset ? 8 : 0)), endianness: .little)
                if bigSize {
                    extra.writeInteger(entry.size, endianness: .little)
                    extra.writeInteger(entry.size, endianness: .little)
                }
                if bigOffset { extra.writeInteger(entry.offset, endianness: .little) }
            }
            out.writeInteger(UInt32(0x0201_4B50), endianness: .little)
            out.writeInteger(UInt16(0x0300 | 45), endianness: .little)  // made by: Unix, spec 4.5
            out.writeInteger(UInt16(bigSize || bigOffset ? 45 : 20), endianness: .little)
            out.writeInteger(UInt16(entry.isFolder ? 0x0800 : 0x0808), endianness: .little)
            out.writeInteger(UInt16(0), endianness: .little)
            out.writeInteger(entry.dosTime, endianness: .little)
            out.writeInteger(entry.dosDate, endianness: .little)
            out.writeInteger(entry.crc, endianness: .little)
            out.writeInteger(bigSize ? 0xFFFF_FFFF : UInt32(entry.size), endianness: .little)
            out.writeInteger(bigSize ? 0xFFFF_FFFF : UInt32(entry.size), endianness: .little)
            out.writeInteger(UInt16(entry.name.count), endianness: .little)
            out.writeInteger(UInt16(extra.readableBytes), endianness: .little)
            out.writeInteger(UInt16(0), endianness: .little)  // comment
            out.writeInteger(UInt16(0), endianness: .little)  // disk
            out.writeInteger(UInt16(0), endianness: .little)  // internal attributes
            // External attributes: Unix mode (rw-r--r--, or a folder's rwxr-xr-x) in the high half, MS-DOS folder bit.
            out.writeInteger(entry.isFolder ? UInt32(0o040755) << 16 | 0x10 : UInt32(0o100644) << 16, endianness: .little)
            out.writeInteger(bigOffset ? 0xFFFF_FFFF : UInt32(entry.offset), endianness: .little)
            out.writeBytes(entry.name)
            out.writeBuffer(&extra)
        }
        let size = UInt64(out.readableBytes)
        let needs64 = entries.count >= 0xFFFF || start >= 0xFFFF_FFFF || size >= 0xFFFF_FFFF
        if needs64 {
            let record = start + size
            out.writeInteger(UInt32(0x0606_4B50), endianness: .little)
            out.writeInteger(UInt64(44), endianness: .little)
            out.writeInteger(UInt16(0x0300 | 45), endianness: .little)
            out.writeInteger(UInt16(45), endianness: .little)
            out.writeInteger(UInt32(0), endianness: .little)
            out.writeInteger(UInt32(0), endianness: .little)
            out.writeInteger(UInt64(entries.count), endianness: .little)
            out.writeInteger(UInt64(entries.count), endianness: .little)
            out.writeInteger(size, endianness: .little)
            out.writeInteger(start, endianness: .little)
            out.writeInteger(UInt32(0x0706_4B50), endianness: .little)
            out.writeInteger(UInt32(0), endianness: .little)
            out.writeInteger(record, endianness: .little)
            out.writeInteger(UInt32(1), endianness: .little)
        }
        out.writeInteger(UInt32(0x0605_4B50), endianness: .little)
        out.writeInteger(UInt16(0), endianness: .little)
        out.writeInteger(UInt16(0), endianness: .little)
        out.writeInteger(UInt16(min(entries.count, 0xFFFF)), endianness: .little)
        out.writeInteger(UInt16(min(entries.count, 0xFFFF)), endianness: .little)
        out.writeInteger(UInt32(min(size, 0xFFFF_FFFF)), endianness: .little)
        out.writeInteger(UInt32(min(start, 0xFFFF_FFFF)), endianness: .little)
        out.writeInteger(UInt16(0), endianness: .little)
        return out
    }

    /// MS-DOS time and date (local fields of UTC: zip has no time zone), clamped to 1980–2107.
    static func dos(_ date: Date) -> (time: UInt16, date: UInt16) {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(secondsFromGMT: 0) ?? calendar.timeZone
        let c = calendar.dateComponents([.year, .month, .day, .hour, .minute, .second], from: date)
        let year = min(max((c.year ?? 1980) - 1980, 0), 127)
        let time = UInt16((c.hour ?? 0) << 11 | (c.minute ?? 0) << 5 | (c.second ?? 0) / 2)
        let day = UInt16(year << 9 | (c.month ?? 1) << 5 | (c.day ?? 1))
        return (time, day)
    }
}

enum ZipError: Error, CustomStringConvertible {
    case sizeChanged(String)

    var description: String {
        switch self {
        case .sizeChanged(let name): "'\(name)' changed while the zip was being written."
        }
    }
}

/// CRC-32 (IEEE 802.3, as zip and gzip use), eight bytes a step ("slicing by 8": table `k` at `k * 256`).
struct CRC32 {
    private(set) var value: UInt32 = 0

    private static let table: [UInt32] = {
        var table = [UInt32](repeating: 0, count: 8 * 256)
        for n in 0..<256 {
            var c = UInt32(n)
            for _ in 0..<8 { c = c & 1 != 0 ? 0xEDB8_8320 ^ (c >> 1) : c >> 1 }
            table[n] = c
        }
        for k in 1..<8 {
            for n in 0..<256 { table[k * 256 + n] = (table[(k - 1) * 256 + n] >> 8) ^ table[Int(table[(k - 1) * 256 + n] & 0xFF)] }
        }
        return table
    }()

    mutating func update(_ bytes: UnsafeRawBufferPointer) {
        var c = ~value
        Self.table.withUnsafeBufferPointer { t in
            var i = 0
            let n = bytes.count
            while i + 8 <= n {
                let low = c ^ (UInt32(bytes[i]) | UInt32(bytes[i + 1]) << 8 | UInt32(bytes[i + 2]) << 16 | UInt32(bytes[i + 3]) << 24)
                c = t[1792 + Int(low & 0xFF)] ^ t[1536 + Int((low >> 8) & 0xFF)] ^ t[1280 + Int((low >> 16) & 0xFF)] ^ t[1024 + Int(low >> 24)]
                    ^ t[768 + Int(bytes[i + 4])] ^ t[512 + Int(bytes[i + 5])] ^ t[256 + Int(bytes[i + 6])] ^ t[Int(bytes[i + 7])]
                i += 8
            }
            while i < n {
                c = t[Int((c ^ UInt32(bytes[i])) & 0xFF)] ^ (c >> 8)
                i += 1
            }
        }
        value = ~c
    }
}
