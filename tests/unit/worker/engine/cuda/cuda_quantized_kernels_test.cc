// The quantized projection kernels against a double-precision reference over the dequantized
// weights (quantized_layout.h's host Dequantize, itself checked against the canonical forms in
// tests/unit/worker/engine/cuda_weight_layout_test.cc): the GEMV kernel (batches 1..8) and the
// dequantize + cuBLAS path (batches 9..40, and a weight larger than one scratch chunk), for int8
// and int4, bf16 and f16 activations, odd shapes, int4 group sizes on the kernels' per-word and
// per-column paths, zero points 0 and 16 and a zero scale; plus the dequantization kernel alone,
// bit for bit. The dispatch's host-side checks run everywhere.
//
// Tolerance: the activations are rounded to 16 bits on the host as on the device, so the
// reference has the device's exact operands. On the GEMV path the weights are dequantized to the
// same f32 values as the reference and only the f32 accumulation differs (relative error about
// sqrt(k) * 2^-24: an NMSE below 1e-11 for k <= 4096); on the prefill path the reference rounds
// the dequantized weights to 16 bits as the scratch holds them, and cuBLAS accumulates in f32.
// NMSE < 1e-8 leaves orders of magnitude of margin, while a wrong nibble, group or scale gives an
// NMSE of 1e-3 or more and a wrong row or column about 1.
//
// Every test skips, naming why, where no CUDA device exists.

#include <algorithm>
#include <limits>
#include <ostream>
#include <random>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/unit/worker/engine/cuda/cuda_test_util.h"
#include "tests/unit/worker/engine/packed_gemm_reference.h"
#include "worker/engine/cuda/gemm.h"
#include "worker/engine/cuda/projection_image.h"
#include "worker/engine/cuda/quantized_gemm.h"
#include "worker/engine/cuda/quantized_kernels.h"
#include "worker/engine/cuda/quantized_layout.h"

namespace llmserve::worker::cuda {

void PrintTo(DeviceDType dtype, std::ostream* os) {
  *os << (dtype == DeviceDType::kBF16 ? "bf16" : "f16");
}
void PrintTo(WeightFormat format, std::ostream* os) {
  *os << (format == WeightFormat::kInt4 ? "int4" : format == WeightFormat::kInt8 ? "int8" : "16");
}

namespace {

using testing::Download;
using testing::Download16;
using testing::Nmse;
using testing::Round16;
using testing::Upload;
using testing::Upload16;
// Zero points 0 and 16, f16-like scales and a zero-scale group (with more than 2 rows).
using cpu::testing::RandomInt4;

constexpr double kMaxNmse = 1e-8;

Tensor RandomDense(int64_t rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 0.5f);
  Tensor t(DType::kF32, {rows, cols});
  for (int64_t i = 0; i < rows * cols; ++i) t.data_as<float>()[i] = dist(rng);
  return t;
}

// A quantized weight on the device, uploaded as the backend does (projection_image.h), with the
// host's dequantization of it.
struct TestWeight {
  DeviceBuffer image;
  DeviceWeight weight;
  std::vector<float> dequantized;  // [n, k]
};

TestWeight MakeWeight(WeightFormat format, int64_t n, int64_t k, int64_t group_size,
                      std::mt19937& rng) {
  TestWeight t;
  Tensor dense;
  Int4Matrix int4;
  if (format == WeightFormat::kInt4) {
    int4 = RandomInt4(n, k, group_size, rng);
    t.dequantized = Dequantize(*ToInt4DeviceLayout(int4, "w"));
  } else {
    dense = RandomDense(n, k, rng);
    t.dequantized = Dequantize(*ToInt8DeviceLayout(dense, "w"));
  }
  absl::StatusOr<ProjectionPlan> plan =
      PlanProjection(dense, int4, format == WeightFormat::kInt8, DType::kBF16, "w");
  EXPECT_TRUE(plan.ok()) << plan.status();
  std::vector<unsigned char> image;
  EXPECT_TRUE(BuildProjectionImage(*plan, dense, int4, DType::kBF16, "w", &image).ok());
  t.image = Upload(image);
  t.weight = BindProjection(*plan, t.image.data());
  return t;
}

// y[m, n] in double over the (16-bit rounded) activations and the given weights.
std::vector<float> Reference(const std::vector<float>& x, const std::vector<float>& w, int64_t m,
                             int64_t n, int64_t k) {
  std::vector<float> y(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t r = 0; r < n; ++r) {
      double sum = 0;
      for (int64_t c = 0; c < k; ++c) sum += double(x[i * k + c]) * w[r * k + c];
      y[i * n + r] = static_cast<float>(sum);
    }
  }
  return y;
}

class QuantizedGemmTest
    : public ::testing::TestWithParam<std::tuple<WeightFormat, DeviceDType, int, int, int>> {};

