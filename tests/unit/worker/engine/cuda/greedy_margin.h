// When a 16-bit backend must pick the CPU backend's greedy token: the rule of the CUDA backend's
// greedy tests (docs/cuda.md, "Numerics and tolerance"), shared by the backend test and the
// worker-through-gateway test on the emulator. No CUDA dependency.

#ifndef LLMSERVE_TESTS_UNIT_CUDA_GREEDY_MARGIN_H_
#define LLMSERVE_TESTS_UNIT_CUDA_GREEDY_MARGIN_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

namespace llmserve::worker::cuda::testing {

// The CPU's best two logits must be further apart than this fraction of the row's range (max -
// min) for the token to be decided: bf16 cannot order logits closer than its error, so after a
// near tie the two backends may legitimately diverge and a test stops comparing.
inline constexpr float kGreedyMargin = 0.02f;

// True when the CPU's logits row `row` (n >= 2 entries) decides the greedy token: its best logit
// leads the second by at least kGreedyMargin of the row's range.
inline bool GreedyTokenIsDecided(const float* row, int64_t n) {
  std::vector<float> sorted(row, row + n);
  std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
  const float range = sorted[0] - *std::min_element(row, row + n);
  return sorted[0] - sorted[1] >= kGreedyMargin * range;
}

}  // namespace llmserve::worker::cuda::testing

#endif  // LLMSERVE_TESTS_UNIT_CUDA_GREEDY_MARGIN_H_
