#include "gateway/http/http_stream.h"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace llmserve::gateway::http {

namespace asio = boost::asio;
namespace ssl = boost::asio::ssl;
using boost::system::error_code;

namespace {

// OpenSSL reports a missing or unreadable file only as a generic library error.
absl::Status CheckReadable(const char* option, const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "r");
  if (file == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("HttpServer: cannot read ", option, " ", path, ": ", std::strerror(errno)));
  }
  std::fclose(file);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<ssl::context>> MakeServerTlsContext(const std::string& cert_file,
                                                                   const std::string& key_file) {
  // Asio reports OpenSSL failures by throwing unless given an error_code; the catch is for what
  // has no such overload (the context's constructor).
  if (absl::Status status = CheckReadable("tls_cert_file", cert_file); !status.ok()) return status;
  if (absl::Status status = CheckReadable("tls_key_file", key_file); !status.ok()) return status;
  try {
    auto context = std::make_unique<ssl::context>(ssl::context::tls_server);
    SSL_CTX* native = context->native_handle();
    // TLS 1.0 and 1.1 are deprecated (RFC 8996). Renegotiation would let a client make the
    // server's writes wait for reads, and costs a handshake each time; nothing here needs it.
    if (SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION) != 1) {
      return absl::InternalError("HttpServer: cannot require TLS 1.2 or later");
    }
    SSL_CTX_set_options(native, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
    error_code ec;
    // An encrypted key would otherwise make OpenSSL prompt for a passphrase on the terminal;
    // with no passphrase it fails to load instead.
    context->set_password_callback(
        [](std::size_t, ssl::context::password_purpose) { return std::string(); }, ec);
    if (!ec) context->use_certificate_chain_file(cert_file, ec);
    if (ec) {
      ERR_clear_error();
      return absl::InvalidArgumentError(
          absl::StrCat("HttpServer: cannot load tls_cert_file ", cert_file, ": ", ec.message()));
    }
    // OpenSSL also checks here that the key belongs to the certificate.
    context->use_private_key_file(key_file, ssl::context::pem, ec);
    if (ec) {
      ERR_clear_error();
      return absl::InvalidArgumentError(absl::StrCat("HttpServer: cannot use tls_key_file ",
                                                     key_file, " with tls_cert_file ", cert_file,
                                                     ": ", ec.message()));
    }
    if (SSL_CTX_check_private_key(native) != 1) {
      ERR_clear_error();
      return absl::InvalidArgumentError(absl::StrCat("HttpServer: tls_key_file ", key_file,
                                                     " does not match tls_cert_file ", cert_file));
    }
    return context;
  } catch (const std::exception& e) {
    ERR_clear_error();
    return absl::InternalError(absl::StrCat("HttpServer: cannot set up TLS: ", e.what()));
  }
}

HttpStream::HttpStream(Socket socket, ssl::context* tls) : socket_(std::move(socket)) {
  if (tls != nullptr) tls_.emplace(socket_, *tls);
}

asio::awaitable<error_code> HttpStream::Handshake() {
  error_code ec;
  if (tls_.has_value()) {
    co_await tls_->async_handshake(ssl::stream_base::server,
                                   asio::redirect_error(asio::use_awaitable, ec));
  }
  co_return ec;
}

void HttpStream::AsyncShutdownSend(std::function<void(const error_code&)> done) {
  error_code ec;
  if (!tls_.has_value()) {
    socket_.shutdown(Socket::shutdown_send, ec);
    done(ec);
    return;
  }
  // Asio's shutdown calls SSL_shutdown until the client's close_notify has arrived, reading for
  // it. With that marked as received already, SSL_shutdown is done once ours is written, and
  // OpenSSL treats the session as over for reads too (SSL_read reports the end of the stream).
  SSL* native = tls_->native_handle();
  SSL_set_shutdown(native, SSL_get_shutdown(native) | SSL_RECEIVED_SHUTDOWN);
  // `done` keeps the owner of this stream, and so `this`, alive.
  tls_->async_shutdown([this, done = std::move(done)](const error_code& shutdown_error) {
    error_code ec = shutdown_error;
    if (!ec) socket_.shutdown(Socket::shutdown_send, ec);
    done(ec);
  });
}

}  // namespace llmserve::gateway::http
