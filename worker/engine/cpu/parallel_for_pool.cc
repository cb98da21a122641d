#include "worker/engine/cpu/parallel_for_pool.h"

#include <algorithm>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "worker/engine/cpu/forward_profile.h"

namespace llmserve::worker::cpu {
namespace {

// Thread `index` of `threads` gets the index-th of `threads` near-equal contiguous ranges.
std::pair<int64_t, int64_t> Range(int64_t n, int threads, int index) {
  const int64_t base = n / threads, extra = n % threads;
  const int64_t begin = index * base + std::min<int64_t>(index, extra);
  return {begin, begin + base + (index < extra ? 1 : 0)};
}

inline void CpuRelax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

// Polls `done` with pause instructions for up to `limit_ns`; true when it became true.
template <typename Done>
bool Spin(int64_t limit_ns, const Done& done) {
  if (done()) return true;
  if (limit_ns <= 0) return false;
  const int64_t deadline = SteadyClockNanos() + limit_ns;
  while (true) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      CpuRelax();
    }
    if (SteadyClockNanos() >= deadline) return false;
  }
}

}  // namespace

ParallelForPool::ParallelForPool(int num_threads) {
  for (int i = 1; i < std::max(1, num_threads); ++i) {
    workers_.emplace_back([this, i] { WorkerLoop(i); });
  }
}

ParallelForPool::~ParallelForPool() {
  {
    absl::MutexLock lock(&mutex_);
    stopping_.store(true);
    wake_.SignalAll();
  }
  for (std::thread& worker : workers_) worker.join();
}

void ParallelForPool::ParallelFor(int64_t n, const std::function<void(int, int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (measure_waits_) ++loops_measured_;
  const int threads = num_threads();
  if (threads == 1 || n == 1) {
    fn(0, 0, n);
    return;
  }
  task_ = &fn;
  task_size_ = n;
  pending_.store(threads - 1, std::memory_order_relaxed);
  // seq_cst store then load, against the worker's seq_cst increment of sleepers_ then load of
  // generation_: either the worker sees the new generation or we see it asleep and signal.
  generation_.fetch_add(1);
  const bool woke_sleepers = sleepers_.load() > 0;
  if (woke_sleepers) {
    absl::MutexLock lock(&mutex_);
    wake_.SignalAll();
  }
  const auto [begin, end] = Range(n, threads, 0);
  if (begin < end) fn(0, begin, end);
  const int64_t wait_start = measure_waits_ ? SteadyClockNanos() : 0;
  AwaitWorkers(/*workers_were_spinning=*/!woke_sleepers);
  if (measure_waits_) wait_nanos_measured_ += SteadyClockNanos() - wait_start;
  task_ = nullptr;
}

int64_t ParallelForPool::SpinBudgetNanos() const {
  return SteadyClockNanos() < no_spin_until_ns_.load(std::memory_order_relaxed)
             ? 0
             : absl::ToInt64Nanoseconds(kSpin);
}

void ParallelForPool::AwaitWorkers(bool workers_were_spinning) {
  // seq_cst loads: the sleeping path below pairs a store of caller_sleeping_ with this load against
  // the worker's decrement of pending_ and its load of caller_sleeping_ (a Dekker handshake).
  auto all_done = [this] { return pending_.load() == 0; };
  const int64_t budget = SpinBudgetNanos();
  if (Spin(budget, all_done)) return;
  // The workers were running (not waking up from sleep) and their ranges are as long as ours, so
  // a whole spin that runs out means one of them lost its core to another process: stop spinning
  // for a while rather than burn the time it needs.
  if (budget > 0 && workers_were_spinning) {
    no_spin_until_ns_.store(SteadyClockNanos() + absl::ToInt64Nanoseconds(kNoSpinAfterContention),
                            std::memory_order_relaxed);
  }
  absl::MutexLock lock(&mutex_);
  caller_sleeping_.store(true);
  while (!all_done()) done_.Wait(&mutex_);
  caller_sleeping_.store(false);
}

uint64_t ParallelForPool::AwaitGeneration(uint64_t seen) {
  // seq_cst, for the same handshake with sleepers_ as in AwaitWorkers.
  auto changed = [this, seen] { return generation_.load() != seen || stopping_.load(); };
  if (!Spin(SpinBudgetNanos(), changed)) {
    absl::MutexLock lock(&mutex_);
    sleepers_.fetch_add(1);
    while (!changed()) wake_.Wait(&mutex_);
    sleepers_.fetch_sub(1);
  }
  return generation_.load();
}

void ParallelForPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  while (true) {
    seen = AwaitGeneration(seen);
    if (stopping_.load()) return;
    const auto [begin, end] = Range(task_size_, num_threads(), index);
    if (begin < end) (*task_)(index, begin, end);
    // seq_cst, against the caller's store of caller_sleeping_ then load of pending_.
    if (pending_.fetch_sub(1) == 1 && caller_sleeping_.load()) {
      absl::MutexLock lock(&mutex_);
      done_.Signal();
    }
  }
}

}  // namespace llmserve::worker::cpu
