// Where the request log's records go: a JSON-lines file (json_lines_sink.h) or a PostgreSQL table
// (postgres_sink.h). Only the request log's writer thread calls Write, so a sink may block on its
// I/O there; nothing on the data path ever waits for it.

#ifndef LLMSERVE_GATEWAY_REQUEST_LOG_REQUEST_LOG_SINK_H_
#define LLMSERVE_GATEWAY_REQUEST_LOG_REQUEST_LOG_SINK_H_

#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "gateway/request_log/request_record.h"

namespace llmserve::gateway {

class RequestLogSink {
 public:
  virtual ~RequestLogSink() = default;

  // Writes every record of `records`, or none: OK; UNAVAILABLE when the destination cannot be
  // reached or written now (the batch is tried again later, and a record that did reach it then
  // is not stored twice); INVALID_ARGUMENT when the destination refused these records themselves
  // (trying again cannot help: they are dropped and counted).
  virtual absl::Status Write(absl::Span<const RequestRecord> records) = 0;

  // Makes a Write that is blocked in I/O give up soon (shutdown). Thread-safe; may be called
  // while no Write runs.
  virtual void Interrupt() {}

  // For logs: the destination without secrets ("postgres://db:5432/llmserve", a file path).
  virtual std::string Describe() const = 0;
};

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_REQUEST_LOG_REQUEST_LOG_SINK_H_
