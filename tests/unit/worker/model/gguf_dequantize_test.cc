// Dequantization of each GGUF block type on hand-built blocks whose values follow from the block
// layout (ggml-common.h), row ranges, and the f16/bf16 conversions against the project's own
// (independent) dtype conversions. The real files made by llama.cpp are checked in
// gguf_testdata_test.cc.

#include "worker/model/gguf/gguf_dequantize.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/model/dtype.h"

namespace llmserve::worker::gguf {
namespace {

using ::testing::HasSubstr;

constexpr uint16_t kHalfOne = 0x3c00;
constexpr uint16_t kHalfTwo = 0x4000;
constexpr uint16_t kHalfHalf = 0x3800;
constexpr uint16_t kHalfMinusThree = 0xc200;

void PutU16(std::vector<unsigned char>& block, size_t at, uint16_t value) {
  block[at] = value & 0xff;
  block[at + 1] = value >> 8;
}

std::vector<float> Dequantize(GgmlType type, const std::vector<unsigned char>& block) {
  const GgmlTypeInfo& info = GgmlTypeInfoOf(type);
  EXPECT_EQ(static_cast<int64_t>(block.size()), info.block_bytes);
  std::vector<float> out(info.block_size);
  DequantizeBlocks(type, block.data(), 1, out.data());
  return out;
}

TEST(GgufDequantizeTest, HalfAndBFloat16MatchTheProjectsConversions) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const float ours = F16ToF32(static_cast<uint16_t>(bits));
    const float theirs = HalfToFloat(static_cast<uint16_t>(bits));
    if (std::isnan(theirs)) {
      EXPECT_TRUE(std::isnan(ours)) << bits;
    } else {
      EXPECT_EQ(std::signbit(ours), std::signbit(theirs)) << bits;
      EXPECT_EQ(ours, theirs) << bits;
    }
    const float bf16 = BF16ToF32(static_cast<uint16_t>(bits));
    if (!std::isnan(bf16)) {
      EXPECT_EQ(bf16, BFloat16ToFloat(static_cast<uint16_t>(bits))) << bits;
    }
  }
  EXPECT_EQ(F16ToF32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(F16ToF32(0x7bff), 65504.0f);
}

TEST(GgufDequantizeTest, Q8_0) {  // d, int8 qs[32]
  std::vector<unsigned char> block(34);
  PutU16(block, 0, kHalfHalf);
  for (int j = 0; j < 32; ++j)
    block[2 + j] = static_cast<unsigned char>(static_cast<int8_t>(j - 16));
  const std::vector<float> out = Dequantize(GgmlType::kQ8_0, block);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(out[j], 0.5f * (j - 16)) << j;
}

TEST(GgufDequantizeTest, Q4_0AndQ4_1) {  // low nibbles are elements 0-15, high nibbles 16-31
  std::vector<unsigned char> q4_0(18);
  PutU16(q4_0, 0, kHalfTwo);
  for (int j = 0; j < 16; ++j) q4_0[2 + j] = static_cast<unsigned char>(j | ((15 - j) << 4));
  std::vector<float> out = Dequantize(GgmlType::kQ4_0, q4_0);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], 2.0f * (j - 8)) << j;
    EXPECT_EQ(out[j + 16], 2.0f * (15 - j - 8)) << j;
  }
  std::vector<unsigned char> q4_1(20);
  PutU16(q4_1, 0, kHalfHalf);
  PutU16(q4_1, 2, kHalfMinusThree);
  for (int j = 0; j < 16; ++j) q4_1[4 + j] = static_cast<unsigned char>(j | ((15 - j) << 4));
  out = Dequantize(GgmlType::kQ4_1, q4_1);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], 0.5f * j - 3.0f) << j;
    EXPECT_EQ(out[j + 16], 0.5f * (15 - j) - 3.0f) << j;
  }
}

