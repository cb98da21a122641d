// LogThrottle: decides which occurrences of a recurring condition get logged, so that an error
// that repeats in a tight loop cannot flood the log. The first occurrence is logged; after it, at
// most one per `interval`, each saying how many were left out since the previous one. The HTTP
// server uses it for accept() failures (EMFILE when out of file descriptors), which it retries
// every 50 ms; protobuf_log.h for libprotobuf's messages, which a client can provoke per request.
//
//   LogThrottle throttle(absl::Seconds(10));
//   if (std::optional<int64_t> skipped = throttle.Record(absl::Now())) {
//     LLMSERVE_LOG(WARNING) << "accept failed: ... (" << *skipped << " more not logged)";
//   }
//
// Thread-safe.

#ifndef LLMSERVE_COMMON_BASE_LOG_THROTTLE_H_
#define LLMSERVE_COMMON_BASE_LOG_THROTTLE_H_

#include <cstdint>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace llmserve::common {

class LogThrottle {
 public:
  explicit LogThrottle(absl::Duration interval) : interval_(interval) {}

  // Records one occurrence at `now`. When it should be logged: the number of occurrences since
  // the last logged one that were not (0 for the first). nullopt when it should not be logged.
  [[nodiscard]] std::optional<int64_t> Record(absl::Time now);

 private:
  const absl::Duration interval_;
  absl::Mutex mu_;
  // When the last logged occurrence happened; none yet while InfinitePast.
  absl::Time last_logged_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int64_t suppressed_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace llmserve::common

#endif  // LLMSERVE_COMMON_BASE_LOG_THROTTLE_H_
