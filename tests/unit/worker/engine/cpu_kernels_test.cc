// The CPU backend's building blocks against plain loops: the small-batch bf16 GEMV on every batch
// size and row-length tail; the packed GEMM for every ISA, block width and panel tail; MatMul
// on every path (packed, GEMV, BLAS, bf16 GEMM); paged attention on every ISA; the activations;
// the thread pool covering every index exactly once, whether its workers spin or sleep between
// loops.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/engine/cpu/aligned_vector.h"
#include "worker/engine/cpu/bf16_gemm.h"
#include "worker/engine/cpu/kernels.h"
#include "worker/engine/cpu/matmul.h"
#include "worker/engine/cpu/packed_gemm.h"
#include "worker/engine/cpu/packed_matrix.h"
#include "worker/engine/cpu/paged_attention.h"
#include "worker/engine/cpu/parallel_for_pool.h"
#include "worker/engine/cpu/small_batch_gemv.h"
#include "worker/model/dtype.h"
#include "worker/model/model_weights.h"

namespace llmserve::worker::cpu {
namespace {

// A [rows, k] weight of `dtype` with random values, and the same values widened to f32 (what the
// kernels must compute with).
struct Weight {
  Tensor tensor;
  std::vector<float> widened;
};

Weight RandomWeight(DType dtype, int64_t rows, int64_t k, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  std::vector<float> values(rows * k);
  for (float& v : values) v = normal(rng);
  Weight weight{Tensor(dtype, {rows, k}), std::vector<float>(rows * k)};
  ConvertElements(values.data(), DType::kF32, weight.tensor.data(), dtype, values.size());
  ConvertElements(weight.tensor.data(), dtype, weight.widened.data(), DType::kF32, values.size());
  return weight;
}

Tensor CopyOf(const Tensor& tensor) {
  Tensor copy(tensor.dtype(), tensor.shape());
  std::memcpy(copy.data(), tensor.data(), tensor.SizeBytes());
  return copy;
}

std::vector<float> RandomActivations(int64_t count, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  std::vector<float> x(count);
  for (float& v : x) v = normal(rng);
  return x;
}

// out[i * ldc + r] = x[i] · w[r], accumulated in double.
std::vector<double> Reference(const std::vector<float>& x, int64_t m, int64_t k,
                              const std::vector<float>& w, int64_t rows, int64_t ldc) {
  std::vector<double> out(m * ldc, 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t r = 0; r < rows; ++r) {
      double sum = 0;
      for (int64_t c = 0; c < k; ++c) sum += double{x[i * k + c]} * w[r * k + c];
      out[i * ldc + r] = sum;
    }
  }
  return out;
}

// x with every element rounded to bf16 and widened back.
std::vector<float> RoundedToBf16(const std::vector<float>& x) {
  std::vector<uint16_t> halves(x.size());
  for (size_t i = 0; i < x.size(); ++i) halves[i] = FloatToBFloat16(x[i]);
  std::vector<float> rounded(x.size());
  ConvertElements(halves.data(), DType::kBF16, rounded.data(), DType::kF32, x.size());
  return rounded;
}

// f32 accumulation of k products of unit normals: the error grows like sqrt(k) * eps * |terms|.
void ExpectClose(double expected, float actual, int64_t k, const std::string& where) {
  const double tolerance = 1e-5 * std::sqrt(static_cast<double>(k)) * (1 + std::abs(expected));
  EXPECT_NEAR(actual, expected, tolerance) << where;
}

// out is [m, ldc], filled with -1 before the kernel wrote weight rows [0, rows) of each output row:
// those must match `expected`, the columns past them must still be -1.
void ExpectProducts(const std::vector<double>& expected, const std::vector<float>& out, int64_t m,
                    int64_t rows, int64_t ldc, int64_t k, const std::string& what) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t r = 0; r < ldc; ++r) {
      const std::string where = absl::StrCat(what, " [", i, ",", r, "]");
      if (r < rows) {
        ExpectClose(expected[i * ldc + r], out[i * ldc + r], k, where);
      } else {
        EXPECT_EQ(out[i * ldc + r], -1.0f) << where << ": written outside the rows";
      }
    }
  }
}

