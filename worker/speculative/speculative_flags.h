// The speculative-decoding command-line flags, shared by llmserve-worker and llmserve-run so that
// both spell and check them alike:
//   --speculative_method=none|ngram|draft  --speculative_model=DIR  --num_speculative_tokens=3
//   --prompt_lookup_min=2  --prompt_lookup_max=4  --speculative_disable_batch_size=-1

#ifndef LLMSERVE_WORKER_SPECULATIVE_SPECULATIVE_FLAGS_H_
#define LLMSERVE_WORKER_SPECULATIVE_SPECULATIVE_FLAGS_H_

#include "absl/status/statusor.h"
#include "worker/speculative/speculative_config.h"

namespace llmserve::worker {

// The flags' values, validated: INVALID_ARGUMENT naming the flag (--num_speculative_tokens ...).
absl::StatusOr<SpeculativeConfig> SpeculativeConfigFromFlags();

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_SPECULATIVE_SPECULATIVE_FLAGS_H_
