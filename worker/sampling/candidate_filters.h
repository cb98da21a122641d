// The filters that decide which tokens may be sampled, over a list of candidates rather than the
// whole vocabulary: temperature (as softmax weights), min-p, top-k and top-p.
//
// Tokens are ranked by logit, highest first, ties to the lower token id: a strict total order, so
// "the k best" and "the smallest prefix reaching p" are always one well-defined set. None of the
// filters sorts the vocabulary: top-k selects with a bounded heap (or nth_element for large k);
// top-p first collects only the heaviest tokens (CollectHeaviest), then buckets them by binary
// exponent and selects only inside the bucket where the mass is reached.
//
// Thread-safe: pure functions over caller-owned memory.

#ifndef LLMSERVE_WORKER_SAMPLING_CANDIDATE_FILTERS_H_
#define LLMSERVE_WORKER_SAMPLING_CANDIDATE_FILTERS_H_

#include <cstdint>

#include "absl/types/span.h"
#include "worker/sampling/token_candidate.h"

namespace llmserve::worker {

// Replaces `out` with the min(k, size) best tokens of `logits` (sanitized), best first when
// `sorted`, in an unspecified (deterministic) order otherwise. Weights are left 0.
void SelectTopK(absl::Span<const float> logits, int64_t k, bool sorted, CandidateList* out);

// Weighs a candidate list (e.g. the top k) at `temperature` (> 0) against max_logit, the
// maximum of all logits, and drops those below `min_p` (min-p: p >= min_p * p_max is
// weight >= min_p, as the best token's weight is 1) or of weight 0. Returns the sum of weights.
double WeighAndFilter(float max_logit, float temperature, float min_p, CandidateList* candidates);

// A prefix whose mass falls short of top_p by less than this counts as reaching it, so that
// rounding in float weights does not add a token to a distribution whose head sums to exactly p.
inline constexpr double kTopPSlack = 1e-6;

// The mass the top-p nucleus must reach: (top_p - kTopPSlack) * total_weight.
double TopPTarget(float top_p, double total_weight);

// Replaces `out` with, from dense weights over the vocabulary (vector_ops.h ExpWeights), the
// tokens with positive weight >= w, for the largest w in {2^-4, 2^-8, 2^-12, 2^-16, 2^-24, 2^-40,
// 0} at which their mass reaches `target`:
// a superset of the top-p nucleus (weights are monotone in rank, so no token left out ranks
// before one taken), small when the distribution is peaked, and found without exp or sort.
void CollectHeaviest(absl::Span<const float> logits, absl::Span<const float> weights, double target,
                     CandidateList* out);

// Top-p (nucleus): keeps the smallest prefix of the candidates, in rank order, whose weight sum
// reaches TopPTarget(top_p, total_weight), total_weight being the mass of the whole distribution
// (which the candidates may be a superset of the nucleus of); always at least the best
// candidate. top_p >= 1 keeps everything. Reorders `candidates` and erases the rest.
// Expected O(size).
void ApplyTopP(float top_p, double total_weight, CandidateList* candidates);

// Inverse-CDF draw: the first candidate, in list order, at which the running weight sum exceeds
// uniform * (sum of weights). `uniform` in [0, 1); `candidates` non-empty with positive weights.
int32_t DrawCandidate(absl::Span<const TokenCandidate> candidates, double uniform);

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_SAMPLING_CANDIDATE_FILTERS_H_