TEST(SmallBatchGemvTest, MatchesPlainLoopsForEveryBatchAndTail) {
  if (!SmallBatchGemvAvailable()) GTEST_SKIP() << "this CPU has neither AVX-512 nor AVX2";
  std::mt19937 rng(7);
  for (const std::string& isa : SmallBatchGemvIsas()) {
    for (int64_t m = 1; m <= kSmallBatchGemvMaxRows; ++m) {
      for (int64_t k : {1, 7, 8, 15, 16, 17, 31, 32, 33, 100, 576}) {
        const int64_t rows = 5, ldc = 9;  // ldc > rows: the output rows are strided
        const Weight w = RandomWeight(DType::kBF16, rows, k, rng);
        AlignedVector<float> x(m * k);
        std::normal_distribution<float> normal;
        for (float& v : x) v = normal(rng);
        std::vector<float> out(m * ldc, -1.0f);
        SmallBatchGemvWithIsa(isa, x.data(), m, k, w.tensor.data_as<uint16_t>(), rows, out.data(),
                              ldc);
        const std::vector<double> expected =
            Reference(std::vector<float>(x.begin(), x.end()), m, k, w.widened, rows, ldc);
        ExpectProducts(expected, out, m, rows, ldc, k, absl::StrCat(isa, " m=", m, " k=", k));
      }
    }
  }
}

TEST(PackedGemmTest, MatchesPlainLoopsForEveryIsaDtypeBatchAndTail) {
  if (!PackedGemmAvailable()) GTEST_SKIP() << "this CPU has neither AVX-512 nor AVX2";
  std::mt19937 rng(13);
  for (const std::string& isa : PackedGemmIsas()) {
    for (DType dtype : {DType::kF32, DType::kF16}) {
      // Blocks of 1, 2, 4 and 8 rows, several blocks, and a padded last block.
      for (int64_t m : {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 33}) {
        for (int64_t k : {1, 7, 16, 45, 576}) {
          // One row; one whole panel; tails of 13 and 20 rows (the AVX2 kernel's first and second
          // half of a panel cut short).
          for (int64_t n : {1, 32, 45, 84}) {
            const int64_t ldc = n + 3;  // strided output rows; the 3 columns past n stay untouched
            const Weight w = RandomWeight(dtype, n, k, rng);
            const PackedMatrix packed(w.tensor);
            const std::vector<float> x = RandomActivations(m * k, rng);
            AlignedVector<float> packed_x(PackedActivationsSize(isa, m, k), NAN);
            PackActivations(isa, x.data(), m, k, 0, PackedActivationBlocks(isa, m),
                            packed_x.data());
            std::vector<float> out(m * ldc, -1.0f);
            // f16 with more than 4 blocks of rows (33: AVX-512; 17 and 33: AVX2) widens each panel
            // into the scratch first.
            std::vector<float> scratch(PackedMatrix::kPanelRows * k);
            PackedGemm(isa, packed_x.data(), m, packed, 0, packed.num_panels(), out.data(), ldc,
                       scratch.data());
            ExpectProducts(Reference(x, m, k, w.widened, n, ldc), out, m, n, ldc, k,
                           absl::StrCat(isa, " ", DTypeName(dtype), " m=", m, " k=", k, " n=", n));
          }
        }
      }
    }
  }
}

