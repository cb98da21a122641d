// The integer-dot path (--quantized_activations, quantized_dot.h): the activation quantizer against
// its definition; every kernel this CPU runs and the scalar one, for int8 and int4 weights, against
// plain loops in double over the dequantized weights times the *dequantized quantized*
// activations (the f32 tolerance: this is what the kernels compute), and against the unquantized
// activations within the bound that quantization error implies; MatMul's choice of path.

#include "worker/engine/cpu/quantized_dot.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/unit/worker/engine/packed_gemm_reference.h"
#include "worker/engine/cpu/matmul.h"
#include "worker/engine/cpu/packed_matrix.h"
#include "worker/engine/cpu/parallel_for_pool.h"
#include "worker/model/dtype.h"
#include "worker/model/int4_matrix.h"

namespace llmserve::worker::cpu {
namespace {

using testing::Dequantized;
using testing::ExpectProducts;
using testing::Int8Weight;
using testing::Products;
using testing::RandomActivations;
using testing::RandomInt4;
using testing::RandomInt4WithOffsets;
using testing::RandomInt8Weight;
using testing::Reference;

// Activations with rows and blocks of different magnitudes, an all-zero block, and outliers (the
// case per-block scales are for).
std::vector<float> SpreadActivations(int64_t m, int64_t k, std::mt19937& rng) {
  std::vector<float> x = RandomActivations(m * k, rng);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t c = 0; c < k; ++c)
      x[i * k + c] *= std::ldexp(1.0f, static_cast<int>((i + c / 8) % 5) - 2);
    if (k > 7) x[i * k + (i * 7) % k] *= 20.0f;
  }
  if (m > 1 && k >= 16) std::fill(x.begin() + k, x.begin() + k + 8, 0.0f);
  return x;
}

// The quantized activations as doubles, q * s, read back in column order, and the definition's
// per-element bound s / 2 (for the unquantized comparison).
struct Dequantized8 {
  std::vector<double> x;      // [m, k]
  std::vector<double> bound;  // [m, k]: s / 2 of the element's block
};

Dequantized8 ReadBack(const QuantizedActivations& q) {
  Dequantized8 d{std::vector<double>(q.m * q.k), std::vector<double>(q.m * q.k)};
  for (int64_t i = 0; i < q.m; ++i) {
    for (int64_t c = 0; c < q.k; ++c) {
      const int64_t j = c % 8;
      const int64_t at = q.int4_order ? c - j + (j % 2) * 4 + j / 2 : c;
      const double s = q.scales[i * q.blocks() + c / q.block];
      d.x[i * q.k + c] = q.values[i * q.stride + at] * s;
      d.bound[i * q.k + c] = s / 2;
    }
  }
  return d;
}

// out[i * ldc + r] = x[i] · w[r] in double, for double x, with the sum of magnitudes |x| *
// magnitude[r, c] (Products; magnitude defaults to |w|).
Products ReferenceD(const std::vector<double>& x, int64_t m, int64_t k,
                    const std::vector<double>& w, int64_t rows, int64_t ldc,
                    const std::vector<double>* magnitude = nullptr) {
  Products p{std::vector<double>(m * ldc, 0.0), std::vector<double>(m * ldc, 0.0)};
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < k; ++c) {
        p.value[i * ldc + r] += x[i * k + c] * w[r * k + c];
        p.magnitude[i * ldc + r] +=
            std::abs(x[i * k + c]) *
            (magnitude != nullptr ? (*magnitude)[r * k + c] : std::abs(w[r * k + c]));
      }
    }
  }
  return p;
}

// The int4 kernels compute s * Σ q x - offset * Σ x per group: their f32 rounding scales with
// q * s + |offset|, not with |q * s - offset|.
std::vector<double> SplitMagnitude(const Int4Matrix& w) {
  std::vector<double> d(w.rows * w.cols);
  for (int64_t r = 0; r < w.rows; ++r) {
    for (int64_t c = 0; c < w.cols; ++c) {
      const int64_t g = c / w.group_size;
      d[r * w.cols + c] = static_cast<double>(w.Value(r, c)) * w.Scale(r, g) +
                          std::abs(static_cast<double>(w.Offset(r, g)));
    }
  }
  return d;
}

