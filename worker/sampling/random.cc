#include "worker/sampling/random.h"

namespace llmserve::worker {
namespace {

// Multipliers and Weyl key increments of Philox4x32 (Random123, philox.h).
constexpr uint32_t kMultiplier0 = 0xD2511F53u;
constexpr uint32_t kMultiplier1 = 0xCD9E8D57u;
constexpr uint32_t kKeyIncrement0 = 0x9E3779B9u;  // golden ratio
constexpr uint32_t kKeyIncrement1 = 0xBB67AE85u;  // sqrt(3) - 1
constexpr int kRounds = 10;

std::array<uint32_t, 4> Round(const std::array<uint32_t, 4>& c, const std::array<uint32_t, 2>& k) {
  const uint64_t product0 = uint64_t{kMultiplier0} * c[0];
  const uint64_t product1 = uint64_t{kMultiplier1} * c[2];
  const auto hi = [](uint64_t x) { return static_cast<uint32_t>(x >> 32); };
  const auto lo = [](uint64_t x) { return static_cast<uint32_t>(x); };
  return {hi(product1) ^ c[1] ^ k[0], lo(product1), hi(product0) ^ c[3] ^ k[1], lo(product0)};
}

}  // namespace

std::array<uint32_t, 4> Philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key) {
  for (int round = 0; round < kRounds; ++round) {
    if (round > 0) {
      key[0] += kKeyIncrement0;
      key[1] += kKeyIncrement1;
    }
    counter = Round(counter, key);
  }
  return counter;
}

double UniformFromSeed(uint64_t seed, uint64_t step) {
  const std::array<uint32_t, 4> bits =
      Philox4x32({static_cast<uint32_t>(step), static_cast<uint32_t>(step >> 32), 0, 0},
                 {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  const uint64_t word = (uint64_t{bits[0]} << 32) | bits[1];
  // The top 53 bits fill a double's mantissa exactly, so every value is k * 2^-53 < 1.
  return static_cast<double>(word >> 11) * 0x1.0p-53;
}

}  // namespace llmserve::worker
