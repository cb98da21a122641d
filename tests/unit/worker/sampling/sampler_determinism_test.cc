// Seed determinism across batch compositions, and degenerate logits.

#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "worker/sampling/sampler.h"

namespace llmserve::worker {
namespace {

constexpr float kInfinity = std::numeric_limits<float>::infinity();
constexpr int64_t kVocab = 2000;
constexpr int kSteps = 40;

// The logits "the model" gives request `request` at `step`: a function of both only, as a real
// model's are of the request's own tokens.
std::vector<float> ModelLogits(int request, int step) {
  std::mt19937 engine(static_cast<uint32_t>(request * 100003 + step));
  std::normal_distribution<float> normal(0.0f, 2.5f);
  std::vector<float> logits(kVocab);
  for (float& logit : logits) logit = normal(engine);
  return logits;
}

// Five requests with different settings, all seeded.
SamplingParams RequestParams(int request) {
  SamplingParams params;
  params.seed = 1000 + request;
  switch (request) {
    case 0:
      params.top_p = 0.9f;
      params.repetition_penalty = 1.3f;
      break;
    case 1:
      params.top_k = 50;
      params.temperature = 0.8f;
      break;
    case 2:
      params.min_p = 0.05f;
      params.presence_penalty = 0.5f;
      params.frequency_penalty = 0.5f;
      break;
    case 3:
      params.temperature = 0.0f;
      break;
    default:
      params.temperature = 1.7f;
      params.top_k = 500;
      params.top_p = 0.95f;
      break;
  }
  return params;
}

// Runs `requests` as one batch for kSteps steps; returns each request's tokens, by request id.
std::vector<std::vector<int32_t>> RunBatch(const std::vector<int>& requests) {
  std::vector<SamplingState> states;
  for (const int request : requests) {
    states.push_back(*SamplingState::Create(RequestParams(request), {7, 8, 9}, kVocab));
  }
  std::vector<std::vector<int32_t>> tokens(5);
  const Sampler sampler;
  for (int step = 0; step < kSteps; ++step) {
    std::vector<float> logits;  // [requests.size(), kVocab]
    std::vector<const SamplingState*> batch;
    for (size_t i = 0; i < requests.size(); ++i) {
      const std::vector<float> row = ModelLogits(requests[i], step);
      logits.insert(logits.end(), row.begin(), row.end());
      batch.push_back(&states[i]);
    }
    const std::vector<SampleResult> results = sampler.SampleBatch(absl::MakeSpan(logits), batch);
    for (size_t i = 0; i < requests.size(); ++i) {
      tokens[requests[i]].push_back(results[i].token_id);
      states[i].Append(results[i].token_id);
    }
  }
  return tokens;
}

TEST(SamplerDeterminismTest, SameSeedSameTokensWhateverTheBatch) {
  std::vector<std::vector<int32_t>> alone(5);
  for (int request = 0; request < 5; ++request) alone[request] = RunBatch({request})[request];
  const std::vector<std::vector<int>> batches = {{0, 1, 2, 3, 4}, {4, 3, 2, 1, 0}, {2, 0, 4}};
  for (const std::vector<int>& batch : batches) {
    const std::vector<std::vector<int32_t>> tokens = RunBatch(batch);
    for (const int request : batch) EXPECT_EQ(tokens[request], alone[request]) << request;
  }
  // Sampled requests really vary from step to step (the stream moves on).
  EXPECT_GT(std::set<int32_t>(alone[0].begin(), alone[0].end()).size(), 5u);
}

TEST(SamplerDeterminismTest, DifferentSeedsDiverge) {
  SamplingParams params;
  params.seed = 1;
  SamplingState a = *SamplingState::Create(params, {}, kVocab);
  params.seed = 2;
  SamplingState b = *SamplingState::Create(params, {}, kVocab);
  int differences = 0;
  for (int step = 0; step < 20; ++step) {
    std::vector<float> logits_a = ModelLogits(0, step);
    std::vector<float> logits_b = logits_a;
    const int32_t token_a = Sampler().Sample(absl::MakeSpan(logits_a), a).token_id;
    const int32_t token_b = Sampler().Sample(absl::MakeSpan(logits_b), b).token_id;
    differences += token_a != token_b;
    a.Append(token_a);
    b.Append(token_b);
  }
  EXPECT_GT(differences, 10);
}

SampleResult SampleOnce(std::vector<float> logits, SamplingParams params) {
  params.return_logprobs = true;
  const SamplingState state =
      *SamplingState::Create(params, {}, static_cast<int64_t>(logits.size()));
  return Sampler().Sample(absl::MakeSpan(logits), state);
}

TEST(SamplerDegenerateTest, OnlyOneFiniteLogit) {
  SamplingParams params;
  for (const float temperature : {0.0f, 1.0f, 50.0f}) {
    params.temperature = temperature;
    for (uint64_t seed = 0; seed < 20; ++seed) {
      params.seed = seed;
      const SampleResult result = SampleOnce({-kInfinity, -kInfinity, 3.0f, -kInfinity}, params);
      EXPECT_EQ(result.token_id, 2);
      EXPECT_EQ(result.logprob, 0.0f);
    }
  }
}

TEST(SamplerDegenerateTest, NanCountsAsMinusInfinity) {
  SamplingParams params;
  params.top_logprobs = 3;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    params.seed = seed;
    const SampleResult result = SampleOnce({std::nanf(""), 1.0f, std::nanf("")}, params);
    EXPECT_EQ(result.token_id, 1);
    EXPECT_EQ(result.logprob, 0.0f);
    ASSERT_EQ(result.top_logprobs.size(), 3u);
    EXPECT_EQ(result.top_logprobs[0], std::make_pair(1, 0.0f));
    EXPECT_EQ(result.top_logprobs[1], std::make_pair(0, -kInfinity));
  }
}

TEST(SamplerDegenerateTest, PlusInfinityTokensShareTheMass) {
  SamplingParams params;
  std::set<int32_t> seen;
  for (uint64_t seed = 0; seed < 50; ++seed) {
    params.seed = seed;
    const SampleResult result = SampleOnce({kInfinity, 0.0f, kInfinity}, params);
    seen.insert(result.token_id);
    EXPECT_NEAR(result.logprob, std::log(0.5f), 1e-6);
  }
  EXPECT_EQ(seen, (std::set<int32_t>{0, 2}));
}

TEST(SamplerDegenerateTest, AllMinusInfinityOrNanGivesTokenZero) {
  SamplingParams params;
  params.seed = 3;
  for (const float temperature : {0.0f, 1.0f}) {
    params.temperature = temperature;
    const SampleResult result = SampleOnce({-kInfinity, std::nanf(""), -kInfinity}, params);
    EXPECT_EQ(result.token_id, 0);
    EXPECT_EQ(result.logprob, -kInfinity);
  }
}

TEST(SamplerDegenerateTest, VocabularyOfOne) {
  SamplingParams params;
  params.top_k = 1;
  params.top_p = 0.1f;
  params.min_p = 1.0f;
  params.top_logprobs = 20;
  const SampleResult result = SampleOnce({-12.5f}, params);
  EXPECT_EQ(result.token_id, 0);
  EXPECT_EQ(result.logprob, 0.0f);
  ASSERT_EQ(result.top_logprobs.size(), 1u);
}

TEST(SamplerDegenerateTest, EmptyBatch) { EXPECT_TRUE(Sampler().SampleBatch({}, {}).empty()); }

}  // namespace
}  // namespace llmserve::worker
