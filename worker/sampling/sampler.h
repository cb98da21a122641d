// Turns a request's next-token logits into a token: logit bias -> penalties -> temperature ->
// min-p / top-k / top-p -> a draw from the softmax of what remains (greedy when temperature is
// ~0), as vLLM does. Speculative verification samples every row through this same function, so
// the bias keeps its outputs exact.
// docs/sampling.md gives the exact semantics, the determinism guarantee and the logprobs.
//
// Determinism: a request's draw at output step s is Philox(seed, s) (random.h), and every other
// input of Sample belongs to the request, so the same seed, logits and history give the same
// token whether the request is sampled alone or in any batch, at any position.
//
// Thread-safe: Sampler has no state (scratch memory is thread-local), so one instance may serve
// any number of threads. Each SamplingState belongs to one thread (see sampling_state.h).

#ifndef LLMSERVE_WORKER_SAMPLING_SAMPLER_H_
#define LLMSERVE_WORKER_SAMPLING_SAMPLER_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "worker/sampling/sampling_state.h"

namespace llmserve::worker {

struct SampleResult {
  int32_t token_id = 0;
  // log-softmax of the raw logits at token_id; 0 unless the request wants logprobs.
  float logprob = 0.0f;
  // The params().top_logprobs most likely tokens under the raw logits as (token_id, logprob),
  // most likely first, ties to the lower id; empty unless asked for.
  std::vector<std::pair<int32_t, float>> top_logprobs;
};

class Sampler {
 public:
  // Samples the next token of the request `state` from its logits ([vocab_size], CHECKed to equal
  // state.vocab_size()). `logits` is scratch: it is left sanitized and penalized. Does not advance
  // `state`: the caller Appends the token it keeps, which also moves the random stream on, so
  // sampling the same step twice gives the same token.
  //
  // NaN logits count as -inf and +inf as the largest float. If every logit is -inf the result is
  // token 0 with logprob -inf: there is nothing to sample, and the backend produced garbage.
  SampleResult Sample(absl::Span<float> logits, const SamplingState& state) const;

  // Sample for each request of a batch: `logits` is [states.size(), vocab_size], row i belonging
  // to states[i] (all of the same vocab_size). Equivalent to calling Sample row by row.
  std::vector<SampleResult> SampleBatch(absl::Span<float> logits,
                                        absl::Span<const SamplingState* const> states) const;
};

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_SAMPLING_SAMPLER_H_
