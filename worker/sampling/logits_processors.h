// The logit bias and the repetition, frequency and presence penalties, applied in place to one
// request's logits. The bias runs first, on the raw logits, then the penalties; temperature and
// the filters (candidate_filters.h) follow.
//
// Thread-safe: pure functions over caller-owned memory.

#ifndef LLMSERVE_WORKER_SAMPLING_LOGITS_PROCESSORS_H_
#define LLMSERVE_WORKER_SAMPLING_LOGITS_PROCESSORS_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "worker/sampling/sampling_state.h"

namespace llmserve::worker {

// Applies the penalties of `state.params()` as vLLM does, to each token independently:
//   1. repetition: if the token is in the prompt or the output, logit > 0 ? logit / penalty
//                  : logit * penalty;
//   2. frequency:  logit -= frequency_penalty * (occurrences in the output);
//   3. presence:   logit -= presence_penalty if the token occurs in the output.
// A result of +inf becomes the largest float, as in SanitizeLogits (vector_ops.h). Costs O(distinct
// prompt and output tokens), not O(vocab_size). When `original` is not null, the value each changed
// token had before is appended to it as (token_id, logit), so callers can still report raw
// logprobs. Token ids of `state` must be < logits.size() (CHECKed; SamplingState::Create validated
// them).
void ApplyPenalties(absl::Span<float> logits, const SamplingState& state,
                    std::vector<std::pair<int32_t, float>>* original = nullptr);

// Adds each (token_id, bias) of `state.params().logit_bias` to its logit, as OpenAI's logit_bias
// does. -inf (a token a structured-output mask removed) stays -inf, so a bias never brings back a
// masked token; +inf becomes the largest float. Saves the previous values into `original` as
// ApplyPenalties does. Token ids must be < logits.size() (CHECKed; validated at creation).
void ApplyLogitBias(absl::Span<float> logits, const SamplingState& state,
                    std::vector<std::pair<int32_t, float>>* original = nullptr);

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_SAMPLING_LOGITS_PROCESSORS_H_
