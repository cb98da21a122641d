#include "worker/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace llmserve::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;

SamplingState MakeState(SamplingParams params, int64_t vocab_size,
                        std::vector<int32_t> prompt = {}) {
  return *SamplingState::Create(params, prompt, vocab_size);
}

std::vector<float> LogProbabilities(const std::vector<float>& probabilities) {
  std::vector<float> logits;
  for (const float p : probabilities) logits.push_back(std::log(p));
  return logits;
}

// Samples `draws` tokens from the same logits, appending each (the stream moves on; without
// penalties the history changes nothing else), and counts them.
std::map<int32_t, int> Histogram(const std::vector<float>& logits, SamplingParams params,
                                 int draws) {
  SamplingState state = MakeState(params, static_cast<int64_t>(logits.size()));
  std::map<int32_t, int> counts;
  const Sampler sampler;
  for (int i = 0; i < draws; ++i) {
    std::vector<float> scratch = logits;
    const int32_t token = sampler.Sample(absl::MakeSpan(scratch), state).token_id;
    ++counts[token];
    state.Append(token);
  }
  return counts;
}

// The tokens sampled at step 0 by each of `seeds` seeds.
std::set<int32_t> SampledAcrossSeeds(const std::vector<float>& logits, SamplingParams params,
                                     int seeds) {
  std::set<int32_t> seen;
  const Sampler sampler;
  for (int seed = 0; seed < seeds; ++seed) {
    params.seed = seed;
    std::vector<float> scratch = logits;
    seen.insert(
        sampler
            .Sample(absl::MakeSpan(scratch), MakeState(params, static_cast<int64_t>(logits.size())))
            .token_id);
  }
  return seen;
}

TEST(SamplerTest, GreedyPicksTheArgmaxWithTiesToTheLowestId) {
  SamplingParams params;
  params.temperature = 0.0f;
  std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f};
  EXPECT_EQ(Sampler().Sample(absl::MakeSpan(logits), MakeState(params, 4)).token_id, 1);
  params.temperature = kGreedyTemperature / 2;  // as good as zero
  EXPECT_EQ(SampledAcrossSeeds({0.5f, 2.0f, -1.0f, 2.0f}, params, 50), std::set<int32_t>{1});
}

TEST(SamplerTest, GreedySeesThePenalties) {
  SamplingParams params;
  params.temperature = 0.0f;
  params.repetition_penalty = 2.0f;
  std::vector<float> logits = {2.0f, 1.5f};
  EXPECT_EQ(Sampler().Sample(absl::MakeSpan(logits), MakeState(params, 2, {0})).token_id, 1);
}

// OpenAI's logit_bias at temperature 0: +100 makes a token the argmax, -100 removes it.
TEST(SamplerTest, LogitBiasDecidesGreedy) {
  SamplingParams params;
  params.temperature = 0.0f;
  params.logit_bias = {{2, 100.0f}};
  std::vector<float> logits = {5.0f, 9.0f, -3.0f, 1.0f};
  EXPECT_EQ(Sampler().Sample(absl::MakeSpan(logits), MakeState(params, 4)).token_id, 2);
  params.logit_bias = {{1, -100.0f}};
  logits = {5.0f, 9.0f, -3.0f, 1.0f};
  EXPECT_EQ(Sampler().Sample(absl::MakeSpan(logits), MakeState(params, 4)).token_id, 0);
  // A token a structured-output mask removed (-inf) stays removed.
  params.logit_bias = {{3, 100.0f}};
  logits = {5.0f, 9.0f, -3.0f, -std::numeric_limits<float>::infinity()};
  EXPECT_EQ(Sampler().Sample(absl::MakeSpan(logits), MakeState(params, 4)).token_id, 1);
}

