#include "worker/sampling/candidate_filters.h"

#include <algorithm>
#include <array>
#include <bit>
#include <limits>

#include "common/base/logging.h"
#include "worker/sampling/vector_ops.h"

namespace llmserve::worker {
namespace {

// Up to this k, top-k keeps a heap of the k best seen so far: most tokens are rejected by one
// comparison with the heap's worst. Beyond it, nth_element over all tokens is cheaper.
constexpr int64_t kMaxHeapTopK = 256;

// Below this many candidates, top-p's selection sorts instead of partitioning further.
constexpr size_t kTopPSortBelow = 32;

// The weight bounds CollectHeaviest tries in turn: a peaked distribution's nucleus is usually
// above the first, and each further one costs one more (SIMD) pass over the weights. Steps of
// 2^4 keep the collected superset within a small factor of the nucleus.
constexpr float kHeaviestBands[] = {0x1p-4f, 0x1p-8f, 0x1p-12f, 0x1p-16f, 0x1p-24f, 0x1p-40f, 0.0f};

// RanksBefore as a function object, so that the standard algorithms inline it instead of
// calling through a function pointer.
constexpr auto kRankOrder = [](const TokenCandidate& a, const TokenCandidate& b) {
  return RanksBefore(a, b);
};

void SelectTopKWithHeap(absl::Span<const float> logits, size_t k, CandidateList* out) {
  // A max-heap under RanksBefore: front() is the worst of the k kept so far.
  for (size_t i = 0; i < k; ++i) {
    out->push_back({logits[i], static_cast<int32_t>(i), 0.0f});
    std::push_heap(out->begin(), out->end(), kRankOrder);
  }
  // Ids rise as we scan, so only a strictly higher logit ranks before the worst kept.
  for (size_t i = FindFirstAbove(logits, k, out->front().logit); i < logits.size();
       i = FindFirstAbove(logits, i + 1, out->front().logit)) {
    std::pop_heap(out->begin(), out->end(), kRankOrder);
    out->back() = {logits[i], static_cast<int32_t>(i), 0.0f};
    std::push_heap(out->begin(), out->end(), kRankOrder);
  }
}

// The binary exponent field of a weight in (0, 1]: 0 (subnormal) to 127 (1.0).
int WeightExponent(float weight) { return static_cast<int>(std::bit_cast<uint32_t>(weight) >> 23); }

// The length of the shortest rank-order prefix of `candidates` whose weight sum reaches
// `target`, reordering them so that this prefix comes first. Quickselect on mass: each
// nth_element halves the range, so the cost is expected O(size).
size_t MassPrefix(absl::Span<TokenCandidate> candidates, double target) {
  size_t begin = 0;
  size_t end = candidates.size();
  double before = 0.0;
  while (end - begin > kTopPSortBelow) {
    const size_t mid = begin + (end - begin) / 2;
    std::nth_element(candidates.begin() + begin, candidates.begin() + mid, candidates.begin() + end,
                     kRankOrder);
    double upper = 0.0;
    for (size_t i = begin; i < mid; ++i) upper += candidates[i].weight;
    if (before + upper >= target) {
      end = mid;
    } else {
      before += upper;
      begin = mid;
    }
  }
  std::sort(candidates.begin() + begin, candidates.begin() + end, kRankOrder);
  for (size_t i = begin; i < end; ++i) {
    before += candidates[i].weight;
    if (before >= target) return i + 1;
  }
  return end;
}

}  // namespace

void SelectTopK(absl::Span<const float> logits, int64_t k, bool sorted, CandidateList* out) {
  out->clear();
  const size_t count = static_cast<size_t>(std::clamp<int64_t>(k, 0, logits.size()));
  if (count == 0) return;
  if (static_cast<int64_t>(count) <= kMaxHeapTopK) {
    out->reserve(count);
    SelectTopKWithHeap(logits, count, out);
    if (sorted) std::sort_heap(out->begin(), out->end(), kRankOrder);
    return;
  }
  out->resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) (*out)[i] = {logits[i], static_cast<int32_t>(i), 0.0f};
  if (count < out->size()) {
    std::nth_element(out->begin(), out->begin() + count - 1, out->end(), kRankOrder);
    out->resize(count);
  }
  if (sorted) std::sort(out->begin(), out->end(), kRankOrder);
}

double WeighAndFilter(float max_logit, float temperature, float min_p, CandidateList* candidates) {
  const float inverse_temperature = 1.0f / temperature;
  double total = 0.0;
  size_t kept = 0;
  for (const TokenCandidate& candidate : *candidates) {
    const float weight = ExpNonPositive((candidate.logit - max_logit) * inverse_temperature);
    if (weight > 0.0f && weight >= min_p) {
      (*candidates)[kept++] = {candidate.logit, candidate.token_id, weight};
      total += weight;
    }
  }
  candidates->resize(kept);
  return total;
}

double TopPTarget(float top_p, double total_weight) {
  return (static_cast<double>(top_p) - kTopPSlack) * total_weight;
}

void CollectHeaviest(absl::Span<const float> logits, absl::Span<const float> weights, double target,
                     CandidateList* out) {
  LLMSERVE_CHECK(logits.size() == weights.size());
  out->clear();
  for (const float lower : kHeaviestBands) {
    // Measuring a band is a pure SIMD pass, collecting one is not: measure until the mass at or
    // above a bound reaches the target, then collect down to that bound. (The last bound, 0,
    // takes every token with weight, whatever the measure says.)
    if (lower > 0.0f && WeightMassAtLeast(weights, lower) < target) continue;
    AppendWeightsAtLeast(logits, weights, lower, out);
    return;
  }
}

void ApplyTopP(float top_p, double total_weight, CandidateList* candidates) {
  if (top_p >= 1.0f || candidates->empty()) return;
  const double target = TopPTarget(top_p, total_weight);
  // Weights are monotone in rank, so whole exponent buckets are ranked against each other: the
  // buckets above the one where the running mass reaches the target are kept whole, and only
  // that boundary bucket needs a selection.
  std::array<double, 128> bucket_weight{};
  for (const TokenCandidate& candidate : *candidates) {
    bucket_weight[WeightExponent(candidate.weight)] += candidate.weight;
  }
  int boundary = 127;
  double above = 0.0;
  for (; boundary > 0; --boundary) {
    if (above + bucket_weight[boundary] >= target) break;
    above += bucket_weight[boundary];
  }
  const auto above_end = std::partition(
      candidates->begin(), candidates->end(),
      [boundary](const TokenCandidate& c) { return WeightExponent(c.weight) > boundary; });
  const auto boundary_end = std::partition(
      above_end, candidates->end(),
      [boundary](const TokenCandidate& c) { return WeightExponent(c.weight) == boundary; });
  const size_t prefix =
      MassPrefix(absl::MakeSpan(candidates->data() + (above_end - candidates->begin()),
                                static_cast<size_t>(boundary_end - above_end)),
                 target - above);
  // At least the best candidate: with a target <= 0 the prefix of the top bucket is one token.
  candidates->erase(above_end + prefix, candidates->end());
}

int32_t DrawCandidate(absl::Span<const TokenCandidate> candidates, double uniform) {
  LLMSERVE_CHECK(!candidates.empty());
  double total = 0.0;
  for (const TokenCandidate& candidate : candidates) total += candidate.weight;
  const double point = uniform * total;
  double running = 0.0;
  for (const TokenCandidate& candidate : candidates) {
    running += candidate.weight;
    if (running > point) return candidate.token_id;
  }
  // Only reachable through rounding, with uniform just below 1.
  return candidates.back().token_id;
}

}  // namespace llmserve::worker