TEST_P(QuantizedGemmTest, MatchesTheDequantizedReferenceAtEveryBatchSize) {
  LLMSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  const auto [format, dtype, n, k, group] = GetParam();
  std::mt19937 rng(n * 31 + k + group);
  const int group_size = group == 0 ? k : group;
  TestWeight w = MakeWeight(format, n, k, group_size, rng);
  const std::vector<float> w16 = Round16(w.dequantized, dtype);
  cublasHandle_t handle = nullptr;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  const int64_t scratch_elements = DequantScratchElements(n, k);
  DeviceBuffer scratch = Upload(std::vector<uint16_t>(static_cast<size_t>(scratch_elements)));
  for (int m : {1, 2, 3, 5, 7, 8, 9, 16, 17, 40}) {
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(m * k));
    for (float& v : x) v = dist(rng);
    x = Round16(x, dtype);
    // One row more than asked, filled with a sentinel that must survive.
    const float kSentinel = -12345.0f;
    DeviceBuffer d_x = Upload16(x, dtype);
    DeviceBuffer d_y = Upload(std::vector<float>(static_cast<size_t>((m + 1) * n), kSentinel));
    const absl::Status status =
        ProjectionGemm(handle, nullptr, dtype, d_x.data(), w.weight, d_y.as<float>(), m,
                       scratch.data(), scratch_elements, "test");
    ASSERT_TRUE(status.ok()) << status;
    const std::vector<float> got = Download(d_y, static_cast<size_t>((m + 1) * n));
    const std::vector<float> want = Reference(x, m <= kMaxGemvBatch ? w.dequantized : w16, m, n, k);
    EXPECT_LT(Nmse(std::vector<float>(got.begin(), got.begin() + m * n), want), kMaxNmse)
        << "batch " << m;
    for (int r = 0; r < n; ++r) ASSERT_EQ(got[m * n + r], kSentinel) << "batch " << m;
  }
  cublasDestroy(handle);
}

// int8: any k (rows padded to 4 bytes), group unused. int4: k a multiple of 8 and of the group;
// groups 1, 2, 24 take the per-column path, 8, 32, 128 and whole rows (0) the per-word one.
INSTANTIATE_TEST_SUITE_P(
    Int8, QuantizedGemmTest,
    ::testing::Combine(::testing::Values(WeightFormat::kInt8),
                       ::testing::Values(DeviceDType::kBF16, DeviceDType::kF16),
                       ::testing::Values(1, 45, 84), ::testing::Values(1, 7, 45, 130, 1024),
                       ::testing::Values(0)));
INSTANTIATE_TEST_SUITE_P(
    Int4, QuantizedGemmTest,
    ::testing::Combine(::testing::Values(WeightFormat::kInt4),
                       ::testing::Values(DeviceDType::kBF16, DeviceDType::kF16),
                       ::testing::Values(1, 45, 84), ::testing::Values(24, 48, 96, 384),
                       ::testing::Values(1, 2, 8, 24, 0)),
    [](const auto& info) {
      return absl::StrCat(std::get<1>(info.param) == DeviceDType::kBF16 ? "bf16" : "f16", "_n",
                          std::get<2>(info.param), "_k", std::get<3>(info.param), "_g",
                          std::get<4>(info.param));
    });
INSTANTIATE_TEST_SUITE_P(Int4Groups, QuantizedGemmTest,
                         ::testing::Combine(::testing::Values(WeightFormat::kInt4),
                                            ::testing::Values(DeviceDType::kBF16),
                                            ::testing::Values(33), ::testing::Values(256, 1024),
                                            ::testing::Values(32, 128)));

// A weight of more than one scratch chunk (kDequantChunkElements): the prefill path's chunks
// must each land in their own columns of y.
TEST(QuantizedGemmChunkTest, WeightsLargerThanAChunkRunInChunks) {
  LLMSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  std::mt19937 rng(3);
  const int64_t k = 4096, n = kDequantChunkElements / k + 37, m = 9;
  ASSERT_LT(DequantScratchElements(n, k), n * k);
  TestWeight w = MakeWeight(WeightFormat::kInt4, n, k, 128, rng);
  const std::vector<float> w16 = Round16(w.dequantized, DeviceDType::kBF16);
  std::vector<float> x(static_cast<size_t>(m * k));
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& v : x) v = dist(rng);
  x = Round16(x, DeviceDType::kBF16);
  cublasHandle_t handle = nullptr;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  const int64_t scratch_elements = DequantScratchElements(n, k);
  DeviceBuffer scratch = Upload(std::vector<uint16_t>(static_cast<size_t>(scratch_elements)));
  DeviceBuffer d_x = Upload16(x, DeviceDType::kBF16);
  DeviceBuffer d_y = Upload(std::vector<float>(static_cast<size_t>(m * n)));
  ASSERT_TRUE(ProjectionGemm(handle, nullptr, DeviceDType::kBF16, d_x.data(), w.weight,
                             d_y.as<float>(), m, scratch.data(), scratch_elements, "big")
                  .ok());
  EXPECT_LT(Nmse(Download(d_y, static_cast<size_t>(m * n)), Reference(x, w16, m, n, k)), kMaxNmse);
  // A scratch smaller than the plan is refused, not overrun.
  EXPECT_EQ(ProjectionGemm(handle, nullptr, DeviceDType::kBF16, d_x.data(), w.weight,
                           d_y.as<float>(), m, scratch.data(), scratch_elements - 1, "big")
                .code(),
            absl::StatusCode::kInvalidArgument);
  cublasDestroy(handle);
}

