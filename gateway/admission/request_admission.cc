#include "gateway/admission/request_admission.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace llmserve::gateway {

absl::StatusOr<Principal> RequestAdmission::Authenticate(absl::string_view authorization) const {
  if (authenticator_ == nullptr) return Principal{.name = "anonymous", .admin = true};
  absl::StatusOr<Principal> principal = authenticator_->Authenticate(authorization);
  if (!principal.ok() && metrics_ != nullptr) metrics_->OnAuthFailure();
  return principal;
}

ConcurrencyLimiter::WaitId RequestAdmission::Admit(const Principal& principal, int64_t tokens,
                                                   AdmitCallback done) const {
  const absl::Time now = absl::Now();
  if (global_ != nullptr) {
    global_->Acquire(
        principal.name, tokens, now,
        [this, principal, tokens, now, done = std::move(done)](RateLimitDecision decision) mutable {
          if (!decision.ok()) {
            if (metrics_ != nullptr && absl::IsResourceExhausted(decision.status)) {
              metrics_->OnRateLimited();
            }
            return std::move(done)(decision.status, decision.retry_after);
          }
          AdmitToSlot(principal, tokens, now, std::move(done));
        });
    return 0;
  }
  if (rate_limiter_ != nullptr) {
    const RateLimitDecision decision = rate_limiter_->TryAcquire(principal.name, 1, tokens, now);
    if (!decision.ok()) {
      if (metrics_ != nullptr) metrics_->OnRateLimited();
      std::move(done)(decision.status, decision.retry_after);
      return 0;
    }
  }
  return AdmitToSlot(principal, tokens, now, std::move(done));
}

ConcurrencyLimiter::WaitId RequestAdmission::AdmitToSlot(const Principal& principal, int64_t tokens,
                                                         absl::Time admitted_at,
                                                         AdmitCallback done) const {
  if (concurrency_ == nullptr) {
    std::move(done)(Admitted{.principal = principal, .admitted_at = admitted_at},
                    absl::ZeroDuration());
    return 0;
  }
  GatewayMetrics* metrics = metrics_;
  RateLimiter* rate_limiter = rate_limiter_;
  GlobalRateLimiter* global = global_;
  return concurrency_->Acquire([principal, tokens, metrics, rate_limiter, global, admitted_at,
                                done = std::move(done)](
                                   absl::StatusOr<ConcurrencyLimiter::Permit> permit) mutable {
    if (!permit.ok()) {
      if (metrics != nullptr && absl::IsResourceExhausted(permit.status())) {
        metrics->OnRateLimited();
      }
      // Refused before it ran (the queue is full, or the gateway shuts down): what the rate limits
      // took for it goes back, so that a client retrying a busy gateway does not also run out of
      // its own budget.
      if (global != nullptr) {
        global->Adjust(principal.name, -1, -tokens, admitted_at);
      } else if (rate_limiter != nullptr) {
        rate_limiter->Refund(principal.name, 1, tokens, absl::Now());
      }
      return std::move(done)(
          absl::Status(permit.status().code(),
                       absl::StrCat(permit.status().message(),
                                    " (the gateway's --max_concurrency and its queue are full)")),
          absl::Seconds(1));
    }
    std::move(done)(
        Admitted{.principal = principal,
                 .permit = std::make_shared<ConcurrencyLimiter::Permit>(*std::move(permit)),
                 .admitted_at = admitted_at},
        absl::ZeroDuration());
  });
}

bool RequestAdmission::CancelWait(ConcurrencyLimiter::WaitId id) const {
  return concurrency_ != nullptr && id != 0 && concurrency_->CancelWait(id);
}

void RequestAdmission::ChargeTokens(const Principal& principal, int64_t tokens,
                                    absl::Time admitted_at) const {
  if (global_ != nullptr) {
    global_->Adjust(principal.name, 0, tokens, admitted_at);
  } else if (rate_limiter_ != nullptr) {
    rate_limiter_->ChargeTokens(principal.name, tokens, absl::Now());
  }
}

}  // namespace llmserve::gateway
