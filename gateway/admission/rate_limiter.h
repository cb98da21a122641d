// Per-principal rate limits: requests per minute and tokens per minute, each a token bucket that
// holds at most one minute's allowance (the burst) and refills continuously.
//
// Tokens are charged in two steps because completion tokens are only known at the end: the
// gateway acquires the prompt tokens (plus whatever estimate it chooses) with the request, then
// ChargeTokens() the rest when the response is done. A late charge may leave the bucket in debt,
// which later requests wait out; the debt is capped at one minute's allowance so one huge
// response cannot lock a principal out for long.
//
// Time is a parameter everywhere (`now`), so tests drive the clock. Memory stays bounded: a
// bucket that has refilled completely is indistinguishable from a new one and is dropped by a
// sweep that runs at most once per minute of `now`.
//
// Thread-safe: one mutex around the bucket map; each call does O(1) work, plus the amortized sweep.

#ifndef LLMSERVE_GATEWAY_ADMISSION_RATE_LIMITER_H_
#define LLMSERVE_GATEWAY_ADMISSION_RATE_LIMITER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace llmserve::gateway {

struct RateLimits {
  // 0 = unlimited.
  int64_t requests_per_minute = 0;
  int64_t tokens_per_minute = 0;
};

struct RateLimiterOptions {
  RateLimits default_limits;
  // Limits for particular principals (by name), replacing the defaults.
  absl::flat_hash_map<std::string, RateLimits> per_principal;
};

struct RateLimitDecision {
  // OK, RESOURCE_EXHAUSTED (over a limit), or INVALID_ARGUMENT (negative amounts).
  absl::Status status;
  // When to try again: zero when admitted, and also when waiting cannot help (the request alone
  // needs more than a minute's allowance; the message says so).
  absl::Duration retry_after = absl::ZeroDuration();

  bool ok() const { return status.ok(); }
  // retry_after rounded up to whole seconds, at least 1, for a `retry-after` header; 0 when there
  // is nothing to wait for.
  int64_t RetryAfterSeconds() const;
};

class RateLimiter {
 public:
  // INVALID_ARGUMENT when a limit is negative.
  static absl::StatusOr<std::unique_ptr<RateLimiter>> Create(RateLimiterOptions options);

  RateLimiter(const RateLimiter&) = delete;
  RateLimiter& operator=(const RateLimiter&) = delete;

  // Takes `requests` and `tokens` from `principal`'s buckets, both or neither.
  RateLimitDecision TryAcquire(absl::string_view principal, int64_t requests, int64_t tokens,
                               absl::Time now) ABSL_LOCKS_EXCLUDED(mutex_);

  // Charges tokens learned after admission (completion tokens); never refuses. A negative amount
  // refunds (a request that failed before generating), never beyond a full bucket.
  void ChargeTokens(absl::string_view principal, int64_t tokens, absl::Time now)
      ABSL_LOCKS_EXCLUDED(mutex_);

  // Gives back what TryAcquire took for a request that was then refused before it ran (by the
  // concurrency limit), never beyond a full bucket.
  void Refund(absl::string_view principal, int64_t requests, int64_t tokens, absl::Time now)
      ABSL_LOCKS_EXCLUDED(mutex_);

  // Buckets currently held (idle ones are dropped by the sweep).
  size_t tracked_principals() const ABSL_LOCKS_EXCLUDED(mutex_);

 private:
  struct Bucket {
    double available = 0;  // may go negative (debt) through ChargeTokens
    absl::Time updated;
  };
  struct PrincipalBuckets {
    RateLimits limits;
    Bucket requests;
    Bucket tokens;
  };

  explicit RateLimiter(RateLimiterOptions options) : options_(std::move(options)) {}
  const RateLimits& LimitsFor(absl::string_view principal) const;
  PrincipalBuckets& BucketsFor(absl::string_view principal, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void SweepIdle(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const RateLimiterOptions options_;
  mutable absl::Mutex mutex_;
  absl::flat_hash_map<std::string, PrincipalBuckets> buckets_ ABSL_GUARDED_BY(mutex_);
  absl::Time last_sweep_ ABSL_GUARDED_BY(mutex_) = absl::InfinitePast();
};

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_ADMISSION_RATE_LIMITER_H_
