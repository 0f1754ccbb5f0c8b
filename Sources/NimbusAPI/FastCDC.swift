/// Content-defined chunking: FastCDC as in Xia et al., "The Design of Fast Content-Defined Chunking for Data
/// Deduplication Based Storage Systems" (IEEE TPDS, 2020) — a gear rolling hash, cut-point skipping below the
/// minimum size, normalized chunking (a stricter mask before the average size, a looser one after), and the
/// "rolling two bytes" idea taken to four bytes a step, which finds exactly the cut points of the byte-at-a-time
/// loop with a quarter of the shifts.
///
/// Both sides use it: the client to find which blocks of a new version the server lacks, the server to cut every
/// upload (simple, batch, resumable) into the same blocks, so that content sent one way deduplicates against
/// content sent the other. The gear table and masks are part of the storage format: changing them changes every
/// cut point (content still reads back; only deduplication against older blocks is lost).
///
/// ```swift
/// var scanner = FastCDC.Scanner()
/// var cuts: [Int] = []
/// bytes.withUnsafeBytes { scanner.scan($0, cuts: &cuts) }   // chunk ends, as offsets into `bytes`
/// // ... more bytes; at the end of the content the bytes since the last cut are the last chunk.
/// ```
public enum FastCDC {
    /// Chunk sizes. The defaults (16 KiB / 64 KiB / 256 KiB) were chosen by measurement (`scripts/bench/chunking.py`
    /// and the delta benchmark): 64 KiB on average keeps a one-byte edit's upload near 64 KiB and a 1 MiB insertion's
    /// near 1.1 MiB, while a 10 GiB file stays at about 160,000 blocks.
    public struct Parameters: Sendable, Equatable {
        public var minimum: Int
        public var average: Int
        public var maximum: Int

        public init(minimum: Int, average: Int, maximum: Int) {
            precondition(minimum >= 64 && minimum <= average && average <= maximum, "FastCDC sizes must grow: \(minimum) ≤ \(average) ≤ \(maximum)")
            precondition(average & (average - 1) == 0 && average >= 256 && average <= 1 << 26, "the average chunk size is a power of two")
            self.minimum = minimum
            self.average = average
            self.maximum = maximum
        }

        public static let standard = Parameters(minimum: 16 << 10, average: 64 << 10, maximum: 256 << 10)

        /// Bits of the average size (16 for 64 KiB).
        var bits: Int { average.trailingZeroBitCount }
        /// Normalization level 2: two bits more before the average size, two fewer after.
        var strictMask: UInt64 { FastCDC.mask(ones: bits + 2) }
        var looseMask: UInt64 { FastCDC.mask(ones: bits - 2) }
    }

    /// A mask of `ones` bits spread evenly over bits 60…13 of the hash (high bits: they depend on more of the
    /// last 64 bytes; spread: a wider effective window, as the paper's zero-padded masks). Bits 61–63 stay clear so
    /// the checks inside a four-byte step, which shift the mask left by up to three, lose nothing.
    static func mask(ones: Int) -> UInt64 {
        let count = max(1, min(ones, 48))
        var mask: UInt64 = 0
        for index in 0..<count { mask |= 1 << UInt64(60 - index * 48 / count) }
        return mask
    }

