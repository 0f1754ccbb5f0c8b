import Foundation

/// Sealed forms and what they open to, looked up by the sealed form's UTF-8 bytes — as SQLite hands them over, so
/// a hit makes no `String` of the sealed text (a row holds four such texts; decoding and hashing them as strings was
/// most of what an encrypted store added to reading every row for a plan). Open addressing with linear probing over
/// a power-of-two slot array kept at most half full; the keys' bytes live one after another in one array.
///
/// Only ever holds texts this process sealed or opened (authenticated) itself: a hit is exact (bytes compared), never
/// a guess from a hash.
struct SealedTable {
    private var keys: [UInt8] = []
    private var starts: [Int] = []
    private var lengths: [Int] = []
    private var hashes: [UInt64] = []
    private var plains: [String] = []
    /// Entry index + 1 per slot; 0 is empty.
    private var slots = [Int32](repeating: 0, count: 64)

    var count: Int { plains.count }

    mutating func reserveCapacity(_ entries: Int) {
        keys.reserveCapacity(keys.count + entries * 48)
        starts.reserveCapacity(count + entries)
        lengths.reserveCapacity(count + entries)
        hashes.reserveCapacity(count + entries)
        plains.reserveCapacity(count + entries)
        var size = slots.count
        while size < (count + entries) * 2 { size <<= 1 }
        if size > slots.count { rehash(size) }
    }

    /// What the sealed form `sealed` (its UTF-8 bytes) opens to, if known.
    func plain(_ sealed: UnsafeRawBufferPointer) -> String? {
        entry(sealed, Self.hash(sealed)).map { plains[$0] }
    }

    /// The entry holding `sealed`, whose hash is `hash`.
    private func entry(_ sealed: UnsafeRawBufferPointer, _ hash: UInt64) -> Int? {
        let mask = slots.count - 1
        var slot = Int(truncatingIfNeeded: hash) & mask
        return keys.withUnsafeBytes { keyBytes -> Int? in
            while true {
                let entry = Int(slots[slot]) - 1
                if entry < 0 { return nil }
                if hashes[entry] == hash, lengths[entry] == sealed.count,
                    Self.same(UnsafeRawBufferPointer(rebasing: keyBytes[starts[entry]..<starts[entry] + lengths[entry]]), sealed)
                {
                    return entry
                }
                slot = (slot + 1) & mask
            }
        }
    }

    func plain(_ sealed: String) -> String? {
        var sealed = sealed
        return sealed.withUTF8 { plain(UnsafeRawBufferPointer($0)) }
    }

    /// Adds a sealed form (its bytes) and what it opens to; nothing when it is there already.
    mutating func insert(_ sealed: UnsafeRawBufferPointer, plain: String) {
        let hash = Self.hash(sealed)
        if entry(sealed, hash) != nil { return }
        starts.append(keys.count)
        lengths.append(sealed.count)
        keys.append(contentsOf: sealed)
        hashes.append(hash)
        plains.append(plain)
        if plains.count * 2 > slots.count {
            rehash(slots.count * 2)
        } else {
            place(plains.count - 1, hash)
        }
    }

    mutating func insert(_ sealed: String, plain: String) {
        var sealed = sealed
        sealed.withUTF8 { insert(UnsafeRawBufferPointer($0), plain: plain) }
    }

    /// Every entry: its sealed form's bytes and what it opens to.
    func forEach(_ body: (UnsafeRawBufferPointer, String) throws -> Void) rethrows {
        try keys.withUnsafeBytes { keyBytes in
            for entry in plains.indices {
                try body(UnsafeRawBufferPointer(rebasing: keyBytes[starts[entry]..<starts[entry] + lengths[entry]]), plains[entry])
            }
        }
    }

    private mutating func rehash(_ size: Int) {
        slots = [Int32](repeating: 0, count: size)
        for entry in plains.indices { place(entry, hashes[entry]) }
    }

    private mutating func place(_ entry: Int, _ hash: UInt64) {
        let mask = slots.count - 1
        var slot = Int(truncatingIfNeeded: hash) & mask
        while slots[slot] != 0 { slot = (slot + 1) & mask }
        slots[slot] = Int32(entry + 1)
    }

    /// Whether two byte ranges hold the same bytes.
    static func same(_ first: UnsafeRawBufferPointer, _ second: UnsafeRawBufferPointer) -> Bool {
        guard first.count == second.count else { return false }
        guard let one = first.baseAddress, let other = second.baseAddress else { return first.isEmpty }
        return memcmp(one, other, first.count) == 0
    }

    /// A fast 64-bit mix of the bytes (8 at a time, then the tail, then murmur3's finalizer): keys are base64 of
    /// AES output, so any reasonable mix spreads them; equality is always checked on the bytes.
    static func hash(_ bytes: UnsafeRawBufferPointer) -> UInt64 {
        var hash: UInt64 = 0x9E37_79B9_7F4A_7C15 ^ UInt64(bytes.count)
        var offset = 0
        while offset + 8 <= bytes.count {
            hash = (hash ^ bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self)) &* 0xBF58_476D_1CE4_E5B9
            hash ^= hash >> 31
            offset += 8
        }
        var tail: UInt64 = 0
        var shift: UInt64 = 0
        while offset < bytes.count {
            tail |= UInt64(bytes[offset]) << shift
            shift += 8
            offset += 1
        }
        hash = (hash ^ tail) &* 0x94D0_49BB_1331_11EB
        hash ^= hash >> 33
        hash = hash &* 0xFF51_AFD7_ED55_8CCD
        hash ^= hash >> 33
        return hash
    }
}
