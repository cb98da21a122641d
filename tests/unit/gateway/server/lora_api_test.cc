// LoRA adapters as models through the whole gateway, in front of the in-memory FakeWorkerClient:
// /v1/models lists each adapter a worker has loaded with its base model as parent, a request
// naming an adapter goes only to a worker that has it, carrying the adapter's name, and a name
// nobody serves is refused. The admin endpoints load and unload adapters (admin keys only), a
// request whose adapter no worker has any more loads it on demand, and API keys limited to models
// use only those.

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gateway/admission/api_key_store.h"
#include "gateway/server/gateway_server.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_worker_client.h"
#include "tests/testing/http_get.h"
#include "tests/testing/http_response_json.h"
#include "tests/testing/scoped_temp_dir.h"

namespace llmserve::gateway {
namespace {

using ::llmserve::testing::FakeCall;
using ::llmserve::testing::FakeLoraCall;
using ::llmserve::testing::FakeLoraModelInfo;
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

// Workers "fixed:1" (tiny, adapter "sql" from its start, no runtime loads) and "r1:1", "r2:1"
// (tiny, runtime loads), behind a gateway with API keys: "ops" (admin), "app" (limited to "sql"),
// "all" (every model, not admin).
class LoraAdminApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_.AddWorker("fixed:1", FakeLoraModelInfo("tiny", 2, {"sql"}, false));
    for (const char* address : {"r1:1", "r2:1"}) {
      fake_.AddWorker(address, FakeLoraModelInfo("tiny", 4, {}, true));
    }
    fake_.SetLoraAnswer([](const FakeLoraCall&) { return absl::OkStatus(); });
    const std::string keys = dir_.File("keys.txt");
    std::ofstream(keys) << "ops " << Sha256Hex("ops-key") << " admin\n"
                        << "app " << Sha256Hex("app-key") << " models=sql\n"
                        << "all " << Sha256Hex("all-key") << "\n";
    GatewayServerOptions options;
    options.host = "127.0.0.1";
    options.grpc_port = 0;
    options.http_port = 0;
    options.worker_client = &fake_;
    options.api_keys_file = keys;
    options.lora_load_timeout = absl::Seconds(9);
    absl::StatusOr<std::unique_ptr<GatewayServer>> gateway = GatewayServer::Start(options);
    ASSERT_TRUE(gateway.ok()) << gateway.status();
    gateway_ = *std::move(gateway);
  }

  std::string Post(const std::string& path, const nlohmann::json& body, const std::string& key) {
    return HttpExchange(gateway_->http_port(),
                        HttpPostRequest(path, body.dump(), absl::StrCat("Bearer ", key)), 30);
  }
  nlohmann::json Models(const std::string& key) {
    const std::string response = HttpExchange(
        gateway_->http_port(),
        absl::StrCat("GET /v1/models HTTP/1.0\r\nHost: localhost\r\nauthorization: Bearer ", key,
                     "\r\n\r\n"),
        10);
    EXPECT_EQ(HttpStatus(response), 200) << response;
    return HttpResponseJson(response);
  }
  static std::vector<std::string> Ids(const nlohmann::json& models) {
    std::vector<std::string> ids;
    for (const nlohmann::json& model : models["data"]) ids.push_back(model["id"]);
    return ids;
  }
  // A completion of `model` with `key`; when it reaches a worker (the `index`-th call), the worker
  // answers it. The response, and the call (null when none came).
  std::pair<std::string, std::shared_ptr<FakeCall>> Complete(const std::string& model,
                                                             const std::string& key, size_t index) {
    std::string response;
    std::thread client([&] {
      response =
          Post("/v1/completions", {{"model", model}, {"prompt", "hi"}, {"max_tokens", 2}}, key);
    });
    std::shared_ptr<FakeCall> call = fake_.WaitForCall(index, absl::Seconds(5));
    if (call != nullptr) call->Send({'o', 'k'}, ::llmserve::v1::FINISH_REASON_LENGTH);
    client.join();
    return {response, call};
  }

  ::llmserve::testing::ScopedTempDir dir_;
  FakeWorkerClient fake_;
  std::unique_ptr<GatewayServer> gateway_;
};