TEST(GgufDequantizeTest, Q5_0AndQ5_1TakeTheFifthBitOfElementJFromBitJ) {
  std::vector<unsigned char> q5_0(22);
  PutU16(q5_0, 0, kHalfOne);
  const uint32_t qh = 0x80010003u;  // elements 0, 1, 16 and 31
  for (int b = 0; b < 4; ++b) q5_0[2 + b] = (qh >> (8 * b)) & 0xff;
  for (int j = 0; j < 16; ++j) q5_0[6 + j] = static_cast<unsigned char>(j | ((15 - j) << 4));
  auto expected = [&](int j) {
    const int nibble = j < 16 ? j : 15 - (j - 16);
    return nibble + (((qh >> j) & 1) ? 16 : 0);
  };
  std::vector<float> out = Dequantize(GgmlType::kQ5_0, q5_0);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(out[j], static_cast<float>(expected(j) - 16)) << j;

  std::vector<unsigned char> q5_1(24);
  PutU16(q5_1, 0, kHalfTwo);
  PutU16(q5_1, 2, kHalfMinusThree);
  std::copy(q5_0.begin() + 2, q5_0.end(), q5_1.begin() + 4);
  out = Dequantize(GgmlType::kQ5_1, q5_1);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(out[j], 2.0f * expected(j) - 3.0f) << j;
}

// The 12 bytes of K-quant sub-block scales and minimums (6 bits each), packed as ggml does.
std::vector<unsigned char> PackScales(const int (&scales)[8], const int (&mins)[8]) {
  std::vector<unsigned char> packed(12);
  for (int i = 0; i < 4; ++i) {
    packed[i] = static_cast<unsigned char>((scales[i] & 63) | ((scales[i + 4] >> 4) << 6));
    packed[i + 4] = static_cast<unsigned char>((mins[i] & 63) | ((mins[i + 4] >> 4) << 6));
    packed[i + 8] = static_cast<unsigned char>((scales[i + 4] & 15) | ((mins[i + 4] & 15) << 4));
  }
  return packed;
}

constexpr int kScales[8] = {1, 2, 3, 4, 40, 50, 60, 63};
constexpr int kMins[8] = {0, 1, 2, 3, 33, 44, 55, 62};

TEST(GgufDequantizeTest, Q4_K) {  // d, dmin, scales[12], qs[128]
  std::vector<unsigned char> block(144);
  PutU16(block, 0, kHalfOne);
  PutU16(block, 2, kHalfHalf);
  const std::vector<unsigned char> scales = PackScales(kScales, kMins);
  std::copy(scales.begin(), scales.end(), block.begin() + 4);
  for (int i = 0; i < 128; ++i) block[16 + i] = static_cast<unsigned char>((i % 16) | (7 << 4));
  const std::vector<float> out = Dequantize(GgmlType::kQ4_K, block);
  for (int chunk = 0; chunk < 4; ++chunk) {
    for (int l = 0; l < 32; ++l) {
      const int lo = (chunk * 32 + l) % 16;
      EXPECT_EQ(out[chunk * 64 + l], kScales[2 * chunk] * lo - 0.5f * kMins[2 * chunk]);
      EXPECT_EQ(out[chunk * 64 + 32 + l], kScales[2 * chunk + 1] * 7 - 0.5f * kMins[2 * chunk + 1]);
    }
  }
}

TEST(GgufDequantizeTest, Q5_K) {  // d, dmin, scales[12], qh[32], qs[128]
  std::vector<unsigned char> block(176);
  PutU16(block, 0, kHalfTwo);
  PutU16(block, 2, kHalfOne);
  const std::vector<unsigned char> scales = PackScales(kScales, kMins);
  std::copy(scales.begin(), scales.end(), block.begin() + 4);
  // qh[l] bit 2c is the fifth bit of element l of chunk c's low half, bit 2c+1 of its high half.
  for (int l = 0; l < 32; ++l) block[16 + l] = static_cast<unsigned char>(l % 2 == 0 ? 0x55 : 0xaa);
  for (int i = 0; i < 128; ++i) block[48 + i] = 0x93;  // low nibble 3, high nibble 9
  const std::vector<float> out = Dequantize(GgmlType::kQ5_K, block);
  for (int chunk = 0; chunk < 4; ++chunk) {
    for (int l = 0; l < 32; ++l) {
      const int lo = 3 + (l % 2 == 0 ? 16 : 0);
      const int hi = 9 + (l % 2 == 1 ? 16 : 0);
      EXPECT_EQ(out[chunk * 64 + l], 2.0f * kScales[2 * chunk] * lo - kMins[2 * chunk]);
      EXPECT_EQ(out[chunk * 64 + 32 + l],
                2.0f * kScales[2 * chunk + 1] * hi - kMins[2 * chunk + 1]);
    }
  }
}

