// The fixture of the gateway's in-process tests: a gateway in front of two real workers (in
// process too) serving a tiny generated model, with helpers for its gRPC and HTTP APIs.

#ifndef LLMSERVE_TESTS_UNIT_GATEWAY_GATEWAY_TEST_FIXTURE_H_
#define LLMSERVE_TESTS_UNIT_GATEWAY_GATEWAY_TEST_FIXTURE_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "gateway/server/gateway_server.h"
#include "gtest/gtest.h"
#include "llmserve/v1/inference.grpc.pb.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/testing/test_model.h"
#include "tests/unit/gateway/http/test_http_client.h"
#include "worker/service/worker_server.h"

namespace llmserve::gateway {

inline constexpr absl::Duration kPatience = absl::Seconds(60);

class GatewayServerTest : public ::testing::Test {
 protected:
  // The slow variant (seconds for hundreds of tokens) where a request must still be running.
  virtual bool SlowModel() const { return false; }

  void SetUp() override {
    ASSERT_TRUE(::llmserve::testing::WriteTinyModel(dir_.path(), 9, SlowModel()).ok());
    for (int i = 0; i < 2; ++i) {
      absl::StatusOr<std::unique_ptr<worker::WorkerServer>> worker =
          worker::WorkerServer::Start({.model_dir = dir_.path(),
                                       .served_model_name = "tiny",
                                       .host = "127.0.0.1",
                                       .port = 0,
                                       // The slow variant's tests read how requests ended.
                                       .metrics_port = SlowModel() ? 0 : -1,
                                       .kv_cache_bytes = 64 << 20,
                                       .threads = 1});
      ASSERT_TRUE(worker.ok()) << worker.status();
      workers_.push_back(*std::move(worker));
    }
  }

  void StartGateway(GatewayServerOptions options = {}) {
    options.host = "127.0.0.1";
    options.grpc_port = 0;
    options.http_port = 0;
    for (const auto& worker : workers_) {
      options.pool.workers.push_back(absl::StrCat("127.0.0.1:", worker->port()));
    }
    options.pool.probe_interval = absl::Milliseconds(50);
    options.pool.load_interval = absl::Milliseconds(50);
    options.pool.backoff_initial = absl::Milliseconds(50);
    absl::StatusOr<std::unique_ptr<GatewayServer>> gateway = GatewayServer::Start(options);
    ASSERT_TRUE(gateway.ok()) << gateway.status();
    gateway_ = *std::move(gateway);
    stub_ = ::llmserve::v1::Inference::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", gateway_->grpc_port()), grpc::InsecureChannelCredentials()));
    const absl::Time deadline = absl::Now() + kPatience;
    while (absl::Now() < deadline) {
      int ready = 0;
      for (const WorkerStatus& worker : gateway_->workers().Workers()) ready += worker.ready;
      if (ready == 2) return;
      absl::SleepFor(absl::Milliseconds(10));
    }
    FAIL() << "workers never became ready";
  }

  // Waits (bounded) until no worker runs anything or holds a KV block.
  bool WaitForIdleWorkers() {
    const absl::Time deadline = absl::Now() + kPatience;
    while (absl::Now() < deadline) {
      bool idle = true;
      for (const auto& worker : workers_) {
        const worker::EngineCounts counts = worker->engine().Counts();
        idle = idle && counts.running == 0 &&
               counts.kv_blocks_free == worker->engine().num_kv_blocks();
      }
      if (idle) return true;
      absl::SleepFor(absl::Milliseconds(5));
    }
    return false;
  }

  struct Streamed {
    std::string text;
    std::vector<::llmserve::v1::GenerateStreamResponse> messages;
    grpc::Status status;
    // The "retry-after" trailer, empty when there is none.
    std::string retry_after;
  };
  Streamed Stream(const ::llmserve::v1::GenerateRequest& request, const std::string& key = "") {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kPatience));
    if (!key.empty()) context.AddMetadata("authorization", "Bearer " + key);
    Streamed result;
    auto reader = stub_->GenerateStream(&context, request);
    ::llmserve::v1::GenerateStreamResponse message;
    while (reader->Read(&message)) {
      result.text += message.text();
      result.messages.push_back(message);
    }
    result.status = reader->Finish();
    const auto& trailers = context.GetServerTrailingMetadata();
    if (const auto it = trailers.find("retry-after"); it != trailers.end()) {
      result.retry_after.assign(it->second.data(), it->second.size());
    }
    return result;
  }

  static ::llmserve::v1::GenerateRequest TextRequest(const std::string& text, int max_tokens) {
    ::llmserve::v1::GenerateRequest request;
    request.set_text(text);
    request.mutable_stopping()->set_max_tokens(max_tokens);
    request.mutable_stopping()->set_ignore_eos(true);
    request.mutable_sampling()->set_temperature(0);
    return request;
  }

  ::llmserve::testing::ScopedTempDir dir_{"gateway_server_test"};
  std::vector<std::unique_ptr<worker::WorkerServer>> workers_;
  std::unique_ptr<GatewayServer> gateway_;
  std::unique_ptr<::llmserve::v1::Inference::Stub> stub_;
};

// With a model slow enough (seconds for hundreds of tokens) that a request is still running when
// the test acts.
class SlowGatewayServerTest : public GatewayServerTest {
 protected:
  bool SlowModel() const override { return true; }
};

// POST `path` with `body` (JSON) on the gateway's HTTP port; `extra` headers are raw lines.
inline http::testing::TestResponse Post(int port, const std::string& path, const std::string& body,
                                        const std::string& extra = "") {
  auto client = http::testing::TestHttpClient::Connect(port);
  EXPECT_NE(client, nullptr);
  if (client == nullptr) return {};
  client->Send(absl::StrCat("POST ", path,
                            " HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n", extra,
                            "content-length: ", body.size(), "\r\n\r\n", body));
  return client->ReadResponse().value_or(http::testing::TestResponse{});
}

inline http::testing::TestResponse Get(int port, const std::string& path) {
  auto client = http::testing::TestHttpClient::Connect(port);
  EXPECT_NE(client, nullptr);
  if (client == nullptr) return {};
  client->Send(absl::StrCat("GET ", path, " HTTP/1.1\r\nhost: x\r\n\r\n"));
  return client->ReadResponse().value_or(http::testing::TestResponse{});
}

// The JSON payloads of an SSE body, "[DONE]" included as a string.
inline std::vector<std::string> SseEvents(const std::string& body) {
  std::vector<std::string> events;
  for (absl::string_view event : absl::StrSplit(body, "\n\n", absl::SkipEmpty())) {
    if (absl::ConsumePrefix(&event, "data: ")) events.emplace_back(event);
  }
  return events;
}

}  // namespace llmserve::gateway

#endif  // LLMSERVE_TESTS_UNIT_GATEWAY_GATEWAY_TEST_FIXTURE_H_
