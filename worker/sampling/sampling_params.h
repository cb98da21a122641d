// The sampling parameters of one request, as the public API defines them
// (proto/llmserve/v1/inference.proto, message SamplingParams), and their validation. The worker
// service converts the proto into this struct; the sampler never sees the proto.
//
// Thread-safe: a plain value and a pure function.

#ifndef LLMSERVE_WORKER_SAMPLING_SAMPLING_PARAMS_H_
#define LLMSERVE_WORKER_SAMPLING_SAMPLING_PARAMS_H_

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace llmserve::worker {

// Defaults are those of the proto: plain sampling from the softmax at temperature 1, no filters,
// no penalties, no logprobs. docs/sampling.md says what each field does exactly.
struct SamplingParams {
  // In [0, 100]. Below kGreedyTemperature the request is greedy (argmax, ties to the lowest id).
  float temperature = 1.0f;
  // Keep only the top_k most likely tokens; 0 disables. In [0, vocab_size].
  int32_t top_k = 0;
  // Keep the smallest set of most likely tokens whose probability mass reaches top_p. In (0, 1];
  // 1 disables.
  float top_p = 1.0f;
  // Drop tokens whose probability is below min_p times the most likely token's. In [0, 1]; 0
  // disables.
  float min_p = 0.0f;
  // Tokens in the prompt or the output: positive logits divided by it, others multiplied by it.
  // In (0, 2]; 1 disables.
  float repetition_penalty = 1.0f;
  // Subtracted once from the logit of every token already in the output. In [-2, 2].
  float presence_penalty = 0.0f;
  // Subtracted from a token's logit once per occurrence in the output. In [-2, 2].
  float frequency_penalty = 0.0f;
  // Seed of the request's own random stream; unset: SamplingState draws one.
  std::optional<uint64_t> seed;
  // Number of most likely alternatives returned with each token. In [0, 20].
  int32_t top_logprobs = 0;
  // Return the chosen token's log probability.
  bool return_logprobs = false;
  // (token_id, bias) pairs added to the logits before anything else; token ids distinct and in
  // [0, vocab_size), biases in [-100, 100], at most 300 pairs.
  std::vector<std::pair<int32_t, float>> logit_bias;

  // Logprobs cost a pass over the vocabulary, so they are computed only when asked for: asking
  // for alternatives implies the chosen token's logprob too.
  bool wants_logprobs() const { return return_logprobs || top_logprobs > 0; }
};

// Temperatures below this are greedy, as in vLLM (_SAMPLING_EPS): dividing by a smaller one only
// turns the softmax into an argmax with random tie-breaking.
inline constexpr float kGreedyTemperature = 1e-5f;

// OK when every field is in the range above (NaN is never in range) and top_k <= vocab_size;
// otherwise INVALID_ARGUMENT naming the first bad field, its value and the allowed range.
absl::Status ValidateSamplingParams(const SamplingParams& params, int64_t vocab_size);

// The logit_bias part of ValidateSamplingParams: "logit_bias[<id>]: ..." for an id outside
// [0, vocab_size) or given twice, or a bias outside [-100, 100] (NaN included); too many entries.
absl::Status ValidateLogitBias(absl::Span<const std::pair<int32_t, float>> logit_bias,
                               int64_t vocab_size);

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_SAMPLING_SAMPLING_PARAMS_H_
