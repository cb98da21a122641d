// The double-precision reference that the quantized packed-GEMM tests (int8, int4, integer dot)
// check the kernels against, the random weights they use, and how close an f32 kernel must come.
// Header-only, for gtest tests.

#ifndef LLMSERVE_TESTS_UNIT_ENGINE_PACKED_GEMM_REFERENCE_H_
#define LLMSERVE_TESTS_UNIT_ENGINE_PACKED_GEMM_REFERENCE_H_

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/model/dtype.h"
#include "worker/model/int4_matrix.h"
#include "worker/model/model_weights.h"
#include "worker/model/quantization.h"

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

// A [rows, k] weight of `dtype` with random values (rows of different magnitudes, one all zero
// when there are several), and its int8 dequantization q * scale, computed by the same
// QuantizeRowInt8 the packing uses (quantization_test checks that function on its own).
struct Int8Weight {
  Tensor tensor;
  std::vector<double> dequantized;  // [rows, k]
};

inline Int8Weight RandomInt8Weight(DType dtype, int64_t rows, int64_t k, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  std::vector<float> values(rows * k);
  for (int64_t r = 0; r < rows; ++r) {
    const float magnitude =
        rows > 2 && r == 1 ? 0.0f : std::ldexp(1.0f, static_cast<int>(r % 5) - 2);
    for (int64_t c = 0; c < k; ++c) values[r * k + c] = magnitude * normal(rng);
  }
  Int8Weight w{Tensor(dtype, {rows, k}), std::vector<double>(rows * k)};
  ConvertElements(values.data(), DType::kF32, w.tensor.data(), dtype, values.size());
  std::vector<float> widened(rows * k);
  ConvertElements(w.tensor.data(), dtype, widened.data(), DType::kF32, values.size());
  std::vector<int8_t> q(k);
  for (int64_t r = 0; r < rows; ++r) {
    float scale = 0;
    QuantizeRowInt8(widened.data() + r * k, k, q.data(), &scale);
    for (int64_t c = 0; c < k; ++c) w.dequantized[r * k + c] = static_cast<double>(q[c]) * scale;
  }
  return w;
}

// A [rows, cols] Int4Matrix with random values 0..15 and zero points 0..16 (every (row, group)
// whose index is 0 or 1 mod 7 gets 16 or 0, the ends GPTQ and AWQ reach), and scales as a
// checkpoint's f16 would be (11 significant bits) of magnitudes 2^-9 to 2^-3 by row, with one
// all-zero group when there are several rows.
inline Int4Matrix RandomInt4(int64_t rows, int64_t cols, int64_t group_size, std::mt19937& rng) {
  Int4Matrix w;
  w.rows = rows;
  w.cols = cols;
  w.group_size = group_size;
  w.packed_values.resize(rows * cols / 2);
  for (uint8_t& byte : w.packed_values) byte = static_cast<uint8_t>(rng() & 0xFF);
  const int64_t groups = w.groups();
  w.zeros.resize(rows * groups);
  w.scales.resize(rows * groups);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t i = r * groups + g;
      w.zeros[i] = static_cast<uint8_t>(i % 7 == 0 ? 16 : i % 7 == 1 ? 0 : rng() % 17);
      const int mantissa = 1024 + static_cast<int>(rng() % 1024);
      w.scales[i] = std::ldexp(static_cast<float>(mantissa), static_cast<int>(r % 7) - 19);
    }
  }
  if (rows > 2) w.scales[1 * groups + groups / 2] = 0.0f;
  return w;
}

// RandomInt4 in GGUF's form: each (row, group)'s zero point is replaced by an f32 offset, the
// offset the zero point gave plus a random f16-sized term of either sign (Q4_1's and Q4_K's
// minimums are not multiples of the scale), and `zeros` is emptied.
inline Int4Matrix RandomInt4WithOffsets(int64_t rows, int64_t cols, int64_t group_size,
                                        std::mt19937& rng) {
  Int4Matrix w = RandomInt4(rows, cols, group_size, rng);
  w.offsets.resize(w.zeros.size());
  for (size_t i = 0; i < w.zeros.size(); ++i) {
    const int mantissa = static_cast<int>(rng() % 2048) - 1024;
    w.offsets[i] = w.scales[i] * static_cast<float>(w.zeros[i]) +
                   std::ldexp(static_cast<float>(mantissa), -14);
  }
  w.zeros.clear();
  return w;
}

inline std::vector<double> Dequantized(const Int4Matrix& w) {
  std::vector<double> d(w.rows * w.cols);
  for (int64_t r = 0; r < w.rows; ++r) {
    for (int64_t c = 0; c < w.cols; ++c) d[r * w.cols + c] = w.Dequantized(r, c);
  }
  return d;
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
