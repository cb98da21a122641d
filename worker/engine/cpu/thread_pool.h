// A fixed pool of threads for data-parallel loops in the CPU backend. The calling thread takes
// part, so a pool of N threads runs N - 1 workers. One loop runs at a time.
//
// Thread-compatible: one thread (the engine thread) calls ParallelFor; the workers are internal.

#ifndef LLMSERVE_WORKER_ENGINE_CPU_THREAD_POOL_H_
#define LLMSERVE_WORKER_ENGINE_CPU_THREAD_POOL_H_

#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace llmserve::worker::cpu {

class ThreadPool {
 public:
  // `num_threads` >= 1, the calling thread included.
  explicit ThreadPool(int num_threads);
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  ~ThreadPool();

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(thread_index, begin, end) over a split of [0, n) into contiguous ranges, one per
  // thread, and returns when all are done. thread_index < num_threads() lets callers use
  // per-thread scratch space.
  void ParallelFor(int64_t n, const std::function<void(int, int64_t, int64_t)>& fn);

 private:
  void WorkerLoop(int index);

  std::vector<std::thread> workers_;
  absl::Mutex mutex_;
  const std::function<void(int, int64_t, int64_t)>* task_ ABSL_GUARDED_BY(mutex_) = nullptr;
  int64_t task_size_ ABSL_GUARDED_BY(mutex_) = 0;
  uint64_t generation_ ABSL_GUARDED_BY(mutex_) = 0;
  int pending_ ABSL_GUARDED_BY(mutex_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
};

}  // namespace llmserve::worker::cpu

#endif  // LLMSERVE_WORKER_ENGINE_CPU_THREAD_POOL_H_
