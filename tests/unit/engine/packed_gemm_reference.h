// The double-precision reference that the quantized packed-GEMM tests (int8, int4) check the
// kernels against, and how close an f32 kernel must come to it. Header-only, for gtest tests.

#ifndef LLMSERVE_TESTS_UNIT_ENGINE_PACKED_GEMM_REFERENCE_H_
#define LLMSERVE_TESTS_UNIT_ENGINE_PACKED_GEMM_REFERENCE_H_

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace llmserve::worker::cpu::testing {

inline std::vector<float> RandomActivations(int64_t count, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  std::vector<float> x(count);
  for (float& v : x) v = normal(rng);
  return x;
}

// out[i * ldc + r] = x[i] · w[r], and the sum of |x[i, c] * w[r, c]| (the scale of f32 rounding
// error), in double.
struct Products {
  std::vector<double> value;
  std::vector<double> magnitude;
};

// x is [m, k]; w is the dequantized weight [rows, k].
inline Products Reference(const std::vector<float>& x, int64_t m, int64_t k,
                          const std::vector<double>& w, int64_t rows, int64_t ldc) {
  Products p{std::vector<double>(m * ldc, 0.0), std::vector<double>(m * ldc, 0.0)};
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < k; ++c) {
        p.value[i * ldc + r] += x[i * k + c] * w[r * k + c];
        p.magnitude[i * ldc + r] += std::abs(x[i * k + c] * w[r * k + c]);
      }
    }
  }
  return p;
}

// f32 sums of k products (quantized values are exact in f32; scales multiply sums, per row or per
// group): the error is within a few k * 2^-24 of the sum of magnitudes; 1e-6 * k (about 17 k
// ulps) leaves room for any summation order, and for int4's per-group s * Σxq - s*z * Σx (whose
// terms are at most 16 / 4 times the average |q - z|), without hiding a wrong weight (which costs
// ~1% or more). Columns past `rows` must keep the -1 they were filled with.
inline void ExpectProducts(const Products& expected, const std::vector<float>& out, int64_t m,
                           int64_t rows, int64_t ldc, int64_t k, const std::string& what) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t r = 0; r < ldc; ++r) {
      const std::string where = absl::StrCat(what, " [", i, ",", r, "]");
      if (r < rows) {
        const double tolerance = 1e-6 * k * expected.magnitude[i * ldc + r] + 1e-30;
        ASSERT_NEAR(out[i * ldc + r], expected.value[i * ldc + r], tolerance) << where;
      } else {
        ASSERT_EQ(out[i * ldc + r], -1.0f) << where << ": written outside the rows";
      }
    }
  }
}

}  // namespace llmserve::worker::cpu::testing

#endif  // LLMSERVE_TESTS_UNIT_ENGINE_PACKED_GEMM_REFERENCE_H_
