// Exact-state tests of the block pool and the KV cache manager (block ids, eviction order,
// reference counts, events), then a randomized property test of the invariants.

#include "worker/kv/kv_cache_manager.h"

#include <map>
#include <numeric>
#include <random>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/prefix_cache/block_hash.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace llmserve::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

std::vector<int32_t> Tokens(int32_t count, int32_t first = 100) {
  std::vector<int32_t> tokens(count);
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

// The prefix cache of `tokens` under `salt`, the way the scheduler looks it up (with the hashes
// of the request's full blocks).
PrefixHit Find(const KvCacheManager& kv, const std::vector<int32_t>& tokens,
               absl::string_view salt = "") {
  return kv.FindCachedPrefix(common::HashFullBlocks(tokens, kv.block_size(), salt),
                             static_cast<int32_t>(tokens.size()));
}

// Registers request `id`'s full blocks once `num_computed` of `tokens` are computed.
void Cache(KvCacheManager& kv, RequestId id, const std::vector<int32_t>& tokens,
           int32_t num_computed, absl::string_view salt = "") {
  kv.CacheComputedBlocks(id, common::HashFullBlocks(tokens, kv.block_size(), salt), num_computed);
}

// Admits `id` with `prompt` the way the scheduler does: look up, then allocate for the rest.
std::optional<std::vector<int32_t>> Admit(KvCacheManager& kv, RequestId id,
                                          const std::vector<int32_t>& prompt,
                                          absl::string_view salt = "") {
  const PrefixHit hit = Find(kv, prompt, salt);
  return kv.AllocateSlots(id, static_cast<int32_t>(prompt.size()) - hit.num_tokens, &hit);
}

TEST(BlockPoolTest, NullBlockIsNeverHandedOutAndFreeQueueIsFifo) {
  BlockPool pool(5, /*enable_caching=*/true);
  EXPECT_EQ(pool.num_free_blocks(), 4);
  EXPECT_THAT(pool.AllocateBlocks(2), ElementsAre(1, 2));
  pool.Free(std::vector<int32_t>{2, 1});
  EXPECT_THAT(pool.AllocateBlocks(4), ElementsAre(3, 4, 2, 1));
  EXPECT_EQ(pool.num_free_blocks(), 0);
}

TEST(BlockPoolTest, CachedFreeBlocksAreEvictedInQueueOrderWithEvents) {
  BlockPool pool(4, /*enable_caching=*/true);
  const auto blocks = pool.AllocateBlocks(3);  // 1, 2, 3
  const common::BlockHash h1{1, 1}, h2{2, 2};
  EXPECT_TRUE(pool.CacheBlock(1, h1));
  EXPECT_TRUE(pool.CacheBlock(2, h2));
  EXPECT_FALSE(pool.CacheBlock(3, h1)) << "a second block with the same hash stays private";
  pool.Free(std::vector<int32_t>{2, 1, 3});
  EXPECT_EQ(pool.FindCachedBlock(h1), 1);
  pool.Touch(std::vector<int32_t>{1});  // a prefix hit takes block 1 out of the free queue
  EXPECT_EQ(pool.ref_count(1), 1);
  EXPECT_EQ(pool.num_free_blocks(), 2);
  EXPECT_THAT(pool.AllocateBlocks(2), ElementsAre(2, 3));  // 2 evicted
  EXPECT_EQ(pool.FindCachedBlock(h2), std::nullopt);
  EXPECT_EQ(pool.num_evictions(), 1);
  const auto events = pool.TakeEvents();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].kind, PrefixCacheEvent::Kind::kStored);
  EXPECT_THAT(events[0].block_hashes, ElementsAre(1, 2));
  EXPECT_EQ(events[1].kind, PrefixCacheEvent::Kind::kEvicted);
  EXPECT_THAT(events[1].block_hashes, ElementsAre(2));
  EXPECT_THAT(pool.TakeEvents(), IsEmpty());
  EXPECT_THAT(pool.CachedRoutingHashes(), ElementsAre(1));
}

