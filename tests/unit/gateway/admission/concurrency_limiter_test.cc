// ConcurrencyLimiter: permits, the bounded wait queue, cancellation and shutdown. Callbacks are
// recorded rather than waited on, so no test blocks.

#include "gateway/admission/concurrency_limiter.h"

#include <atomic>
#include <optional>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace llmserve::gateway {
namespace {

using Permit = ConcurrencyLimiter::Permit;

// Collects what Acquire() delivers to one waiter.
struct Outcome {
  bool called = false;
  std::optional<Permit> permit;
  absl::Status status;

  ConcurrencyLimiter::PermitCallback Callback() {
    return [this](absl::StatusOr<Permit> result) {
      called = true;
      if (result.ok()) {
        permit.emplace(*std::move(result));
      } else {
        status = result.status();
      }
    };
  }
};

TEST(ConcurrencyLimiterTest, TryAcquireUpToTheLimit) {
  ConcurrencyLimiter limiter(2, 0);
  std::optional<Permit> first = limiter.TryAcquire();
  std::optional<Permit> second = limiter.TryAcquire();
  ASSERT_TRUE(first.has_value());
  ASSERT_TRUE(second.has_value());
  EXPECT_FALSE(limiter.TryAcquire().has_value());
  EXPECT_EQ(limiter.in_flight(), 2);
  first.reset();  // RAII release
  EXPECT_EQ(limiter.in_flight(), 1);
  EXPECT_TRUE(limiter.TryAcquire().has_value());  // taken and released at once
  EXPECT_EQ(limiter.in_flight(), 1);
}

TEST(ConcurrencyLimiterTest, MovedPermitReleasesOnce) {
  ConcurrencyLimiter limiter(1, 0);
  std::optional<Permit> permit = limiter.TryAcquire();
  ASSERT_TRUE(permit.has_value());
  Permit moved = *std::move(permit);
  permit.reset();  // the moved-from permit owns nothing
  EXPECT_EQ(limiter.in_flight(), 1);
  {
    Permit assigned = std::move(moved);
    EXPECT_EQ(limiter.in_flight(), 1);
  }
  EXPECT_EQ(limiter.in_flight(), 0);
}

TEST(ConcurrencyLimiterTest, UnlimitedNeverQueues) {
  ConcurrencyLimiter limiter(0, 0);
  std::vector<Permit> permits;
  for (int i = 0; i < 100; ++i) permits.push_back(*limiter.TryAcquire());
  EXPECT_EQ(limiter.in_flight(), 100);
  permits.clear();
  EXPECT_EQ(limiter.in_flight(), 0);
}

TEST(ConcurrencyLimiterTest, AcquireGrantsAtOnceWhenFree) {
  ConcurrencyLimiter limiter(1, 1);
  Outcome outcome;
  EXPECT_EQ(limiter.Acquire(outcome.Callback()), 0u);
  EXPECT_TRUE(outcome.called);
  EXPECT_TRUE(outcome.permit.has_value());
  EXPECT_EQ(limiter.in_flight(), 1);
}

TEST(ConcurrencyLimiterTest, QueueIsBoundedAndFifo) {
  ConcurrencyLimiter limiter(1, 2);
  std::optional<Permit> running = limiter.TryAcquire();
  ASSERT_TRUE(running.has_value());
  Outcome first, second, third;
  const ConcurrencyLimiter::WaitId first_id = limiter.Acquire(first.Callback());
  const ConcurrencyLimiter::WaitId second_id = limiter.Acquire(second.Callback());
  EXPECT_NE(first_id, 0u);
  EXPECT_NE(second_id, 0u);
  EXPECT_FALSE(first.called);
  EXPECT_EQ(limiter.queued(), 2);
  // The queue is full: refused at once, never blocked.
  EXPECT_EQ(limiter.Acquire(third.Callback()), 0u);
  EXPECT_TRUE(third.called);
  EXPECT_EQ(third.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(third.status.message(), ::testing::HasSubstr("1 requests in flight and 2 waiting"));
  // Waiters are ahead of TryAcquire.
  EXPECT_FALSE(limiter.TryAcquire().has_value());

  running.reset();  // the slot passes to the oldest waiter
  EXPECT_TRUE(first.called);
  EXPECT_TRUE(first.permit.has_value());
  EXPECT_FALSE(second.called);
  EXPECT_EQ(limiter.in_flight(), 1);
  EXPECT_FALSE(limiter.CancelWait(first_id));  // already served

  first.permit.reset();
  EXPECT_TRUE(second.called);
  EXPECT_TRUE(second.permit.has_value());
  second.permit.reset();
  EXPECT_EQ(limiter.in_flight(), 0);
  EXPECT_EQ(limiter.queued(), 0);
}

TEST(ConcurrencyLimiterTest, CancelledWaitIsSkipped) {
  ConcurrencyLimiter limiter(1, 5);
  std::optional<Permit> running = limiter.TryAcquire();
  Outcome gone, next;
  const ConcurrencyLimiter::WaitId gone_id = limiter.Acquire(gone.Callback());
  limiter.Acquire(next.Callback());
  EXPECT_TRUE(limiter.CancelWait(gone_id));
  EXPECT_FALSE(limiter.CancelWait(gone_id));
  EXPECT_FALSE(limiter.CancelWait(0));
  running.reset();
  EXPECT_FALSE(gone.called);
  EXPECT_TRUE(next.permit.has_value());
}

TEST(ConcurrencyLimiterTest, CallbacksThatDropTheirPermitDrainTheQueueWithoutRecursion) {
  constexpr int kWaiters = 100000;  // deep enough to overflow the stack if each hand-off recursed
  ConcurrencyLimiter limiter(1, kWaiters);
  std::optional<Permit> running = limiter.TryAcquire();
  int served = 0;
  for (int i = 0; i < kWaiters; ++i) {
    limiter.Acquire([&served](absl::StatusOr<Permit> permit) {
      if (permit.ok()) ++served;  // and the permit is dropped here
    });
  }
  running.reset();
  EXPECT_EQ(served, kWaiters);
  EXPECT_EQ(limiter.in_flight(), 0);
}

TEST(ConcurrencyLimiterTest, DestructionFailsWaitersAndOutlivingPermitsAreSafe) {
  Outcome waiter;
  std::optional<Permit> running;
  {
    ConcurrencyLimiter limiter(1, 1);
    running = limiter.TryAcquire();
    limiter.Acquire(waiter.Callback());
  }
  EXPECT_TRUE(waiter.called);
  EXPECT_EQ(waiter.status.code(), absl::StatusCode::kUnavailable);
  running.reset();  // the limiter is gone; releasing must still be safe
}

TEST(ConcurrencyLimiterTest, ManyThreadsNeverExceedTheLimit) {
  ConcurrencyLimiter limiter(3, 0);
  std::atomic<int> current{0};
  std::atomic<int> peak{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 5000; ++i) {
        std::optional<Permit> permit = limiter.TryAcquire();
        if (!permit.has_value()) continue;
        const int now = current.fetch_add(1) + 1;
        int seen = peak.load();
        while (now > seen && !peak.compare_exchange_weak(seen, now)) {
        }
        current.fetch_sub(1);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_LE(peak.load(), 3);
  EXPECT_EQ(limiter.in_flight(), 0);
}

}  // namespace
}  // namespace llmserve::gateway
