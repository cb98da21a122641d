#include "worker/engine/cpu/packed_gemm.h"

#include <cblas.h>

#include <algorithm>
#include <cstring>

#include "common/base/logging.h"
#include "worker/engine/cpu/cpu_features.h"
#include "worker/engine/cpu/simd.h"

namespace llmserve::worker::cpu {
namespace {

constexpr int64_t kPanel = PackedMatrix::kPanelRows;

// Activation rows one pass of the kernel over a thread's panels takes. Each panel is read from
// memory once per pass and then meets every block of the pass from L2, while the pass's packed
// activations (this many bytes) are read once per panel from L3: larger passes read the weights
// fewer times, and at 512 rows x 576 columns of prefill there is only one.
constexpr int64_t kActivationPassBytes = 4 << 20;

// Passes of more than this many row blocks widen f16 and int8 panels into f32 scratch first.
constexpr int64_t kWidenAboveBlocks = 4;

using Elem = PackedElement;

// A block of `width` (1, 2, 4 or 8) packed activation rows, of which the first `rows` are real,
// times one panel, into out[i * ldc + j] for j < cols. `scales` are an int8 panel's kPanel row
// scales (null otherwise): the kernel sums products with the int8 values and scales each output
// once at the end.
using BlockKernel = void (*)(const float* x, int64_t k, const void* panel, const float* scales,
                             float* out, int64_t ldc, int rows, int cols);

// Widens a whole f16 or int8 panel of k columns to f32 (int8 times its row scales), for passes of
// many row blocks to run the f32 kernel on.
using WidenKernel = void (*)(const void* panel, const float* scales, int64_t k, float* out);

// The int4 analogs, with the panel's group data (PackedMatrix::group_data) and, for the block
// kernel, the block's activation sums per group, xsums[g * width + i] = Σ x[i, c] over group g:
// each group's sums of x * q meet its scales, and xsums its offsets, once per group.
using Int4BlockKernel = void (*)(const float* x, int64_t k, const uint8_t* panel,
                                 const float* group_data, int64_t group_size, const float* xsums,
                                 float* out, int64_t ldc, int rows, int cols);
using Int4WidenKernel = void (*)(const uint8_t* panel, const float* group_data, int64_t k,
                                 int64_t group_size, float* out);

struct KernelSet {
  int64_t row_block = 0;
  // Indexed by log2 of the block width.
  BlockKernel f32[4] = {};
  BlockKernel f16[4] = {};
  BlockKernel i8[4] = {};
  Int4BlockKernel i4[4] = {};
  WidenKernel widen_f16 = nullptr;
  WidenKernel widen_i8 = nullptr;
  Int4WidenKernel widen_i4 = nullptr;
};

// The width a block of `rows_left` rows is packed to: the next power of two, at most row_block.
int64_t BlockWidth(int64_t rows_left, int64_t row_block) {
  int64_t width = 1;
  while (width < rows_left && width < row_block) width *= 2;
  return width;
}

int Log2(int64_t width) { return width == 1 ? 0 : width == 2 ? 1 : width == 4 ? 2 : 3; }

#if defined(__x86_64__)

// ---- AVX-512: the panel's 32 outputs in two vectors per row; 2 x 8 accumulators at most.

template <Elem kType>
constexpr int64_t ElementBytes() {
  return kType == Elem::kF32 ? 4 : kType == Elem::kF16 ? 2 : 1;
}

// PrefetchStream for `columns` columns of a 32-row panel of kType from column offset `offset`.
template <Elem kType, int kColumns>
inline void PrefetchColumns(const void* panel, int64_t offset) {
  PrefetchStream<kColumns * kPanel * ElementBytes<kType>()>(static_cast<const char*>(panel) +
                                                            offset * ElementBytes<kType>());
}

template <Elem kType>
LLMSERVE_TARGET_AVX512 inline __m512 Load16(const void* panel, int64_t offset) {
  if constexpr (kType == Elem::kF32) {
    return _mm512_loadu_ps(static_cast<const float*>(panel) + offset);
  } else if constexpr (kType == Elem::kF16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(panel) + offset)));
  } else {
    // The int8 values as exact f32: the scale is applied to the sums, not to each weight.
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
        reinterpret_cast<const __m128i*>(static_cast<const int8_t*>(panel) + offset))));
  }
}

