// The gateway's drain across both APIs, in front of the in-memory FakeWorkerClient: the test
// decides when each worker call produces tokens and ends, so "a stream is open while the gateway
// drains" is a fact of the test rather than a race against a model's speed.

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gateway/server/gateway_server.h"
#include "gtest/gtest.h"
#include "llmserve/v1/inference.grpc.pb.h"
#include "tests/testing/fake_worker_client.h"
#include "tests/testing/http_get.h"

namespace llmserve::gateway {
namespace {

using ::llmserve::testing::FakeCall;
using ::llmserve::testing::FakeModelInfo;
using ::llmserve::testing::FakeWorkerClient;
using ::llmserve::testing::HttpExchange;

constexpr absl::Duration kPatience = absl::Seconds(30);

std::string PostCompletion(int port, const std::string& body) {
  return HttpExchange(port,
                      absl::StrCat("POST /v1/completions HTTP/1.0\r\nHost: localhost\r\n"
                                   "Content-Type: application/json\r\nContent-Length: ",
                                   body.size(), "\r\n\r\n", body),
                      30);
}

class GatewayDrainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_.AddWorker("w:1", FakeModelInfo("tiny"));
    GatewayServerOptions options;
    options.host = "127.0.0.1";
    options.grpc_port = 0;
    options.http_port = 0;
    options.worker_client = &fake_;
    options.drain_timeout = kPatience;
    absl::StatusOr<std::unique_ptr<GatewayServer>> gateway = GatewayServer::Start(options);
    ASSERT_TRUE(gateway.ok()) << gateway.status();
    gateway_ = *std::move(gateway);
    stub_ = ::llmserve::v1::Inference::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", gateway_->grpc_port()), grpc::InsecureChannelCredentials()));
  }

  std::vector<int32_t> Ids(const std::string& text) {
    return *model_->tokenizer()->Encode(text, /*add_special_tokens=*/false);
  }

  FakeWorkerClient fake_;
  std::shared_ptr<const ServedModel> model_ = *ServedModel::Create(FakeModelInfo("tiny"));
  std::unique_ptr<GatewayServer> gateway_;
  std::unique_ptr<::llmserve::v1::Inference::Stub> stub_;
};

TEST_F(GatewayDrainTest, OpenStreamsOfBothApisFinishWhileNewRequestsAreRefused) {
  const int port = gateway_->http_port();
  std::string http_response;
  std::thread http_client([&] {
    http_response =
        PostCompletion(port, R"({"model":"tiny","prompt":"hi","max_tokens":8,"stream":true})");
  });
  std::string grpc_text;
  grpc::Status grpc_status;
  std::thread grpc_client([&] {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kPatience));
    ::llmserve::v1::GenerateRequest request;
    request.set_text("hi");
    request.mutable_stopping()->set_max_tokens(8);
    auto reader = stub_->GenerateStream(&context, request);
    ::llmserve::v1::GenerateStreamResponse message;
    while (reader->Read(&message)) grpc_text += message.text();
    grpc_status = reader->Finish();
  });
  std::shared_ptr<FakeCall> first = fake_.WaitForCall(0);
  std::shared_ptr<FakeCall> second = fake_.WaitForCall(1);
  ASSERT_TRUE(first != nullptr && second != nullptr);
  ASSERT_TRUE(first->Send(Ids("Hello")));
  ASSERT_TRUE(second->Send(Ids("Hello")));
  EXPECT_EQ(gateway_->active_requests(), 2);

  int left = -1;
  std::thread drain([&] { left = gateway_->Drain(); });
  // Not ready any more, while the listeners stay open.
  const absl::Time deadline = absl::Now() + kPatience;
  std::string readyz;
  while (absl::Now() < deadline) {
    readyz = HttpExchange(port, "GET /readyz HTTP/1.0\r\nHost: localhost\r\n\r\n", 10);
    if (absl::StartsWith(readyz, "HTTP/1.1 503")) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(absl::StartsWith(readyz, "HTTP/1.1 503")) << readyz;
  // New requests on both APIs are refused, and counted as such.
  const std::string refused = PostCompletion(port, R"({"model":"tiny","prompt":"x"})");
  EXPECT_TRUE(absl::StartsWith(refused, "HTTP/1.1 503")) << refused;
  EXPECT_TRUE(absl::StrContains(refused, "draining")) << refused;
  {
    grpc::ClientContext context;
    ::llmserve::v1::GenerateRequest request;
    request.set_text("x");
    ::llmserve::v1::GenerateResponse response;
    const grpc::Status status = stub_->Generate(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  }
  EXPECT_EQ(gateway_->active_requests(), 2);
  EXPECT_EQ(fake_.calls_started(), 2u);

  // The open streams run to their end.
  ASSERT_TRUE(first->Send(Ids(" there"), ::llmserve::v1::FINISH_REASON_LENGTH));
  ASSERT_TRUE(second->Send(Ids(" there"), ::llmserve::v1::FINISH_REASON_LENGTH));
  http_client.join();
  grpc_client.join();
  drain.join();
  EXPECT_EQ(left, 0);
  EXPECT_EQ(gateway_->active_requests(), 0);
  EXPECT_TRUE(grpc_status.ok()) << grpc_status.error_message();
  EXPECT_EQ(grpc_text, "Hello there");
  EXPECT_TRUE(absl::StartsWith(http_response, "HTTP/1.1 200")) << http_response;
  EXPECT_TRUE(absl::StrContains(http_response, "\"finish_reason\":\"length\"")) << http_response;
  EXPECT_TRUE(absl::StrContains(http_response, "data: [DONE]")) << http_response;
}

TEST_F(GatewayDrainTest, ADrainTimeoutCancelsWhatIsStillRunning) {
  gateway_.reset();
  GatewayServerOptions options;
  options.host = "127.0.0.1";
  options.grpc_port = 0;
  options.http_port = 0;
  options.worker_client = &fake_;
  options.drain_timeout = absl::Milliseconds(300);
  absl::StatusOr<std::unique_ptr<GatewayServer>> gateway = GatewayServer::Start(options);
  ASSERT_TRUE(gateway.ok()) << gateway.status();
  const int port = (*gateway)->http_port();
  std::string http_response;
  std::thread http_client([&] {
    http_response =
        PostCompletion(port, R"({"model":"tiny","prompt":"hi","max_tokens":8,"stream":true})");
  });
  std::shared_ptr<FakeCall> call = fake_.WaitForCall(0);
  ASSERT_NE(call, nullptr);
  ASSERT_TRUE(call->Send(Ids("Hello")));
  // The worker never finishes: the drain gives up after its timeout and the worker call is
  // cancelled (which frees its KV blocks on a real worker).
  EXPECT_EQ((*gateway)->Drain(), 1);
  EXPECT_TRUE(call->WaitUntilCancelled(kPatience));
  http_client.join();
  EXPECT_FALSE(absl::StrContains(http_response, "data: [DONE]")) << http_response;
  gateway->reset();
}

}  // namespace
}  // namespace llmserve::gateway
