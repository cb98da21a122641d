// The prepare stage seen through the gateway's public APIs: prompts are rendered and tokenized
// off the I/O threads, once for n choices, their errors answered before any byte of a stream, and
// a client that leaves while its prompt waits costs no work. The chat renderer is the test's:
// it counts its calls, holds a chat saying "hold" until released, and fails one saying "bad".

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/unit/gateway/server/gateway_test_fixture.h"

namespace llmserve::gateway {
namespace {

struct Renderer {
  std::atomic<int> calls{0};
  std::atomic<int> held_calls{0};
  absl::Notification held;
  absl::Notification release;
  absl::Mutex mutex;
  std::vector<std::string> contents ABSL_GUARDED_BY(mutex);

  // Whether a chat saying `content` was rendered.
  bool Rendered(const std::string& content) {
    absl::MutexLock lock(&mutex);
    return std::find(contents.begin(), contents.end(), content) != contents.end();
  }

  ChatRenderer Get() {
    return [this](const ServedModel& model,
                  const ::llmserve::v1::ChatPrompt& chat) -> absl::StatusOr<common::RenderedChat> {
      ++calls;
      const std::string& content = chat.messages(0).content();
      {
        absl::MutexLock lock(&mutex);
        contents.push_back(content);
      }
      if (content == "hold") {
        ++held_calls;
        held.Notify();
        release.WaitForNotificationWithTimeout(kPatience);
      }
      if (content == "bad") {
        return absl::InvalidArgumentError("chat.messages[0].content: bad on purpose");
      }
      return RenderChatPrompt(model, chat);
    };
  }
};

std::string ChatBody(const std::string& content, const std::string& extra = "") {
  return absl::StrCat(R"({"model": "tiny", "messages": [{"role": "user", "content": ")", content,
                      R"("}], "max_tokens": 3, "ignore_eos": true)", extra, "}");
}

::llmserve::v1::GenerateRequest ChatRequest(const std::string& content) {
  ::llmserve::v1::GenerateRequest request;
  ::llmserve::v1::ChatMessage* message = request.mutable_chat()->add_messages();
  message->set_role("user");
  message->set_content(content);
  request.mutable_stopping()->set_max_tokens(3);
  return request;
}

class GatewayPrepareTest : public GatewayServerTest {
 protected:
  void StartWith(int prepare_threads, int prepare_queue) {
    GatewayServerOptions options;
    options.http_threads = 1;
    options.prepare_threads = prepare_threads;
    options.prepare_queue = prepare_queue;
    options.render_chat = renderer_.Get();
    StartGateway(options);
  }

  // Waits (bounded) until the gateway counts `n` requests in flight.
  bool WaitForActive(int n) {
    const absl::Time deadline = absl::Now() + kPatience;
    while (gateway_->active_requests() != n && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(2));
    }
    return gateway_->active_requests() == n;
  }

  // Waits (bounded) until /metrics shows `line`: a request counts as active before its prompt
  // joins the prepare queue, so one scrape right after WaitForActive can miss it.
  std::string WaitForMetric(int port, std::string_view line) {
    const absl::Time deadline = absl::Now() + kPatience;
    std::string body = Get(port, "/metrics").body;
    while (body.find(line) == std::string::npos && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(2));
      body = Get(port, "/metrics").body;
    }
    return body;
  }

  // Only the test's thread releases the held chat.
  void Release() {
    if (!renderer_.release.HasBeenNotified()) renderer_.release.Notify();
  }
  void TearDown() override { Release(); }

  Renderer renderer_;
};

// With one HTTP I/O thread, a prompt being prepared does not stop that thread: it still answers
// other requests, a generation included, while the prompt's preparation is held.
TEST_F(GatewayPrepareTest, APromptBeingPreparedDoesNotHoldTheIoThread) {
  StartWith(/*prepare_threads=*/2, /*prepare_queue=*/8);
  const int port = gateway_->http_port();
  http::testing::TestResponse held_response;
  std::thread held([&] {
    held_response = Post(port, "/v1/chat/completions", ChatBody("hold", R"(, "stream": true)"));
  });
  ASSERT_TRUE(renderer_.held.WaitForNotificationWithTimeout(kPatience));
  EXPECT_EQ(Get(port, "/healthz").status, 200);
  const auto other = Post(port, "/v1/chat/completions", ChatBody("Hello"));
  EXPECT_EQ(other.status, 200) << other.body;
  Release();
  held.join();
  EXPECT_EQ(held_response.status, 200) << held_response.body;
  EXPECT_EQ(SseEvents(held_response.body).back(), "[DONE]");
}

