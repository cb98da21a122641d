#include "worker/kv/kv_cache_manager.h"

#include <algorithm>

#include "common/base/logging.h"

namespace llmserve::worker {

KvCacheManager::KvCacheManager(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching)
    : pool_(num_blocks, enable_prefix_caching),
      block_size_(block_size),
      enable_prefix_caching_(enable_prefix_caching) {
  LLMSERVE_CHECK(block_size >= 1) << "block_size " << block_size;
}

int32_t KvCacheManager::BlocksFor(int64_t num_tokens) const {
  return static_cast<int32_t>((num_tokens + block_size_ - 1) / block_size_);
}

PrefixHit KvCacheManager::FindCachedPrefix(absl::Span<const common::BlockHash> block_hashes,
                                           int32_t num_tokens) const {
  PrefixHit hit;
  hit.prompt_tokens = num_tokens;
  if (!enable_prefix_caching_ || num_tokens <= 0) return hit;
  // The last token must be computed: at most (len - 1) tokens can come from the cache.
  const size_t max_blocks = static_cast<size_t>(num_tokens - 1) / block_size_;
  for (size_t b = 0; b < std::min(max_blocks, block_hashes.size()); ++b) {
    const std::optional<int32_t> block = pool_.FindCachedBlock(block_hashes[b]);
    if (!block) break;
    hit.blocks.push_back(*block);
    hit.hashes.push_back(block_hashes[b]);
  }
  hit.num_tokens = static_cast<int32_t>(hit.blocks.size()) * block_size_;
  return hit;
}

std::optional<std::vector<int32_t>> KvCacheManager::AllocateSlots(RequestId id,
                                                                  int32_t num_new_tokens,
                                                                  const PrefixHit* hit) {
  const auto existing = requests_.find(id);
  const bool admitting = existing == requests_.end();
  const int32_t hit_tokens = admitting && hit != nullptr ? hit->num_tokens : 0;
  const int32_t computed = admitting ? hit_tokens : existing->second.capacity_tokens;
  const int32_t owned = admitting ? 0 : static_cast<int32_t>(existing->second.blocks.size());
  const int32_t hit_blocks =
      admitting && hit != nullptr ? static_cast<int32_t>(hit->blocks.size()) : 0;
  const int32_t new_blocks = BlocksFor(computed + num_new_tokens) - owned - hit_blocks;
  // Prepare: hit blocks that sit in the free queue leave it too.
  int32_t taken_from_free = std::max(0, new_blocks);
  for (int32_t b = 0; b < hit_blocks; ++b) {
    if (pool_.ref_count(hit->blocks[b]) == 0) ++taken_from_free;
  }
  if (taken_from_free > pool_.num_free_blocks()) return std::nullopt;

  // Commit.
  RequestBlocks& request = requests_[id];
  if (admitting) {
    if (hit != nullptr) {
      for (int32_t b = 0; b < hit_blocks; ++b) {
        LLMSERVE_CHECK(pool_.FindCachedBlock(hit->hashes[b]) == hit->blocks[b])
            << "stale prefix hit: block " << hit->blocks[b] << " was evicted since the lookup";
      }
      pool_.Touch(hit->blocks);
      request.blocks = hit->blocks;
      request.num_cached = hit_blocks;
      prefix_hits_ += hit_tokens;
      prefix_queries_ += hit->prompt_tokens;
    }
  }
  std::vector<int32_t> added;
  if (new_blocks > 0) {
    added = pool_.AllocateBlocks(new_blocks);
    request.blocks.insert(request.blocks.end(), added.begin(), added.end());
  }
  request.capacity_tokens = computed + num_new_tokens;
  return added;
}

void KvCacheManager::CacheComputedBlocks(RequestId id,
                                         absl::Span<const common::BlockHash> block_hashes,
                                         int32_t num_computed) {
  if (!enable_prefix_caching_) return;
  const auto it = requests_.find(id);
  if (it == requests_.end()) return;
  RequestBlocks& request = it->second;
  const int32_t full =
      std::min({num_computed / block_size_, static_cast<int32_t>(request.blocks.size()),
                static_cast<int32_t>(block_hashes.size())});
  for (int32_t b = request.num_cached; b < full; ++b) {
    pool_.CacheBlock(request.blocks[b], block_hashes[b]);
  }
  request.num_cached = std::max(request.num_cached, full);
}

void KvCacheManager::RollbackSlots(RequestId id, int32_t num_computed) {
  const auto it = requests_.find(id);
  if (it == requests_.end()) return;
  RequestBlocks& request = it->second;
  const int32_t keep = BlocksFor(num_computed);
  LLMSERVE_CHECK(num_computed >= 0 && keep >= request.num_cached)
      << "rolling back request " << id << " to " << num_computed << " tokens would drop "
      << request.num_cached << " registered blocks";
  request.capacity_tokens = std::min(request.capacity_tokens, num_computed);
  if (keep >= static_cast<int32_t>(request.blocks.size())) return;
  std::vector<int32_t> freed(request.blocks.rbegin(), request.blocks.rend() - keep);
  request.blocks.resize(keep);
  pool_.Free(freed);
}

void KvCacheManager::ClearPrefixCache() {
  pool_.ClearCache();
  // Requests keep their blocks but must register them again if they are to be shared.
  for (auto& [id, request] : requests_) request.num_cached = 0;
}

void KvCacheManager::Free(RequestId id) {
  const auto it = requests_.find(id);
  if (it == requests_.end()) return;
  // Reverse order: a sequence's tail blocks are the least likely to be shared, so they should be
  // evicted first.
  std::vector<int32_t> blocks(it->second.blocks.rbegin(), it->second.blocks.rend());
  pool_.Free(blocks);
  requests_.erase(it);
}

const std::vector<int32_t>& KvCacheManager::BlockTable(RequestId id) const {
  static const auto* const kEmpty = new std::vector<int32_t>();
  const auto it = requests_.find(id);
  return it == requests_.end() ? *kEmpty : it->second.blocks;
}

KvCacheStats KvCacheManager::Stats() const {
  return {.prefix_queries = prefix_queries_,
          .prefix_hits = prefix_hits_,
          .evictions = pool_.num_evictions(),
          .total_blocks = pool_.num_blocks() - 1,
          .free_blocks = pool_.num_free_blocks()};
}

}  // namespace llmserve::worker
