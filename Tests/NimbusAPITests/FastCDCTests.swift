import Foundation
@testable import NimbusAPI
import Testing

@Suite("FastCDC content-defined chunking")
struct FastCDCTests {
    /// Deterministic pseudo-random bytes (SplitMix64), so failures reproduce.
    static func bytes(_ count: Int, seed: UInt64) -> [UInt8] {
        var state = seed
        var result = [UInt8]()
        result.reserveCapacity(count + 8)
        while result.count < count {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            z ^= z >> 31
            withUnsafeBytes(of: z) { result.append(contentsOf: $0) }
        }
        return Array(result.prefix(count))
    }

    /// The textbook loop, one byte at a time: what the two-byte scanner must agree with exactly.
    static func reference(_ data: [UInt8], _ parameters: FastCDC.Parameters = .standard) -> [Int] {
        var lengths: [Int] = []
        var start = 0
        while start < data.count {
            let remaining = data.count - start
            if remaining <= parameters.minimum {
                lengths.append(remaining)
                break
            }
            var hash: UInt64 = 0
            var index = parameters.minimum
            var length = min(parameters.maximum, remaining)
            while index < min(parameters.maximum, remaining) {
                hash = (hash << 1) &+ FastCDC.gear[Int(data[start + index])]
                let mask = index < parameters.average ? parameters.strictMask : parameters.looseMask
                index += 1
                if hash & mask == 0 {
                    length = index
                    break
                }
            }
            lengths.append(length)
            start += length
        }
        return lengths
    }

    static func lengths(_ data: [UInt8], pieces: [Int]? = nil, _ parameters: FastCDC.Parameters = .standard) -> [Int] {
        var scanner = FastCDC.Scanner(parameters)
        var ends: [Int] = []
        data.withUnsafeBytes { all in
            var offset = 0
            var piece = 0
            while offset < all.count {
                let size = min(pieces.map { $0[piece % $0.count] } ?? all.count, all.count - offset)
                piece += 1
                var cuts: [Int] = []
                scanner.scan(UnsafeRawBufferPointer(rebasing: all[offset..<offset + size]), cuts: &cuts)
                ends += cuts.map { $0 + offset }
                offset += size
            }
        }
        if scanner.pending > 0 { ends.append(data.count) }
        var previous = 0
        return ends.map { end in
            defer { previous = end }
            return end - previous
        }
    }

    @Test("the four-byte loop finds exactly the cut points of the byte-at-a-time loop, whole or fed in pieces of any size")
    func matchesReference() {
        for seed in UInt64(1)...4 {
            let data = Self.bytes(3_000_000 + Int(seed) * 777, seed: seed)
            let expected = Self.reference(data)
            #expect(Self.lengths(data) == expected, "seed \(seed), whole")
            #expect(data.withUnsafeBytes { FastCDC.lengths(of: $0) } == expected)
            for pieces in [[1], [7, 1, 4096], [65_536], [100_003, 3], [16_384, 1, 1, 250_000]] where seed <= 2 || pieces != [1] {
                #expect(Self.lengths(data, pieces: pieces) == expected, "seed \(seed), pieces \(pieces)")
            }
        }
        // Other sizes, a small average included.
        let small = FastCDC.Parameters(minimum: 512, average: 2048, maximum: 8192)
        let data = Self.bytes(500_000, seed: 9)
        #expect(Self.lengths(data, small) == Self.reference(data, small))
        #expect(Self.lengths(data, pieces: [3, 1000], small) == Self.reference(data, small))
    }

    @Test("chunks stay within the minimum and maximum, add up to the content, and average near 64 KiB")
    func sizes() {
        let data = Self.bytes(32 << 20, seed: 42)
        let lengths = Self.lengths(data)
        #expect(lengths.reduce(0, +) == data.count)
        #expect(lengths.dropLast().allSatisfy { $0 >= 16 << 10 && $0 <= 256 << 10 })
        #expect(lengths.last.map { $0 > 0 && $0 <= 256 << 10 } == true)
        let average = data.count / lengths.count
        #expect(average > 48 << 10 && average < 96 << 10, "average \(average)")
        // Content with no cut points (all zeros hashes to a constant pattern) is cut at the maximum.
        let zeros = [UInt8](repeating: 0, count: 1 << 20)
        #expect(Self.lengths(zeros).allSatisfy { $0 <= 256 << 10 && $0 >= 16 << 10 })
        #expect(Self.lengths([]).isEmpty)
        #expect(Self.lengths([1, 2, 3]) == [3])
    }

    /// Chunks of `edited` not among the chunks of `original` (what would be sent).
    static func newBytes(_ original: [UInt8], _ edited: [UInt8]) -> (chunks: Int, bytes: Int) {
        func chunks(_ data: [UInt8]) -> [ArraySlice<UInt8>] {
            var offset = 0
            return Self.lengths(data).map { length in
                defer { offset += length }
                return data[offset..<offset + length]
            }
        }
        let known = Set(chunks(original).map { Array($0) })
        let fresh = chunks(edited).filter { !known.contains(Array($0)) }
        return (fresh.count, fresh.reduce(0) { $0 + $1.count })
    }

    @Test("edits change only the chunks around them: an insertion in the middle, an append, a flipped byte")
    func shiftResistance() {
        let original = Self.bytes(16 << 20, seed: 7)
        let insert = Self.bytes(1 << 20, seed: 8)
        var inserted = original
        inserted.insert(contentsOf: insert, at: 8 << 20)
        let afterInsert = Self.newBytes(original, inserted)
        #expect(afterInsert.bytes < (1 << 20) + 600 << 10, "inserting 1 MiB sends \(afterInsert.bytes) bytes")
        let appended = original + insert
        let afterAppend = Self.newBytes(original, appended)
        #expect(afterAppend.bytes < (1 << 20) + 300 << 10, "appending 1 MiB sends \(afterAppend.bytes) bytes")
        var flipped = original
        flipped[5_000_000] ^= 0x01
        let afterFlip = Self.newBytes(original, flipped)
        #expect(afterFlip.chunks <= 2 && afterFlip.bytes <= 512 << 10, "flipping a byte sends \(afterFlip)")
    }

    @Test("the cut points are part of the storage format: pinned for a fixed input")
    func pinned() {
        let data = Self.bytes(1 << 20, seed: 2026)
        let lengths = Self.lengths(data)
        #expect(FastCDC.Parameters.standard.strictMask.nonzeroBitCount == 18)
        #expect(FastCDC.Parameters.standard.looseMask.nonzeroBitCount == 14)
        #expect(lengths == Self.pinnedLengths, "\(lengths)")
    }

    static let pinnedLengths = [
        71415, 56475, 82238, 66173, 65873, 74631, 75780, 71116, 58354, 69156, 70180, 71980, 66213, 82184, 66808,
    ]
}
