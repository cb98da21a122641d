// ThreadPool: a fixed set of threads that run submitted tasks in arrival order, with a bounded
// queue. For CPU work that must not run on an I/O thread (the gateway prepares prompts on one:
// chat templates and tokenization of up to a megabyte each). Not the CPU backend's pool
// (worker/engine/cpu/parallel_for_pool.h), which splits one data-parallel loop over its threads.
//
// Submit never blocks: a full queue or a pool that is shutting down refuses the task, and the
// caller decides what that means (the gateway answers 429 or 503). A kHigh task runs before every
// kNormal one still waiting (the gateway's short prompts do not wait behind megabyte ones).
// Shutdown runs every task already accepted, then joins the threads: a task's owner can rely on it
// running exactly once when Submit returned OK. Tasks that must end quickly at shutdown check their
// own flag.
//
// Thread-safe.

#ifndef LLMSERVE_COMMON_BASE_THREAD_POOL_H_
#define LLMSERVE_COMMON_BASE_THREAD_POOL_H_

#include <cstdint>
#include <deque>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace llmserve::common {

class ThreadPool {
 public:
  using Task = absl::AnyInvocable<void() &&>;
  enum class Priority { kNormal, kHigh };

  // `num_threads` >= 1 run tasks; up to `max_queued` >= 0 more wait for one of them.
  ThreadPool(int num_threads, int max_queued);
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  ~ThreadPool();  // Shutdown()

  // Queues `task` to run on a pool thread, in arrival order within its priority.
  // RESOURCE_EXHAUSTED when `max_queued` tasks (of either priority) already wait (every thread
  // busy), UNAVAILABLE after Shutdown began; the task is then destroyed without running.
  absl::Status Submit(Task task, Priority priority = Priority::kNormal);

  // Refuses new tasks, waits for the accepted ones to run, joins the threads. Idempotent; not
  // from a pool thread.
  void Shutdown();

  int num_threads() const { return num_threads_; }
  int max_queued() const { return max_queued_; }
  // Tasks accepted and not started yet.
  int queued() const;

 private:
  void Loop();

  const int num_threads_;
  const int max_queued_;
  mutable absl::Mutex mutex_;
  std::deque<Task> high_ ABSL_GUARDED_BY(mutex_);
  std::deque<Task> normal_ ABSL_GUARDED_BY(mutex_);
  // Threads running a task now.
  int busy_ ABSL_GUARDED_BY(mutex_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  // Joined by the first Shutdown; guarded by join_mutex_ so that a second caller waits for it.
  absl::Mutex join_mutex_;
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(join_mutex_);
};

}  // namespace llmserve::common

#endif  // LLMSERVE_COMMON_BASE_THREAD_POOL_H_
