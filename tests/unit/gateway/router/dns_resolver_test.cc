// The gateway's c-ares resolver against a DNS server of the test's own (UDP, loopback, a random
// port) that answers A/AAAA records, "no such name", "no records", a server failure, or nothing.

#include "gateway/router/dns_resolver.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/testing/loopback_socket.h"

namespace llmserve::gateway {
namespace {

constexpr absl::Duration kPatience = absl::Seconds(30);

// Answers by the question's name: workers.test. has two A records and one AAAA record,
// empty.test. has none (NOERROR, no answers), broken.test. fails (SERVFAIL), silent.test. gets no
// reply, and every other name does not exist (NXDOMAIN).
class FakeDnsServer {
 public:
  FakeDnsServer() {
    const ::llmserve::testing::LoopbackSocket bound = ::llmserve::testing::BindLoopback(SOCK_DGRAM);
    fd_ = bound.fd;
    port_ = bound.port;
    if (fd_ < 0) {
      ADD_FAILURE() << "cannot bind a loopback UDP port";
      return;
    }
    thread_ = std::thread([this] { Serve(); });
  }
  ~FakeDnsServer() {
    stopping_ = true;
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) close(fd_);
  }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  int queries() const { return queries_.load(); }

 private:
  void Serve() {
    while (!stopping_) {
      pollfd polled{.fd = fd_, .events = POLLIN, .revents = 0};
      if (poll(&polled, 1, 20) <= 0) continue;
      uint8_t query[512];
      sockaddr_in peer{};
      socklen_t peer_length = sizeof(peer);
      const ssize_t size =
          recvfrom(fd_, query, sizeof(query), 0, reinterpret_cast<sockaddr*>(&peer), &peer_length);
      if (size < 12) continue;
      ++queries_;
      // The question: labels up to the root, then type and class.
      std::string name;
      size_t at = 12;
      while (at < static_cast<size_t>(size) && query[at] != 0) {
        const size_t label = query[at];
        name.append(reinterpret_cast<const char*>(query + at + 1), label).push_back('.');
        at += label + 1;
      }
      const size_t question_end = at + 5;
      if (question_end > static_cast<size_t>(size)) continue;
      const int type = (query[at + 1] << 8) | query[at + 2];
      if (name == "silent.test.") continue;
      std::vector<uint8_t> answer(query, query + question_end);
      answer[2] = 0x81;  // a response, recursion desired
      answer[3] = 0x80;  // recursion available, NOERROR
      answer[6] = answer[7] = 0;
      answer[8] = answer[9] = answer[10] = answer[11] = 0;
      std::vector<std::vector<uint8_t>> records;
      if (name == "workers.test." && type == 1) {
        records = {{10, 0, 0, 1}, {10, 0, 0, 2}};
      } else if (name == "workers.test." && type == 28) {
        records = {{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5}};
      } else if (name == "broken.test.") {
        answer[3] = 0x82;  // SERVFAIL
      } else if (name != "workers.test." && name != "empty.test.") {
        answer[3] = 0x83;  // NXDOMAIN
      }
      answer[7] = static_cast<uint8_t>(records.size());
      for (const std::vector<uint8_t>& data : records) {
        const uint8_t header[] = {0xc0, 12,  // the question's name
                                  0,    static_cast<uint8_t>(type),
                                  0,    1,
                                  0,    0,
                                  0,    60,
                                  0,    static_cast<uint8_t>(data.size())};
        answer.insert(answer.end(), header, header + sizeof(header));
        answer.insert(answer.end(), data.begin(), data.end());
      }
      sendto(fd_, answer.data(), answer.size(), 0, reinterpret_cast<sockaddr*>(&peer), peer_length);
    }
  }

  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> queries_{0};
  std::thread thread_;
};

class DnsResolverTest : public ::testing::Test {
 protected:
  std::unique_ptr<DnsResolver> NewResolver() {
    absl::StatusOr<std::unique_ptr<DnsResolver>> resolver =
        DnsResolver::Create({.servers = {server_.address()},
                             .attempt_timeout = absl::Milliseconds(500),
                             .attempts = 2});
    EXPECT_TRUE(resolver.ok()) << resolver.status();
    return resolver.ok() ? *std::move(resolver) : nullptr;
  }

