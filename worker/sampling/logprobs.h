// Log probabilities reported with sampled tokens: the log-softmax of the raw logits, before
// penalties, temperature and filters (vLLM's default, "raw_logprobs"), so that they describe the
// model rather than the sampling settings.
//
// Thread-safe: pure functions.

#ifndef LLMSERVE_WORKER_SAMPLING_LOGPROBS_H_
#define LLMSERVE_WORKER_SAMPLING_LOGPROBS_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/types/span.h"

namespace llmserve::worker {

// The log-softmax normalizer of one row of logits, kept as the maximum and the log of the sum
// around it rather than as one number: max + log(sum) would round away log(sum) when the maximum
// is huge (a +inf logit sanitized to the largest float).
struct LogSoftmaxNormalizer {
  float max_logit = 0.0f;
  double log_sum = 0.0;  // log(sum(exp(logit - max_logit))), in double
};

// `logits` must be sanitized (no NaN, no +inf) and non-empty. max_logit is -inf when every logit
// is.
LogSoftmaxNormalizer ComputeLogSoftmaxNormalizer(absl::Span<const float> logits);

// log(softmax(logits)[token]) from the token's logit: (logit - max) - log_sum, or -inf when every
// logit is -inf (no token has any probability).
float Logprob(float logit, const LogSoftmaxNormalizer& normalizer);

// The min(n, size) most likely tokens as (token_id, logprob), most likely first, ties to the
// lower id. `logits` must be sanitized.
std::vector<std::pair<int32_t, float>> TopLogprobs(absl::Span<const float> logits, int32_t n,
                                                   const LogSoftmaxNormalizer& normalizer);

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_SAMPLING_LOGPROBS_H_
