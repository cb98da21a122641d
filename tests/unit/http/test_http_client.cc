#include "tests/unit/http/test_http_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace llmserve::gateway::http::testing {

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
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

bool TestHttpClient::Send(absl::string_view data) {
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

bool TestHttpClient::Fill() {
  char scratch[16384];
  for (;;) {
    const ssize_t n = ::recv(fd_, scratch, sizeof(scratch), 0);
    if (n > 0) {
      buffer_.append(scratch, static_cast<size_t>(n));
      return true;
    }
    if (n < 0 && errno == EINTR) continue;
    return false;  // EOF, error or timeout
  }
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
  if (::poll(&entry, 1, timeout_ms) != 1) return false;
  char byte;
  const ssize_t n = ::recv(fd_, &byte, 1, 0);
  return n == 0 || (n < 0 && errno == ECONNRESET);
}

}  // namespace llmserve::gateway::http::testing
