// A call in flight to a worker that the WorkerPool watches for silence: a worker that stops
// producing (hung, SIGSTOPped, its host frozen) keeps its TCP connections open, so without a
// watchdog its streams would wait for the whole request timeout. The pool aborts a watched call
// when it has received nothing for --stream_idle_timeout, or when neither the call nor the
// worker's load stream has said anything for the worker's heartbeat window.
//
// Thread-safe: Touch() on the call's own threads, Abort() and last_activity() on the pool's
// monitor thread.

#ifndef LLMSERVE_GATEWAY_ROUTER_WATCHED_CALL_H_
#define LLMSERVE_GATEWAY_ROUTER_WATCHED_CALL_H_

#include <atomic>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/base/clock.h"

namespace llmserve::gateway {

class WatchedCall {
 public:
  // `clock`: the pool's (WorkerPoolOptions::clock); null: the real one.
  explicit WatchedCall(const common::Clock* clock = nullptr)
      : clock_(common::Clock::OrReal(clock)) {
    Touch();
  }
  virtual ~WatchedCall() = default;

  // Something arrived on the call (or it started).
  void Touch() {
    last_activity_ns_.store(absl::ToUnixNanos(clock_->Now()), std::memory_order_relaxed);
  }
  absl::Time last_activity() const {
    return absl::FromUnixNanos(last_activity_ns_.load(std::memory_order_relaxed));
  }

  // Ends the call with `reason` (UNAVAILABLE). Called at most once, by the pool, which holds its
  // registry lock meanwhile: it must not block or call back into the pool.
  virtual void Abort(const absl::Status& reason) = 0;

 private:
  const common::Clock* const clock_;
  std::atomic<int64_t> last_activity_ns_{0};
};

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_ROUTER_WATCHED_CALL_H_
