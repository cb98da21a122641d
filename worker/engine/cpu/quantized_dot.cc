#include "worker/engine/cpu/quantized_dot.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "common/base/logging.h"
#include "worker/engine/cpu/cpu_features.h"
#include "worker/engine/cpu/simd.h"

namespace llmserve::worker::cpu {
namespace {

constexpr int64_t kPanel = PackedMatrix::kPanelRows;

// Where column c of a row lies in QuantizedActivations::values.
int64_t ValueIndex(int64_t c, bool int4_order) {
  if (!int4_order) return c;
  const int64_t j = c % 8;
  return c - j + (j % 2) * 4 + j / 2;
}

// The kernel for `width` rows of x from row0, times one panel (`weights`: the int8 row scales or
// the int4 group data), into out[i * ldc + r] for r < cols.
using Kernel = void (*)(const uint8_t* panel, const float* weights, int64_t k, int64_t group_size,
                        const QuantizedActivations& x, int64_t row0, float* out, int64_t ldc,
                        int cols);

struct KernelSet {
  // Indexed by log2 of the rows: 1, 2, 4.
  Kernel i8[3] = {};
  Kernel i4[3] = {};
};

// ---- scalar: the same sums in the same order as the vector kernels' lanes (int8 is bitwise
// identical to them; int4 differs only in adding the two halves' partial sums).

template <int kWidth>
void ScalarInt8(const uint8_t* panel, const float* row_scales, int64_t k, int64_t,
                const QuantizedActivations& x, int64_t row0, float* out, int64_t ldc, int cols) {
  const auto* q = reinterpret_cast<const int8_t*>(panel);
  for (int i = 0; i < kWidth; ++i) {
    const int8_t* xq = x.values.data() + (row0 + i) * x.stride;
    const float* xs = x.scales.data() + (row0 + i) * x.blocks();
    for (int r = 0; r < cols; ++r) {
      float total = 0.0f;
      for (int64_t b = 0, c0 = 0; c0 < k; ++b, c0 += x.block) {
        int32_t sum = 0;
        for (int64_t c = c0; c < std::min(k, c0 + x.block); ++c) sum += q[c * kPanel + r] * xq[c];
        total = std::fma(static_cast<float>(sum), xs[b], total);
      }
      out[i * ldc + r] = total * row_scales[r];
    }
  }
}

template <int kWidth>
void ScalarInt4(const uint8_t* panel, const float* group_data, int64_t k, int64_t group_size,
                const QuantizedActivations& x, int64_t row0, float* out, int64_t ldc, int cols) {
  const int64_t groups = k / group_size;
  for (int i = 0; i < kWidth; ++i) {
    const int8_t* xq = x.values.data() + (row0 + i) * x.stride;
    const float* xs = x.scales.data() + (row0 + i) * x.blocks();
    const float* group_sums = x.group_sums.data() + (row0 + i) * groups;
    for (int r = 0; r < cols; ++r) {
      const int64_t byte = (r / 16) * 8 + r % 8;
      const int shift = (r % 16) / 8 * 4;
      float total = 0.0f;
      for (int64_t g = 0; g < groups; ++g) {
        const float scale = group_data[g * 2 * kPanel + r];
        const float offset = group_data[g * 2 * kPanel + kPanel + r];
        for (int64_t c0 = g * group_size; c0 < (g + 1) * group_size; c0 += x.block) {
          int32_t sum = 0;
          for (int64_t c = c0; c < c0 + x.block; ++c) {
            sum += ((panel[c * (kPanel / 2) + byte] >> shift) & 0xF) * xq[ValueIndex(c, true)];
          }
          total = std::fma(static_cast<float>(sum), scale * xs[c0 / x.block], total);
        }
        total = std::fma(-offset, group_sums[g], total);
      }
      out[i * ldc + r] = total;
    }
  }
}

KernelSet ScalarKernels() {
  KernelSet set;
  set.i8[0] = ScalarInt8<1>, set.i8[1] = ScalarInt8<2>, set.i8[2] = ScalarInt8<4>;
  set.i4[0] = ScalarInt4<1>, set.i4[1] = ScalarInt4<2>, set.i4[2] = ScalarInt4<4>;
  return set;
}

}  // namespace

#if defined(__x86_64__)

#define QD_NS avx2_dot
#define QD_TARGET LLMSERVE_TARGET_AVX2
#define QD_DOT 0
#include "worker/engine/cpu/quantized_dot_kernels.inc"
#undef QD_NS
#undef QD_TARGET
#undef QD_DOT

#define QD_NS avxvnni_dot
#define QD_TARGET __attribute__((target("avxvnni,avx2,fma,f16c")))
#define QD_DOT 1
#include "worker/engine/cpu/quantized_dot_kernels.inc"
#undef QD_NS
#undef QD_TARGET
#undef QD_DOT

#define QD_NS avx512vnni_dot
#define QD_TARGET __attribute__((target("avx512vnni,avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define QD_DOT 2
#include "worker/engine/cpu/quantized_dot_kernels.inc"
#undef QD_NS
#undef QD_TARGET
#undef QD_DOT

// ---- avx512vbmi: int4 on 512-bit vectors without the column transpose. 8 columns c..c+7 of an
// int4 panel are two 64-byte loads (z0: columns c..c+3, z1: c+4..c+7, 16 bytes each). One vpermt2b
// per vector gathers byte L of columns c, c+2, c+4, c+6 into 32-bit lane L ("even"), another those
// of c+1, c+3, c+5, c+7 ("odd"): the order QuantizedActivations stores for int4, so each vector
// meets one broadcast 4-byte group of activations. Byte L holds row 16(L/8) + L%8 in its low
// nibble and that row + 8 in its high one (packed_matrix.h): the low nibbles are rows {0..7,
// 16..23}, the high ones {8..15, 24..31}, as in packed_gemm.cc's AVX-512 int4 kernel. Per 8
// columns of 32 rows: 2 permutes, 6 nibble operations and 4 vpdpbusd, where the 256-bit kernels
// spend 8 unpacks and 8 vpdpbusd on half the rows.
namespace avx512vbmi_dot {

#define QD_TARGET_VBMI \
  __attribute__((target("avx512vbmi,avx512vnni,avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

// The vpermt2b indices: byte 4L + t of the even (odd) vector is byte L of column 2t (2t + 1) of
// the 8, which lies at byte 16 * column + L of z0:z1 (bit 6 picks z1).
constexpr std::array<uint8_t, 64> PairIndex(int odd) {
  std::array<uint8_t, 64> index{};
  for (int lane = 0; lane < 16; ++lane) {
    for (int t = 0; t < 4; ++t)
      index[4 * lane + t] = static_cast<uint8_t>(16 * (2 * t + odd) + lane);
  }
  return index;
}
alignas(64) constexpr std::array<uint8_t, 64> kEvenIndex = PairIndex(0);
alignas(64) constexpr std::array<uint8_t, 64> kOddIndex = PairIndex(1);

template <int kWidth>
QD_TARGET_VBMI void BlockInt4(const uint8_t* panel, const float* group_data, int64_t k,
                              int64_t group_size, const QuantizedActivations& x, int64_t row0,
                              float* out, int64_t ldc, int cols) {
  // One row alone would wait on vpdpbusd's latency with one chain per nibble half: it keeps the
  // even and odd columns' sums apart and adds them per block.
  constexpr int kChains = kWidth == 1 ? 2 : 1;
  const __m512i low_nibble = _mm512_set1_epi8(0x0F);
  const __m512i even_index = _mm512_load_si512(kEvenIndex.data());
  const __m512i odd_index = _mm512_load_si512(kOddIndex.data());
  const int64_t blocks = x.blocks(), groups = k / group_size;
  __m512 total_lo[kWidth], total_hi[kWidth];
#pragma GCC unroll 4
  for (int i = 0; i < kWidth; ++i) total_lo[i] = total_hi[i] = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    const float* data = group_data + g * 2 * kPanel;
    const __m512 s0 = _mm512_loadu_ps(data), s1 = _mm512_loadu_ps(data + 16);
    const __m512 o0 = _mm512_loadu_ps(data + kPanel), o1 = _mm512_loadu_ps(data + kPanel + 16);
    const __m512 scale_lo = LowHalves(s0, s1), scale_hi = HighHalves(s0, s1);
    for (int64_t c0 = g * group_size; c0 < (g + 1) * group_size; c0 += x.block) {
      __m512i acc_lo[kChains][kWidth], acc_hi[kChains][kWidth];
#pragma GCC unroll 4
      for (int i = 0; i < kWidth; ++i) {
#pragma GCC unroll 2
        for (int chain = 0; chain < kChains; ++chain) {
          acc_lo[chain][i] = acc_hi[chain][i] = _mm512_setzero_si512();
        }
      }
      for (int64_t c = c0; c < c0 + x.block; c += 8) {
        PrefetchStream<8 * 16>(panel + c * 16);
        const __m512i z0 = _mm512_loadu_si512(panel + c * 16);
        const __m512i z1 = _mm512_loadu_si512(panel + c * 16 + 64);
        const __m512i even = _mm512_permutex2var_epi8(z0, even_index, z1);
        const __m512i odd = _mm512_permutex2var_epi8(z0, odd_index, z1);
        const __m512i even_lo = _mm512_and_si512(even, low_nibble);
        const __m512i even_hi = _mm512_and_si512(_mm512_srli_epi16(even, 4), low_nibble);
        const __m512i odd_lo = _mm512_and_si512(odd, low_nibble);
        const __m512i odd_hi = _mm512_and_si512(_mm512_srli_epi16(odd, 4), low_nibble);
#pragma GCC unroll 4
        for (int i = 0; i < kWidth; ++i) {
          const int8_t* values = x.values.data() + (row0 + i) * x.stride + c;
          int32_t even_x, odd_x;
          std::memcpy(&even_x, values, sizeof(even_x));
          std::memcpy(&odd_x, values + 4, sizeof(odd_x));
          const __m512i xe = _mm512_set1_epi32(even_x), xo = _mm512_set1_epi32(odd_x);
          constexpr int kOdd = kChains - 1;
          acc_lo[0][i] = _mm512_dpbusd_epi32(acc_lo[0][i], even_lo, xe);
          acc_hi[0][i] = _mm512_dpbusd_epi32(acc_hi[0][i], even_hi, xe);
          acc_lo[kOdd][i] = _mm512_dpbusd_epi32(acc_lo[kOdd][i], odd_lo, xo);
          acc_hi[kOdd][i] = _mm512_dpbusd_epi32(acc_hi[kOdd][i], odd_hi, xo);
        }
      }
      const int64_t b = c0 / x.block;
#pragma GCC unroll 4
      for (int i = 0; i < kWidth; ++i) {
        if constexpr (kChains == 2) {
          acc_lo[0][i] = _mm512_add_epi32(acc_lo[0][i], acc_lo[1][i]);
          acc_hi[0][i] = _mm512_add_epi32(acc_hi[0][i], acc_hi[1][i]);
        }
        // As the scalar kernel: total += sum * (scale * s_b).
        const __m512 s = _mm512_set1_ps(x.scales[(row0 + i) * blocks + b]);
        total_lo[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc_lo[0][i]), _mm512_mul_ps(scale_lo, s),
                                      total_lo[i]);
        total_hi[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc_hi[0][i]), _mm512_mul_ps(scale_hi, s),
                                      total_hi[i]);
      }
    }
    const __m512 offset_lo = LowHalves(o0, o1), offset_hi = HighHalves(o0, o1);
#pragma GCC unroll 4
    for (int i = 0; i < kWidth; ++i) {
      const __m512 sums = _mm512_set1_ps(x.group_sums[(row0 + i) * groups + g]);
      total_lo[i] = _mm512_fnmadd_ps(offset_lo, sums, total_lo[i]);
      total_hi[i] = _mm512_fnmadd_ps(offset_hi, sums, total_hi[i]);
    }
  }
  const __mmask16 mask0 = LaneMask(cols), mask1 = LaneMask(cols - 16);
#pragma GCC unroll 4
  for (int i = 0; i < kWidth; ++i) {
    // Rows 0..7 then 8..15 (the low halves of the low and high nibbles' totals), then 16..31.
    _mm512_mask_storeu_ps(out + i * ldc, mask0, LowHalves(total_lo[i], total_hi[i]));
    _mm512_mask_storeu_ps(out + i * ldc + 16, mask1, HighHalves(total_lo[i], total_hi[i]));
  }
}

#undef QD_TARGET_VBMI

}  // namespace avx512vbmi_dot

namespace {

// The vector kernels, BlockInt8/BlockInt4<rows, vectors per pass>: how many of a panel's 4
// transposed vectors one pass over k takes, for each number of rows. Chosen by measurement on the
// AVX2 machine (llmserve-bench-engine, `small`, 1 thread, alternating builds): all 4 at once for
// int8, even where 4 rows' accumulators spill (batch 4 decode: 61 tok/s against 53 with one vector
// per pass; batch 2: 56 against 45 with two); int4, whose vectors come in nibble pairs, 2 per pass
// up to 2 rows and 1 for 4 (batch 4: 66-70 tok/s against 55-59 as two 2-row calls; 4 per pass at
// batch 1 ran no faster).
#define QD_KERNELS(ns)                                                \
  [] {                                                                \
    KernelSet set;                                                    \
    set.i8[0] = ns::BlockInt8<1, 4>, set.i8[1] = ns::BlockInt8<2, 4>; \
    set.i8[2] = ns::BlockInt8<4, 4>;                                  \
    set.i4[0] = ns::BlockInt4<1, 2>, set.i4[1] = ns::BlockInt4<2, 2>; \
    set.i4[2] = ns::BlockInt4<4, 1>;                                  \
    return set;                                                       \
  }()

const KernelSet& Kernels(absl::string_view isa) {
  static const KernelSet scalar = ScalarKernels();
  static const KernelSet avx2 = QD_KERNELS(avx2_dot);
  static const KernelSet avxvnni = QD_KERNELS(avxvnni_dot);
  static const KernelSet avx512vnni = QD_KERNELS(avx512vnni_dot);
  // int8 as avx512vnni (its 256-bit kernels); int4 on 512-bit vectors.
  static const KernelSet avx512vbmi = [] {
    KernelSet set = avx512vnni;
    set.i4[0] = avx512vbmi_dot::BlockInt4<1>, set.i4[1] = avx512vbmi_dot::BlockInt4<2>;
    set.i4[2] = avx512vbmi_dot::BlockInt4<4>;
    return set;
  }();
  if (isa == "avx512vbmi" && HasAvx512Vbmi()) return avx512vbmi;
  if (isa == "avx512vnni" && HasAvx512Vnni()) return avx512vnni;
  if (isa == "avxvnni" && HasAvxVnni()) return avxvnni;
  if (isa == "avx2" && HasAvx2FmaF16c()) return avx2;
  LLMSERVE_CHECK(isa == "scalar") << "no integer-dot kernels for instruction set " << isa;
  return scalar;
}

}  // namespace

#else

namespace {
const KernelSet& Kernels(absl::string_view isa) {
  static const KernelSet scalar = ScalarKernels();
  LLMSERVE_CHECK(isa == "scalar") << "no integer-dot kernels for instruction set " << isa;
  return scalar;
}
}  // namespace

#endif

int64_t ActivationBlock(const PackedMatrix& w) {
  if (w.element() == PackedElement::kInt8) return 32;
  if (w.element() != PackedElement::kInt4) return 0;
  for (const int64_t block : {32, 16, 8}) {
    if (w.group_size() % block == 0) return block;
  }
  return 0;
}

std::vector<std::string> QuantizedDotIsas() {
  std::vector<std::string> isas;
  if (HasAvx512Vbmi()) isas.push_back("avx512vbmi");
  if (HasAvx512Vnni()) isas.push_back("avx512vnni");
  if (HasAvxVnni()) isas.push_back("avxvnni");
  if (HasAvx2FmaF16c()) isas.push_back("avx2");
  isas.push_back("scalar");
  return isas;
}

void QuantizeActivations(const float* x, int64_t m, const PackedMatrix& w,
                         QuantizedActivations* out) {
  const int64_t block = ActivationBlock(w);
  LLMSERVE_CHECK(block > 0) << "no integer-dot kernel for this weight";
  const int64_t k = w.cols();
  out->m = m;
  out->k = k;
  out->block = block;
  out->int4_order = w.element() == PackedElement::kInt4;
  out->group_size = out->int4_order ? w.group_size() : 0;
  out->stride = (k + 31) / 32 * 32;
  const int64_t blocks = out->blocks();
  out->values.assign(m * out->stride, 0);
  out->scales.resize(m * blocks);
  const int64_t groups = out->int4_order ? w.groups() : 0;
  out->group_sums.assign(m * groups, 0.0f);
  for (int64_t i = 0; i < m; ++i) {
    const float* row = x + i * k;
    int8_t* values = out->values.data() + i * out->stride;
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t c0 = b * block, c1 = std::min(k, c0 + block);
      float max_abs = 0.0f;
      for (int64_t c = c0; c < c1; ++c) max_abs = std::max(max_abs, std::fabs(row[c]));
      // An all-zero block has scale 0 and values 0. Clamping (which a NaN also meets) keeps the
      // conversion defined; x * (127 / max) can exceed 127 by an ulp, never by 0.5.
      const float inverse = max_abs > 0.0f ? 127.0f / max_abs : 0.0f;
      int32_t sum = 0;
      for (int64_t c = c0; c < c1; ++c) {
        const float q = std::min(127.0f, std::max(-127.0f, std::nearbyint(row[c] * inverse)));
        values[ValueIndex(c, out->int4_order)] = static_cast<int8_t>(q);
        sum += static_cast<int32_t>(q);
      }
      const float scale = max_abs / 127.0f;
      out->scales[i * blocks + b] = scale;
      if (groups > 0) out->group_sums[i * groups + c0 / out->group_size] += scale * sum;
    }
  }
}

