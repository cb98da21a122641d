// The passes over a whole row of logits ([vocab_size] floats) that dominate sampling time,
// written with GCC/Clang vector extensions: the default -O2 build neither vectorizes float
// compares (-ftrapping-math) nor calls a vector expf, and a scalar expf over a 128k vocabulary
// costs ~0.4 ms here, most of a sampling step.
//
// Thread-safe: pure functions over caller-owned memory.

#ifndef LLMSERVE_WORKER_SAMPLING_VECTOR_OPS_H_
#define LLMSERVE_WORKER_SAMPLING_VECTOR_OPS_H_

#include <cstddef>
#include <cstdint>

#include "absl/types/span.h"
#include "worker/sampling/token_candidate.h"

namespace llmserve::worker {

// Replaces NaN with -inf (a token the model could not score is never chosen) and +inf with the
// largest finite float (so that tokens at +inf share the probability mass instead of turning the
// softmax into inf - inf = NaN). Finite values are untouched.
void SanitizeLogits(absl::Span<float> logits);

// The largest value (-inf when all are). `logits` must be sanitized and non-empty.
float MaxLogit(absl::Span<const float> logits);

// The index of the largest logit, the lowest index among equals; 0 when all are -inf.
// `logits` must be sanitized and non-empty.
int32_t Argmax(absl::Span<const float> logits);

// The first index >= begin whose value is > threshold; values.size() if none. Screens four
// values per comparison, for selections that reject almost everything (top-k, top logprobs).
size_t FindFirstAbove(absl::Span<const float> values, size_t begin, float threshold);

// exp(x) for x <= 0 within 1e-7 relative error (Cephes' expf polynomial); 0 below -87, where
// expf leaves float's normal range (a weight 1e-38 of the best token's is no probability at
// all). Exposed for tests; the passes below use its vector form.
float ExpNonPositive(float x);

// weights[i] = exp((logits[i] - max_logit) * inverse_temperature), set to 0 where below
// `min_weight`; returns their sum. `logits` sanitized with maximum max_logit;
// weights.size() == logits.size().
double ExpWeights(absl::Span<const float> logits, float max_logit, float inverse_temperature,
                  float min_weight, absl::Span<float> weights);

// Inverse-CDF draw from dense weights: the first index at which the running sum exceeds
// uniform * total, where `total` is what ExpWeights returned for these weights (the sums are
// formed in the same blocks, so they agree to the bit). `uniform` in [0, 1); total > 0.
int32_t DrawFromWeights(absl::Span<const float> weights, double total, double uniform);

// The sum of the weights >= lower: a pure SIMD pass, to find which band to collect before
// collecting it.
double WeightMassAtLeast(absl::Span<const float> weights, float lower);

// Appends to `out` every token whose weight w is positive and >= lower, as (logit, id, w), in id
// order. Groups of four weights with none of them kept are skipped by one comparison (most
// groups, for a high bound over a peaked distribution); the others are appended without
// branches (over a flat distribution a third of the tokens are kept, at random).
// weights.size() == logits.size().
void AppendWeightsAtLeast(absl::Span<const float> logits, absl::Span<const float> weights,
                          float lower, CandidateList* out);

// sum(exp(logits[i] - max_logit)), the softmax denominator. `logits` sanitized, max_logit
// their (finite) maximum.
double SumExp(absl::Span<const float> logits, float max_logit);

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_SAMPLING_VECTOR_OPS_H_