// Against the unquantized activations: each activation moved by at most s / 2 of its block, so
// output (i, r) moved by at most Σ_c s_b(c) / 2 * |w[r, c]|, plus the f32 rounding of the kernel
// (ExpectProducts's 1e-6 * k of the magnitude). The bound is reached only if every rounding error
// lines up with its weight's sign; the test also reports how much of it was used.
void ExpectWithinQuantizationBound(const std::vector<float>& x, const Dequantized8& q, int64_t m,
                                   int64_t k, const std::vector<double>& w, int64_t rows,
                                   int64_t ldc, const std::vector<float>& out,
                                   const std::string& what, double* worst_fraction) {
  const Products exact = Reference(x, m, k, w, rows, ldc);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t r = 0; r < rows; ++r) {
      double bound = 0;
      for (int64_t c = 0; c < k; ++c) bound += q.bound[i * k + c] * std::abs(w[r * k + c]);
      const double error = std::abs(out[i * ldc + r] - exact.value[i * ldc + r]);
      const double f32 = 1e-6 * k * exact.magnitude[i * ldc + r] + 1e-30;
      ASSERT_LE(error, bound * (1 + 1e-6) + f32) << what << " [" << i << "," << r << "]";
      if (bound > 0) *worst_fraction = std::max(*worst_fraction, error / (bound + f32));
    }
  }
}

std::vector<float> RunKernel(const std::string& isa, const QuantizedActivations& q,
                             const PackedMatrix& w, int64_t ldc) {
  std::vector<float> out(q.m * ldc, -1.0f);
  QuantizedDotGemm(isa, q, w, 0, w.num_panels(), out.data(), ldc);
  return out;
}

TEST(QuantizeActivationsTest, FollowsItsDefinition) {
  std::mt19937 rng(5);
  Int8Weight w8 = RandomInt8Weight(DType::kF32, 4, 77, rng);
  const PackedMatrix int8 = PackedMatrix::QuantizeInt8(w8.tensor);
  const PackedMatrix int4 = PackedMatrix::PackInt4(RandomInt4(4, 96, 24, rng));
  EXPECT_EQ(ActivationBlock(int8), 32);
  EXPECT_EQ(ActivationBlock(int4), 8);  // 24 = 3 x 8
  EXPECT_EQ(ActivationBlock(PackedMatrix::PackInt4(RandomInt4(4, 128, 64, rng))), 32);
  EXPECT_EQ(ActivationBlock(PackedMatrix::PackInt4(RandomInt4(4, 48, 48, rng))), 16);
  EXPECT_EQ(ActivationBlock(PackedMatrix::PackInt4(RandomInt4(4, 16, 2, rng))), 0);
  for (const PackedMatrix* w : {&int8, &int4}) {
    const int64_t m = 3, k = w->cols();
    const std::vector<float> x = SpreadActivations(m, k, rng);
    QuantizedActivations q;
    QuantizeActivations(x.data(), m, *w, &q);
    ASSERT_EQ(q.int4_order, w == &int4);
    const Dequantized8 d = ReadBack(q);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t b = 0; b < q.blocks(); ++b) {
        const int64_t c0 = b * q.block, c1 = std::min(k, c0 + q.block);
        float max_abs = 0;
        for (int64_t c = c0; c < c1; ++c) max_abs = std::max(max_abs, std::fabs(x[i * k + c]));
        ASSERT_EQ(q.scales[i * q.blocks() + b], max_abs / 127.0f);
        for (int64_t c = c0; c < c1; ++c) {
          const double s = q.scales[i * q.blocks() + b];
          ASSERT_LE(std::abs(d.x[i * k + c] - x[i * k + c]), s / 2 * (1 + 1e-6)) << i << "," << c;
          ASSERT_LE(std::abs(d.x[i * k + c]), 127 * s * (1 + 1e-12));
        }
      }
      for (int64_t c = k; c < q.stride; ++c) ASSERT_EQ(q.values[i * q.stride + c], 0);
      if (q.int4_order) {
        for (int64_t g = 0; g < w->groups(); ++g) {
          double expected = 0;
          for (int64_t c = g * w->group_size(); c < (g + 1) * w->group_size(); ++c) {
            expected += d.x[i * k + c];
          }
          ASSERT_NEAR(q.group_sums[i * w->groups() + g], expected, 1e-5 * (1 + std::abs(expected)));
        }
      }
    }
  }
}

