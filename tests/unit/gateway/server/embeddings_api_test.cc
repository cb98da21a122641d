// POST /v1/embeddings through a whole gateway in front of the in-memory FakeWorkerClient: what
// the workers are asked, the list object in input order whatever order the workers answer in,
// floats that read back exactly (and base64), a bounded number of inputs on the workers at once,
// and refusals that name the field.

#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gateway/pipeline/embedding_run.h"
#include "gateway/server/gateway_server.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_worker_client.h"
#include "tests/testing/http_get.h"
#include "tests/testing/http_response_json.h"

namespace llmserve::gateway {
namespace {

using ::llmserve::testing::FakeCall;
using ::llmserve::testing::FakeEmbeddingModelInfo;
using ::llmserve::testing::FakeModelInfo;
using ::llmserve::testing::FakeWorkerClient;
using ::llmserve::testing::HttpExchange;
using ::llmserve::testing::HttpPostRequest;
using ::llmserve::testing::HttpResponseJson;
using ::llmserve::testing::HttpStatus;

// Values no short decimal spells: a float printed with too few digits would not read back.
std::vector<float> Vector(int seed, int size) {
  std::vector<float> values(size);
  for (int i = 0; i < size; ++i) values[i] = 1.0f / (3.0f + seed * 7 + i) - 0.1f * (i % 3);
  return values;
}

class EmbeddingsApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_.AddWorker("e:1", FakeEmbeddingModelInfo("embedder", 8, {4, 8}));
    fake_.AddWorker("g:1", FakeModelInfo("writer"));
    GatewayServerOptions options;
    options.host = "127.0.0.1";
    options.grpc_port = 0;
    options.http_port = 0;
    options.worker_client = &fake_;
    absl::StatusOr<std::unique_ptr<GatewayServer>> gateway = GatewayServer::Start(options);
    ASSERT_TRUE(gateway.ok()) << gateway.status();
    gateway_ = *std::move(gateway);
  }

  std::string Post(const std::string& path, const std::string& body) {
    return HttpExchange(gateway_->http_port(), HttpPostRequest(path, body), 30);
  }

  void ExpectRefused(const std::string& body, const std::string& fragment,
                     const std::string& path = "/v1/embeddings") {
    const std::string response = Post(path, body);
    EXPECT_EQ(HttpStatus(response), 400) << response;
    EXPECT_TRUE(absl::StrContains(response, fragment)) << fragment << "\n" << response;
  }

  FakeWorkerClient fake_;
  std::unique_ptr<GatewayServer> gateway_;
};

TEST_F(EmbeddingsApiTest, EachInputIsOneWorkerRequestAndTheListKeepsTheirOrder) {
  std::string response;
  std::thread client([&] {
    response = Post("/v1/embeddings",
                    R"({"model": "embedder", "input": ["first text", [5, 6, 7], "third"],
                        "dimensions": 4, "user": "u"})");
  });
  std::vector<std::shared_ptr<FakeCall>> calls;
  for (size_t i = 0; i < 3; ++i) {
    calls.push_back(fake_.WaitForCall(i));
    ASSERT_NE(calls.back(), nullptr);
  }
  // The workers answer in reverse; the prompt says which input a call is.
  for (int i = 2; i >= 0; --i) {
    const auto& request = calls[i]->request();
    EXPECT_TRUE(request.has_embedding());
    EXPECT_EQ(request.embedding().dimensions(), 4u);
    EXPECT_FALSE(request.has_sampling());
    EXPECT_EQ(request.max_tokens(), 0u);
    EXPECT_EQ(calls[i]->address(), "e:1");
    ASSERT_TRUE(calls[i]->SendEmbedding(Vector(i, 4)));
  }
  client.join();
  ASSERT_EQ(HttpStatus(response), 200) << response;
  const nlohmann::json body = HttpResponseJson(response);
  EXPECT_EQ(body["object"], "list");
  EXPECT_EQ(body["model"], "embedder");
  ASSERT_EQ(body["data"].size(), 3u);
  int64_t prompt_tokens = 0;
  for (size_t i = 0; i < 3; ++i) prompt_tokens += calls[i]->request().prompt_token_ids_size();
  EXPECT_EQ(body["usage"]["prompt_tokens"], prompt_tokens);
  EXPECT_EQ(body["usage"]["total_tokens"], prompt_tokens);
  EXPECT_EQ(calls[1]->request().prompt_token_ids_size(), 3);
  for (size_t index = 0; index < 3; ++index) {
    const nlohmann::json& item = body["data"][index];
    EXPECT_EQ(item["object"], "embedding");
    EXPECT_EQ(item["index"], index);
    // Calls start in input order, and call i was answered with Vector(i).
    const std::vector<float> want = Vector(static_cast<int>(index), 4);
    ASSERT_EQ(item["embedding"].size(), 4u);
    for (size_t j = 0; j < 4; ++j) {
      EXPECT_EQ(item["embedding"][j].get<float>(), want[j]) << "input " << index << " value " << j;
    }
  }
}

TEST_F(EmbeddingsApiTest, Base64IsTheLittleEndianFloat32Bytes) {
  std::string response;
  std::thread client([&] {
    response = Post("/v1/embeddings",
                    R"({"model": "embedder", "input": "hello", "encoding_format": "base64"})");
  });
  std::shared_ptr<FakeCall> call = fake_.WaitForCall(0);
  ASSERT_NE(call, nullptr);
  ASSERT_TRUE(call->SendEmbedding(Vector(3, 8)));
  client.join();
  ASSERT_EQ(HttpStatus(response), 200) << response;
  std::string bytes;
  ASSERT_TRUE(absl::Base64Unescape(
      HttpResponseJson(response)["data"][0]["embedding"].get<std::string>(), &bytes));
  ASSERT_EQ(bytes.size(), 8 * sizeof(float));
  std::vector<float> got(8);
  std::memcpy(got.data(), bytes.data(), bytes.size());
  EXPECT_EQ(got, Vector(3, 8));
}