TEST(PackedGemmTest, WritesOnlyTheRowsOfItsPanels) {
  if (!PackedGemmAvailable()) GTEST_SKIP() << "this CPU has neither AVX-512 nor AVX2";
  std::mt19937 rng(17);
  const int64_t m = 9, n = 70, k = 20;
  for (const std::string& isa : PackedGemmIsas()) {
    const Weight w = RandomWeight(DType::kF32, n, k, rng);
    const PackedMatrix packed(w.tensor);
    const std::vector<float> x = RandomActivations(m * k, rng);
    AlignedVector<float> packed_x(PackedActivationsSize(isa, m, k));
    // Two calls for the two halves of the blocks, as threads split them.
    const int64_t blocks = PackedActivationBlocks(isa, m);
    PackActivations(isa, x.data(), m, k, 0, blocks / 2, packed_x.data());
    PackActivations(isa, x.data(), m, k, blocks / 2, blocks, packed_x.data());
    std::vector<float> out(m * n, -1.0f);
    std::vector<float> scratch(PackedMatrix::kPanelRows * k);
    PackedGemm(isa, packed_x.data(), m, packed, 1, 3, out.data(), n,
               scratch.data());  // rows 32..69
    const std::vector<double> expected = Reference(x, m, k, w.widened, n, n);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t r = 0; r < n; ++r) {
        const std::string where = absl::StrCat(isa, " [", i, ",", r, "]");
        if (r < PackedMatrix::kPanelRows) {
          EXPECT_EQ(out[i * n + r], -1.0f) << where << ": panel 0 was not asked for";
        } else {
          ExpectClose(expected[i * n + r], out[i * n + r], k, where);
        }
      }
    }
  }
}

TEST(ProjectionWeightTest, CopyRowReturnsTheRowInEitherLayout) {
  std::mt19937 rng(19);
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (WeightLayout layout : {WeightLayout::kBest, WeightLayout::kDense}) {
      const int64_t n = 70, k = 45;
      const Weight w = RandomWeight(dtype, n, k, rng);
      const ProjectionWeight weight(CopyOf(w.tensor), layout);
      EXPECT_EQ(weight.rows(), n);
      EXPECT_EQ(weight.cols(), k);
      std::vector<float> row(k);
      for (int64_t r = 0; r < n; ++r) {
        weight.CopyRow(r, row.data());
        for (int64_t c = 0; c < k; ++c) {
          ASSERT_EQ(row[c], w.widened[r * k + c])
              << DTypeName(dtype) << " [" << r << "," << c << "]";
        }
      }
    }
  }
}

TEST(MatMulTest, MatchesPlainLoopsOnEveryPath) {
  std::mt19937 rng(11);
  for (int threads : {1, 2, 3}) {
    ParallelForPool pool(threads);
    MatMul matmul(&pool);
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      // Packed: the packed GEMM for f32/f16 where it runs. Dense: m <= 4 takes the GEMV; larger m
      // goes to BLAS (widening a panel first for bf16/f16), or the bf16 GEMM.
      for (WeightLayout layout : {WeightLayout::kBest, WeightLayout::kDense}) {
        for (int64_t m : {1, 3, 4, 5, 17}) {
          const int64_t n = 70, k = 45;
          const Weight w = RandomWeight(dtype, n, k, rng);
          const ProjectionWeight weight(CopyOf(w.tensor), layout);
          const std::vector<float> x = RandomActivations(m * k, rng);
          std::vector<float> out(m * n);
          matmul.Run(x.data(), m, weight, out.data());
          // bf16 weights multiply bf16-rounded activations (bf16_gemm.h).
          const std::vector<double> expected =
              Reference(dtype == DType::kBF16 ? RoundedToBf16(x) : x, m, k, w.widened, n, n);
          for (int64_t i = 0; i < m * n; ++i) {
            ExpectClose(expected[i], out[i], k,
                        absl::StrCat(DTypeName(dtype), weight.is_packed() ? " packed" : " dense",
                                     " threads=", threads, " m=", m, " i=", i));
          }
        }
      }
    }
  }
}

