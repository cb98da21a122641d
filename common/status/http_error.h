// absl::Status -> HTTP status and OpenAI-style error body, for the gateway's HTTP API:
//   {"error": {"message": "...", "type": "invalid_request_error", "param": null,
//              "code": "invalid_argument"}}
//
// Thread-safe: pure functions.

#ifndef LLMSERVE_COMMON_STATUS_HTTP_ERROR_H_
#define LLMSERVE_COMMON_STATUS_HTTP_ERROR_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace llmserve::common {

struct HttpError {
  int http_status = 200;
  // The serialized JSON body (empty for an OK status).
  std::string body;
};

// The HTTP status code for `code` (OK -> 200).
int HttpStatusFor(absl::StatusCode code);

// The OpenAI-style error for `status`. An empty message becomes the code name so that a client
// never sees an empty error.
HttpError ToHttpError(const absl::Status& status);

// 405 for a path that exists but does not take `method`, in the same shape (type
// invalid_request_error, code method_not_allowed): no absl code means "wrong method".
HttpError MethodNotAllowed(absl::string_view method, absl::string_view path);

}  // namespace llmserve::common

#endif  // LLMSERVE_COMMON_STATUS_HTTP_ERROR_H_
