// The CUDA backend's host-side handling of quantized weights, on the CPU (no device needed):
//   - int8: the device layout holds exactly the CPU backend's QuantizeRowInt8 values and scales,
//     rows padded with zeros to 4-byte words, and dequantizes to within half a step of the input;
//   - int4: the device words and (scale, offset) pairs dequantize (on the host, and through the
//     kernels' own word decoder compiled for the host) to exactly what
//     Int4Matrix::Dequantized (the canonical form's definition) gives, for odd shapes, group sizes
//     that are and are not multiples of 8 (the kernel's two paths), zero points 0 and 16, and
//     GGUF's f32 offsets;
//   - the upload plan: formats, sizes, the scales' offset in an image, a 4-bit weight staying in
//     4 bits when int8 is asked (for the model's other projections), the refusals (malformed
//     Int4Matrix, a non-finite weight), and the device bytes of a whole model in each format.

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/unit/worker/engine/packed_gemm_reference.h"
#include "worker/engine/cuda/projection_image.h"
#include "worker/engine/cuda/quantized_layout.h"
#include "worker/engine/cuda/quantized_math.h"
#include "worker/model/model_files.h"
#include "worker/model/model_writer.h"
#include "worker/model/quantization.h"

namespace llmserve::worker::cuda {
namespace {

Tensor RandomTensor(DType dtype, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 0.5f);
  std::vector<float> values(static_cast<size_t>(rows * cols));
  for (float& v : values) v = dist(rng);
  if (rows > 1) std::fill(values.begin() + cols, values.begin() + 2 * cols, 0.0f);  // a zero row
  Tensor t(dtype, {rows, cols});
  ConvertElements(values.data(), DType::kF32, t.data(), dtype, values.size());
  return t;
}

std::vector<float> AsF32(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.NumElements()));
  ConvertElements(t.data(), t.dtype(), out.data(), DType::kF32, out.size());
  return out;
}

// cpu::testing::RandomInt4 (zero points 0 and 16, f16-like scales, a zero-scale group) from a
// seed.
Int4Matrix RandomInt4(int64_t rows, int64_t cols, int64_t group_size, uint32_t seed) {
  std::mt19937 rng(seed);
  return cpu::testing::RandomInt4(rows, cols, group_size, rng);
}

class Int8LayoutTest : public ::testing::TestWithParam<std::tuple<DType, int, int>> {};

