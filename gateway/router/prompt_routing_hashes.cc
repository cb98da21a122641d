#include "gateway/router/prompt_routing_hashes.h"

#include "common/prefix_cache/block_hash.h"

namespace llmserve::gateway {

absl::Span<const uint64_t> PromptRoutingHashes::ForBlockSize(int32_t block_size) {
  if (block_size <= 0) return {};
  auto [it, inserted] = by_block_size_.try_emplace(block_size);
  if (inserted) {
    ++hash_passes_;
    for (const common::BlockHash& hash : common::HashFullBlocks(tokens_, block_size, cache_salt_)) {
      it->second.push_back(hash.RoutingHash());
    }
  }
  return it->second;
}

}  // namespace llmserve::gateway
