// The int4 weight path (AWQ/GPTQ group quantization, int4_matrix.h) against plain loops in double
// over Int4Matrix::Dequantized: the packed layout and its padding; the packed GEMM's int4 kernels
// on every instruction set this CPU runs, for every block width, k, group size (one column, odd
// ones, a whole row) and panel tail, in registers (decode) and through a dequantized panel
// (passes of more than 4 row blocks); the portable baseline (dequantize + sgemm) on every CPU;
// MatMul and ProjectionWeight with int4 weights.

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/unit/worker/engine/packed_gemm_reference.h"
#include "worker/engine/cpu/aligned_vector.h"
#include "worker/engine/cpu/matmul.h"
#include "worker/engine/cpu/packed_gemm.h"
#include "worker/engine/cpu/packed_matrix.h"
#include "worker/engine/cpu/parallel_for_pool.h"
#include "worker/model/int4_matrix.h"

namespace llmserve::worker::cpu {
namespace {

using testing::Dequantized;
using testing::ExpectProducts;
using testing::Products;
using testing::RandomActivations;
using testing::RandomInt4;
using testing::RandomInt4WithOffsets;
using testing::Reference;

// Runs `isa`'s packed GEMM ("baseline": PackedGemmBaseline) over panels [begin, end).
std::vector<float> Multiply(const std::string& isa, const std::vector<float>& x, int64_t m,
                            const PackedMatrix& w, int64_t begin, int64_t end, int64_t ldc) {
  const int64_t k = w.cols();
  std::vector<float> out(m * ldc, -1.0f);
  std::vector<float> scratch(PackedMatrix::kPanelRows * k, NAN);
  if (isa == "baseline") {
    PackedGemmBaseline(x.data(), m, w, begin, end, out.data(), ldc, scratch.data());
  } else {
    AlignedVector<float> packed_x(PackedActivationsSize(isa, m, k), NAN);
    PackActivations(isa, x.data(), m, k, 0, PackedActivationBlocks(isa, m), packed_x.data());
    PackedGemm(isa, packed_x.data(), m, w, begin, end, out.data(), ldc, scratch.data());
  }
  return out;
}

// Batches of 1, 2, 4 and 8 rows (blocks of every width, padded last blocks) and 33 and 40 rows
// (more than 4 blocks on either ISA: the panel is dequantized into scratch first); k from one
// AVX2 vector of nibbles up, with group sizes of 1 and 2 (a group per column or two), 8, 24 (not
// a power of two), 32, 128 and a whole row; one row, one panel, and panel tails of 13 and 20 rows
// (the AVX2 kernel's halves and the AVX-512 kernel's masks cut short).
const int64_t kBatches[] = {1, 2, 3, 4, 5, 8, 9, 17, 33, 40};
const std::pair<int64_t, int64_t> kDepthsAndGroups[] = {
    {8, 1},     {8, 8},   {16, 2},   {16, 8},    {48, 8},    {48, 24},    {48, 48},    {128, 32},
    {128, 128}, {256, 8}, {256, 32}, {256, 256}, {1024, 32}, {1024, 128}, {1024, 1024}};
const int64_t kOutputs[] = {1, 32, 45, 84};

TEST(Int4PackedGemmTest, MatchesDequantizedReferenceForEveryIsaBatchGroupAndTail) {
  std::vector<std::string> isas = PackedGemmIsas();
  isas.push_back("baseline");
  std::mt19937 rng(23);
  for (const auto& [k, group_size] : kDepthsAndGroups) {
    for (int64_t n : kOutputs) {
      // Odd output counts in GGUF's form (f32 offsets), even ones with zero points.
      const Int4Matrix w = n % 2 == 1 ? RandomInt4WithOffsets(n, k, group_size, rng)
                                      : RandomInt4(n, k, group_size, rng);
      const std::vector<double> dequantized = Dequantized(w);
      const PackedMatrix packed = PackedMatrix::PackInt4(w);
      ASSERT_EQ(packed.element(), PackedElement::kInt4);
      for (int64_t m : kBatches) {
        const int64_t ldc = n + 3;
        const std::vector<float> x = RandomActivations(m * k, rng);
        const Products expected = Reference(x, m, k, dequantized, n, ldc);
        for (const std::string& isa : isas) {
          ExpectProducts(expected, Multiply(isa, x, m, packed, 0, packed.num_panels(), ldc), m, n,
                         ldc, k,
                         absl::StrCat(isa, " m=", m, " k=", k, " group=", group_size, " n=", n));
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST(Int4PackedGemmTest, WritesOnlyTheRowsOfItsPanels) {
  std::mt19937 rng(31);
  const int64_t m = 9, n = 70, k = 48;
  std::vector<std::string> isas = PackedGemmIsas();
  isas.push_back("baseline");
  for (const std::string& isa : isas) {
    const Int4Matrix w = RandomInt4(n, k, 24, rng);
    const PackedMatrix packed = PackedMatrix::PackInt4(w);
    const std::vector<float> x = RandomActivations(m * k, rng);
    const std::vector<float> out = Multiply(isa, x, m, packed, 1, 3, n);
    const Products expected = Reference(x, m, k, Dequantized(w), n, n);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t r = 0; r < n; ++r) {
        const std::string where = absl::StrCat(isa, " [", i, ",", r, "]");
        if (r < PackedMatrix::kPanelRows) {
          ASSERT_EQ(out[i * n + r], -1.0f) << where << ": panel 0 was not asked for";
        } else {
          ASSERT_NEAR(out[i * n + r], expected.value[i * n + r],
                      1e-6 * k * expected.magnitude[i * n + r])
              << where;
        }
      }
    }
  }
}

TEST(Int4PackedMatrixTest, LayoutIsAsDocumentedAndPaddingIsZero) {
  for (const bool offsets : {false, true}) {
    std::mt19937 rng(43);
    const int64_t n = 45, k = 16, group_size = 8;
    const Int4Matrix w =
        offsets ? RandomInt4WithOffsets(n, k, group_size, rng) : RandomInt4(n, k, group_size, rng);
    const PackedMatrix packed = PackedMatrix::PackInt4(w);
    ASSERT_EQ(packed.num_panels(), 2);
    EXPECT_EQ(packed.PanelBytes(), 16 * k);
    EXPECT_EQ(packed.group_size(), group_size);
    EXPECT_EQ(packed.groups(), 2);
    for (int64_t p = 0; p < packed.num_panels(); ++p) {
      const auto* panel = static_cast<const uint8_t*>(packed.panel(p));
      const float* data = packed.group_data(p);
      for (int64_t lane = 0; lane < PackedMatrix::kPanelRows; ++lane) {
        const int64_t r = p * PackedMatrix::kPanelRows + lane;
        // Byte b = 8h + j holds row 16h + j in its low nibble and row 16h + 8 + j in its high one.
        const int64_t byte = (lane / 16) * 8 + lane % 8;
        const int shift = lane % 16 < 8 ? 0 : 4;
        for (int64_t c = 0; c < k; ++c) {
          const int q = (panel[c * 16 + byte] >> shift) & 0xF;
          ASSERT_EQ(q, r < n ? w.Value(r, c) : 0) << "row " << r << " column " << c;
        }
        for (int64_t g = 0; g < packed.groups(); ++g) {
          const float scale = r < n ? w.Scale(r, g) : 0.0f;
          EXPECT_EQ(data[g * 64 + lane], scale) << "row " << r << " group " << g;
          EXPECT_EQ(data[g * 64 + 32 + lane], r < n ? w.Offset(r, g) : 0.0f)
              << "row " << r << " group " << g;
          if (r < n && !offsets) {
            EXPECT_EQ(w.Offset(r, g), scale * w.Zero(r, g));
          }
        }
      }
    }
  }
}

TEST(Int4ProjectionWeightTest, CopyRowDequantizesAndSizeCountsValuesScalesAndOffsets) {
  std::mt19937 rng(37);
  const int64_t n = 70, k = 48;
  for (const bool offsets : {false, true}) {
    const Int4Matrix w = offsets ? RandomInt4WithOffsets(n, k, 24, rng) : RandomInt4(n, k, 24, rng);
    const ProjectionWeight weight = ProjectionWeight::Int4(w);
    EXPECT_TRUE(weight.is_int4());
    EXPECT_FALSE(weight.is_int8());
    EXPECT_EQ(weight.dtype(), DType::kF32);
    EXPECT_EQ(weight.rows(), n);
    EXPECT_EQ(weight.cols(), k);
    // Three panels of 16 bytes x 48 columns, and per panel 2 groups x (32 scales + 32 offsets).
    EXPECT_EQ(weight.SizeBytes(), 3 * 16 * 48 + 3 * 2 * 64 * 4);
    std::vector<float> row(k);
    for (int64_t r = 0; r < n; ++r) {
      weight.CopyRow(r, row.data());
      for (int64_t c = 0; c < k; ++c) {
        ASSERT_EQ(row[c], w.Dequantized(r, c)) << "[" << r << "," << c << "]";
      }
    }
  }
}

TEST(Int4MatMulTest, MatchesDequantizedReferenceOnThisCpusPath) {
  std::mt19937 rng(41);
  for (int threads : {1, 2, 3}) {
    ParallelForPool pool(threads);
    MatMul matmul(&pool);
    for (int64_t m : {1, 3, 4, 5, 17, 40}) {
      const int64_t n = 70, k = 256;
      const Int4Matrix w =
          m % 2 == 1 ? RandomInt4WithOffsets(n, k, 32, rng) : RandomInt4(n, k, 32, rng);
      const ProjectionWeight weight = ProjectionWeight::Int4(w, &pool);
      const std::vector<float> x = RandomActivations(m * k, rng);
      std::vector<float> out(m * n);
      matmul.Run(x.data(), m, weight, out.data());
      ExpectProducts(Reference(x, m, k, Dequantized(w), n, n), out, m, n, n, k,
                     absl::StrCat("threads=", threads, " m=", m));
      if (HasFatalFailure()) return;
    }
  }
}

}  // namespace
}  // namespace llmserve::worker::cpu
