#include "worker/sampling/candidate_filters.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/sampling/vector_ops.h"

namespace llmserve::worker {
namespace {

using ::testing::ElementsAre;

std::vector<int32_t> Ids(const CandidateList& candidates) {
  std::vector<int32_t> ids;
  for (const TokenCandidate& c : candidates) ids.push_back(c.token_id);
  return ids;
}

std::set<int32_t> IdSet(const CandidateList& candidates) {
  const std::vector<int32_t> ids = Ids(candidates);
  return {ids.begin(), ids.end()};
}

std::vector<float> RandomLogits(size_t size, float stddev, uint32_t seed) {
  std::mt19937 engine(seed);
  std::normal_distribution<float> normal(0.0f, stddev);
  std::vector<float> logits(size);
  for (float& logit : logits) logit = normal(engine);
  return logits;
}

// Every token with positive weight, as the sampler's dense path weighs them; returns the total.
double AllWeighted(const std::vector<float>& logits, float temperature, float min_p,
                   CandidateList* out) {
  std::vector<float> weights(logits.size());
  const double total =
      ExpWeights(logits, MaxLogit(logits), 1.0f / temperature, min_p, absl::MakeSpan(weights));
  CollectHeaviest(logits, weights, std::numeric_limits<double>::infinity(), out);
  return total;
}

// The reference: every token, sorted by rank.
CandidateList SortedAll(const std::vector<float>& logits) {
  CandidateList all;
  for (size_t i = 0; i < logits.size(); ++i)
    all.push_back({logits[i], static_cast<int32_t>(i), 0.0f});
  std::sort(all.begin(), all.end(), RanksBefore);
  return all;
}

TEST(SamplingFiltersTest, TopKSortedWithTiesToLowerIds) {
  const std::vector<float> logits = {1.0f, 2.0f, 2.0f, 3.0f, 2.0f};
  CandidateList top;
  SelectTopK(logits, 3, /*sorted=*/true, &top);
  EXPECT_THAT(Ids(top), ElementsAre(3, 1, 2));
  SelectTopK(logits, 10, /*sorted=*/true, &top);
  EXPECT_THAT(Ids(top), ElementsAre(3, 1, 2, 4, 0));
  SelectTopK(logits, 0, /*sorted=*/true, &top);
  EXPECT_TRUE(top.empty());
}

TEST(SamplingFiltersTest, TopKHeapAndSelectionPathsMatchAFullSort) {
  // Rounded logits make many ties, which both paths must break by id.
  std::vector<float> logits = RandomLogits(5000, 3.0f, 7);
  for (float& logit : logits) logit = std::round(logit * 4.0f) / 4.0f;
  const CandidateList all = SortedAll(logits);
  for (const int64_t k : {1, 5, 256, 257, 1000, 4999}) {
    CandidateList top;
    SelectTopK(logits, k, /*sorted=*/true, &top);
    const CandidateList expected(all.begin(), all.begin() + k);
    EXPECT_EQ(Ids(top), Ids(expected)) << "k " << k;
  }
}

TEST(SamplingFiltersTest, MinPKeepsExactlyThoseAtLeastMinPTimesTheBest) {
  // Probabilities 0.4, 0.2, 0.1, 0.3: min_p 0.45 keeps p >= 0.18, min_p 0.55 keeps p >= 0.22.
  std::vector<float> logits = {std::log(0.4f), std::log(0.2f), std::log(0.1f), std::log(0.3f)};
  CandidateList kept;
  AllWeighted(logits, 1.0f, 0.45f, &kept);
  EXPECT_EQ(IdSet(kept), (std::set<int32_t>{0, 1, 3}));
  AllWeighted(logits, 1.0f, 0.55f, &kept);
  EXPECT_EQ(IdSet(kept), (std::set<int32_t>{0, 3}));
  // Temperature applies first: at T = 2 the ratios are square roots, sqrt(0.25) = 0.5 >= 0.45.
  AllWeighted(logits, 2.0f, 0.45f, &kept);
  EXPECT_EQ(IdSet(kept), (std::set<int32_t>{0, 1, 2, 3}));
  // min_p = 1 keeps exactly the tokens tied with the best.
  const std::vector<float> tied = {5.0f, 5.0f, 4.999f, 5.0f};
  AllWeighted(tied, 1.0f, 1.0f, &kept);
  EXPECT_EQ(IdSet(kept), (std::set<int32_t>{0, 1, 3}));
  // The top-k path filters the same way.
  SelectTopK(logits, 3, /*sorted=*/false, &kept);
  WeighAndFilter(MaxLogit(logits), 1.0f, 0.45f, &kept);
  EXPECT_EQ(IdSet(kept), (std::set<int32_t>{0, 1, 3}));
}

TEST(SamplingFiltersTest, WeightsAreTheTemperatureSoftmaxNumerators) {
  const std::vector<float> logits = {0.0f, -1.0f, -std::numeric_limits<float>::infinity()};
  CandidateList kept;
  const double total = AllWeighted(logits, 0.5f, 0.0f, &kept);
  ASSERT_EQ(kept.size(), 2u);  // -inf has no mass and is dropped
  EXPECT_EQ(kept[0].weight, 1.0f);
  EXPECT_FLOAT_EQ(kept[1].weight, std::exp(-2.0f));
  EXPECT_NEAR(total, 1.0 + std::exp(-2.0), 1e-7);
}

TEST(SamplingFiltersTest, TopPKeepsTheSmallestPrefixReachingP) {
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f),
                                     std::log(0.05f)};
  const auto top_p = [&](float p) {
    CandidateList kept;
    const double total = AllWeighted(logits, 1.0f, 0.0f, &kept);
    ApplyTopP(p, total, &kept);
    return IdSet(kept);
  };
  EXPECT_EQ(top_p(0.8f), (std::set<int32_t>{0, 1}));  // 0.5 + 0.3 reaches 0.8 exactly
  EXPECT_EQ(top_p(0.81f), (std::set<int32_t>{0, 1, 2}));
  EXPECT_EQ(top_p(0.5f), (std::set<int32_t>{0}));
  EXPECT_EQ(top_p(0.51f), (std::set<int32_t>{0, 1}));
  EXPECT_EQ(top_p(1e-6f), (std::set<int32_t>{0}));
  EXPECT_EQ(top_p(0.99f), (std::set<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(top_p(1.0f), (std::set<int32_t>{0, 1, 2, 3}));
}

// Checks ApplyTopP against a full sort on large vocabularies, peaked and flat: flat ones put most
// tokens in one exponent bucket, which exercises the selection inside it.
TEST(SamplingFiltersTest, TopPMatchesAFullSortOnLargeVocabularies) {
  for (const float temperature : {0.5f, 1.0f, 100.0f}) {
    for (const float p : {0.1f, 0.5f, 0.9f, 0.999f}) {
      const std::vector<float> logits = RandomLogits(20000, 3.0f, 11);
      CandidateList kept;
      const double total = AllWeighted(logits, temperature, 0.0f, &kept);
      CandidateList expected = kept;
      std::sort(expected.begin(), expected.end(), RanksBefore);
      double running = 0.0;
      size_t count = 0;
      while (count < expected.size() && running < (p - kTopPSlack) * total) {
        running += expected[count++].weight;
      }
      expected.resize(count);
      ApplyTopP(p, total, &kept);
      EXPECT_EQ(IdSet(kept), IdSet(expected)) << "temperature " << temperature << " p " << p;
      // The sampler's path: only the heaviest bands, then the same selection.
      std::vector<float> weights(logits.size());
      ExpWeights(logits, MaxLogit(logits), 1.0f / temperature, 0.0f, absl::MakeSpan(weights));
      CandidateList heaviest;
      CollectHeaviest(logits, weights, TopPTarget(p, total), &heaviest);
      ApplyTopP(p, total, &heaviest);
      EXPECT_EQ(IdSet(heaviest), IdSet(expected)) << "temperature " << temperature << " p " << p;
    }
  }
}

TEST(SamplingFiltersTest, CollectHeaviestStopsAtTheFirstBandReachingTheTarget) {
  // Weights 1, 2^-4, 2^-10, 2^-30, 0: bands [2^-8, inf), [2^-20, 2^-8), [2^-40, 2^-20), (0, 2^-40).
  const std::vector<float> logits = {0.0f, -1.0f, -2.0f, -3.0f, -4.0f};
  const std::vector<float> weights = {1.0f, 0x1p-4f, 0x1p-10f, 0x1p-30f, 0.0f};
  CandidateList out;
  CollectHeaviest(logits, weights, 1.0, &out);
  EXPECT_EQ(IdSet(out), (std::set<int32_t>{0, 1}));
  CollectHeaviest(logits, weights, 1.0 + 0x1p-4 + 0x1p-11, &out);
  EXPECT_EQ(IdSet(out), (std::set<int32_t>{0, 1, 2}));
  CollectHeaviest(logits, weights, 2.0, &out);  // never reached: every positive weight
  EXPECT_EQ(IdSet(out), (std::set<int32_t>{0, 1, 2, 3}));
}

TEST(SamplingFiltersTest, DrawIsTheInverseCdf) {
  const CandidateList candidates = {{0, 7, 1.0f}, {0, 3, 3.0f}};
  EXPECT_EQ(DrawCandidate(candidates, 0.0), 7);
  EXPECT_EQ(DrawCandidate(candidates, 0.2499), 7);
  EXPECT_EQ(DrawCandidate(candidates, 0.25), 3);
  EXPECT_EQ(DrawCandidate(candidates, 0.9999999), 3);
}

}  // namespace
}  // namespace llmserve::worker
