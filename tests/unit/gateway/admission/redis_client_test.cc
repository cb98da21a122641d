// RedisClient against a scripted peer on loopback: pipelined replies in order, a peer that stops
// answering costs a command its timeout and no more, and nothing listening fails at once.

#include "gateway/admission/redis_client.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/testing/loopback_socket.h"

namespace llmserve::gateway {
namespace {

// Accepts one connection; answers +PONG to each PING, :N to the Nth other command while
// `answering`, and nothing after.
class ScriptedPeer {
 public:
  ScriptedPeer() {
    const ::llmserve::testing::LoopbackSocket bound =
        ::llmserve::testing::BindLoopback(SOCK_STREAM, 4);
    EXPECT_GE(bound.fd, 0);
    listen_fd_ = bound.fd;
    port_ = bound.port;
    thread_ = std::thread([this] { Serve(); });
  }
  ~ScriptedPeer() {
    stop_ = true;
    shutdown(listen_fd_, SHUT_RDWR);
    if (connection_ >= 0) shutdown(connection_, SHUT_RDWR);
    thread_.join();
    close(listen_fd_);
    if (connection_ >= 0) close(connection_);
  }
  int port() const { return port_; }
  std::atomic<bool> answering{true};

 private:
  void Serve() {
    connection_ = accept(listen_fd_, nullptr, nullptr);
    if (connection_ < 0) return;
    std::string buffer;
    int64_t count = 0;
    char chunk[4096];
    while (!stop_) {
      const ssize_t n = recv(connection_, chunk, sizeof(chunk), 0);
      if (n <= 0) return;
      buffer.append(chunk, static_cast<size_t>(n));
      RedisReply command;
      while (true) {
        absl::StatusOr<size_t> taken = ParseRedisReply(buffer, &command);
        if (!taken.ok() || *taken == 0) break;
        buffer.erase(0, *taken);
        std::string answer;
        if (command.elements.size() == 1 && command.elements[0].text == "PING") {
          answer = "+PONG\r\n";
        } else if (answering) {
          answer = absl::StrCat(":", ++count, "\r\n");
        }
        if (!answer.empty()) send(connection_, answer.data(), answer.size(), MSG_NOSIGNAL);
      }
    }
  }

  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<int> connection_{-1};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

RedisClientOptions Options(int port) {
  return {.url = {.host = "127.0.0.1", .port = absl::StrCat(port)},
          .timeout = absl::Milliseconds(200),
          .connect_timeout = absl::Seconds(2)};
}

bool WaitConnected(const RedisClient& client) {
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (!client.connected() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  return client.connected();
}

TEST(RedisClientTest, PipelinedCommandsGetTheirOwnRepliesInOrder) {
  ScriptedPeer peer;
  std::unique_ptr<RedisClient> client = RedisClient::Start(Options(peer.port()));
  ASSERT_TRUE(WaitConnected(*client));
  std::vector<int64_t> replies(3, -1);
  absl::Notification done;
  std::atomic<int> left{3};
  for (int i = 0; i < 3; ++i) {
    client->Send({"INCR", "k"}, [&, i](absl::StatusOr<RedisReply> reply) {
      replies[i] = reply.ok() ? reply->integer : -2;
      if (--left == 0) done.Notify();
    });
  }
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_EQ(replies, (std::vector<int64_t>{1, 2, 3}));
}

TEST(RedisClientTest, APeerThatStopsAnsweringCostsACommandItsTimeoutAndNoMore) {
  ScriptedPeer peer;
  std::unique_ptr<RedisClient> client = RedisClient::Start(Options(peer.port()));
  ASSERT_TRUE(WaitConnected(*client));
  peer.answering = false;
  absl::Notification done;
  absl::Status status;
  const absl::Time start = absl::Now();
  client->Send({"INCR", "k"}, [&](absl::StatusOr<RedisReply> reply) {
    status = reply.status();
    done.Notify();
  });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_TRUE(absl::IsUnavailable(status)) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "did not answer")) << status;
  // Bounded by the timeout (and the loop's wake-up), not by anything the peer does.
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  // The connection was dropped: the next command fails at once, on this thread.
  bool answered_inline = false;
  client->Send({"INCR", "k"},
               [&](absl::StatusOr<RedisReply> reply) { answered_inline = !reply.ok(); });
  EXPECT_TRUE(answered_inline);
}

TEST(RedisClientTest, NothingListeningFailsAtOnce) {
  int port = 0;
  {
    ScriptedPeer closed;  // a port that was free a moment ago
    port = closed.port();
  }
  std::unique_ptr<RedisClient> client = RedisClient::Start(Options(port));
  absl::Status status;
  client->Send({"PING"}, [&](absl::StatusOr<RedisReply> reply) { status = reply.status(); });
  EXPECT_TRUE(absl::IsUnavailable(status)) << status;
  EXPECT_FALSE(client->connected());
}

}  // namespace
}  // namespace llmserve::gateway
