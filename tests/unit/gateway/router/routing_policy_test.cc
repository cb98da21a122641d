#include "gateway/router/routing_policy.h"

#include <vector>

#include "gtest/gtest.h"

namespace llmserve::gateway {
namespace {

RoutingCandidate Worker(const std::string& name, int running, int waiting, int matched = 0) {
  return {.worker = name,
          .running = running,
          .waiting = waiting,
          .kv_blocks_total = 100,
          .kv_blocks_free = 100,
          .matched_blocks = matched};
}

TEST(RoutingPolicyTest, ParsesNames) {
  EXPECT_EQ(*ParseRoutingPolicy("prefix"), RoutingPolicy::kPrefix);
  EXPECT_EQ(*ParseRoutingPolicy("least_load"), RoutingPolicy::kLeastLoad);
  EXPECT_EQ(*ParseRoutingPolicy("round_robin"), RoutingPolicy::kRoundRobin);
  const absl::StatusOr<RoutingPolicy> bad = ParseRoutingPolicy("random");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("round_robin, least_load, prefix"),
            absl::string_view::npos);
  EXPECT_EQ(RoutingPolicyName(RoutingPolicy::kLeastLoad), "least_load");
}

TEST(RoutingPolicyTest, LoadScoreWeighsWaitingAndKvUsage) {
  RoutingCandidate candidate = Worker("a", 3, 2);
  EXPECT_DOUBLE_EQ(LoadScore(candidate), 3 + 4);
  candidate.kv_blocks_free = 25;  // 75% used
  EXPECT_DOUBLE_EQ(LoadScore(candidate), 3 + 4 + 6);
  candidate.kv_blocks_total = 0;  // unknown yet
  EXPECT_DOUBLE_EQ(LoadScore(candidate), 3 + 4);
}

TEST(RoutingPolicyTest, NoCandidatesNoDecision) {
  uint64_t counter = 0;
  EXPECT_FALSE(ChooseWorker({}, {}, &counter).has_value());
}

TEST(RoutingPolicyTest, RoundRobinCycles) {
  const std::vector<RoutingCandidate> candidates = {Worker("a", 9, 9), Worker("b", 0, 0),
                                                    Worker("c", 0, 0)};
  uint64_t counter = 0;
  std::vector<size_t> picks;
  for (int i = 0; i < 6; ++i) {
    picks.push_back(
        ChooseWorker(candidates, {.policy = RoutingPolicy::kRoundRobin}, &counter)->index);
  }
  EXPECT_EQ(picks, (std::vector<size_t>{0, 1, 2, 0, 1, 2}));
}

TEST(RoutingPolicyTest, LeastLoadPicksTheLowestScore) {
  const std::vector<RoutingCandidate> candidates = {Worker("a", 4, 0), Worker("b", 1, 1),
                                                    Worker("c", 2, 0)};
  uint64_t counter = 0;
  const auto decision = ChooseWorker(candidates, {.policy = RoutingPolicy::kLeastLoad}, &counter);
  EXPECT_EQ(decision->index, 2u);  // scores 4, 3, 2
  EXPECT_EQ(decision->reason, "least_load");
}

TEST(RoutingPolicyTest, PrefixPrefersTheLongestCachedPrefix) {
  const std::vector<RoutingCandidate> candidates = {Worker("a", 0, 0, 1), Worker("b", 3, 0, 5),
                                                    Worker("c", 1, 0, 2)};
  uint64_t counter = 0;
  const auto decision = ChooseWorker(candidates, {}, &counter);
  EXPECT_EQ(decision->index, 1u);
  EXPECT_EQ(decision->reason, "prefix_hit");
}

TEST(RoutingPolicyTest, PrefixTiesGoToTheLessLoaded) {
  const std::vector<RoutingCandidate> candidates = {Worker("a", 5, 0, 3), Worker("b", 2, 0, 3)};
  uint64_t counter = 0;
  EXPECT_EQ(ChooseWorker(candidates, {}, &counter)->index, 1u);
}

TEST(RoutingPolicyTest, PrefixWithoutAnyHitFallsBackToLeastLoad) {
  const std::vector<RoutingCandidate> candidates = {Worker("a", 5, 0), Worker("b", 2, 0)};
  uint64_t counter = 0;
  const auto decision = ChooseWorker(candidates, {}, &counter);
  EXPECT_EQ(decision->index, 1u);
  EXPECT_EQ(decision->reason, "prefix_miss");
}

TEST(RoutingPolicyTest, AnOverloadedHolderShedsLoad) {
  // The holder's score (4 running + 2 * 3 waiting = 10) exceeds the idle worker's by more than
  // the bound of 8: the request goes to the idle one.
  const std::vector<RoutingCandidate> candidates = {Worker("hot", 4, 3, 10), Worker("idle", 0, 0)};
  uint64_t counter = 0;
  const auto shed = ChooseWorker(candidates, {.prefix_load_bound = 8}, &counter);
  EXPECT_EQ(shed->index, 1u);
  EXPECT_EQ(shed->reason, "prefix_overloaded");
  // Within the bound it stays with the cache.
  const auto kept = ChooseWorker(candidates, {.prefix_load_bound = 10}, &counter);
  EXPECT_EQ(kept->index, 0u);
  EXPECT_EQ(kept->reason, "prefix_hit");
}

TEST(RoutingPolicyTest, EquallyLoadedCandidatesTakeTurns) {
  // Two idle workers and a burst between two load reports: least_load and prefix (no hit)
  // alternate instead of sending everything to the first.
  const std::vector<RoutingCandidate> idle = {Worker("a", 0, 0), Worker("b", 0, 0)};
  for (RoutingPolicy policy : {RoutingPolicy::kLeastLoad, RoutingPolicy::kPrefix}) {
    uint64_t counter = 0;
    std::vector<size_t> picks;
    for (int i = 0; i < 4; ++i) {
      picks.push_back(ChooseWorker(idle, {.policy = policy}, &counter)->index);
    }
    EXPECT_EQ(picks, (std::vector<size_t>{0, 1, 0, 1})) << RoutingPolicyName(policy);
  }
  // A less loaded candidate still wins outright.
  const std::vector<RoutingCandidate> uneven = {Worker("a", 1, 0), Worker("b", 0, 0),
                                                Worker("c", 1, 0)};
  uint64_t counter = 0;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(ChooseWorker(uneven, {.policy = RoutingPolicy::kLeastLoad}, &counter)->index, 1u);
  }
}

TEST(RoutingPolicyTest, RequestsInFlightBeyondTheReportCountAsLoad) {
  RoutingCandidate candidate = Worker("a", 2, 1);
  candidate.in_flight = 2;  // fewer than the report shows (other gateways' requests): no change
  EXPECT_DOUBLE_EQ(LoadScore(candidate), 2 + 2);
  candidate.in_flight = 7;  // four sent since the report
  EXPECT_DOUBLE_EQ(LoadScore(candidate), 2 + 2 + 4);
  RoutingCandidate busy = Worker("busy", 0, 0);
  busy.in_flight = 3;
  const std::vector<RoutingCandidate> candidates = {busy, Worker("idle", 0, 0)};
  uint64_t counter = 0;
  EXPECT_EQ(ChooseWorker(candidates, {.policy = RoutingPolicy::kLeastLoad}, &counter)->index, 1u);
}

}  // namespace
}  // namespace llmserve::gateway
