// Internal to gateway/http: the checks a request's header must pass before the server reads its
// body or hands it to the handler. They refuse what a proxy in front of the server could frame
// differently from Beast's parser (request smuggling: Transfer-Encoding with Content-Length, a
// transfer coding other than chunked, folded header lines), bodies the server cannot interpret
// (Content-Encoding), HTTP/1.1 without exactly one Host, and, when the options ask for it, a POST
// body not declared as JSON. As nginx does: 501 for a transfer coding it does not implement, 400
// for ambiguous framing, 415 for a body it cannot decode.
//
// Thread-safe: pure functions.

#ifndef LLMSERVE_GATEWAY_HTTP_REQUEST_CHECKS_H_
#define LLMSERVE_GATEWAY_HTTP_REQUEST_CHECKS_H_

#include <cstddef>
#include <optional>
#include <utility>

// GCC 12 needs <utility> before Asio/Beast (docs/building.md, "Dependencies").
#include <boost/beast/http/message.hpp>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "gateway/http/http_server.h"
#include "gateway/http/response_writer.h"

namespace llmserve::gateway::http {

// The longest chunk-size line (size, extensions, CRLF) a chunked body may have. Nothing we serve
// uses chunk extensions; the bound keeps a line that never ends from growing the read buffer.
inline constexpr size_t kMaxChunkLineBytes = 4096;

// An answer the server gives itself instead of dispatching the request. The connection closes
// after it: what follows in the stream can no longer be trusted to start a request.
struct Refusal {
  int http_status = 400;
  absl::Status error;   // INVALID_ARGUMENT; its message is the error body's message
  HttpHeaders headers;  // besides content-type, e.g. accept-encoding for a 415
};

// Checks the request line and header fields (`header` as Beast parsed them). nullopt when the
// request may go on.
std::optional<Refusal> CheckRequestHeader(const boost::beast::http::request_header<>& header,
                                          const HttpServerOptions& options);

// What a chunked body's reader checks while the parser waits for more data: `unparsed` is what
// the parser keeps in the read buffer, an unfinished chunk-size line or (after the last chunk's
// line) an unfinished trailer section. Beast bounds neither, so a client could grow the buffer
// without end. nullopt while within kMaxChunkLineBytes and `max_trailer_bytes`.
std::optional<Refusal> CheckUnfinishedChunkedData(absl::string_view unparsed,
                                                  size_t max_trailer_bytes);

// A chunk's extensions as the parser reports them once the line is complete (a line that
// arrived in one read, never seen unfinished): 400 from kMaxChunkLineBytes on.
std::optional<Refusal> CheckChunkExtensions(absl::string_view extensions);

// After a chunked body: the trailer fields, those of `fields` after its first `header_fields`,
// at most `max_trailer_bytes` (counted as on the wire), else 431.
std::optional<Refusal> CheckTrailers(const boost::beast::http::fields& fields, size_t header_fields,
                                     size_t max_trailer_bytes);

// True when `content_type` is application/json, in any case, with or without parameters
// ("application/json; charset=utf-8").
bool IsJsonMediaType(absl::string_view content_type);

// True when the header section at the start of `data` (up to its blank line, or all of `data`
// when that has not arrived) has a line that starts with a space or tab: obsolete line folding
// (RFC 9112, 5.2), which Beast joins silently but another parser may not.
bool ContainsObsFold(absl::string_view data);

}  // namespace llmserve::gateway::http

#endif  // LLMSERVE_GATEWAY_HTTP_REQUEST_CHECKS_H_
