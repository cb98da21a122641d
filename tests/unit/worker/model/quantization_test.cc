// The int8 format's quantizer and the --quantization flag values.

#include "worker/model/quantization.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace llmserve::worker {
namespace {

TEST(QuantizationTest, ParsesTheFlagValuesAndNamesThemBack) {
  EXPECT_EQ(*ParseQuantization("int8"), Quantization::kInt8);
  EXPECT_EQ(*ParseQuantization("none"), Quantization::kNone);
  EXPECT_EQ(*ParseQuantization(""), Quantization::kNone);
  EXPECT_EQ(QuantizationName(Quantization::kInt8), "int8");
  EXPECT_EQ(QuantizationName(Quantization::kNone), "none");
  EXPECT_EQ(*ParseQuantization("awq"), Quantization::kAwq);
  EXPECT_EQ(*ParseQuantization("gptq"), Quantization::kGptq);
  EXPECT_EQ(QuantizationName(Quantization::kAwq), "awq");
  EXPECT_EQ(QuantizationName(Quantization::kGptq), "gptq");
  for (const char* bad : {"INT8", "int4", "fp8", "AWQ", " int8", "gptq_v2"}) {
    const absl::StatusOr<Quantization> parsed = ParseQuantization(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find("expected none, int8, awq or gptq"),
              absl::string_view::npos);
  }
}

TEST(QuantizationTest, RowIsSymmetricPerRowAndWithinHalfAStepOfTheWeights) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  for (int64_t k : {1, 2, 17, 300}) {
    std::vector<float> row(k);
    for (float& v : row) v = 0.05f * normal(rng);
    std::vector<int8_t> q(k);
    float scale = 0;
    QuantizeRowInt8(row.data(), k, q.data(), &scale);
    float max_abs = 0;
    int max_q = 0;
    for (int64_t c = 0; c < k; ++c) {
      max_abs = std::max(max_abs, std::abs(row[c]));
      max_q = std::max(max_q, std::abs(int{q[c]}));
      // Round to nearest: within half a quantization step (plus f32 noise).
      EXPECT_LE(std::abs(q[c] * double{scale} - row[c]), 0.5 * scale * (1 + 1e-6)) << c;
      EXPECT_GE(q[c], -127);
    }
    EXPECT_FLOAT_EQ(scale, max_abs / 127);
    EXPECT_EQ(max_q, 127) << "the largest weight maps to +-127";
  }
  // Negation is exact: the range is symmetric.
  std::vector<float> row = {0.3f, -0.3f, 0.1f, -0.1f};
  std::vector<int8_t> q(4);
  float scale = 0;
  QuantizeRowInt8(row.data(), 4, q.data(), &scale);
  EXPECT_EQ(q[0], 127);
  EXPECT_EQ(q[1], -127);
  EXPECT_EQ(q[2], -q[3]);
}

TEST(QuantizationTest, ZeroRowGetsZeroScaleAndZeros) {
  std::vector<float> row(9, 0.0f);
  std::vector<int8_t> q(9, 5);
  float scale = 1;
  QuantizeRowInt8(row.data(), 9, q.data(), &scale);
  EXPECT_EQ(scale, 0.0f);
  for (int8_t v : q) EXPECT_EQ(v, 0);
}

TEST(QuantizationTest, CheckQuantizableNamesTheTensorAndTheNonFiniteElement) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    Tensor t(dtype, {3, 5000});
    EXPECT_TRUE(CheckQuantizable(t, "layer 0 qkv").ok());
    std::vector<float> values(3 * 5000, 0.5f);
    values[4242 + 5000] = std::numeric_limits<float>::infinity();
    ConvertElements(values.data(), DType::kF32, t.data(), dtype, values.size());
    const absl::Status status = CheckQuantizable(t, "layer 0 qkv");
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find("layer 0 qkv: element 9242 is inf"), absl::string_view::npos)
        << status;
  }
}

}  // namespace
}  // namespace llmserve::worker
