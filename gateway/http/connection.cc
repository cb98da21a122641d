#include "gateway/http/connection.h"

#include <algorithm>
#include <boost/beast/core/read_size.hpp>
#include <boost/beast/http/error.hpp>
#include <chrono>
#include <exception>
#include <iterator>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "gateway/http/connection_writer.h"

namespace llmserve::gateway::http {
namespace {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
using boost::system::error_code;

// After our side has sent everything and shut down, how long the client may take to close its
// side. Reading (and discarding) meanwhile keeps the kernel from resetting the connection, which
// could destroy a response (say a 413) the client has not read yet.
constexpr absl::Duration kLingerTimeout = absl::Seconds(2);
// How much a TLS connection reads at once while waiting for a kept-alive client's next request:
// one TLS record's worth.
constexpr size_t kTlsWaitReadBytes = 16 * 1024;
// The most a request read asks for at once, as Beast's own reads.
constexpr size_t kReadBytes = 64 * 1024;
// Sent to an HTTP/1.1 client that half-closed while its response is being produced: an interim
// response every client must accept before the final one (RFC 9110, 15.2), whose only purpose is
// that a client that closed its socket entirely answers it with a reset.
constexpr absl::string_view kHalfCloseProbe = "HTTP/1.1 100 Continue\r\n\r\n";

std::string FormatRemoteAddress(const Connection::Socket& socket) {
  error_code ec;
  const asio::ip::tcp::endpoint endpoint = socket.remote_endpoint(ec);
  if (ec) return "unknown";
  const std::string address = endpoint.address().to_string();
  if (endpoint.address().is_v6()) return absl::StrCat("[", address, "]:", endpoint.port());
  return absl::StrCat(address, ":", endpoint.port());
}

std::string ToString(boost::beast::string_view text) {
  return std::string(text.data(), text.size());
}

// Errors in what the client sent, as opposed to the socket failing or the client leaving.
bool IsProtocolError(const error_code& ec) {
  if (ec.category() != bhttp::make_error_code(bhttp::error::bad_method).category()) return false;
  return ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message;
}

}  // namespace

Connection::Connection(Socket socket, ServerContext* context)
    : stream_(std::move(socket), context->tls.get()),
      executor_(stream_.get_executor()),
      context_(context),
      read_deadline_(executor_),
      write_deadline_(executor_),
      response_done_(executor_) {}

Connection::~Connection() {
  {
    absl::MutexLock lock(&context_->mu);
    context_->live.erase(this);
  }
  // Only when the io_context is destroyed with this connection still open (a shutdown that ran
  // out of time): the caller still learns that its response will never be delivered.
  if (!closed_) {
    closed_ = true;
    if (shared_ != nullptr && response_state_ != ResponseState::kEnded) shared_->closed = true;
    FireOnClose();
  }
}

void Connection::Start() {
  {
    absl::MutexLock lock(&context_->mu);
    context_->live[this] = weak_from_this();
  }
  remote_address_ = FormatRemoteAddress(stream_.socket());
  error_code ec;
  // Stream events are small and latency matters more than packet count.
  stream_.socket().set_option(asio::ip::tcp::no_delay(true), ec);
  read_loop_running_ = true;
  asio::co_spawn(executor_, ReadLoop(), [self = shared_from_this()](std::exception_ptr error) {
    if (error == nullptr) return;
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      LLMSERVE_LOG(ERROR) << "HTTP connection " << self->remote_address_ << ": " << e.what();
    } catch (...) {
      LLMSERVE_LOG(ERROR) << "HTTP connection " << self->remote_address_ << ": unknown exception";
    }
    self->Close();
  });
}

// ---------------------------------------------------------------------------------------------
// Reading

asio::awaitable<void> Connection::ReadLoop() {
  const std::shared_ptr<Connection> self = shared_from_this();
  if (co_await Handshake()) {
    while (co_await ServeOneRequest()) {
    }
  }
  read_loop_running_ = false;
}