TEST_F(GatewayPrepareTest, SeveralChoicesArePreparedOnce) {
  StartWith(2, 8);
  const auto response =
      Post(gateway_->http_port(), "/v1/chat/completions", ChatBody("Hello", R"(, "n": 3)"));
  ASSERT_EQ(response.status, 200) << response.body;
  const nlohmann::json json = nlohmann::json::parse(response.body);
  EXPECT_EQ(json["choices"].size(), 3u);
  EXPECT_EQ(json["usage"]["completion_tokens"], 9);
  EXPECT_EQ(renderer_.calls.load(), 1);
}

// The prepare stage's error comes back before the stream's first byte: a 400, not a 200 stream
// with an error event, and INVALID_ARGUMENT with no message on gRPC.
TEST_F(GatewayPrepareTest, PrepareErrorsAreAnsweredBeforeAnyByte) {
  StartWith(2, 8);
  const auto response =
      Post(gateway_->http_port(), "/v1/chat/completions", ChatBody("bad", R"(, "stream": true)"));
  EXPECT_EQ(response.status, 400) << response.body;
  EXPECT_NE(response.body.find("bad on purpose"), std::string::npos) << response.body;
  EXPECT_NE(response.Header("content-type"), "text/event-stream");
  const Streamed streamed = Stream(ChatRequest("bad"));
  EXPECT_EQ(streamed.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << streamed.status.error_message();
  EXPECT_TRUE(streamed.messages.empty());
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kPatience));
  ::llmserve::v1::GenerateResponse unary;
  EXPECT_EQ(stub_->Generate(&context, ChatRequest("bad"), &unary).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(WaitForActive(0));
}

