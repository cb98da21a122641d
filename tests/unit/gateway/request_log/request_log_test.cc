// RequestLog: records reach the sink in order, once, in batches, whatever the sink does (fails,
// refuses, blocks), and serving never waits for it.

#include "gateway/request_log/request_log.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace llmserve::gateway {
namespace {

// What a FakeSink saw; outlives the sink (the log owns and destroys it).
struct SinkLog {
  absl::Mutex mutex;
  std::vector<std::string> request_ids ABSL_GUARDED_BY(mutex);
  std::vector<size_t> batch_sizes ABSL_GUARDED_BY(mutex);
  // Each Write pops the front outcome; OK once they run out.
  std::vector<absl::Status> outcomes ABSL_GUARDED_BY(mutex);
  int writes ABSL_GUARDED_BY(mutex) = 0;
  bool block ABSL_GUARDED_BY(mutex) = false;  // Write waits until Interrupt
  bool interrupted ABSL_GUARDED_BY(mutex) = false;

  std::vector<std::string> Written() {
    absl::MutexLock lock(&mutex);
    return request_ids;
  }
};

class FakeSink final : public RequestLogSink {
 public:
  explicit FakeSink(std::shared_ptr<SinkLog> log) : log_(std::move(log)) {}
  absl::Status Write(absl::Span<const RequestRecord> records) override {
    absl::MutexLock lock(&log_->mutex);
    ++log_->writes;
    if (log_->block) {
      log_->mutex.Await(absl::Condition(&log_->interrupted));
      return absl::UnavailableError("interrupted");
    }
    absl::Status outcome = absl::OkStatus();
    if (!log_->outcomes.empty()) {
      outcome = log_->outcomes.front();
      log_->outcomes.erase(log_->outcomes.begin());
    }
    if (outcome.ok()) {
      log_->batch_sizes.push_back(records.size());
      for (const RequestRecord& record : records) log_->request_ids.push_back(record.request_id);
    }
    return outcome;
  }
  void Interrupt() override {
    absl::MutexLock lock(&log_->mutex);
    log_->interrupted = true;
  }
  std::string Describe() const override { return "fake"; }

