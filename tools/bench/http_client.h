// A small blocking HTTP/1.1 client for the benchmark: one request at a time per connection,
// keep-alive when the server allows it, bodies framed by Content-Length, chunked encoding or the
// end of the connection, and the body handed to the caller as it arrives (an SSE stream's events
// must be timed when they arrive, not when the response ends). Plain TCP only (the benchmark runs
// beside the server, or behind a TLS-terminating proxy).
//
// Thread-compatible: one HttpConnection per thread at a time; HttpConnectionPool is thread-safe.

#ifndef LLMSERVE_TOOLS_BENCH_HTTP_CLIENT_H_
#define LLMSERVE_TOOLS_BENCH_HTTP_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace llmserve::tools {

// "host:port", or "http://host:port" (a trailing "/" is ignored). INVALID_ARGUMENT otherwise,
// naming what is wrong (https, a path, a missing or bad port).
struct HttpTarget {
  std::string host;
  uint16_t port = 0;
};
absl::StatusOr<HttpTarget> ParseHttpTarget(absl::string_view target);

struct HttpResponseHead {
  int status = 0;
  // Lower-cased names, in the order received.
  std::vector<std::pair<std::string, std::string>> headers;
  // The value of the first header named `name` (lower case), or "".
  std::string Header(absl::string_view name) const;
};

// Decodes a response byte stream: status line, headers, then the body by its framing. Feed()
// may be given the bytes split anywhere. Exposed for tests.
class HttpResponseParser {
 public:
  using HeadFn = std::function<void(const HttpResponseHead&)>;
  using BodyFn = std::function<void(absl::string_view)>;
  // on_head (may be null) sees the final head (not 1xx) before any of the body.
  HttpResponseParser(HeadFn on_head, BodyFn on_body)
      : on_head_(std::move(on_head)), on_body_(std::move(on_body)) {}

  // Consumes `data`; INVALID_ARGUMENT for a malformed response (bad status line, header over
  // 64 KiB, bad chunk size). Bytes past the end of a complete response are an error as well
  // (the client sends one request at a time).
  absl::Status Feed(absl::string_view data);
  // The connection closed: completes a body framed by the end of the connection, and is an
  // error (UNAVAILABLE) anywhere else before the response is complete.
  absl::Status FeedEof();

  bool head_done() const { return stage_ != Stage::kHead; }
  bool complete() const { return stage_ == Stage::kDone; }
  const HttpResponseHead& head() const { return head_; }
  // Whether the connection may carry another request after this response.
  bool reusable() const { return reusable_; }

 private:
  enum class Stage {
    kHead,
    kLength,
    kChunkSize,
    kChunkData,
    kChunkDataEnd,
    kTrailer,
    kToEof,
    kDone
  };
  absl::Status ParseHead(absl::string_view head);
  absl::Status Step(bool* progressed);

  HeadFn on_head_;
  BodyFn on_body_;
  Stage stage_ = Stage::kHead;
  std::string buffer_;
  HttpResponseHead head_;
  uint64_t remaining_ = 0;
  bool reusable_ = false;
};

class HttpConnection {
 public:
  // Connects with `timeout`. UNAVAILABLE naming the target when it cannot.
  static absl::StatusOr<std::unique_ptr<HttpConnection>> Connect(const HttpTarget& target,
                                                                 absl::Duration timeout);
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  // Sends `method path` with `body` (Content-Type application/json when not empty, plus
  // `headers`) and reads the response, calling `on_head` once with the status and headers and
  // `on_body` with every piece of the decoded body as it arrives. DEADLINE_EXCEEDED when the
  // response has not ended by `deadline`; UNAVAILABLE when the connection fails.
  absl::Status Exchange(absl::string_view method, absl::string_view path, absl::string_view body,
                        const std::vector<std::pair<std::string, std::string>>& headers,
                        absl::Time deadline, const HttpResponseParser::HeadFn& on_head,
                        const HttpResponseParser::BodyFn& on_body);

  // False once a response said the connection will close, or anything failed.
  bool reusable() const { return reusable_; }
  // Whether an earlier Exchange used this connection (a server may close an idle keep-alive
  // connection just as a request is sent on it: such a failure is worth one retry).
  bool reused() const { return exchanges_ > 1; }

 private:
  HttpConnection(int fd, std::string host_header) : fd_(fd), host_header_(std::move(host_header)) {}
  int fd_;
  std::string host_header_;
  bool reusable_ = true;
  int exchanges_ = 0;
};

// Idle keep-alive connections to one target, shared by the benchmark's client threads.
class HttpConnectionPool {
 public:
  explicit HttpConnectionPool(HttpTarget target) : target_(std::move(target)) {}

  // An idle connection, or a new one (always a new one when `fresh`).
  absl::StatusOr<std::unique_ptr<HttpConnection>> Take(absl::Duration connect_timeout,
                                                       bool fresh = false);
  // Keeps `connection` for the next request when it is reusable; closes it otherwise.
  void Return(std::unique_ptr<HttpConnection> connection);
  const HttpTarget& target() const { return target_; }

 private:
  const HttpTarget target_;
  absl::Mutex mutex_;
  std::vector<std::unique_ptr<HttpConnection>> idle_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace llmserve::tools

#endif  // LLMSERVE_TOOLS_BENCH_HTTP_CLIENT_H_
