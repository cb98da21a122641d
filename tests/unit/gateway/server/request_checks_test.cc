// What the gateway checks before it answers a byte or admits a request (issue 15): streamed
// requests are refused with a real status, not 200 and an error event; Tokenize refuses the chats
// Generate refuses; /metrics stays off the public port when a metrics port is set.

#include <grpcpp/grpcpp.h>
#include <sys/socket.h>

#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "llmserve/v1/inference.grpc.pb.h"
#include "tests/unit/gateway/server/gateway_test_fixture.h"

namespace llmserve::gateway {
namespace {

// The error message of an OpenAI error body, or "" when `body` is not one.
std::string ErrorMessage(const std::string& body) {
  const nlohmann::json json = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object() || !json.contains("error")) return "";
  return json["error"].value("message", "");
}

TEST_F(GatewayServerTest, OpenAiStreamedRequestsAreValidatedBeforeTheStreamStarts) {
  StartGateway();
  const int port = gateway_->http_port();
  struct Case {
    const char* path;
    std::string fields;
    const char* named;
  };
  const std::string chat = R"("messages": [{"role": "user", "content": "Hi"}])";
  const std::vector<Case> cases = {
      {"/v1/completions", R"("prompt": "x", "temperature": -1)", "temperature"},
      {"/v1/completions", R"("prompt": "x", "top_p": 2)", "top_p"},
      {"/v1/completions", R"("prompt": "x", "presence_penalty": 9)", "presence_penalty"},
      {"/v1/completions", R"("prompt": "x", "frequency_penalty": -2.5)", "frequency_penalty"},
      {"/v1/completions", R"("prompt": "x", "repetition_penalty": 0)", "repetition_penalty"},
      {"/v1/completions", R"("prompt": "x", "min_p": 1.5)", "min_p"},
      {"/v1/completions", R"("prompt": "x", "top_k": 100000000)", "top_k"},
      {"/v1/chat/completions", chat + R"(, "top_p": 0)", "top_p"},
      {"/v1/chat/completions", chat + R"(, "temperature": 101)", "temperature"},
  };
  for (const Case& c : cases) {
    for (const bool stream : {true, false}) {
      const std::string body = absl::StrCat("{", c.fields, R"(, "max_tokens": 3, "stream": )",
                                            stream ? "true" : "false", "}");
      const auto response = Post(port, c.path, body);
      EXPECT_EQ(response.status, 400) << body << "\n" << response.body;
      EXPECT_EQ(response.Header("content-type"), "application/json") << body;
      EXPECT_NE(ErrorMessage(response.body).find(c.named), std::string::npos) << body << "\n"
                                                                              << response.body;
    }
  }
}

// Sampling parameters are checked with the rest of the request, before admission: a bad request
// never reaches a worker, never sends a stream message, and costs no rate-limit budget.
TEST_F(GatewayServerTest, GrpcSamplingParametersAreRefusedBeforeAdmission) {
  StartGateway({.rate_limit_rpm = 1});
  ::llmserve::v1::GenerateRequest bad = TextRequest("hi", 3);
  bad.mutable_sampling()->set_top_p(2);
  for (int i = 0; i < 3; ++i) {
    const Streamed result = Stream(bad);
    EXPECT_EQ(result.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << result.status.error_message();
    EXPECT_NE(result.status.error_message().find("sampling.top_p"), std::string::npos)
        << result.status.error_message();
    EXPECT_TRUE(result.messages.empty());
    grpc::ClientContext context;
    ::llmserve::v1::GenerateResponse response;
    EXPECT_EQ(stub_->Generate(&context, bad, &response).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  // NaN is out of every range.
  bad.mutable_sampling()->set_top_p(1);
  bad.mutable_sampling()->set_temperature(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(Stream(bad).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // The one request of the minute is still there.
  const Streamed good = Stream(TextRequest("hi", 3));
  EXPECT_TRUE(good.status.ok()) << good.status.error_message();
}

// A streamed request admitted after its model's last worker went away gets a real 503, not 200
// and an error event: the headers wait until a worker produced something.
TEST_F(SlowGatewayServerTest, AStreamWithNoWorkerLeftIsA503) {
  StartGateway({.max_concurrency = 1, .max_queued_requests = 4});
  const int port = gateway_->http_port();
  // A long request holds the only slot.
  grpc::ClientContext holder_context;
  holder_context.set_deadline(absl::ToChronoTime(absl::Now() + kPatience));
  auto holder = stub_->GenerateStream(&holder_context, TextRequest("holder", 900));
  ::llmserve::v1::GenerateStreamResponse message;
  ASSERT_TRUE(holder->Read(&message));
  // A streamed request is accepted (its model has ready workers) and waits for the slot.
  http::testing::TestResponse queued;
  std::thread client([&] {
    queued = Post(port, "/v1/completions",
                  R"({"model": "tiny", "prompt": "x", "max_tokens": 3, "stream": true})");
  });
  absl::SleepFor(absl::Milliseconds(300));
  // Both workers drain (the holder keeps running on its worker): none is routable any more.
  std::vector<std::thread> drains;
  for (auto& worker : workers_) drains.emplace_back([&worker] { worker->Drain(); });
  const absl::Time deadline = absl::Now() + kPatience;
  auto routable = [&] {
    for (const WorkerStatus& worker : gateway_->workers().Workers()) {
      if (worker.ready && !worker.draining) return true;
    }
    return false;
  };
  while (routable() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
  ASSERT_FALSE(routable());
  // The slot frees up: the queued request starts and finds no worker.
  holder_context.TryCancel();
  while (holder->Read(&message)) {
  }
  holder->Finish();
  client.join();
  for (std::thread& drain : drains) drain.join();
  EXPECT_EQ(queued.status, 503) << queued.body;
  EXPECT_EQ(queued.Header("content-type"), "application/json");
  EXPECT_NE(ErrorMessage(queued.body).find("no ready worker"), std::string::npos) << queued.body;
}

// Issue 15, defect 7: the proto promises Tokenize treats a chat as Generate does.
TEST_F(GatewayServerTest, TokenizeRefusesTheChatsGenerateRefuses) {
  StartGateway();
  std::vector<::llmserve::v1::ChatPrompt> chats(3);
  // chats[0] has no message.
  for (int i = 0; i < 100000; ++i) {
    auto* message = chats[1].add_messages();
    message->set_role("user");
    message->set_content("hi");
  }
  auto* wizard = chats[2].add_messages();
  wizard->set_role("wizard");
  wizard->set_content("abracadabra");
  for (const ::llmserve::v1::ChatPrompt& chat : chats) {
    ::llmserve::v1::GenerateRequest generate;
    *generate.mutable_chat() = chat;
    generate.mutable_stopping()->set_max_tokens(2);
    grpc::ClientContext generate_context;
    ::llmserve::v1::GenerateResponse generated;
    const grpc::Status generate_status = stub_->Generate(&generate_context, generate, &generated);
    EXPECT_EQ(generate_status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

    ::llmserve::v1::TokenizeRequest tokenize;
    *tokenize.mutable_chat() = chat;
    grpc::ClientContext tokenize_context;
    ::llmserve::v1::TokenizeResponse tokens;
    const grpc::Status tokenize_status = stub_->Tokenize(&tokenize_context, tokenize, &tokens);
    EXPECT_EQ(tokenize_status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << chat.messages_size() << " messages";
    EXPECT_EQ(tokenize_status.error_message(), generate_status.error_message());
    EXPECT_EQ(tokens.token_ids_size(), 0);
  }
}

// /metrics names every worker's address: with a metrics port it is served there only.
// Issue 28: a whole completion request followed at once by a half-close (shutdown(SHUT_WR)) gets
// its response, streamed or not, after the interim 100 the server probes the client with.
TEST_F(GatewayServerTest, AHalfClosedClientGetsItsCompletion) {
  StartGateway();
  for (const bool stream : {false, true}) {
    auto client = http::testing::TestHttpClient::Connect(gateway_->http_port());
    ASSERT_NE(client, nullptr);
    const std::string body =
        absl::StrCat(R"({"model": "tiny", "prompt": "Hi", "max_tokens": 4, "ignore_eos": true, )",
                     R"("stream": )", stream ? "true" : "false", "}");
    ASSERT_TRUE(client->Send(absl::StrCat(
        "POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n",
        "content-length: ", body.size(), "\r\n\r\n", body)));
    ASSERT_EQ(::shutdown(client->fd(), SHUT_WR), 0);
    std::optional<http::testing::TestResponse> response = client->ReadResponse();
    ASSERT_TRUE(response.has_value()) << "stream " << stream;
    EXPECT_EQ(response->status, 200) << response->body;
    if (stream) {
      const std::vector<std::string> events = SseEvents(response->body);
      ASSERT_FALSE(events.empty());
      EXPECT_EQ(events.back(), "[DONE]");
    } else {
      const nlohmann::json json = nlohmann::json::parse(response->body, nullptr, false);
      ASSERT_TRUE(json.is_object()) << response->body;
      EXPECT_EQ(json["usage"]["completion_tokens"], 4) << response->body;
    }
    EXPECT_TRUE(client->WaitForClose());
  }
}

TEST_F(GatewayServerTest, MetricsStayOffTheHttpPortWhenAMetricsPortIsSet) {
  StartGateway({.metrics_port = 0});
  ASSERT_GT(gateway_->metrics_port(), 0);
  const auto on_http = Get(gateway_->http_port(), "/metrics");
  EXPECT_EQ(on_http.status, 404) << on_http.body;
  EXPECT_EQ(on_http.body.find("127.0.0.1:"), std::string::npos) << on_http.body;
  const auto on_metrics_port = Get(gateway_->metrics_port(), "/metrics");
  EXPECT_EQ(on_metrics_port.status, 200);
  EXPECT_NE(on_metrics_port.body.find(absl::StrCat(
                "llmserve_gateway_worker_up{worker=\"127.0.0.1:", workers_[0]->port(), "\"")),
            std::string::npos)
      << on_metrics_port.body;
}

TEST_F(GatewayServerTest, MetricsAreOnTheHttpPortWithoutAMetricsPort) {
  StartGateway();
  EXPECT_EQ(gateway_->metrics_port(), -1);
  const auto metrics = Get(gateway_->http_port(), "/metrics");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.body.find("llmserve_gateway_worker_up"), std::string::npos);
}

}  // namespace
}  // namespace llmserve::gateway