asio::awaitable<bool> Connection::Handshake() {
  if (!stream_.is_tls()) co_return true;
  // A client that never completes the handshake is held to the same limit as one that never
  // sends its headers.
  read_stage_ = ReadStage::kHeader;
  ArmReadDeadline();
  const error_code ec = co_await stream_.Handshake();
  read_stage_ = ReadStage::kOther;
  DisarmReadDeadline();
  if (closed_) co_return false;
  if (ec) {
    // A port scanner, a plain-HTTP client or a client that does not trust the certificate:
    // nothing to answer and nothing worth logging per connection.
    Close();
    co_return false;
  }
  co_return true;
}

asio::awaitable<error_code> Connection::WaitForNextRequest() {
  error_code ec;
  if (stream_.is_tls()) {
    // Under TLS the TCP socket's readiness is not enough: a pipelined request may already sit in
    // the TLS layer's buffers, not yet decrypted, with the socket drained. So read instead.
    const size_t bytes = co_await stream_.async_read_some(
        buffer_.prepare(kTlsWaitReadBytes), asio::redirect_error(asio::use_awaitable, ec));
    buffer_.commit(bytes);
    if (ec) read_ended_ = true;
  } else {
    co_await stream_.socket().async_wait(Socket::wait_read,
                                         asio::redirect_error(asio::use_awaitable, ec));
  }
  co_return ec;
}

asio::awaitable<bool> Connection::ServeOneRequest() {
  const HttpServerOptions& options = context_->options;
  error_code ec;
  // Between requests on a kept-alive connection: wait for the next one to begin, so that the
  // idle timeout and the header timeout are told apart. While a response is pending this wait is
  // what notices a client who leaves.
  if (requests_started_ > 0 && buffer_.size() == 0) {
    read_stage_ = ReadStage::kIdle;
    ArmReadDeadline();
    ec = co_await WaitForNextRequest();
    read_stage_ = ReadStage::kOther;
    DisarmReadDeadline();
    if (const bool stop = co_await StopIfClosing(); stop) co_return false;
    if (ec) {
      Close();
      co_return false;
    }
  }

  Parser parser;
  parser.header_limit(static_cast<uint32_t>(options.max_header_bytes));
  parser.body_limit(options.max_body_bytes);
  std::optional<Refusal> refusal;
  read_stage_ = ReadStage::kHeader;
  ArmReadDeadline();
  ec = co_await ReadHeader(parser, refusal);
  if (ec == bhttp::error::end_of_stream && response_pending_ && !Closing()) {
    // The client's end after a whole request, before the response is done.
    read_stage_ = ReadStage::kOther;
    DisarmReadDeadline();
    co_await FinishAfterHalfClose();
    co_return false;
  }
  if (const bool go_on = co_await FinishRead(ec); !go_on) co_return false;
  ++requests_started_;

  // One request at a time: a pipelined request waits for the previous response.
  co_await WaitUntilResponseDone();
  if (const bool stop = co_await StopIfClosing(); stop) co_return false;

  if (!refusal.has_value()) refusal = CheckBeforeBody(parser);
  const auto& fields = parser.get().base();
  const size_t header_fields = static_cast<size_t>(std::distance(fields.begin(), fields.end()));
  if (!refusal.has_value() && !parser.is_done()) {
    if (absl::EqualsIgnoreCase(ToString(parser.get()[bhttp::field::expect]), "100-continue")) {
      Enqueue("HTTP/1.1 100 Continue\r\n\r\n");
    }
    read_stage_ = ReadStage::kBody;
    ArmReadDeadline();
    ec = co_await ReadBody(parser, refusal);
    if (const bool go_on = co_await FinishRead(ec); !go_on) co_return false;
    if (!refusal.has_value() && parser.chunked()) {
      refusal = CheckTrailers(fields, header_fields, options.max_header_bytes);
    }
  }
  if (refusal.has_value()) {
    head_request_ = false;  // the error answers a request that was never dispatched
    SendServerError(refusal->http_status, refusal->error, refusal->headers);
    co_return false;
  }
  Dispatch(parser, header_fields);
  co_return true;
}

