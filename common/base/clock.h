// Time as a seam (LevelDB's Env idea): the components whose decisions depend on the time (the
// engine's timings and token rates, a generation's latencies, the worker pool's heartbeats,
// backoffs and idle timeouts) read it from a Clock, so that tests can run them on a simulated
// clock (tests/testing/simulated_clock.h) and check exact values instead of sleeping. Deadlines
// handed to the operating system or to gRPC stay on the real clock.
//
// Thread-safe: Now() may be called from any thread.

#ifndef LLMSERVE_COMMON_BASE_CLOCK_H_
#define LLMSERVE_COMMON_BASE_CLOCK_H_

#include "absl/time/time.h"

namespace llmserve::common {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;

  // absl::Now(); one instance for the process, never destroyed.
  static const Clock* Real();
  // `clock`, or the real one when null (what options default to).
  static const Clock* OrReal(const Clock* clock) { return clock != nullptr ? clock : Real(); }
};

}  // namespace llmserve::common

#endif  // LLMSERVE_COMMON_BASE_CLOCK_H_
