#include "common/prefix_cache/block_hash.h"

#include <vector>

#include "gtest/gtest.h"

namespace llmserve::common {
namespace {

TEST(BlockHashTest, ChainsOverTheWholePrefixAndTheSalt) {
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  const std::vector<int32_t> b = {9, 2, 3, 4, 5, 6, 7, 8, 9};  // differs in block 0 only
  const auto hashes_a = HashFullBlocks(a, 4, "");
  const auto hashes_b = HashFullBlocks(b, 4, "");
  ASSERT_EQ(hashes_a.size(), 2u);  // the partial third block is not hashed
  EXPECT_NE(hashes_a[0], hashes_b[0]);
  EXPECT_NE(hashes_a[1], hashes_b[1]) << "block 1 has the same tokens but another prefix";
  EXPECT_EQ(hashes_a, HashFullBlocks(a, 4, "")) << "deterministic";
  EXPECT_NE(hashes_a[0], HashFullBlocks(a, 4, "tenant")[0]);
  EXPECT_EQ(hashes_a[1], HashBlock(&hashes_a[0], {5, 6, 7, 8}, "ignored after block 0"));
  // Length-prefixed fields: a salt cannot masquerade as tokens.
  EXPECT_NE(HashBlock(nullptr, {1}, ""), HashBlock(nullptr, {}, std::string("\x01\0\0\0", 4)));
}

TEST(BlockHashTest, KnownValueIsStableAcrossReleases) {
  // Gateways and workers of different builds must agree: pin one value, computed independently
  // as SHA-256(b"s" + u64le(0) + u64le(4) + u32le(1, 2, 3, 4)) in Python.
  const BlockHash hash = HashBlock(nullptr, {1, 2, 3, 4}, "");
  EXPECT_EQ(hash.high, 0x1e2456ae40e3a25eull);
  EXPECT_EQ(hash.low, 0x52f589e48b38ef73ull);
  EXPECT_EQ(hash.RoutingHash(), hash.high);
}

}  // namespace
}  // namespace llmserve::common