TEST(KvCacheManagerTest, ClearingThePrefixCacheForgetsEveryHash) {
  KvCacheManager kv(11, 4, true);
  const auto prompt = Tokens(10);
  ASSERT_TRUE(Admit(kv, 1, prompt));
  Cache(kv, 1, prompt, 10);
  kv.TakeEvents();
  kv.ClearPrefixCache();
  EXPECT_THAT(Find(kv, prompt, "").blocks, IsEmpty());
  const auto events = kv.TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, PrefixCacheEvent::Kind::kCleared);
  Cache(kv, 1, prompt, 10);  // registered again
  EXPECT_THAT(Find(kv, prompt, "").blocks, ElementsAre(1, 2));
  kv.Free(1);
  EXPECT_EQ(kv.Stats().free_blocks, 10);
}

TEST(KvCacheManagerTest, AllocatesOnDemandAndGrowsByBlocks) {
  KvCacheManager kv(11, 4, true);
  const auto prompt = Tokens(10);
  EXPECT_THAT(*Admit(kv, 1, prompt), ElementsAre(1, 2, 3));
  Cache(kv, 1, prompt, 10);
  EXPECT_TRUE(kv.pool().is_cached(1) && kv.pool().is_cached(2) && !kv.pool().is_cached(3));
  EXPECT_THAT(*kv.AllocateSlots(1, 1), IsEmpty());  // 11 tokens
  EXPECT_THAT(*kv.AllocateSlots(1, 1), IsEmpty());  // 12 tokens
  EXPECT_THAT(*kv.AllocateSlots(1, 1), ElementsAre(4));
  EXPECT_THAT(kv.BlockTable(1), ElementsAre(1, 2, 3, 4));
  EXPECT_EQ(kv.Stats().free_blocks, 6);
  EXPECT_EQ(kv.Stats().total_blocks, 10);
}

TEST(KvCacheManagerTest, RollbackFreesTheBlocksPastTheKeptTokensAndShrinksTheCapacity) {
  KvCacheManager kv(10, 4, true);
  const std::vector<int32_t> tokens = Tokens(6);
  ASSERT_TRUE(Admit(kv, 1, tokens).has_value());  // blocks 1 2
  Cache(kv, 1, tokens, 6);                        // block 1 registered
  // A speculative step: the last token and 5 drafts, positions 5..10.
  EXPECT_THAT(*kv.AllocateSlots(1, 5), ElementsAre(3));
  EXPECT_EQ(kv.Stats().free_blocks, 6);
  // Two drafts accepted: 8 tokens computed; block 3 held only rejected drafts.
  kv.RollbackSlots(1, 8);
  EXPECT_THAT(kv.BlockTable(1), ElementsAre(1, 2));
  EXPECT_EQ(kv.Stats().free_blocks, 7);
  // The next step grows from 8 computed tokens, not from the 11 positions the drafts had.
  EXPECT_THAT(*kv.AllocateSlots(1, 1), ElementsAre(4));
  kv.RollbackSlots(1, 9);  // nothing past 9 tokens
  EXPECT_THAT(kv.BlockTable(1), ElementsAre(1, 2, 4));
  kv.RollbackSlots(7, 0);  // unknown ids are ignored
  EXPECT_EQ(kv.Stats().free_blocks, 6);
}

