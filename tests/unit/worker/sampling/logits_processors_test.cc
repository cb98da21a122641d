#include "worker/sampling/logits_processors.h"

#include <limits>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace llmserve::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::UnorderedElementsAre;

SamplingState MakeState(const SamplingParams& params, std::vector<int32_t> prompt,
                        std::vector<int32_t> output, int64_t vocab_size) {
  SamplingState state = *SamplingState::Create(params, prompt, vocab_size);
  for (const int32_t token : output) state.Append(token);
  return state;
}

TEST(SamplingPenaltiesTest, AllThreePenaltiesAsVllmDefinesThem) {
  SamplingParams params;
  params.repetition_penalty = 2.0f;
  params.frequency_penalty = 0.5f;
  params.presence_penalty = 0.25f;
  const SamplingState state = MakeState(params, {0, 1, 1}, {2, 2, 3}, 6);
  std::vector<float> logits = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f, 4.0f};
  std::vector<std::pair<int32_t, float>> original;
  ApplyPenalties(absl::MakeSpan(logits), state, &original);
  EXPECT_THAT(logits, ElementsAre(1.0f,    // prompt, positive: 2 / 2
                                  -2.0f,   // prompt, negative: -1 * 2
                                  -1.0f,   // output x2: 0.5 / 2 - 0.5 * 2 - 0.25
                                  0.75f,   // output x1: 3 / 2 - 0.5 - 0.25
                                  -2.0f,   // untouched
                                  4.0f));  // untouched
  EXPECT_THAT(original, UnorderedElementsAre(std::pair(0, 2.0f), std::pair(1, -1.0f),
                                             std::pair(2, 0.5f), std::pair(3, 3.0f)));
}

TEST(SamplingPenaltiesTest, PresenceAndFrequencyIgnoreThePrompt) {
  SamplingParams params;
  params.frequency_penalty = -1.0f;  // negative values encourage repetition
  params.presence_penalty = 2.0f;
  const SamplingState state = MakeState(params, {0}, {1, 1, 1}, 3);
  std::vector<float> logits = {1.0f, 1.0f, 1.0f};
  ApplyPenalties(absl::MakeSpan(logits), state);
  EXPECT_THAT(logits, ElementsAre(1.0f, 1.0f + 3.0f - 2.0f, 1.0f));
}

TEST(SamplingPenaltiesTest, RepetitionBelowOneBoostsAndTokenInBothCountsOnce) {
  SamplingParams params;
  params.repetition_penalty = 0.5f;
  const SamplingState state = MakeState(params, {0, 1}, {1}, 3);
  std::vector<float> logits = {2.0f, -4.0f, 2.0f};
  ApplyPenalties(absl::MakeSpan(logits), state);
  EXPECT_THAT(logits, ElementsAre(4.0f, -2.0f, 2.0f));
}

TEST(SamplingPenaltiesTest, NoPenaltiesLeaveLogitsAlone) {
  const SamplingState state = MakeState(SamplingParams(), {0, 1}, {1, 2}, 3);
  std::vector<float> logits = {2.0f, -4.0f, 2.0f};
  ApplyPenalties(absl::MakeSpan(logits), state);
  EXPECT_THAT(logits, ElementsAre(2.0f, -4.0f, 2.0f));
}

TEST(SamplingPenaltiesTest, OverflowIsClampedToLargestFloat) {
  SamplingParams params;
  params.repetition_penalty = 0.5f;
  const SamplingState state = MakeState(params, {0}, {}, 2);
  std::vector<float> logits = {std::numeric_limits<float>::max(), 0.0f};
  ApplyPenalties(absl::MakeSpan(logits), state);
  EXPECT_EQ(logits[0], std::numeric_limits<float>::max());
}

}  // namespace
}  // namespace llmserve::worker
