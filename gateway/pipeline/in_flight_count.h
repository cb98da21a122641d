// InFlightCount counts what is in flight (requests, generations) for as long as each Guard lives,
// and lets a shutdown wait, on a condition rather than by polling, until none is left: the drain
// waits for requests, the server's destructor for generations still unwinding on gRPC threads
// before it destroys the worker client they use. Guards are move-only, so that one can travel
// with a request through callbacks (the prepare stage, admission) and still count it once; each
// keeps its count alive, so a guard may outlive whoever made the count.
//
// Thread-safe.

#ifndef LLMSERVE_GATEWAY_PIPELINE_IN_FLIGHT_COUNT_H_
#define LLMSERVE_GATEWAY_PIPELINE_IN_FLIGHT_COUNT_H_

#include <memory>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace llmserve::gateway {

class InFlightCount : public std::enable_shared_from_this<InFlightCount> {
 public:
  class Guard {
   public:
    Guard() = default;  // counts nothing
    Guard(Guard&& other) noexcept : count_(std::move(other.count_)) {}
    Guard& operator=(Guard&& other) noexcept {
      Release();
      count_ = std::move(other.count_);
      return *this;
    }
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;
    ~Guard() { Release(); }

   private:
    friend class InFlightCount;
    explicit Guard(std::shared_ptr<InFlightCount> count) : count_(std::move(count)) {}
    void Release() {
      if (count_ == nullptr) return;
      // Declared before the lock, so destroyed after it is released: this may be the last
      // reference to the count, whose mutex must not be destroyed while held.
      const std::shared_ptr<InFlightCount> count = std::move(count_);
      absl::MutexLock lock(&count->mutex_);
      --count->count_;
    }
    std::shared_ptr<InFlightCount> count_;
  };

  static std::shared_ptr<InFlightCount> Create() {
    return std::shared_ptr<InFlightCount>(new InFlightCount());
  }

  // One more in flight until the guard is destroyed.
  Guard Enter() {
    absl::MutexLock lock(&mutex_);
    ++count_;
    return Guard(shared_from_this());
  }

  int count() const {
    absl::MutexLock lock(&mutex_);
    return count_;
  }

  // Waits until none is in flight or until `deadline`; returns how many are then.
  int WaitForZero(absl::Time deadline) const {
    absl::MutexLock lock(&mutex_);
    mutex_.AwaitWithDeadline(absl::Condition(
                                 +[](const int* count) { return *count == 0; }, &count_),
                             deadline);
    return count_;
  }

 private:
  InFlightCount() = default;

  mutable absl::Mutex mutex_;
  int count_ ABSL_GUARDED_BY(mutex_) = 0;
};

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_PIPELINE_IN_FLIGHT_COUNT_H_
