// One finished request as the request log keeps it: who asked for what, how it ended, what it
// cost. Built once, by RequestLifecycle::Finish, for every request the gateway answered
// (success, error, cancel); the sinks (JSON lines, PostgreSQL) write the same fields under the
// same names.

#ifndef LLMSERVE_GATEWAY_REQUEST_LOG_REQUEST_RECORD_H_
#define LLMSERVE_GATEWAY_REQUEST_LOG_REQUEST_RECORD_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/time/time.h"

namespace llmserve::gateway {

struct RequestRecord {
  // Unique per record across gateway replicas and restarts (a random instance id and a sequence
  // number): what a sink deduplicates on when a write whose outcome it did not learn is retried.
  std::string record_id;
  // When the request arrived.
  absl::Time time;
  // The request's id as its response carried it (empty when it was refused before it had one).
  std::string request_id;
  // The API key's name or the JWT's subject, and which ("api_key", "jwt", "anonymous"); empty
  // when authentication failed. Never the key itself.
  std::string principal;
  std::string principal_kind;
  // The model as resolved, or as the client named it when it could not be resolved.
  std::string model;
  // "grpc" or "http", and the method or path: "/v1/chat/completions", "Generate", ...
  std::string api;
  std::string endpoint;
  // How it ended: a gRPC status code name ("OK", "INVALID_ARGUMENT", "CANCELLED", ...) and, when
  // it did not end OK, the error message (at most kMaxErrorBytes).
  std::string status;
  std::string error;
  // The choices that finished generating (a failed one is not counted), and their finish reasons
  // in choice order, comma-separated ("stop", "length,stop"); 0 and empty for a request that
  // generated nothing.
  int64_t choices = 0;
  std::string finish_reasons;
  int64_t prompt_tokens = 0;
  int64_t cached_prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t reasoning_tokens = 0;
  // From arrival to the first generated token; unset when none arrived.
  std::optional<double> time_to_first_token_s;
  // From arrival to the end.
  double duration_s = 0;
  // The workers that served its choices (host:port, comma-separated, each once).
  std::string worker;
  // The gateway replica that answered (its host name).
  std::string gateway;
  // With --request_log_content only: the prompt's messages and each choice's output, as GenAI
  // messages JSON ([{"role": ..., "parts": [{"type": "text", "content": ...}]}]), their texts cut
  // to the content budget.
  std::optional<std::string> prompt;
  std::optional<std::string> output;
};

inline constexpr size_t kMaxErrorBytes = 1024;

// Valid UTF-8 without NUL bytes in every text field (U+FFFD for what was not), and the error cut
// to kMaxErrorBytes on a character boundary: every sink can store any record as it is (JSON needs
// valid UTF-8, PostgreSQL's text refuses NUL and invalid sequences).
void SanitizeRecordText(RequestRecord& record);

// The record as one line of JSON (no trailing newline), fields named as in the struct, `time` as
// RFC 3339 UTC with microseconds, time_to_first_token_s null when unset; `prompt` and `output`
// (strings holding JSON) only when recorded.
std::string RequestRecordJson(const RequestRecord& record);

// `time` as PostgreSQL and JSON read it: "2026-11-28T08:01:02.123456Z".
std::string FormatRecordTime(absl::Time time);

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_REQUEST_LOG_REQUEST_RECORD_H_