// Host-side decisions that need no device: the scratch size, and the refusals that come before
// any launch (they run, rather than skip, on machines without a GPU).
TEST(QuantizedDispatchTest, SizesScratchAndRefusesBadCallsBeforeLaunching) {
  EXPECT_EQ(DequantScratchElements(45, 130), 45 * 130);  // a small weight: whole
  EXPECT_EQ(DequantScratchElements(14336, 4096), kDequantChunkElements);
  EXPECT_EQ(DequantScratchElements(3, int64_t{20} << 20), int64_t{20} << 20);  // at least a row
  DeviceWeight w;
  w.format = WeightFormat::kInt4;
  w.n = 64;
  w.k = 128;
  w.group_size = 32;
  // Prefill with too small a scratch (here none): INVALID_ARGUMENT, nothing launched.
  const absl::Status status = ProjectionGemm(nullptr, nullptr, DeviceDType::kBF16, nullptr, w,
                                             nullptr, kMaxGemvBatch + 1, nullptr, 0, "o_proj");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("o_proj: dequantization scratch"), std::string::npos) << status;
  // Nothing to do for an empty batch.
  EXPECT_TRUE(
      ProjectionGemm(nullptr, nullptr, DeviceDType::kBF16, nullptr, w, nullptr, 0, nullptr, 0, "x")
          .ok());
  // Batches outside 1..kMaxGemvBatch, 16-bit weights and rows past the weight are refused.
  for (int32_t m : {0, kMaxGemvBatch + 1}) {
    EXPECT_EQ(LaunchQuantizedGemv(DeviceDType::kF16, {.w = w, .x = nullptr, .y = nullptr, .m = m},
                                  nullptr),
              cudaErrorInvalidValue);
  }
  // int4 activations must allow 16-byte loads.
  EXPECT_EQ(LaunchQuantizedGemv(
                DeviceDType::kF16,
                {.w = w, .x = reinterpret_cast<const void*>(uintptr_t{8}), .y = nullptr, .m = 1},
                nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(LaunchDequantize(DeviceDType::kF16,
                             {.w = w, .first_row = 60, .num_rows = 5, .out = nullptr}, nullptr),
            cudaErrorInvalidValue);
  w.format = WeightFormat::kDense16;
  EXPECT_EQ(
      LaunchQuantizedGemv(DeviceDType::kF16, {.w = w, .x = nullptr, .y = nullptr, .m = 1}, nullptr),
      cudaErrorInvalidValue);
}

class DequantizeTest : public ::testing::TestWithParam<std::tuple<WeightFormat, DeviceDType, int>> {
};

TEST_P(DequantizeTest, WritesTheRoundedDequantizedRowsBitForBit) {
  LLMSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  const auto [format, dtype, group] = GetParam();
  std::mt19937 rng(group + 5);
  const int n = 37, k = 48, first = 5, rows = 29;
  TestWeight w = MakeWeight(format, n, k, group, rng);
  DeviceBuffer out = Upload(std::vector<uint16_t>(static_cast<size_t>(rows * k)));
  ASSERT_EQ(
      LaunchDequantize(
          dtype, {.w = w.weight, .first_row = first, .num_rows = rows, .out = out.data()}, nullptr),
      cudaSuccess);
  const std::vector<float> got = Download16(out, static_cast<size_t>(rows * k), dtype);
  const std::vector<float> want =
      Round16(std::vector<float>(w.dequantized.begin() + first * k,
                                 w.dequantized.begin() + (first + rows) * k),
              dtype);
  for (int i = 0; i < rows * k; ++i) ASSERT_EQ(got[i], want[i]) << "element " << i;
  // Rows past the weight are refused.
  EXPECT_EQ(
      LaunchDequantize(dtype, {.w = w.weight, .first_row = 10, .num_rows = 28, .out = out.data()},
                       nullptr),
      cudaErrorInvalidValue);
}

INSTANTIATE_TEST_SUITE_P(
    Formats, DequantizeTest,
    ::testing::Combine(::testing::Values(WeightFormat::kInt8, WeightFormat::kInt4),
                       ::testing::Values(DeviceDType::kBF16, DeviceDType::kF16),
                       ::testing::Values(2, 8, 24)));

}  // namespace
}  // namespace llmserve::worker::cuda