void QuantizedDotGemm(absl::string_view isa, const QuantizedActivations& x, const PackedMatrix& w,
                      int64_t panel_begin, int64_t panel_end, float* out, int64_t ldc) {
  const KernelSet& kernels = Kernels(isa);
  const bool int4 = w.element() == PackedElement::kInt4;
  LLMSERVE_CHECK(x.m <= kQuantizedDotMaxRows && x.k == w.cols() && x.block == ActivationBlock(w) &&
                 x.int4_order == int4);
  for (int64_t p = panel_begin; p < panel_end; ++p) {
    const int cols = static_cast<int>(std::min(kPanel, w.rows() - p * kPanel));
    const auto* panel = static_cast<const uint8_t*>(w.panel(p));
    const float* weights = int4 ? w.group_data(p) : w.scales(p);
    for (int64_t i = 0; i < x.m;) {
      const int64_t left = std::min<int64_t>(4, x.m - i);
      const int log2 = left >= 4 ? 2 : left >= 2 ? 1 : 0;
      const Kernel kernel = int4 ? kernels.i4[log2] : kernels.i8[log2];
      kernel(panel, weights, w.cols(), w.group_size(), x, i, out + i * ldc + p * kPanel, ldc, cols);
      i += int64_t{1} << log2;
    }
  }
}

}  // namespace llmserve::worker::cpu