// Clients of both APIs leave while their prompts wait for the only prepare thread: the HTTP
// prompt is never rendered (the gRPC one neither, unless gRPC delivers the cancel after the
// release), nothing is left running, and the gateway serves on.
TEST_F(GatewayPrepareTest, ClientsThatLeaveWhileQueuedCostNothing) {
  StartWith(/*prepare_threads=*/1, /*prepare_queue=*/8);
  const int port = gateway_->http_port();
  http::testing::TestResponse held_response;
  std::thread held([&] { held_response = Post(port, "/v1/chat/completions", ChatBody("hold")); });
  ASSERT_TRUE(renderer_.held.WaitForNotificationWithTimeout(kPatience));
  ASSERT_TRUE(WaitForActive(1));
  {
    auto client = http::testing::TestHttpClient::Connect(port);
    ASSERT_NE(client, nullptr);
    const std::string body = ChatBody("queued http", R"(, "stream": true)");
    client->Send(absl::StrCat("POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n",
                              "content-type: application/json\r\ncontent-length: ", body.size(),
                              "\r\n\r\n", body));
    ASSERT_TRUE(WaitForActive(2));
    client->Close();
  }
  // The gateway has seen the client leave (the connection's on_close withdrew its prompt) once
  // only the held request's connection is open.
  const absl::Time deadline = absl::Now() + kPatience;
  while (gateway_->http_connections() > 1 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  ASSERT_EQ(gateway_->http_connections(), 1);
  grpc::ClientContext stream_context;
  stream_context.set_deadline(absl::ToChronoTime(absl::Now() + kPatience));
  auto reader = stub_->GenerateStream(&stream_context, ChatRequest("queued grpc"));
  ASSERT_TRUE(WaitForActive(3));
  const std::string metrics = WaitForMetric(port, "llmserve_gateway_prepare_queued 2");
  EXPECT_NE(metrics.find("llmserve_gateway_prepare_queued 2"), std::string::npos) << metrics;
  stream_context.TryCancel();
  ::llmserve::v1::GenerateStreamResponse message;
  EXPECT_FALSE(reader->Read(&message));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  // The client's cancel is not a round trip: the gateway learns of it when it reads the stream's
  // reset from the connection, which it does before it reads a later call there.
  grpc::ClientContext list_context;
  list_context.set_deadline(absl::ToChronoTime(absl::Now() + kPatience));
  ::llmserve::v1::ListModelsResponse models;
  ASSERT_TRUE(stub_->ListModels(&list_context, {}, &models).ok());
  Release();
  held.join();
  EXPECT_EQ(held_response.status, 200) << held_response.body;
  EXPECT_TRUE(WaitForActive(0));
  // The HTTP client's leaving is certain before the release (its connection count above): its
  // prompt is never rendered. gRPC runs the stream's OnCancel on its callback threads, which may
  // come after the prepare thread took that prompt: then it is rendered, and the run, seeing the
  // cancel, ends before admission (RequestRun::Prepare).
  EXPECT_FALSE(renderer_.Rendered("queued http"));
  EXPECT_EQ(renderer_.calls.load(), renderer_.Rendered("queued grpc") ? 2 : 1);
  EXPECT_TRUE(WaitForIdleWorkers());
  EXPECT_EQ(Post(port, "/v1/chat/completions", ChatBody("after")).status, 200);
}

// Beyond --prepare_queue waiting prompts, requests are refused at once: 429 with retry-after,
// RESOURCE_EXHAUSTED on gRPC (Generate and Tokenize).
TEST_F(GatewayPrepareTest, AFullPrepareQueueRefusesWithRetryAfter) {
  StartWith(/*prepare_threads=*/1, /*prepare_queue=*/0);
  const int port = gateway_->http_port();
  http::testing::TestResponse held_response;
  std::thread held([&] { held_response = Post(port, "/v1/chat/completions", ChatBody("hold")); });
  ASSERT_TRUE(renderer_.held.WaitForNotificationWithTimeout(kPatience));
  const auto refused = Post(port, "/v1/completions",
                            R"({"model": "tiny", "prompt": "x", "max_tokens": 2, "stream": true})");
  EXPECT_EQ(refused.status, 429) << refused.body;
  EXPECT_EQ(refused.Header("retry-after"), "1");
  EXPECT_NE(refused.body.find("--prepare_queue=0"), std::string::npos) << refused.body;
  EXPECT_EQ(Stream(TextRequest("x", 2)).status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  // Tokenize goes through the same stage.
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kPatience));
  ::llmserve::v1::TokenizeRequest tokenize;
  tokenize.set_text("x");
  ::llmserve::v1::TokenizeResponse tokens;
  EXPECT_EQ(stub_->Tokenize(&context, tokenize, &tokens).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  const auto metrics = Get(port, "/metrics");
  EXPECT_NE(metrics.body.find("llmserve_gateway_rate_limited_total 3"), std::string::npos)
      << metrics.body;
  Release();
  held.join();
  EXPECT_EQ(held_response.status, 200) << held_response.body;
  EXPECT_TRUE(WaitForActive(0));
}

// A drain waits for a prompt being prepared, which then runs to its end.
TEST_F(GatewayPrepareTest, DrainWaitsForAPromptBeingPrepared) {
  StartWith(1, 8);
  const int port = gateway_->http_port();
  http::testing::TestResponse held_response;
  std::thread held([&] { held_response = Post(port, "/v1/chat/completions", ChatBody("hold")); });
  ASSERT_TRUE(renderer_.held.WaitForNotificationWithTimeout(kPatience));
  ASSERT_TRUE(WaitForActive(1));
  int left = -1;
  std::thread drain([&] { left = gateway_->Drain(); });
  const absl::Time deadline = absl::Now() + kPatience;
  while (Get(port, "/readyz").status != 503 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  // New requests are refused while the held one is still counted.
  EXPECT_EQ(Post(port, "/v1/completions", R"({"prompt": "x", "max_tokens": 1})").status, 503);
  EXPECT_EQ(gateway_->active_requests(), 1);
  Release();
  held.join();
  drain.join();
  EXPECT_EQ(held_response.status, 200) << held_response.body;
  EXPECT_EQ(left, 0);
}

}  // namespace
}  // namespace llmserve::gateway
