// Fuzz target: the gateway's HTTP/1.1 server reading a connection (gateway/http/connection.cc:
// Beast's parser driven byte by byte as they arrive, the framing checks of request_checks.h,
// bodies with content-length or chunked, trailers, pipelining, 100-continue, HEAD, HTTP/1.0,
// keep-alive and closing). The input is what a client sends on one connection.
//
// There is no parse function to call: parsing is interleaved with reading and answering, so the
// target runs the real Connection, in process, over a socketpair, on one thread. The client half
// writes the input and reads what comes back until everything is quiet (every request that
// arrived has been answered), then half-closes, and the server must close the connection.
//
// Checks, besides no crash, leak or sanitizer report:
//   - what the server sends is a clean sequence of HTTP responses: one per request handed to the
//     handler, in order and carrying that request's answer, then at most one error the server
//     sends itself (400, 413, 415, 431, 501) before closing; 100 Continue interim responses
//     anywhere; nothing else;
//   - no request reaches the handler with framing the server promises to refuse (both
//     transfer-encoding and content-length, a transfer coding other than chunked, a
//     content-encoding, a POST body not declared as JSON, a body over the limit);
//   - the connection closes once the client has sent everything and half-closed.
//
// The handler answers by path, to reach every way a response is written: "/stream" streams,
// "/half" streams and drops its writer mid-way (the connection closes without the last chunk),
// "/drop" drops its writer unanswered (500), "/empty" answers 204, "/error" an OpenAI-style 400;
// anything else gets 200 with an echo of the request (and its x-echo header as a response header,
// which the server must drop when it is not a valid field value).

#include <sys/socket.h>

#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

// GCC 12 needs <utility> before Asio/Beast (docs/building.md, "Dependencies").
#include <boost/asio.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/base/logging.h"
#include "gateway/http/connection.h"
#include "gateway/http/http_request.h"
#include "gateway/http/http_server.h"
#include "gateway/http/request_checks.h"
#include "gateway/http/response_writer.h"

namespace {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
namespace http = llmserve::gateway::http;
using boost::system::error_code;

// Small limits, so that short inputs reach them.
constexpr size_t kMaxBodyBytes = 4096;
constexpr size_t kMaxHeaderBytes = 2048;
// A connection that has not closed this long after the client's EOF hangs. Far below the
// server's own timeouts (set long below), so that a hang is reported, not timed out.
constexpr std::chrono::seconds kCloseDeadline(5);

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "http_request_fuzz: %s\n", what.c_str());
  std::abort();
}

// What the handler saw of one request, and what it answered.
struct Dispatched {
  std::string path;
  bool head = false;
  std::string expected_body;  // the echo; empty for the other paths
};

// The server side, shared by every input (a ServerContext is not cheap to rebuild and holds
// nothing from one connection to the next once it has closed).
struct Harness {
  asio::io_context io;
  http::ServerContext context;
  std::vector<Dispatched> dispatched;

  Harness() {
    context.options.max_body_bytes = kMaxBodyBytes;
    context.options.max_header_bytes = kMaxHeaderBytes;
    context.options.header_timeout = absl::Seconds(60);
    context.options.idle_timeout = absl::Seconds(60);
    context.options.require_json_post_body = true;  // as the gateway runs it
    context.handler = [this](http::HttpRequest request,
                             std::shared_ptr<http::ResponseWriter> writer) {
      Handle(std::move(request), std::move(writer));
    };
  }

  void Handle(http::HttpRequest request, std::shared_ptr<http::ResponseWriter> writer);
};

void CheckDispatchedRequest(const http::HttpRequest& request) {
  if (request.method.empty()) Fail("a request without a method");
  if (request.path.find('?') != std::string::npos) Fail("a path with its query string");
  for (const auto& [name, value] : request.headers) {
    if (name != absl::AsciiStrToLower(name)) Fail("a header name not lower-cased: " + name);
  }
  const bool has_length = request.headers.contains("content-length");
  if (request.headers.contains("transfer-encoding")) {
    if (has_length) Fail("transfer-encoding with content-length reached the handler");
    if (!absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(request.Header("transfer-encoding")),
                                "chunked")) {
      Fail("a transfer coding other than chunked reached the handler");
    }
  }
  for (absl::string_view coding : absl::StrSplit(request.Header("content-encoding"), ',')) {
    coding = absl::StripAsciiWhitespace(coding);
    if (!coding.empty() && !absl::EqualsIgnoreCase(coding, "identity")) {
      Fail("a content-encoding reached the handler");
    }
  }
  if (request.method == "POST" && !http::IsJsonMediaType(request.Header("content-type"))) {
    Fail("a POST body not declared as JSON reached the handler");
  }
  if (request.body.size() > kMaxBodyBytes) Fail("a body over max_body_bytes reached the handler");
  size_t length = 0;
  if (has_length && absl::SimpleAtoi(request.Header("content-length"), &length) &&
      length != request.body.size()) {
    Fail("the body's size differs from its content-length");
  }
}