TEST_P(Int8LayoutTest, HoldsTheCpuQuantizationPaddedToWords) {
  const auto [dtype, rows, cols] = GetParam();
  const Tensor w = RandomTensor(dtype, rows, cols, static_cast<uint32_t>(rows * 1000 + cols));
  absl::StatusOr<Int8DeviceLayout> layout = ToInt8DeviceLayout(w, "w");
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->row_stride % 4, 0);
  EXPECT_GE(layout->row_stride, cols);
  EXPECT_LT(layout->row_stride, cols + 4);
  EXPECT_EQ(layout->SizeBytes(), Int8DeviceBytes(rows, cols));
  const std::vector<float> f32 = AsF32(w);
  const std::vector<float> dequantized = Dequantize(*layout);
  for (int r = 0; r < rows; ++r) {
    std::vector<int8_t> q(cols);
    float scale = 0;
    QuantizeRowInt8(f32.data() + r * cols, cols, q.data(), &scale);
    EXPECT_EQ(layout->scales[r], scale) << "row " << r;
    for (int c = 0; c < layout->row_stride; ++c) {
      const int8_t got = layout->values[r * layout->row_stride + c];
      ASSERT_EQ(got, c < cols ? q[c] : 0) << "row " << r << " column " << c;
    }
    for (int c = 0; c < cols; ++c) {
      EXPECT_EQ(dequantized[r * cols + c], static_cast<float>(q[c]) * scale);
      EXPECT_LE(std::abs(dequantized[r * cols + c] - f32[r * cols + c]), scale / 2 * 1.0001f);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Int8LayoutTest,
    ::testing::Combine(::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                       ::testing::Values(1, 3, 33), ::testing::Values(1, 7, 16, 45, 130)));

TEST(Int8LayoutTest, RefusesWeightsThatCannotBeQuantized) {
  Tensor w = RandomTensor(DType::kF32, 2, 5, 1);
  w.data_as<float>()[7] = std::numeric_limits<float>::quiet_NaN();
  absl::StatusOr<Int8DeviceLayout> layout = ToInt8DeviceLayout(w, "layer 3 o_proj");
  ASSERT_FALSE(layout.ok());
  EXPECT_EQ(layout.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(layout.status().message().find("layer 3 o_proj: element 7"), std::string::npos)
      << layout.status();
  EXPECT_FALSE(ToInt8DeviceLayout(Tensor(DType::kF32, {6}), "1-D").ok());
}

class Int4LayoutTest : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(Int4LayoutTest, DequantizesExactlyAsTheCanonicalForm) {
  const auto [rows, cols, group] = GetParam();
  const int group_size = group == 0 ? cols : group;  // 0: one group per row
  std::mt19937 rng(static_cast<uint32_t>(rows + cols));
  for (const bool offsets : {false, true}) {
    const Int4Matrix m = offsets ? cpu::testing::RandomInt4WithOffsets(rows, cols, group_size, rng)
                                 : cpu::testing::RandomInt4(rows, cols, group_size, rng);
    absl::StatusOr<Int4DeviceLayout> layout = ToInt4DeviceLayout(m, "w");
    ASSERT_TRUE(layout.ok()) << layout.status();
    EXPECT_EQ(layout->SizeBytes(), Int4DeviceBytes(rows, cols, group_size));
    ASSERT_EQ(layout->words.size(), static_cast<size_t>(rows * cols / 8));
    const std::vector<float> dequantized = Dequantize(*layout);
    for (int r = 0; r < rows; ++r) {
      for (int c = 0; c < cols; ++c) {
        // Bit-exact: the device computes q * scale - offset in f32 as the canonical form does.
        ASSERT_EQ(dequantized[r * cols + c], m.Dequantized(r, c)) << "row " << r << " col " << c;
        const uint32_t word = layout->words[(r * cols + c) / 8];
        ASSERT_EQ(static_cast<int>((word >> (4 * (c % 8))) & 0xF), m.Value(r, c));
        if (!offsets) {
          // With zero points (scales from f16) that is (q - zero) * scale exactly.
          ASSERT_EQ(m.Dequantized(r, c),
                    static_cast<float>(m.Value(r, c) - m.Zero(r, c / group_size)) *
                        m.Scale(r, c / group_size));
        }
      }
    }
  }
}

// The word decoder the GEMV and dequantization kernels run (quantized_math.h, compiled here for
// the host), on the uploaded layout, against the canonical form.
TEST_P(Int4LayoutTest, TheKernelsWordDecoderMatchesTheCanonicalForm) {
  const auto [rows, cols, group] = GetParam();
  const int group_size = group == 0 ? cols : group;
  std::mt19937 rng(static_cast<uint32_t>(rows * cols));
  for (const bool offsets : {false, true}) {
    const Int4Matrix m = offsets ? cpu::testing::RandomInt4WithOffsets(rows, cols, group_size, rng)
                                 : cpu::testing::RandomInt4(rows, cols, group_size, rng);
    const Int4DeviceLayout layout = *ToInt4DeviceLayout(m, "w");
    for (int r = 0; r < rows; ++r) {
      const float* scale_offset = layout.scale_offset.data() + r * layout.groups() * 2;
      for (int j = 0; j < cols / 8; ++j) {
        float w[8];
        DequantizeInt4Word(layout.words[r * (cols / 8) + j], 8 * j, group_size, scale_offset, w);
        for (int i = 0; i < 8; ++i) {
          ASSERT_EQ(w[i], m.Dequantized(r, 8 * j + i)) << "row " << r << " column " << 8 * j + i;
        }
      }
    }
  }
}

// Group sizes 1, 2 and 24 take the kernels' per-column path; 8, 32, 128 and whole rows the
// per-word one.
INSTANTIATE_TEST_SUITE_P(Shapes, Int4LayoutTest,
                         ::testing::Values(std::make_tuple(1, 8, 8), std::make_tuple(3, 16, 1),
                                           std::make_tuple(5, 48, 2), std::make_tuple(7, 48, 24),
                                           std::make_tuple(9, 96, 32), std::make_tuple(2, 256, 128),
                                           std::make_tuple(33, 40, 0), std::make_tuple(4, 64, 8)));

TEST(Int4LayoutTest, RefusesMalformedMatrices) {
  Int4Matrix m = RandomInt4(2, 16, 8, 3);
  Int4Matrix bad_zero = m;
  bad_zero.zeros[3] = 17;
  Int4Matrix bad_scale = m;
  bad_scale.scales[2] = std::numeric_limits<float>::infinity();
  Int4Matrix bad_cols = m;
  bad_cols.cols = 12;
  bad_cols.group_size = 4;
  Int4Matrix bad_size = m;
  bad_size.packed_values.pop_back();
  std::mt19937 rng(5);
  Int4Matrix bad_offset = cpu::testing::RandomInt4WithOffsets(2, 16, 8, rng);
  bad_offset.offsets[1] = std::nanf("");
  Int4Matrix bad_offsets_size = cpu::testing::RandomInt4WithOffsets(2, 16, 8, rng);
  bad_offsets_size.offsets.pop_back();
  for (const Int4Matrix* bad :
       {&bad_zero, &bad_scale, &bad_cols, &bad_size, &bad_offset, &bad_offsets_size}) {
    const absl::Status status = CheckInt4Matrix(*bad, "layer 0 qkv");
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find("layer 0 qkv"), std::string::npos) << status;
    EXPECT_FALSE(ToInt4DeviceLayout(*bad, "x").ok());
  }
  EXPECT_TRUE(CheckInt4Matrix(m, "ok").ok());
}

TEST(ProjectionImageTest, PlansEachFormat) {
  const Tensor dense = RandomTensor(DType::kF32, 6, 10, 5);
  const Int4Matrix none;
  absl::StatusOr<ProjectionPlan> plan = PlanProjection(dense, none, false, DType::kBF16, "w");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->weight.format, WeightFormat::kDense16);
  EXPECT_EQ(plan->bytes, 6u * 10 * 2);
  std::vector<unsigned char> image;
  ASSERT_TRUE(BuildProjectionImage(*plan, dense, none, DType::kBF16, "w", &image).ok());
  ASSERT_EQ(image.size(), plan->bytes);
  std::vector<float> round_trip(60);
  ConvertElements(image.data(), DType::kBF16, round_trip.data(), DType::kF32, 60);
  const std::vector<float> f32 = AsF32(dense);
  for (int i = 0; i < 60; ++i) EXPECT_NEAR(round_trip[i], f32[i], std::abs(f32[i]) / 128);

  plan = PlanProjection(dense, none, true, DType::kBF16, "w");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->weight.format, WeightFormat::kInt8);
  EXPECT_EQ(plan->weight.n, 6);
  EXPECT_EQ(plan->weight.k, 10);
  EXPECT_EQ(plan->weight.row_stride, 12);
  EXPECT_EQ(plan->scales_offset % kDeviceAlignment, 0u);
  EXPECT_GE(plan->scales_offset, 6u * 12);
  EXPECT_EQ(plan->bytes, plan->scales_offset + 6 * sizeof(float));
  ASSERT_TRUE(BuildProjectionImage(*plan, dense, none, DType::kBF16, "w", &image).ok());
  ASSERT_EQ(image.size(), plan->bytes);
  const Int8DeviceLayout int8 = *ToInt8DeviceLayout(dense, "w");
  EXPECT_EQ(std::memcmp(image.data(), int8.values.data(), int8.values.size()), 0);
  EXPECT_EQ(std::memcmp(image.data() + plan->scales_offset, int8.scales.data(), 6 * 4), 0);

  // Pointers land at the image's arrays once bound.
  const DeviceWeight bound = BindProjection(*plan, image.data());
  EXPECT_EQ(bound.data, image.data());
  EXPECT_EQ(reinterpret_cast<const unsigned char*>(bound.scales),
            image.data() + plan->scales_offset);

  const Int4Matrix m = RandomInt4(5, 24, 8, 9);
  plan = PlanProjection(Tensor(), m, false, DType::kF16, "w");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->weight.format, WeightFormat::kInt4);
  EXPECT_EQ(plan->weight.group_size, 8);
  EXPECT_EQ(plan->bytes, plan->scales_offset + 5 * 3 * 2 * sizeof(float));
  ASSERT_TRUE(BuildProjectionImage(*plan, Tensor(), m, DType::kF16, "w", &image).ok());
  const Int4DeviceLayout int4 = *ToInt4DeviceLayout(m, "w");
  EXPECT_EQ(std::memcmp(image.data(), int4.words.data(), int4.words.size() * 4), 0);
  EXPECT_EQ(std::memcmp(image.data() + plan->scales_offset, int4.scale_offset.data(),
                        int4.scale_offset.size() * 4),
            0);
}