std::optional<Refusal> Connection::CheckBeforeBody(Parser& parser) const {
  // Before reading the body (and before "100 Continue"): what the framing headers say decides
  // where this request ends and the next begins.
  const HttpServerOptions& options = context_->options;
  if (std::optional<Refusal> refusal = CheckRequestHeader(parser.get(), options)) return refusal;
  const auto content_length = parser.content_length();
  if (content_length.has_value() && *content_length > options.max_body_bytes) {
    return Refusal{.http_status = 413,
                   .error = absl::InvalidArgumentError(absl::StrCat(
                       "request body of ", *content_length, " bytes exceeds the limit of ",
                       options.max_body_bytes, " bytes"))};
  }
  return std::nullopt;
}

asio::awaitable<error_code> Connection::ReadHeader(Parser& parser,
                                                   std::optional<Refusal>& refusal) {
  error_code ec;
  for (;;) {
    if (buffer_.size() > 0) {
      const auto data = buffer_.data();
      const size_t used = parser.put(data, ec);
      // Beast joins a folded line into one value; a proxy may read it as two fields, or reject
      // it. Beast consumes a field only with the byte after its CRLF, so a fold never straddles
      // two calls.
      if (!refusal.has_value() &&
          ContainsObsFold(absl::string_view(static_cast<const char*>(data.data()), used))) {
        refusal = Refusal{.http_status = 400,
                          .error = absl::InvalidArgumentError(
                              "obsolete line folding in the request headers (a line that starts "
                              "with a space or tab)")};
      }
      buffer_.consume(used);
      if (ec && ec != bhttp::error::need_more) co_return ec;
      if (parser.is_header_done()) co_return error_code();
    }
    ec = co_await ReadMore(parser);
    if (ec) co_return ec;
  }
}

asio::awaitable<error_code> Connection::ReadBody(Parser& parser, std::optional<Refusal>& refusal) {
  // A line that arrived whole is checked here; one still arriving, below. The parser keeps a
  // reference to the callback but is not given data after this read.
  auto on_chunk_header = [&refusal](uint64_t, boost::beast::string_view extensions,
                                    error_code& chunk_ec) {
    refusal = CheckChunkExtensions(absl::string_view(extensions.data(), extensions.size()));
    if (refusal.has_value()) chunk_ec = bhttp::error::bad_chunk_extension;  // stops the parser
  };
  parser.on_chunk_header(on_chunk_header);
  parser.eager(true);
  error_code ec;
  for (;;) {
    if (buffer_.size() > 0) {
      const size_t used = parser.put(buffer_.data(), ec);
      buffer_.consume(used);
      if (refusal.has_value()) co_return error_code();
      if (ec && ec != bhttp::error::need_more) co_return ec;
      if (parser.is_done()) co_return error_code();
      if (parser.chunked()) {
        const auto data = buffer_.data();
        refusal = CheckUnfinishedChunkedData(
            absl::string_view(static_cast<const char*>(data.data()), data.size()),
            context_->options.max_header_bytes);
        if (refusal.has_value()) co_return error_code();
      }
    }
    ec = co_await ReadMore(parser);
    if (ec) co_return ec;
  }
}

asio::awaitable<error_code> Connection::ReadMore(const Parser& parser) {
  error_code ec;
  const size_t bytes = co_await stream_.async_read_some(
      buffer_.prepare(boost::beast::read_size(buffer_, kReadBytes)),
      asio::redirect_error(asio::use_awaitable, ec));
  buffer_.commit(bytes);
  if (ec) read_ended_ = true;
  if (ec == asio::error::eof) {
    co_return parser.got_some() ? bhttp::error::partial_message : bhttp::error::end_of_stream;
  }
  co_return ec;
}

asio::awaitable<bool> Connection::StopIfClosing() {
  if (!Closing()) co_return false;
  if (!closed_) co_await DrainUntilClosed();
  co_return true;
}