TEST(PagedAttentionTest, MatchesPlainSoftmaxForEveryIsaHeadDimBlockSizeAndLength) {
  std::mt19937 rng(23);
  std::normal_distribution<float> normal;
  int variants_run = 0;
  for (const std::string& isa : AttentionIsas()) {
    // Whole and partial 16-float chunks, up to the AVX-512 limit of 128 and past it; 8-float
    // chunks for AVX2, and a head_dim that is not a multiple of 8 (AVX2's generic variant).
    for (int64_t head_dim : {12, 16, 40, 64, 80, 128, 160}) {
      for (int64_t block_size : {1, 4, 16}) {
        for (int64_t position : {0, 1, 15, 16, 17, 100}) {
          const PagedKvLayout layout{2, head_dim, block_size};
          const int64_t used_blocks = position / block_size + 1, num_blocks = used_blocks + 3;
          // The sequence's blocks scattered over the cache, in a shuffled order.
          std::vector<int32_t> blocks(num_blocks);
          for (int64_t b = 0; b < num_blocks; ++b) blocks[b] = static_cast<int32_t>(b);
          std::shuffle(blocks.begin(), blocks.end(), rng);
          std::vector<float> k_cache(layout.Offset(num_blocks, 0, 0)), v_cache(k_cache.size());
          for (float& v : k_cache) v = 2 * normal(rng);  // scores spread over several e-folds
          for (float& v : v_cache) v = normal(rng);
          const std::vector<float> q = RandomActivations(head_dim, rng);
          const int64_t kv_head = 1;
          const float scale = 1 / std::sqrt(static_cast<float>(head_dim));

          std::vector<double> scores(position + 1), expected(head_dim, 0.0);
          double max_score = -INFINITY, sum = 0;
          for (int64_t j = 0; j <= position; ++j) {
            const float* key =
                k_cache.data() + layout.Offset(blocks[j / block_size], kv_head, j % block_size);
            double dot = 0;
            for (int64_t c = 0; c < head_dim; ++c) dot += double{q[c]} * key[c];
            scores[j] = dot * scale;
            max_score = std::max(max_score, scores[j]);
          }
          for (double& score : scores) sum += (score = std::exp(score - max_score));
          for (int64_t j = 0; j <= position; ++j) {
            const float* value =
                v_cache.data() + layout.Offset(blocks[j / block_size], kv_head, j % block_size);
            for (int64_t c = 0; c < head_dim; ++c) expected[c] += scores[j] / sum * value[c];
          }

          std::vector<float> scratch(position + 1), out(head_dim + 1, -1.0f);
          if (!AttendOneHeadWithIsa(isa, layout, blocks.data(), position, kv_head, q.data(), scale,
                                    k_cache.data(), v_cache.data(), scratch.data(), out.data())) {
            continue;  // this variant does not take this head_dim
          }
          ++variants_run;
          for (int64_t c = 0; c < head_dim; ++c) {
            ASSERT_NEAR(out[c], expected[c], 1e-5)
                << isa << " head_dim=" << head_dim << " block_size=" << block_size
                << " position=" << position << " c=" << c;
          }
          EXPECT_EQ(out[head_dim], -1.0f) << isa << ": written past the head";
        }
      }
    }
  }
  EXPECT_GT(variants_run, 0);
}

// The activations in double.
double ActivationReference(Activation activation, double v) {
  switch (activation) {
    case Activation::kSilu:
      return v / (1 + std::exp(-v));
    case Activation::kGeluTanh: {
      // 0.5 v (1 + tanh(y)) written as v * sigmoid(2y): 1 + tanh(y) cancels to 0 in double for
      // y below about -19, long before the true value underflows.
      const double y = std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v);
      return v / (1 + std::exp(-2 * y));
    }
    case Activation::kGeluErf:
      return 0.5 * v * std::erfc(-v / std::sqrt(2.0));
  }
  return v;
}