TEST(KvCacheManagerTest, PrefixHitsShareBlocksAndNeverCoverTheWholePrompt) {
  KvCacheManager kv(11, 4, true);
  const auto prompt = Tokens(10);
  ASSERT_TRUE(Admit(kv, 1, prompt));
  Cache(kv, 1, prompt, 10);

  auto shared = Tokens(8);
  shared.insert(shared.end(), {7, 8, 9});
  const PrefixHit hit = Find(kv, shared, "");
  EXPECT_THAT(hit.blocks, ElementsAre(1, 2));
  EXPECT_EQ(hit.num_tokens, 8);
  EXPECT_THAT(*kv.AllocateSlots(2, 3, &hit), ElementsAre(4));
  EXPECT_THAT(kv.BlockTable(2), ElementsAre(1, 2, 4));
  EXPECT_EQ(kv.pool().ref_count(1), 2);
  EXPECT_EQ(kv.Stats().prefix_hits, 8);
  EXPECT_EQ(kv.Stats().prefix_queries, 10 + 11);

  // An 8-token prompt whose two blocks are cached still computes its last block.
  EXPECT_THAT(Find(kv, Tokens(8), "").blocks, ElementsAre(1));
  // Another salt (tenant) sees nothing.
  EXPECT_THAT(Find(kv, shared, "tenant-b").blocks, IsEmpty());
}

TEST(KvCacheManagerTest, FreedBlocksStayCachedUntilEvictedTailFirst) {
  KvCacheManager kv(7, 4, true);  // 6 usable blocks
  const auto prompt = Tokens(12);
  ASSERT_TRUE(Admit(kv, 1, prompt));  // 1, 2, 3
  Cache(kv, 1, prompt, 12);
  kv.Free(1);  // freed tail first: queue is 4 5 6 3 2 1
  EXPECT_EQ(kv.Stats().free_blocks, 6);
  EXPECT_FALSE(kv.HasRequest(1));
  // A new prompt needing 4 blocks takes 4 5 6 then evicts 3 (the old tail), keeping 1 2.
  EXPECT_THAT(*Admit(kv, 2, Tokens(16, 500)), ElementsAre(4, 5, 6, 3));
  kv.TakeEvents();
  auto again = Tokens(9);
  const PrefixHit hit = Find(kv, again, "");
  EXPECT_THAT(hit.blocks, ElementsAre(1, 2));
  EXPECT_EQ(kv.Stats().evictions, 1);
}

TEST(KvCacheManagerTest, ShortOfBlocksReturnsNulloptAndChangesNothing) {
  KvCacheManager kv(4, 4, true);  // 3 usable blocks
  ASSERT_TRUE(Admit(kv, 1, Tokens(8)));
  EXPECT_EQ(Admit(kv, 2, Tokens(8, 900)), std::nullopt);
  EXPECT_FALSE(kv.HasRequest(2));
  EXPECT_EQ(kv.Stats().free_blocks, 1);
  EXPECT_EQ(kv.AllocateSlots(1, 5), std::nullopt);  // 13 tokens would need 4 blocks
  EXPECT_THAT(kv.BlockTable(1), ElementsAre(1, 2));
  EXPECT_THAT(*kv.AllocateSlots(1, 4), ElementsAre(3));
}

TEST(KvCacheManagerTest, CachingOffMeansNoHitsAndNoEvents) {
  KvCacheManager kv(11, 4, false);
  const auto prompt = Tokens(10);
  ASSERT_TRUE(Admit(kv, 1, prompt));
  Cache(kv, 1, prompt, 10);
  EXPECT_THAT(Find(kv, prompt, "").blocks, IsEmpty());
  EXPECT_THAT(kv.TakeEvents(), IsEmpty());
}

