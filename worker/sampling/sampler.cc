#include "worker/sampling/sampler.h"

#include <limits>

#include "common/base/logging.h"
#include "worker/sampling/candidate_filters.h"
#include "worker/sampling/logits_processors.h"
#include "worker/sampling/logprobs.h"
#include "worker/sampling/random.h"
#include "worker/sampling/vector_ops.h"

namespace llmserve::worker {
namespace {

// Temperature, min-p, top-k and top-p, then the draw. `logits` are sanitized and penalized.
int32_t SampleRandom(absl::Span<const float> logits, const SamplingState& state) {
  const SamplingParams& params = state.params();
  const float max_logit = MaxLogit(logits);
  if (max_logit == -std::numeric_limits<float>::infinity()) return 0;
  const double uniform =
      UniformFromSeed(state.seed(), static_cast<uint64_t>(state.num_output_tokens()));
  // Reused across calls: for a 128k vocabulary these are 0.5 and up to 1.5 MB, which malloc
  // would otherwise map and fault in again for every request of every step.
  thread_local CandidateList candidates;
  thread_local std::vector<float> weights;
  // min-p and top-k commute (min-p is relative to the best token, which top-k always keeps), so
  // top-k goes first when it shrinks the list: then only k weights are computed.
  if (params.top_k > 0 && static_cast<size_t>(params.top_k) < logits.size()) {
    SelectTopK(logits, params.top_k, /*sorted=*/false, &candidates);
    const double total_weight =
        WeighAndFilter(max_logit, params.temperature, params.min_p, &candidates);
    ApplyTopP(params.top_p, total_weight, &candidates);
    return DrawCandidate(candidates, uniform);
  }
  weights.resize(logits.size());
  const double total_weight = ExpWeights(logits, max_logit, 1.0f / params.temperature, params.min_p,
                                         absl::MakeSpan(weights));
  if (params.top_p >= 1.0f) return DrawFromWeights(weights, total_weight, uniform);
  CollectHeaviest(logits, weights, TopPTarget(params.top_p, total_weight), &candidates);
  ApplyTopP(params.top_p, total_weight, &candidates);
  return DrawCandidate(candidates, uniform);
}

float RawLogit(absl::Span<const float> penalized, int32_t token_id,
               const std::vector<std::pair<int32_t, float>>& original) {
  for (const auto& [id, logit] : original) {
    if (id == token_id) return logit;
  }
  return penalized[token_id];
}

}  // namespace

SampleResult Sampler::Sample(absl::Span<float> logits, const SamplingState& state) const {
  LLMSERVE_CHECK(static_cast<int64_t>(logits.size()) == state.vocab_size() && !logits.empty())
      << "logits of size " << logits.size() << " for a vocabulary of " << state.vocab_size();
  const SamplingParams& params = state.params();
  SanitizeLogits(logits);
  SampleResult result;
  const bool wants_logprobs = params.wants_logprobs();
  // Logprobs describe the raw logits, so they are read before the bias and the penalties change
  // them; the changed tokens' raw values are kept for the chosen token's logprob (the bias saves
  // first, so a token both biased and penalized finds its raw value first).
  LogSoftmaxNormalizer normalizer;
  std::vector<std::pair<int32_t, float>> original;
  if (wants_logprobs) {
    normalizer = ComputeLogSoftmaxNormalizer(logits);
    result.top_logprobs = TopLogprobs(logits, params.top_logprobs, normalizer);
  }
  // The bias before anything else, greedy included: +100 must win an argmax, -100 lose it.
  ApplyLogitBias(logits, state, wants_logprobs ? &original : nullptr);
  ApplyPenalties(logits, state, wants_logprobs ? &original : nullptr);
  result.token_id =
      params.temperature < kGreedyTemperature ? Argmax(logits) : SampleRandom(logits, state);
  if (wants_logprobs) {
    result.logprob = Logprob(RawLogit(logits, result.token_id, original), normalizer);
  }
  return result;
}

std::vector<SampleResult> Sampler::SampleBatch(
    absl::Span<float> logits, absl::Span<const SamplingState* const> states) const {
  std::vector<SampleResult> results;
  if (states.empty()) return results;
  LLMSERVE_CHECK(logits.size() % states.size() == 0)
      << "logits of size " << logits.size() << " for " << states.size() << " requests";
  const size_t vocab_size = logits.size() / states.size();
  results.reserve(states.size());
  for (size_t i = 0; i < states.size(); ++i) {
    results.push_back(Sample(logits.subspan(i * vocab_size, vocab_size), *states[i]));
  }
  return results;
}

}  // namespace llmserve::worker