TEST_F(LoraAdminApiTest, AnAdminLoadsAnAdapterOnEveryRuntimeWorkerAndUnloadsIt) {
  const std::string loaded = Post(
      "/v1/load_lora_adapter", {{"lora_name", "chat"}, {"lora_path", "/adapters/chat"}}, "ops-key");
  ASSERT_EQ(HttpStatus(loaded), 200) << loaded;
  const nlohmann::json answer = HttpResponseJson(loaded);
  EXPECT_EQ(answer["lora_name"], "chat");
  EXPECT_EQ(answer["base_model_name"], "tiny");
  EXPECT_EQ(answer["workers"], nlohmann::json({"r1:1", "r2:1"}));
  EXPECT_EQ(answer["message"], "Success: LoRA adapter 'chat' added successfully.");
  ASSERT_EQ(fake_.lora_calls().size(), 2u);
  EXPECT_EQ(fake_.lora_calls()[0].lora_path, "/adapters/chat");
  EXPECT_EQ(Ids(Models("all-key")), (std::vector<std::string>{"chat", "sql", "tiny"}));

  auto [response, call] = Complete("chat", "all-key", 0);
  ASSERT_EQ(HttpStatus(response), 200) << response;
  ASSERT_NE(call, nullptr);
  EXPECT_NE(call->address(), "fixed:1");
  EXPECT_EQ(call->request().lora_adapter(), "chat");

  const std::string unloaded = Post("/v1/unload_lora_adapter", {{"lora_name", "chat"}}, "ops-key");
  ASSERT_EQ(HttpStatus(unloaded), 200) << unloaded;
  EXPECT_EQ(HttpResponseJson(unloaded)["workers"], nlohmann::json({"r1:1", "r2:1"}));
  EXPECT_EQ(Ids(Models("all-key")), (std::vector<std::string>{"sql", "tiny"}));
  const std::string gone = Post("/v1/unload_lora_adapter", {{"lora_name", "chat"}}, "ops-key");
  EXPECT_EQ(HttpStatus(gone), 404) << gone;
  EXPECT_EQ(HttpStatus(Complete("chat", "all-key", 1).first), 404);
}

TEST_F(LoraAdminApiTest, OnlyAdminsMayLoadAndBadBodiesAreRefusedByName) {
  for (const char* key : {"all-key", "app-key"}) {
    const std::string refused =
        Post("/v1/load_lora_adapter", {{"lora_name", "x"}, {"lora_path", "/p"}}, key);
    EXPECT_EQ(HttpStatus(refused), 403) << refused;
    EXPECT_TRUE(absl::StrContains(refused, "may not load or unload LoRA adapters")) << refused;
    EXPECT_EQ(HttpStatus(Post("/v1/unload_lora_adapter", {{"lora_name", "sql"}}, key)), 403);
  }
  EXPECT_EQ(HttpStatus(Post("/v1/load_lora_adapter", {{"lora_name", "x"}}, "wrong-key")), 401);
  struct Case {
    std::string path;
    nlohmann::json body;
    int status;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"/v1/load_lora_adapter", {{"lora_name", "x"}}, 400, "'lora_path' is required"},
      {"/v1/load_lora_adapter", {{"lora_path", "/p"}}, 400, "'lora_name' is required"},
      {"/v1/load_lora_adapter",
       {{"lora_name", "x"}, {"lora_path", "/p"}, {"load_inplace", true}},
       400,
       "'load_inplace' true is not supported"},
      {"/v1/load_lora_adapter",
       {{"lora_name", "x"}, {"lora_path", "/p"}, {"rank", 8}},
       400,
       "'rank' is not a field"},
      {"/v1/load_lora_adapter", {{"lora_name", 3}, {"lora_path", "/p"}}, 400, "must be a string"},
      {"/v1/load_lora_adapter", {{"lora_name", "tiny"}, {"lora_path", "/p"}}, 409, "a model"},
      {"/v1/load_lora_adapter", {{"lora_name", "sql"}, {"lora_path", "/p"}}, 409, "already"},
      {"/v1/load_lora_adapter",
       {{"lora_name", "x"}, {"lora_path", "/p"}, {"base_model_name", "big"}},
       404,
       "no worker serves model"},
      {"/v1/unload_lora_adapter", {{"lora_name", "nope"}}, 404, "is not loaded"},
      {"/v1/unload_lora_adapter",
       {{"lora_int_id", "1"}, {"lora_name", "x"}},
       400,
       "'lora_int_id' must be an integer"},
  };
  for (const Case& c : cases) {
    const std::string response = Post(c.path, c.body, "ops-key");
    EXPECT_EQ(HttpStatus(response), c.status) << c.body << " -> " << response;
    EXPECT_TRUE(absl::StrContains(response, c.message)) << c.body << " -> " << response;
  }
  EXPECT_TRUE(fake_.lora_calls().empty());
}

