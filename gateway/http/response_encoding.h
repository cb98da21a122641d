// HTTP/1.1 response serialization: the status line and headers, chunk framing, and the server's
// own JSON error responses. Kept apart from the connection so that the bytes on the wire can be
// tested without sockets.
//
// Thread-safe: pure functions.

#ifndef LLMSERVE_GATEWAY_HTTP_RESPONSE_ENCODING_H_
#define LLMSERVE_GATEWAY_HTTP_RESPONSE_ENCODING_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "gateway/http/response_writer.h"

namespace llmserve::gateway::http {

// How the body that follows a response head is delimited.
enum class BodyFraming {
  kContentLength,  // "content-length: N"
  kChunked,        // "transfer-encoding: chunked"
  kUntilClose,     // neither; the connection closes after the body (HTTP/1.0 streams)
  kNone,           // no body at all (1xx, 204, 304): neither header
};

struct ResponseHeadOptions {
  BodyFraming framing = BodyFraming::kContentLength;
  size_t content_length = 0;  // for kContentLength
  bool keep_alive = true;     // false adds "connection: close"
};

// The status line, a date header, the caller's headers (minus the framing headers the server owns
// and any with an invalid name or value), the framing headers, and the blank line.
std::string EncodeResponseHead(int status, const HttpHeaders& headers,
                               const ResponseHeadOptions& options);

// True for statuses whose responses never carry a body (1xx, 204, 304).
bool StatusHasNoBody(int status);

// One chunk of a chunked body; empty for empty data (an empty chunk would end the body).
std::string EncodeChunk(absl::string_view data);
inline constexpr absl::string_view kLastChunk = "0\r\n\r\n";

// RFC 9110 token characters for names; values may not contain CR, LF or NUL.
bool IsValidHeaderName(absl::string_view name);
bool IsValidHeaderValue(absl::string_view value);

// A complete error response (`status` with the OpenAI-style JSON body built from `error`, and
// `headers` besides content-type), closing the connection. Used for errors the server answers
// itself (400, 413, 415, 431, 500, 501).
std::string EncodeErrorResponse(int status, const absl::Status& error, bool head_request,
                                const HttpHeaders& headers = {});

}  // namespace llmserve::gateway::http

#endif  // LLMSERVE_GATEWAY_HTTP_RESPONSE_ENCODING_H_
