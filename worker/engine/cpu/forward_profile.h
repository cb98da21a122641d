// Where a CPU forward pass spends its time: wall time per phase of the pass, the weight bytes
// each phase's projections read, and the thread pool's loops and the time the calling thread
// waited in them for the other threads (wake-up latency plus imbalance). Collected only when
// CpuBackend::EnableProfile(true) was called (a clock read at each phase boundary, about 300 per
// decode step of a 30-layer model, and one per pool loop), for llmserve-bench-engine --profile.

#ifndef LLMSERVE_WORKER_ENGINE_CPU_FORWARD_PROFILE_H_
#define LLMSERVE_WORKER_ENGINE_CPU_FORWARD_PROFILE_H_

#include <array>
#include <chrono>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace llmserve::worker::cpu {

enum class ForwardPhase {
  kEmbed,       // the batch's bookkeeping and the token embedding lookup
  kNorm,        // the pre-attention and pre-MLP norms and the residual adds
  kQkv,         // the q/k/v projection
  kAttention,   // biases, rotary embedding, KV cache writes and attention over the cache
  kO,           // the attention output projection
  kMlpUp,       // the gate/up projection
  kActivation,  // the (gated) activation
  kMlpDown,     // the down projection
  kLora,        // unmerged LoRA deltas of every projection
  kFinalNorm,   // the final norm of the rows that need logits
  kLmHead,      // the LM head
  kCount,
};

inline constexpr int kNumForwardPhases = static_cast<int>(ForwardPhase::kCount);

// The phase's name in benchmark output ("qkv", "lm_head", ...).
absl::string_view ForwardPhaseName(ForwardPhase phase);

struct ForwardProfile {
  // Forward calls measured, and their total wall time.
  int64_t forwards = 0;
  int64_t forward_nanos = 0;
  std::array<int64_t, kNumForwardPhases> nanos{};
  // Bytes of weights the phase's projections read (packed or quantized, as held).
  std::array<int64_t, kNumForwardPhases> weight_bytes{};
  // Of nanos: the calling thread's waits for the other threads in the phase's pool loops.
  std::array<int64_t, kNumForwardPhases> wait_nanos{};
  // Thread-pool loops run, and the calling thread's time between finishing its own share of a
  // loop and every other thread finishing theirs.
  int64_t pool_loops = 0;
  int64_t pool_wait_nanos = 0;
};

// steady_clock in nanoseconds: the profile's clock, and the thread pool's for its spin limits.
inline int64_t SteadyClockNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace llmserve::worker::cpu

#endif  // LLMSERVE_WORKER_ENGINE_CPU_FORWARD_PROFILE_H_