 private:
  std::shared_ptr<SinkLog> log_;
};

RequestRecord Record(int i) {
  RequestRecord record;
  record.request_id = absl::StrCat("r", i);
  record.time = absl::Now();
  return record;
}

std::vector<std::string> Ids(int from, int to) {
  std::vector<std::string> ids;
  for (int i = from; i < to; ++i) ids.push_back(absl::StrCat("r", i));
  return ids;
}

// Fast retries and batches, so that tests wait for events, not for time.
RequestLogOptions FastOptions() {
  return {.max_queued = 1000,
          .max_batch = 8,
          .batch_delay = absl::Milliseconds(1),
          .retry_initial = absl::Milliseconds(1),
          .retry_max = absl::Milliseconds(4),
          .shutdown_flush = absl::Seconds(30)};
}

TEST(RequestLogTest, RecordsReachTheSinkInOrderInBatchesWithIdsAndTheGatewayName) {
  auto sink = std::make_shared<SinkLog>();
  std::unique_ptr<RequestLog> log =
      *RequestLog::Start(std::make_unique<FakeSink>(sink), FastOptions());
  for (int i = 0; i < 20; ++i) log->Append(Record(i));
  ASSERT_TRUE(log->WaitForFlush(absl::Now() + absl::Seconds(30)));
  EXPECT_EQ(sink->Written(), Ids(0, 20));
  {
    absl::MutexLock lock(&sink->mutex);
    for (size_t size : sink->batch_sizes) EXPECT_LE(size, 8u);
  }
  const RequestLog::Stats stats = log->stats();
  EXPECT_EQ(stats.written, 20);
  EXPECT_EQ(stats.dropped, 0);
  EXPECT_EQ(stats.queued, 0);
  EXPECT_TRUE(stats.sink_ok);
}

TEST(RequestLogTest, AFailingSinkGetsTheSameBatchAgainUntilItSucceedsAndNothingIsLostOrRepeated) {
  auto sink = std::make_shared<SinkLog>();
  {
    absl::MutexLock lock(&sink->mutex);
    sink->outcomes = {absl::UnavailableError("down"), absl::UnavailableError("down"),
                      absl::UnavailableError("down")};
  }
  std::unique_ptr<RequestLog> log =
      *RequestLog::Start(std::make_unique<FakeSink>(sink), FastOptions());
  for (int i = 0; i < 30; ++i) log->Append(Record(i));
  ASSERT_TRUE(log->WaitForFlush(absl::Now() + absl::Seconds(30)));
  EXPECT_EQ(sink->Written(), Ids(0, 30));
  const RequestLog::Stats stats = log->stats();
  EXPECT_EQ(stats.written, 30);
  EXPECT_EQ(stats.write_failures, 3);
  EXPECT_EQ(stats.dropped, 0);
  EXPECT_TRUE(stats.sink_ok);
}

TEST(RequestLogTest, BeyondTheQueueBoundNewRecordsAreDroppedAndCountedWithoutWaiting) {
  auto sink = std::make_shared<SinkLog>();
  {
    absl::MutexLock lock(&sink->mutex);
    sink->block = true;
  }
  RequestLogOptions options = FastOptions();
  options.max_queued = 10;
  options.max_batch = 4;
  options.shutdown_flush = absl::ZeroDuration();
  std::unique_ptr<RequestLog> log = *RequestLog::Start(std::make_unique<FakeSink>(sink), options);
  log->Append(Record(0));
  // The writer holds the first record in a Write that blocks: the queue fills behind it.
  {
    absl::MutexLock lock(&sink->mutex);
    auto writing = [&sink]()
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(sink->mutex) { return sink->writes > 0; };
    sink->mutex.Await(absl::Condition(&writing));
  }
  const absl::Time start = absl::Now();
  for (int i = 1; i <= 25; ++i) log->Append(Record(i));
  const absl::Duration appending = absl::Now() - start;
  const RequestLog::Stats stats = log->stats();
  EXPECT_EQ(stats.dropped, 15);
  EXPECT_EQ(stats.queued, 11);  // 10 queued and the one being written
  EXPECT_EQ(stats.written, 0);
  // Not a timing assertion of speed: only that Append did not wait for the blocked sink (which
  // never returns on its own).
  EXPECT_LT(appending, absl::Seconds(20));
  // Destruction interrupts the blocked Write (shutdown_flush is 0) and drops what is left.
  log.reset();
  absl::MutexLock lock(&sink->mutex);
  EXPECT_TRUE(sink->interrupted);
  EXPECT_TRUE(sink->request_ids.empty());
}

TEST(RequestLogTest, ABatchTheSinkRefusesForItsContentsIsDroppedNotRetried) {
  auto sink = std::make_shared<SinkLog>();
  {
    absl::MutexLock lock(&sink->mutex);
    sink->outcomes = {absl::InvalidArgumentError("value too long")};
  }
  RequestLogOptions options = FastOptions();
  options.max_batch = 3;
  options.batch_delay = absl::Seconds(30);  // batches are exactly 3: full batches go at once
  std::unique_ptr<RequestLog> log = *RequestLog::Start(std::make_unique<FakeSink>(sink), options);
  for (int i = 0; i < 6; ++i) log->Append(Record(i));
  ASSERT_TRUE(log->WaitForFlush(absl::Now() + absl::Seconds(30)));
  EXPECT_EQ(sink->Written(), Ids(3, 6));
  const RequestLog::Stats stats = log->stats();
  EXPECT_EQ(stats.dropped, 3);
  EXPECT_EQ(stats.written, 3);
  EXPECT_EQ(stats.write_failures, 0);
}

TEST(RequestLogTest, DestructionWritesWhatIsQueued) {
  auto sink = std::make_shared<SinkLog>();
  RequestLogOptions options = FastOptions();
  options.batch_delay = absl::Seconds(30);  // only the shutdown makes the last batch go
  std::unique_ptr<RequestLog> log = *RequestLog::Start(std::make_unique<FakeSink>(sink), options);
  for (int i = 0; i < 5; ++i) log->Append(Record(i));
  log.reset();
  EXPECT_EQ(sink->Written(), Ids(0, 5));
}

TEST(RequestLogTest, ASinkThatStaysDownAtShutdownCostsAtMostTheFlushTime) {
  auto sink = std::make_shared<SinkLog>();
  {
    absl::MutexLock lock(&sink->mutex);
    sink->outcomes.assign(1000000, absl::UnavailableError("down"));
  }
  RequestLogOptions options = FastOptions();
  options.shutdown_flush = absl::Milliseconds(50);
  std::unique_ptr<RequestLog> log = *RequestLog::Start(std::make_unique<FakeSink>(sink), options);
  for (int i = 0; i < 5; ++i) log->Append(Record(i));
  log.reset();  // returns: the test would time out otherwise
  EXPECT_TRUE(sink->Written().empty());
}

TEST(RequestLogTest, RecordIdsAreUniqueAndTextIsMadeStorable) {
  std::vector<RequestRecord> seen;
  class CapturingSink final : public RequestLogSink {
   public:
    explicit CapturingSink(std::vector<RequestRecord>* seen) : seen_(seen) {}
    absl::Status Write(absl::Span<const RequestRecord> records) override {
      seen_->insert(seen_->end(), records.begin(), records.end());
      return absl::OkStatus();
    }
    std::string Describe() const override { return "capture"; }

   private:
    std::vector<RequestRecord>* seen_;
  };
  std::unique_ptr<RequestLog> log =
      *RequestLog::Start(std::make_unique<CapturingSink>(&seen), FastOptions());
  RequestRecord hostile = Record(0);
  hostile.model = std::string("m\0x\xff", 4);
  log->Append(hostile);
  log->Append(Record(1));
  ASSERT_TRUE(log->WaitForFlush(absl::Now() + absl::Seconds(30)));
  log.reset();  // the writer thread is done with `seen`
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_NE(seen[0].record_id, seen[1].record_id);
  EXPECT_FALSE(seen[0].record_id.empty());
  EXPECT_EQ(seen[0].model, "m\xEF\xBF\xBDx\xEF\xBF\xBD");
  EXPECT_EQ(seen[0].gateway, seen[1].gateway);
}

TEST(RequestLogTest, BadOptionsAreRefusedByName) {
  RequestLogOptions options;
  options.max_queued = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(
      RequestLog::Start(std::make_unique<FakeSink>(std::make_shared<SinkLog>()), options)
          .status()));
  options = RequestLogOptions();
  options.retry_initial = absl::ZeroDuration();
  EXPECT_TRUE(absl::IsInvalidArgument(
      RequestLog::Start(std::make_unique<FakeSink>(std::make_shared<SinkLog>()), options)
          .status()));
  EXPECT_TRUE(absl::IsInvalidArgument(RequestLog::Start(nullptr, RequestLogOptions()).status()));
}

}  // namespace
}  // namespace llmserve::gateway
