#include "gateway/admission/rate_limiter.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"

namespace llmserve::gateway {
namespace {

constexpr double kSecondsPerMinute = 60.0;

// Brings `bucket` up to `now` at `per_minute`/60 per second, capped at one minute's allowance.
// A clock that steps back refills nothing rather than draining the bucket.
void Refill(double per_minute, absl::Time now, double& available, absl::Time& updated) {
  if (now > updated) {
    const double elapsed = absl::ToDoubleSeconds(now - updated);
    available = std::min(per_minute, available + elapsed * per_minute / kSecondsPerMinute);
    updated = now;
  }
}

// How long until `bucket` holds `wanted` at `per_minute`.
absl::Duration TimeUntil(double per_minute, double available, double wanted) {
  if (available >= wanted) return absl::ZeroDuration();
  return absl::Seconds((wanted - available) * kSecondsPerMinute / per_minute);
}

}  // namespace

int64_t RateLimitDecision::RetryAfterSeconds() const {
  if (retry_after <= absl::ZeroDuration()) return 0;
  // Shave off float noise (4.9999999997 s is 5 s) before rounding up.
  const double seconds = absl::ToDoubleSeconds(retry_after);
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(seconds - 1e-6)));
}

absl::StatusOr<std::unique_ptr<RateLimiter>> RateLimiter::Create(RateLimiterOptions options) {
  auto check = [](const RateLimits& limits, absl::string_view whose) -> absl::Status {
    if (limits.requests_per_minute < 0 || limits.tokens_per_minute < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rate limits ", whose, " must be >= 0 (0 = unlimited), got requests_per_minute=",
          limits.requests_per_minute, " tokens_per_minute=", limits.tokens_per_minute));
    }
    return absl::OkStatus();
  };
  absl::Status status = check(options.default_limits, "(default)");
  if (!status.ok()) return status;
  for (const auto& [name, limits] : options.per_principal) {
    status = check(limits, absl::StrCat("for \"", name, "\""));
    if (!status.ok()) return status;
  }
  return std::unique_ptr<RateLimiter>(new RateLimiter(std::move(options)));
}

const RateLimits& RateLimiter::LimitsFor(absl::string_view principal) const {
  const auto it = options_.per_principal.find(principal);
  return it == options_.per_principal.end() ? options_.default_limits : it->second;
}

RateLimiter::PrincipalBuckets& RateLimiter::BucketsFor(absl::string_view principal,
                                                       absl::Time now) {
  auto [it, inserted] = buckets_.try_emplace(principal);
  PrincipalBuckets& buckets = it->second;
  if (inserted) {
    buckets.limits = LimitsFor(principal);
    buckets.requests = {.available = static_cast<double>(buckets.limits.requests_per_minute),
                        .updated = now};
    buckets.tokens = {.available = static_cast<double>(buckets.limits.tokens_per_minute),
                      .updated = now};
  } else {
    Refill(buckets.limits.requests_per_minute, now, buckets.requests.available,
           buckets.requests.updated);
    Refill(buckets.limits.tokens_per_minute, now, buckets.tokens.available, buckets.tokens.updated);
  }
  return buckets;
}

