#include "gateway/request_log/request_log.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/base/host_name.h"
#include "common/base/logging.h"

namespace llmserve::gateway {
namespace {

std::string RandomInstanceId() {
  absl::BitGen random;
  return absl::StrFormat("%016x", absl::Uniform<uint64_t>(random));
}

}  // namespace

absl::StatusOr<std::unique_ptr<RequestLog>> RequestLog::Start(std::unique_ptr<RequestLogSink> sink,
                                                              RequestLogOptions options) {
  if (sink == nullptr) return absl::InvalidArgumentError("request log: no sink");
  if (options.max_queued == 0 || options.max_batch == 0) {
    return absl::InvalidArgumentError("request log: the queue and the batch must hold >= 1 record");
  }
  if (options.batch_delay < absl::ZeroDuration() || options.retry_initial <= absl::ZeroDuration() ||
      options.retry_max < options.retry_initial || options.shutdown_flush < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "request log: delays must be >= 0, retry_initial > 0 and retry_max >= retry_initial");
  }
  std::unique_ptr<RequestLog> log(new RequestLog(std::move(sink), options));
  log->writer_ = std::thread([raw = log.get()] { raw->WriterLoop(); });
  return log;
}

RequestLog::RequestLog(std::unique_ptr<RequestLogSink> sink, RequestLogOptions options)
    : sink_(std::move(sink)),
      options_(options),
      instance_id_(RandomInstanceId()),
      gateway_name_(common::HostName()) {}

RequestLog::~RequestLog() {
  {
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
    stop_deadline_ = absl::Now() + options_.shutdown_flush;
  }
  // A Write blocked in I/O past the deadline (a database that stopped answering) is interrupted,
  // again each second in case the first came before it started blocking.
  if (!writer_done_.WaitForNotificationWithTimeout(options_.shutdown_flush)) {
    do {
      sink_->Interrupt();
    } while (!writer_done_.WaitForNotificationWithTimeout(absl::Seconds(1)));
  }
  writer_.join();
  const Stats final_stats = stats();
  if (final_stats.dropped > 0) {
    LLMSERVE_LOG(WARNING) << "request log: " << final_stats.dropped << " of "
                          << final_stats.written + final_stats.dropped
                          << " records were not written to " << sink_->Describe();
  }
}

void RequestLog::Append(RequestRecord record) {
  record.record_id = absl::StrCat(instance_id_, "-", next_sequence_.fetch_add(1));
  record.gateway = gateway_name_;
  SanitizeRecordText(record);
  {
    absl::MutexLock lock(&mutex_);
    if (queue_.size() < options_.max_queued) {
      queue_.push_back(std::move(record));
      return;
    }
    ++stats_.dropped;
  }
  // Logged outside the lock, which every request's Append needs.
  if (std::optional<int64_t> skipped = drop_log_.Record(absl::Now())) {
    LLMSERVE_LOG(WARNING) << "request log: " << options_.max_queued << " records wait for "
                          << sink_->Describe() << "; dropping new ones (" << *skipped
                          << " more not logged)";
  }
}

RequestLog::Stats RequestLog::stats() const {
  absl::MutexLock lock(&mutex_);
  Stats stats = stats_;
  stats.queued = static_cast<int64_t>(queue_.size() + in_flight_);
  return stats;
}

bool RequestLog::WaitForFlush(absl::Time deadline) {
  absl::MutexLock lock(&mutex_);
  auto flushed = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    return queue_.empty() && in_flight_ == 0;
  };
  return mutex_.AwaitWithDeadline(absl::Condition(&flushed), deadline);
}

void RequestLog::WriterLoop() {
  while (true) {
    std::vector<RequestRecord> batch;
    {
      absl::MutexLock lock(&mutex_);
      auto has_work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
        return !queue_.empty() || stopping_;
      };
      mutex_.Await(absl::Condition(&has_work));
      if (queue_.empty()) break;  // stopping, nothing left
      if (options_.batch_delay > absl::ZeroDuration()) {
        auto batch_full = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
          return queue_.size() >= options_.max_batch || stopping_;
        };
        mutex_.AwaitWithTimeout(absl::Condition(&batch_full), options_.batch_delay);
      }
      const size_t n = std::min(queue_.size(), options_.max_batch);
      batch.assign(std::make_move_iterator(queue_.begin()),
                   std::make_move_iterator(queue_.begin() + static_cast<ptrdiff_t>(n)));
      queue_.erase(queue_.begin(), queue_.begin() + static_cast<ptrdiff_t>(n));
      in_flight_ = n;
    }
    WriteWithRetry(batch);
  }
  writer_done_.Notify();
}

void RequestLog::WriteWithRetry(std::vector<RequestRecord>& batch) {
  const auto n = static_cast<int64_t>(batch.size());
  absl::Duration backoff = options_.retry_initial;
  while (true) {
    const absl::Status status = sink_->Write(batch);
    const absl::Time now = absl::Now();
    // Logs are written outside mutex_, which every request's Append needs.
    if (status.ok() || absl::IsInvalidArgument(status)) {
      bool recovered = false;
      {
        absl::MutexLock lock(&mutex_);
        (status.ok() ? stats_.written : stats_.dropped) += n;
        recovered = !stats_.sink_ok;
        stats_.sink_ok = true;
        in_flight_ = 0;
      }
      if (!status.ok()) {
        LLMSERVE_LOG(WARNING) << "request log: " << sink_->Describe() << " refused " << n
                              << " records, dropped: " << status;
      }
      if (recovered) {
        LLMSERVE_LOG(INFO) << "request log: writing to " << sink_->Describe() << " again";
      }
      return;
    }
    if (std::optional<int64_t> skipped = failure_log_.Record(now)) {
      LLMSERVE_LOG(WARNING) << "request log: cannot write to " << sink_->Describe() << ": "
                            << status << "; retrying (" << *skipped << " more failures not logged)";
    }
    absl::MutexLock lock(&mutex_);
    ++stats_.write_failures;
    stats_.sink_ok = false;
    if (stopping_ && now >= stop_deadline_) {
      // Shutting down and out of time: what is left is lost, and counted.
      stats_.dropped += n + static_cast<int64_t>(queue_.size());
      queue_.clear();
      in_flight_ = 0;
      return;
    }
    // Waits out the backoff; a shutdown starting meanwhile retries at once (to flush), and a
    // shutdown never waits past its deadline.
    const bool was_stopping = stopping_;
    auto stop_changed = [this, was_stopping]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
      return stopping_ != was_stopping;
    };
    mutex_.AwaitWithDeadline(absl::Condition(&stop_changed),
                             std::min(now + backoff, stop_deadline_));
    backoff = std::min(backoff * 2, options_.retry_max);
  }
}

}  // namespace llmserve::gateway
