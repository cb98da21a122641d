// RequestAdmission: rate limits, then a concurrency slot. A request refused by the concurrency
// limit never ran, so it must leave the principal's rate budget as it was.

#include "gateway/admission/request_admission.h"

#include <memory>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "gateway/admission/concurrency_limiter.h"
#include "gateway/admission/rate_limiter.h"
#include "gtest/gtest.h"

namespace llmserve::gateway {
namespace {

// What one Admit() call delivered.
struct Outcome {
  bool called = false;
  absl::Status status;
  std::optional<RequestAdmission::Admitted> admitted;
};

// Admits `tokens` for alice and records the outcome (the callback runs at once here: no queue or
// a full one).
Outcome AdmitNow(const RequestAdmission& admission, int64_t tokens) {
  Outcome outcome;
  const ConcurrencyLimiter::WaitId wait =
      admission.Admit(Principal{.name = "alice"}, tokens,
                      [&outcome](absl::StatusOr<RequestAdmission::Admitted> result,
                                 absl::Duration /*retry_after*/) {
                        outcome.called = true;
                        if (result.ok()) {
                          outcome.admitted.emplace(*std::move(result));
                        } else {
                          outcome.status = result.status();
                        }
                      });
  EXPECT_EQ(wait, 0u);
  EXPECT_TRUE(outcome.called);
  return outcome;
}

std::unique_ptr<RateLimiter> Limiter(int64_t rpm, int64_t tpm) {
  absl::StatusOr<std::unique_ptr<RateLimiter>> limiter = RateLimiter::Create(
      {.default_limits = {.requests_per_minute = rpm, .tokens_per_minute = tpm}});
  EXPECT_TRUE(limiter.ok());
  return *std::move(limiter);
}

TEST(RequestAdmissionTest, ConcurrencyRefusalsLeaveTheRequestBudgetIntact) {
  std::unique_ptr<RateLimiter> rate = Limiter(/*rpm=*/3, /*tpm=*/0);
  ConcurrencyLimiter concurrency(/*max_in_flight=*/1, /*max_queued=*/0);
  const RequestAdmission admission(nullptr, rate.get(), &concurrency);

  Outcome holder = AdmitNow(admission, 10);  // 1 of 3 requests
  ASSERT_TRUE(holder.admitted.has_value()) << holder.status;
  for (int i = 0; i < 10; ++i) {
    const Outcome refused = AdmitNow(admission, 10);
    EXPECT_EQ(refused.status.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_NE(refused.status.message().find("--max_concurrency"), absl::string_view::npos)
        << refused.status;
  }
  holder.admitted.reset();  // frees the slot

  // The ten refusals cost nothing: two more requests fit in the minute, the third does not.
  for (int i = 0; i < 2; ++i) {
    Outcome next = AdmitNow(admission, 10);
    ASSERT_TRUE(next.admitted.has_value()) << i << ": " << next.status;
  }
  const Outcome over = AdmitNow(admission, 10);
  EXPECT_EQ(over.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(over.status.message().find("rate limit of 3 requests"), absl::string_view::npos)
      << over.status;
}

TEST(RequestAdmissionTest, ConcurrencyRefusalsLeaveTheTokenBudgetIntact) {
  std::unique_ptr<RateLimiter> rate = Limiter(/*rpm=*/0, /*tpm=*/1000);
  ConcurrencyLimiter concurrency(1, 0);
  const RequestAdmission admission(nullptr, rate.get(), &concurrency);

  Outcome holder = AdmitNow(admission, 400);
  ASSERT_TRUE(holder.admitted.has_value()) << holder.status;
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(AdmitNow(admission, 400).status.code(), absl::StatusCode::kResourceExhausted);
  }
  holder.admitted.reset();
  Outcome second = AdmitNow(admission, 400);  // 800 of 1000 tokens
  ASSERT_TRUE(second.admitted.has_value()) << second.status;
  second.admitted.reset();
  const Outcome over = AdmitNow(admission, 400);
  EXPECT_NE(over.status.message().find("rate limit of 1000 tokens"), absl::string_view::npos)
      << over.status;
}

// A queued request that the shutting-down limiter fails never ran either.
TEST(RequestAdmissionTest, AWaiterFailedAtShutdownIsRefunded) {
  std::unique_ptr<RateLimiter> rate = Limiter(/*rpm=*/2, /*tpm=*/0);
  auto concurrency = std::make_unique<ConcurrencyLimiter>(1, 1);
  const RequestAdmission admission(nullptr, rate.get(), concurrency.get());
  Outcome running = AdmitNow(admission, 1);
  ASSERT_TRUE(running.admitted.has_value());
  Outcome failed;
  admission.Admit(Principal{.name = "alice"}, 1,
                  [&failed](absl::StatusOr<RequestAdmission::Admitted> result, absl::Duration) {
                    failed.called = true;
                    failed.status = result.status();
                  });
  concurrency.reset();  // the gateway shuts down
  ASSERT_TRUE(failed.called);
  EXPECT_EQ(failed.status.code(), absl::StatusCode::kUnavailable);
  running.admitted.reset();
  // One request of the two is left for alice.
  EXPECT_TRUE(rate->TryAcquire("alice", 1, 0, absl::Now()).ok());
  EXPECT_FALSE(rate->TryAcquire("alice", 1, 0, absl::Now()).ok());
}

}  // namespace
}  // namespace llmserve::gateway
