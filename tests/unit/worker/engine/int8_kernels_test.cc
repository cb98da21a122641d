// The int8 weight path (--quantization=int8) against plain loops in double over the dequantized
// weights (q * scale): the packed GEMM's int8 kernels on every instruction set this CPU runs, for
// every block width, k and panel tail, in registers (decode) and through a dequantized panel
// (prefill passes of more than 4 row blocks); the portable baseline (dequantize + sgemm) on every
// CPU; MatMul and ProjectionWeight with int8 weights.

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/unit/worker/engine/packed_gemm_reference.h"
#include "worker/engine/cpu/aligned_vector.h"
#include "worker/engine/cpu/matmul.h"
#include "worker/engine/cpu/packed_gemm.h"
#include "worker/engine/cpu/packed_matrix.h"
#include "worker/engine/cpu/parallel_for_pool.h"
#include "worker/model/dtype.h"
#include "worker/model/model_weights.h"
#include "worker/model/quantization.h"

namespace llmserve::worker::cpu {
namespace {

using testing::ExpectProducts;
using testing::Int8Weight;
using testing::Products;
using testing::RandomActivations;
using testing::RandomInt8Weight;
using testing::Reference;

// Batches of 1, 2, 4 and 8 rows (blocks of every width, padded last blocks) and 33 and 40 rows
// (more than 4 blocks on either ISA: the panel is dequantized into scratch first); k below,
// at and above the vector widths; one row, one panel, and panel tails of 13 and 20 rows (the AVX2
// kernel's two halves cut short).
const int64_t kBatches[] = {1, 2, 3, 4, 5, 8, 9, 17, 33, 40};
const int64_t kDepths[] = {1, 7, 16, 45, 130};
const int64_t kOutputs[] = {1, 32, 45, 84};

TEST(Int8PackedGemmTest, MatchesDequantizedReferenceForEveryIsaBatchAndTail) {
  if (!PackedGemmAvailable()) GTEST_SKIP() << "this CPU has neither AVX-512 nor AVX2";
  std::mt19937 rng(23);
  for (const std::string& isa : PackedGemmIsas()) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      for (int64_t m : kBatches) {
        for (int64_t k : kDepths) {
          for (int64_t n : kOutputs) {
            const int64_t ldc = n + 3;
            const Int8Weight w = RandomInt8Weight(dtype, n, k, rng);
            const PackedMatrix packed = PackedMatrix::QuantizeInt8(w.tensor);
            ASSERT_EQ(packed.element(), PackedElement::kInt8);
            const std::vector<float> x = RandomActivations(m * k, rng);
            AlignedVector<float> packed_x(PackedActivationsSize(isa, m, k), NAN);
            PackActivations(isa, x.data(), m, k, 0, PackedActivationBlocks(isa, m),
                            packed_x.data());
            std::vector<float> out(m * ldc, -1.0f);
            std::vector<float> scratch(PackedMatrix::kPanelRows * k, NAN);
            PackedGemm(isa, packed_x.data(), m, packed, 0, packed.num_panels(), out.data(), ldc,
                       scratch.data());
            ExpectProducts(
                Reference(x, m, k, w.dequantized, n, ldc), out, m, n, ldc, k,
                absl::StrCat(isa, " from ", DTypeName(dtype), " m=", m, " k=", k, " n=", n));
            if (HasFatalFailure()) return;
          }
        }
      }
    }
  }
}

TEST(Int8PackedGemmTest, BaselineMatchesDequantizedReferenceOnEveryCpu) {
  std::mt19937 rng(29);
  for (int64_t m : kBatches) {
    for (int64_t k : kDepths) {
      for (int64_t n : kOutputs) {
        const int64_t ldc = n + 3;
        const Int8Weight w = RandomInt8Weight(DType::kF16, n, k, rng);
        const PackedMatrix packed = PackedMatrix::QuantizeInt8(w.tensor);
        const std::vector<float> x = RandomActivations(m * k, rng);
        std::vector<float> out(m * ldc, -1.0f);
        std::vector<float> scratch(PackedMatrix::kPanelRows * k, NAN);
        PackedGemmBaseline(x.data(), m, packed, 0, packed.num_panels(), out.data(), ldc,
                           scratch.data());
        ExpectProducts(Reference(x, m, k, w.dequantized, n, ldc), out, m, n, ldc, k,
                       absl::StrCat("baseline m=", m, " k=", k, " n=", n));
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST(Int8PackedGemmTest, WritesOnlyTheRowsOfItsPanels) {
  std::mt19937 rng(31);
  const int64_t m = 9, n = 70, k = 20;
  std::vector<std::string> isas = PackedGemmIsas();
  isas.push_back("baseline");
  for (const std::string& isa : isas) {
    const Int8Weight w = RandomInt8Weight(DType::kF32, n, k, rng);
    const PackedMatrix packed = PackedMatrix::QuantizeInt8(w.tensor);
    const std::vector<float> x = RandomActivations(m * k, rng);
    std::vector<float> out(m * n, -1.0f);
    std::vector<float> scratch(PackedMatrix::kPanelRows * k);
    if (isa == "baseline") {
      PackedGemmBaseline(x.data(), m, packed, 1, 3, out.data(), n, scratch.data());
    } else {
      AlignedVector<float> packed_x(PackedActivationsSize(isa, m, k));
      PackActivations(isa, x.data(), m, k, 0, PackedActivationBlocks(isa, m), packed_x.data());
      PackedGemm(isa, packed_x.data(), m, packed, 1, 3, out.data(), n, scratch.data());
    }
    const Products expected = Reference(x, m, k, w.dequantized, n, n);
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

TEST(Int8ProjectionWeightTest, CopyRowDequantizesAndSizeCountsBytesAndScales) {
  std::mt19937 rng(37);
  const int64_t n = 70, k = 45;
  const Int8Weight w = RandomInt8Weight(DType::kBF16, n, k, rng);
  const ProjectionWeight weight = ProjectionWeight::QuantizedInt8(w.tensor);
  EXPECT_TRUE(weight.is_int8());
  EXPECT_EQ(weight.rows(), n);
  EXPECT_EQ(weight.cols(), k);
  // Three panels of 32 rows x 45 bytes, and 96 f32 scales.
  EXPECT_EQ(weight.SizeBytes(), 3 * 32 * 45 + 96 * 4);
  std::vector<float> row(k);
  for (int64_t r = 0; r < n; ++r) {
    weight.CopyRow(r, row.data());
    for (int64_t c = 0; c < k; ++c) {
      ASSERT_EQ(row[c], static_cast<float>(w.dequantized[r * k + c]))
          << "[" << r << "," << c << "]";
    }
  }
}

TEST(Int8MatMulTest, MatchesDequantizedReferenceOnThisCpusPath) {
  std::mt19937 rng(41);
  for (int threads : {1, 2, 3}) {
    ParallelForPool pool(threads);
    MatMul matmul(&pool);
    for (int64_t m : {1, 3, 4, 5, 17, 40}) {
      const int64_t n = 70, k = 45;
      const Int8Weight w = RandomInt8Weight(DType::kF32, n, k, rng);
      const ProjectionWeight weight = ProjectionWeight::QuantizedInt8(w.tensor, &pool);
      const std::vector<float> x = RandomActivations(m * k, rng);
      std::vector<float> out(m * n);
      matmul.Run(x.data(), m, weight, out.data());
      ExpectProducts(Reference(x, m, k, w.dequantized, n, n), out, m, n, n, k,
                     absl::StrCat("threads=", threads, " m=", m));
      if (HasFatalFailure()) return;
    }
  }
}

}  // namespace
}  // namespace llmserve::worker::cpu
