// llmserve-bench's OpenAI client against a scripted HTTP server on loopback: what it times as
// the first token and the gaps between tokens, how each way of failing is named, and keep-alive
// (a connection reused, and one the server closed between requests retried afresh).

#include "tools/bench/openai_client.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace llmserve::tools {
namespace {

// Answers each request on a connection with `respond(fd)`; a respond that returns false closes
// the connection. Requests must carry a Content-Length body (the client's always do).
class ScriptedServer {
 public:
  using Respond = std::function<bool(int fd)>;
  explicit ScriptedServer(Respond respond) : respond_(std::move(respond)) {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof(address));
    socklen_t length = sizeof(address);
    getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    listen(listener_, 8);
    thread_ = std::thread([this] { Serve(); });
  }
  ~ScriptedServer() {
    stopping_ = true;
    shutdown(listener_, SHUT_RDWR);
    close(listener_);
    thread_.join();
  }
  HttpTarget target() const { return {.host = "127.0.0.1", .port = port_}; }
  int connections() const { return connections_; }

 private:
  void Serve() {
    while (!stopping_) {
      const int fd = accept(listener_, nullptr, nullptr);
      if (fd < 0) return;
      ++connections_;
      while (ReadRequest(fd) && respond_(fd)) {
      }
      close(fd);
    }
  }
  static bool ReadRequest(int fd) {
    std::string data;
    char buffer[4096];
    size_t head_end = std::string::npos;
    size_t need = 0;
    for (;;) {
      if (head_end == std::string::npos &&
          (head_end = data.find("\r\n\r\n")) != std::string::npos) {
        const size_t at = data.find("Content-Length: ");
        need = head_end + 4 + (at == std::string::npos ? 0 : std::stoul(data.substr(at + 16)));
      }
      if (head_end != std::string::npos && data.size() >= need) return true;
      const ssize_t n = read(fd, buffer, sizeof(buffer));
      if (n <= 0) return false;
      data.append(buffer, static_cast<size_t>(n));
    }
  }

  Respond respond_;
  int listener_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> connections_{0};
  std::thread thread_;
};

void Write(int fd, const std::string& text) {
  ASSERT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
}
// One SSE event as one HTTP chunk.
void Event(int fd, const std::string& data) {
  const std::string event = absl::StrCat("data: ", data, "\n\n");
  Write(fd, absl::StrFormat("%x\r\n%s\r\n", event.size(), event));
}
constexpr char kStreamHead[] =
    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";

RequestOutcome SendOne(OpenAiClient& client, absl::Duration timeout = absl::Seconds(30)) {
  return client.Send("r", {.prompt_text = "hi", .output_len = 3}, absl::Now() + timeout);
}

TEST(OpenAiClientTest, TimesTheFirstChoiceAndEveryTokenEvent) {
  ScriptedServer server([](int fd) {
    Write(fd, kStreamHead);
    absl::SleepFor(absl::Milliseconds(100));
    Event(
        fd,
        R"({"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]})");
    absl::SleepFor(absl::Milliseconds(100));
    Event(fd, R"({"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]})");
    absl::SleepFor(absl::Milliseconds(100));
    // A token with no text, sent because logprobs were asked for.
    Event(
        fd,
        R"({"choices":[{"index":0,"delta":{"content":""},"logprobs":{"content":[]},"finish_reason":null}]})");
    absl::SleepFor(absl::Milliseconds(100));
    Event(fd, R"({"choices":[{"index":0,"delta":{"content":"b"},"finish_reason":null}]})");
    absl::SleepFor(absl::Milliseconds(100));
    // The closing event and the usage are not tokens.
    Event(fd, R"({"choices":[{"index":0,"delta":{},"finish_reason":"length"}]})");
    Event(fd, R"({"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3}})");
    Event(fd, "[DONE]");
    Write(fd, "0\r\n\r\n");
    return true;
  });
  OpenAiClient client({.target = server.target(), .endpoint = OpenAiEndpoint::kChat, .model = "m"});
  const RequestOutcome outcome = SendOne(client);
  ASSERT_TRUE(outcome.ok) << outcome.status << ": " << outcome.error;
  EXPECT_EQ(outcome.status, "ok");
  EXPECT_GE(outcome.ttft_s, 0.095);
  EXPECT_LT(outcome.ttft_s, 0.195);  // the role chunk, not the first text
  ASSERT_EQ(outcome.itl_s.size(), 3u);
  for (double gap : outcome.itl_s) EXPECT_GE(gap, 0.095);
  EXPECT_GE(outcome.e2e_s, 0.495);
  EXPECT_EQ(outcome.output_tokens, 3);
  EXPECT_EQ(outcome.prompt_tokens, 7);
}