void Harness::Handle(http::HttpRequest request, std::shared_ptr<http::ResponseWriter> writer) {
  CheckDispatchedRequest(request);
  Dispatched record{.path = request.path, .head = request.method == "HEAD"};
  if (request.path == "/stream" || request.path == "/half") {
    writer->SetOnClose([] {});
    writer->StartStream(200, {{"content-type", "text/event-stream"}});
    writer->Write(absl::StrCat("data: ", request.body.size(), "\n\n"));
    writer->Write("");
    if (request.path == "/stream") {
      writer->Write("data: [DONE]\n\n");
      writer->Finish();
    }
  } else if (request.path == "/drop") {
    // Released unanswered below: the server answers 500.
  } else if (request.path == "/empty") {
    writer->Send(204, {{"x-empty", "1"}}, "ignored: 204 has no body");
  } else if (request.path == "/error") {
    http::SendError(*writer, absl::InvalidArgumentError("bad \"request\"\n"));
  } else {
    record.expected_body = absl::StrCat(request.method, " ", request.path, "?", request.query, " ",
                                        request.headers.size(), " ", request.body);
    writer->Send(
        200, {{"content-type", "text/plain"}, {"x-echo", std::string(request.Header("x-echo"))}},
        record.expected_body);
  }
  dispatched.push_back(std::move(record));
}

Harness& GetHarness() {
  static Harness* const harness = [] {
    std::signal(SIGPIPE, SIG_IGN);
    // The server logs a warning for every dropped writer; thousands of them per second would
    // only slow the fuzzer down.
    llmserve::common::SetMinLogSeverity(llmserve::common::LogSeverity::ERROR);
    return new Harness();
  }();
  return *harness;
}

// The client half of the socketpair, on the harness's io_context.
class Client {
 public:
  Client(asio::io_context& io, int fd, std::string input) : socket_(io), input_(std::move(input)) {
    socket_.assign(asio::local::stream_protocol(), fd);
  }

  void Start() {
    asio::async_write(socket_, asio::buffer(input_), [this](const error_code&, size_t) {
      written_ = true;  // or failed because the server closed first: both are an end
    });
    Read();
  }
  void HalfClose() {
    error_code ec;
    socket_.shutdown(asio::socket_base::shutdown_send, ec);
  }
  void Close() {
    error_code ec;
    socket_.close(ec);
  }

  bool written() const { return written_; }
  const std::string& received() const { return received_; }

 private:
  void Read() {
    socket_.async_read_some(asio::buffer(buffer_), [this](const error_code& ec, size_t bytes) {
      received_.append(buffer_, bytes);
      if (!ec) Read();
    });
  }

  asio::local::stream_protocol::socket socket_;
  const std::string input_;
  std::string received_;
  char buffer_[16 * 1024];
  bool written_ = false;
};

bool IsServerErrorStatus(unsigned status) {
  return status == 400 || status == 413 || status == 415 || status == 431 || status == 501;
}