template <Elem kType, int kWidth>
LLMSERVE_TARGET_AVX512 void BlockAvx512(const float* x, int64_t k, const void* panel,
                                        const float* scales, float* out, int64_t ldc, int rows,
                                        int cols) {
  // Narrow blocks (decode) would wait on the FMA latency with 2 x kWidth accumulators: they keep
  // two sets, for even and odd columns, and add them at the end.
  constexpr int kSets = kWidth <= 2 ? 2 : 1;
  __m512 acc0[kSets][kWidth], acc1[kSets][kWidth];
#pragma GCC unroll 8
  for (int i = 0; i < kWidth; ++i) {
#pragma GCC unroll 2
    for (int set = 0; set < kSets; ++set) acc0[set][i] = acc1[set][i] = _mm512_setzero_ps();
  }
  int64_t c = 0;
  for (; c + kSets <= k; c += kSets) {
    PrefetchColumns<kType, kSets>(panel, c * kPanel);
#pragma GCC unroll 2
    for (int set = 0; set < kSets; ++set) {
      const __m512 w0 = Load16<kType>(panel, (c + set) * kPanel);
      const __m512 w1 = Load16<kType>(panel, (c + set) * kPanel + 16);
      const float* xc = x + (c + set) * kWidth;
#pragma GCC unroll 8
      for (int i = 0; i < kWidth; ++i) {
        const __m512 xi = _mm512_set1_ps(xc[i]);
        acc0[set][i] = _mm512_fmadd_ps(xi, w0, acc0[set][i]);
        acc1[set][i] = _mm512_fmadd_ps(xi, w1, acc1[set][i]);
      }
    }
  }
  for (; c < k; ++c) {
    const __m512 w0 = Load16<kType>(panel, c * kPanel);
    const __m512 w1 = Load16<kType>(panel, c * kPanel + 16);
#pragma GCC unroll 8
    for (int i = 0; i < kWidth; ++i) {
      const __m512 xi = _mm512_set1_ps(x[c * kWidth + i]);
      acc0[0][i] = _mm512_fmadd_ps(xi, w0, acc0[0][i]);
      acc1[0][i] = _mm512_fmadd_ps(xi, w1, acc1[0][i]);
    }
  }
  if constexpr (kSets == 2) {
#pragma GCC unroll 8
    for (int i = 0; i < kWidth; ++i) {
      acc0[0][i] = _mm512_add_ps(acc0[0][i], acc0[1][i]);
      acc1[0][i] = _mm512_add_ps(acc1[0][i], acc1[1][i]);
    }
  }
  if constexpr (kType == Elem::kInt8) {
    const __m512 scale0 = _mm512_loadu_ps(scales), scale1 = _mm512_loadu_ps(scales + 16);
#pragma GCC unroll 8
    for (int i = 0; i < kWidth; ++i) {
      acc0[0][i] = _mm512_mul_ps(acc0[0][i], scale0);
      acc1[0][i] = _mm512_mul_ps(acc1[0][i], scale1);
    }
  }
  const __mmask16 mask0 = LaneMask(cols), mask1 = LaneMask(cols - 16);
#pragma GCC unroll 8
  for (int i = 0; i < kWidth; ++i) {
    if (i >= rows) break;
    _mm512_mask_storeu_ps(out + i * ldc, mask0, acc0[0][i]);
    _mm512_mask_storeu_ps(out + i * ldc + 16, mask1, acc1[0][i]);
  }
}

// ---- AVX2: 16 registers hold 2 x 4 accumulators, so a panel is done in two halves of 16 outputs.

template <Elem kType>
LLMSERVE_TARGET_AVX2 inline __m256 Load8(const void* panel, int64_t offset) {
  if constexpr (kType == Elem::kF32) {
    return _mm256_loadu_ps(static_cast<const float*>(panel) + offset);
  } else if constexpr (kType == Elem::kF16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(
        reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(panel) + offset)));
  } else {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
        reinterpret_cast<const __m128i*>(static_cast<const int8_t*>(panel) + offset))));
  }
}

template <Elem kType, int kWidth>
LLMSERVE_TARGET_AVX2 void BlockAvx2(const float* x, int64_t k, const void* panel,
                                    const float* scales, float* out, int64_t ldc, int rows,
                                    int cols) {
  for (int half = 0; half < 2 && half * 16 < cols; ++half) {
    __m256 acc0[kWidth], acc1[kWidth];
#pragma GCC unroll 4
    for (int i = 0; i < kWidth; ++i) acc0[i] = acc1[i] = _mm256_setzero_ps();
    for (int64_t c = 0; c < k; ++c) {
      // The first half's pass reads every line of the panel; the second finds them in cache.
      if (half == 0) PrefetchColumns<kType, 1>(panel, c * kPanel);
      const __m256 w0 = Load8<kType>(panel, c * kPanel + half * 16);
      const __m256 w1 = Load8<kType>(panel, c * kPanel + half * 16 + 8);
      const float* xc = x + c * kWidth;
#pragma GCC unroll 4
      for (int i = 0; i < kWidth; ++i) {
        const __m256 xi = _mm256_broadcast_ss(xc + i);
        acc0[i] = _mm256_fmadd_ps(xi, w0, acc0[i]);
        acc1[i] = _mm256_fmadd_ps(xi, w1, acc1[i]);
      }
    }
    if constexpr (kType == Elem::kInt8) {
      const __m256 scale0 = _mm256_loadu_ps(scales + half * 16);
      const __m256 scale1 = _mm256_loadu_ps(scales + half * 16 + 8);
#pragma GCC unroll 4
      for (int i = 0; i < kWidth; ++i) {
        acc0[i] = _mm256_mul_ps(acc0[i], scale0);
        acc1[i] = _mm256_mul_ps(acc1[i], scale1);
      }
    }
    const int lanes = std::min(16, cols - half * 16);
#pragma GCC unroll 4
    for (int i = 0; i < kWidth; ++i) {
      if (i >= rows) break;
      float* dst = out + i * ldc + half * 16;
      if (lanes == 16) {
        _mm256_storeu_ps(dst, acc0[i]);
        _mm256_storeu_ps(dst + 8, acc1[i]);
      } else {
        alignas(32) float values[16];
        _mm256_store_ps(values, acc0[i]);
        _mm256_store_ps(values + 8, acc1[i]);
        std::memcpy(dst, values, lanes * sizeof(float));
      }
    }
  }
}

