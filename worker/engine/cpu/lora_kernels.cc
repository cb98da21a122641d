#include "worker/engine/cpu/lora_kernels.h"

#include "worker/engine/cpu/cpu_features.h"
#include "worker/engine/cpu/simd.h"

namespace llmserve::worker::cpu {
namespace {

// Eight partial sums: the same order of additions whatever the ISA variant below does per lane.
float LoraDotPortable(const float* a, const float* b, int64_t n) {
  float partial[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) partial[j] += a[i + j] * b[i + j];
  }
  float sum = 0;
  for (int j = 0; j < 8; ++j) sum += partial[j];
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

#if defined(__x86_64__)
LLMSERVE_TARGET_AVX2 float LoraDotAvx2(const float* a, const float* b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  }
  __m128 half = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  half = _mm_add_ps(half, _mm_movehl_ps(half, half));
  half = _mm_add_ss(half, _mm_movehdup_ps(half));
  float sum = _mm_cvtss_f32(half);
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}
#endif

using LoraDotFn = float (*)(const float*, const float*, int64_t);

LoraDotFn ChooseLoraDot() {
#if defined(__x86_64__)
  if (HasAvx2FmaF16c()) return LoraDotAvx2;
#endif
  return LoraDotPortable;
}

}  // namespace

void AddLoraDelta(const LoraModule& module, int64_t rank, const float* x, float* y,
                  float* scratch) {
  static const LoraDotFn dot = ChooseLoraDot();
  for (int64_t r = 0; r < rank; ++r)
    scratch[r] = dot(module.a.data() + r * module.in, x, module.in);
  float* out = y + module.row_offset;
  for (int64_t o = 0; o < module.out; ++o) out[o] += dot(module.b.data() + o * rank, scratch, rank);
}

}  // namespace llmserve::worker::cpu
