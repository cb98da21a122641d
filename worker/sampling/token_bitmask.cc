#include "worker/sampling/token_bitmask.h"

#include <algorithm>
#include <limits>

#include "common/base/logging.h"

namespace llmserve::worker {

void ApplyTokenBitmask(absl::Span<const uint32_t> bitmask, absl::Span<float> logits) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  LLMSERVE_CHECK(static_cast<int64_t>(bitmask.size()) == TokenBitmaskWords(vocab));
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  for (int64_t word = 0; word < static_cast<int64_t>(bitmask.size()); ++word) {
    const uint32_t bits = bitmask[word];
    if (bits == 0xffffffffu) continue;  // inside JSON strings most words are all-allowed
    const int64_t base = word * 32;
    const int64_t end = std::min<int64_t>(base + 32, vocab);
    if (bits == 0) {
      for (int64_t t = base; t < end; ++t) logits[t] = kMasked;
      continue;
    }
    for (int64_t t = base; t < end; ++t) {
      if (((bits >> (t - base)) & 1u) == 0) logits[t] = kMasked;
    }
  }
}

bool AnyTokenAllowed(absl::Span<const uint32_t> bitmask, int64_t vocab_size) {
  const int64_t full_words = vocab_size / 32;
  for (int64_t word = 0; word < full_words; ++word) {
    if (bitmask[word] != 0) return true;
  }
  const int64_t rest = vocab_size % 32;
  if (rest == 0) return false;
  return (bitmask[full_words] & ((1u << rest) - 1)) != 0;
}

}  // namespace llmserve::worker
