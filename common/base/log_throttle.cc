#include "common/base/log_throttle.h"

namespace llmserve::common {

std::optional<int64_t> LogThrottle::Record(absl::Time now) {
  absl::MutexLock lock(&mu_);
  if (last_logged_ != absl::InfinitePast() && now - last_logged_ < interval_) {
    ++suppressed_;
    return std::nullopt;
  }
  last_logged_ = now;
  const int64_t suppressed = suppressed_;
  suppressed_ = 0;
  return suppressed;
}

}  // namespace llmserve::common