TEST_F(LoraAdminApiTest, ARequestWhoseAdapterNoWorkerHasLoadsItOnDemand) {
  ASSERT_EQ(HttpStatus(Post("/v1/load_lora_adapter",
                            {{"lora_name", "chat"}, {"lora_path", "/adapters/chat"}}, "ops-key")),
            200);
  // Both workers lost it (they restarted): the next request loads it again, on one of them.
  for (const char* address : {"r1:1", "r2:1"}) {
    absl::Notification dropped;
    fake_.UnloadLoraAdapter(address, "chat", absl::InfiniteFuture(),
                            [&](absl::Status) { dropped.Notify(); });
    dropped.WaitForNotification();
  }
  EXPECT_EQ(Ids(Models("all-key")), (std::vector<std::string>{"chat", "sql", "tiny"}));
  const absl::Time before = absl::Now();
  auto [response, call] = Complete("chat", "all-key", 0);
  ASSERT_EQ(HttpStatus(response), 200) << response;
  ASSERT_EQ(fake_.lora_calls().size(), 5u);
  const FakeLoraCall load = fake_.lora_calls()[4];
  EXPECT_TRUE(load.load);
  EXPECT_EQ(load.lora_path, "/adapters/chat");
  EXPECT_GE(load.deadline, before + absl::Seconds(9));  // --lora_load_timeout
  ASSERT_NE(call, nullptr);
  EXPECT_EQ(call->address(), load.address);
  EXPECT_EQ(call->request().lora_adapter(), "chat");

  // A load that fails fails the request with the worker's reason.
  for (const char* address : {"r1:1", "r2:1"}) {
    absl::Notification dropped;
    fake_.UnloadLoraAdapter(address, "chat", absl::InfiniteFuture(),
                            [&](absl::Status) { dropped.Notify(); });
    dropped.WaitForNotification();
  }
  fake_.SetLoraAnswer([](const FakeLoraCall& call) {
    return call.load ? absl::NotFoundError("/adapters/chat: no such directory") : absl::OkStatus();
  });
  const std::string failed = Complete("chat", "all-key", 1).first;
  EXPECT_EQ(HttpStatus(failed), 404) << failed;
  EXPECT_TRUE(absl::StrContains(failed, "loading LoRA adapter \\\"chat\\\" on worker")) << failed;
  EXPECT_TRUE(absl::StrContains(failed, "no such directory")) << failed;
}

TEST_F(LoraAdminApiTest, AWorkerThatLostTheAdapterIsLeftForOneThatHasItOrLoadsIt) {
  ASSERT_EQ(HttpStatus(Post("/v1/load_lora_adapter",
                            {{"lora_name", "chat"}, {"lora_path", "/adapters/chat"}}, "ops-key")),
            200);
  // The first worker tried answers as a worker that lost the adapter (restarted since its last
  // load report); the request goes on to the other, which has it.
  std::string response;
  std::thread client([&] {
    response = Post("/v1/completions", {{"model", "chat"}, {"prompt", "hi"}, {"max_tokens", 2}},
                    "all-key");
  });
  std::shared_ptr<FakeCall> first = fake_.WaitForCall(0);
  ASSERT_NE(first, nullptr);
  first->Finish(absl::NotFoundError("LoRA adapter \"chat\" is not loaded on this worker"));
  std::shared_ptr<FakeCall> second = fake_.WaitForCall(1);
  ASSERT_NE(second, nullptr);
  EXPECT_NE(second->address(), first->address());
  second->Send({'o', 'k'}, ::llmserve::v1::FINISH_REASON_LENGTH);
  client.join();
  EXPECT_EQ(HttpStatus(response), 200) << response;
  EXPECT_EQ(fake_.missing_reports(), std::vector<std::string>{first->address() + " chat"});
  EXPECT_EQ(fake_.lora_calls().size(), 2u);  // no load: a worker had it

  // Now the other loses it too: no worker has it, so it is loaded again on demand.
  std::thread again([&] {
    response = Post("/v1/completions", {{"model", "chat"}, {"prompt", "hi"}, {"max_tokens", 2}},
                    "all-key");
  });
  std::shared_ptr<FakeCall> third = fake_.WaitForCall(2);
  ASSERT_NE(third, nullptr);
  EXPECT_EQ(third->address(), second->address());
  third->Finish(absl::NotFoundError("LoRA adapter \"chat\" is not loaded on this worker"));
  std::shared_ptr<FakeCall> fourth = fake_.WaitForCall(3);
  ASSERT_NE(fourth, nullptr);
  fourth->Send({'o', 'k'}, ::llmserve::v1::FINISH_REASON_LENGTH);
  again.join();
  EXPECT_EQ(HttpStatus(response), 200) << response;
  ASSERT_EQ(fake_.lora_calls().size(), 3u);
  EXPECT_TRUE(fake_.lora_calls()[2].load);
  EXPECT_EQ(fake_.lora_calls()[2].address, fourth->address());
}

