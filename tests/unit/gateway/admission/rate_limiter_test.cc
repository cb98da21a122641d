// RateLimiter: per-principal request and token buckets on an injected clock (no sleeps).

#include "gateway/admission/rate_limiter.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace llmserve::gateway {
namespace {

using ::testing::HasSubstr;

const absl::Time kStart = absl::FromUnixSeconds(1700000000);

std::unique_ptr<RateLimiter> Limiter(int64_t requests_per_minute, int64_t tokens_per_minute) {
  RateLimiterOptions options;
  options.default_limits = {.requests_per_minute = requests_per_minute,
                            .tokens_per_minute = tokens_per_minute};
  absl::StatusOr<std::unique_ptr<RateLimiter>> limiter = RateLimiter::Create(std::move(options));
  EXPECT_TRUE(limiter.ok()) << limiter.status();
  return *std::move(limiter);
}

TEST(RateLimiterTest, UnlimitedByDefault) {
  std::unique_ptr<RateLimiter> limiter = Limiter(0, 0);
  for (int i = 0; i < 1000; ++i) {
    EXPECT_TRUE(limiter->TryAcquire("alice", 1, 1000000, kStart).ok());
  }
  EXPECT_EQ(limiter->tracked_principals(), 0u);
}

TEST(RateLimiterTest, RequestsPerMinute) {
  std::unique_ptr<RateLimiter> limiter = Limiter(60, 0);
  // A full minute's allowance is available at once (the burst).
  for (int i = 0; i < 60; ++i) {
    ASSERT_TRUE(limiter->TryAcquire("alice", 1, 0, kStart).ok()) << i;
  }
  RateLimitDecision refused = limiter->TryAcquire("alice", 1, 0, kStart);
  EXPECT_EQ(refused.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status.message(), HasSubstr("60 requests per minute"));
  EXPECT_THAT(refused.status.message(), HasSubstr("\"alice\""));
  // 60 per minute is one per second.
  EXPECT_NEAR(absl::ToDoubleSeconds(refused.retry_after), 1.0, 1e-9);
  EXPECT_EQ(refused.RetryAfterSeconds(), 1);
  // Other principals have their own buckets.
  EXPECT_TRUE(limiter->TryAcquire("bob", 1, 0, kStart).ok());
  // Half a second refills half a request: still refused, and the wait is the remaining half.
  RateLimitDecision half = limiter->TryAcquire("alice", 1, 0, kStart + absl::Milliseconds(500));
  EXPECT_FALSE(half.ok());
  EXPECT_NEAR(absl::ToDoubleSeconds(half.retry_after), 0.5, 1e-9);
  EXPECT_EQ(half.RetryAfterSeconds(), 1);
  EXPECT_TRUE(limiter->TryAcquire("alice", 1, 0, kStart + absl::Seconds(1)).ok());
  EXPECT_FALSE(limiter->TryAcquire("alice", 1, 0, kStart + absl::Seconds(1)).ok());
}

TEST(RateLimiterTest, RefillIsCappedAtOneMinute) {
  std::unique_ptr<RateLimiter> limiter = Limiter(10, 0);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(limiter->TryAcquire("alice", 1, 0, kStart).ok());
  // An hour idle gives back 10, not 600.
  const absl::Time later = kStart + absl::Hours(1);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(limiter->TryAcquire("alice", 1, 0, later).ok()) << i;
  RateLimitDecision refused = limiter->TryAcquire("alice", 1, 0, later);
  EXPECT_FALSE(refused.ok());
  EXPECT_NEAR(absl::ToDoubleSeconds(refused.retry_after), 6.0, 1e-9);  // 10/min: one per 6 s
}

TEST(RateLimiterTest, TokensPerMinute) {
  std::unique_ptr<RateLimiter> limiter = Limiter(0, 600);  // 10 tokens per second
  EXPECT_TRUE(limiter->TryAcquire("alice", 1, 400, kStart).ok());
  EXPECT_TRUE(limiter->TryAcquire("alice", 1, 200, kStart).ok());
  RateLimitDecision refused = limiter->TryAcquire("alice", 1, 50, kStart);
  EXPECT_EQ(refused.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status.message(), HasSubstr("600 tokens per minute"));
  EXPECT_NEAR(absl::ToDoubleSeconds(refused.retry_after), 5.0, 1e-9);
  EXPECT_EQ(refused.RetryAfterSeconds(), 5);
  // After 3 s, 30 tokens are back: 50 still waits 2 s, 30 fits.
  RateLimitDecision still = limiter->TryAcquire("alice", 1, 50, kStart + absl::Seconds(3));
  EXPECT_NEAR(absl::ToDoubleSeconds(still.retry_after), 2.0, 1e-9);
  EXPECT_TRUE(limiter->TryAcquire("alice", 1, 30, kStart + absl::Seconds(3)).ok());
}

TEST(RateLimiterTest, BothLimitsAreAcquiredTogetherOrNotAtAll) {
  std::unique_ptr<RateLimiter> limiter = Limiter(2, 100);
  EXPECT_TRUE(limiter->TryAcquire("alice", 1, 90, kStart).ok());
  // Refused for tokens; the request must not have been taken from the request bucket.
  EXPECT_FALSE(limiter->TryAcquire("alice", 1, 50, kStart).ok());
  EXPECT_TRUE(limiter->TryAcquire("alice", 1, 10, kStart).ok());
  // Now out of requests (2/min: one per 30 s) and tokens (100/min: 10 tokens take 6 s):
  // the longer wait wins.
  RateLimitDecision refused = limiter->TryAcquire("alice", 1, 10, kStart);
  EXPECT_NEAR(absl::ToDoubleSeconds(refused.retry_after), 30.0, 1e-9);
  EXPECT_THAT(refused.status.message(), HasSubstr("2 requests per minute"));
}

TEST(RateLimiterTest, RequestLargerThanTheLimitCannotBeRetried) {
  std::unique_ptr<RateLimiter> limiter = Limiter(0, 1000);
  RateLimitDecision refused = limiter->TryAcquire("alice", 1, 1001, kStart);
  EXPECT_EQ(refused.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status.message(),
              HasSubstr("needs 1001 tokens, more than the limit of 1000 tokens per minute"));
  EXPECT_EQ(refused.retry_after, absl::ZeroDuration());
  EXPECT_EQ(refused.RetryAfterSeconds(), 0);
}

TEST(RateLimiterTest, LateChargesCreateDebtThatIsCapped) {
  std::unique_ptr<RateLimiter> limiter = Limiter(0, 600);
  ASSERT_TRUE(limiter->TryAcquire("alice", 1, 100, kStart).ok());
  // The completion turned out to be 800 tokens: 500 left - 800 = -300.
  limiter->ChargeTokens("alice", 800, kStart);
  RateLimitDecision refused = limiter->TryAcquire("alice", 1, 10, kStart);
  EXPECT_NEAR(absl::ToDoubleSeconds(refused.retry_after), 31.0, 1e-9);  // (300 + 10) / 10 per s
  // A huge charge is capped at one minute of debt (-600).
  limiter->ChargeTokens("alice", 100000, kStart);
  // While in debt even a request without tokens waits until the debt is paid off (60 s).
  refused = limiter->TryAcquire("alice", 1, 0, kStart);
  EXPECT_NEAR(absl::ToDoubleSeconds(refused.retry_after), 60.0, 1e-9);
  refused = limiter->TryAcquire("alice", 1, 1, kStart);
  EXPECT_NEAR(absl::ToDoubleSeconds(refused.retry_after), 60.1, 1e-9);
  // A refund never overfills the bucket.
  limiter->ChargeTokens("alice", -100000, kStart);
  EXPECT_TRUE(limiter->TryAcquire("alice", 1, 600, kStart).ok());
  EXPECT_FALSE(limiter->TryAcquire("alice", 1, 1, kStart).ok());
}

TEST(RateLimiterTest, RefundGivesBackWhatARefusedRequestTook) {
  std::unique_ptr<RateLimiter> limiter = Limiter(2, 100);
  ASSERT_TRUE(limiter->TryAcquire("alice", 1, 40, kStart).ok());
  ASSERT_TRUE(limiter->TryAcquire("alice", 1, 40, kStart).ok());
  EXPECT_FALSE(limiter->TryAcquire("alice", 1, 0, kStart).ok());
  // The second was then refused elsewhere (the concurrency limit) and never ran.
  limiter->Refund("alice", 1, 40, kStart);
  EXPECT_TRUE(limiter->TryAcquire("alice", 1, 60, kStart).ok());
  EXPECT_FALSE(limiter->TryAcquire("alice", 1, 0, kStart).ok());
  // Never beyond a full bucket, and unknown principals or unlimited limiters are no-ops.
  limiter->Refund("alice", 100, 100000, kStart);
  EXPECT_TRUE(limiter->TryAcquire("alice", 2, 100, kStart).ok());
  EXPECT_FALSE(limiter->TryAcquire("alice", 1, 0, kStart).ok());
  limiter->Refund("nobody", 1, 1, kStart);
  Limiter(0, 0)->Refund("alice", 1, 1, kStart);
}

TEST(RateLimiterTest, PerPrincipalOverrides) {
  RateLimiterOptions options;
  options.default_limits = {.requests_per_minute = 1};
  options.per_principal["batch-job"] = {.requests_per_minute = 0};  // unlimited
  options.per_principal["slow"] = {.requests_per_minute = 1, .tokens_per_minute = 10};
  std::unique_ptr<RateLimiter> limiter = *RateLimiter::Create(std::move(options));
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(limiter->TryAcquire("batch-job", 1, 5, kStart).ok());
  EXPECT_TRUE(limiter->TryAcquire("alice", 1, 5000, kStart).ok());
  EXPECT_FALSE(limiter->TryAcquire("alice", 1, 0, kStart).ok());
  EXPECT_FALSE(limiter->TryAcquire("slow", 1, 11, kStart).ok());
}

TEST(RateLimiterTest, InvalidInputs) {
  RateLimiterOptions options;
  options.default_limits = {.requests_per_minute = -1};
  absl::StatusOr<std::unique_ptr<RateLimiter>> bad = RateLimiter::Create(options);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("requests_per_minute=-1"));
  options.default_limits = {};
  options.per_principal["x"] = {.tokens_per_minute = -5};
  EXPECT_THAT(RateLimiter::Create(options).status().message(), HasSubstr("for \"x\""));

