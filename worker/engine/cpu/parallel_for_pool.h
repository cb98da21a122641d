// A fixed pool of threads for data-parallel loops in the CPU backend. The calling thread takes
// part, so a pool of N threads runs N - 1 workers. One loop runs at a time.
//
// A decode step runs a few hundred short loops back to back, so waking sleeping threads through
// the kernel for each one costs more than the loop (a third of a small model's decode step). Idle
// workers therefore spin for a short while (kSpin) before they sleep on a condition variable, and
// the caller spins as long before it sleeps waiting for the others to finish. On a shared machine
// spinning backfires: a thread that spins while its partner has lost its core to another process
// burns the time the partner needs. So when the caller's spin for workers that were already awake
// runs out (their ranges are as long as its own, so only a worker without a core makes it run out),
// nobody spins for kNoSpinAfterContention: the pool then behaves like a plain sleeping one.
//
// Thread-compatible: one thread (the engine thread) calls ParallelFor; the workers are internal.

#ifndef LLMSERVE_WORKER_ENGINE_CPU_PARALLEL_FOR_POOL_H_
#define LLMSERVE_WORKER_ENGINE_CPU_PARALLEL_FOR_POOL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace llmserve::worker::cpu {

class ParallelForPool {
 public:
  // How long an idle worker polls for the next loop before it sleeps.
  static constexpr absl::Duration kSpin = absl::Microseconds(200);
  // How long spinning stays off once a worker was found missing.
  static constexpr absl::Duration kNoSpinAfterContention = absl::Milliseconds(20);

  // `num_threads` >= 1, the calling thread included.
  explicit ParallelForPool(int num_threads);
  ParallelForPool(const ParallelForPool&) = delete;
  ParallelForPool& operator=(const ParallelForPool&) = delete;
  ~ParallelForPool();

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(thread_index, begin, end) over a split of [0, n) into contiguous ranges, one per
  // thread, and returns when all are done. thread_index < num_threads() lets callers use
  // per-thread scratch space.
  void ParallelFor(int64_t n, const std::function<void(int, int64_t, int64_t)>& fn);

  // Counting for profiles (forward_profile.h), off by default: loops run, and the calling thread's
  // nanoseconds between finishing its own range and every worker finishing theirs. Read and set
  // by the calling thread only.
  void set_measure_waits(bool on) { measure_waits_ = on; }
  int64_t loops_measured() const { return loops_measured_; }
  int64_t wait_nanos_measured() const { return wait_nanos_measured_; }

 private:
  void WorkerLoop(int index);
  // kSpin, or 0 while spinning is off after contention.
  int64_t SpinBudgetNanos() const;
  // Returns once every worker has finished the current loop. `workers_were_spinning`: none had to
  // be woken from sleep for it, so a long wait means contention rather than wake-up latency.
  void AwaitWorkers(bool workers_were_spinning);
  // Returns the generation after `seen` once there is one (or stopping_ is set).
  uint64_t AwaitGeneration(uint64_t seen);

  std::vector<std::thread> workers_;
  // The loop being run: written by the caller before it publishes a new generation_, read by the
  // workers after they see it.
  const std::function<void(int, int64_t, int64_t)>* task_ = nullptr;
  int64_t task_size_ = 0;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stopping_{false};
  // Workers that gave up spinning wait here; the caller signals only when one may be asleep.
  std::atomic<int> sleepers_{0};
  // The caller, when it gave up spinning for the workers, waits on done_.
  std::atomic<bool> caller_sleeping_{false};
  // steady_clock nanoseconds until which nobody spins.
  std::atomic<int64_t> no_spin_until_ns_{0};
  bool measure_waits_ = false;
  int64_t loops_measured_ = 0;
  int64_t wait_nanos_measured_ = 0;
  absl::Mutex mutex_;
  absl::CondVar wake_;
  absl::CondVar done_;
};

}  // namespace llmserve::worker::cpu

#endif  // LLMSERVE_WORKER_ENGINE_CPU_PARALLEL_FOR_POOL_H_
