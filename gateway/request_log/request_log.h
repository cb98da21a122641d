// The gateway's request and usage log: every finished request becomes one RequestRecord, queued
// in memory and written to a sink (a JSON-lines file or PostgreSQL) in batches by one background
// thread.
//
// Serving never waits for the log: Append takes a short lock, queues the record and returns. When
// the sink fails, the writer keeps the failed batch at the head and tries it again with
// exponential backoff (retry_initial doubling up to retry_max) while new records queue behind it;
// beyond max_queued records, new ones are dropped and counted. A sink that refuses a batch for
// its contents (INVALID_ARGUMENT) has it dropped and counted at once rather than retried forever.
// Records reach the sink in the order they were appended.
//
// Destruction flushes what is queued for up to shutdown_flush, then interrupts the sink and drops
// the rest (counted and logged).
//
// Thread-safe.

#ifndef LLMSERVE_GATEWAY_REQUEST_LOG_REQUEST_LOG_H_
#define LLMSERVE_GATEWAY_REQUEST_LOG_REQUEST_LOG_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/base/log_throttle.h"
#include "gateway/request_log/request_log_sink.h"
#include "gateway/request_log/request_record.h"

namespace llmserve::gateway {

struct RequestLogOptions {
  // Records waiting for the sink; beyond it, new records are dropped (counted).
  size_t max_queued = 10000;
  // Records per Write.
  size_t max_batch = 256;
  // How long the writer, woken by a record, waits for more before it writes. 0 by default: the
  // records that arrive while a write is in flight make the next batch (group commit), so batches
  // grow with the load without delaying a record when there is none.
  absl::Duration batch_delay = absl::ZeroDuration();
  absl::Duration retry_initial = absl::Milliseconds(100);
  absl::Duration retry_max = absl::Seconds(10);
  absl::Duration shutdown_flush = absl::Seconds(5);
  // Prompt and output text in each record, at most this many bytes of each; 0: none.
  size_t content_max_bytes = 0;
};

class RequestLog {
 public:
  // INVALID_ARGUMENT when an option is out of range (a zero bound or batch, a negative delay).
  static absl::StatusOr<std::unique_ptr<RequestLog>> Start(std::unique_ptr<RequestLogSink> sink,
                                                           RequestLogOptions options);
  ~RequestLog();
  RequestLog(const RequestLog&) = delete;
  RequestLog& operator=(const RequestLog&) = delete;

  // Queues `record` for the sink, after giving it its record_id and gateway name and making its
  // text storable (SanitizeRecordText). Never blocks on the sink.
  void Append(RequestRecord record) ABSL_LOCKS_EXCLUDED(mutex_);

  struct Stats {
    int64_t written = 0;  // records the sink accepted
    int64_t dropped = 0;  // records lost: queue full, refused by the sink, or left at shutdown
    int64_t write_failures = 0;  // Writes that failed (each retry counts)
    int64_t queued = 0;          // waiting now, including a batch being written
    bool sink_ok = true;         // false from a failed Write until one succeeds
  };
  Stats stats() const ABSL_LOCKS_EXCLUDED(mutex_);
  std::string Describe() const { return sink_->Describe(); }
  size_t content_max_bytes() const { return options_.content_max_bytes; }

  // Waits until every record appended so far was written or dropped, or `deadline`; true when
  // nothing is left. For tests and the drain.
  bool WaitForFlush(absl::Time deadline) ABSL_LOCKS_EXCLUDED(mutex_);

 private:
  RequestLog(std::unique_ptr<RequestLogSink> sink, RequestLogOptions options);
  void WriterLoop();
  // Writes `batch` until it succeeds, is refused, or shutdown's deadline passes.
  void WriteWithRetry(std::vector<RequestRecord>& batch);

  const std::unique_ptr<RequestLogSink> sink_;
  const RequestLogOptions options_;
  // Identifies this process in record ids.
  const std::string instance_id_;
  const std::string gateway_name_;
  std::atomic<uint64_t> next_sequence_{0};

  mutable absl::Mutex mutex_;
  std::deque<RequestRecord> queue_ ABSL_GUARDED_BY(mutex_);
  // Records taken from the queue and not yet written or dropped.
  size_t in_flight_ ABSL_GUARDED_BY(mutex_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  absl::Time stop_deadline_ ABSL_GUARDED_BY(mutex_) = absl::InfiniteFuture();
  Stats stats_ ABSL_GUARDED_BY(mutex_);
  common::LogThrottle failure_log_{absl::Seconds(30)};
  common::LogThrottle drop_log_{absl::Seconds(30)};
  absl::Notification writer_done_;
  std::thread writer_;
};

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_REQUEST_LOG_REQUEST_LOG_H_
