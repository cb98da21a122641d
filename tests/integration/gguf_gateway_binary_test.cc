// A GGUF file served by the whole stack: llmserve-worker --model stories260K-f32.gguf (its
// tokenizer from the file's tokenizer.ggml.* keys, sent in GetModelInfo) behind llmserve-gateway,
// asked greedily for a text prompt, gives the reference text (expected/reference_greedy.jsonl)
// and the reference ids. The same for the llama2.c checkpoint, --model stories260K.bin (its
// tokenizer from tok512.model beside it). Skips with a message when LLMSERVE_TESTDATA is unset or
// lacks the model.

#include <grpcpp/grpcpp.h>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "llmserve/v1/inference.grpc.pb.h"
#include "tests/testing/build_paths.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/testdata_models.h"

namespace llmserve {
namespace {

using ::llmserve::testing::NumberAfter;
using ::llmserve::testing::Subprocess;

constexpr absl::Duration kPatience = absl::Seconds(60);

// Serves `model` (a path under the stories260K directory, with `flags`) and checks tom-60.
void ExpectTheReferenceStory(const std::string& model, const std::vector<std::string>& flags) {
  std::string why;
  const std::string dir = ::llmserve::testing::ModelsDir("stories260K", &why);
  if (dir.empty()) GTEST_SKIP() << why;
  nlohmann::json reference;
  std::ifstream in(dir + "/expected/reference_greedy.jsonl");
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && nlohmann::json::parse(line)["case"] == "tom-60") {
      reference = nlohmann::json::parse(line);
    }
  }
  ASSERT_FALSE(reference.is_null()) << "no tom-60 case";
  const std::string prompt = "Tom and his dog went to the";
  const std::string text = reference["text"];
  ASSERT_EQ(text.rfind(prompt, 0), 0u) << text;
  const std::vector<int32_t> greedy = reference["greedy_ids"].get<std::vector<int32_t>>();

  std::vector<std::string> args = {::llmserve::testing::WorkerBinary(),
                                   "--model=" + dir + "/" + model,
                                   "--host=127.0.0.1",
                                   "--port=0",
                                   "--metrics-port=-1",
                                   "--threads=1",
                                   "--kv-cache-memory=16MiB"};
  args.insert(args.end(), flags.begin(), flags.end());
  Subprocess worker(args);
  ASSERT_TRUE(worker.WaitForOutput("no metrics server", kPatience)) << worker.output();
  const int worker_port = NumberAfter(worker.output(), " on 127.0.0.1:");
  ASSERT_GT(worker_port, 0) << worker.output();
  Subprocess gateway({::llmserve::testing::GatewayBinary(), "--host=127.0.0.1", "--grpc-port=0",
                      "--http-port=0", absl::StrCat("--workers=127.0.0.1:", worker_port)});
  ASSERT_TRUE(gateway.WaitForOutput("gateway: ready", kPatience)) << gateway.output();
  const int grpc_port = NumberAfter(gateway.output(), "gRPC on 127.0.0.1:");
  ASSERT_GT(grpc_port, 0) << gateway.output();

  auto stub = v1::Inference::NewStub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", grpc_port),
                                                         grpc::InsecureChannelCredentials()));
  v1::GenerateRequest request;
  request.set_text(prompt);
  request.mutable_sampling()->set_temperature(0);
  request.mutable_stopping()->set_max_tokens(static_cast<int32_t>(greedy.size()));
  request.mutable_stopping()->set_ignore_eos(true);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kPatience));
  v1::GenerateResponse response;
  const grpc::Status status = stub->Generate(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message() << "\n" << worker.output();
  std::vector<int32_t> ids;
  for (const auto& token : response.tokens()) ids.push_back(token.token_id());
  EXPECT_EQ(ids, greedy);
  EXPECT_EQ(prompt + response.text(), text);
  EXPECT_EQ(response.usage().prompt_tokens(), reference["prompt_ids"].size());
}

TEST(GgufGatewayTest, ATextPromptGivesTheReferenceStory) {
  ExpectTheReferenceStory("gguf/stories260K-f32.gguf", {"--max_model_len=512"});
}

TEST(Llama2cGatewayTest, ATextPromptGivesTheReferenceStory) {
  ExpectTheReferenceStory("stories260K.bin", {});
}

}  // namespace
}  // namespace llmserve
