// LoadAccountant: the load snapshot, token rates, prefix-cache mirror and event queue it keeps from
// the engine's StepStats reports (fed here by hand, as the engine would).

#include "worker/service/load_accountant.h"

#include <algorithm>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/testing/simulated_clock.h"

namespace llmserve::worker {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1'700'000'000);

StepStats Pass(double at_s, int64_t prompt_tokens, int64_t generated_tokens) {
  return StepStats{.time = kStart + absl::Seconds(at_s),
                   .forward = true,
                   .prompt_tokens = prompt_tokens,
                   .generated_tokens = generated_tokens};
}

std::vector<uint64_t> Sorted(std::vector<uint64_t> hashes) {
  std::sort(hashes.begin(), hashes.end());
  return hashes;
}

TEST(LoadAccountantTest, CountsComeFromTheLatestReportAndTotalsFromAllOfThem) {
  LoadAccountant accountant;
  accountant.Record({.time = kStart,
                     .spec_accepted_per_position = {0, 0},
                     .kv_blocks_total = 10,
                     .kv_blocks_free = 10});
  StepStats first = Pass(1, 20, 2);
  first.prefix_cache_queries = 20;
  first.prefix_cache_hits = 16;
  first.forward_s = 0.5;
  first.overhead_s = 0.25;
  first.spec_drafts = 2;
  first.spec_draft_tokens = 4;
  first.spec_accepted_tokens = 3;
  first.spec_accepted_per_position = {2, 1};
  first.running = 2;
  first.waiting = 1;
  first.kv_blocks_total = 10;
  first.kv_blocks_free = 6;
  accountant.Record(first);
  // Queued work taken between passes: new counts, no pass.
  accountant.Record({.time = kStart + absl::Seconds(1.5),
                     .preemptions = 1,
                     .prefix_cache_queries = 20,
                     .spec_accepted_per_position = {0, 0},
                     .running = 1,
                     .waiting = 3,
                     .kv_blocks_total = 10,
                     .kv_blocks_free = 4});
  const EngineLoad load = accountant.Load();
  EXPECT_EQ(load.running, 1);
  EXPECT_EQ(load.waiting, 3);
  EXPECT_EQ(load.kv_blocks_total, 10);
  EXPECT_EQ(load.kv_blocks_free, 4);
  EXPECT_EQ(load.steps, 1) << "only forward passes are steps";
  EXPECT_EQ(load.preemptions, 1);
  EXPECT_EQ(load.prefix_cache_queries, 40);
  EXPECT_EQ(load.prefix_cache_hits, 16);
  EXPECT_DOUBLE_EQ(load.prefix_cache_hit_rate, 0.4);
  EXPECT_DOUBLE_EQ(load.forward_s, 0.5);
  EXPECT_DOUBLE_EQ(load.overhead_s, 0.25);
  EXPECT_EQ(load.spec_drafts, 2);
  EXPECT_EQ(load.spec_draft_tokens, 4);
  EXPECT_EQ(load.spec_accepted_tokens, 3);
  EXPECT_EQ(load.spec_accepted_per_position, (std::vector<int64_t>{2, 1}));
}

TEST(LoadAccountantTest, LiveCountsReplaceTheReportedOnesAndNothingElse) {
  LoadAccountant accountant;
  StepStats pass = Pass(1, 20, 2);
  pass.running = 1;
  pass.waiting = 0;
  pass.kv_blocks_total = 10;
  pass.kv_blocks_free = 8;
  accountant.Record(pass);
  // A request added since: the engine counts it, no report has said so yet.
  const EngineLoad load = accountant.Load({.running = 1, .waiting = 1, .kv_blocks_free = 8});
  EXPECT_EQ(load.waiting, 1);
  EXPECT_EQ(load.running, 1);
  EXPECT_EQ(load.kv_blocks_free, 8);
  EXPECT_EQ(load.kv_blocks_total, 10);
  EXPECT_EQ(load.steps, 1);
  EXPECT_EQ(accountant.Load().waiting, 0);
}

TEST(LoadAccountantTest, NothingReportedIsAnIdleEmptyLoad) {
  const EngineLoad load = LoadAccountant().Load();
  EXPECT_EQ(load.steps, 0);
  EXPECT_EQ(load.prefix_cache_hit_rate, 0);
  EXPECT_EQ(load.prompt_tokens_per_s, 0);
  EXPECT_TRUE(load.spec_accepted_per_position.empty()) << "speculation off until reported";
}

TEST(LoadAccountantTest, TokenRatesAreOverThePassesOfTheLastFiveSecondsUpToNow) {
  ::llmserve::testing::SimulatedClock clock(kStart);
  LoadAccountant accountant(&clock);
  auto at = [&](double seconds) {
    clock.Advance(kStart + absl::Seconds(seconds) - clock.Now());
    return accountant.Load();
  };
  // A prefill of 3 tokens at 2 s, then a token a second: read at the last pass, 3 prompt and 4
  // generated tokens in the 3 s since the first.
  accountant.Record(Pass(2, 3, 1));
  for (int i = 0; i < 3; ++i) accountant.Record(Pass(3 + i, 0, 1));
  EXPECT_DOUBLE_EQ(at(5).prompt_tokens_per_s, 1);
  EXPECT_DOUBLE_EQ(at(5).generated_tokens_per_s, 4.0 / 3);
  // Idle, the rates decay: the same tokens over 4 s; then the first pass has left the window
  // (3 generated tokens from 3 s to 8 s); then every pass has, and nothing is generated.
  EXPECT_DOUBLE_EQ(at(6).generated_tokens_per_s, 1);
  EXPECT_DOUBLE_EQ(at(8).prompt_tokens_per_s, 0);
  EXPECT_DOUBLE_EQ(at(8).generated_tokens_per_s, 3.0 / 5);
  EXPECT_EQ(at(11).generated_tokens_per_s, 0);
  // Busy again: only the new passes count.
  accountant.Record(Pass(15, 1, 1));
  accountant.Record(Pass(16, 0, 1));
  EXPECT_DOUBLE_EQ(at(16).prompt_tokens_per_s, 1);
  EXPECT_DOUBLE_EQ(at(16).generated_tokens_per_s, 2);
  // A pass's own time counts: one pass of 0.5 s alone in its window, read as it ends.
  StepStats alone = Pass(30, 0, 4);
  alone.forward_s = 0.4;
  alone.overhead_s = 0.1;
  accountant.Record(alone);
  EXPECT_DOUBLE_EQ(at(30).generated_tokens_per_s, 8);
}

TEST(LoadAccountantTest, MirrorsTheCachedSetAndQueuesItsChangesForOneConsumer) {
  LoadAccountant accountant;
  StepStats stored = Pass(1, 8, 1);
  stored.cache_events = {{.kind = PrefixCacheEvent::Kind::kStored, .block_hashes = {11, 12, 13}}};
  accountant.Record(stored);
  StepStats evicted = Pass(2, 0, 1);
  evicted.cache_events = {{.kind = PrefixCacheEvent::Kind::kEvicted, .block_hashes = {12}},
                          {.kind = PrefixCacheEvent::Kind::kStored, .block_hashes = {14}}};
  accountant.Record(evicted);
  EXPECT_EQ(Sorted(accountant.CachedBlockHashes()), (std::vector<uint64_t>{11, 13, 14}));
  LoadAccountant::CacheEvents taken = accountant.TakePrefixCacheEvents();
  EXPECT_FALSE(taken.overflowed);
  ASSERT_EQ(taken.events.size(), 3u);
  EXPECT_EQ(taken.events[0].block_hashes, (std::vector<uint64_t>{11, 12, 13}));
  EXPECT_EQ(taken.events[1].kind, PrefixCacheEvent::Kind::kEvicted);
  EXPECT_TRUE(accountant.TakePrefixCacheEvents().events.empty()) << "taken once";
  // A failed pass clears the cache.
  StepStats failed = Pass(3, 0, 0);
  failed.failed = true;
  failed.cache_events = {{.kind = PrefixCacheEvent::Kind::kCleared}};
  accountant.Record(failed);
  EXPECT_TRUE(accountant.CachedBlockHashes().empty());
  EXPECT_EQ(accountant.TakePrefixCacheEvents().events.size(), 1u);
  EXPECT_EQ(accountant.Load().steps, 3) << "a failed pass is a step";
}

TEST(LoadAccountantTest, ChangesNobodyTakesAreDroppedAndTheConsumerToldToResend) {
  LoadAccountant accountant;
  std::vector<uint64_t> hashes(LoadAccountant::kMaxPendingEventHashes / 4);
  for (int round = 0; round < 5; ++round) {
    for (size_t i = 0; i < hashes.size(); ++i) hashes[i] = round * hashes.size() + i + 1;
    StepStats step = Pass(round, 0, 1);
    step.cache_events = {{.kind = PrefixCacheEvent::Kind::kStored, .block_hashes = hashes}};
    accountant.Record(step);
  }
  const LoadAccountant::CacheEvents taken = accountant.TakePrefixCacheEvents();
  EXPECT_TRUE(taken.overflowed);
  EXPECT_TRUE(taken.events.empty()) << "the backlog was dropped, not kept";
  EXPECT_EQ(accountant.CachedBlockHashes().size(), 5 * hashes.size())
      << "the mirror (what a resend lists) keeps everything";
  EXPECT_FALSE(accountant.TakePrefixCacheEvents().overflowed) << "told once";
}

}  // namespace
}  // namespace llmserve::worker
