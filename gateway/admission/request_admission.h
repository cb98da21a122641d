// Who may run a request now, for both APIs: the caller's authentication, then its rate limits
// (requests and tokens per minute, and token quotas: this replica's, or every replica's through
// Redis) and the gateway's concurrency limit with its bounded queue.
//
// Thread-safe.

#ifndef LLMSERVE_GATEWAY_ADMISSION_REQUEST_ADMISSION_H_
#define LLMSERVE_GATEWAY_ADMISSION_REQUEST_ADMISSION_H_

#include <cstdint>
#include <memory>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gateway/admission/authenticator.h"
#include "gateway/admission/concurrency_limiter.h"
#include "gateway/admission/global_rate_limiter.h"
#include "gateway/admission/rate_limiter.h"
#include "gateway/metrics/gateway_metrics.h"

namespace llmserve::gateway {

class RequestAdmission {
 public:
  // `rate_limiter`, `concurrency` and `global` may be null (no limit). With `global`, the limits
  // are counted in Redis and `rate_limiter` is only its fallback (global_rate_limiter.h).
  RequestAdmission(const Authenticator* authenticator, RateLimiter* rate_limiter,
                   ConcurrencyLimiter* concurrency, GatewayMetrics* metrics = nullptr,
                   GlobalRateLimiter* global = nullptr)
      : authenticator_(authenticator),
        rate_limiter_(rate_limiter),
        concurrency_(concurrency),
        metrics_(metrics),
        global_(global) {}

  struct Admitted {
    Principal principal;
    // Released when the request ends.
    std::shared_ptr<ConcurrencyLimiter::Permit> permit;
    // When the rate limits counted it (their windows get the final charge).
    absl::Time admitted_at;
  };
  // The caller, from an Authorization header value: UNAUTHENTICATED when it is not accepted.
  absl::StatusOr<Principal> Authenticate(absl::string_view authorization) const;
  // Rate limits for a request of `tokens` (prompt + max_tokens), checked now, then a concurrency
  // slot: now, or from the bounded queue when one frees up. `done` runs exactly once (unless
  // CancelWait returns true first): with the admission, or with RESOURCE_EXHAUSTED and how long
  // to wait before retrying (429 / retry-after), or UNAVAILABLE when the gateway shuts down. A
  // request the concurrency limit refuses gets back what the rate limits took for it: it never
  // ran. `done` may run on this thread or later on the thread that frees a slot (or, with global
  // limits, on the Redis client's thread). Returns the queued wait's id, 0 when `done` already
  // ran or the limits are still being checked in Redis (a client that leaves then is seen when
  // its slot comes).
  using AdmitCallback =
      absl::AnyInvocable<void(absl::StatusOr<Admitted> admitted, absl::Duration retry_after) &&>;
  ConcurrencyLimiter::WaitId Admit(const Principal& principal, int64_t tokens,
                                   AdmitCallback done) const;
  // A client left while queued: true when `done` will never run.
  bool CancelWait(ConcurrencyLimiter::WaitId id) const;
  // Completion tokens, known at the end, counted against the principal's token budget (in the
  // windows of `admitted_at`).
  void ChargeTokens(const Principal& principal, int64_t tokens, absl::Time admitted_at) const;

 private:
  const Authenticator* const authenticator_;
  RateLimiter* const rate_limiter_;
  ConcurrencyLimiter* const concurrency_;
  GatewayMetrics* const metrics_;
  GlobalRateLimiter* const global_;

  // The concurrency slot, once the rate limits admitted the request at `admitted_at`.
  ConcurrencyLimiter::WaitId AdmitToSlot(const Principal& principal, int64_t tokens,
                                         absl::Time admitted_at, AdmitCallback done) const;
};

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_ADMISSION_REQUEST_ADMISSION_H_
