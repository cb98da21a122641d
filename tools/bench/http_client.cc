#include "tools/bench/http_client.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

namespace llmserve::tools {
namespace {

constexpr size_t kMaxHeadBytes = 64 << 10;
constexpr size_t kMaxChunkLineBytes = 4096;

// Milliseconds until `deadline` for poll(), at least 0.
int PollMillis(absl::Time deadline) {
  const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
  return static_cast<int>(std::clamp<int64_t>(ms, 0, 1 << 30));
}

// Waits for `events` on `fd` until `deadline`: OK, DEADLINE_EXCEEDED or UNAVAILABLE.
absl::Status WaitFor(int fd, short events, absl::Time deadline) {
  for (;;) {
    pollfd entry{.fd = fd, .events = events, .revents = 0};
    const int ready = poll(&entry, 1, PollMillis(deadline));
    if (ready > 0) return absl::OkStatus();
    if (ready == 0) return absl::DeadlineExceededError("no response from the server in time");
    if (errno != EINTR) return absl::UnavailableError(absl::StrCat("poll: ", strerror(errno)));
  }
}

}  // namespace

absl::StatusOr<HttpTarget> ParseHttpTarget(absl::string_view target) {
  absl::string_view rest = target;
  if (absl::StartsWith(rest, "https://")) {
    return absl::InvalidArgumentError(
        absl::StrCat("target '", target, "': https is not supported (use plain http)"));
  }
  absl::ConsumePrefix(&rest, "http://");
  absl::ConsumeSuffix(&rest, "/");
  if (rest.find('/') != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "target '", target, "' has a path: give host:port (the endpoint is set by --endpoint)"));
  }
  const size_t colon = rest.rfind(':');
  uint32_t port = 0;
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(rest.substr(colon + 1), &port) || port == 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("target '", target, "' is not host:port with a port in [1, 65535]"));
  }
  absl::string_view host = rest.substr(0, colon);
  // [::1]:8080
  if (absl::ConsumePrefix(&host, "[") && !absl::ConsumeSuffix(&host, "]")) {
    return absl::InvalidArgumentError(absl::StrCat("target '", target, "': unclosed '['"));
  }
  return HttpTarget{.host = std::string(host), .port = static_cast<uint16_t>(port)};
}

std::string HttpResponseHead::Header(absl::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (key == name) return value;
  }
  return "";
}

absl::Status HttpResponseParser::ParseHead(absl::string_view head) {
  std::vector<absl::string_view> lines = absl::StrSplit(head, "\r\n");
  const absl::string_view status_line = lines[0];
  // "HTTP/1.1 200 OK"
  std::vector<absl::string_view> parts = absl::StrSplit(status_line, absl::MaxSplits(' ', 2));
  int status = 0;
  if (parts.size() < 2 || !absl::StartsWith(parts[0], "HTTP/1.") ||
      !absl::SimpleAtoi(parts[1], &status) || status < 100 || status > 999) {
    return absl::InvalidArgumentError(
        absl::StrCat("the server's status line is not HTTP/1.x: '",
                     status_line.substr(0, std::min<size_t>(status_line.size(), 80)), "'"));
  }
  head_ = HttpResponseHead{.status = status};
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t colon = lines[i].find(':');
    if (colon == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("malformed response header line ", i));
    }
    head_.headers.emplace_back(absl::AsciiStrToLower(lines[i].substr(0, colon)),
                               std::string(absl::StripAsciiWhitespace(lines[i].substr(colon + 1))));
  }
  const std::string connection = absl::AsciiStrToLower(head_.Header("connection"));
  const bool http11 = parts[0] == "HTTP/1.1";
  reusable_ = http11 ? !absl::StrContains(connection, "close")
                     : absl::StrContains(connection, "keep-alive");
  if (status < 200) {
    stage_ = Stage::kHead;  // 100 Continue and friends: the real response follows
    return absl::OkStatus();
  }
  const std::string encoding = absl::AsciiStrToLower(head_.Header("transfer-encoding"));
  const std::string length = head_.Header("content-length");
  if (status == 204 || status == 304) {
    stage_ = Stage::kDone;
  } else if (!encoding.empty()) {
    if (!absl::EndsWith(encoding, "chunked")) {
      return absl::InvalidArgumentError(
          absl::StrCat("unsupported response Transfer-Encoding '", encoding, "'"));
    }
    stage_ = Stage::kChunkSize;
  } else if (!length.empty()) {
    if (!absl::SimpleAtoi(length, &remaining_)) {
      return absl::InvalidArgumentError(absl::StrCat("bad response Content-Length '", length, "'"));
    }
    stage_ = remaining_ == 0 ? Stage::kDone : Stage::kLength;
  } else {
    stage_ = Stage::kToEof;
    reusable_ = false;
  }
  if (on_head_) on_head_(head_);
  return absl::OkStatus();
}

