#include "worker/engine/cpu/kernels.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>
#include <string>

#include "worker/engine/cpu/cpu_features.h"
#include "worker/engine/cpu/simd.h"

namespace llmserve::worker::cpu {

void Norm(NormKind kind, const float* x, const float* weight, const float* bias, float eps,
          int64_t rows, int64_t n, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = x + r * n;
    float* o = out + r * n;
    // Accumulate in double: rows of thousands of values lose digits in float sums.
    if (kind == NormKind::kRmsNorm) {
      double sum_sq = 0;
      for (int64_t i = 0; i < n; ++i) sum_sq += static_cast<double>(in[i]) * in[i];
      const float scale = static_cast<float>(1.0 / std::sqrt(sum_sq / n + eps));
      for (int64_t i = 0; i < n; ++i) o[i] = in[i] * scale * weight[i];
    } else {
      double sum = 0;
      for (int64_t i = 0; i < n; ++i) sum += in[i];
      const double mean = sum / n;
      double var = 0;
      for (int64_t i = 0; i < n; ++i) var += (in[i] - mean) * (in[i] - mean);
      const float scale = static_cast<float>(1.0 / std::sqrt(var / n + eps));
      const float mean_f = static_cast<float>(mean);
      for (int64_t i = 0; i < n; ++i) o[i] = (in[i] - mean_f) * scale * weight[i];
    }
    if (bias != nullptr) {
      for (int64_t i = 0; i < n; ++i) o[i] += bias[i];
    }
  }
}

void AddBias(float* x, const float* bias, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x + r * n;
    for (int64_t i = 0; i < n; ++i) row[i] += bias[i];
  }
}

void Add(float* x, const float* y, int64_t count) {
  for (int64_t i = 0; i < count; ++i) x[i] += y[i];
}

namespace {

inline float ActivateOne(Activation activation, float v) {
  switch (activation) {
    case Activation::kSilu:
      return v / (1.0f + std::exp(-v));
    case Activation::kGeluTanh: {
      // 0.5 v (1 + tanh(y)) as v * sigmoid(2y), as the vectorized form computes it: 1 + tanh(y)
      // cancels to 0 in float for y below about -9.
      constexpr float kSqrt2OverPi = 0.7978845608028654f;
      const float y = kSqrt2OverPi * (v + 0.044715f * v * v * v);
      return v / (1.0f + std::exp(-2.0f * y));
    }
    case Activation::kGeluErf:
      // erfc rather than 1 + erf, which cancels to 0 in the negative tail.
      return 0.5f * v * std::erfc(-v * static_cast<float>(std::numbers::sqrt2 / 2));
  }
  return v;
}

#if defined(__x86_64__)

// sigmoid(v) from e = e^-|v| (never overflows): 1 / (1 + e) for v >= 0, e / (1 + e) below.
LLMSERVE_TARGET_AVX512 inline __m512 Sigmoid(__m512 v) {
  const __m512 e = ExpNonPositive(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(v)));
  const __m512 inv = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(_mm512_set1_ps(1.0f), e));
  const __mmask16 negative = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ);
  return _mm512_mask_mul_ps(inv, negative, inv, e);
}

// GPT-2's tanh-approximated GELU: 0.5 v (1 + tanh(y)) = v * sigmoid(2y).
LLMSERVE_TARGET_AVX512 inline __m512 GeluTanh(__m512 v) {
  const __m512 v3 = _mm512_mul_ps(_mm512_mul_ps(v, v), v);
  const __m512 y = _mm512_mul_ps(_mm512_set1_ps(0.7978845608028654f),
                                 _mm512_fmadd_ps(_mm512_set1_ps(0.044715f), v3, v));
  return _mm512_mul_ps(v, Sigmoid(_mm512_add_ps(y, y)));
}

LLMSERVE_TARGET_AVX512 inline __m512 ActivateAvx512(Activation activation, __m512 v) {
  return activation == Activation::kSilu ? _mm512_mul_ps(v, Sigmoid(v)) : GeluTanh(v);
}

// out[i] = act(x[i]) (* up[i] when `up` is not null), 16 at a time.
LLMSERVE_TARGET_AVX512 void ActivateRowAvx512(Activation activation, const float* x,
                                              const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 lanes =
        n - i >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (n - i)) - 1);
    __m512 value = ActivateAvx512(activation, _mm512_maskz_loadu_ps(lanes, x + i));
    if (up != nullptr) value = _mm512_mul_ps(value, _mm512_maskz_loadu_ps(lanes, up + i));
    _mm512_mask_storeu_ps(out + i, lanes, value);
  }
}

// The same for AVX2, 8 at a time; the tail of fewer than 8 takes the scalar form.
LLMSERVE_TARGET_AVX2 inline __m256 SigmoidAvx2(__m256 v) {
  const __m256 magnitude = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
  const __m256 e = ExpNonPositiveAvx2(_mm256_sub_ps(_mm256_setzero_ps(), magnitude));
  const __m256 inv = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
  const __m256 negative = _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_LT_OQ);
  return _mm256_blendv_ps(inv, _mm256_mul_ps(inv, e), negative);
}

