// accept() failures and their log: out of file descriptors (EMFILE), the server retries every
// 50 ms, and must not log each retry. LogThrottle (common/base/log_throttle.h, tested in
// tests/unit/base) decides what is logged; the test lowers RLIMIT_NOFILE in this process (its own
// binary, so that no other test runs meanwhile) and counts the lines the server writes to stderr.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gateway/http/http_server.h"
#include "gtest/gtest.h"

namespace llmserve::gateway::http {
namespace {

// Redirects this process's stderr to a temporary file while alive; Text() reads what was written.
class StderrCapture {
 public:
  StderrCapture() : file_(std::tmpfile()) {
    std::fflush(stderr);
    saved_ = ::dup(STDERR_FILENO);
    ::dup2(::fileno(file_), STDERR_FILENO);
  }
  ~StderrCapture() {
    Restore();
    std::fclose(file_);
  }
  void Restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    ::dup2(saved_, STDERR_FILENO);
    ::close(saved_);
    saved_ = -1;
  }
  std::string Text() {
    std::string text;
    char buffer[4096];
    std::fseek(file_, 0, SEEK_SET);
    size_t n;
    while ((n = std::fread(buffer, 1, sizeof(buffer), file_)) > 0) text.append(buffer, n);
    return text;
  }

 private:
  std::FILE* file_;
  int saved_ = -1;
};

int CountLinesContaining(const std::string& text, const std::string& needle) {
  int count = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    if (absl::StrContains(text.substr(start, end - start), needle)) ++count;
    start = end + 1;
  }
  return count;
}

// The lowest file descriptor number not in use: a soft RLIMIT_NOFILE of it leaves none free.
int LowestFreeDescriptor() {
  int fd = 0;
  while (::fcntl(fd, F_GETFD) != -1) ++fd;
  return fd;
}

TEST(HttpAcceptErrorTest, OutOfFileDescriptorsIsNotLoggedAtEveryRetry) {
  StderrCapture capture;
  absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start(
      {.host = "127.0.0.1", .port = 0, .io_threads = 1},
      [](HttpRequest, std::shared_ptr<ResponseWriter> writer) { writer->Send(204, {}, ""); });
  ASSERT_TRUE(server.ok()) << server.status();
  // Client sockets made before the limit drops; connecting needs no new descriptor, and the
  // kernel completes the connections for the listen backlog, so the server's accept() fails.
  const int clients[2] = {::socket(AF_INET, SOCK_STREAM, 0), ::socket(AF_INET, SOCK_STREAM, 0)};
  ASSERT_GE(clients[0], 0);
  ASSERT_GE(clients[1], 0);
  rlimit saved_limit;
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved_limit), 0);
  rlimit low = saved_limit;
  low.rlim_cur = static_cast<rlim_t>(LowestFreeDescriptor());
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>((*server)->port()));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (const int client : clients) {
    EXPECT_EQ(::connect(client, reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0);
  }
  // About 20 retries at 50 ms.
  absl::SleepFor(absl::Seconds(1));
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved_limit), 0);
  // Descriptors again: the server accepts both.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while ((*server)->active_connections() < 2 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ((*server)->active_connections(), 2);
  for (const int client : clients) ::close(client);
  (*server)->Shutdown(absl::Seconds(1));
  capture.Restore();
  const std::string log = capture.Text();
  std::fputs(log.c_str(), stderr);
  EXPECT_EQ(CountLinesContaining(log, "HTTP accept failed"), 1) << log;
  EXPECT_EQ(CountLinesContaining(log, "Too many open files"), 1) << log;
}

}  // namespace
}  // namespace llmserve::gateway::http