// Batches 1 to 8 and 16 (every kernel width and the remainders the driver splits off), k with odd
// tails (int8: 1, 3 and 7 past a multiple of 4 and of the 32-column block), outputs of 1, 32, 45
// and 84 rows (panel tails through the kernels' 4-row stores).
const int64_t kBatches[] = {1, 2, 3, 4, 5, 7, 8, 16};
const int64_t kInt8Depths[] = {1, 3, 7, 32, 45, 67, 130, 576};
const int64_t kOutputs[] = {1, 32, 45, 84};
// int4: blocks of 8 (groups of 8, 24 and 40 columns), 16 (48) and 32 (32, 64, 128, whole rows).
const std::pair<int64_t, int64_t> kInt4DepthsAndGroups[] = {
    {8, 8},    {48, 8},   {48, 24},   {120, 40}, {48, 48},    {32, 32},
    {128, 32}, {256, 64}, {256, 128}, {576, 64}, {1024, 128}, {512, 512}};

TEST(QuantizedDotTest, Int8MatchesReferenceOnQuantizedActivationsForEveryIsa) {
  std::mt19937 rng(41);
  double worst = 0;
  for (int64_t k : kInt8Depths) {
    for (int64_t n : kOutputs) {
      const Int8Weight w = RandomInt8Weight(DType::kF32, n, k, rng);
      const PackedMatrix packed = PackedMatrix::QuantizeInt8(w.tensor);
      for (int64_t m : kBatches) {
        const int64_t ldc = n + 3;
        const std::vector<float> x = SpreadActivations(m, k, rng);
        QuantizedActivations q;
        QuantizeActivations(x.data(), m, packed, &q);
        const Dequantized8 d = ReadBack(q);
        const Products expected = ReferenceD(d.x, m, k, w.dequantized, n, ldc);
        for (const std::string& isa : QuantizedDotIsas()) {
          const std::string what = absl::StrCat(isa, " m=", m, " k=", k, " n=", n);
          const std::vector<float> out = RunKernel(isa, q, packed, ldc);
          ExpectProducts(expected, out, m, n, ldc, k, what);
          if (HasFatalFailure()) return;
          ExpectWithinQuantizationBound(x, d, m, k, w.dequantized, n, ldc, out, what, &worst);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
  // The bound is met, and used: the quantization does move the outputs.
  EXPECT_GT(worst, 0.01);
}

TEST(QuantizedDotTest, Int4MatchesReferenceOnQuantizedActivationsForEveryIsa) {
  std::mt19937 rng(43);
  double worst = 0;
  for (const auto& [k, group_size] : kInt4DepthsAndGroups) {
    for (int64_t n : kOutputs) {
      // RandomInt4 gives zero points 16 and 0 to every (row, group) at 0 and 1 mod 7, and one
      // all-zero scale; odd output counts get GGUF's f32 offsets instead of zero points.
      const Int4Matrix w = n % 2 == 1 ? RandomInt4WithOffsets(n, k, group_size, rng)
                                      : RandomInt4(n, k, group_size, rng);
      const std::vector<double> dequantized = Dequantized(w);
      const std::vector<double> split = SplitMagnitude(w);
      const PackedMatrix packed = PackedMatrix::PackInt4(w);
      for (int64_t m : kBatches) {
        const int64_t ldc = n + 3;
        const std::vector<float> x = SpreadActivations(m, k, rng);
        QuantizedActivations q;
        QuantizeActivations(x.data(), m, packed, &q);
        const Dequantized8 d = ReadBack(q);
        const Products expected = ReferenceD(d.x, m, k, dequantized, n, ldc, &split);
        for (const std::string& isa : QuantizedDotIsas()) {
          const std::string what =
              absl::StrCat(isa, " m=", m, " k=", k, " group=", group_size, " n=", n);
          const std::vector<float> out = RunKernel(isa, q, packed, ldc);
          ExpectProducts(expected, out, m, n, ldc, k, what);
          if (HasFatalFailure()) return;
          ExpectWithinQuantizationBound(x, d, m, k, dequantized, n, ldc, out, what, &worst);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
  EXPECT_GT(worst, 0.01);
}

// The scalar kernel computes int8 in the vector kernels' order: bitwise the same outputs.
TEST(QuantizedDotTest, Int8VectorKernelsEqualScalarBitwise) {
  std::mt19937 rng(47);
  const Int8Weight w = RandomInt8Weight(DType::kF32, 70, 301, rng);
  const PackedMatrix packed = PackedMatrix::QuantizeInt8(w.tensor);
  for (int64_t m : {1, 2, 4, 7}) {
    const std::vector<float> x = SpreadActivations(m, 301, rng);
    QuantizedActivations q;
    QuantizeActivations(x.data(), m, packed, &q);
    const std::vector<float> scalar = RunKernel("scalar", q, packed, 70);
    for (const std::string& isa : QuantizedDotIsas()) {
      EXPECT_EQ(RunKernel(isa, q, packed, 70), scalar) << isa << " m=" << m;
    }
  }
}

// MatMul takes the integer path for int8 and int4 weights up to kQuantizedDotMaxRows rows when
// asked (matching the quantized-activation reference, and not the f32 one at its tolerance), and
// the f32 kernels above that, for int4 groups it has no kernel for, and when not asked.
TEST(QuantizedDotTest, MatMulChoosesThePath) {
  std::mt19937 rng(53);
  ParallelForPool pool(2);
  MatMul quantized(&pool, /*quantized_activations=*/true);
  MatMul exact(&pool);
  const int64_t n = 70;
  struct Case {
    ProjectionWeight w;
    std::vector<double> dequantized;
    std::vector<double> split;  // int4: SplitMagnitude
    bool integer;
  };
  std::vector<Case> cases;
  {
    Int8Weight w = RandomInt8Weight(DType::kF32, n, 160, rng);
    cases.push_back({ProjectionWeight::QuantizedInt8(w.tensor), w.dequantized, {}, true});
    const Int4Matrix w4 = RandomInt4(n, 256, 64, rng);
    cases.push_back({ProjectionWeight::Int4(w4), Dequantized(w4), SplitMagnitude(w4), true});
    const Int4Matrix w2 = RandomInt4(n, 64, 2, rng);
    cases.push_back({ProjectionWeight::Int4(w2), Dequantized(w2), {}, false});
  }
  for (const Case& c : cases) {
    const int64_t k = c.w.cols();
    for (int64_t m : {int64_t{1}, int64_t{3}, kQuantizedDotMaxRows, kQuantizedDotMaxRows + 1}) {
      const std::vector<float> x = SpreadActivations(m, k, rng);
      const Products f32 = Reference(x, m, k, c.dequantized, n, n);
      std::vector<float> out(m * n, -1.0f);
      exact.Run(x.data(), m, c.w, out.data());
      ExpectProducts(f32, out, m, n, n, k, absl::StrCat("f32 m=", m, " k=", k));
      quantized.Run(x.data(), m, c.w, out.data());
      const bool integer = c.integer && m <= kQuantizedDotMaxRows;
      if (!integer) {
        ExpectProducts(f32, out, m, n, n, k, absl::StrCat("f32 path m=", m, " k=", k));
        continue;
      }
      QuantizedActivations q;
      QuantizeActivations(x.data(), m, c.w.packed(), &q);
      ExpectProducts(ReferenceD(ReadBack(q).x, m, k, c.dequantized, n, n,
                                c.split.empty() ? nullptr : &c.split),
                     out, m, n, n, k, absl::StrCat("integer path m=", m, " k=", k));
      double largest_miss = 0;
      for (int64_t i = 0; i < m * n; ++i) {
        largest_miss = std::max(
            largest_miss, std::abs(out[i] - f32.value[i]) / (1e-6 * k * f32.magnitude[i] + 1e-30));
      }
      EXPECT_GT(largest_miss, 1.0) << "the integer path should not meet the f32 tolerance, k=" << k;
    }
  }
}

}  // namespace
}  // namespace llmserve::worker::cpu