LLMSERVE_TARGET_AVX2 inline __m256 ActivateAvx2(Activation activation, __m256 v) {
  if (activation == Activation::kSilu) return _mm256_mul_ps(v, SigmoidAvx2(v));
  const __m256 v3 = _mm256_mul_ps(_mm256_mul_ps(v, v), v);
  const __m256 y = _mm256_mul_ps(_mm256_set1_ps(0.7978845608028654f),
                                 _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), v3, v));
  return _mm256_mul_ps(v, SigmoidAvx2(_mm256_add_ps(y, y)));
}

LLMSERVE_TARGET_AVX2 void ActivateRowAvx2(Activation activation, const float* x, const float* up,
                                          int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 value = ActivateAvx2(activation, _mm256_loadu_ps(x + i));
    if (up != nullptr) value = _mm256_mul_ps(value, _mm256_loadu_ps(up + i));
    _mm256_storeu_ps(out + i, value);
  }
  for (; i < n; ++i) out[i] = ActivateOne(activation, x[i]) * (up != nullptr ? up[i] : 1.0f);
}

#endif

void ActivateRowBaseline(Activation activation, const float* x, const float* up, int64_t n,
                         float* out) {
  for (int64_t i = 0; i < n; ++i) {
    out[i] = ActivateOne(activation, x[i]) * (up != nullptr ? up[i] : 1.0f);
  }
}

using ActivateRowFn = void (*)(Activation, const float*, const float*, int64_t, float*);

// The row function for `isa` and `activation`, or null where that variant does not run (the erf
// GELU is scalar everywhere).
ActivateRowFn ActivateRowFor(absl::string_view isa, Activation activation) {
  if (isa == "baseline") return ActivateRowBaseline;
  if (activation == Activation::kGeluErf) return nullptr;
#if defined(__x86_64__)
  if (isa == "avx512") return HasAvx512() ? ActivateRowAvx512 : nullptr;
  if (isa == "avx2") return HasAvx2FmaF16c() ? ActivateRowAvx2 : nullptr;
#endif
  return nullptr;
}

// The first of ActivationIsas() that takes `activation`, chosen once per activation.
ActivateRowFn BestActivateRow(Activation activation) {
  static const std::array<ActivateRowFn, 3> best = [] {
    std::array<ActivateRowFn, 3> rows{};
    for (Activation a : {Activation::kGeluTanh, Activation::kGeluErf, Activation::kSilu}) {
      for (const std::string& isa : ActivationIsas()) {
        if ((rows[static_cast<int>(a)] = ActivateRowFor(isa, a)) != nullptr) break;
      }
    }
    return rows;
  }();
  return best[static_cast<int>(activation)];
}

// GatedActivate's rows with `row`.
void GatedRows(ActivateRowFn row, Activation activation, const float* gate_up, int64_t rows,
               int64_t n, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    row(activation, gate_up + r * 2 * n, gate_up + r * 2 * n + n, n, out + r * n);
  }
}

}  // namespace

std::vector<std::string> ActivationIsas() {
  std::vector<std::string> isas = VectorIsas();
  isas.push_back("baseline");
  return isas;
}

void Activate(Activation activation, float* x, int64_t count) {
  BestActivateRow(activation)(activation, x, nullptr, count, x);
}

void GatedActivate(Activation activation, const float* gate_up, int64_t rows, int64_t n,
                   float* out) {
  GatedRows(BestActivateRow(activation), activation, gate_up, rows, n, out);
}

bool ActivateWithIsa(absl::string_view isa, Activation activation, float* x, int64_t count) {
  const ActivateRowFn row = ActivateRowFor(isa, activation);
  if (row == nullptr) return false;
  row(activation, x, nullptr, count, x);
  return true;
}

bool GatedActivateWithIsa(absl::string_view isa, Activation activation, const float* gate_up,
                          int64_t rows, int64_t n, float* out) {
  const ActivateRowFn row = ActivateRowFor(isa, activation);
  if (row == nullptr) return false;
  GatedRows(row, activation, gate_up, rows, n, out);
  return true;
}

void ApplyRope(const std::vector<double>& inv_freq, int64_t position, int64_t num_heads,
               int64_t head_dim, float* x) {
  const int64_t half = head_dim / 2;
  float cos_values[512], sin_values[512];  // head_dim <= 1024 (ModelConfig's limit)
  for (int64_t i = 0; i < half; ++i) {
    const double angle = static_cast<double>(position) * inv_freq[i];
    cos_values[i] = static_cast<float>(std::cos(angle));
    sin_values[i] = static_cast<float>(std::sin(angle));
  }
  for (int64_t h = 0; h < num_heads; ++h) {
    float* head = x + h * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      const float a = head[i], b = head[i + half];
      head[i] = a * cos_values[i] - b * sin_values[i];
      head[i + half] = b * cos_values[i] + a * sin_values[i];
    }
  }
}

void Softmax(float* x, int64_t n) {
  const float max = *std::max_element(x, x + n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace llmserve::worker::cpu
