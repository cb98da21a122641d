#include "worker/engine/cpu/small_batch_gemv.h"

#include <cstring>
#include <string>
#include <vector>

#include "worker/engine/cpu/cpu_features.h"
#include "worker/engine/cpu/simd.h"
#include "worker/model/dtype.h"

namespace llmserve::worker::cpu {
namespace {

using Kernel = void (*)(const float* x, int64_t k, const void* w, int64_t rows, float* out,
                        int64_t ldc);

struct KernelTable {
  // Indexed by m - 1.
  Kernel bf16[kSmallBatchGemvMaxRows] = {};
};

#if defined(__x86_64__)

// ---- AVX-512: 16 weights per vector, masked loads for the tail of a row.

// 16 weights from element c of row w, widened to f32; lanes outside `mask` are zero.
template <DType kType>
LLMSERVE_TARGET_AVX512 inline __m512 Load16(const void* w, int64_t c, __mmask16 mask) {
  static_assert(kType == DType::kBF16);
  const __m256i halves = _mm256_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(w) + c);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(halves), 16));
}

// M activation rows against one weight row. The row is read front to back as one stream: reading
// several rows side by side defeats the hardware prefetcher and costs a third of the bandwidth.
// Two accumulators per activation row hide the FMA latency.
template <DType kType, int M>
LLMSERVE_TARGET_AVX512 inline void RowAvx512(const float* x, int64_t k, const void* w, float* out,
                                             int64_t ldc) {
  constexpr __mmask16 kAll = 0xffff;
  __m512 acc0[M], acc1[M];
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) acc0[i] = acc1[i] = _mm512_setzero_ps();
  int64_t c = 0;
  for (; c + 32 <= k; c += 32) {
    // Rows lie one after the other: past this one, the next.
    PrefetchStream<32 * 2>(static_cast<const uint16_t*>(w) + c);
    const __m512 w0 = Load16<kType>(w, c, kAll);
    const __m512 w1 = Load16<kType>(w, c + 16, kAll);
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) {
      acc0[i] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + i * k + c), acc0[i]);
      acc1[i] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + i * k + c + 16), acc1[i]);
    }
  }
  for (; c < k; c += 16) {
    const __mmask16 mask = k - c >= 16 ? kAll : static_cast<__mmask16>((1u << (k - c)) - 1);
    const __m512 wv = Load16<kType>(w, c, mask);
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) {
      acc0[i] = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(mask, x + i * k + c), acc0[i]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) out[i * ldc] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[i], acc1[i]));
}

template <DType kType, int M>
LLMSERVE_TARGET_AVX512 void GemvAvx512(const float* x, int64_t k, const void* w, int64_t rows,
                                       float* out, int64_t ldc) {
  const auto* bytes = static_cast<const unsigned char*>(w);
  const int64_t row_bytes = k * static_cast<int64_t>(DTypeSize(kType));
  for (int64_t r = 0; r < rows; ++r) RowAvx512<kType, M>(x, k, bytes + r * row_bytes, out + r, ldc);
}

// ---- AVX2: 8 weights per vector and a scalar tail.

template <DType kType>
LLMSERVE_TARGET_AVX2 inline __m256 Load8(const void* w, int64_t c) {
  static_assert(kType == DType::kBF16);
  const __m128i halves =
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + c));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(halves), 16));
}

template <DType kType>
LLMSERVE_TARGET_AVX2 inline float LoadOne(const void* w, int64_t c) {
  static_assert(kType == DType::kBF16);
  const uint32_t bits = static_cast<uint32_t>(static_cast<const uint16_t*>(w)[c]) << 16;
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

LLMSERVE_TARGET_AVX2 inline float HorizontalSum(__m256 v) {
  const __m128 sum4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 sum2 = _mm_add_ps(sum4, _mm_movehl_ps(sum4, sum4));
  return _mm_cvtss_f32(_mm_add_ss(sum2, _mm_movehdup_ps(sum2)));
}

// As RowAvx512: one weight row streamed front to back, two accumulators per activation row.
template <DType kType, int M>
LLMSERVE_TARGET_AVX2 inline void RowAvx2(const float* x, int64_t k, const void* w, float* out,
                                         int64_t ldc) {
  __m256 acc0[M], acc1[M];
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) acc0[i] = acc1[i] = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 16 <= k; c += 16) {
    if (c % 32 == 0) PrefetchStream<64>(static_cast<const uint16_t*>(w) + c);
    const __m256 w0 = Load8<kType>(w, c);
    const __m256 w1 = Load8<kType>(w, c + 8);
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) {
      acc0[i] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + i * k + c), acc0[i]);
      acc1[i] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + i * k + c + 8), acc1[i]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) {
    float sum = HorizontalSum(_mm256_add_ps(acc0[i], acc1[i]));
    for (int64_t t = c; t < k; ++t) sum += LoadOne<kType>(w, t) * x[i * k + t];
    out[i * ldc] = sum;
  }
}

template <DType kType, int M>
LLMSERVE_TARGET_AVX2 void GemvAvx2(const float* x, int64_t k, const void* w, int64_t rows,
                                   float* out, int64_t ldc) {
  const auto* bytes = static_cast<const unsigned char*>(w);
  const int64_t row_bytes = k * static_cast<int64_t>(DTypeSize(kType));
  for (int64_t r = 0; r < rows; ++r) RowAvx2<kType, M>(x, k, bytes + r * row_bytes, out + r, ldc);
}

#define LLMSERVE_FILL_TABLE(table, Gemv)                                              \
  do {                                                                                \
    (table).bf16[0] = Gemv<DType::kBF16, 1>, (table).bf16[1] = Gemv<DType::kBF16, 2>; \
    (table).bf16[2] = Gemv<DType::kBF16, 3>, (table).bf16[3] = Gemv<DType::kBF16, 4>; \
  } while (false)

KernelTable Avx512Kernels() {
  KernelTable table;
  LLMSERVE_FILL_TABLE(table, GemvAvx512);
  return table;
}

KernelTable Avx2Kernels() {
  KernelTable table;
  LLMSERVE_FILL_TABLE(table, GemvAvx2);
  return table;
}

KernelTable KernelsFor(absl::string_view isa) {
  if (isa == "avx512" && HasAvx512()) return Avx512Kernels();
  if (isa == "avx2" && HasAvx2FmaF16c()) return Avx2Kernels();
  return {};
}

#else

KernelTable KernelsFor(absl::string_view) { return {}; }

#endif

const KernelTable& Kernels() {
  static const KernelTable table = [] {
    const std::vector<std::string> isas = VectorIsas();
    return isas.empty() ? KernelTable{} : KernelsFor(isas.front());
  }();
  return table;
}

void Run(const KernelTable& table, const float* x, int64_t m, int64_t k, const uint16_t* w,
         int64_t rows, float* out, int64_t ldc) {
  table.bf16[m - 1](x, k, w, rows, out, ldc);
}

}  // namespace

bool SmallBatchGemvAvailable() { return Kernels().bf16[0] != nullptr; }

void SmallBatchGemv(const float* x, int64_t m, int64_t k, const uint16_t* w, int64_t rows,
                    float* out, int64_t ldc) {
  Run(Kernels(), x, m, k, w, rows, out, ldc);
}

std::vector<std::string> SmallBatchGemvIsas() { return VectorIsas(); }

void SmallBatchGemvWithIsa(absl::string_view isa, const float* x, int64_t m, int64_t k,
                           const uint16_t* w, int64_t rows, float* out, int64_t ldc) {
  Run(KernelsFor(isa), x, m, k, w, rows, out, ldc);
}

}  // namespace llmserve::worker::cpu