// Sampled, -100 bans a token and +100 forces one, for every seed; logprobs stay the raw model's.
TEST(SamplerTest, LogitBiasBansAndForcesWhenSampling) {
  SamplingParams params;
  params.temperature = 1.0f;
  params.logit_bias = {{0, -100.0f}};
  const std::vector<float> logits = {3.0f, 1.0f, 1.0f, 1.0f};
  EXPECT_EQ(SampledAcrossSeeds(logits, params, 200).count(0), 0u);
  params.logit_bias = {{3, 100.0f}};
  EXPECT_EQ(SampledAcrossSeeds(logits, params, 200), std::set<int32_t>{3});
  params.return_logprobs = true;
  params.seed = 1;
  std::vector<float> scratch = logits;
  const SampleResult result = Sampler().Sample(absl::MakeSpan(scratch), MakeState(params, 4));
  EXPECT_EQ(result.token_id, 3);
  const double normalizer = std::log(std::exp(3.0) + 3 * std::exp(1.0));
  EXPECT_NEAR(result.logprob, 1.0 - normalizer, 1e-5);
}

TEST(SamplerTest, TopKOneIsGreedy) {
  std::mt19937 engine(3);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<float> logits(500);
    for (float& logit : logits) logit = normal(engine);
    SamplingParams params;
    params.top_k = 1;
    params.temperature = 1.5f;
    params.seed = trial;
    std::vector<float> greedy_logits = logits;
    SamplingParams greedy;
    greedy.temperature = 0.0f;
    EXPECT_EQ(Sampler().Sample(absl::MakeSpan(logits), MakeState(params, 500)).token_id,
              Sampler().Sample(absl::MakeSpan(greedy_logits), MakeState(greedy, 500)).token_id);
  }
}

TEST(SamplerTest, TopKSamplesExactlyTheKBest) {
  // The best three are 1, 5 and 3; the others hold a good part of the mass.
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 2.9f, 0.5f, 2.95f, -1.0f, 2.8f};
  SamplingParams params;
  params.top_k = 3;
  EXPECT_EQ(SampledAcrossSeeds(logits, params, 500), (std::set<int32_t>{1, 3, 5}));
  // Ties at the k-th place go to the lower id.
  params.top_k = 2;
  EXPECT_EQ(SampledAcrossSeeds({1.0f, 2.0f, 2.0f, 2.0f}, params, 500), (std::set<int32_t>{1, 2}));
}

TEST(SamplerTest, TopPSamplesTheNucleusWithRenormalizedFrequencies) {
  SamplingParams params;
  params.top_p = 0.8f;
  params.seed = 2024;
  constexpr int kDraws = 20000;
  const std::map<int32_t, int> counts =
      Histogram(LogProbabilities({0.5f, 0.3f, 0.15f, 0.05f}), params, kDraws);
  ASSERT_EQ(counts.size(), 2u);
  // 0.5 / 0.8 and 0.3 / 0.8; the standard error is 0.0034.
  EXPECT_NEAR(counts.at(0) / static_cast<double>(kDraws), 0.625, 0.015);
  EXPECT_NEAR(counts.at(1) / static_cast<double>(kDraws), 0.375, 0.015);
}

TEST(SamplerTest, PlainSamplingFollowsTheTemperatureSoftmax) {
  SamplingParams params;
  params.seed = 99;
  constexpr int kDraws = 20000;
  std::map<int32_t, int> counts = Histogram(LogProbabilities({0.2f, 0.5f, 0.3f}), params, kDraws);
  EXPECT_NEAR(counts[0] / static_cast<double>(kDraws), 0.2, 0.015);
  EXPECT_NEAR(counts[1] / static_cast<double>(kDraws), 0.5, 0.015);
  EXPECT_NEAR(counts[2] / static_cast<double>(kDraws), 0.3, 0.015);
  // Temperature 2 takes square roots of the ratios: p ~ (1, 0.5) -> (2/3, 1/3).
  params.temperature = 2.0f;
  counts = Histogram(LogProbabilities({0.8f, 0.2f}), params, kDraws);
  EXPECT_NEAR(counts[0] / static_cast<double>(kDraws), 2.0 / 3.0, 0.015);
}

TEST(SamplerTest, TopPIsAppliedAfterTopK) {
  // Probabilities 0.4, 0.3, 0.2, 0.1. Alone, top_p 0.5 needs two tokens; after top_k 2 the
  // renormalized 4/7 reaches 0.5 with the first.
  const std::vector<float> logits = LogProbabilities({0.4f, 0.3f, 0.2f, 0.1f});
  SamplingParams params;
  params.top_p = 0.5f;
  EXPECT_EQ(SampledAcrossSeeds(logits, params, 300), (std::set<int32_t>{0, 1}));
  params.top_k = 2;
  EXPECT_EQ(SampledAcrossSeeds(logits, params, 300), (std::set<int32_t>{0}));
}

