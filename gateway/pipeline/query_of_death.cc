#include "gateway/pipeline/query_of_death.h"

#include <algorithm>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"

namespace llmserve::gateway {
namespace {

std::string Seconds(absl::Duration duration) {
  return absl::StrCat(
      std::max<int64_t>(1, absl::ToInt64Seconds(absl::Ceil(duration, absl::Seconds(1)))), " s");
}

}  // namespace

absl::Status ValidateQueryOfDeathOptions(const QueryOfDeathOptions& options) {
  if (options.crash_retries < 0 || options.crash_retries > 9) {
    return absl::InvalidArgumentError(
        absl::StrCat("--query_of_death_retries must be in [0, 9], got ", options.crash_retries));
  }
  if (options.quarantine < absl::ZeroDuration() || options.quarantine > absl::Hours(24)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--query_of_death_quarantine must be in [0, 24h] (0: off), got ",
                     absl::FormatDuration(options.quarantine)));
  }
  if (options.quarantine_size < 1 || options.quarantine_size > 1000000) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--query_of_death_quarantine_size must be in [1, 1000000], got ", options.quarantine_size));
  }
  return absl::OkStatus();
}

QueryOfDeathGuard::QueryOfDeathGuard(const QueryOfDeathOptions& options, GatewayMetrics* metrics)
    : options_(options),
      metrics_(metrics),
      quarantine_(std::max(options.quarantine, absl::Nanoseconds(1)),
                  std::max<size_t>(options.quarantine_size, 1)) {}

absl::Status QueryOfDeathGuard::Check(uint64_t fingerprint, absl::string_view request_id,
                                      absl::Time now) {
  if (options_.quarantine <= absl::ZeroDuration()) return absl::OkStatus();
  const std::optional<absl::Time> until = quarantine_.Until(fingerprint, now);
  if (!until.has_value()) return absl::OkStatus();
  if (metrics_ != nullptr) metrics_->OnQueryOfDeathRefused();
  if (std::optional<int64_t> skipped = refusal_log_.Record(now)) {
    LLMSERVE_LOG(WARNING) << "request " << request_id
                          << " refused without reaching a worker: an identical request made a "
                             "worker fail while running it (query of death; quarantined for "
                          << Seconds(*until - now) << " more; " << *skipped
                          << " more refusals not logged)";
  }
  return absl::UnavailableError(absl::StrCat(
      "refused: an identical request (same model, prompt, sampling and constraints) made a "
      "worker fail while running it, so such requests are not sent to workers for another ",
      Seconds(*until - now), " (query-of-death protection)"));
}

void QueryOfDeathGuard::OnWorkerCrash(uint64_t fingerprint, absl::string_view request_id,
                                      absl::string_view worker, absl::string_view cause,
                                      bool retried, absl::Time now) {
  const bool quarantine = !retried && options_.quarantine > absl::ZeroDuration();
  if (quarantine) quarantine_.Add(fingerprint, now);
  if (metrics_ != nullptr) {
    metrics_->OnQueryOfDeathCrash(retried);
    metrics_->SetQueryOfDeathQuarantined(static_cast<int64_t>(quarantine_.size(now)));
  }
  LLMSERVE_LOG(WARNING) << "request " << request_id << ": the worker " << worker
                        << " went away while running it (" << cause << "); "
                        << (retried      ? "retried on another worker"
                            : quarantine ? absl::StrCat("not retried; identical requests "
                                                        "are refused for ",
                                                        Seconds(options_.quarantine))
                                         : std::string("not retried"));
}

std::string QueryOfDeathGuard::GiveUpMessage() const {
  return absl::StrCat(
      "the worker failed while running this request (its connection dropped), so the request is "
      "not retried",
      options_.crash_retries == 0 ? " on another worker" : " again",
      options_.quarantine > absl::ZeroDuration()
          ? absl::StrCat("; identical requests are refused for ", Seconds(options_.quarantine))
          : std::string());
}

}  // namespace llmserve::gateway
