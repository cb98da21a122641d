// The caller's W3C trace context through both APIs of the whole gateway to the worker call, in
// front of the in-memory FakeWorkerClient: passed on unchanged with tracing off, continued (same
// trace, the attempt's span as parent) with tracing on. The spans themselves, exported and
// decoded, are tests/e2e/tracing/'s.

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/tracing/trace_context.h"
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

constexpr char kCaller[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
constexpr absl::Duration kPatience = absl::Seconds(30);

class TracePropagationTest : public ::testing::Test {
 protected:
  void Start(bool tracing) {
    fake_.AddWorker("w:1", FakeModelInfo("tiny"));
    GatewayServerOptions options;
    options.host = "127.0.0.1";
    options.grpc_port = 0;
    options.http_port = 0;
    options.worker_client = &fake_;
    // Nothing listens on port 1: exports fail in the background, which costs requests nothing.
    if (tracing) options.tracing = {.endpoint = "http://127.0.0.1:1/v1/traces"};
    absl::StatusOr<std::unique_ptr<GatewayServer>> gateway = GatewayServer::Start(options);
    ASSERT_TRUE(gateway.ok()) << gateway.status();
    gateway_ = *std::move(gateway);
    stub_ = ::llmserve::v1::Inference::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", gateway_->grpc_port()), grpc::InsecureChannelCredentials()));
  }

  // A gRPC Generate with `traceparent` in its metadata; the traceparent its worker call got.
  std::string ThroughGrpc(int call_index) {
    grpc::Status status;
    std::thread client([&] {
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(absl::Now() + kPatience));
      context.AddMetadata("traceparent", kCaller);
      ::llmserve::v1::GenerateRequest request;
      request.set_text("hi");
      request.mutable_stopping()->set_max_tokens(2);
      ::llmserve::v1::GenerateResponse response;
      status = stub_->Generate(&context, request, &response);
    });
    std::string traceparent = Finish(call_index);
    client.join();
    EXPECT_TRUE(status.ok()) << status.error_message();
    return traceparent;
  }

  // An OpenAI completion with a `traceparent` header; the traceparent its worker call got.
  std::string ThroughHttp(int call_index) {
    std::string response;
    std::thread client([&] {
      const std::string body = R"({"model":"tiny","prompt":"hi","max_tokens":2})";
      response = HttpExchange(
          gateway_->http_port(),
          absl::StrCat("POST /v1/completions HTTP/1.0\r\nHost: localhost\r\ntraceparent: ", kCaller,
                       "\r\nContent-Type: application/json\r\nContent-Length: ", body.size(),
                       "\r\n\r\n", body),
          30);
    });
    std::string traceparent = Finish(call_index);
    client.join();
    EXPECT_TRUE(absl::StartsWith(response, "HTTP/1.1 200")) << response;
    return traceparent;
  }

  std::string Finish(int call_index) {
    std::shared_ptr<FakeCall> call = fake_.WaitForCall(call_index);
    if (call == nullptr) return "no call";
    call->Send({5}, ::llmserve::v1::FINISH_REASON_LENGTH);
    return call->traceparent();
  }

  FakeWorkerClient fake_;
  std::unique_ptr<GatewayServer> gateway_;
  std::unique_ptr<::llmserve::v1::Inference::Stub> stub_;
};

TEST_F(TracePropagationTest, WithTracingOffTheCallersContextReachesTheWorkerUnchanged) {
  Start(/*tracing=*/false);
  EXPECT_EQ(ThroughGrpc(0), kCaller);
  EXPECT_EQ(ThroughHttp(1), kCaller);
}

TEST_F(TracePropagationTest, WithTracingOnTheWorkerGetsTheSameTraceUnderANewSpan) {
  Start(/*tracing=*/true);
  const common::tracing::TraceContext caller = *common::tracing::ParseTraceParent(kCaller);
  for (const std::string& sent : {ThroughGrpc(0), ThroughHttp(1)}) {
    std::optional<common::tracing::TraceContext> context = common::tracing::ParseTraceParent(sent);
    ASSERT_TRUE(context.has_value()) << sent;
    EXPECT_EQ(context->trace_id, caller.trace_id);
    EXPECT_NE(context->span_id, caller.span_id);  // the gateway's attempt span
    EXPECT_TRUE(context->sampled());
  }
}

}  // namespace
}  // namespace llmserve::gateway
