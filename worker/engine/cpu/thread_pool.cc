#include "worker/engine/cpu/thread_pool.h"

#include <algorithm>

namespace llmserve::worker::cpu {
namespace {

// Thread `index` of `threads` gets the index-th of `threads` near-equal contiguous ranges.
std::pair<int64_t, int64_t> Range(int64_t n, int threads, int index) {
  const int64_t base = n / threads, extra = n % threads;
  const int64_t begin = index * base + std::min<int64_t>(index, extra);
  return {begin, begin + base + (index < extra ? 1 : 0)};
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  for (int i = 1; i < std::max(1, num_threads); ++i) {
    workers_.emplace_back([this, i] { WorkerLoop(i); });
  }
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
  }
  for (std::thread& worker : workers_) worker.join();
}

void ThreadPool::ParallelFor(int64_t n, const std::function<void(int, int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  const int threads = num_threads();
  if (threads == 1 || n == 1) {
    fn(0, 0, n);
    return;
  }
  {
    absl::MutexLock lock(&mutex_);
    task_ = &fn;
    task_size_ = n;
    pending_ = threads - 1;
    ++generation_;
  }
  const auto [begin, end] = Range(n, threads, 0);
  if (begin < end) fn(0, begin, end);
  absl::MutexLock lock(&mutex_);
  mutex_.Await(absl::Condition(
      +[](int* pending) { return *pending == 0; }, &pending_));
  task_ = nullptr;
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  while (true) {
    const std::function<void(int, int64_t, int64_t)>* task;
    int64_t size;
    {
      absl::MutexLock lock(&mutex_);
      auto ready = [this, &seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
        return stopping_ || generation_ != seen;
      };
      mutex_.Await(absl::Condition(&ready));
      if (stopping_) return;
      seen = generation_;
      task = task_;
      size = task_size_;
    }
    const auto [begin, end] = Range(size, num_threads(), index);
    if (begin < end) (*task)(index, begin, end);
    absl::MutexLock lock(&mutex_);
    --pending_;
  }
}

}  // namespace llmserve::worker::cpu
