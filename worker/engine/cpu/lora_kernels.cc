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

void LoraAxpyPortable(float alpha, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
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

LLMSERVE_TARGET_AVX2 void LoraAxpyAvx2(float alpha, const float* x, float* y, int64_t n) {
  const __m256 a = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(a, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] += alpha * x[i];
}
#endif

struct LoraOps {
  float (*dot)(const float*, const float*, int64_t);
  void (*axpy)(float, const float*, float*, int64_t);
};

LoraOps ChooseLoraOps() {
#if defined(__x86_64__)
  if (HasAvx2FmaF16c()) return {LoraDotAvx2, LoraAxpyAvx2};
#endif
  return {LoraDotPortable, LoraAxpyPortable};
}

const LoraOps& Ops() {
  static const LoraOps ops = ChooseLoraOps();
  return ops;
}

}  // namespace

void LoraShrink(const LoraModule& module, int64_t rank, int64_t r_begin, int64_t r_end,
                const float* const* xs, int64_t num_tokens, float* s) {
  const LoraOps& ops = Ops();
  for (int64_t r = r_begin; r < r_end; ++r) {
    const float* a = module.a.data() + r * module.in;
    for (int64_t t = 0; t < num_tokens; ++t) s[t * rank + r] = ops.dot(a, xs[t], module.in);
  }
}

void LoraExpand(const LoraModule& module, int64_t rank, const float* s, int64_t num_tokens,
                float* const* ys, int64_t c_begin, int64_t c_end) {
  const LoraOps& ops = Ops();
  for (int64_t r = 0; r < rank; ++r) {
    const float* b_row = module.b_t.data() + r * module.out + c_begin;
    for (int64_t t = 0; t < num_tokens; ++t) {
      ops.axpy(s[t * rank + r], b_row, ys[t] + module.row_offset + c_begin, c_end - c_begin);
    }
  }
}

}  // namespace llmserve::worker::cpu
