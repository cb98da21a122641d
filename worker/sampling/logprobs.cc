#include "worker/sampling/logprobs.h"

#include <cmath>
#include <limits>

#include "worker/sampling/candidate_filters.h"
#include "worker/sampling/vector_ops.h"

namespace llmserve::worker {

LogSoftmaxNormalizer ComputeLogSoftmaxNormalizer(absl::Span<const float> logits) {
  const float max_logit = MaxLogit(logits);
  if (max_logit == -std::numeric_limits<float>::infinity()) return {max_logit, 0.0};
  return {max_logit, std::log(SumExp(logits, max_logit))};
}

float Logprob(float logit, const LogSoftmaxNormalizer& normalizer) {
  if (normalizer.max_logit == -std::numeric_limits<float>::infinity()) {
    return -std::numeric_limits<float>::infinity();
  }
  return static_cast<float>(
      (static_cast<double>(logit) - static_cast<double>(normalizer.max_logit)) -
      normalizer.log_sum);
}

std::vector<std::pair<int32_t, float>> TopLogprobs(absl::Span<const float> logits, int32_t n,
                                                   const LogSoftmaxNormalizer& normalizer) {
  CandidateList best;
  SelectTopK(logits, n, /*sorted=*/true, &best);
  std::vector<std::pair<int32_t, float>> result;
  result.reserve(best.size());
  for (const TokenCandidate& candidate : best) {
    result.emplace_back(candidate.token_id, Logprob(candidate.logit, normalizer));
  }
  return result;
}

}  // namespace llmserve::worker
