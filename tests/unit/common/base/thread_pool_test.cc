#include "common/base/thread_pool.h"

#include <atomic>
#include <string>
#include <thread>

#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace llmserve::common {
namespace {

constexpr absl::Duration kPatience = absl::Seconds(60);

TEST(ThreadPoolTest, RunsEveryTaskOnAPoolThread) {
  ThreadPool pool(3, 100);
  std::atomic<int> ran{0};
  std::atomic<int> on_caller{0};
  absl::BlockingCounter done(100);
  const std::thread::id caller = std::this_thread::get_id();
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(pool.Submit([&] {
                      ++ran;
                      if (std::this_thread::get_id() == caller) ++on_caller;
                      done.DecrementCount();
                    })
                    .ok());
  }
  done.Wait();
  EXPECT_EQ(ran.load(), 100);
  EXPECT_EQ(on_caller.load(), 0);
}

// The queue bound counts only the tasks that wait for a thread; beyond it Submit refuses at once.
TEST(ThreadPoolTest, AFullQueueRefusesWithoutBlocking) {
  ThreadPool pool(1, 1);
  absl::Notification started;
  absl::Notification release;
  ASSERT_TRUE(pool.Submit([&] {
                    started.Notify();
                    release.WaitForNotificationWithTimeout(kPatience);
                  })
                  .ok());
  ASSERT_TRUE(started.WaitForNotificationWithTimeout(kPatience));
  std::atomic<int> ran{0};
  absl::Notification second_ran;
  ASSERT_TRUE(pool.Submit([&] {
                    ++ran;
                    second_ran.Notify();
                  })
                  .ok());
  EXPECT_EQ(pool.queued(), 1);
  const absl::Status refused = pool.Submit([&] { ++ran; });
  EXPECT_TRUE(absl::IsResourceExhausted(refused)) << refused;
  release.Notify();
  ASSERT_TRUE(second_ran.WaitForNotificationWithTimeout(kPatience));
  pool.Shutdown();
  EXPECT_EQ(ran.load(), 1);
}

TEST(ThreadPoolTest, HighPriorityTasksRunBeforeWaitingNormalOnes) {
  ThreadPool pool(1, 10);
  absl::Notification started;
  absl::Notification release;
  ASSERT_TRUE(pool.Submit([&] {
                    started.Notify();
                    release.WaitForNotificationWithTimeout(kPatience);
                  })
                  .ok());
  ASSERT_TRUE(started.WaitForNotificationWithTimeout(kPatience));
  absl::Mutex mutex;
  std::string order;
  auto append = [&](char c) {
    return [&, c] {
      absl::MutexLock lock(&mutex);
      order.push_back(c);
    };
  };
  ASSERT_TRUE(pool.Submit(append('a')).ok());
  ASSERT_TRUE(pool.Submit(append('X'), ThreadPool::Priority::kHigh).ok());
  ASSERT_TRUE(pool.Submit(append('b')).ok());
  ASSERT_TRUE(pool.Submit(append('Y'), ThreadPool::Priority::kHigh).ok());
  release.Notify();
  pool.Shutdown();
  EXPECT_EQ(order, "XYab");
}

TEST(ThreadPoolTest, ShutdownRunsWhatWasAcceptedThenRefuses) {
  ThreadPool pool(1, 10);
  absl::Notification release;
  std::atomic<int> ran{0};
  ASSERT_TRUE(pool.Submit([&] { release.WaitForNotificationWithTimeout(kPatience); }).ok());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(pool.Submit([&] { ++ran; }).ok());
  std::thread shutdown([&] { pool.Shutdown(); });
  release.Notify();
  shutdown.join();
  EXPECT_EQ(ran.load(), 5);
  EXPECT_TRUE(absl::IsUnavailable(pool.Submit([&] { ++ran; })));
  pool.Shutdown();  // idempotent
  EXPECT_EQ(ran.load(), 5);
}

}  // namespace
}  // namespace llmserve::common
