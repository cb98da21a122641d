#include "common/base/thread_pool.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"

namespace llmserve::common {

ThreadPool::ThreadPool(int num_threads, int max_queued)
    : num_threads_(num_threads), max_queued_(max_queued) {
  LLMSERVE_CHECK(num_threads >= 1) << "ThreadPool needs a thread, got " << num_threads;
  LLMSERVE_CHECK(max_queued >= 0) << "ThreadPool: max_queued " << max_queued << " < 0";
  absl::MutexLock lock(&join_mutex_);
  threads_.reserve(num_threads);
  for (int i = 0; i < num_threads; ++i) threads_.emplace_back([this] { Loop(); });
}

ThreadPool::~ThreadPool() { Shutdown(); }

absl::Status ThreadPool::Submit(Task task, Priority priority) {
  absl::MutexLock lock(&mutex_);
  if (stopping_) return absl::UnavailableError("the thread pool is shutting down");
  // A task waits only when every thread is busy: the queue bound counts those.
  const int waiting = static_cast<int>(high_.size() + normal_.size()) + busy_ - num_threads_ + 1;
  if (waiting > max_queued_) {
    return absl::ResourceExhaustedError(
        absl::StrCat(num_threads_, " threads are busy and ", max_queued_, " tasks wait"));
  }
  (priority == Priority::kHigh ? high_ : normal_).push_back(std::move(task));
  return absl::OkStatus();
}

int ThreadPool::queued() const {
  absl::MutexLock lock(&mutex_);
  return static_cast<int>(high_.size() + normal_.size());
}

void ThreadPool::Shutdown() {
  {
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
  }
  absl::MutexLock lock(&join_mutex_);
  for (std::thread& thread : threads_) {
    if (thread.joinable()) thread.join();
  }
  threads_.clear();
}

void ThreadPool::Loop() {
  while (true) {
    Task task;
    {
      absl::MutexLock lock(&mutex_);
      mutex_.Await(absl::Condition(
          +[](ThreadPool* pool) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pool->mutex_) {
            return !pool->high_.empty() || !pool->normal_.empty() || pool->stopping_;
          },
          this));
      // Accepted tasks run even when stopping: their owners wait for them.
      std::deque<Task>& queue = !high_.empty() ? high_ : normal_;
      if (queue.empty()) return;
      task = std::move(queue.front());
      queue.pop_front();
      ++busy_;
    }
    std::move(task)();
    absl::MutexLock lock(&mutex_);
    --busy_;
  }
}

}  // namespace llmserve::common
