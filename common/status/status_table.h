// The one table that says how an absl::Status leaves a process: which gRPC code, which HTTP
// status, which OpenAI-style error type. grpc_status.h and http_error.h both read it, so the two
// public APIs can never disagree about what a failure means.
//
// Thread-safe: the table is immutable.

#ifndef LLMSERVE_COMMON_STATUS_STATUS_TABLE_H_
#define LLMSERVE_COMMON_STATUS_STATUS_TABLE_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace llmserve::common {

struct StatusMapping {
  absl::StatusCode code;
  // grpc::StatusCode as an int, to keep gRPC headers out of HTTP-only users of this table.
  int grpc_code;
  // HTTP status for the OpenAI-compatible API. CANCELLED maps to 499 (nginx's "client closed
  // request"): the client went away, so the status is only ever seen in logs and metrics.
  int http_status;
  // The `error.type` field of the OpenAI error JSON.
  absl::string_view openai_type;
  // The `error.code` field and the `{code}` label of failure counters: the canonical code name in
  // lower case ("invalid_argument").
  absl::string_view code_name;
};

// The mapping for `code`. Codes outside absl's canonical set map as UNKNOWN.
const StatusMapping& MappingFor(absl::StatusCode code);

}  // namespace llmserve::common

#endif  // LLMSERVE_COMMON_STATUS_STATUS_TABLE_H_