TEST(OpenAiClientTest, NamesEachWayOfFailing) {
  struct Case {
    std::function<bool(int)> respond;
    std::string status;
    std::string error;
  };
  const std::vector<Case> cases = {
      {[](int fd) {
         const std::string body = R"({"error":{"message":"slow down","type":"rate_limit"}})";
         Write(fd, absl::StrCat("HTTP/1.1 429 Too Many Requests\r\nContent-Length: ", body.size(),
                                "\r\n\r\n", body));
         return true;
       },
       "http 429", "slow down"},
      {[](int fd) {
         Write(fd, kStreamHead);
         Event(fd, R"({"choices":[{"index":0,"text":"a","finish_reason":null}]})");
         Event(fd, R"({"error":{"message":"worker lost","code":503}})");
         Event(fd, "[DONE]");
         Write(fd, "0\r\n\r\n");
         return true;
       },
       "stream error", "worker lost"},
      {[](int fd) {
         Write(fd, kStreamHead);
         Event(fd, R"({"choices":[{"index":0,"text":"a","finish_reason":null}]})");
         Write(fd, "0\r\n\r\n");  // a complete body without [DONE]
         return true;
       },
       "truncated", "[DONE]"},
      {[](int fd) {
         Write(fd, kStreamHead);
         Event(fd, R"({"choices":[{"index":0,"text":"a","finish_reason":null}]})");
         return false;  // the connection drops mid-stream
       },
       "truncated", "closed the connection"},
      {[](int fd) {
         Write(fd, "HTTP/1.1 200 OK\r\nContent-Length: nope\r\n\r\n");
         return false;
       },
       "bad response", "Content-Length"},
      {[](int fd) {
         Write(fd, kStreamHead);
         absl::SleepFor(absl::Seconds(2));
         return false;
       },
       "timeout", ""},
  };
  for (const Case& c : cases) {
    ScriptedServer server(c.respond);
    OpenAiClient client({.target = server.target(), .model = "m"});
    const RequestOutcome outcome = SendOne(client, absl::Milliseconds(500));
    EXPECT_FALSE(outcome.ok);
    EXPECT_EQ(outcome.status, c.status) << outcome.error;
    EXPECT_NE(outcome.error.find(c.error), std::string::npos) << outcome.error;
  }
  // Nothing listening on the port of a server that is gone.
  HttpTarget gone;
  {
    ScriptedServer server([](int) { return false; });
    gone = server.target();
  }
  OpenAiClient client({.target = gone, .model = "m"});
  const RequestOutcome refused = SendOne(client);
  EXPECT_EQ(refused.status, "connect");
  EXPECT_NE(refused.error.find("cannot connect"), std::string::npos) << refused.error;
}

bool AnswerDone(int fd) {
  Write(fd, kStreamHead);
  Event(fd, R"({"choices":[{"index":0,"text":"a","finish_reason":null}]})");
  Event(fd, "[DONE]");
  Write(fd, "0\r\n\r\n");
  return true;
}

TEST(OpenAiClientTest, KeepsConnectionsAliveAndRetriesOneTheServerClosed) {
  ScriptedServer keeps(AnswerDone);
  OpenAiClient client({.target = keeps.target(), .model = "m"});
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(SendOne(client).ok);
  EXPECT_EQ(keeps.connections(), 1);

  // A server that closes every connection after one response, without saying so: the next
  // request finds the kept connection closed before any answer and goes again on a new one.
  ScriptedServer closes([](int fd) {
    AnswerDone(fd);
    return false;
  });
  OpenAiClient retrying({.target = closes.target(), .model = "m"});
  // Three at once leave three closed connections in the pool; the retry must not take another.
  std::vector<std::thread> concurrent;
  for (int i = 0; i < 3; ++i) {
    concurrent.emplace_back([&] { EXPECT_TRUE(SendOne(retrying).ok); });
  }
  for (std::thread& thread : concurrent) thread.join();
  for (int i = 0; i < 3; ++i) {
    const RequestOutcome outcome = SendOne(retrying);
    EXPECT_TRUE(outcome.ok) << outcome.status << ": " << outcome.error;
  }
  EXPECT_EQ(closes.connections(), 6);
}

}  // namespace
}  // namespace llmserve::tools
