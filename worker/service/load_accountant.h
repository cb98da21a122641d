// The worker's account of its engine, kept from the engine's reports (StepStats, engine.h): the
// load snapshot that the load stream and /metrics read (counts after the latest iteration, totals
// since start, token rates over the last few seconds), the set of block hashes in the prefix cache,
// and the prefix-cache changes the load stream has not taken yet. The engine only reports what
// each iteration did; keeping score is this class's job (vLLM's v1/metrics/stats.py beside
// v1/engine/core.py).
//
// Thread-safe: Record runs on the engine thread and holds the lock only to fold one report in;
// every other method may be called from any thread.

#ifndef LLMSERVE_WORKER_SERVICE_LOAD_ACCOUNTANT_H_
#define LLMSERVE_WORKER_SERVICE_LOAD_ACCOUNTANT_H_

#include <cstdint>
#include <deque>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "worker/engine/engine.h"

namespace llmserve::worker {

// The engine's load as of its latest report.
struct EngineLoad {
  // After the latest iteration.
  int32_t running = 0;
  int32_t waiting = 0;
  int32_t kv_blocks_total = 0;
  int32_t kv_blocks_free = 0;
  // Prompt tokens served from the prefix cache / prompt tokens admitted, since start.
  double prefix_cache_hit_rate = 0;
  // The two counts behind the rate (tokens).
  int64_t prefix_cache_queries = 0;
  int64_t prefix_cache_hits = 0;
  // Tokens of the forward passes of the last LoadAccountant::kRateWindow, divided by the time
  // from the first one's start to the time of reading: an idle engine's rates decay to zero.
  double prompt_tokens_per_s = 0;
  double generated_tokens_per_s = 0;
  // Forward passes (failed ones included), and requests preempted, since start.
  int64_t steps = 0;
  int64_t preemptions = 0;
  // Time spent in the step loop outside Backend::Forward, and inside it, since start (seconds). A
  // draft model's forward passes count as forward time.
  double overhead_s = 0;
  double forward_s = 0;
  // Speculative decoding since start (StepStats' increments summed; the per-position counts are
  // empty when speculation is off).
  int64_t spec_drafts = 0;
  int64_t spec_draft_tokens = 0;
  int64_t spec_accepted_tokens = 0;
  std::vector<int64_t> spec_accepted_per_position;
  // With LoRA slots: each adapter with requests after the latest iteration
  // (StepStats::lora_adapters), and that iteration's time.
  std::vector<LoraAdapterLoad> lora_adapters;
  absl::Time lora_adapters_time = absl::UnixEpoch();
};

class LoadAccountant {
 public:
  // The token rates are over the forward passes of this window, up to the time of reading.
  static constexpr absl::Duration kRateWindow = absl::Seconds(5);

  // `clock` (null: the real one) is the engine's: its reports carry times from it, and the rates
  // are read as of its now, so that they fall to zero when the engine goes idle.
  explicit LoadAccountant(const common::Clock* clock = nullptr)
      : clock_(common::Clock::OrReal(clock)) {}
  // Untaken cache events are dropped past this many block hashes; the consumer then resends the
  // whole set (CachedBlockHashes) instead of an unbounded backlog.
  static constexpr int64_t kMaxPendingEventHashes = int64_t{1} << 20;

  // Folds one report in. EngineConfig::on_step may call it directly.
  void Record(const StepStats& step);

  EngineLoad Load() const;
  // Load() with the running / waiting / free-block counts the engine holds now (Engine::Counts):
  // what the load stream and /metrics serve, so that a request counts as waiting from the moment
  // it is added rather than from the engine's next report.
  EngineLoad Load(const EngineCounts& live) const;

  // Prefix-cache changes since the last call, oldest first, for the worker's load stream (one
  // consumer). `overflowed`: changes were dropped because nobody took them for a long time.
  struct CacheEvents {
    std::vector<PrefixCacheEvent> events;
    bool overflowed = false;
  };
  CacheEvents TakePrefixCacheEvents();
  // The routing hash of every block in the prefix cache as of the latest report.
  std::vector<uint64_t> CachedBlockHashes() const;

 private:
  struct RecentPass {
    absl::Time time;
    int64_t prompt_tokens;
    int64_t generated_tokens;
    double seconds;  // the pass's forward and overhead time
  };

  const common::Clock* const clock_;
  mutable absl::Mutex mutex_;
  // Without the token rates (Load computes them).
  EngineLoad load_ ABSL_GUARDED_BY(mutex_);
  std::deque<RecentPass> recent_ ABSL_GUARDED_BY(mutex_);
  std::vector<PrefixCacheEvent> events_ ABSL_GUARDED_BY(mutex_);
  int64_t pending_event_hashes_ ABSL_GUARDED_BY(mutex_) = 0;
  bool events_overflowed_ ABSL_GUARDED_BY(mutex_) = false;
  absl::flat_hash_set<uint64_t> cached_hashes_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_SERVICE_LOAD_ACCOUNTANT_H_
