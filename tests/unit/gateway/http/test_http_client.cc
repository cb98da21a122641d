#include "tests/unit/gateway/http/test_http_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace llmserve::gateway::http::testing {
namespace {

std::string OpenSslErrors() {
  std::string text;
  while (const unsigned long code = ERR_get_error()) {
    char buffer[256];
    ERR_error_string_n(code, buffer, sizeof(buffer));
    if (!text.empty()) text += "; ";
    text += buffer;
  }
  return text.empty() ? "unknown TLS error" : text;
}

}  // namespace

std::unique_ptr<TestHttpClient> TestHttpClient::ConnectTls(int port, const std::string& ca_file,
                                                           const std::string& host,
                                                           std::string* error) {
  int connect_error = 0;
  std::unique_ptr<TestHttpClient> client = Connect(port, &connect_error);
  if (client == nullptr) {
    if (error != nullptr) *error = std::string("connect: ") + std::strerror(connect_error);
    return nullptr;
  }
  ERR_clear_error();
  auto fail = [error](const std::string& what) -> std::unique_ptr<TestHttpClient> {
    if (error != nullptr) *error = what + ": " + OpenSslErrors();
    ERR_clear_error();
    return nullptr;
  };
  SSL_CTX* context = SSL_CTX_new(TLS_client_method());
  if (context == nullptr) return fail("SSL_CTX_new");
  SSL_CTX_set_verify(context, SSL_VERIFY_PEER, nullptr);
  if (SSL_CTX_load_verify_locations(context, ca_file.c_str(), nullptr) != 1) {
    SSL_CTX_free(context);
    return fail("loading " + ca_file);
  }
  client->ssl_ = SSL_new(context);
  SSL_CTX_free(context);  // the SSL holds its own reference
  if (client->ssl_ == nullptr) return fail("SSL_new");
  X509_VERIFY_PARAM* param = SSL_get0_param(client->ssl_);
  // An IP address must match an IP entry of subjectAltName, a name a DNS entry.
  if (X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str()) != 1) {
    ERR_clear_error();
    if (X509_VERIFY_PARAM_set1_host(param, host.c_str(), 0) != 1) return fail("host " + host);
    SSL_set_tlsext_host_name(client->ssl_, host.c_str());
  }
  SSL_set_fd(client->ssl_, client->fd_);
  if (SSL_connect(client->ssl_) != 1) {
    return fail(std::string("TLS handshake (") +
                X509_verify_cert_error_string(SSL_get_verify_result(client->ssl_)) + ")");
  }
  return client;
}

std::unique_ptr<TestHttpClient> TestHttpClient::Connect(int port, int* error) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) {
    if (error != nullptr) *error = errno;
    return nullptr;
  }
  timeval timeout{.tv_sec = 10, .tv_usec = 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    if (error != nullptr) *error = errno;
    ::close(fd);
    return nullptr;
  }
  return std::unique_ptr<TestHttpClient>(new TestHttpClient(fd));
}

TestHttpClient::~TestHttpClient() { Close(); }

