// Internal to gateway/http: one accepted TCP connection (Connection), what it shares with its
// server (ServerContext), and the gate through which ResponseWriters reach it (WriterGate). The
// same Connection serves plain HTTP and HTTPS: it talks to an HttpStream (http_stream.h).
//
// Lifetime: a Connection is owned by the operations and handlers pending on its strand (its read
// coroutine, a write, a timer, a posted writer call), never by a ResponseWriter, which holds a
// weak_ptr. So a Connection dies with its socket's last operation and never outlives the
// io_context, even when a handler keeps its writer after the server is gone.
//
// Thread-safety: a Connection's members are touched only on its strand, except the constructor,
// the destructor and executor(). ServerContext's registry is guarded by its mutex; WriterGate's
// flag by its own.

#ifndef LLMSERVE_GATEWAY_HTTP_CONNECTION_H_
#define LLMSERVE_GATEWAY_HTTP_CONNECTION_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

// GCC 12 needs <utility> before Asio (docs/building.md, "Dependencies").
#include <boost/asio.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gateway/http/http_server.h"
#include "gateway/http/http_stream.h"
#include "gateway/http/request_checks.h"
#include "gateway/http/response_encoding.h"

namespace llmserve::gateway::http {

class Connection;

// Open while the io_context exists. A writer posts to its connection only while holding the gate
// open (reader lock), so that closing it (writer lock) guarantees no post races the io_context's
// destruction.
struct WriterGate {
  absl::Mutex mu;
  bool open ABSL_GUARDED_BY(mu) = true;
};

// The state of one response that its writer reads from any thread.
struct ResponseShared {
  std::atomic<bool> closed{false};
  // Bytes queued on the connection and not yet written (set on the strand).
  std::atomic<size_t> buffered{0};
  // Bytes of Write calls posted to the strand that have not run yet, so that a producer sees
  // its backlog even while the I/O thread is busy.
  std::atomic<size_t> posted{0};
};

// Owned by the server; outlives every Connection (the io_context is destroyed first).
struct ServerContext {
  HttpServerOptions options;
  Handler handler;
  // Set when the options name a certificate and key: every connection then speaks TLS.
  std::unique_ptr<boost::asio::ssl::context> tls;
  std::shared_ptr<WriterGate> gate = std::make_shared<WriterGate>();
  std::atomic<bool> draining{false};

  mutable absl::Mutex mu;
  absl::flat_hash_map<Connection*, std::weak_ptr<Connection>> live ABSL_GUARDED_BY(mu);
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  using Socket = boost::asio::ip::tcp::socket;  // its executor is this connection's strand

  // Speaks TLS when context->tls is set. Throws if OpenSSL cannot allocate the session.
  Connection(Socket socket, ServerContext* context);
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection();

  // Registers with the context and starts reading. Call once, right after make_shared.
  void Start();

  // The connection's strand; safe from any thread.
  const boost::asio::any_io_executor& executor() const { return executor_; }

  // On the strand. The writer of request `id` calls these; stale ids are ignored.
  void SendResponse(uint64_t id, int status, HttpHeaders headers, std::string body);
  void StartStream(uint64_t id, int status, HttpHeaders headers);
  void WriteChunk(uint64_t id, std::string chunk);
  void FinishStream(uint64_t id);
  void SetOnClose(uint64_t id, std::function<void()> on_close);
  void OnWriterReleased(uint64_t id);

  // On the strand. StopAccepting: close if idle, else after the current response.
  void Drain();
  // On the strand. Closes the socket; on_close runs if a response is unfinished.
  void Close();

 private:
  enum class ResponseState { kNone, kStreaming, kEnded };
  enum class ReadStage { kIdle, kHeader, kBody, kOther };
  using Parser = boost::beast::http::request_parser<boost::beast::http::string_body>;

