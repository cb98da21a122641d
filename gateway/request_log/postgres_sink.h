// The request log as rows of a PostgreSQL table, `llmserve_request_log`, written with libpq.
//
// The gateway brings the table to its schema itself: on every (re)connection it applies the
// migrations it knows that the database lacks (llmserve_schema_migrations records them), under an
// advisory lock, so that replicas starting together do not race. Rows go in one multi-row INSERT
// per batch, every value a query parameter (nothing from a request is ever part of the SQL text),
// with ON CONFLICT (record_id) DO NOTHING: a batch retried after a connection broke during its
// commit is not stored twice.
//
// Connection: a postgres:// or postgresql:// URL (libpq's URI syntax, with its query parameters
// such as sslmode). Unless the URL sets them, connections time out after 5 s, keepalives detect a
// dead server within about 30 s, and each statement may run 10 s. A broken connection is dropped
// and made again at the next Write; the request log's backoff paces the attempts.
//
// Only the request log's writer thread calls Write; Interrupt may come from any thread.

#ifndef LLMSERVE_GATEWAY_REQUEST_LOG_POSTGRES_SINK_H_
#define LLMSERVE_GATEWAY_REQUEST_LOG_POSTGRES_SINK_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "gateway/request_log/request_log_sink.h"

typedef struct pg_conn PGconn;
typedef struct pg_cancel PGcancel;

namespace llmserve::gateway {

class PostgresSink final : public RequestLogSink {
 public:
  // Checks `url` (INVALID_ARGUMENT with libpq's reason when it is malformed); does not connect:
  // a database that is down at start delays records, not the gateway.
  static absl::StatusOr<std::unique_ptr<PostgresSink>> Create(const std::string& url);
  ~PostgresSink() override;

  absl::Status Write(absl::Span<const RequestRecord> records) override;
  void Interrupt() override ABSL_LOCKS_EXCLUDED(cancel_mutex_);
  std::string Describe() const override { return description_; }

  // The statements that bring a database to the current schema, in order (for docs and tests).
  static const std::vector<std::string>& Migrations();

 private:
  PostgresSink(std::vector<std::pair<std::string, std::string>> parameters, std::string description)
      : parameters_(std::move(parameters)), description_(std::move(description)) {}
  absl::Status Connect();
  absl::Status Migrate();
  void Disconnect() ABSL_LOCKS_EXCLUDED(cancel_mutex_);

  // libpq connection keywords and values, the URL's and our defaults.
  const std::vector<std::pair<std::string, std::string>> parameters_;
  const std::string description_;
  PGconn* connection_ = nullptr;
  absl::Mutex cancel_mutex_;
  PGcancel* cancel_ ABSL_GUARDED_BY(cancel_mutex_) = nullptr;
};

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_REQUEST_LOG_POSTGRES_SINK_H_