// Decode's narrow blocks (1 or 2 rows) take the panel's 32 outputs in one pass, 4 vectors per row:
// BlockAvx2's two halves would read the panel twice and, with 2 accumulators per row, wait on the
// FMA latency at every column (int8 decode ran at 42 % of the read bandwidth that way). One row
// keeps two sets of accumulators, for even and odd columns; two rows have 8 chains already.
// Registers: 8 accumulators, 4 weight vectors, the broadcasts.
// Column `c` of a panel times kWidth activation rows, into 4 accumulators per row.
template <Elem kType, int kWidth>
LLMSERVE_TARGET_AVX2 inline void NarrowColumnAvx2(const float* x, const void* panel, int64_t c,
                                                  __m256 (&acc)[kWidth][4]) {
  __m256 w[4];
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) w[j] = Load8<kType>(panel, c * kPanel + 8 * j);
#pragma GCC unroll 2
  for (int i = 0; i < kWidth; ++i) {
    const __m256 xi = _mm256_broadcast_ss(x + c * kWidth + i);
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) acc[i][j] = _mm256_fmadd_ps(xi, w[j], acc[i][j]);
  }
}

template <Elem kType, int kWidth>
LLMSERVE_TARGET_AVX2 void NarrowBlockAvx2(const float* x, int64_t k, const void* panel,
                                          const float* scales, float* out, int64_t ldc, int rows,
                                          int cols) {
  static_assert(kWidth == 1 || kWidth == 2);
  constexpr int kSets = kWidth == 1 ? 2 : 1;
  __m256 acc[kSets][kWidth][4];
#pragma GCC unroll 2
  for (int set = 0; set < kSets; ++set) {
#pragma GCC unroll 2
    for (int i = 0; i < kWidth; ++i) {
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) acc[set][i][j] = _mm256_setzero_ps();
    }
  }
  int64_t c = 0;
  for (; c + kSets <= k; c += kSets) {
    PrefetchColumns<kType, kSets>(panel, c * kPanel);
#pragma GCC unroll 2
    for (int set = 0; set < kSets; ++set) {
      NarrowColumnAvx2<kType, kWidth>(x, panel, c + set, acc[set]);
    }
  }
  for (; c < k; ++c) NarrowColumnAvx2<kType, kWidth>(x, panel, c, acc[0]);
#pragma GCC unroll 2
  for (int i = 0; i < kWidth; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      if constexpr (kSets == 2) acc[0][i][j] = _mm256_add_ps(acc[0][i][j], acc[1][i][j]);
      if constexpr (kType == Elem::kInt8) {
        acc[0][i][j] = _mm256_mul_ps(acc[0][i][j], _mm256_loadu_ps(scales + 8 * j));
      }
    }
  }
#pragma GCC unroll 2
  for (int i = 0; i < kWidth; ++i) {
    if (i >= rows) break;
    float* dst = out + i * ldc;
    if (cols == kPanel) {
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) _mm256_storeu_ps(dst + 8 * j, acc[0][i][j]);
    } else {
      alignas(32) float values[kPanel];
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) _mm256_store_ps(values + 8 * j, acc[0][i][j]);
      std::memcpy(dst, values, cols * sizeof(float));
    }
  }
}

LLMSERVE_TARGET_AVX512 void WidenF16Avx512(const void* panel, const float*, int64_t k, float* out) {
  const auto* in = static_cast<const uint16_t*>(panel);
  for (int64_t i = 0; i < k * kPanel; i += 16) {
    _mm512_storeu_ps(out + i,
                     _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i))));
  }
}

LLMSERVE_TARGET_AVX512 void WidenI8Avx512(const void* panel, const float* scales, int64_t k,
                                          float* out) {
  const __m512 scale0 = _mm512_loadu_ps(scales), scale1 = _mm512_loadu_ps(scales + 16);
  for (int64_t c = 0; c < k; ++c) {
    _mm512_storeu_ps(out + c * kPanel,
                     _mm512_mul_ps(Load16<Elem::kInt8>(panel, c * kPanel), scale0));
    _mm512_storeu_ps(out + c * kPanel + 16,
                     _mm512_mul_ps(Load16<Elem::kInt8>(panel, c * kPanel + 16), scale1));
  }
}

LLMSERVE_TARGET_AVX2 void WidenF16Avx2(const void* panel, const float*, int64_t k, float* out) {
  const auto* in = static_cast<const uint16_t*>(panel);
  for (int64_t i = 0; i < k * kPanel; i += 8) {
    _mm256_storeu_ps(out + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  }
}

LLMSERVE_TARGET_AVX2 void WidenI8Avx2(const void* panel, const float* scales, int64_t k,
                                      float* out) {
  __m256 scale[4];
  for (int j = 0; j < 4; ++j) scale[j] = _mm256_loadu_ps(scales + 8 * j);
  for (int64_t c = 0; c < k; ++c) {
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      _mm256_storeu_ps(out + c * kPanel + 8 * j,
                       _mm256_mul_ps(Load8<Elem::kInt8>(panel, c * kPanel + 8 * j), scale[j]));
    }
  }
}

