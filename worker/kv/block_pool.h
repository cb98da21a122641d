// The KV cache's blocks as metadata: reference counts, the free queue in eviction order, and the
// prefix cache's index of full blocks by hash. Block contents live in the backend; here a block
// is an id.
//
// Block 0 is the null block: never handed out, it stands for "no block" in tables.
//
// Free queue: a block whose reference count drops to zero joins the tail; allocation takes from
// the head, so the least recently freed block is evicted first. A free block that is cached
// (has a hash) stays findable until it is evicted, and a prefix hit on it takes it back out of
// the queue (Touch).
//
// Not thread-safe: owned by the engine thread.

#ifndef LLMSERVE_WORKER_KV_BLOCK_POOL_H_
#define LLMSERVE_WORKER_KV_BLOCK_POOL_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "common/prefix_cache/block_hash.h"

namespace llmserve::worker {

// A change to the set of cached blocks, for the worker's load stream.
struct PrefixCacheEvent {
  // kCleared: every cached block was dropped at once (block_hashes is empty).
  enum class Kind { kStored, kEvicted, kCleared };
  Kind kind;
  // RoutingHash() of each block, in the order of the changes.
  std::vector<uint64_t> block_hashes;
};

class BlockPool {
 public:
  // `num_blocks` >= 2 (the null block and at least one usable block).
  BlockPool(int32_t num_blocks, bool enable_caching);

  int32_t num_blocks() const { return static_cast<int32_t>(blocks_.size()); }
  // Blocks in the free queue (cached ones included): what AllocateBlocks can hand out.
  int32_t num_free_blocks() const { return num_free_; }
  int32_t ref_count(int32_t block) const { return blocks_[block].ref_count; }
  bool is_cached(int32_t block) const { return blocks_[block].cached; }

  // Takes `count` blocks from the head of the free queue (count <= num_free_blocks()), each with
  // reference count 1; cached ones are evicted first.
  std::vector<int32_t> AllocateBlocks(int32_t count);

  // The cached block with `hash`, if any (whether in use or free).
  std::optional<int32_t> FindCachedBlock(const common::BlockHash& hash) const;

  // Adds a reference to each block (a prefix hit); a free block leaves the free queue.
  void Touch(absl::Span<const int32_t> blocks);

  // Drops a reference from each block; a block reaching zero joins the free queue's tail, in the
  // order given (so the first given is evicted first).
  void Free(absl::Span<const int32_t> blocks);

  // Registers a full block under `hash` so that later requests can reuse it. No-op when caching
  // is off, when the block is already cached, or when another block already holds that hash
  // (the duplicate stays private and is freed normally). Returns whether it was registered.
  bool CacheBlock(int32_t block, const common::BlockHash& hash);

  // Forgets every cached hash (blocks in use stay in use, free ones stay free). For when cached
  // contents can no longer be trusted, e.g. after a failed forward pass.
  void ClearCache();

  // The events since the last call, oldest first.
  std::vector<PrefixCacheEvent> TakeEvents();
  // The hashes of every cached block (for a load stream's first, full snapshot).
  std::vector<uint64_t> CachedRoutingHashes() const;

  int64_t num_evictions() const { return num_evictions_; }

 private:
  struct Block {
    int32_t ref_count = 0;
    bool cached = false;
    bool in_free_queue = false;
    common::BlockHash hash;
    int32_t prev = -1;  // free queue links
    int32_t next = -1;
  };

  void PushFreeTail(int32_t block);
  void RemoveFromFreeQueue(int32_t block);
  void Evict(int32_t block);
  void RecordEvent(PrefixCacheEvent::Kind kind, uint64_t hash);

  std::vector<Block> blocks_;
  bool enable_caching_;
  int32_t free_head_ = -1;
  int32_t free_tail_ = -1;
  int32_t num_free_ = 0;
  absl::flat_hash_map<common::BlockHash, int32_t> cached_;
  std::vector<PrefixCacheEvent> events_;
  int64_t num_evictions_ = 0;
};

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_KV_BLOCK_POOL_H_
