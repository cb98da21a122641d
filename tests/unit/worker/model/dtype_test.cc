#include "worker/model/dtype.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace llmserve::worker {
namespace {

TEST(DTypeTest, NamesParseAndSizes) {
  EXPECT_EQ(*ParseDType("f32"), DType::kF32);
  EXPECT_EQ(*ParseDType("bfloat16"), DType::kBF16);
  EXPECT_EQ(*ParseDType("float16"), DType::kF16);
  EXPECT_EQ(DTypeName(DType::kBF16), "bf16");
  EXPECT_EQ(DTypeSize(DType::kF32), 4u);
  EXPECT_EQ(DTypeSize(DType::kF16), 2u);
  const auto bad = ParseDType("int8");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("int8"), absl::string_view::npos);
  EXPECT_EQ(*ParseSafetensorsDType("BF16"), DType::kBF16);
  EXPECT_FALSE(ParseSafetensorsDType("I64").ok());
}

TEST(DTypeTest, HalfKnownValues) {
  EXPECT_EQ(HalfToFloat(0x3c00), 1.0f);
  EXPECT_EQ(HalfToFloat(0xc000), -2.0f);
  EXPECT_EQ(HalfToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(HalfToFloat(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_TRUE(std::isinf(HalfToFloat(0x7c00)));
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7e00)));
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);  // rounds up to infinity
  EXPECT_EQ(FloatToHalf(1e-9f), 0x0000);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::quiet_NaN()) & 0x7c00, 0x7c00);
  // Ties go to even: 1 + 2^-11 lies halfway between 1 and 1 + 2^-10.
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
}

TEST(DTypeTest, EveryHalfRoundTrips) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const uint16_t half = static_cast<uint16_t>(bits);
    const float value = HalfToFloat(half);
    if (std::isnan(value)) continue;
    ASSERT_EQ(FloatToHalf(value), half) << "bits " << bits;
  }
}

TEST(DTypeTest, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3f80);
  EXPECT_EQ(BFloat16ToFloat(0x3f80), 1.0f);
  // 1 + 2^-8 is halfway between bf16 neighbours 1 and 1 + 2^-7: ties to even (1).
  EXPECT_EQ(FloatToBFloat16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(FloatToBFloat16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(std::nanf("")))));
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const float value = BFloat16ToFloat(static_cast<uint16_t>(bits));
    if (std::isnan(value)) continue;
    ASSERT_EQ(FloatToBFloat16(value), bits);
  }
}

TEST(DTypeTest, ConvertElementsBetweenAllPairs) {
  const std::vector<float> values = {0.0f, 1.5f, -2.25f, 0.125f, 1024.0f};
  for (DType from : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (DType to : {DType::kF32, DType::kF16, DType::kBF16}) {
      std::vector<unsigned char> src(values.size() * DTypeSize(from));
      ConvertElements(values.data(), DType::kF32, src.data(), from, values.size());
      std::vector<unsigned char> dst(values.size() * DTypeSize(to));
      ConvertElements(src.data(), from, dst.data(), to, values.size());
      std::vector<float> back(values.size());
      ConvertElements(dst.data(), to, back.data(), DType::kF32, values.size());
      EXPECT_EQ(back, values) << DTypeName(from) << " -> " << DTypeName(to);
    }
  }
}

TEST(DTypeTest, FastRunsMatchTheScalarConversions) {
  // Long enough for the vectorized paths (F16C on x86 where present) plus a ragged tail, and
  // starting at an odd byte offset, as tensors in a mapped safetensors file may.
  std::vector<unsigned char> raw(2 * 1003 + 1);
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<unsigned char>(i * 131 + 7);
  const unsigned char* src = raw.data() + 1;
  for (DType from : {DType::kF16, DType::kBF16}) {
    std::vector<float> fast(1003);
    ConvertElements(src, from, fast.data(), DType::kF32, fast.size());
    for (size_t i = 0; i < fast.size(); ++i) {
      uint16_t bits;
      std::memcpy(&bits, src + 2 * i, 2);
      const float expected = from == DType::kF16 ? HalfToFloat(bits) : BFloat16ToFloat(bits);
      if (std::isnan(expected)) {
        ASSERT_TRUE(std::isnan(fast[i])) << i;
      } else {
        ASSERT_EQ(fast[i], expected) << DTypeName(from) << " element " << i;
      }
    }
  }
}

}  // namespace
}  // namespace llmserve::worker
