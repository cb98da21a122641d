// The Retry-After value (whole seconds, rounded up) both transports send with a refusal that is
// worth retrying: HTTP's `retry-after` header and gRPC's `retry-after` trailing metadata.
//
// Thread-safe: a pure function.

#ifndef LLMSERVE_COMMON_STATUS_RETRY_AFTER_H_
#define LLMSERVE_COMMON_STATUS_RETRY_AFTER_H_

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace llmserve::common {

// "" when `retry_after` is not positive (send nothing).
inline std::string RetryAfterValue(absl::Duration retry_after) {
  if (retry_after <= absl::ZeroDuration()) return "";
  return absl::StrCat(absl::ToInt64Seconds(absl::Ceil(retry_after, absl::Seconds(1))));
}

}  // namespace llmserve::common

#endif  // LLMSERVE_COMMON_STATUS_RETRY_AFTER_H_