// Thousands of random operations; after each: every block's reference count equals the number of
// tables holding it, a block is free exactly when unreferenced, free + used == total, and a
// prefix hit only ever hands out blocks whose recorded contents equal the prompt's tokens.
TEST(KvCacheManagerTest, RandomOperationsKeepTheInvariants) {
  for (int seed = 0; seed < 10; ++seed) {
    std::mt19937 rng(seed);
    const int32_t num_blocks = 8 + static_cast<int32_t>(rng() % 40), bs = 1 + rng() % 4;
    KvCacheManager kv(num_blocks, bs, true);
    struct Live {
      std::vector<int32_t> tokens;
      int32_t computed = 0;
      int32_t target = 0;
    };
    std::map<RequestId, Live> live;
    // Block -> the whole token prefix ending with its last slot, recorded when it fills: a cached
    // block stands for its prefix, not just its own tokens.
    std::map<int32_t, std::vector<int32_t>> contents;
    RequestId next_id = 1;
    // Records what the forward pass would write for `chunk` more tokens, then caches full blocks.
    auto compute = [&](RequestId id, Live& request, int32_t chunk) {
      const std::vector<int32_t>& table = kv.BlockTable(id);
      for (int32_t p = request.computed; p < request.computed + chunk; ++p) {
        std::vector<int32_t>& prefix = contents[table[p / bs]];
        prefix.clear();
        if (p % bs == bs - 1) prefix.assign(request.tokens.begin(), request.tokens.begin() + p + 1);
      }
      request.computed += chunk;
      Cache(kv, id, request.tokens, request.computed);
    };
    for (int op = 0; op < 3000; ++op) {
      const int kind = static_cast<int>(rng() % 10);
      if (kind < 3 || live.empty()) {  // admit: prompts over a tiny alphabet share prefixes
        Live request;
        const int32_t length = 1 + static_cast<int32_t>(rng() % (3 * bs + 4));
        for (int32_t i = 0; i < length; ++i) request.tokens.push_back(rng() % 2);
        request.target = length + static_cast<int32_t>(rng() % 6);
        const PrefixHit hit = Find(kv, request.tokens, "");
        for (size_t b = 0; b < hit.blocks.size(); ++b) {
          const std::vector<int32_t> expected(request.tokens.begin(),
                                              request.tokens.begin() + (b + 1) * bs);
          ASSERT_EQ(contents[hit.blocks[b]], expected) << "seed " << seed << " op " << op;
        }
        const int32_t chunk =
            1 + static_cast<int32_t>(rng() % (request.tokens.size() - hit.num_tokens));
        if (kv.AllocateSlots(next_id, chunk, &hit)) {
          request.computed = hit.num_tokens;
          compute(next_id, request, chunk);
          live[next_id] = request;
        }
        ++next_id;
      } else if (kind < 7) {  // step: compute more tokens of a random live request
        auto it = std::next(live.begin(), rng() % live.size());
        Live& request = it->second;
        if (request.computed == request.target) {
          kv.Free(it->first);  // finished
          live.erase(it);
          continue;
        }
        while (static_cast<int32_t>(request.tokens.size()) < request.target) {
          request.tokens.push_back(rng() % 2);
        }
        const int32_t chunk = 1 + static_cast<int32_t>(rng() % (request.target - request.computed));
        if (!kv.AllocateSlots(it->first, chunk)) continue;  // short: the scheduler would preempt
        compute(it->first, request, chunk);
      } else {  // abort or preempt at any point
        auto it = std::next(live.begin(), rng() % live.size());
        kv.Free(it->first);
        live.erase(it);
      }
      std::map<int32_t, int> holders;
      for (const auto& [id, request] : live) {
        const auto& table = kv.BlockTable(id);
        ASSERT_EQ(static_cast<int32_t>(table.size()), kv.BlocksFor(request.computed));
        for (int32_t block : table) ++holders[block];
      }
      int32_t unreferenced = 0;
      for (int32_t b = 1; b < num_blocks; ++b) {
        ASSERT_EQ(kv.pool().ref_count(b), holders[b]) << "seed " << seed << " block " << b;
        if (holders[b] == 0) ++unreferenced;
      }
      ASSERT_EQ(kv.Stats().free_blocks, unreferenced);
      ASSERT_EQ(kv.Stats().total_blocks, num_blocks - 1);
    }
    for (const auto& [id, request] : live) kv.Free(id);
    EXPECT_EQ(kv.Stats().free_blocks, num_blocks - 1);
  }
}

}  // namespace
}  // namespace llmserve::worker