  boost::asio::awaitable<void> ReadLoop();
  // The TLS handshake, within header_timeout (nothing for plain TCP); false when it failed and
  // the connection closed.
  boost::asio::awaitable<bool> Handshake();
  // Waits for the first bytes of a kept-alive connection's next request (or its end).
  boost::asio::awaitable<boost::system::error_code> WaitForNextRequest();
  // Reads and answers one request; false when the connection should stop reading.
  boost::asio::awaitable<bool> ServeOneRequest();
  // Read the request line and header fields, then the body, into `parser` (as Beast's
  // async_read_header and async_read, plus the checks of request_checks.h that need the bytes
  // as they arrive). A read or parse error comes back as the error code; a request to refuse
  // (obsolete line folding, an endless chunk-size line or trailer section) sets `refusal`.
  boost::asio::awaitable<boost::system::error_code> ReadHeader(Parser& parser,
                                                               std::optional<Refusal>& refusal);
  boost::asio::awaitable<boost::system::error_code> ReadBody(Parser& parser,
                                                             std::optional<Refusal>& refusal);
  // The checks of request_checks.h that need only the header, then the body limit: the refusal,
  // if any.
  std::optional<Refusal> CheckBeforeBody(Parser& parser) const;
  // Reads more bytes into buffer_; as Beast does, EOF becomes partial_message (or
  // end_of_stream when nothing of a request has arrived).
  boost::asio::awaitable<boost::system::error_code> ReadMore(const Parser& parser);
  boost::asio::awaitable<void> WaitUntilResponseDone();
  // After the client's EOF following a whole request whose response is pending: finishes that
  // response when the client may still read it (a half-close), else closes (it left).
  boost::asio::awaitable<void> FinishAfterHalfClose();
  boost::asio::awaitable<void> DrainUntilClosed();
  // Hands the request to the handler, with the first `header_fields` fields as its headers (the
  // rest are trailers, which are dropped).
  void Dispatch(Parser& parser, size_t header_fields);
  // Answers a protocol error itself and closes the connection after it.
  void SendServerError(int status, const absl::Status& error, const HttpHeaders& headers = {});
  // Answers a read error: a protocol error gets 400/413/431 (after any pending response), a
  // socket error or EOF closes the connection.
  boost::asio::awaitable<void> OnReadError(const boost::system::error_code& ec);
  // After every suspension: the connection is closing, and the read loop should stop.
  bool Closing() const { return closed_ || lingering_; }
  // When Closing(): lets a lingering close finish (the client's remaining bytes are read and
  // dropped) and returns true, the read loop should stop. Callers bind the result in an if
  // initializer: GCC 12 miscompiles `if (co_await ...)` here (the read loop hangs).
  boost::asio::awaitable<bool> StopIfClosing();
  // Ends a header or body read under the read deadline: false (stop reading) when the connection
  // is closing or the read failed (answered by OnReadError).
  boost::asio::awaitable<bool> FinishRead(const boost::system::error_code& ec);

  // The call comes from the current request's writer and the connection is open.
  bool AcceptsCall(uint64_t id) const;
  // Queues `data` for the client; starts writing unless more is about to follow.
  void Enqueue(std::string data, bool start_write = true);
  void StartWrite();
  void OnWritten(const boost::system::error_code& ec, size_t bytes);
  void EndResponseWhenFlushed();
  void OnResponseFlushed();
  void CloseGracefully();
  void FireOnClose();

  // Arms the read deadline for the current read stage, unless a response is pending (the client
  // may legitimately send nothing while it waits for a long stream).
  void ArmReadDeadline();
  void DisarmReadDeadline();
  // Closes the connection when `timer` expires after `timeout`.
  void ArmTimer(boost::asio::steady_timer& timer, absl::Duration timeout);
  void MarkResponseEnded();

  HttpStream stream_;
  const boost::asio::any_io_executor executor_;
  ServerContext* const context_;
  std::string remote_address_;
  boost::beast::flat_buffer buffer_;
  boost::asio::steady_timer read_deadline_;
  boost::asio::steady_timer write_deadline_;
  // Never expires; cancelled to wake the read loop when a response has been written.
  boost::asio::steady_timer response_done_;

  bool closed_ = false;
  bool lingering_ = false;  // our side shut down; reading only to let the client see the end
  bool read_loop_running_ = false;
  // A read from the client failed or saw its EOF: no more bytes will come, and reading again
  // would wait (Asio does not report an EOF twice).
  bool read_ended_ = false;
  ReadStage read_stage_ = ReadStage::kOther;
  int requests_started_ = 0;

  // The current request's response.
  uint64_t current_id_ = 0;
  bool response_pending_ = false;  // dispatched and not yet completely written
  ResponseState response_state_ = ResponseState::kEnded;
  bool keep_alive_ = true;
  bool head_request_ = false;
  bool chunked_ = true;       // false for HTTP/1.0 streams, delimited by closing the connection
  bool body_allowed_ = true;  // false for HEAD requests and 1xx/204/304 responses
  std::function<void()> on_close_;
  std::shared_ptr<ResponseShared> shared_;

  // Output: `queue_` collects while `in_flight_` is being written.
  std::vector<std::string> queue_;
  std::vector<std::string> in_flight_;
  size_t buffered_ = 0;
  bool writing_ = false;
  bool end_after_write_ = false;
};

}  // namespace llmserve::gateway::http

#endif  // LLMSERVE_GATEWAY_HTTP_CONNECTION_H_