absl::Status HttpResponseParser::Step(bool* progressed) {
  *progressed = false;
  switch (stage_) {
    case Stage::kHead: {
      const size_t end = buffer_.find("\r\n\r\n");
      if (end == std::string::npos) {
        if (buffer_.size() > kMaxHeadBytes) {
          return absl::InvalidArgumentError("the response head is over 64 KiB");
        }
        return absl::OkStatus();
      }
      const std::string head = buffer_.substr(0, end);
      buffer_.erase(0, end + 4);
      *progressed = true;
      return ParseHead(head);
    }
    case Stage::kLength:
    case Stage::kChunkData: {
      if (buffer_.empty()) return absl::OkStatus();
      const size_t take = static_cast<size_t>(std::min<uint64_t>(remaining_, buffer_.size()));
      on_body_(absl::string_view(buffer_).substr(0, take));
      buffer_.erase(0, take);
      remaining_ -= take;
      if (remaining_ == 0) stage_ = stage_ == Stage::kLength ? Stage::kDone : Stage::kChunkDataEnd;
      *progressed = true;
      return absl::OkStatus();
    }
    case Stage::kChunkDataEnd: {
      if (buffer_.size() < 2) return absl::OkStatus();
      if (buffer_.compare(0, 2, "\r\n") != 0) {
        return absl::InvalidArgumentError("a response chunk does not end with CRLF");
      }
      buffer_.erase(0, 2);
      stage_ = Stage::kChunkSize;
      *progressed = true;
      return absl::OkStatus();
    }
    case Stage::kChunkSize:
    case Stage::kTrailer: {
      const size_t end = buffer_.find("\r\n");
      if (end == std::string::npos) {
        if (buffer_.size() > kMaxChunkLineBytes) {
          return absl::InvalidArgumentError("a response chunk line is over 4 KiB");
        }
        return absl::OkStatus();
      }
      absl::string_view line = absl::string_view(buffer_).substr(0, end);
      *progressed = true;
      if (stage_ == Stage::kTrailer) {
        if (line.empty()) stage_ = Stage::kDone;
        buffer_.erase(0, end + 2);
        return absl::OkStatus();
      }
      line = absl::StripAsciiWhitespace(line.substr(0, line.find(';')));
      uint64_t size = 0;
      if (line.empty() || line.size() > 15 || !absl::SimpleHexAtoi(line, &size)) {
        return absl::InvalidArgumentError(
            absl::StrCat("bad response chunk size '", line.substr(0, 20), "'"));
      }
      buffer_.erase(0, end + 2);
      remaining_ = size;
      stage_ = size == 0 ? Stage::kTrailer : Stage::kChunkData;
      return absl::OkStatus();
    }
    case Stage::kToEof:
      if (buffer_.empty()) return absl::OkStatus();
      on_body_(buffer_);
      buffer_.clear();
      *progressed = true;
      return absl::OkStatus();
    case Stage::kDone:
      if (!buffer_.empty()) {
        return absl::InvalidArgumentError("the server sent bytes after the end of the response");
      }
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

absl::Status HttpResponseParser::Feed(absl::string_view data) {
  buffer_.append(data.data(), data.size());
  for (bool progressed = true; progressed;) {
    if (absl::Status status = Step(&progressed); !status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status HttpResponseParser::FeedEof() {
  reusable_ = false;
  if (stage_ == Stage::kToEof) stage_ = Stage::kDone;
  if (stage_ == Stage::kDone) return absl::OkStatus();
  return absl::UnavailableError(head_done() ? "the server closed the connection mid-response"
                                            : "the server closed the connection before answering");
}

absl::StatusOr<std::unique_ptr<HttpConnection>> HttpConnection::Connect(const HttpTarget& target,
                                                                        absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = absl::StrCat(target.port);
  if (const int error = getaddrinfo(target.host.c_str(), port.c_str(), &hints, &found);
      error != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve '", target.host, "': ", gai_strerror(error)));
  }
  std::string last_error = "no address";
  for (addrinfo* address = found; address != nullptr; address = address->ai_next) {
    const int fd = socket(address->ai_family, address->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                          address->ai_protocol);
    if (fd < 0) {
      last_error = strerror(errno);
      continue;
    }
    int error = connect(fd, address->ai_addr, address->ai_addrlen) == 0 ? 0 : errno;
    if (error == EINPROGRESS) {
      absl::Status ready = WaitFor(fd, POLLOUT, deadline);
      socklen_t length = sizeof(error);
      if (!ready.ok()) {
        error = ETIMEDOUT;
      } else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0) {
        error = errno;
      }
    }
    if (error == 0) {
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      freeaddrinfo(found);
      const bool v6 = target.host.find(':') != std::string::npos;
      return std::unique_ptr<HttpConnection>(
          new HttpConnection(fd, v6 ? absl::StrCat("[", target.host, "]:", target.port)
                                    : absl::StrCat(target.host, ":", target.port)));
    }
    last_error = strerror(error);
    close(fd);
  }
  freeaddrinfo(found);
  return absl::UnavailableError(
      absl::StrCat("cannot connect to ", target.host, ":", target.port, ": ", last_error));
}

HttpConnection::~HttpConnection() { close(fd_); }

absl::Status HttpConnection::Exchange(
    absl::string_view method, absl::string_view path, absl::string_view body,
    const std::vector<std::pair<std::string, std::string>>& headers, absl::Time deadline,
    const HttpResponseParser::HeadFn& on_head, const HttpResponseParser::BodyFn& on_body) {
  reusable_ = false;  // until the response has ended cleanly
  ++exchanges_;
  std::string request = absl::StrCat(method, " ", path, " HTTP/1.1\r\nHost: ", host_header_,
                                     "\r\nUser-Agent: llmserve-bench\r\n");
  if (!body.empty()) {
    absl::StrAppend(&request, "Content-Type: application/json\r\nContent-Length: ", body.size(),
                    "\r\n");
  }
  for (const auto& [name, value] : headers) absl::StrAppend(&request, name, ": ", value, "\r\n");
  absl::StrAppend(&request, "\r\n", body);

  for (size_t sent = 0; sent < request.size();) {
    const ssize_t n = send(fd_, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (absl::Status ready = WaitFor(fd_, POLLOUT, deadline); !ready.ok()) return ready;
    } else {
      return absl::UnavailableError(absl::StrCat("sending the request: ", strerror(errno)));
    }
  }

  HttpResponseParser parser(on_head, on_body);
  char buffer[16384];
  while (!parser.complete()) {
    const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
    absl::Status status;
    if (n > 0) {
      status = parser.Feed(absl::string_view(buffer, static_cast<size_t>(n)));
    } else if (n == 0) {
      status = parser.FeedEof();
    } else if (errno == EAGAIN || errno == EINTR) {
      status = WaitFor(fd_, POLLIN, deadline);
    } else {
      status = absl::UnavailableError(absl::StrCat("reading the response: ", strerror(errno)));
    }
    if (!status.ok()) return status;
  }
  reusable_ = parser.reusable();
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<HttpConnection>> HttpConnectionPool::Take(
    absl::Duration connect_timeout, bool fresh) {
  if (!fresh) {
    absl::MutexLock lock(&mutex_);
    if (!idle_.empty()) {
      std::unique_ptr<HttpConnection> connection = std::move(idle_.back());
      idle_.pop_back();
      return connection;
    }
  }
  return HttpConnection::Connect(target_, connect_timeout);
}

void HttpConnectionPool::Return(std::unique_ptr<HttpConnection> connection) {
  if (connection == nullptr || !connection->reusable()) return;
  absl::MutexLock lock(&mutex_);
  idle_.push_back(std::move(connection));
}

}  // namespace llmserve::tools
