// Per-key limits that hold across every gateway replica: requests and tokens per minute, and
// token quotas per UTC day and per UTC month, counted in Redis (the shape of Envoy's global rate
// limit service: fixed windows, one counter per key and window).
//
// Acquire checks every window of the key and counts the request in all of them in one Lua script,
// atomically: two replicas cannot both take the last unit, so a limit holds exactly for what is
// known at admission (one request, its prompt plus max_tokens). Charge corrects the token windows
// of the admission when the request ends (completion tokens known; a negative amount gives back
// what was reserved and not used), without waiting for the answer.
//
// When Redis cannot answer (down, slow past its timeout), the failure policy decides at once:
// kOpen admits by the local per-replica limiter (the fallback, which may be null: admit), kClosed
// refuses with UNAVAILABLE. Either way the request never waits for a reconnection.
//
// Thread-safe; Acquire's callback runs on the caller's thread or on the Redis client's.

#ifndef LLMSERVE_GATEWAY_ADMISSION_GLOBAL_RATE_LIMITER_H_
#define LLMSERVE_GATEWAY_ADMISSION_GLOBAL_RATE_LIMITER_H_

#include <array>
#include <cstdint>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gateway/admission/rate_limiter.h"
#include "gateway/admission/redis_client.h"
#include "gateway/metrics/gateway_metrics.h"

namespace llmserve::gateway {

enum class RedisFailurePolicy { kOpen, kClosed };

struct GlobalLimits {
  // 0 = none, for each.
  int64_t requests_per_minute = 0;
  int64_t tokens_per_minute = 0;
  int64_t tokens_per_day = 0;
  int64_t tokens_per_month = 0;
  RedisFailurePolicy failure_policy = RedisFailurePolicy::kOpen;
};

class GlobalRateLimiter {
 public:
  // `redis` outlives this; `fallback` and `metrics` may be null.
  GlobalRateLimiter(RedisClient* redis, GlobalLimits limits, RateLimiter* fallback,
                    GatewayMetrics* metrics)
      : redis_(redis), limits_(limits), fallback_(fallback), metrics_(metrics) {}

  using Done = absl::AnyInvocable<void(RateLimitDecision decision) &&>;
  // Takes one request and `tokens` from `principal`'s windows at `now`, all or none.
  void Acquire(absl::string_view principal, int64_t tokens, absl::Time now, Done done);
  // Adds `requests` and `tokens` (negative: gives back) to the windows of `admitted_at`.
  void Adjust(absl::string_view principal, int64_t requests, int64_t tokens,
              absl::Time admitted_at);

  const GlobalLimits& limits() const { return limits_; }

 private:
  // The four windows' limits, in the scripts' order (0: none).
  std::array<int64_t, 4> WindowLimits() const;
  // Fails over by the policy.
  void OnRedisFailure(absl::string_view principal, int64_t tokens, absl::Time now,
                      const absl::Status& error, Done done);

  RedisClient* const redis_;
  const GlobalLimits limits_;
  RateLimiter* const fallback_;
  GatewayMetrics* const metrics_;
};

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_ADMISSION_GLOBAL_RATE_LIMITER_H_