void TestHttpClient::Close() {
  if (ssl_ != nullptr) SSL_free(ssl_);
  ssl_ = nullptr;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

bool TestHttpClient::Send(absl::string_view data) {
  if (ssl_ != nullptr) {
    // Without SSL_MODE_ENABLE_PARTIAL_WRITE a successful SSL_write wrote everything.
    ERR_clear_error();
    return data.empty() || SSL_write(ssl_, data.data(), static_cast<int>(data.size())) > 0;
  }
  while (!data.empty()) {
    const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return false;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

long TestHttpClient::Receive(char* data, size_t size) {
  if (ssl_ == nullptr) {
    for (;;) {
      const ssize_t n = ::recv(fd_, data, size, 0);
      if (n < 0 && errno == EINTR) continue;
      return n;
    }
  }
  ERR_clear_error();
  const int n = SSL_read(ssl_, data, static_cast<int>(size));
  if (n > 0) return n;
  // The server's close_notify, or (OpenSSL 3) the TCP stream ending without one.
  const int reason = SSL_get_error(ssl_, n);
  if (reason == SSL_ERROR_ZERO_RETURN) return 0;
  if (reason == SSL_ERROR_SSL &&
      ERR_GET_REASON(ERR_peek_error()) == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
    return 0;
  }
  return -1;
}

bool TestHttpClient::Fill() {
  char scratch[16384];
  const long n = Receive(scratch, sizeof(scratch));
  if (n <= 0) return false;  // EOF, error or timeout
  buffer_.append(scratch, static_cast<size_t>(n));
  return true;
}

bool TestHttpClient::ReadLine(std::string* line) {
  for (;;) {
    const size_t end = buffer_.find("\r\n");
    if (end != std::string::npos) {
      *line = buffer_.substr(0, end);
      buffer_.erase(0, end + 2);
      return true;
    }
    if (!Fill()) return false;
  }
}

bool TestHttpClient::ReadExact(size_t n, std::string* out) {
  while (buffer_.size() < n) {
    if (!Fill()) return false;
  }
  out->append(buffer_, 0, n);
  buffer_.erase(0, n);
  return true;
}

std::optional<TestResponse> TestHttpClient::ReadHead(bool keep_informational) {
  for (;;) {
    TestResponse response;
    std::string line;
    if (!ReadLine(&line)) return std::nullopt;
    std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits(' ', 2));
    if (parts.size() < 2 || !absl::StartsWith(parts[0], "HTTP/1.") ||
        !absl::SimpleAtoi(parts[1], &response.status)) {
      return std::nullopt;
    }
    for (;;) {
      if (!ReadLine(&line)) return std::nullopt;
      if (line.empty()) break;
      const size_t colon = line.find(':');
      if (colon == std::string::npos) return std::nullopt;
      response.headers[absl::AsciiStrToLower(line.substr(0, colon))] =
          std::string(absl::StripAsciiWhitespace(absl::string_view(line).substr(colon + 1)));
    }
    if (response.status >= 200 || keep_informational) return response;
  }
}

std::optional<std::string> TestHttpClient::ReadChunk() {
  std::string line;
  if (!ReadLine(&line)) return std::nullopt;
  size_t size = 0;
  if (!absl::SimpleHexAtoi(line, &size)) return std::nullopt;
  std::string data;
  if (!ReadExact(size, &data)) return std::nullopt;
  std::string crlf;
  if (size == 0) {
    // No trailers are sent: the last chunk ends with an empty line.
    if (!ReadLine(&crlf) || !crlf.empty()) return std::nullopt;
    return std::string();
  }
  if (!ReadExact(2, &crlf) || crlf != "\r\n") return std::nullopt;
  return data;
}

bool TestHttpClient::ReadBody(TestResponse& response, bool head_request) {
  if (head_request || response.status == 204 || response.status == 304) {
    response.complete = true;
    return true;
  }
  if (absl::EqualsIgnoreCase(response.Header("transfer-encoding"), "chunked")) {
    for (;;) {
      std::optional<std::string> chunk = ReadChunk();
      if (!chunk.has_value()) return false;
      if (chunk->empty()) break;
      response.body += *chunk;
      response.chunks.push_back(*std::move(chunk));
    }
    response.complete = true;
    return true;
  }
  const std::string length = response.Header("content-length");
  if (!length.empty()) {
    size_t n = 0;
    if (!absl::SimpleAtoi(length, &n) || !ReadExact(n, &response.body)) return false;
    response.complete = true;
    return true;
  }
  while (Fill()) {
  }
  response.body += buffer_;
  buffer_.clear();
  response.complete = true;  // delimited by close
  return true;
}

std::optional<TestResponse> TestHttpClient::ReadResponse(bool head_request) {
  std::optional<TestResponse> response = ReadHead();
  if (!response.has_value() || !ReadBody(*response, head_request)) return std::nullopt;
  return response;
}

bool TestHttpClient::WaitForClose(int timeout_ms) {
  pollfd entry{.fd = fd_, .events = POLLIN, .revents = 0};
  // Under TLS, decrypted bytes may be waiting with the socket drained.
  if (ssl_ != nullptr && SSL_pending(ssl_) > 0) return false;
  if (::poll(&entry, 1, timeout_ms) != 1) return false;
  char byte;
  const long n = Receive(&byte, 1);
  return n == 0 || (n < 0 && errno == ECONNRESET);
}

}  // namespace llmserve::gateway::http::testing
