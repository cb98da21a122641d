// Query-of-death protection: a request that kills the worker running it must not go on to kill
// the others. Generation consults the guard (one per gateway, shared by both APIs):
//   - before the first attempt, Check: a request whose fingerprint (request_fingerprint.h) is in
//     quarantine is refused with UNAVAILABLE (HTTP 503) without reaching any worker;
//   - when a worker's connection broke while it ran a request (retry_policy.h says when),
//     OnWorkerCrash: counted, logged with the request id, and, when the request is given up on,
//     its fingerprint quarantined for --query_of_death_quarantine.
//
// Every request in flight on a worker that dies ends the same way, since the gateway cannot tell
// which of them killed it: with the default --query_of_death_retries=0 they all get a 503 and are
// quarantined. Quarantine stops identical resends (clients' and SDKs' automatic retries of a
// 503); a client that varies the request each time is not stopped by it.
//
// Thread-safe.

#ifndef LLMSERVE_GATEWAY_PIPELINE_QUERY_OF_DEATH_H_
#define LLMSERVE_GATEWAY_PIPELINE_QUERY_OF_DEATH_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/base/log_throttle.h"
#include "gateway/metrics/gateway_metrics.h"
#include "gateway/pipeline/quarantine.h"

namespace llmserve::gateway {

struct QueryOfDeathOptions {
  // Workers a request may be retried on after its worker went away while running it
  // (--query_of_death_retries). 0: none, so a request takes down one worker at most.
  int crash_retries = 0;
  // How long identical requests are refused after one was given up on because its worker went
  // away (--query_of_death_quarantine). Zero: never refused.
  absl::Duration quarantine = absl::Minutes(5);
  // Fingerprints kept at most (--query_of_death_quarantine_size); the oldest go first.
  size_t quarantine_size = 10000;
};

// INVALID_ARGUMENT naming the flag: crash_retries outside [0, 9], quarantine outside [0, 24h],
// quarantine_size outside [1, 1000000].
absl::Status ValidateQueryOfDeathOptions(const QueryOfDeathOptions& options);

class QueryOfDeathGuard {
 public:
  // `metrics` may be null; it must outlive the guard.
  QueryOfDeathGuard(const QueryOfDeathOptions& options, GatewayMetrics* metrics);

  int crash_retries() const { return options_.crash_retries; }

  // OK, or UNAVAILABLE saying that an identical request made a worker fail and until when such
  // requests are refused (counted, logged with `request_id`).
  absl::Status Check(uint64_t fingerprint, absl::string_view request_id,
                     absl::Time now = absl::Now());

  // The connection to `worker` broke while it ran `request_id` (`cause`: the transport's words).
  // `retried`: the request goes to another worker; otherwise it is given up on and its
  // fingerprint quarantined.
  void OnWorkerCrash(uint64_t fingerprint, absl::string_view request_id, absl::string_view worker,
                     absl::string_view cause, bool retried, absl::Time now = absl::Now());

  // What the client is told when its request is given up on after its worker went away.
  std::string GiveUpMessage() const;

  // Fingerprints in quarantine at `now`.
  size_t quarantined(absl::Time now = absl::Now()) { return quarantine_.size(now); }

 private:
  const QueryOfDeathOptions options_;
  GatewayMetrics* const metrics_;
  Quarantine quarantine_;
  // A client resending a quarantined request in a loop must not flood the log.
  common::LogThrottle refusal_log_{absl::Seconds(1)};
};

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_PIPELINE_QUERY_OF_DEATH_H_
