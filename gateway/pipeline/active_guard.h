// ActiveGuard counts a request as in flight for as long as it lives; the gateway's drain waits
// for the count to reach zero. Move-only, so that it can travel with a request through callbacks
// (the prepare stage, admission) and still count it exactly once.
//
// Thread-safe (the counter is atomic).

#ifndef LLMSERVE_GATEWAY_PIPELINE_ACTIVE_GUARD_H_
#define LLMSERVE_GATEWAY_PIPELINE_ACTIVE_GUARD_H_

#include <atomic>
#include <memory>
#include <utility>

namespace llmserve::gateway {

class ActiveGuard {
 public:
  explicit ActiveGuard(std::shared_ptr<std::atomic<int>> counter) : counter_(std::move(counter)) {
    ++*counter_;
  }
  ActiveGuard(ActiveGuard&& other) noexcept : counter_(std::move(other.counter_)) {}
  ActiveGuard& operator=(ActiveGuard&&) = delete;
  ActiveGuard(const ActiveGuard&) = delete;
  ActiveGuard& operator=(const ActiveGuard&) = delete;
  ~ActiveGuard() {
    if (counter_ != nullptr) --*counter_;
  }

 private:
  std::shared_ptr<std::atomic<int>> counter_;
};

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_PIPELINE_ACTIVE_GUARD_H_
