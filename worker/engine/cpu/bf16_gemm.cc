#include "worker/engine/cpu/bf16_gemm.h"

#include <algorithm>

#include "worker/engine/cpu/cpu_features.h"
#include "worker/engine/cpu/simd.h"
#include "worker/model/dtype.h"

namespace llmserve::worker::cpu {
namespace {

#if defined(__x86_64__)

// 32 bf16 from element c of a row; lanes outside `mask` are zero (and so add nothing).
LLMSERVE_TARGET_AVX512BF16 inline __m512bh Load32(const uint16_t* row, int64_t c, __mmask32 mask) {
  return reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(mask, row + c));
}

LLMSERVE_TARGET_AVX512BF16 inline __mmask32 TailMask(int64_t left) {
  return left >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((uint64_t{1} << left) - 1);
}

// MX activation rows against RW weight rows: MX * RW accumulators in registers, each weight vector
// used MX times and each activation vector RW times per load.
template <int RW, int MX>
LLMSERVE_TARGET_AVX512BF16 inline void Block(const uint16_t* x, int64_t k, const uint16_t* w,
                                             float* out, int64_t ldc) {
  __m512 acc[MX][RW];
#pragma GCC unroll 16
  for (int i = 0; i < MX; ++i) {
#pragma GCC unroll 16
    for (int j = 0; j < RW; ++j) acc[i][j] = _mm512_setzero_ps();
  }
  for (int64_t c = 0; c < k; c += 32) {
    const __mmask32 mask = TailMask(k - c);
    __m512bh wv[RW];
#pragma GCC unroll 16
    for (int j = 0; j < RW; ++j) wv[j] = Load32(w + j * k, c, mask);
#pragma GCC unroll 16
    for (int i = 0; i < MX; ++i) {
      const __m512bh xv = Load32(x + i * k, c, mask);
#pragma GCC unroll 16
      for (int j = 0; j < RW; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], wv[j], xv);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < MX; ++i) {
#pragma GCC unroll 16
    for (int j = 0; j < RW; ++j) out[i * ldc + j] = _mm512_reduce_add_ps(acc[i][j]);
  }
}

// Up to 4 activation rows (decode at small batch, bound by the weight bytes read): one weight row
// at a time, read front to back (several rows read side by side defeat the hardware prefetcher),
// with two accumulators per activation row to hide the dot product's latency.
template <int MX>
LLMSERVE_TARGET_AVX512BF16 inline void OneRow(const uint16_t* x, int64_t k, const uint16_t* w,
                                              float* out, int64_t ldc) {
  __m512 acc0[MX], acc1[MX];
#pragma GCC unroll 8
  for (int i = 0; i < MX; ++i) acc0[i] = acc1[i] = _mm512_setzero_ps();
  const __mmask32 all = ~__mmask32{0};
  int64_t c = 0;
  for (; c + 64 <= k; c += 64) {
    PrefetchStream<64 * 2>(w + c);  // rows lie one after the other: past this one, the next
    const __m512bh w0 = Load32(w, c, all), w1 = Load32(w, c + 32, all);
#pragma GCC unroll 8
    for (int i = 0; i < MX; ++i) {
      acc0[i] = _mm512_dpbf16_ps(acc0[i], w0, Load32(x + i * k, c, all));
      acc1[i] = _mm512_dpbf16_ps(acc1[i], w1, Load32(x + i * k, c + 32, all));
    }
  }
  for (; c < k; c += 32) {
    const __mmask32 mask = TailMask(k - c);
    const __m512bh wv = Load32(w, c, mask);
#pragma GCC unroll 8
    for (int i = 0; i < MX; ++i)
      acc0[i] = _mm512_dpbf16_ps(acc0[i], wv, Load32(x + i * k, c, mask));
  }
#pragma GCC unroll 8
  for (int i = 0; i < MX; ++i) out[i * ldc] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[i], acc1[i]));
}

template <int MX>
LLMSERVE_TARGET_AVX512BF16 void FewRows(const uint16_t* x, int64_t k, const uint16_t* w,
                                        int64_t rows, float* out, int64_t ldc) {
  for (int64_t r = 0; r < rows; ++r) OneRow<MX>(x, k, w + r * k, out + r, ldc);
}