TEST(ProjectionImageTest, Int8LeavesA4BitWeightIn4Bits) {
  // --quantization=int8 on a GGUF file quantizes its dense projections; its Q4 ones stay 4-bit.
  const Int4Matrix m = RandomInt4(5, 24, 8, 9);
  absl::StatusOr<ProjectionPlan> plan = PlanProjection(Tensor(), m, true, DType::kF16, "layer 2");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->weight.format, WeightFormat::kInt4);
  EXPECT_EQ(plan->bytes, PlanProjection(Tensor(), m, false, DType::kF16, "layer 2")->bytes);
}

TEST(ProjectionImageTest, RefusesWhatCannotBeUploaded) {
  absl::StatusOr<ProjectionPlan> plan;
  EXPECT_FALSE(PlanProjection(Tensor(), Int4Matrix(), false, DType::kF16, "w").ok());
  Tensor nan = RandomTensor(DType::kF16, 3, 4, 2);
  ConvertElements(std::vector<float>{std::nanf("")}.data(), DType::kF32, nan.data(), DType::kF16,
                  1);
  plan = PlanProjection(nan, Int4Matrix(), true, DType::kF16, "w");
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::vector<unsigned char> image;
  EXPECT_EQ(BuildProjectionImage(*plan, nan, Int4Matrix(), DType::kF16, "w", &image).code(),
            absl::StatusCode::kInvalidArgument);
}