// How far a float computation can be from the reference: a few ulp, times the condition of the
// exponential tail, where float rounding of the argument (2y for the tanh GELU, v^2 / 2 inside
// erfc) moves the result by that much relative to it.
double ActivationTolerance(Activation activation, double v, double expected) {
  const double argument = activation == Activation::kSilu ? std::abs(v)
                          : activation == Activation::kGeluTanh
                              ? std::abs(std::sqrt(8 / M_PI) * (v + 0.044715 * v * v * v))
                              : v * v / 2;
  return 1e-6 * (1 + argument) * std::abs(expected) + 1e-37;
}

TEST(ActivationTest, EveryVariantMatchesTheDoubleFormulasAcrossTheRangeAndTails) {
  std::mt19937 rng(29);
  // Both signs, 0, tiny values, the saturated ends, and a length that leaves a vector tail.
  std::vector<float> gate = {0.0f,  -0.0f,  1e-20f, -1e-20f, 1e-3f,  -1e-3f,
                             0.5f,  -0.5f,  3.0f,   -3.0f,   9.0f,   -9.0f,
                             20.0f, -20.0f, 87.0f,  -87.0f,  100.0f, -100.0f};
  for (float v : RandomActivations(1000, rng)) gate.push_back(4 * v);
  const int64_t n = static_cast<int64_t>(gate.size());
  const std::vector<float> up = RandomActivations(n, rng);
  std::vector<float> gate_up(gate);
  gate_up.insert(gate_up.end(), up.begin(), up.end());
  int variants_run = 0;
  for (const std::string& isa : ActivationIsas()) {
    for (Activation activation : {Activation::kSilu, Activation::kGeluTanh, Activation::kGeluErf}) {
      // 15 sentinels past the end: a full vector stored at the tail would overwrite some.
      std::vector<float> activated(gate), gated(n + 15, 7.0f);
      activated.resize(n + 15, 7.0f);
      if (!ActivateWithIsa(isa, activation, activated.data(), n)) continue;  // not this variant
      ASSERT_TRUE(GatedActivateWithIsa(isa, activation, gate_up.data(), 1, n, gated.data()));
      ++variants_run;
      for (int64_t i = n; i < n + 15; ++i) {
        ASSERT_EQ(activated[i], 7.0f) << "written past the end at " << i;
        ASSERT_EQ(gated[i], 7.0f) << "written past the end at " << i;
      }
      for (int64_t i = 0; i < n; ++i) {
        const double expected = ActivationReference(activation, gate[i]);
        ASSERT_NEAR(activated[i], expected, ActivationTolerance(activation, gate[i], expected))
            << "activation " << static_cast<int>(activation) << " at " << gate[i];
        ASSERT_NEAR(gated[i], expected * up[i],
                    2 * ActivationTolerance(activation, gate[i], expected * up[i]))
            << "gated activation " << static_cast<int>(activation) << " at " << gate[i] << " "
            << isa;
      }
    }
  }
  // The scalar variant takes all three; each vector one, SiLU and the tanh GELU.
  EXPECT_EQ(variants_run, 3 + 2 * static_cast<int>(ActivationIsas().size() - 1));
  // The entry points the engine calls pick one of them.
  std::vector<float> best(gate), baseline(gate);
  Activate(Activation::kSilu, best.data(), n);
  ASSERT_TRUE(ActivateWithIsa("baseline", Activation::kSilu, baseline.data(), n));
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_NEAR(best[i], baseline[i],
                2 * ActivationTolerance(Activation::kSilu, gate[i], baseline[i]));
  }
}

TEST(RoundToBf16Test, MatchesTheScalarConversionIncludingSpecialValues) {
  std::mt19937 rng(5);
  std::vector<float> x;
  for (float v : {0.0f, -0.0f, 1.0f, 1.00390625f, 1.005859375f, 1e-40f, -1e-40f, 3.4e38f, -3.4e38f,
                  std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN()}) {
    x.push_back(v);
  }
  std::uniform_int_distribution<uint32_t> bits;
  while (x.size() < 1000) {  // every bit pattern is fair game: ties, NaN payloads, denormals
    const uint32_t b = bits(rng);
    float v;
    std::memcpy(&v, &b, sizeof v);
    x.push_back(v);
  }
  std::vector<uint16_t> out(x.size());
  RoundToBf16(x.data(), static_cast<int64_t>(x.size()), out.data());
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(out[i], FloatToBFloat16(x[i])) << "element " << i << " = " << x[i];
  }
}