  std::unique_ptr<RateLimiter> limiter = Limiter(10, 10);
  EXPECT_EQ(limiter->TryAcquire("alice", -1, 0, kStart).status.code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(limiter->TryAcquire("alice", 0, -1, kStart).status.code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RateLimiterTest, ClockGoingBackwardsDoesNotRefillOrCrash) {
  std::unique_ptr<RateLimiter> limiter = Limiter(1, 0);
  EXPECT_TRUE(limiter->TryAcquire("alice", 1, 0, kStart).ok());
  EXPECT_FALSE(limiter->TryAcquire("alice", 1, 0, kStart - absl::Hours(1)).ok());
  EXPECT_TRUE(limiter->TryAcquire("alice", 1, 0, kStart + absl::Minutes(1)).ok());
}

TEST(RateLimiterTest, IdleBucketsAreDropped) {
  std::unique_ptr<RateLimiter> limiter = Limiter(60, 6000);
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(limiter->TryAcquire(absl::StrCat("user-", i), 1, 100, kStart).ok());
  }
  EXPECT_EQ(limiter->tracked_principals(), 1000u);
  // Half a minute later the buckets are not full yet: nothing is dropped.
  ASSERT_TRUE(limiter->TryAcquire("late", 60, 0, kStart + absl::Seconds(30)).ok());
  EXPECT_EQ(limiter->tracked_principals(), 1001u);
  // Two minutes later every bucket has refilled (including "late", drained 90 s earlier), so all
  // are dropped; only the principal asking now holds one.
  ASSERT_TRUE(limiter->TryAcquire("user-0", 1, 0, kStart + absl::Minutes(2)).ok());
  EXPECT_EQ(limiter->tracked_principals(), 1u);
  // A dropped principal starts again with a full bucket, as if it had never been dropped.
  for (int i = 0; i < 60; ++i) {
    ASSERT_TRUE(limiter->TryAcquire("user-1", 1, 0, kStart + absl::Minutes(2)).ok()) << i;
  }
  EXPECT_FALSE(limiter->TryAcquire("user-1", 1, 0, kStart + absl::Minutes(2)).ok());
}

}  // namespace
}  // namespace llmserve::gateway
