// Identity of a full KV cache block for prefix caching, shared by the worker (which caches blocks
// by it) and the gateway (which routes a prompt to the worker holding its prefix).
//
// A block's hash chains its parent's: SHA-256(parent hash, cache salt of the first block, the
// block's token ids), truncated to 128 bits. Two blocks are interchangeable exactly when their
// whole prefixes (and salts) are equal, barring a 128-bit collision; a cryptographic hash keeps
// one tenant from crafting a collision with another's prefix. The worker's load stream carries
// only the first 64 bits (`RoutingHash`), enough to route by.
//
// Thread-safe: pure functions.

#ifndef LLMSERVE_COMMON_PREFIX_CACHE_BLOCK_HASH_H_
#define LLMSERVE_COMMON_PREFIX_CACHE_BLOCK_HASH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/hash/hash.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace llmserve::common {

struct BlockHash {
  uint64_t high = 0;
  uint64_t low = 0;

  // The 64 bits published in LoadReport events.
  uint64_t RoutingHash() const { return high; }

  friend bool operator==(const BlockHash& a, const BlockHash& b) {
    return a.high == b.high && a.low == b.low;
  }
  friend bool operator!=(const BlockHash& a, const BlockHash& b) { return !(a == b); }
  template <typename H>
  friend H AbslHashValue(H state, const BlockHash& hash) {
    return H::combine(std::move(state), hash.high, hash.low);
  }
};

// The hash of a block holding `tokens` whose predecessor has hash `parent` (nullptr for the first
// block of a sequence, which mixes in `salt`).
BlockHash HashBlock(const BlockHash* parent, absl::Span<const int32_t> tokens,
                    absl::string_view salt);

// The hashes of every full block of `tokens` (tokens.size() / block_size of them), chained.
std::vector<BlockHash> HashFullBlocks(absl::Span<const int32_t> tokens, int32_t block_size,
                                      absl::string_view salt);

// The salt of a request that runs LoRA adapter `adapter` (empty: the base model, `salt` as it
// is): the same tokens under different adapters have different K/V, so their blocks must never be
// shared. The worker and the gateway's routing both hash with it.
std::string LoraCacheSalt(absl::string_view salt, absl::string_view adapter);

}  // namespace llmserve::common

#endif  // LLMSERVE_COMMON_PREFIX_CACHE_BLOCK_HASH_H_