RateLimitDecision RateLimiter::TryAcquire(absl::string_view principal, int64_t requests,
                                          int64_t tokens, absl::Time now) {
  if (requests < 0 || tokens < 0) {
    return {
        .status = absl::InvalidArgumentError(absl::StrCat(
            "rate limiter: requests and tokens must be >= 0, got ", requests, " and ", tokens))};
  }
  const RateLimits& limits = LimitsFor(principal);
  if (limits.requests_per_minute == 0 && limits.tokens_per_minute == 0) return {};
  // Waiting cannot help a request bigger than a full bucket; say so instead of a retry-after.
  if (limits.tokens_per_minute > 0 && tokens > limits.tokens_per_minute) {
    return {.status = absl::ResourceExhaustedError(absl::StrCat(
                "request needs ", tokens, " tokens, more than the limit of ",
                limits.tokens_per_minute, " tokens per minute for \"", principal, "\""))};
  }
  if (limits.requests_per_minute > 0 && requests > limits.requests_per_minute) {
    return {.status = absl::ResourceExhaustedError(
                absl::StrCat(requests, " requests at once exceed the limit of ",
                             limits.requests_per_minute, " per minute"))};
  }

  absl::MutexLock lock(&mutex_);
  SweepIdle(now);
  PrincipalBuckets& buckets = BucketsFor(principal, now);
  absl::Duration wait_requests = absl::ZeroDuration();
  absl::Duration wait_tokens = absl::ZeroDuration();
  if (buckets.limits.requests_per_minute > 0) {
    wait_requests = TimeUntil(buckets.limits.requests_per_minute, buckets.requests.available,
                              static_cast<double>(requests));
  }
  if (buckets.limits.tokens_per_minute > 0) {
    wait_tokens = TimeUntil(buckets.limits.tokens_per_minute, buckets.tokens.available,
                            static_cast<double>(tokens));
  }
  if (wait_requests > absl::ZeroDuration() || wait_tokens > absl::ZeroDuration()) {
    const bool over_requests = wait_requests >= wait_tokens;
    const absl::Duration retry_after = std::max(wait_requests, wait_tokens);
    return {.status = absl::ResourceExhaustedError(absl::StrCat(
                "rate limit of ",
                over_requests ? absl::StrCat(buckets.limits.requests_per_minute, " requests")
                              : absl::StrCat(buckets.limits.tokens_per_minute, " tokens"),
                " per minute reached for \"", principal, "\"; retry in ",
                RateLimitDecision{.retry_after = retry_after}.RetryAfterSeconds(), " s")),
            .retry_after = retry_after};
  }
  if (buckets.limits.requests_per_minute > 0) buckets.requests.available -= requests;
  if (buckets.limits.tokens_per_minute > 0) buckets.tokens.available -= tokens;
  return {};
}

void RateLimiter::ChargeTokens(absl::string_view principal, int64_t tokens, absl::Time now) {
  const RateLimits& limits = LimitsFor(principal);
  if (limits.tokens_per_minute == 0 || tokens == 0) return;
  absl::MutexLock lock(&mutex_);
  PrincipalBuckets& buckets = BucketsFor(principal, now);
  const double capacity = static_cast<double>(buckets.limits.tokens_per_minute);
  buckets.tokens.available =
      std::clamp(buckets.tokens.available - static_cast<double>(tokens), -capacity, capacity);
}

void RateLimiter::Refund(absl::string_view principal, int64_t requests, int64_t tokens,
                         absl::Time now) {
  const RateLimits& limits = LimitsFor(principal);
  if (limits.requests_per_minute == 0 && limits.tokens_per_minute == 0) return;
  absl::MutexLock lock(&mutex_);
  // A principal without a bucket has a full one: nothing to give back.
  if (!buckets_.contains(principal)) return;
  PrincipalBuckets& buckets = BucketsFor(principal, now);
  buckets.requests.available =
      std::min(buckets.requests.available + static_cast<double>(std::max<int64_t>(requests, 0)),
               static_cast<double>(buckets.limits.requests_per_minute));
  buckets.tokens.available =
      std::min(buckets.tokens.available + static_cast<double>(std::max<int64_t>(tokens, 0)),
               static_cast<double>(buckets.limits.tokens_per_minute));
}

size_t RateLimiter::tracked_principals() const {
  absl::MutexLock lock(&mutex_);
  return buckets_.size();
}

void RateLimiter::SweepIdle(absl::Time now) {
  if (now - last_sweep_ < absl::Minutes(1)) return;
  last_sweep_ = now;
  absl::erase_if(buckets_, [now](auto& entry) {
    PrincipalBuckets& buckets = entry.second;
    Refill(buckets.limits.requests_per_minute, now, buckets.requests.available,
           buckets.requests.updated);
    Refill(buckets.limits.tokens_per_minute, now, buckets.tokens.available, buckets.tokens.updated);
    return buckets.requests.available >= buckets.limits.requests_per_minute &&
           buckets.tokens.available >= buckets.limits.tokens_per_minute;
  });
}

}  // namespace llmserve::gateway
