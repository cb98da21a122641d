#include "worker/sampling/random.h"

#include <set>

#include "gtest/gtest.h"

namespace llmserve::worker {
namespace {

using Block = std::array<uint32_t, 4>;

// Known-answer vectors of Random123 (kat_vectors, philox4x32 with 10 rounds).
TEST(SamplingRandomTest, PhiloxMatchesReferenceVectors) {
  EXPECT_EQ(Philox4x32({0, 0, 0, 0}, {0, 0}),
            (Block{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(
      Philox4x32({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}),
      (Block{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(
      Philox4x32({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}),
      (Block{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(SamplingRandomTest, UniformIsAPureFunctionInRange) {
  std::set<double> seen;
  double sum = 0.0;
  constexpr int kDraws = 10000;
  for (uint64_t step = 0; step < kDraws; ++step) {
    const double u = UniformFromSeed(1234, step);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    EXPECT_EQ(u, UniformFromSeed(1234, step));
    seen.insert(u);
    sum += u;
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(kDraws));
  EXPECT_NEAR(sum / kDraws, 0.5, 0.01);  // standard error 0.003
  EXPECT_NE(UniformFromSeed(1, 0), UniformFromSeed(2, 0));
  // The high halves of seed and step matter too.
  EXPECT_NE(UniformFromSeed(1, 0), UniformFromSeed(1 | (uint64_t{1} << 40), 0));
  EXPECT_NE(UniformFromSeed(1, 0), UniformFromSeed(1, uint64_t{1} << 40));
}

}  // namespace
}  // namespace llmserve::worker
