#include "common/base/protobuf_log.h"

#include <google/protobuf/stubs/logging.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/base/log_throttle.h"
#include "common/base/logging.h"

namespace llmserve::common {
namespace {

// Source locations in libprotobuf are few; past this many, the rest share one throttle.
constexpr size_t kMaxThrottledLocations = 256;

class ProtobufLogThrottles {
 public:
  explicit ProtobufLogThrottles(absl::Duration interval)
      : interval_(interval), overflow_(interval) {}

  // The throttle for messages logged at `location`.
  LogThrottle& For(const std::string& location) {
    absl::MutexLock lock(&mu_);
    auto it = by_location_.find(location);
    if (it != by_location_.end()) return *it->second;
    if (by_location_.size() >= kMaxThrottledLocations) return overflow_;
    return *by_location_.emplace(location, std::make_unique<LogThrottle>(interval_)).first->second;
  }

  absl::Duration interval() const { return interval_; }

 private:
  const absl::Duration interval_;
  LogThrottle overflow_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<LogThrottle>> by_location_ ABSL_GUARDED_BY(mu_);
};

// Set once by Install; never destroyed (libprotobuf may log during static destruction).
ProtobufLogThrottles* throttles = nullptr;

void ThrottledProtobufLogHandler(google::protobuf::LogLevel level, const char* filename, int line,
                                 const std::string& message) {
  const std::string location = absl::StrCat(filename != nullptr ? filename : "?", ":", line);
  std::optional<int64_t> skipped = int64_t{0};
  if (level != google::protobuf::LOGLEVEL_FATAL) {
    skipped = throttles->For(location).Record(absl::Now());
    if (!skipped.has_value()) return;
  }
  const std::string repeats =
      *skipped > 0 ? absl::StrCat(" (", *skipped, " more like it since the last message)")
                   : absl::StrCat(" (logged at most once every ",
                                  absl::FormatDuration(throttles->interval()), ")");
  const std::string text = absl::StrCat("libprotobuf ", location, ": ", message, repeats);
  switch (level) {
    case google::protobuf::LOGLEVEL_INFO:
      LLMSERVE_LOG(INFO) << text;
      break;
    case google::protobuf::LOGLEVEL_WARNING:
      LLMSERVE_LOG(WARNING) << text;
      break;
    default:
      LLMSERVE_LOG(ERROR) << text;
      break;
  }
}

}  // namespace

void InstallThrottledProtobufLogHandler(absl::Duration interval) {
  if (throttles == nullptr) throttles = new ProtobufLogThrottles(interval);
  google::protobuf::SetLogHandler(&ThrottledProtobufLogHandler);
}

}  // namespace llmserve::common
