// LoRA adapters as models through the whole gateway, in front of the in-memory FakeWorkerClient:
// /v1/models lists each adapter a worker has loaded with its base model as parent, a request
// naming an adapter goes only to a worker that has it, carrying the adapter's name, and a name
// nobody serves is refused.

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "gateway/server/gateway_server.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_worker_client.h"
#include "tests/testing/http_get.h"
#include "tests/testing/http_response_json.h"

namespace llmserve::gateway {
namespace {

using ::llmserve::testing::FakeCall;
using ::llmserve::testing::FakeModelInfo;
using ::llmserve::testing::FakeWorkerClient;
using ::llmserve::testing::HttpExchange;
using ::llmserve::testing::HttpGet;
using ::llmserve::testing::HttpPostRequest;
using ::llmserve::testing::HttpResponseJson;
using ::llmserve::testing::HttpStatus;

class LoraApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    worker::v1::ModelInfo with_adapter = FakeModelInfo("tiny");
    with_adapter.add_lora_adapters("sql");
    fake_.AddWorker("a:1", with_adapter);
    fake_.AddWorker("b:1", FakeModelInfo("tiny"));
    GatewayServerOptions options;
    options.host = "127.0.0.1";
    options.grpc_port = 0;
    options.http_port = 0;
    options.worker_client = &fake_;
    absl::StatusOr<std::unique_ptr<GatewayServer>> gateway = GatewayServer::Start(options);
    ASSERT_TRUE(gateway.ok()) << gateway.status();
    gateway_ = *std::move(gateway);
  }

  // A completion of `model` answered by the worker; the call the worker got.
  std::shared_ptr<FakeCall> Complete(const std::string& model, size_t index, nlohmann::json* body) {
    std::string response;
    std::thread client([&] {
      response = HttpExchange(
          gateway_->http_port(),
          HttpPostRequest(
              "/v1/completions",
              nlohmann::json({{"model", model}, {"prompt", "hi"}, {"max_tokens", 2}}).dump()),
          30);
    });
    std::shared_ptr<FakeCall> call = fake_.WaitForCall(index);
    if (call != nullptr) call->Send({'o', 'k'}, ::llmserve::v1::FINISH_REASON_LENGTH);
    client.join();
    EXPECT_EQ(HttpStatus(response), 200) << response;
    *body = HttpResponseJson(response);
    return call;
  }

  FakeWorkerClient fake_;
  std::unique_ptr<GatewayServer> gateway_;
};

TEST_F(LoraApiTest, AnAdapterIsAModelWhoseParentIsItsBase) {
  const nlohmann::json models = nlohmann::json::parse(HttpGet(gateway_->http_port(), "/v1/models"));
  ASSERT_EQ(models["data"].size(), 2u) << models;
  EXPECT_EQ(models["data"][0]["id"], "sql");
  EXPECT_EQ(models["data"][0]["parent"], "tiny");
  EXPECT_EQ(models["data"][0]["root"], "tiny");
  EXPECT_EQ(models["data"][1]["id"], "tiny");
  EXPECT_TRUE(models["data"][1]["parent"].is_null());
}

TEST_F(LoraApiTest, AnAdaptersRequestsGoOnlyToWorkersThatHaveIt) {
  for (size_t i = 0; i < 4; ++i) {
    nlohmann::json body;
    std::shared_ptr<FakeCall> call = Complete("sql", i, &body);
    ASSERT_NE(call, nullptr);
    EXPECT_EQ(call->address(), "a:1");
    EXPECT_EQ(call->request().lora_adapter(), "sql");
    EXPECT_EQ(body["model"], "sql");
  }
  nlohmann::json body;
  std::shared_ptr<FakeCall> base = Complete("tiny", 4, &body);
  ASSERT_NE(base, nullptr);
  EXPECT_TRUE(base->request().lora_adapter().empty());
  const std::string unknown = HttpExchange(
      gateway_->http_port(),
      HttpPostRequest("/v1/completions", R"({"model": "nope", "prompt": "hi", "max_tokens": 2})"),
      30);
  EXPECT_EQ(HttpStatus(unknown), 404) << unknown;
  EXPECT_TRUE(absl::StrContains(unknown, "sql")) << unknown;  // the error lists what is served
}

}  // namespace
}  // namespace llmserve::gateway