TEST(SamplerTest, MinPSamplesExactlyTheTokensAboveTheThreshold) {
  // p >= 0.45 * 0.4 = 0.18 keeps tokens 0, 1 and 3 only.
  const std::vector<float> logits = LogProbabilities({0.4f, 0.2f, 0.1f, 0.3f});
  SamplingParams params;
  params.min_p = 0.45f;
  EXPECT_EQ(SampledAcrossSeeds(logits, params, 500), (std::set<int32_t>{0, 1, 3}));
}

TEST(SamplerTest, SampleDoesNotAdvanceTheStream) {
  SamplingParams params;
  params.seed = 5;
  SamplingState state = MakeState(params, 1000);
  std::mt19937 engine(1);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  std::vector<float> logits(1000);
  for (float& logit : logits) logit = uniform(engine);
  std::vector<float> first = logits;
  std::vector<float> second = logits;
  const Sampler sampler;
  const int32_t token = sampler.Sample(absl::MakeSpan(first), state).token_id;
  EXPECT_EQ(sampler.Sample(absl::MakeSpan(second), state).token_id, token);
}

TEST(SamplerTest, LogprobsAreTheRawLogSoftmax) {
  constexpr int kVocab = 1000;
  std::mt19937 engine(17);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> raw(kVocab);
  for (float& logit : raw) logit = normal(engine);
  double sum = 0.0;
  for (const float logit : raw) sum += std::exp(static_cast<double>(logit));
  const auto naive = [&](int32_t id) { return raw[id] - std::log(sum); };
  SamplingParams params;
  params.temperature = 0.7f;
  params.repetition_penalty = 1.8f;
  params.frequency_penalty = 1.0f;
  params.top_logprobs = 5;
  SamplingState state = MakeState(params, kVocab, {1, 2, 3});
  for (int step = 0; step < 20; ++step) {
    std::vector<float> logits = raw;
    const SampleResult result = Sampler().Sample(absl::MakeSpan(logits), state);
    EXPECT_NEAR(result.logprob, naive(result.token_id), 1e-5);
    std::vector<int32_t> order(kVocab);
    for (int32_t i = 0; i < kVocab; ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return raw[a] > raw[b]; });
    ASSERT_EQ(result.top_logprobs.size(), 5u);
    for (size_t i = 0; i < 5; ++i) {
      EXPECT_EQ(result.top_logprobs[i].first, order[i]);
      EXPECT_NEAR(result.top_logprobs[i].second, naive(order[i]), 1e-5);
    }
    state.Append(result.token_id);  // penalizes it from now on; its raw logprob is unchanged
  }
}

TEST(SamplerTest, LogprobsOnlyWhenAskedAndTiesByLowerId) {
  std::vector<float> logits = {1.0f, 3.0f, 3.0f, 2.0f};
  SamplingParams params;
  params.temperature = 0.0f;
  SampleResult result = Sampler().Sample(absl::MakeSpan(logits), MakeState(params, 4));
  EXPECT_EQ(result.logprob, 0.0f);
  EXPECT_TRUE(result.top_logprobs.empty());
  params.return_logprobs = true;
  params.top_logprobs = 3;
  logits = {1.0f, 3.0f, 3.0f, 2.0f};
  result = Sampler().Sample(absl::MakeSpan(logits), MakeState(params, 4));
  const float log_z = std::log(std::exp(1.0f) + 2 * std::exp(3.0f) + std::exp(2.0f));
  EXPECT_EQ(result.token_id, 1);
  EXPECT_NEAR(result.logprob, 3.0f - log_z, 1e-6);
  EXPECT_THAT(result.top_logprobs, ElementsAre(Pair(1, testing::FloatNear(3.0f - log_z, 1e-6)),
                                               Pair(2, testing::FloatNear(3.0f - log_z, 1e-6)),
                                               Pair(3, testing::FloatNear(2.0f - log_z, 1e-6))));
}

}  // namespace
}  // namespace llmserve::worker
