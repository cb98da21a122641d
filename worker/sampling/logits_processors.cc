#include "worker/sampling/logits_processors.h"

#include <limits>

#include "common/base/logging.h"

namespace llmserve::worker {
namespace {

constexpr float kInfinity = std::numeric_limits<float>::infinity();
constexpr float kLargestFinite = std::numeric_limits<float>::max();

float ClampPositiveInfinity(float logit) { return logit == kInfinity ? kLargestFinite : logit; }

float RepetitionPenalized(float logit, float penalty) {
  return logit > 0.0f ? logit / penalty : logit * penalty;
}

}  // namespace

void ApplyPenalties(absl::Span<float> logits, const SamplingState& state,
                    std::vector<std::pair<int32_t, float>>* original) {
  const SamplingParams& params = state.params();
  const bool repetition = params.repetition_penalty != 1.0f;
  const bool additive = params.frequency_penalty != 0.0f || params.presence_penalty != 0.0f;
  const auto check_id = [&](int32_t token_id) {
    LLMSERVE_CHECK(token_id >= 0 && static_cast<size_t>(token_id) < logits.size())
        << "token " << token_id << " outside logits of size " << logits.size();
  };
  const auto save = [&](int32_t token_id) {
    if (original != nullptr) original->emplace_back(token_id, logits[token_id]);
  };
  if (repetition) {
    // Prompt tokens that also occur in the output are handled with the output below, so that
    // each token is penalized (and saved) once.
    for (const int32_t token_id : state.prompt_token_ids()) {
      if (state.output_token_counts().contains(token_id)) continue;
      check_id(token_id);
      save(token_id);
      logits[token_id] =
          ClampPositiveInfinity(RepetitionPenalized(logits[token_id], params.repetition_penalty));
    }
  }
  if (!repetition && !additive) return;
  for (const auto& [token_id, count] : state.output_token_counts()) {
    check_id(token_id);
    save(token_id);
    float logit = logits[token_id];
    if (repetition) logit = RepetitionPenalized(logit, params.repetition_penalty);
    logit -= params.frequency_penalty * static_cast<float>(count);
    logit -= params.presence_penalty;  // count > 0: only tokens that occurred are in the map
    logits[token_id] = ClampPositiveInfinity(logit);
  }
}

void ApplyLogitBias(absl::Span<float> logits, const SamplingState& state,
                    std::vector<std::pair<int32_t, float>>* original) {
  for (const auto& [token_id, bias] : state.params().logit_bias) {
    LLMSERVE_CHECK(token_id >= 0 && static_cast<size_t>(token_id) < logits.size())
        << "logit_bias token " << token_id << " outside logits of size " << logits.size();
    if (original != nullptr) original->emplace_back(token_id, logits[token_id]);
    logits[token_id] = ClampPositiveInfinity(logits[token_id] + bias);
  }
}

}  // namespace llmserve::worker