TEST_F(LoraAdminApiTest, KeysLimitedToModelsListAndUseOnlyThose) {
  EXPECT_EQ(Ids(Models("app-key")), std::vector<std::string>{"sql"});
  EXPECT_EQ(Ids(Models("all-key")), (std::vector<std::string>{"sql", "tiny"}));
  auto [allowed, call] = Complete("sql", "app-key", 0);
  EXPECT_EQ(HttpStatus(allowed), 200) << allowed;
  ASSERT_NE(call, nullptr);
  EXPECT_EQ(call->request().lora_adapter(), "sql");
  const std::string refused = Complete("tiny", "app-key", 1).first;
  EXPECT_EQ(HttpStatus(refused), 403) << refused;
  EXPECT_TRUE(absl::StrContains(refused, "API key \\\"app\\\" may not use model \\\"tiny\\\""))
      << refused;
  EXPECT_EQ(fake_.calls_started(), 1u);
  const std::string embeddings =
      Post("/v1/embeddings", {{"model", "tiny"}, {"input", "hi"}}, "app-key");
  EXPECT_EQ(HttpStatus(embeddings), 403) << embeddings;
}

TEST_F(LoraAdminApiTest, ErrorsAndTheDefaultModelConsiderOnlyTheModelsTheKeyMayUse) {
  const nlohmann::json body = {{"model", "no-such-model"}, {"prompt", "hi"}, {"max_tokens", 2}};
  const std::string limited = Post("/v1/completions", body, "app-key");
  EXPECT_EQ(HttpStatus(limited), 404) << limited;
  EXPECT_TRUE(absl::StrContains(limited, "does not exist; served: sql\"")) << limited;
  EXPECT_FALSE(absl::StrContains(limited, "tiny")) << limited;
  const std::string unlimited = Post("/v1/completions", body, "all-key");
  EXPECT_EQ(HttpStatus(unlimited), 404) << unlimited;
  EXPECT_TRUE(absl::StrContains(unlimited, "served: sql, tiny")) << unlimited;
  EXPECT_EQ(fake_.calls_started(), 0u);

  // Without `model`: the only model the key may use (an unlimited key must name one of two).
  const nlohmann::json unnamed = {{"prompt", "hi"}, {"max_tokens", 2}};
  const std::string ambiguous = Post("/v1/completions", unnamed, "all-key");
  EXPECT_EQ(HttpStatus(ambiguous), 400) << ambiguous;
  EXPECT_TRUE(absl::StrContains(ambiguous, "serves several: sql, tiny")) << ambiguous;
  std::string picked;
  std::thread client([&] { picked = Post("/v1/completions", unnamed, "app-key"); });
  std::shared_ptr<FakeCall> call = fake_.WaitForCall(0, absl::Seconds(5));
  if (call != nullptr) call->Send({'o', 'k'}, ::llmserve::v1::FINISH_REASON_LENGTH);
  client.join();
  EXPECT_EQ(HttpStatus(picked), 200) << picked;
  ASSERT_NE(call, nullptr);
  EXPECT_EQ(call->request().lora_adapter(), "sql");
}

}  // namespace
}  // namespace llmserve::gateway