TEST(Bf16GemmTest, MatchesPlainLoopsOnRoundedInputsForEveryShape) {
  if (!Bf16GemmAvailable()) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  std::mt19937 rng(13);
  std::normal_distribution<float> normal;
  // m: the few-row path (1..4) and the blocked one with every remainder of 4; k: every tail of
  // 32 and 64; rows: blocks of 4 and their tails.
  for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 33}) {
    for (int64_t k : {1, 2, 31, 32, 33, 63, 64, 65, 100}) {
      for (int64_t rows : {1, 3, 4, 6, 9}) {
        const Weight w = RandomWeight(DType::kBF16, rows, k, rng);
        std::vector<float> x(m * k);
        for (float& v : x) v = normal(rng);
        std::vector<uint16_t> x_bf16(x.size());
        RoundToBf16(x.data(), m * k, x_bf16.data());
        const int64_t ldc = rows + 2;
        std::vector<float> out(m * ldc, -1.0f);
        Bf16Gemm(x_bf16.data(), m, k, w.tensor.data_as<uint16_t>(), rows, out.data(), ldc);
        const std::vector<double> expected =
            Reference(RoundedToBf16(x), m, k, w.widened, rows, ldc);
        ExpectProducts(expected, out, m, rows, ldc, k,
                       absl::StrCat("m=", m, " k=", k, " rows=", rows));
      }
    }
  }
}

TEST(ParallelForPoolTest, EveryIndexRunsExactlyOnceWithValidThreadIndices) {
  for (int threads : {1, 2, 4}) {
    ParallelForPool pool(threads);
    std::mt19937 rng(threads);
    for (int round = 0; round < 2000; ++round) {
      const int64_t n = rng() % 50;
      std::vector<std::atomic<int>> hits(n);
      std::atomic<bool> bad_thread{false};
      pool.ParallelFor(n, [&](int thread, int64_t begin, int64_t end) {
        if (thread < 0 || thread >= pool.num_threads()) bad_thread = true;
        for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
      });
      ASSERT_FALSE(bad_thread) << "round " << round;
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(hits[i].load(), 1) << "round " << round << " i=" << i;
    }
  }
}

TEST(ParallelForPoolTest, WorkersThatFellAsleepAreWokenForTheNextLoop) {
  ParallelForPool pool(3);
  for (int round = 0; round < 5; ++round) {
    // Longer than the spin: the workers are asleep when the loop is published.
    std::this_thread::sleep_for(std::chrono::milliseconds(2) +
                                absl::ToChronoMicroseconds(ParallelForPool::kSpin));
    std::atomic<int> sum{0};
    pool.ParallelFor(3, [&](int, int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) sum += static_cast<int>(i) + 1;
    });
    EXPECT_EQ(sum.load(), 6);
  }
}

TEST(ParallelForPoolTest, UnevenWorkCompletesWhenTheCallerWaitsLong) {
  // The workers' ranges take far longer than the caller's: the caller gives up spinning, sleeps,
  // and must still be woken when the last worker finishes.
  ParallelForPool pool(2);
  for (int round = 0; round < 3; ++round) {
    std::atomic<int> done{0};
    pool.ParallelFor(2, [&](int thread, int64_t, int64_t) {
      if (thread != 0) std::this_thread::sleep_for(std::chrono::milliseconds(3));
      done.fetch_add(1);
    });
    EXPECT_EQ(done.load(), 2);
  }
}

}  // namespace
}  // namespace llmserve::worker::cpu