asio::awaitable<bool> Connection::FinishRead(const error_code& ec) {
  read_stage_ = ReadStage::kOther;
  DisarmReadDeadline();
  if (const bool stop = co_await StopIfClosing(); stop) co_return false;
  if (ec) {
    co_await OnReadError(ec);
    co_return false;
  }
  co_return true;
}

asio::awaitable<void> Connection::OnReadError(const error_code& ec) {
  if (!IsProtocolError(ec)) {
    // EOF, reset, or our own deadline closing the socket. With a response pending this is the
    // client leaving: Close() runs on_close.
    Close();
    co_return;
  }
  co_await WaitUntilResponseDone();
  if (const bool stop = co_await StopIfClosing(); stop) co_return;
  const HttpServerOptions& options = context_->options;
  head_request_ = false;  // the error answers a request that was never dispatched
  if (ec == bhttp::error::body_limit) {
    SendServerError(413,
                    absl::InvalidArgumentError(absl::StrCat("request body exceeds the limit of ",
                                                            options.max_body_bytes, " bytes")));
  } else if (ec == bhttp::error::header_limit) {
    SendServerError(431,
                    absl::InvalidArgumentError(absl::StrCat("request headers exceed the limit of ",
                                                            options.max_header_bytes, " bytes")));
  } else {
    SendServerError(
        400, absl::InvalidArgumentError(absl::StrCat("malformed HTTP request: ", ec.message())));
  }
}

asio::awaitable<void> Connection::FinishAfterHalfClose() {
  // EOF is all a socket shows both of a client that closed entirely (it left: its request should
  // stop) and of one that only shut down its sending side and still reads (shutdown(SHUT_WR), as
  // `nc -N` does). Only a write tells them apart: the first answers it with a reset. So the
  // response goes on, preceded by a probe, unless no probe can be written: HTTP/1.0 takes no 1xx,
  // a stream already started cannot take one, and a TLS client ends with close_notify, past which
  // TLS 1.2 peers do not read. Those still count as leaving.
  if (response_state_ != ResponseState::kNone || !chunked_ || stream_.is_tls()) {
    Close();
    co_return;
  }
  keep_alive_ = false;  // nothing more can come: the connection closes after this response
  // Watched before the probe goes out, so that the reset it provokes is not missed: a reset (or
  // our own shutdown after the response, with the client's end already read) closes the
  // connection, and runs on_close if the response is still pending.
  stream_.socket().async_wait(Socket::wait_error,
                              [self = shared_from_this()](const error_code& ec) {
                                if (!ec) self->Close();
                              });
  Enqueue(std::string(kHalfCloseProbe));
  co_await WaitUntilResponseDone();
  // The response ended (a lingering close, finished here) or the connection closed.
  co_await StopIfClosing();
}

