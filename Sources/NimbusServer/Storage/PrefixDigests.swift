import Crypto
import Foundation
import NIOConcurrencyHelpers

/// SHA-256 states part-way through contents whose checksum a commit lately computed, each under a key naming the
/// blocks before that point: a new version that begins with the same blocks as one checked before (an append, an
/// edit past the start, a retried commit) is hashed from the last such point on instead of from its first byte.
///
/// A key is a chain over the blocks' (SHA-256, size) — the block hashes were checked against the bytes when the
/// blocks came in, so equal keys are equal bytes, and the state was computed from the bytes read back from the
/// store. Kept in memory, per process, at most ``limit`` states (the oldest go first, ~2 MB); a state every
/// ``spacing`` bytes or more (at most ``perContent`` per content).
final class PrefixDigests: Sendable {
    static let shared = PrefixDigests()
    static let spacing: Int64 = 4 << 20
    static let perContent = 1_024
    static let limit = 8_192

    private struct State {
        var digests: [Data: SHA256] = [:]
        var order: [Data] = []
        var head = 0
    }
    private let state = NIOLockedValueBox(State())

    /// `keys[i]` names the first `i` blocks of `blocks` (`keys[0]`: none yet, for this user).
    static func keys(_ blocks: [BlockRef], user: String) -> [Data] {
        var keys: [Data] = []
        keys.reserveCapacity(blocks.count + 1)
        var key = Data(SHA256.hash(data: Data("nimbus-prefix-v1 \(user)".utf8)))
        keys.append(key)
        for block in blocks {
            var hasher = SHA256()
            hasher.update(data: key)
            hasher.update(data: Data("\(block.hash) \(block.size)".utf8))
            key = Data(hasher.finalize())
            keys.append(key)
        }
        return keys
    }

    /// Where hashing can start: the most blocks whose state is known (0 and a fresh hasher when none is).
    func start(_ keys: [Data]) -> (blocks: Int, digest: SHA256) {
        state.withLockedValue { state in
            for index in stride(from: keys.count - 1, to: 0, by: -1) {
                if let digest = state.digests[keys[index]] { return (index, digest) }
            }
            return (0, SHA256())
        }
    }

    /// Keeps `digest`, the state after the blocks `key` names.
    func record(_ key: Data, _ digest: SHA256) {
        state.withLockedValue { state in
            guard state.digests.updateValue(digest, forKey: key) == nil else { return }
            state.order.append(key)
            if state.order.count - state.head > Self.limit {
                state.digests[state.order[state.head]] = nil
                state.head += 1
                if state.head > Self.limit {
                    state.order.removeFirst(state.head)
                    state.head = 0
                }
            }
        }
    }

    /// A checksum about to be computed: hash ``blocks``[``from``...] into ``digest``, call ``passed(_:)`` after
    /// each whole block, then take ``digest``'s hex.
    struct Walk {
        let cache: PrefixDigests
        let blocks: [BlockRef]
        let keys: [Data]
        let every: Int64
        let from: Int
        var digest: SHA256
        private var since: Int64 = 0

        init(cache: PrefixDigests, blocks: [BlockRef], user: String) {
            self.cache = cache
            self.blocks = blocks
            keys = PrefixDigests.keys(blocks, user: user)
            (from, digest) = cache.start(keys)
            every = max(PrefixDigests.spacing, blocks.reduce(Int64(0)) { $0 + $1.size } / Int64(PrefixDigests.perContent))
        }

        /// Block `index` is in ``digest`` now.
        mutating func passed(_ index: Int) {
            since += blocks[index].size
            if since >= every || index == blocks.count - 1 {
                cache.record(keys[index + 1], digest)
                since = 0
            }
        }

        var checksum: String { digest.finalize().hexString }
    }

    func walk(_ blocks: [BlockRef], user: String) -> Walk { Walk(cache: self, blocks: blocks, user: user) }
}
