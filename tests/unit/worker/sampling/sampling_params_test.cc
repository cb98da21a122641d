#include "worker/sampling/sampling_params.h"

#include <cmath>
#include <functional>
#include <string>

#include "gtest/gtest.h"
#include "worker/sampling/sampling_state.h"

namespace llmserve::worker {
namespace {

constexpr int64_t kVocabSize = 1000;

// Applies `change` to default params and returns the validation message (empty when OK).
std::string ErrorAfter(const std::function<void(SamplingParams&)>& change) {
  SamplingParams params;
  change(params);
  const absl::Status status = ValidateSamplingParams(params, kVocabSize);
  if (status.ok()) return "";
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  return std::string(status.message());
}

TEST(SamplingParamsTest, DefaultsAndBoundsAreValid) {
  EXPECT_EQ(ErrorAfter([](SamplingParams&) {}), "");
  EXPECT_EQ(ErrorAfter([](SamplingParams& p) {
              p.temperature = 0.0f;
              p.top_k = kVocabSize;
              p.top_p = 1.0f;
              p.min_p = 1.0f;
              p.repetition_penalty = 2.0f;
              p.presence_penalty = -2.0f;
              p.frequency_penalty = 2.0f;
              p.top_logprobs = 20;
            }),
            "");
  EXPECT_EQ(ErrorAfter([](SamplingParams& p) {
              p.temperature = 100.0f;
              p.top_p = 1e-6f;
              p.repetition_penalty = 1e-3f;
            }),
            "");
}

TEST(SamplingParamsTest, EachFieldOutOfRangeIsNamed) {
  EXPECT_EQ(ErrorAfter([](SamplingParams& p) { p.temperature = -0.5f; }),
            "temperature is -0.5, outside [0, 100]");
  EXPECT_EQ(ErrorAfter([](SamplingParams& p) { p.temperature = 100.5f; }),
            "temperature is 100.5, outside [0, 100]");
  EXPECT_EQ(ErrorAfter([](SamplingParams& p) { p.top_p = 0.0f; }), "top_p is 0, outside (0, 1]");
  EXPECT_EQ(ErrorAfter([](SamplingParams& p) { p.top_p = 1.5f; }), "top_p is 1.5, outside (0, 1]");
  EXPECT_EQ(ErrorAfter([](SamplingParams& p) { p.top_k = kVocabSize + 1; }),
            "top_k is 1001, outside [0, 1000] (0 disables it)");
  EXPECT_EQ(ErrorAfter([](SamplingParams& p) { p.top_k = -1; }),
            "top_k is -1, outside [0, 1000] (0 disables it)");
  EXPECT_EQ(ErrorAfter([](SamplingParams& p) { p.min_p = 1.5f; }), "min_p is 1.5, outside [0, 1]");
  EXPECT_EQ(ErrorAfter([](SamplingParams& p) { p.repetition_penalty = 0.0f; }),
            "repetition_penalty is 0, outside (0, 2]");
  EXPECT_EQ(ErrorAfter([](SamplingParams& p) { p.repetition_penalty = 2.5f; }),
            "repetition_penalty is 2.5, outside (0, 2]");
  EXPECT_EQ(ErrorAfter([](SamplingParams& p) { p.presence_penalty = -2.5f; }),
            "presence_penalty is -2.5, outside [-2, 2]");
  EXPECT_EQ(ErrorAfter([](SamplingParams& p) { p.frequency_penalty = 3.0f; }),
            "frequency_penalty is 3, outside [-2, 2]");
  EXPECT_EQ(ErrorAfter([](SamplingParams& p) { p.top_logprobs = 21; }),
            "top_logprobs is 21, outside [0, 20]");
  EXPECT_EQ(ErrorAfter([](SamplingParams& p) { p.top_logprobs = -1; }),
            "top_logprobs is -1, outside [0, 20]");
}

TEST(SamplingParamsTest, NanIsRejected) {
  const std::string message = ErrorAfter([](SamplingParams& p) { p.top_p = std::nanf(""); });
  EXPECT_EQ(message.rfind("top_p is ", 0), 0u) << message;
  EXPECT_NE(ErrorAfter([](SamplingParams& p) { p.temperature = std::nanf(""); }), "");
  EXPECT_NE(ErrorAfter([](SamplingParams& p) { p.presence_penalty = std::nanf(""); }), "");
}

TEST(SamplingParamsTest, LogitBiasIsValidatedPerEntry) {
  EXPECT_EQ(ErrorAfter([](SamplingParams& p) {
              p.logit_bias = {{0, -100.0f}, {kVocabSize - 1, 100.0f}, {7, 0.5f}};
            }),
            "");
  EXPECT_EQ(ErrorAfter([](SamplingParams& p) {
              p.logit_bias = {{kVocabSize, 1.0f}};
            }),
            "logit_bias[1000]: token id 1000 is outside the vocabulary [0, 1000)");
  EXPECT_EQ(ErrorAfter([](SamplingParams& p) {
              p.logit_bias = {{-1, 1.0f}};
            }),
            "logit_bias[-1]: token id -1 is outside the vocabulary [0, 1000)");
  EXPECT_EQ(ErrorAfter([](SamplingParams& p) {
              p.logit_bias = {{3, 100.5f}};
            }),
            "logit_bias[3] is 100.5, outside [-100, 100]");
  EXPECT_NE(ErrorAfter([](SamplingParams& p) { p.logit_bias = {{3, std::nanf("")}}; }), "");
  EXPECT_EQ(ErrorAfter([](SamplingParams& p) {
              p.logit_bias = {{3, 1.0f}, {3, 2.0f}};
            }),
            "logit_bias[3]: token id given twice");
  EXPECT_EQ(ErrorAfter([](SamplingParams& p) {
              for (int i = 0; i < 301; ++i) p.logit_bias.emplace_back(i, 1.0f);
            }),
            "logit_bias has 301 entries, at most 300");
}

TEST(SamplingParamsTest, WantsLogprobs) {
  SamplingParams params;
  EXPECT_FALSE(params.wants_logprobs());
  params.top_logprobs = 3;
  EXPECT_TRUE(params.wants_logprobs());
  params.top_logprobs = 0;
  params.return_logprobs = true;
  EXPECT_TRUE(params.wants_logprobs());
}

TEST(SamplingStateTest, CreateValidatesParamsAndPromptIds) {
  SamplingParams params;
  params.top_k = 11;
  absl::StatusOr<SamplingState> state = SamplingState::Create(params, {1, 2}, 10);
  ASSERT_FALSE(state.ok());
  EXPECT_EQ(state.status().message(), "top_k is 11, outside [0, 10] (0 disables it)");
  state = SamplingState::Create(SamplingParams(), {1, 10}, 10);
  ASSERT_FALSE(state.ok());
  EXPECT_EQ(state.status().message(), "prompt token_ids[1] is 10, outside [0, 10)");
  EXPECT_FALSE(SamplingState::Create(SamplingParams(), {-1}, 10).ok());
}

TEST(SamplingStateTest, TracksSeedCountsAndPromptSet) {
  SamplingParams params;
  params.seed = 42;
  params.repetition_penalty = 1.5f;
  SamplingState state = *SamplingState::Create(params, {3, 3, 5}, 10);
  EXPECT_EQ(state.seed(), 42u);
  EXPECT_EQ(state.prompt_token_ids(), (absl::flat_hash_set<int32_t>{3, 5}));
  state.Append(7);
  state.Append(3);
  state.Append(7);
  EXPECT_EQ(state.num_output_tokens(), 3);
  EXPECT_EQ(state.output_token_counts(), (absl::flat_hash_map<int32_t, int32_t>{{7, 2}, {3, 1}}));
}

TEST(SamplingStateTest, PromptSetKeptOnlyForRepetitionPenalty) {
  const SamplingState state = *SamplingState::Create(SamplingParams(), {3, 5}, 10);
  EXPECT_TRUE(state.prompt_token_ids().empty());
}

TEST(SamplingStateTest, UnseededRequestsDrawDifferentSeeds) {
  const SamplingState a = *SamplingState::Create(SamplingParams(), {}, 10);
  const SamplingState b = *SamplingState::Create(SamplingParams(), {}, 10);
  EXPECT_NE(a.seed(), b.seed());  // two equal 64-bit draws: 2^-64
}

}  // namespace
}  // namespace llmserve::worker