asio::awaitable<void> Connection::WaitUntilResponseDone() {
  while (response_pending_ && !Closing()) {
    response_done_.expires_at(asio::steady_timer::time_point::max());
    error_code ec;
    co_await response_done_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

asio::awaitable<void> Connection::DrainUntilClosed() {
  const std::shared_ptr<Connection> self = shared_from_this();
  char scratch[4096];
  buffer_.consume(buffer_.size());
  // A read that has already ended (the client's EOF) would not end again: Asio marks the socket
  // drained and the next read waits for readiness that never comes, until the linger deadline.
  // The client has closed its side; nothing is left to wait for.
  while (!closed_ && !read_ended_) {
    error_code ec;
    // Raw TCP reads also under TLS: after our close_notify nothing the client sends is read as
    // TLS any more (HttpStream::AsyncShutdownSend), only discarded.
    co_await stream_.socket().async_read_some(asio::buffer(scratch),
                                              asio::redirect_error(asio::use_awaitable, ec));
    if (ec) break;
  }
  Close();
}

void Connection::Dispatch(Parser& parser, size_t header_fields) {
  bhttp::request<bhttp::string_body>& message = parser.get();
  ++current_id_;
  response_pending_ = true;
  response_state_ = ResponseState::kNone;
  // HTTP/1.0 keep-alive would need "connection: keep-alive" echoed; closing is simpler.
  keep_alive_ = message.version() >= 11 && message.keep_alive() && !context_->draining.load();
  head_request_ = message.method() == bhttp::verb::head;
  chunked_ = message.version() >= 11;
  body_allowed_ = !head_request_;
  on_close_ = nullptr;
  shared_ = std::make_shared<ResponseShared>();

  HttpRequest request;
  request.method = ToString(message.method_string());
  const std::string target = ToString(message.target());
  const size_t question = target.find('?');
  request.path = target.substr(0, question);
  if (question != std::string::npos) request.query = target.substr(question + 1);
  size_t index = 0;
  for (const auto& field : message) {
    // Trailers came after the body: a proxy in front may not have seen them, so they must not
    // pass for headers (an authorization trailer, say).
    if (index++ == header_fields) break;
    std::string name = absl::AsciiStrToLower(ToString(field.name_string()));
    std::string& value = request.headers[name];
    if (!value.empty()) value += ", ";
    value += ToString(field.value());
  }
  request.body = std::move(message.body());
  request.remote_address = remote_address_;

  auto writer =
      std::make_shared<ConnectionWriter>(weak_from_this(), current_id_, context_->gate, shared_);
  try {
    context_->handler(std::move(request), std::move(writer));
  } catch (const std::exception& e) {
    // The writer, if released, answers 500.
    LLMSERVE_LOG(ERROR) << "HTTP handler threw: " << e.what();
  } catch (...) {
    LLMSERVE_LOG(ERROR) << "HTTP handler threw a non-standard exception";
  }
}

// ---------------------------------------------------------------------------------------------
// Responses

bool Connection::AcceptsCall(uint64_t id) const { return !closed_ && id == current_id_; }

void Connection::SendResponse(uint64_t id, int status, HttpHeaders headers, std::string body) {
  if (!AcceptsCall(id)) return;
  if (response_state_ != ResponseState::kNone) {
    LLMSERVE_LOG(WARNING) << "HTTP response already started; Send ignored";
    return;
  }
  if (status < 200 || status > 599) {
    LLMSERVE_LOG(ERROR) << "HTTP handler answered invalid status " << status;
    SendServerError(500, absl::InternalError("the server produced an invalid response"));
    return;
  }
  MarkResponseEnded();
  const bool no_body = StatusHasNoBody(status);
  const bool send_body = !no_body && !head_request_ && !body.empty();
  // Head and body go out in one write.
  Enqueue(EncodeResponseHead(status, headers,
                             {.framing = no_body ? BodyFraming::kNone : BodyFraming::kContentLength,
                              .content_length = body.size(),
                              .keep_alive = keep_alive_}),
          /*start_write=*/!send_body);
  if (send_body) Enqueue(std::move(body));
  EndResponseWhenFlushed();
}

void Connection::StartStream(uint64_t id, int status, HttpHeaders headers) {
  if (!AcceptsCall(id)) return;
  if (response_state_ != ResponseState::kNone) {
    LLMSERVE_LOG(WARNING) << "HTTP response already started; StartStream ignored";
    return;
  }
  if (status < 200 || status > 599) {
    LLMSERVE_LOG(ERROR) << "HTTP handler answered invalid status " << status;
    SendServerError(500, absl::InternalError("the server produced an invalid response"));
    return;
  }
  response_state_ = ResponseState::kStreaming;
  BodyFraming framing = chunked_ ? BodyFraming::kChunked : BodyFraming::kUntilClose;
  if (StatusHasNoBody(status)) {
    framing = BodyFraming::kNone;
    body_allowed_ = false;
  }
  if (framing == BodyFraming::kUntilClose) keep_alive_ = false;
  Enqueue(EncodeResponseHead(status, headers, {.framing = framing, .keep_alive = keep_alive_}));
}

void Connection::WriteChunk(uint64_t id, std::string chunk) {
  if (!AcceptsCall(id)) return;
  if (response_state_ != ResponseState::kStreaming) {
    if (response_state_ == ResponseState::kNone) {
      LLMSERVE_LOG(WARNING) << "HTTP Write before StartStream ignored";
    }
    return;
  }
  if (!body_allowed_ || chunk.empty()) return;
  Enqueue(chunked_ ? EncodeChunk(chunk) : std::move(chunk));
}

void Connection::FinishStream(uint64_t id) {
  if (!AcceptsCall(id)) return;
  if (response_state_ != ResponseState::kStreaming) {
    if (response_state_ == ResponseState::kNone) {
      LLMSERVE_LOG(WARNING) << "HTTP Finish before StartStream ignored";
    }
    return;
  }
  MarkResponseEnded();
  if (body_allowed_ && chunked_) Enqueue(std::string(kLastChunk));
  EndResponseWhenFlushed();
}

void Connection::SetOnClose(uint64_t id, std::function<void()> on_close) {
  if (id != current_id_ || response_state_ == ResponseState::kEnded) return;
  if (closed_) {
    on_close();  // the client already left
    return;
  }
  on_close_ = std::move(on_close);
}

void Connection::OnWriterReleased(uint64_t id) {
  if (closed_ || id != current_id_) return;
  switch (response_state_) {
    case ResponseState::kNone:
      LLMSERVE_LOG(WARNING) << "HTTP handler released its writer without answering";
      SendServerError(500, absl::InternalError("the server did not produce a response"));
      break;
    case ResponseState::kStreaming:
      // No final chunk: closing makes the client see the stream as truncated, not complete.
      LLMSERVE_LOG(WARNING) << "HTTP handler released its writer in the middle of a stream";
      MarkResponseEnded();
      keep_alive_ = false;
      EndResponseWhenFlushed();
      break;
    case ResponseState::kEnded:
      break;
  }
}

void Connection::SendServerError(int status, const absl::Status& error,
                                 const HttpHeaders& headers) {
  response_pending_ = true;
  MarkResponseEnded();
  keep_alive_ = false;
  Enqueue(EncodeErrorResponse(status, error, head_request_, headers));
  EndResponseWhenFlushed();
}

void Connection::MarkResponseEnded() {
  response_state_ = ResponseState::kEnded;
  on_close_ = nullptr;  // releases what the callback holds; it can no longer run
}

// ---------------------------------------------------------------------------------------------
// Writing

void Connection::Enqueue(std::string data, bool start_write) {
  if (closed_ || lingering_ || data.empty()) return;
  buffered_ += data.size();
  queue_.push_back(std::move(data));
  if (shared_ != nullptr) shared_->buffered = buffered_;
  const size_t limit = context_->options.max_buffered_bytes;
  if (limit > 0 && buffered_ > limit) {
    LLMSERVE_LOG(WARNING) << "HTTP client " << remote_address_ << " is more than " << limit
                          << " bytes behind; closing the connection";
    Close();
    return;
  }
  if (start_write) StartWrite();
}

void Connection::StartWrite() {
  if (writing_ || queue_.empty() || closed_) return;
  writing_ = true;
  in_flight_.swap(queue_);
  std::vector<asio::const_buffer> buffers;
  buffers.reserve(in_flight_.size());
  for (const std::string& piece : in_flight_) buffers.push_back(asio::buffer(piece));
  ArmTimer(write_deadline_, context_->options.idle_timeout);
  asio::async_write(stream_, buffers,
                    [self = shared_from_this()](const error_code& ec, size_t bytes) {
                      self->OnWritten(ec, bytes);
                    });
}

void Connection::OnWritten(const error_code& ec, size_t bytes) {
  writing_ = false;
  write_deadline_.cancel();
  in_flight_.clear();
  if (closed_) return;
  if (ec) {
    // The client left (or stopped reading until the write deadline closed the socket).
    Close();
    return;
  }
  buffered_ -= std::min(bytes, buffered_);
  if (shared_ != nullptr) shared_->buffered = buffered_;
  if (!queue_.empty()) {
    StartWrite();
  } else if (end_after_write_) {
    end_after_write_ = false;
    OnResponseFlushed();
  }
}

void Connection::EndResponseWhenFlushed() {
  if (closed_) return;
  if (writing_ || !queue_.empty()) {
    end_after_write_ = true;
  } else {
    OnResponseFlushed();
  }
}

void Connection::OnResponseFlushed() {
  response_pending_ = false;
  if (!keep_alive_ || context_->draining.load()) {
    CloseGracefully();
    return;
  }
  response_done_.cancel();  // wakes a read loop waiting to serve a pipelined request
  ArmReadDeadline();
}

// ---------------------------------------------------------------------------------------------
// Closing

void Connection::Drain() {
  if (closed_) return;
  keep_alive_ = false;
  if (!response_pending_ && read_stage_ == ReadStage::kIdle && buffer_.size() == 0) Close();
}

void Connection::CloseGracefully() {
  if (closed_ || lingering_) return;
  lingering_ = true;
  ArmTimer(read_deadline_, kLingerTimeout);
  // Plain TCP calls back before returning; TLS once close_notify is written, or within the
  // linger deadline, which closes the socket.
  stream_.AsyncShutdownSend([self = shared_from_this()](const error_code& ec) {
    if (ec) self->Close();
  });
  if (closed_) return;
  if (read_loop_running_) {
    response_done_.cancel();  // a waiting read loop wakes and drains; a reading one sees EOF
  } else {
    asio::co_spawn(executor_, DrainUntilClosed(), asio::detached);
  }
}

void Connection::Close() {
  if (closed_) return;
  closed_ = true;
  if (shared_ != nullptr && response_state_ != ResponseState::kEnded) shared_->closed = true;
  FireOnClose();
  error_code ec;
  // Under TLS too: a connection closed this way failed or timed out, so no close_notify.
  stream_.socket().shutdown(Socket::shutdown_both, ec);
  stream_.socket().close(ec);
  read_deadline_.cancel();
  write_deadline_.cancel();
  response_done_.cancel();
  queue_.clear();
  buffered_ = 0;
  if (shared_ != nullptr) shared_->buffered = 0;
  absl::MutexLock lock(&context_->mu);
  context_->live.erase(this);
}

void Connection::FireOnClose() {
  if (response_state_ == ResponseState::kEnded || on_close_ == nullptr) return;
  std::function<void()> on_close = std::move(on_close_);
  on_close_ = nullptr;
  try {
    on_close();
  } catch (const std::exception& e) {
    LLMSERVE_LOG(ERROR) << "HTTP on_close callback threw: " << e.what();
  } catch (...) {
    LLMSERVE_LOG(ERROR) << "HTTP on_close callback threw a non-standard exception";
  }
}

// ---------------------------------------------------------------------------------------------
// Deadlines

void Connection::ArmReadDeadline() {
  if (response_pending_ || closed_ || lingering_) return;
  const HttpServerOptions& options = context_->options;
  switch (read_stage_) {
    case ReadStage::kIdle:
      ArmTimer(read_deadline_, options.idle_timeout);
      break;
    case ReadStage::kHeader:
      ArmTimer(read_deadline_, options.header_timeout);
      break;
    case ReadStage::kBody:
      ArmTimer(read_deadline_, options.idle_timeout);
      break;
    case ReadStage::kOther:
      break;
  }
}

void Connection::DisarmReadDeadline() {
  if (!lingering_) read_deadline_.cancel();  // the linger deadline must stay
}

void Connection::ArmTimer(asio::steady_timer& timer, absl::Duration timeout) {
  // Longer than a year means never.
  if (timeout > absl::Hours(24 * 365)) {
    timer.cancel();
    return;
  }
  timer.expires_after(absl::ToChronoNanoseconds(timeout));
  timer.async_wait([self = shared_from_this(), &timer](const error_code& ec) {
    // A timer re-armed after it fired but before this ran has a later expiry: not expired.
    if (ec || self->closed_ || timer.expiry() > asio::steady_timer::clock_type::now()) return;
    self->Close();
  });
}

}  // namespace llmserve::gateway::http
