// ResponseWriter: how a Handler answers one HTTP request, now or later, from any thread.
//
// A handler either sends a whole response:
//
//   writer->Send(200, {{"content-type", "application/json"}}, body);
//
// or streams one (chunked transfer encoding), e.g. Server-Sent Events:
//
//   writer->SetOnClose([job] { job->Cancel(); });   // before starting upstream work
//   writer->StartStream(200, {{"content-type", "text/event-stream"}});
//   writer->Write(FormatSseEvent(json));           // any number of times, any thread
//   writer->Write(std::string(kSseDone));
//   writer->Finish();
//
// The server manages framing headers itself: content-length, transfer-encoding and connection
// given by the caller are ignored, and so are headers with invalid names or values (CR, LF, NUL).
//
// Thread-safety: every method may be called from any thread; the work is posted to the
// connection's strand, so calls made in order from one thread take effect in that order. After
// the client went away (or the server shut down) every method does nothing. A writer released
// without a response makes the server answer 500; one released in the middle of a stream makes
// the server close the connection without the final chunk, so that the client sees a truncated
// response rather than a complete one.

#ifndef LLMSERVE_GATEWAY_HTTP_RESPONSE_WRITER_H_
#define LLMSERVE_GATEWAY_HTTP_RESPONSE_WRITER_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/status/http_error.h"
#include "gateway/http/http_request.h"

namespace llmserve::gateway::http {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;

  // A whole response; content-length is set by the server. Only the first of Send/StartStream
  // counts; later calls are ignored.
  virtual void Send(int status, HttpHeaders headers, std::string body) = 0;

  // Starts a streamed response (Transfer-Encoding: chunked; for an HTTP/1.0 client the body is
  // delimited by closing the connection instead).
  virtual void StartStream(int status, HttpHeaders headers) = 0;
  // Appends `chunk` to the stream. Buffered, never blocks; empty chunks are skipped.
  virtual void Write(std::string chunk) = 0;
  // Ends the stream. The connection is then reused for the client's next request.
  virtual void Finish() = 0;

  // `on_close` runs once, on an I/O thread, when the connection closes before the response ended
  // (Send or Finish called): the client disconnected, a write failed or timed out, the client fell
  // more than max_buffered_bytes behind, or the server shut down. If that already happened it runs
  // at once (on the calling thread when the connection no longer exists). Set it before starting
  // upstream work so that none is left running for a client who left. Replaces a previous one.
  virtual void SetOnClose(std::function<void()> on_close) = 0;

  // True once the connection closed before the response ended: writes are discarded from then on.
  virtual bool closed() const = 0;

  // Bytes accepted by Write/Send but not yet handed to the kernel. A producer may slow down or
  // give up on a client that does not keep up.
  virtual size_t buffered_bytes() const = 0;
};

// Called on an I/O thread for every request; it must not block. It answers through `writer`,
// now or later from any thread.
using Handler = std::function<void(HttpRequest request, std::shared_ptr<ResponseWriter> writer)>;

// Sends `status` (not OK) as an OpenAI-style JSON error with the HTTP status mapped from its code
// (common/status/http_error.h), e.g. INVALID_ARGUMENT -> 400 {"error": {...}}, with a
// Retry-After header (whole seconds, rounded up) when `retry_after` is positive. Every error the
// gateway's HTTP API sends goes through here.
void SendError(ResponseWriter& writer, const absl::Status& status,
               absl::Duration retry_after = absl::ZeroDuration());
void SendError(ResponseWriter& writer, common::HttpError error,
               absl::Duration retry_after = absl::ZeroDuration());

}  // namespace llmserve::gateway::http

#endif  // LLMSERVE_GATEWAY_HTTP_RESPONSE_WRITER_H_