    /// The gear table: 256 pseudo-random 64-bit values (SplitMix64 from a fixed seed, so every platform and every
    /// version of this code agrees on them).
    static let gear: [UInt64] = {
        var state: UInt64 = 0x4E49_4D42_5553_4344  // "NIMBUSCD"
        return (0..<256).map { _ in
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }()

    /// The gear table, then shifted left by one, two and three bits (for the bytes of a four-byte step).
    static let tables: [UInt64] = gear + gear.map { $0 << 1 } + gear.map { $0 << 2 } + gear.map { $0 << 3 }

    /// Finds chunk ends in a stream of bytes given in pieces of any size. It keeps only the position in the
    /// current chunk and the rolling hash, so memory does not grow with the content.
    public struct Scanner: Sendable {
        public let parameters: Parameters
        /// Bytes of the current (not yet ended) chunk seen so far.
        public private(set) var pending = 0
        private var hash: UInt64 = 0
        private let strict: UInt64
        private let loose: UInt64
        /// Where the strict mask gives way to the loose one (the paper's "normal size").
        private let normal: Int

        public init(_ parameters: Parameters = .standard) {
            self.parameters = parameters
            strict = parameters.strictMask
            loose = parameters.looseMask
            normal = min(max(parameters.average, parameters.minimum), parameters.maximum)
        }

        /// Scans `bytes`, appending to `cuts` the offset (into `bytes`) just past every chunk that ends in them.
        /// The bytes after the last cut belong to a chunk that goes on in the next call, or that the end of the
        /// content ends (``pending`` bytes long).
        public mutating func scan(_ bytes: UnsafeRawBufferPointer, cuts: inout [Int]) {
            guard let base = bytes.baseAddress?.assumingMemoryBound(to: UInt8.self) else { return }
            let count = bytes.count
            var index = 0
            var position = pending
            var hash = self.hash
            let minimum = parameters.minimum, maximum = parameters.maximum, normal = self.normal
            let strict = self.strict, loose = self.loose
            FastCDC.tables.withUnsafeBufferPointer { tables in
                guard let gear = tables.baseAddress else { return }
                let shifted1 = gear + 256, shifted2 = gear + 512, shifted3 = gear + 768
                while index < count {
                    // Below the minimum nothing can end a chunk: skip those bytes unhashed (the hash only
                    // remembers the last 64 bytes anyway, and restarts with each chunk).
                    if position < minimum {
                        let skip = min(minimum - position, count - index)
                        index += skip
                        position += skip
                        hash = 0
                        continue
                    }
                    var cut = false
                    // The zone: the strict mask up to the normal size, the loose one after, up to the maximum.
                    let limit = position < normal ? normal : maximum
                    let mask = position < normal ? strict : loose
                    let mask1 = mask << 1, mask2 = mask << 2, mask3 = mask << 3
                    let start = index
                    let end = index + min(limit - position, count - index)
                    // Four bytes per step: the hash after each of them, shifted left by the bytes still to
                    // come in the step, is the running sum — checked against the mask shifted the same way.
                    while index + 3 < end {
                        hash = (hash << 4) &+ shifted3[Int(base[index])]
                        if hash & mask3 == 0 { index += 1; cut = true; break }
                        hash = hash &+ shifted2[Int(base[index + 1])]
                        if hash & mask2 == 0 { index += 2; cut = true; break }
                        hash = hash &+ shifted1[Int(base[index + 2])]
                        if hash & mask1 == 0 { index += 3; cut = true; break }
                        hash = hash &+ gear[Int(base[index + 3])]
                        if hash & mask == 0 { index += 4; cut = true; break }
                        index += 4
                    }
                    // The last bytes of the zone (or of `bytes`), one at a time.
                    while !cut && index < end {
                        hash = (hash << 1) &+ gear[Int(base[index])]
                        index += 1
                        if hash & mask == 0 { cut = true }
                    }
                    position += index - start
                    if cut || position >= maximum {
                        cuts.append(index)
                        position = 0
                        hash = 0
                    }
                }
            }
            self.hash = hash
            pending = position
        }

        /// Forgets the current chunk: the next byte starts a new one (after a forced cut, such as the end of a file).
        public mutating func reset() {
            pending = 0
            hash = 0
        }
    }

    /// The chunk lengths of `bytes` taken as a whole content (the last chunk ends with it).
    public static func lengths(of bytes: UnsafeRawBufferPointer, _ parameters: Parameters = .standard) -> [Int] {
        var scanner = Scanner(parameters)
        var cuts: [Int] = []
        scanner.scan(bytes, cuts: &cuts)
        if scanner.pending > 0 { cuts.append(bytes.count) }
        var previous = 0
        return cuts.map { cut in
            defer { previous = cut }
            return cut - previous
        }
    }
}