// ---- int4 (the panel layout is in packed_matrix.h). Each zero-extended byte b = lo + 16 hi is
// converted to f32 twice: lo = b & 0xF, and b itself. The kernels sum x * lo and x * b, and at the
// end of each group take hi's sum as (Σ x b - Σ x lo) / 16: three instructions per 8 pairs of
// weights (AND, two conversions) besides the FMAs, where masking hi out would take four. hi's sum
// keeps the precision it would have had as Σ x * 16 hi (b <= 255, 16 hi <= 240), and is exactly 0
// where hi is. Each group's sums start from zero and are scaled into the totals at its end:
// total += s * acc - s*z * Σx.

constexpr float kHighNibble = 1.0f / 16;

// AVX-512: a zero-extended 16-byte load puts rows {0..7, 16..23} in the low nibbles (vector A) and
// {8..15, 24..31} in the high ones (B). The same 256-bit half swap takes row-ordered scales
// (rows 0..15, 16..31) into that order per group, and the totals back into row order at the end:
// LowHalves and HighHalves (simd.h).

// Column `c` of an int4 panel times a block's activations, into the sums of x * lo (acc_a) and
// x * (lo + 16 hi) (acc_b).
template <int kWidth>
LLMSERVE_TARGET_AVX512 inline void Int4ColumnAvx512(const uint8_t* panel, const float* x, int64_t c,
                                                    __m512* acc_a, __m512* acc_b) {
  const __m512i v =
      _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(panel + c * 16)));
  const __m512 qa = _mm512_cvtepi32_ps(_mm512_and_si512(v, _mm512_set1_epi32(0x0F)));
  const __m512 qb = _mm512_cvtepi32_ps(v);  // lo + 16 hi
  const float* xc = x + c * kWidth;
#pragma GCC unroll 8
  for (int i = 0; i < kWidth; ++i) {
    const __m512 xi = _mm512_set1_ps(xc[i]);
    acc_a[i] = _mm512_fmadd_ps(xi, qa, acc_a[i]);
    acc_b[i] = _mm512_fmadd_ps(xi, qb, acc_b[i]);
  }
}

template <int kWidth>
LLMSERVE_TARGET_AVX512 void BlockInt4Avx512(const float* x, int64_t k, const uint8_t* panel,
                                            const float* group_data, int64_t group_size,
                                            const float* xsums, float* out, int64_t ldc, int rows,
                                            int cols) {
  // As in BlockAvx512: narrow blocks keep two sets of accumulators (even and odd columns).
  constexpr int kSets = kWidth <= 2 ? 2 : 1;
  __m512 total_a[kWidth], total_b[kWidth];
#pragma GCC unroll 8
  for (int i = 0; i < kWidth; ++i) total_a[i] = total_b[i] = _mm512_setzero_ps();
  for (int64_t g = 0, c0 = 0; c0 < k; ++g, c0 += group_size) {
    __m512 acc_a[kSets][kWidth], acc_b[kSets][kWidth];
#pragma GCC unroll 8
    for (int i = 0; i < kWidth; ++i) {
#pragma GCC unroll 2
      for (int set = 0; set < kSets; ++set) acc_a[set][i] = acc_b[set][i] = _mm512_setzero_ps();
    }
    const int64_t c1 = c0 + group_size;
    int64_t c = c0;
    for (; c + kSets <= c1; c += kSets) {
      PrefetchStream<16 * kSets>(panel + c * 16);
#pragma GCC unroll 2
      for (int set = 0; set < kSets; ++set) {
        Int4ColumnAvx512<kWidth>(panel, x, c + set, acc_a[set], acc_b[set]);
      }
    }
    for (; c < c1; ++c) Int4ColumnAvx512<kWidth>(panel, x, c, acc_a[0], acc_b[0]);
    const float* data = group_data + g * 2 * kPanel;
    const __m512 s0 = _mm512_loadu_ps(data), s1 = _mm512_loadu_ps(data + 16);
    const __m512 o0 = _mm512_loadu_ps(data + kPanel), o1 = _mm512_loadu_ps(data + kPanel + 16);
    const __m512 scale_a = LowHalves(s0, s1), offset_a = LowHalves(o0, o1);
    const __m512 scale_b = _mm512_mul_ps(HighHalves(s0, s1), _mm512_set1_ps(kHighNibble));
    const __m512 offset_b = HighHalves(o0, o1);
#pragma GCC unroll 8
    for (int i = 0; i < kWidth; ++i) {
      if constexpr (kSets == 2) {
        acc_a[0][i] = _mm512_add_ps(acc_a[0][i], acc_a[1][i]);
        acc_b[0][i] = _mm512_add_ps(acc_b[0][i], acc_b[1][i]);
      }
      acc_b[0][i] = _mm512_sub_ps(acc_b[0][i], acc_a[0][i]);  // Σ x * 16 hi
      const __m512 xs = _mm512_set1_ps(xsums[g * kWidth + i]);
      total_a[i] =
          _mm512_fnmadd_ps(offset_a, xs, _mm512_fmadd_ps(scale_a, acc_a[0][i], total_a[i]));
      total_b[i] =
          _mm512_fnmadd_ps(offset_b, xs, _mm512_fmadd_ps(scale_b, acc_b[0][i], total_b[i]));
    }
  }
  const __mmask16 mask0 = LaneMask(cols), mask1 = LaneMask(cols - 16);
#pragma GCC unroll 8
  for (int i = 0; i < kWidth; ++i) {
    if (i >= rows) break;
    _mm512_mask_storeu_ps(out + i * ldc, mask0, LowHalves(total_a[i], total_b[i]));
    _mm512_mask_storeu_ps(out + i * ldc + 16, mask1, HighHalves(total_a[i], total_b[i]));
  }
}

