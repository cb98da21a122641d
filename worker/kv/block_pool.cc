#include "worker/kv/block_pool.h"

#include "common/base/logging.h"

namespace llmserve::worker {

BlockPool::BlockPool(int32_t num_blocks, bool enable_caching)
    : blocks_(num_blocks), enable_caching_(enable_caching) {
  LLMSERVE_CHECK(num_blocks >= 2) << "a block pool needs the null block and one more";
  for (int32_t b = 1; b < num_blocks; ++b) PushFreeTail(b);
}

void BlockPool::PushFreeTail(int32_t block) {
  Block& b = blocks_[block];
  LLMSERVE_CHECK(!b.in_free_queue) << "block " << block << " freed twice";
  b.prev = free_tail_;
  b.next = -1;
  if (free_tail_ >= 0) {
    blocks_[free_tail_].next = block;
  } else {
    free_head_ = block;
  }
  free_tail_ = block;
  b.in_free_queue = true;
  ++num_free_;
}

void BlockPool::RemoveFromFreeQueue(int32_t block) {
  Block& b = blocks_[block];
  LLMSERVE_CHECK(b.in_free_queue) << "block " << block << " is not free";
  if (b.prev >= 0) {
    blocks_[b.prev].next = b.next;
  } else {
    free_head_ = b.next;
  }
  if (b.next >= 0) {
    blocks_[b.next].prev = b.prev;
  } else {
    free_tail_ = b.prev;
  }
  b.prev = b.next = -1;
  b.in_free_queue = false;
  --num_free_;
}

void BlockPool::RecordEvent(PrefixCacheEvent::Kind kind, uint64_t hash) {
  if (events_.empty() || events_.back().kind != kind) events_.push_back({kind, {}});
  events_.back().block_hashes.push_back(hash);
}

void BlockPool::Evict(int32_t block) {
  Block& b = blocks_[block];
  if (!b.cached) return;
  cached_.erase(b.hash);
  b.cached = false;
  ++num_evictions_;
  RecordEvent(PrefixCacheEvent::Kind::kEvicted, b.hash.RoutingHash());
}

std::vector<int32_t> BlockPool::AllocateBlocks(int32_t count) {
  LLMSERVE_CHECK(count <= num_free_)
      << "asked for " << count << " blocks, " << num_free_ << " free";
  std::vector<int32_t> allocated;
  allocated.reserve(count);
  for (int32_t i = 0; i < count; ++i) {
    const int32_t block = free_head_;
    RemoveFromFreeQueue(block);
    Evict(block);
    blocks_[block].ref_count = 1;
    allocated.push_back(block);
  }
  return allocated;
}

std::optional<int32_t> BlockPool::FindCachedBlock(const common::BlockHash& hash) const {
  const auto it = cached_.find(hash);
  if (it == cached_.end()) return std::nullopt;
  return it->second;
}

void BlockPool::Touch(absl::Span<const int32_t> blocks) {
  for (int32_t block : blocks) {
    Block& b = blocks_[block];
    if (b.ref_count == 0) RemoveFromFreeQueue(block);
    ++b.ref_count;
  }
}

void BlockPool::Free(absl::Span<const int32_t> blocks) {
  for (int32_t block : blocks) {
    Block& b = blocks_[block];
    LLMSERVE_CHECK(block > 0 && b.ref_count > 0) << "block " << block << " freed too often";
    if (--b.ref_count == 0) PushFreeTail(block);
  }
}

bool BlockPool::CacheBlock(int32_t block, const common::BlockHash& hash) {
  Block& b = blocks_[block];
  if (!enable_caching_ || b.cached || cached_.contains(hash)) return false;
  b.cached = true;
  b.hash = hash;
  cached_[hash] = block;
  RecordEvent(PrefixCacheEvent::Kind::kStored, hash.RoutingHash());
  return true;
}

void BlockPool::ClearCache() {
  for (const auto& [hash, block] : cached_) blocks_[block].cached = false;
  cached_.clear();
  events_.push_back({PrefixCacheEvent::Kind::kCleared, {}});
}

std::vector<PrefixCacheEvent> BlockPool::TakeEvents() {
  std::vector<PrefixCacheEvent> events;
  events.swap(events_);
  return events;
}

std::vector<uint64_t> BlockPool::CachedRoutingHashes() const {
  std::vector<uint64_t> hashes;
  hashes.reserve(cached_.size());
  for (const auto& [hash, block] : cached_) hashes.push_back(hash.RoutingHash());
  return hashes;
}

}  // namespace llmserve::worker
