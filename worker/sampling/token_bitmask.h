// Applies a constrained-decoding token mask (worker/structured/) to a row of logits before
// sampling: tokens the mask forbids get -inf, so they have probability 0 under every sampling
// setting and their logprobs are -inf (docs/structured-outputs.md).
//
// Thread-safe: pure functions.

#ifndef LLMSERVE_WORKER_SAMPLING_TOKEN_BITMASK_H_
#define LLMSERVE_WORKER_SAMPLING_TOKEN_BITMASK_H_

#include <cstdint>

#include "absl/types/span.h"

namespace llmserve::worker {

// Words a bitmask of `vocab_size` bits takes.
inline int64_t TokenBitmaskWords(int64_t vocab_size) { return (vocab_size + 31) / 32; }

// Token t is allowed when bitmask[t / 32] >> (t % 32) & 1. CHECKs the sizes agree.
void ApplyTokenBitmask(absl::Span<const uint32_t> bitmask, absl::Span<float> logits);

// Whether any of the first `vocab_size` bits is set.
bool AnyTokenAllowed(absl::Span<const uint32_t> bitmask, int64_t vocab_size);

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_SAMPLING_TOKEN_BITMASK_H_