LLMSERVE_TARGET_AVX512 void WidenI4Avx512(const uint8_t* panel, const float* group_data, int64_t k,
                                          int64_t group_size, float* out) {
  const __m512i low = _mm512_set1_epi32(0x0F);
  for (int64_t g = 0, c0 = 0; c0 < k; ++g, c0 += group_size) {
    const float* data = group_data + g * 2 * kPanel;
    const __m512 s0 = _mm512_loadu_ps(data), s1 = _mm512_loadu_ps(data + 16);
    const __m512 o0 = _mm512_loadu_ps(data + kPanel), o1 = _mm512_loadu_ps(data + kPanel + 16);
    const __m512 scale_a = LowHalves(s0, s1), scale_b = HighHalves(s0, s1);
    const __m512 offset_a = LowHalves(o0, o1), offset_b = HighHalves(o0, o1);
    for (int64_t c = c0; c < c0 + group_size; ++c) {
      const __m512i v =
          _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(panel + c * 16)));
      // q * s - s*z in one rounding: exactly Int4Matrix::Dequantized where s*z is exact.
      const __m512 a =
          _mm512_fmsub_ps(_mm512_cvtepi32_ps(_mm512_and_si512(v, low)), scale_a, offset_a);
      const __m512 b =
          _mm512_fmsub_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4)), scale_b, offset_b);
      _mm512_storeu_ps(out + c * kPanel, LowHalves(a, b));
      _mm512_storeu_ps(out + c * kPanel + 16, HighHalves(a, b));
    }
  }
}

// AVX2: a zero-extended 8-byte load is a half of 16 rows in row order (low nibbles rows 0..7,
// high ones 8..15). Blocks of 1 or 2 rows take both halves at once (more independent sums for
// decode); blocks of 4 one half at a time, as BlockAvx2 does, to stay within 16 registers.
template <int kWidth>
LLMSERVE_TARGET_AVX2 void BlockInt4Avx2(const float* x, int64_t k, const uint8_t* panel,
                                        const float* group_data, int64_t group_size,
                                        const float* xsums, float* out, int64_t ldc, int rows,
                                        int cols) {
  constexpr int kHalves = kWidth <= 2 ? 2 : 1;
  constexpr int kVectors = 2 * kHalves;  // per row: low and high nibbles of each half
  const __m256i low = _mm256_set1_epi32(0x0F);
  for (int first_half = 0; first_half < 2 && first_half * 16 < cols; first_half += kHalves) {
    __m256 total[kVectors][kWidth];
#pragma GCC unroll 4
    for (int v = 0; v < kVectors; ++v) {
#pragma GCC unroll 4
      for (int i = 0; i < kWidth; ++i) total[v][i] = _mm256_setzero_ps();
    }
    for (int64_t g = 0, c0 = 0; c0 < k; ++g, c0 += group_size) {
      __m256 acc[kVectors][kWidth];
#pragma GCC unroll 4
      for (int v = 0; v < kVectors; ++v) {
#pragma GCC unroll 4
        for (int i = 0; i < kWidth; ++i) acc[v][i] = _mm256_setzero_ps();
      }
      for (int64_t c = c0; c < c0 + group_size; ++c) {
        if (first_half == 0) PrefetchStream<16>(panel + c * 16);
        __m256 q[kVectors];
#pragma GCC unroll 2
        for (int h = 0; h < kHalves; ++h) {
          const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(
              reinterpret_cast<const __m128i*>(panel + c * 16 + (first_half + h) * 8)));
          q[2 * h] = _mm256_cvtepi32_ps(_mm256_and_si256(v, low));
          q[2 * h + 1] = _mm256_cvtepi32_ps(v);  // lo + 16 hi
        }
        const float* xc = x + c * kWidth;
#pragma GCC unroll 4
        for (int i = 0; i < kWidth; ++i) {
          const __m256 xi = _mm256_broadcast_ss(xc + i);
#pragma GCC unroll 4
          for (int v = 0; v < kVectors; ++v) acc[v][i] = _mm256_fmadd_ps(xi, q[v], acc[v][i]);
        }
      }
      const float* data = group_data + g * 2 * kPanel + first_half * 16;
#pragma GCC unroll 4
      for (int v = 0; v < kVectors; ++v) {
        // Vector v holds rows first_half * 16 + 8v .. + 7: its scales are contiguous.
        __m256 scale = _mm256_loadu_ps(data + 8 * v);
        if (v % 2 == 1) scale = _mm256_mul_ps(scale, _mm256_set1_ps(kHighNibble));
        const __m256 offset = _mm256_loadu_ps(data + kPanel + 8 * v);
#pragma GCC unroll 4
        for (int i = 0; i < kWidth; ++i) {
          if (v % 2 == 1) acc[v][i] = _mm256_sub_ps(acc[v][i], acc[v - 1][i]);  // Σ x * 16 hi
          total[v][i] = _mm256_fnmadd_ps(offset, _mm256_broadcast_ss(xsums + g * kWidth + i),
                                         _mm256_fmadd_ps(scale, acc[v][i], total[v][i]));
        }
      }
    }
    const int lanes = std::min(8 * kVectors, cols - first_half * 16);
#pragma GCC unroll 4
    for (int i = 0; i < kWidth; ++i) {
      if (i >= rows) break;
      float* dst = out + i * ldc + first_half * 16;
      if (lanes == 8 * kVectors) {
#pragma GCC unroll 4
        for (int v = 0; v < kVectors; ++v) _mm256_storeu_ps(dst + 8 * v, total[v][i]);
      } else {
        alignas(32) float values[8 * kVectors];
#pragma GCC unroll 4
        for (int v = 0; v < kVectors; ++v) _mm256_store_ps(values + 8 * v, total[v][i]);
        std::memcpy(dst, values, lanes * sizeof(float));
      }
    }
  }
}

