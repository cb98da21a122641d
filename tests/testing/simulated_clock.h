// A Clock that moves only when the test says so.

#ifndef LLMSERVE_TESTS_TESTING_SIMULATED_CLOCK_H_
#define LLMSERVE_TESTS_TESTING_SIMULATED_CLOCK_H_

#include <atomic>
#include <cstdint>

#include "absl/time/time.h"
#include "common/base/clock.h"

namespace llmserve::testing {

class SimulatedClock final : public common::Clock {
 public:
  // Starts at an arbitrary fixed time, far from the epoch.
  explicit SimulatedClock(absl::Time start = absl::FromUnixSeconds(1'700'000'000))
      : nanos_(absl::ToUnixNanos(start)) {}

  absl::Time Now() const override { return absl::FromUnixNanos(nanos_.load()); }
  void Advance(absl::Duration by) { nanos_.fetch_add(absl::ToInt64Nanoseconds(by)); }

 private:
  std::atomic<int64_t> nanos_;
};

}  // namespace llmserve::testing

#endif  // LLMSERVE_TESTS_TESTING_SIMULATED_CLOCK_H_
