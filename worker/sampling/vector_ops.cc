#include "worker/sampling/vector_ops.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "common/base/logging.h"

namespace llmserve::worker {
namespace {

// Four lanes: SSE2 and NEON, the baselines of x86-64 and arm64, so no -m flags are needed.
typedef float Floats __attribute__((vector_size(16)));
typedef int32_t Ints __attribute__((vector_size(16)));
constexpr size_t kLanes = 4;

// Sums of this many weights are kept in float lanes before joining the double total: short
// enough that float rounding stays near 1e-7 relative, long enough to keep the loop vectorized.
constexpr size_t kBlock = 1024;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kMaxFinite = std::numeric_limits<float>::max();
// Below this exp leaves float's normal range.
constexpr float kExpFloor = -87.0f;

Floats Splat(float value) { return Floats{} + value; }

Floats Load(const float* p) {
  Floats v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

void Store(float* p, Floats v) { std::memcpy(p, &v, sizeof v); }

// The last `count` (< kLanes) values, padded with `fill`.
Floats LoadTail(const float* p, size_t count, float fill) {
  float lanes[kLanes] = {fill, fill, fill, fill};
  std::memcpy(lanes, p, count * sizeof(float));
  return Load(lanes);
}

void StoreTail(float* p, Floats v, size_t count) { std::memcpy(p, &v, count * sizeof(float)); }

// mask ? a : b per lane, with a mask from a vector comparison (all ones or all zeros). Bitwise,
// as both GCC and Clang accept it for vector_size types.
Floats Select(Ints mask, Floats a, Floats b) {
  return reinterpret_cast<Floats>((reinterpret_cast<Ints>(a) & mask) |
                                  (reinterpret_cast<Ints>(b) & ~mask));
}

float SumLanes(Floats v) { return (v[0] + v[1]) + (v[2] + v[3]); }

// Cephes expf: x = n ln2 + r with |r| <= ln2 / 2, exp(r) by a degree-7 polynomial, 2^n by
// building the exponent bits. ln2 is split in two so that n * ln2 is exact enough.
// Always inlined: as a call per four lanes it cost a third of the pass.
[[gnu::always_inline]] inline Floats ExpVector(Floats x) {
  const Ints in_range = x > kExpFloor;
  const Floats clamped = Select(in_range, x, Splat(kExpFloor));
  // Round to nearest by adding and removing 1.5 * 2^23.
  const Floats n = (clamped * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  Floats r = clamped - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  Floats p = Splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const Ints exponent = (__builtin_convertvector(n, Ints) + 127) << 23;
  return Select(in_range, p * reinterpret_cast<Floats>(exponent), Floats{});
}

Floats SanitizeVector(Floats v) {
  const Floats no_nan = Select(v == v, v, Splat(-kInf));
  return Select(no_nan == kInf, Splat(kMaxFinite), no_nan);
}

Floats WeightVector(Floats logits, float max_logit, float inverse_temperature, float min_weight) {
  const Floats weights = ExpVector((logits - max_logit) * inverse_temperature);
  return Select(weights >= min_weight, weights, Floats{});
}

}  // namespace

void SanitizeLogits(absl::Span<float> logits) {
  size_t i = 0;
  for (; i + kLanes <= logits.size(); i += kLanes) {
    Store(&logits[i], SanitizeVector(Load(&logits[i])));
  }
  const size_t tail = logits.size() - i;
  if (tail > 0) StoreTail(&logits[i], SanitizeVector(LoadTail(&logits[i], tail, 0.0f)), tail);
}

float MaxLogit(absl::Span<const float> logits) {
  LLMSERVE_CHECK(!logits.empty());
  // Two accumulators break the dependency chain of one.
  Floats best0 = Splat(-kInf);
  Floats best1 = Splat(-kInf);
  size_t i = 0;
  for (; i + 2 * kLanes <= logits.size(); i += 2 * kLanes) {
    const Floats a = Load(&logits[i]);
    const Floats b = Load(&logits[i + kLanes]);
    best0 = Select(a > best0, a, best0);
    best1 = Select(b > best1, b, best1);
  }
  best0 = Select(best1 > best0, best1, best0);
  float best = std::max(std::max(best0[0], best0[1]), std::max(best0[2], best0[3]));
  for (; i < logits.size(); ++i) best = std::max(best, logits[i]);
  return best;
}

int32_t Argmax(absl::Span<const float> logits) {
  const float best = MaxLogit(logits);
  const auto it = std::find(logits.begin(), logits.end(), best);
  return static_cast<int32_t>(it - logits.begin());  // -inf == -inf, so found even then
}

size_t FindFirstAbove(absl::Span<const float> values, size_t begin, float threshold) {
  const size_t size = values.size();
  size_t i = begin;
  for (; i + kLanes <= size; i += kLanes) {
    const Ints above = Load(&values[i]) > threshold;
    if ((above[0] | above[1] | above[2] | above[3]) != 0) break;
  }
  for (; i < size; ++i) {
    if (values[i] > threshold) return i;
  }
  return size;
}

float ExpNonPositive(float x) { return ExpVector(Splat(x))[0]; }

double ExpWeights(absl::Span<const float> logits, float max_logit, float inverse_temperature,
                  float min_weight, absl::Span<float> weights) {
  LLMSERVE_CHECK(weights.size() == logits.size());
  const size_t size = logits.size();
  const size_t vector_end = size - size % kLanes;
  double total = 0.0;
  for (size_t block = 0; block < vector_end; block += kBlock) {
    const size_t block_end = std::min(vector_end, block + kBlock);
    Floats sum = Floats{};
    for (size_t i = block; i < block_end; i += kLanes) {
      const Floats w = WeightVector(Load(&logits[i]), max_logit, inverse_temperature, min_weight);
      Store(&weights[i], w);
      sum += w;
    }
    total += SumLanes(sum);
  }
  if (const size_t tail = size - vector_end; tail > 0) {
    // -inf padding weighs 0.
    const Floats w = WeightVector(LoadTail(&logits[vector_end], tail, -kInf), max_logit,
                                  inverse_temperature, min_weight);
    StoreTail(&weights[vector_end], w, tail);
    total += SumLanes(w);
  }
  return total;
}

int32_t DrawFromWeights(absl::Span<const float> weights, double total, double uniform) {
  const double point = uniform * total;
  const size_t size = weights.size();
  const size_t vector_end = size - size % kLanes;
  double running = 0.0;
  size_t begin = vector_end;  // where the sequential scan starts: the crossing block, or the tail
  for (size_t block = 0; block < vector_end; block += kBlock) {
    const size_t block_end = std::min(vector_end, block + kBlock);
    Floats sum = Floats{};
    for (size_t i = block; i < block_end; i += kLanes) sum += Load(&weights[i]);
    const double block_total = SumLanes(sum);
    if (running + block_total > point) {
      begin = block;
      break;
    }
    running += block_total;
  }
  int32_t last_positive = -1;
  for (size_t i = begin; i < size; ++i) {
    if (weights[i] <= 0.0f) continue;
    running += weights[i];
    last_positive = static_cast<int32_t>(i);
    if (running > point) return last_positive;
  }
  // Summing one by one may round below the block sum that crossed the point; the last token with
  // weight is then the nearest answer (a bias of ~1e-7 in probability).
  if (last_positive >= 0) return last_positive;
  for (size_t i = size; i-- > 0;) {
    if (weights[i] > 0.0f) return static_cast<int32_t>(i);
  }
  LLMSERVE_CHECK(false) << "no token has weight";
  return 0;
}

double WeightMassAtLeast(absl::Span<const float> weights, float lower) {
  const size_t size = weights.size();
  const size_t vector_end = size - size % kLanes;
  double total = 0.0;
  for (size_t block = 0; block < vector_end; block += kBlock) {
    const size_t block_end = std::min(vector_end, block + kBlock);
    Floats sum = Floats{};
    for (size_t i = block; i < block_end; i += kLanes) {
      const Floats w = Load(&weights[i]);
      sum += Select(w >= lower, w, Floats{});
    }
    total += SumLanes(sum);
  }
  for (size_t i = vector_end; i < size; ++i) total += weights[i] >= lower ? weights[i] : 0.0f;
  return total;
}

void AppendWeightsAtLeast(absl::Span<const float> logits, absl::Span<const float> weights,
                          float lower, CandidateList* out) {
  LLMSERVE_CHECK(weights.size() == logits.size());
  const size_t size = weights.size();
  size_t kept = out->size();
  // Room for every token (uninitialized, see CandidateList), cut to what was kept at the end.
  out->resize(kept + size);
  TokenCandidate* const list = out->data();
  // One comparison, so that nothing branches: positive is >= the smallest subnormal.
  const float bound = std::max(lower, std::numeric_limits<float>::denorm_min());
  const auto append = [&](size_t i) {
    const float weight = weights[i];
    list[kept] = {logits[i], static_cast<int32_t>(i), weight};
    kept += static_cast<size_t>(weight >= bound);
  };
  size_t i = 0;
  for (; i + kLanes <= size; i += kLanes) {
    const Floats w = Load(&weights[i]);
    const Ints keep = w >= bound;
    if ((keep[0] | keep[1] | keep[2] | keep[3]) == 0) continue;
    for (size_t lane = 0; lane < kLanes; ++lane) append(i + lane);
  }
  for (; i < size; ++i) append(i);
  out->resize(kept);
}

double SumExp(absl::Span<const float> logits, float max_logit) {
  const size_t size = logits.size();
  const size_t vector_end = size - size % kLanes;
  double total = 0.0;
  for (size_t block = 0; block < vector_end; block += kBlock) {
    const size_t block_end = std::min(vector_end, block + kBlock);
    Floats sum = Floats{};
    for (size_t i = block; i < block_end; i += kLanes)
      sum += ExpVector(Load(&logits[i]) - max_logit);
    total += SumLanes(sum);
  }
  if (const size_t tail = size - vector_end; tail > 0) {
    total += SumLanes(ExpVector(LoadTail(&logits[vector_end], tail, -kInf) - max_logit));
  }
  return total;
}

}  // namespace llmserve::worker