  // Resolves `host` and waits for the answer.
  static absl::StatusOr<std::vector<std::string>> ResolveNow(DnsResolver& resolver,
                                                             const std::string& host) {
    absl::Notification done;
    absl::StatusOr<std::vector<std::string>> answer;
    resolver.Resolve(host, "5000", [&](absl::StatusOr<std::vector<std::string>> result) {
      answer = std::move(result);
      done.Notify();
    });
    if (!done.WaitForNotificationWithTimeout(kPatience)) {
      return absl::DeadlineExceededError("no answer");
    }
    return answer;
  }

  FakeDnsServer server_;
};

TEST_F(DnsResolverTest, AnswersEveryAddressOfAName) {
  std::unique_ptr<DnsResolver> resolver = NewResolver();
  ASSERT_TRUE(resolver);
  const absl::StatusOr<std::vector<std::string>> answer = ResolveNow(*resolver, "workers.test.");
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(*answer,
            (std::vector<std::string>{"10.0.0.1:5000", "10.0.0.2:5000", "[fd00::5]:5000"}));
}

TEST_F(DnsResolverTest, NoSuchNameAndNoRecordsAreEmptyAnswersAndFailuresAreErrors) {
  std::unique_ptr<DnsResolver> resolver = NewResolver();
  ASSERT_TRUE(resolver);
  const absl::StatusOr<std::vector<std::string>> missing = ResolveNow(*resolver, "missing.test.");
  ASSERT_TRUE(missing.ok()) << missing.status();
  EXPECT_TRUE(missing->empty());
  const absl::StatusOr<std::vector<std::string>> empty = ResolveNow(*resolver, "empty.test.");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->empty());
  const absl::StatusOr<std::vector<std::string>> broken = ResolveNow(*resolver, "broken.test.");
  EXPECT_EQ(broken.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(broken.status().message().find("broken.test."), absl::string_view::npos);
}

TEST_F(DnsResolverTest, ASilentServerTimesOutAsUnavailable) {
  std::unique_ptr<DnsResolver> resolver = NewResolver();
  ASSERT_TRUE(resolver);
  const absl::StatusOr<std::vector<std::string>> answer = ResolveNow(*resolver, "silent.test.");
  EXPECT_EQ(answer.status().code(), absl::StatusCode::kUnavailable) << answer.status();
}

TEST_F(DnsResolverTest, DestroyingTheResolverCancelsWhatIsInFlight) {
  absl::StatusOr<std::unique_ptr<DnsResolver>> resolver = DnsResolver::Create(
      {.servers = {server_.address()}, .attempt_timeout = absl::Minutes(1), .attempts = 1});
  ASSERT_TRUE(resolver.ok()) << resolver.status();
  std::atomic<int> cancelled{0};
  for (int i = 0; i < 3; ++i) {
    (*resolver)->Resolve("silent.test.", "1", [&](absl::StatusOr<std::vector<std::string>> r) {
      if (r.status().code() == absl::StatusCode::kCancelled) ++cancelled;
    });
  }
  // The server has the questions (the lookups are waiting for its answer)...
  const absl::Time deadline = absl::Now() + kPatience;
  while (server_.queries() < 3 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  ASSERT_GE(server_.queries(), 3);
  // ... and the resolver goes without waiting the minute a server has to answer.
  const absl::Time start = absl::Now();
  resolver->reset();
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  EXPECT_EQ(cancelled.load(), 3);
}

TEST(DnsResolverOptionsTest, BadServersAreRefusedByName) {
  const absl::StatusOr<std::unique_ptr<DnsResolver>> resolver =
      DnsResolver::Create({.servers = {"dns.example:53"}});
  EXPECT_EQ(resolver.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(resolver.status().message().find("dns.example:53"), absl::string_view::npos);
  EXPECT_FALSE(DnsResolver::Create({.attempts = 0}).ok());
}

}  // namespace
}  // namespace llmserve::gateway
