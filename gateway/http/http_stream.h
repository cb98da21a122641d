// Internal to gateway/http: the byte stream under one connection, plain TCP or TLS over TCP, so
// that the connection's HTTP logic (connection.h) exists once for both. HttpStream models Asio's
// AsyncReadStream and AsyncWriteStream, so Beast's parser and asio::async_write use it directly;
// what differs between the two transports (the handshake, ending our sending side) is here too.
//
// Also MakeServerTlsContext, which loads and checks HttpServerOptions' certificate and key.
//
// Thread-safety: like an Asio socket: one strand at a time (the connection's). A server's
// ssl::context is shared by all its connections; OpenSSL allows that once it is set up.

#ifndef LLMSERVE_GATEWAY_HTTP_HTTP_STREAM_H_
#define LLMSERVE_GATEWAY_HTTP_HTTP_STREAM_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

// GCC 12 needs <utility> before Asio (docs/building.md, "Dependencies").
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>

#include "absl/status/statusor.h"

namespace llmserve::gateway::http {

// A TLS 1.2+ server context with the PEM certificate chain and private key loaded and checked
// against each other. INVALID_ARGUMENT naming the file (and the option) when one cannot be loaded
// or they do not match. Never throws.
absl::StatusOr<std::unique_ptr<boost::asio::ssl::context>> MakeServerTlsContext(
    const std::string& cert_file, const std::string& key_file);

class HttpStream {
 public:
  using Socket = boost::asio::ip::tcp::socket;
  using executor_type = Socket::executor_type;

  // TLS when `tls` is not null (it must outlive the stream), plain TCP otherwise. May throw when
  // OpenSSL cannot allocate the connection's state.
  HttpStream(Socket socket, boost::asio::ssl::context* tls);
  HttpStream(const HttpStream&) = delete;
  HttpStream& operator=(const HttpStream&) = delete;

  executor_type get_executor() { return socket_.get_executor(); }
  bool is_tls() const { return tls_.has_value(); }
  // The TCP socket, under TLS if any: for addresses, options, closing, and raw reads once TLS is
  // no longer spoken (see AsyncShutdownSend).
  Socket& socket() { return socket_; }

  // AsyncReadStream / AsyncWriteStream: application bytes (decrypted under TLS).
  template <typename MutableBufferSequence, typename Token>
  auto async_read_some(const MutableBufferSequence& buffers, Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
        [this](auto&& handler, const MutableBufferSequence& b) {
          if (tls_.has_value()) {
            tls_->async_read_some(b, std::forward<decltype(handler)>(handler));
          } else {
            socket_.async_read_some(b, std::forward<decltype(handler)>(handler));
          }
        },
        token, buffers);
  }
  template <typename ConstBufferSequence, typename Token>
  auto async_write_some(const ConstBufferSequence& buffers, Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
        [this](auto&& handler, const ConstBufferSequence& b) {
          if (tls_.has_value()) {
            tls_->async_write_some(b, std::forward<decltype(handler)>(handler));
          } else {
            socket_.async_write_some(b, std::forward<decltype(handler)>(handler));
          }
        },
        token, buffers);
  }

  // TLS: the server side of the handshake. Plain: nothing to do.
  boost::asio::awaitable<boost::system::error_code> Handshake();

  // Ends our sending side, so that the client sees the end of the stream: plain TCP shuts the
  // socket down for sending and calls `done` before returning; TLS sends close_notify, then
  // shuts down TCP, and calls `done` later. Unlike ssl::stream::async_shutdown it does not wait
  // for the client's close_notify (many clients never send one); the caller lingers with raw
  // reads on socket() instead. No application data may be read or written afterwards.
  void AsyncShutdownSend(std::function<void(const boost::system::error_code&)> done);

 private:
  Socket socket_;
  std::optional<boost::asio::ssl::stream<Socket&>> tls_;  // over socket_
};

}  // namespace llmserve::gateway::http

#endif  // LLMSERVE_GATEWAY_HTTP_HTTP_STREAM_H_