LLMSERVE_TARGET_AVX2 void WidenI4Avx2(const uint8_t* panel, const float* group_data, int64_t k,
                                      int64_t group_size, float* out) {
  const __m256i low = _mm256_set1_epi32(0x0F);
  for (int64_t g = 0, c0 = 0; c0 < k; ++g, c0 += group_size) {
    const float* data = group_data + g * 2 * kPanel;
    __m256 scale[4], offset[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      scale[j] = _mm256_loadu_ps(data + 8 * j);
      offset[j] = _mm256_loadu_ps(data + kPanel + 8 * j);
    }
    for (int64_t c = c0; c < c0 + group_size; ++c) {
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const __m256i v = _mm256_cvtepu8_epi32(
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(panel + c * 16 + h * 8)));
        // q * s - s*z in one rounding: exactly Int4Matrix::Dequantized where s*z is exact.
        _mm256_storeu_ps(out + c * kPanel + 16 * h,
                         _mm256_fmsub_ps(_mm256_cvtepi32_ps(_mm256_and_si256(v, low)), scale[2 * h],
                                         offset[2 * h]));
        _mm256_storeu_ps(out + c * kPanel + 16 * h + 8,
                         _mm256_fmsub_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4)),
                                         scale[2 * h + 1], offset[2 * h + 1]));
      }
    }
  }
}

KernelSet KernelsFor(absl::string_view isa) {
  KernelSet set;
  if (isa == "avx512" && HasAvx512()) {
    set.row_block = 8;
    set.f32[0] = BlockAvx512<Elem::kF32, 1>, set.f32[1] = BlockAvx512<Elem::kF32, 2>;
    set.f32[2] = BlockAvx512<Elem::kF32, 4>, set.f32[3] = BlockAvx512<Elem::kF32, 8>;
    set.f16[0] = BlockAvx512<Elem::kF16, 1>, set.f16[1] = BlockAvx512<Elem::kF16, 2>;
    set.f16[2] = BlockAvx512<Elem::kF16, 4>, set.f16[3] = BlockAvx512<Elem::kF16, 8>;
    set.i8[0] = BlockAvx512<Elem::kInt8, 1>, set.i8[1] = BlockAvx512<Elem::kInt8, 2>;
    set.i8[2] = BlockAvx512<Elem::kInt8, 4>, set.i8[3] = BlockAvx512<Elem::kInt8, 8>;
    set.i4[0] = BlockInt4Avx512<1>, set.i4[1] = BlockInt4Avx512<2>;
    set.i4[2] = BlockInt4Avx512<4>, set.i4[3] = BlockInt4Avx512<8>;
    set.widen_f16 = WidenF16Avx512;
    set.widen_i8 = WidenI8Avx512;
    set.widen_i4 = WidenI4Avx512;
  } else if (isa == "avx2" && HasAvx2FmaF16c()) {
    set.row_block = 4;
    set.f32[0] = NarrowBlockAvx2<Elem::kF32, 1>, set.f32[1] = NarrowBlockAvx2<Elem::kF32, 2>;
    set.f32[2] = BlockAvx2<Elem::kF32, 4>;
    set.f16[0] = NarrowBlockAvx2<Elem::kF16, 1>, set.f16[1] = NarrowBlockAvx2<Elem::kF16, 2>;
    set.f16[2] = BlockAvx2<Elem::kF16, 4>;
    set.i8[0] = NarrowBlockAvx2<Elem::kInt8, 1>, set.i8[1] = NarrowBlockAvx2<Elem::kInt8, 2>;
    set.i8[2] = BlockAvx2<Elem::kInt8, 4>;
    set.i4[0] = BlockInt4Avx2<1>, set.i4[1] = BlockInt4Avx2<2>, set.i4[2] = BlockInt4Avx2<4>;
    set.widen_f16 = WidenF16Avx2;
    set.widen_i8 = WidenI8Avx2;
    set.widen_i4 = WidenI4Avx2;
  }
  return set;
}