TEST(GgufDequantizeTest, Q6_K) {  // ql[128], qh[64], int8 scales[16], d
  std::vector<unsigned char> block(210);
  for (int i = 0; i < 128; ++i)
    block[i] = static_cast<unsigned char>(i % 16 | ((15 - i % 16) << 4));
  for (int i = 0; i < 64; ++i) block[128 + i] = 0xe4;  // quarters' high bits: 0, 1, 2, 3
  for (int s = 0; s < 16; ++s)
    block[192 + s] = static_cast<unsigned char>(static_cast<int8_t>(s - 5));
  PutU16(block, 208, kHalfHalf);
  const std::vector<float> out = Dequantize(GgmlType::kQ6_K, block);
  for (int half = 0; half < 2; ++half) {
    for (int quarter = 0; quarter < 4; ++quarter) {
      for (int l = 0; l < 32; ++l) {
        const int ql_index = half * 64 + l + (quarter % 2 == 1 ? 32 : 0);
        const int nibble = quarter < 2 ? ql_index % 16 : 15 - ql_index % 16;
        const int q = (nibble | (quarter << 4)) - 32;
        const int scale = half * 8 + quarter * 2 + l / 16 - 5;
        EXPECT_EQ(out[half * 128 + quarter * 32 + l], 0.5f * scale * q)
            << half << " " << quarter << " " << l;
      }
    }
  }
}

TEST(GgufDequantizeTest, RowsAreSlicesOfTheTensor) {
  // Three rows of two Q8_0 blocks, each block with its own scale.
  std::vector<unsigned char> bytes(3 * 2 * 34);
  for (int b = 0; b < 6; ++b) {
    PutU16(bytes, b * 34, static_cast<uint16_t>(kHalfOne + b * 0x400));  // 1, 2, 4, ...
    for (int j = 0; j < 32; ++j) bytes[b * 34 + 2 + j] = static_cast<unsigned char>(j + b);
  }
  GgufTensor tensor;
  tensor.name = "t";
  tensor.type = GgmlType::kQ8_0;
  tensor.dims = {64, 3};
  tensor.num_elements = 192;
  tensor.data = bytes.data();
  tensor.size = bytes.size();
  const std::vector<float> all = *DequantizeTensor(tensor);
  EXPECT_EQ(all[64 + 32 + 1], 8.0f * (1 + 3));  // row 1, block 1 (scale 8), element 1
  std::vector<float> rows(128);
  ASSERT_TRUE(DequantizeRows(tensor, 1, 2, absl::MakeSpan(rows)).ok());
  EXPECT_EQ(rows, std::vector<float>(all.begin() + 64, all.end()));

  EXPECT_THAT(DequantizeRows(tensor, 2, 2, absl::MakeSpan(rows)).message(),
              HasSubstr("tensor 't': rows [2, +2) are outside its 3 rows"));
  EXPECT_THAT(DequantizeRows(tensor, -1, 1, absl::MakeSpan(rows)).message(), HasSubstr("outside"));
  EXPECT_THAT(DequantizeRows(tensor, 0, 1, absl::MakeSpan(rows)).message(),
              HasSubstr("1 rows of 64 elements do not fill an output of 128 floats"));
  EXPECT_TRUE(DequantizeRows(tensor, 3, 0, absl::Span<float>()).ok());
}

}  // namespace
}  // namespace llmserve::worker::gguf
