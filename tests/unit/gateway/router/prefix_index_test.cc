#include "gateway/router/prefix_index.h"

#include <vector>

#include "common/prefix_cache/block_hash.h"
#include "gtest/gtest.h"

namespace llmserve::gateway {
namespace {

using worker::v1::LoadReport;
using worker::v1::PrefixCacheEvent;

std::vector<uint64_t> PromptHashes(const std::vector<int32_t>& tokens) {
  std::vector<uint64_t> hashes;
  for (const common::BlockHash& hash : common::HashFullBlocks(tokens, 4, "")) {
    hashes.push_back(hash.RoutingHash());
  }
  return hashes;
}

LoadReport Report(bool reset, PrefixCacheEvent::Kind kind, const std::vector<uint64_t>& hashes) {
  LoadReport report;
  report.set_reset(reset);
  PrefixCacheEvent* event = report.add_events();
  event->set_kind(kind);
  event->mutable_block_hashes()->Add(hashes.begin(), hashes.end());
  return report;
}

TEST(PrefixIndexTest, CountsLeadingCachedBlocks) {
  const std::vector<uint64_t> prompt = PromptHashes({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  ASSERT_EQ(prompt.size(), 3u);
  PrefixIndex index;
  EXPECT_EQ(index.MatchedBlocks("w1", prompt), 0);
  index.Apply("w1", Report(true, PrefixCacheEvent::KIND_STORED, {prompt[0], prompt[1]}));
  EXPECT_EQ(index.MatchedBlocks("w1", prompt), 2);
  // Only a leading run counts: the third block alone is no help.
  index.Apply("w2", Report(true, PrefixCacheEvent::KIND_STORED, {prompt[2]}));
  EXPECT_EQ(index.MatchedBlocks("w2", prompt), 0);
  // A prompt that diverges in its second block shares only the first.
  const std::vector<uint64_t> other = PromptHashes({1, 2, 3, 4, 9, 9, 9, 9});
  EXPECT_EQ(other[0], prompt[0]);
  EXPECT_EQ(index.MatchedBlocks("w1", other), 1);
}

TEST(PrefixIndexTest, EventsApplyInOrderAndResetsReplace) {
  PrefixIndex index;
  index.Apply("w", Report(true, PrefixCacheEvent::KIND_STORED, {1, 2, 3}));
  EXPECT_EQ(index.NumBlocks("w"), 3u);
  index.Apply("w", Report(false, PrefixCacheEvent::KIND_EVICTED, {2}));
  EXPECT_EQ(index.MatchedBlocks("w", std::vector<uint64_t>{1, 2, 3}), 1);
  LoadReport mixed;
  PrefixCacheEvent* cleared = mixed.add_events();
  cleared->set_kind(PrefixCacheEvent::KIND_CLEARED);
  PrefixCacheEvent* stored = mixed.add_events();
  stored->set_kind(PrefixCacheEvent::KIND_STORED);
  stored->add_block_hashes(9);
  index.Apply("w", mixed);
  EXPECT_EQ(index.NumBlocks("w"), 1u);
  index.Apply("w", Report(true, PrefixCacheEvent::KIND_STORED, {7, 8}));
  EXPECT_EQ(index.NumBlocks("w"), 2u);
  EXPECT_EQ(index.MatchedBlocks("w", std::vector<uint64_t>{9}), 0);
  index.Remove("w");
  EXPECT_EQ(index.NumBlocks("w"), 0u);
}

TEST(PrefixIndexTest, ReplayingEventsOnASnapshotThatHasThemIsHarmless) {
  // The worker's snapshot may already include the next report's events (load_broadcaster.h).
  PrefixIndex index;
  index.Apply("w", Report(true, PrefixCacheEvent::KIND_STORED, {1, 2}));
  index.Apply("w", Report(false, PrefixCacheEvent::KIND_STORED, {2}));
  EXPECT_EQ(index.NumBlocks("w"), 2u);
  index.Apply("w", Report(false, PrefixCacheEvent::KIND_EVICTED, {3}));
  EXPECT_EQ(index.NumBlocks("w"), 2u);
}

}  // namespace
}  // namespace llmserve::gateway