#else

KernelSet KernelsFor(absl::string_view) { return {}; }

#endif

// The kernel set for `isa`, built once per ISA (the engine calls this for every projection).
const KernelSet& Kernels(absl::string_view isa) {
  static const KernelSet avx512 = KernelsFor("avx512");
  static const KernelSet avx2 = KernelsFor("avx2");
  static const KernelSet none;
  return isa == "avx512" ? avx512 : isa == "avx2" ? avx2 : none;
}

int64_t RowBlock(absl::string_view isa) {
  const int64_t row_block = Kernels(isa).row_block;
  LLMSERVE_CHECK(row_block > 0) << "no packed GEMM for instruction set " << isa;
  return row_block;
}

// Sums of each block's activations over each int4 group, for the pass of blocks [pass, pass_end):
// block b's sums go to xsums[(first - pass) * groups + g * width + i], the layout the int4 block
// kernels read. A pass that is not widened has at most kWidenAboveBlocks blocks of row_block <= 8
// rows, at most 32 rows of at most k groups: they fit the kPanel * k floats of panel scratch.
void SumInt4Groups(const float* packed_x, int64_t m, int64_t k, int64_t group_size,
                   int64_t row_block, int64_t pass, int64_t pass_end, float* xsums) {
  const int64_t groups = k / group_size;
  for (int64_t first = pass; first < pass_end; first += row_block) {
    const int64_t width = BlockWidth(std::min(row_block, m - first), row_block);
    float* sums = xsums + (first - pass) * groups;
    for (int64_t g = 0; g < groups; ++g) {
      // A group of a block is group_size * width contiguous floats, row i's at i mod width. Eight
      // partial sums (width divides 8) let the compiler vectorize what is, at batch 1, a serial
      // chain of k additions per thread and call.
      const float* values = packed_x + first * k + g * group_size * width;
      const int64_t count = group_size * width;
      float partial[8] = {};
      int64_t t = 0;
      for (; t + 8 <= count; t += 8) {
        for (int j = 0; j < 8; ++j) partial[j] += values[t + j];
      }
      for (int j = 0; t < count; ++t, ++j) partial[j] += values[t];
      for (int64_t i = 0; i < width; ++i) {
        float sum = 0.0f;
        for (int64_t j = i; j < 8; j += width) sum += partial[j];
        sums[g * width + i] = sum;
      }
    }
  }
}

}  // namespace

bool PackedGemmAvailable() { return !VectorIsas().empty(); }

std::vector<std::string> PackedGemmIsas() { return VectorIsas(); }

int64_t PackedGemmRowBlock(absl::string_view isa) { return RowBlock(isa); }

int64_t PackedActivationBlocks(absl::string_view isa, int64_t m) {
  const int64_t row_block = RowBlock(isa);
  return (m + row_block - 1) / row_block;
}

int64_t PackedActivationsSize(absl::string_view isa, int64_t m, int64_t k) {
  const int64_t row_block = RowBlock(isa);
  const int64_t full_rows = (PackedActivationBlocks(isa, m) - 1) * row_block;
  return (full_rows + BlockWidth(m - full_rows, row_block)) * k;
}

void PackActivations(absl::string_view isa, const float* x, int64_t m, int64_t k,
                     int64_t block_begin, int64_t block_end, float* packed) {
  const int64_t row_block = RowBlock(isa);
  for (int64_t b = block_begin; b < block_end; ++b) {
    const int64_t first = b * row_block;
    const int64_t rows = std::min(row_block, m - first);
    const int64_t width = BlockWidth(rows, row_block);
    float* block = packed + first * k;
    for (int64_t c = 0; c < k; ++c) {
      for (int64_t i = 0; i < rows; ++i) block[c * width + i] = x[(first + i) * k + c];
      for (int64_t i = rows; i < width; ++i) block[c * width + i] = 0.0f;
    }
  }
}