// Activation rows [i, i + MX) against weight rows [r, rows) in blocks of 4.
template <int MX>
LLMSERVE_TARGET_AVX512BF16 void RowBlock(const uint16_t* x, int64_t k, const uint16_t* w,
                                         int64_t rows, float* out, int64_t ldc) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) Block<4, MX>(x, k, w + r * k, out + r, ldc);
  for (; r < rows; ++r) Block<1, MX>(x, k, w + r * k, out + r, ldc);
}

// Many activation rows: a chunk of them stays in L2 while 4 weight rows at a time (in L1) pass
// over it in blocks of 4 x 4.
LLMSERVE_TARGET_AVX512BF16 void ManyRows(const uint16_t* x, int64_t m, int64_t k, const uint16_t* w,
                                         int64_t rows, float* out, int64_t ldc) {
  // 128 KiB of activations per chunk: half of a small L2.
  const int64_t chunk = std::max<int64_t>(4, (int64_t{64} << 10) / k / 4 * 4);
  for (int64_t i0 = 0; i0 < m; i0 += chunk) {
    const int64_t i1 = std::min(m, i0 + chunk);
    for (int64_t r = 0; r < rows; r += 4) {
      const int64_t block_rows = std::min<int64_t>(4, rows - r);
      int64_t i = i0;
      for (; i + 4 <= i1; i += 4) {
        if (block_rows == 4) {
          Block<4, 4>(x + i * k, k, w + r * k, out + i * ldc + r, ldc);
        } else {
          RowBlock<4>(x + i * k, k, w + r * k, block_rows, out + i * ldc + r, ldc);
        }
      }
      const uint16_t* xi = x + i * k;
      float* oi = out + i * ldc + r;
      const uint16_t* wr = w + r * k;
      switch (i1 - i) {
        case 3:
          RowBlock<3>(xi, k, wr, block_rows, oi, ldc);
          break;
        case 2:
          RowBlock<2>(xi, k, wr, block_rows, oi, ldc);
          break;
        case 1:
          RowBlock<1>(xi, k, wr, block_rows, oi, ldc);
          break;
        default:
          break;
      }
    }
  }
}

LLMSERVE_TARGET_AVX512BF16 void GemmAvx512Bf16(const uint16_t* x, int64_t m, int64_t k,
                                               const uint16_t* w, int64_t rows, float* out,
                                               int64_t ldc) {
  switch (m) {
    case 1:
      return FewRows<1>(x, k, w, rows, out, ldc);
    case 2:
      return FewRows<2>(x, k, w, rows, out, ldc);
    case 3:
      return FewRows<3>(x, k, w, rows, out, ldc);
    case 4:
      return FewRows<4>(x, k, w, rows, out, ldc);
    default:
      return ManyRows(x, m, k, w, rows, out, ldc);
  }
}

// FloatToBFloat16's rounding, 16 at a time.
LLMSERVE_TARGET_AVX512 void RoundToBf16Avx512(const float* x, int64_t count, uint16_t* out) {
  const __m512i lsb_one = _mm512_set1_epi32(1);
  const __m512i bias = _mm512_set1_epi32(0x7fff);
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512i infinity = _mm512_set1_epi32(0x7f800000);
  const __m512i quiet = _mm512_set1_epi32(0x40 << 16);
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m512i bits = _mm512_castps_si512(_mm512_loadu_ps(x + i));
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), lsb_one);
    __m512i rounded = _mm512_add_epi32(bits, _mm512_add_epi32(bias, lsb));
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(bits, abs_mask), infinity);
    rounded = _mm512_mask_mov_epi32(rounded, nan, _mm512_or_si512(bits, quiet));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        _mm512_cvtepi32_epi16(_mm512_srli_epi32(rounded, 16)));
  }
  for (; i < count; ++i) out[i] = FloatToBFloat16(x[i]);
}

#endif

}  // namespace

bool Bf16GemmAvailable() { return HasAvx512Bf16(); }

void RoundToBf16(const float* x, int64_t count, uint16_t* out) {
#if defined(__x86_64__)
  if (HasAvx512()) return RoundToBf16Avx512(x, count, out);
#endif
  for (int64_t i = 0; i < count; ++i) out[i] = FloatToBFloat16(x[i]);
}

void Bf16Gemm(const uint16_t* x, int64_t m, int64_t k, const uint16_t* w, int64_t rows, float* out,
              int64_t ldc) {
#if defined(__x86_64__)
  GemmAvx512Bf16(x, m, k, w, rows, out, ldc);
#else
  (void)x, (void)m, (void)k, (void)w, (void)rows, (void)out, (void)ldc;
#endif
}

}  // namespace llmserve::worker::cpu