std::unique_ptr<ModelWeights> LoadRandomModel(const std::string& dir,
                                              const CheckpointQuantization& quantization) {
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.family = ModelFamily::kLlama;
  c.vocab_size = 101;
  c.num_layers = 2;
  c.max_position_embeddings = c.max_model_len = 64;
  c.eos_token_ids = {0};
  c.num_kv_heads = 2;
  c.num_heads = 4;
  c.head_dim = 64;
  c.hidden_size = 256;
  c.intermediate_size = 512;
  EXPECT_TRUE(WriteRandomModel(c, {.seed = 1, .quantization = quantization}, dir).ok());
  auto files = ModelFiles::Open(dir);
  EXPECT_TRUE(files.ok()) << files.status();
  auto config = ParseModelConfig((*files)->config_json(), "");
  EXPECT_TRUE(config.ok()) << config.status();
  auto weights = LoadModelWeights(**files, *config, DType::kBF16);
  EXPECT_TRUE(weights.ok()) << weights.status();
  return *std::move(weights);
}

TEST(DeviceWeightBytesTest, CountsEachFormat) {
  const ::llmserve::testing::ScopedTempDir dir("cuda_weight_layout_test");
  const auto dense = LoadRandomModel(dir.path() + "/dense", {});
  const auto awq = LoadRandomModel(
      dir.path() + "/awq", {.method = CheckpointQuantization::Method::kAwq, .group_size = 128});
  // Per layer: qkv [512, 256], o [256, 256], gate/up [1024, 256], down [256, 512].
  const int64_t projection_weights = 2 * (512 * 256 + 256 * 256 + 1024 * 256 + 256 * 512);
  const int64_t bf16 = *DeviceWeightBytes(*dense, DType::kBF16, false);
  const int64_t int8 = *DeviceWeightBytes(*dense, DType::kBF16, true);
  const int64_t int4 = *DeviceWeightBytes(*awq, DType::kBF16, false);
  // Everything else (embeddings, head, norms, alignment) is the same in all three.
  const int64_t rest = bf16 - 2 * projection_weights;
  EXPECT_GT(rest, 0);
  // int8: a byte per weight and a scale per row, each array aligned (at most 2 x 256 bytes more).
  const int64_t rows = 2 * (512 + 256 + 1024 + 256);
  EXPECT_GE(int8 - rest, projection_weights + 4 * rows);
  EXPECT_LE(int8 - rest, projection_weights + 4 * rows + 8 * 2 * 256);
  // int4 at group 128: half a byte per weight and 8 bytes per (row, group of 128).
  EXPECT_GE(int4 - rest, projection_weights / 2 + projection_weights / 128 * 8);
  EXPECT_LE(int4 - rest, projection_weights / 2 + projection_weights / 128 * 8 + 8 * 2 * 256);
  // int8 leaves 4-bit projections as they are (ResolveQuantization refuses int8 of an AWQ model
  // before this point; a GGUF file's other projections take it).
  EXPECT_EQ(*DeviceWeightBytes(*awq, DType::kBF16, true), int4);
}

}  // namespace
}  // namespace llmserve::worker::cuda