void PackedGemm(absl::string_view isa, const float* packed_x, int64_t m, const PackedMatrix& w,
                int64_t panel_begin, int64_t panel_end, float* out, int64_t ldc,
                float* panel_scratch) {
  const KernelSet& kernels = Kernels(isa);
  const int64_t row_block = RowBlock(isa);
  const int64_t k = w.cols();
  const int64_t pass_rows = std::max<int64_t>(
      row_block,
      kActivationPassBytes / (k * static_cast<int64_t>(sizeof(float))) / row_block * row_block);
  for (int64_t pass = 0; pass < m; pass += pass_rows) {
    const int64_t pass_end = std::min(m, pass + pass_rows);
    // Widening f16 in registers costs the kernel about a fifth of its FMA throughput, so a pass of
    // many blocks (prefill) widens each panel once into L2-resident scratch and runs the f32
    // kernel: 512-token prefill ran 6% faster. Decode batches keep widening in registers, where
    // the first block's compute overlaps the panel's read from memory (widening first would
    // serialize the two). int8 and int4 panels are dequantized the same way (docs/engine.md has
    // the int8 measurement).
    const bool widen_panels =
        w.element() != Elem::kF32 && pass_end - pass > kWidenAboveBlocks * row_block;
    if (w.element() == Elem::kInt4 && !widen_panels) {
      LLMSERVE_CHECK((pass_end - pass + row_block - 1) / row_block * row_block * w.groups() <=
                     kPanel * k);
      SumInt4Groups(packed_x, m, k, w.group_size(), row_block, pass, pass_end, panel_scratch);
      for (int64_t p = panel_begin; p < panel_end; ++p) {
        const int cols = static_cast<int>(std::min(kPanel, w.rows() - p * kPanel));
        for (int64_t first = pass; first < pass_end; first += row_block) {
          const int64_t rows = std::min(row_block, m - first);
          kernels.i4[Log2(BlockWidth(rows, row_block))](
              packed_x + first * k, k, static_cast<const uint8_t*>(w.panel(p)), w.group_data(p),
              w.group_size(), panel_scratch + (first - pass) * w.groups(),
              out + first * ldc + p * kPanel, ldc, static_cast<int>(rows), cols);
        }
      }
      continue;
    }
    const BlockKernel* table = w.element() == Elem::kF32 || widen_panels ? kernels.f32
                               : w.element() == Elem::kF16               ? kernels.f16
                                                                         : kernels.i8;
    const WidenKernel widen = w.element() == Elem::kF16 ? kernels.widen_f16 : kernels.widen_i8;
    for (int64_t p = panel_begin; p < panel_end; ++p) {
      const int cols = static_cast<int>(std::min(kPanel, w.rows() - p * kPanel));
      const void* panel = w.panel(p);
      const float* scales = w.element() == Elem::kInt8 ? w.scales(p) : nullptr;
      if (widen_panels) {
        if (w.element() == Elem::kInt4) {
          kernels.widen_i4(static_cast<const uint8_t*>(panel), w.group_data(p), k, w.group_size(),
                           panel_scratch);
        } else {
          widen(panel, scales, k, panel_scratch);
        }
        panel = panel_scratch;
        scales = nullptr;
      }
      for (int64_t first = pass; first < pass_end; first += row_block) {
        const int64_t rows = std::min(row_block, m - first);
        table[Log2(BlockWidth(rows, row_block))](packed_x + first * k, k, panel, scales,
                                                 out + first * ldc + p * kPanel, ldc,
                                                 static_cast<int>(rows), cols);
      }
    }
  }
}

void PackedGemmBaseline(const float* x, int64_t m, const PackedMatrix& w, int64_t panel_begin,
                        int64_t panel_end, float* out, int64_t ldc, float* panel_scratch) {
  const int64_t k = w.cols();
  for (int64_t p = panel_begin; p < panel_end; ++p) {
    const int64_t cols = std::min(kPanel, w.rows() - p * kPanel);
    const void* panel = w.panel(p);
    switch (w.element()) {
      case Elem::kF32:
        std::memcpy(panel_scratch, panel, kPanel * k * sizeof(float));
        break;
      case Elem::kF16:
        ConvertElements(panel, DType::kF16, panel_scratch, DType::kF32, kPanel * k);
        break;
      case Elem::kInt8: {
        const auto* q = static_cast<const int8_t*>(panel);
        const float* scales = w.scales(p);
        for (int64_t c = 0; c < k; ++c) {
          for (int64_t r = 0; r < kPanel; ++r) {
            panel_scratch[c * kPanel + r] = q[c * kPanel + r] * scales[r];
          }
        }
        break;
      }
      case Elem::kInt4: {
        const auto* q = static_cast<const uint8_t*>(panel);
        const float* data = w.group_data(p);
        for (int64_t c = 0; c < k; ++c) {
          const float* scales = data + (c / w.group_size()) * 2 * kPanel;
          for (int64_t b = 0; b < kPanel / 2; ++b) {
            const int64_t r = (b / 8) * 16 + b % 8;  // and r + 8 in the high nibble
            const uint8_t byte = q[c * (kPanel / 2) + b];
            panel_scratch[c * kPanel + r] = (byte & 0xF) * scales[r] - scales[kPanel + r];
            panel_scratch[c * kPanel + r + 8] =
                (byte >> 4) * scales[r + 8] - scales[kPanel + r + 8];
          }
        }
        break;
      }
    }
    // The panel is [k, 32] (k-major): out[m, cols] = x[m, k] · panel[k, cols].
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m),
                static_cast<int>(cols), static_cast<int>(k), 1.0f, x, static_cast<int>(k),
                panel_scratch, static_cast<int>(kPanel), 0.0f, out + p * kPanel,
                static_cast<int>(ldc));
  }
}

}  // namespace llmserve::worker::cpu
