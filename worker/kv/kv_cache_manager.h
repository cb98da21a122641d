// Per-request block tables over a BlockPool, with prefix caching.
//
// The lifecycle of a request, as the scheduler drives it:
//   1. FindCachedPrefix(block_hashes, num_tokens): the longest run of cached full blocks of the
//      request's tokens (no change). The hashes are the request's own, computed once as its tokens
//      arrive (Request::block_hashes), not on every admission attempt.
//   2. AllocateSlots(id, num_new_tokens, &hit): on admission, takes the hit's blocks and enough
//      new blocks for the tokens to compute. Later steps call it again to grow the table.
//      Prepare-then-commit: when blocks are short it returns nullopt and changes nothing.
//   3. CacheComputedBlocks(id, block_hashes, num_computed): every block full once num_computed
//      tokens are in the cache is registered for reuse under its hash. The scheduler calls it when
//      it schedules the tokens, so that a request admitted later in the same step can share them:
//      backends write every new token's K/V before any attention of the same layer reads it.
//   4. Free(id): on finish, abort or preemption; cached blocks stay reusable until evicted.
//
// Prefix hits are whole blocks, and never the whole prompt: the last prompt token is always
// computed, since its logits give the first output token.
//
// Not thread-safe: owned by the engine thread.

#ifndef LLMSERVE_WORKER_KV_KV_CACHE_MANAGER_H_
#define LLMSERVE_WORKER_KV_KV_CACHE_MANAGER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/prefix_cache/block_hash.h"
#include "worker/kv/block_pool.h"

namespace llmserve::worker {

using RequestId = uint64_t;

// The cached prefix of a prompt, found by FindCachedPrefix.
struct PrefixHit {
  std::vector<int32_t> blocks;
  // Tokens covered: blocks.size() * block_size.
  int32_t num_tokens = 0;
  // The tokens looked up (counted as prefix-cache queries at admission).
  int32_t prompt_tokens = 0;
  // The hashes of `blocks`, to check at admission that none was evicted since the lookup.
  std::vector<common::BlockHash> hashes;
};

// Counters since start.
struct KvCacheStats {
  int64_t prefix_queries = 0;  // prompt tokens looked up at admission
  int64_t prefix_hits = 0;     // of those, tokens served from the cache
  int64_t evictions = 0;       // cached blocks evicted to make room
  int32_t total_blocks = 0;    // usable blocks (the null block excluded)
  int32_t free_blocks = 0;     // in the free queue (cached free blocks included)
};

class KvCacheManager {
 public:
  KvCacheManager(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching);

  int32_t block_size() const { return block_size_; }
  // Blocks a request of `num_tokens` tokens occupies.
  int32_t BlocksFor(int64_t num_tokens) const;

  bool prefix_caching() const { return enable_prefix_caching_; }

  // The longest cached prefix of a request's `num_tokens` tokens, given the hashes of their full
  // blocks (common::HashFullBlocks under the request's cache salt; empty when caching is off).
  PrefixHit FindCachedPrefix(absl::Span<const common::BlockHash> block_hashes,
                             int32_t num_tokens) const;

  // Grows request `id`'s table to hold its computed tokens plus `num_new_tokens`. On the first
  // call for `id`, `hit` (may be null) gives its cached prefix, which counts as computed; it must
  // come from FindCachedPrefix with no other allocation in between. Returns
  // the blocks added to the table (possibly none), or nullopt, changing nothing, when the pool
  // cannot supply them.
  std::optional<std::vector<int32_t>> AllocateSlots(RequestId id, int32_t num_new_tokens,
                                                    const PrefixHit* hit = nullptr);

  // Shrinks request `id`'s table to its first `num_computed` tokens, freeing the blocks past them:
  // after a speculative step, the slots of the rejected draft tokens. Their blocks are never in
  // the prefix cache (only blocks of known tokens are registered), so none is lost to it. CHECKs
  // that `num_computed` does not drop below the table's registered blocks. Unknown ids are
  // ignored.
  void RollbackSlots(RequestId id, int32_t num_computed);

  // Registers the request's blocks that are full once `num_computed` of its tokens (prompt and
  // output so far) are in the cache, under their hashes: `block_hashes` are those of the
  // request's full blocks, as for FindCachedPrefix.
  void CacheComputedBlocks(RequestId id, absl::Span<const common::BlockHash> block_hashes,
                           int32_t num_computed);

  // Forgets the whole prefix cache (after a failed forward pass, whose blocks hold garbage).
  void ClearPrefixCache();

  // Releases the request's blocks (tail blocks first in eviction order). Unknown ids are ignored.
  void Free(RequestId id);

  // The request's block table; empty for unknown ids.
  const std::vector<int32_t>& BlockTable(RequestId id) const;
  bool HasRequest(RequestId id) const { return requests_.contains(id); }

  KvCacheStats Stats() const;
  std::vector<PrefixCacheEvent> TakeEvents() { return pool_.TakeEvents(); }
  std::vector<uint64_t> CachedRoutingHashes() const { return pool_.CachedRoutingHashes(); }
  const BlockPool& pool() const { return pool_; }

 private:
  struct RequestBlocks {
    std::vector<int32_t> blocks;
    int32_t num_cached = 0;       // leading blocks registered in the cache
    int32_t capacity_tokens = 0;  // tokens the table is sized for
  };

  BlockPool pool_;
  int32_t block_size_;
  bool enable_prefix_caching_;
  absl::flat_hash_map<RequestId, RequestBlocks> requests_;
  int64_t prefix_queries_ = 0;
  int64_t prefix_hits_ = 0;
};

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_KV_KV_CACHE_MANAGER_H_