TEST_F(EmbeddingsApiTest, AtMostAWindowOfInputsIsOnTheWorkersAtOnce) {
  const int inputs = kMaxEmbeddingInputsRunning + 3;
  nlohmann::json list = nlohmann::json::array();
  for (int i = 0; i < inputs; ++i) list.push_back({i + 1});
  std::string response;
  std::thread client([&] {
    response =
        Post("/v1/embeddings", nlohmann::json({{"model", "embedder"}, {"input", list}}).dump());
  });
  ASSERT_NE(fake_.WaitForCall(kMaxEmbeddingInputsRunning - 1), nullptr);
  EXPECT_EQ(fake_.WaitForCall(kMaxEmbeddingInputsRunning, absl::Milliseconds(100)), nullptr)
      << "more than the window started";
  for (int i = 0; i < inputs; ++i) {
    std::shared_ptr<FakeCall> call = fake_.WaitForCall(i);
    ASSERT_NE(call, nullptr) << i;
    ASSERT_TRUE(call->SendEmbedding(Vector(call->request().prompt_token_ids(0), 8)));
  }
  client.join();
  ASSERT_EQ(HttpStatus(response), 200) << response;
  const nlohmann::json body = HttpResponseJson(response);
  ASSERT_EQ(body["data"].size(), static_cast<size_t>(inputs));
  for (int i = 0; i < inputs; ++i) {
    EXPECT_EQ(body["data"][i]["embedding"][0].get<float>(), Vector(i + 1, 8)[0]) << i;
  }
  EXPECT_EQ(body["usage"]["prompt_tokens"], inputs);
}

TEST_F(EmbeddingsApiTest, AFailedInputFailsTheRequestCancelsTheOthersAndStartsNoMore) {
  const int inputs = kMaxEmbeddingInputsRunning + 5;
  nlohmann::json list = nlohmann::json::array();
  for (int i = 0; i < inputs; ++i) list.push_back({i + 1});
  std::string response;
  std::thread client([&] {
    response =
        Post("/v1/embeddings", nlohmann::json({{"model", "embedder"}, {"input", list}}).dump());
  });
  std::shared_ptr<FakeCall> first = fake_.WaitForCall(0);
  ASSERT_NE(first, nullptr);
  ASSERT_TRUE(first->Finish(absl::InvalidArgumentError("prompt_token_ids[0]: refused")));
  // The answer comes once every other call on the workers was cancelled (their blocks freed),
  // and no input past the window started.
  client.join();
  EXPECT_EQ(HttpStatus(response), 400) << response;
  EXPECT_TRUE(absl::StrContains(response, "prompt_token_ids[0]: refused")) << response;
  const size_t started = fake_.calls_started();
  EXPECT_LE(started, static_cast<size_t>(kMaxEmbeddingInputsRunning));
  for (size_t i = 1; i < started; ++i) {
    EXPECT_TRUE(fake_.WaitForCall(i)->WaitUntilCancelled(absl::Seconds(10))) << i;
  }
}

TEST_F(EmbeddingsApiTest, RefusesByName) {
  ExpectRefused(R"({"model": "embedder"})", "'input' is required");
  ExpectRefused(R"({"model": "embedder", "input": []})", "'input' must not be empty");
  ExpectRefused(R"({"model": "embedder", "input": [""]})", "'input[0]' must not be empty");
  ExpectRefused(R"({"model": "embedder", "input": [[1, -2]]})", "'input[0][1]'");
  ExpectRefused(R"({"model": "embedder", "input": [[1, 99999]]})",
                "'input[0][1]' is 99999, outside the vocabulary");
  ExpectRefused(R"({"model": "embedder", "input": [{"a": 1}]})", "'input[0]' must be");
  ExpectRefused(R"({"model": "embedder", "input": "x", "encoding_format": "hex"})",
                "'encoding_format'");
  ExpectRefused(R"({"model": "embedder", "input": "x", "dimensions": 6})",
                "'dimensions' is 6; model \\\"embedder\\\" supports 4, 8");
  ExpectRefused(R"({"model": "embedder", "input": "x", "dimensions": 0})", "'dimensions'");
  ExpectRefused(R"({"model": "embedder", "input": "x", "truncate": true})",
                "'truncate' is not a field");
  ExpectRefused(R"({"model": "writer", "input": "x"})",
                "generates text; embeddings need a model whose workers run with --task=embed");
  ExpectRefused(R"({"model": "embedder", "prompt": "x"})", "'prompt' is not a field");
  nlohmann::json many = nlohmann::json::array();
  for (int i = 0; i <= kMaxEmbeddingInputs; ++i) many.push_back("x");
  ExpectRefused(nlohmann::json({{"model", "embedder"}, {"input", many}}).dump(), "at most 2048");
  std::vector<int> long_input(513, 1);
  ExpectRefused(nlohmann::json({{"model", "embedder"}, {"input", {long_input}}}).dump(),
                "'input[0]' is 513 tokens; model \\\"embedder\\\" takes at most 512");
  ExpectRefused(R"({"model": "embedder", "prompt": "hi", "max_tokens": 3})", "serves embeddings",
                "/v1/completions");
  EXPECT_EQ(fake_.calls_started(), 0u);
}

}  // namespace
}  // namespace llmserve::gateway