// Checks that `received` is the responses to `dispatched`, in order, then at most one error the
// server sent itself.
void CheckResponses(absl::string_view received, const std::vector<Dispatched>& dispatched) {
  size_t position = 0;
  size_t answered = 0;
  bool server_error = false;
  while (position < received.size()) {
    if (server_error) Fail("bytes after the server's own error response");
    const bool for_dispatched = answered < dispatched.size();
    bhttp::response_parser<bhttp::string_body> parser;
    parser.eager(true);
    parser.header_limit(1 << 20);
    parser.body_limit(boost::none);
    if (for_dispatched && dispatched[answered].head) parser.skip(true);
    error_code ec;
    while (!parser.is_done()) {
      if (position == received.size()) {
        parser.put_eof(ec);  // the server closed: a body delimited by the close ends here
        if (!ec) break;
      } else {
        const size_t used =
            parser.put(asio::buffer(received.data() + position, received.size() - position), ec);
        position += used;
        if (ec == bhttp::error::need_more) {
          ec = {};
          if (used > 0) continue;
          parser.put_eof(ec);  // what is left is an unfinished head
          if (!ec) break;
        }
      }
      if (ec) {
        // Only a stream whose writer was dropped may end without its last chunk (and the CRLF
        // after its last data, which the parser reads with the next chunk's size).
        const bool truncated_stream = ec == bhttp::error::partial_message && for_dispatched &&
                                      dispatched[answered].path == "/half" &&
                                      answered + 1 == dispatched.size();
        if (truncated_stream) return;
        Fail(absl::StrCat("response ", answered, " does not parse: ", ec.message()));
      }
    }
    const unsigned status = parser.get().result_int();
    if (status >= 100 && status < 200) continue;  // 100 Continue before a body was read
    if (!for_dispatched) {
      if (!IsServerErrorStatus(status)) {
        Fail(absl::StrCat("a response (", status, ") to no request the handler saw"));
      }
      server_error = true;
      continue;
    }
    if (!parser.get().keep_alive() && position != received.size()) {
      Fail(absl::StrCat("bytes after response ", answered, ", which closes the connection"));
    }
    const Dispatched& request = dispatched[answered++];
    if (request.path == "/drop" && status != 500) Fail("a dropped writer did not give 500");
    if (!request.expected_body.empty() && !request.head &&
        parser.get().body() != request.expected_body) {
      Fail(absl::StrCat("response ", answered - 1, " is not the answer to request ", answered - 1,
                        " (pipelined responses out of order?)"));
    }
  }
  if (answered != dispatched.size()) {
    Fail(absl::StrCat(dispatched.size(), " requests reached the handler, ", answered,
                      " responses came back"));
  }
}

// Runs the harness's handlers until none is ready and `done` holds (no waiting: the socketpair
// carries data at once, so nothing ready means the server waits for the client).
template <typename Done>
void RunUntilQuiet(Harness& harness, Done done) {
  harness.io.restart();
  const auto deadline = std::chrono::steady_clock::now() + kCloseDeadline;
  while (harness.io.poll() > 0 || !done()) {
    if (harness.io.stopped()) return;
    // Nothing ready, yet the input is not all written: the server has stopped reading.
    if (std::chrono::steady_clock::now() > deadline) Fail("the server stopped reading its input");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Harness& harness = GetHarness();
  harness.dispatched.clear();
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) Fail("socketpair failed");
  {
    // The server reads through a TCP socket type; a Unix socket behaves the same for its reads,
    // writes and shutdowns (TCP_NODELAY fails harmlessly, the peer address reads as unknown).
    http::Connection::Socket socket(asio::make_strand(harness.io));
    socket.assign(asio::ip::tcp::v4(), fds[0]);
    auto connection = std::make_shared<http::Connection>(std::move(socket), &harness.context);
    connection->Start();
  }
  Client client(harness.io, fds[1], std::string(reinterpret_cast<const char*>(data), size));
  client.Start();

  // Until quiet: the input written, every request that arrived answered, nothing ready to run.
  RunUntilQuiet(harness, [&client] { return client.written(); });
  client.HalfClose();
  RunUntilQuiet(harness, [] { return true; });
  if (!harness.io.stopped()) {
    // The server read the client's EOF and waits to read it again, which Boost 1.74's Asio never
    // delivers: a read that returns 0 bytes marks the socket exhausted, and the next read waits
    // for an epoll edge that does not come. Connection does so when it is closing gracefully and
    // its read loop was reading a pipelined request at the EOF (DrainUntilClosed after ReadMore),
    // and then stays open until its 2 s linger deadline. Clients close their end in the end,
    // which wakes it; reported rather than waited for, which would slow the fuzzer to a crawl.
    client.Close();
    harness.io.restart();
    harness.io.run_for(kCloseDeadline);
    if (!harness.io.stopped()) Fail("the connection is still open after the client closed");
  }
  {
    absl::MutexLock lock(&harness.context.mu);
    if (!harness.context.live.empty()) Fail("a closed connection is still registered");
  }
  CheckResponses(client.received(), harness.dispatched);
  return 0;
}
