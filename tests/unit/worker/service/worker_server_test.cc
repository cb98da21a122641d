// The worker service in process: a real gRPC server on a loopback port with the tiny model,
// called through the generated C++ client.

#include "worker/service/worker_server.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/prefix_cache/block_hash.h"
#include "gtest/gtest.h"
#include "llmserve/worker/v1/worker.grpc.pb.h"
#include "tests/testing/http_get.h"
#include "tests/testing/raw_grpc_call.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/testing/test_model.h"
#include "tests/testing/testdata_models.h"
#include "tests/unit/worker/engine/greedy_generation.h"
#include "tests/unit/worker/engine/lora_test_adapters.h"
#include "tools/bench/bench_report.h"
#include "tools/bench/grpc_clients.h"
#include "tools/bench/load_runner.h"
#include "tools/bench_load/bench_load.h"
#include "worker/engine/cpu_engine_builder.h"
#include "worker/model/model_config.h"
#include "worker/model/model_files.h"
#include "worker/model/model_writer.h"

namespace llmserve::worker {
namespace {

using ::llmserve::testing::HttpGet;

// Long enough for a slow, shared CI machine; every wait in this file is bounded by it.
constexpr absl::Duration kPatience = absl::Seconds(60);

class WorkerServerTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(::llmserve::testing::WriteTinyModel(dir_.path()).ok()); }

  // Metrics only where a test reads them: stopping the metrics server takes CivetWeb up to 2 s.
  void StartServer(WorkerServerOptions options = {}, bool with_metrics = false) {
    if (options.model_dir.empty()) options.model_dir = dir_.path();
    options.served_model_name = "tiny-test";
    options.host = "127.0.0.1";
    options.port = 0;
    options.metrics_port = with_metrics ? 0 : -1;
    if (options.kv_cache_bytes == 0) options.kv_cache_bytes = 8 << 20;
    options.threads = 1;
    absl::StatusOr<std::unique_ptr<WorkerServer>> server = WorkerServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::Worker::NewStub(channel_);
  }

  static v1::GenerateRequest Request(const std::string& id, int prompt_len, int max_tokens) {
    v1::GenerateRequest request;
    request.set_request_id(id);
    for (int i = 0; i < prompt_len; ++i) request.add_prompt_token_ids(3 + (i * 7) % 150);
    request.set_max_tokens(max_tokens);
    request.set_ignore_eos(true);
    return request;
  }

  struct StreamResult {
    std::vector<int32_t> tokens;
    std::vector<v1::GenerateResponse> messages;
    grpc::Status status;
  };

  StreamResult Generate(const v1::GenerateRequest& request) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kPatience));
    StreamResult result;
    std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
        stub_->Generate(&context, request);
    v1::GenerateResponse response;
    while (reader->Read(&response)) {
      for (const v1::GeneratedToken& token : response.tokens()) {
        result.tokens.push_back(token.token_id());
      }
      result.messages.push_back(response);
    }
    result.status = reader->Finish();
    return result;
  }

  // Sends `bytes` as the request of `method` (one message, as a unary call); the call's status.
  grpc::Status RawCall(const std::string& method, const std::string& bytes) {
    return ::llmserve::testing::RawGrpcCall(channel_, method, bytes);
  }

  // The health status of `service` (1 SERVING, 2 NOT_SERVING), or -1 when the call fails.
  int Health(const std::string& service) {
    std::string request;
    if (!service.empty()) request = std::string("\n") + static_cast<char>(service.size()) + service;
    std::string bytes;
    if (!::llmserve::testing::RawGrpcCall(channel_, "/grpc.health.v1.Health/Check", request, &bytes)
             .ok()) {
      return -1;
    }
    return bytes.size() == 2 && bytes[0] == 0x08 ? bytes[1] : (bytes.empty() ? 0 : -1);
  }

  // The value of the metric line starting with `series` ("name{labels}"), or -1.
  double Metric(const std::string& series) {
    const std::string body = HttpGet(server_->metrics_port(), "/metrics");
    for (absl::string_view line : absl::StrSplit(body, '\n')) {
      if (!absl::StartsWith(line, series + " ")) continue;
      double value = 0;
      if (absl::SimpleAtod(line.substr(series.size() + 1), &value)) return value;
    }
    return -1;
  }

  // Step-level counters are updated at the end of the step whose tokens the client may already
  // have: wait (bounded) for `series` to reach `expected`, and return its last value.
  double WaitForMetric(const std::string& series, double expected) {
    const absl::Time deadline = absl::Now() + kPatience;
    double value = Metric(series);
    while (value != expected && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(5));
      value = Metric(series);
    }
    return value;
  }

  // Waits until the engine holds no blocks and runs nothing.
  bool WaitForIdleEngine() {
    const absl::Time deadline = absl::Now() + kPatience;
    while (absl::Now() < deadline) {
      const EngineCounts counts = server_->engine().Counts();
      if (counts.running == 0 && counts.waiting == 0 &&
          counts.kv_blocks_free == server_->engine().num_kv_blocks()) {
        return true;
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
    return false;
  }

  ::llmserve::testing::ScopedTempDir dir_{"worker_server_test"};
  std::unique_ptr<WorkerServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Worker::Stub> stub_;
};

TEST_F(WorkerServerTest, LoraAdaptersServeTheirRequestsAndLoadAndUnloadAtRunTime) {
  auto files = ModelFiles::Open(dir_.path());
  ASSERT_TRUE(files.ok()) << files.status();
  auto config = ParseModelConfig((*files)->config_json(), "");
  ASSERT_TRUE(config.ok()) << config.status();
  const std::string adapter = dir_.path() + "/adapter", merged = dir_.path() + "/merged";
  const testing::AdapterSpec spec{{"q_proj", "v_proj", "down_proj"}, 8, 16, false, 5};
  testing::WriteMerged(**files, testing::WriteAdapter(*config, spec, adapter),
                       testing::ModulesOf(*config, spec.targets), merged);
  WorkerServerOptions options;
  options.lora_modules = {{"sql", adapter}};
  options.max_loras = 2;
  options.allow_runtime_lora_updating = true;
  StartServer(options);
  {
    grpc::ClientContext context;
    v1::ModelInfo info;
    ASSERT_TRUE(stub_->GetModelInfo(&context, v1::GetModelInfoRequest(), &info).ok());
    EXPECT_EQ(std::vector<std::string>(info.lora_adapters().begin(), info.lora_adapters().end()),
              std::vector<std::string>{"sql"});
    EXPECT_EQ(info.max_loras(), 2u);
    EXPECT_EQ(info.max_lora_rank(), 64u);
  }
  v1::GenerateRequest request = Request("l1", 12, 10);
  request.mutable_sampling()->set_temperature(0);
  request.set_lora_adapter("sql");
  const StreamResult adapted = Generate(request);
  ASSERT_TRUE(adapted.status.ok()) << adapted.status.error_message();
  std::vector<int32_t> prompt(request.prompt_token_ids().begin(), request.prompt_token_ids().end());
  EXPECT_EQ(adapted.tokens,
            testing::GreedyTokens(
                {.model_dir = merged, .num_threads = 1, .kv_cache_bytes = 8 << 20}, prompt, 10));
  request.set_request_id("l2");
  request.set_lora_adapter("nope");
  const StreamResult unknown = Generate(request);
  EXPECT_EQ(unknown.status.error_code(), grpc::StatusCode::NOT_FOUND);

  const auto load = [this](const std::string& name, const std::string& path) {
    grpc::ClientContext context;
    v1::LoadLoraAdapterRequest load_request;
    load_request.set_lora_name(name);
    load_request.set_lora_path(path);
    v1::LoadLoraAdapterResponse response;
    return stub_->LoadLoraAdapter(&context, load_request, &response);
  };
  const auto unload = [this](const std::string& name) {
    grpc::ClientContext context;
    v1::UnloadLoraAdapterRequest unload_request;
    unload_request.set_lora_name(name);
    v1::UnloadLoraAdapterResponse response;
    return stub_->UnloadLoraAdapter(&context, unload_request, &response);
  };
  EXPECT_TRUE(load("sql2", adapter).ok());
  EXPECT_EQ(load("sql2", adapter).error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(load("bad", dir_.path() + "/missing").error_code(), grpc::StatusCode::NOT_FOUND);
  request.set_request_id("l3");
  request.set_lora_adapter("sql2");
  EXPECT_EQ(Generate(request).tokens, adapted.tokens);
  EXPECT_TRUE(unload("sql2").ok());
  EXPECT_EQ(unload("sql2").error_code(), grpc::StatusCode::NOT_FOUND);
  grpc::ClientContext context;
  v1::ModelInfo info;
  ASSERT_TRUE(stub_->GetModelInfo(&context, v1::GetModelInfoRequest(), &info).ok());
  EXPECT_EQ(info.lora_adapters_size(), 1);
}

TEST_F(WorkerServerTest, WithoutTheFlagAdaptersCannotChangeAtRunTime) {
  WorkerServerOptions options;
  options.max_loras = 1;
  StartServer(options);
  grpc::ClientContext context;
  v1::LoadLoraAdapterRequest load_request;
  load_request.set_lora_name("x");
  load_request.set_lora_path(dir_.path());
  v1::LoadLoraAdapterResponse response;
  EXPECT_EQ(stub_->LoadLoraAdapter(&context, load_request, &response).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  WorkerServerOptions bad;
  bad.model_dir = dir_.path();
  bad.lora_modules = {{"x", dir_.path()}};
  const absl::Status refused = ValidateWorkerServerOptions(bad);
  EXPECT_TRUE(absl::StrContains(refused.message(), "need --max_loras")) << refused;
}

TEST_F(WorkerServerTest, ModelInfoDescribesTheModel) {
  StartServer();
  grpc::ClientContext context;
  v1::ModelInfo info;
  ASSERT_TRUE(stub_->GetModelInfo(&context, v1::GetModelInfoRequest(), &info).ok());
  EXPECT_EQ(info.model_name(), "tiny-test");
  EXPECT_EQ(info.max_model_len(), static_cast<uint32_t>(server_->engine().max_model_len()));
  EXPECT_EQ(info.vocab_size(), static_cast<uint32_t>(server_->engine().model_config().vocab_size));
  EXPECT_EQ(info.block_size(), 16u);
  EXPECT_GT(info.num_kv_blocks(), 0u);
  EXPECT_EQ(info.backend(), "cpu");
  EXPECT_EQ(info.dtype(), "f32");
  EXPECT_EQ(info.quantization(), "none");
  EXPECT_FALSE(info.lm_head_quantized());
  EXPECT_TRUE(info.prefix_caching());
  EXPECT_FALSE(info.worker_id().empty());
  EXPECT_NE(info.tokenizer_json().find("\"model\""), std::string::npos);
  EXPECT_FALSE(info.chat_template().empty());
  EXPECT_FALSE(info.eos_token_ids().empty());
}

// The worker reads tokenizer_config.json's chat template as ChatTemplate::FromTokenizerConfig
// does (the named-list form included), and refuses to start on a malformed one, naming the file.
TEST_F(WorkerServerTest, ANamedListsDefaultTemplateIsServedAndAMalformedOneStopsTheStart) {
  const std::string config = dir_.path() + "/tokenizer_config.json";
  ASSERT_TRUE(WriteText(config, R"({"chat_template": [{"name": "tool_use", "template": "T"},
                                                     {"name": "default", "template": "D"}]})")
                  .ok());
  StartServer();
  grpc::ClientContext context;
  v1::ModelInfo info;
  ASSERT_TRUE(stub_->GetModelInfo(&context, v1::GetModelInfoRequest(), &info).ok());
  EXPECT_EQ(info.chat_template(), "D");
  server_.reset();

  for (const std::string bad : {R"({"chat_template": 3})", R"({"chat_template": [{"name": 1}]})",
                                R"(["not", "an", "object"])"}) {
    ASSERT_TRUE(WriteText(config, bad).ok());
    absl::StatusOr<std::unique_ptr<WorkerServer>> refused =
        WorkerServer::Start({.model_dir = dir_.path(), .port = 0, .metrics_port = -1});
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
    EXPECT_NE(refused.status().message().find(config + ": "), std::string::npos)
        << refused.status();
  }
}

TEST_F(WorkerServerTest, Int8WorkerSaysSoInModelInfoAndMetricsAndGenerates) {
  StartServer({.quantization = Quantization::kInt8, .quantize_lm_head = true},
              /*with_metrics=*/true);
  grpc::ClientContext context;
  v1::ModelInfo info;
  ASSERT_TRUE(stub_->GetModelInfo(&context, v1::GetModelInfoRequest(), &info).ok());
  EXPECT_EQ(info.dtype(), "f32");
  EXPECT_EQ(info.quantization(), "int8");
  EXPECT_TRUE(info.lm_head_quantized());
  const StreamResult result = Generate(Request("q1", 20, 6));
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_EQ(result.tokens.size(), 6u);
  EXPECT_EQ(Metric("llmserve_model_config_info{backend=\"cpu\",dtype=\"f32\","
                   "lm_head_quantized=\"true\",model=\"tiny-test\",quantization=\"int8\"}"),
            1);
}

// Unset, the LM head goes int8 exactly when the projections are quantized (measured to cost
// little: docs/engine.md); false keeps it in --dtype, and an unquantized model is no error.
TEST_F(WorkerServerTest, TheLmHeadFollowsQuantizedProjectionsUnlessToldOtherwise) {
  const auto lm_head_quantized = [this](WorkerServerOptions options) {
    StartServer(std::move(options));
    grpc::ClientContext context;
    v1::ModelInfo info;
    EXPECT_TRUE(stub_->GetModelInfo(&context, v1::GetModelInfoRequest(), &info).ok());
    server_.reset();
    return info.lm_head_quantized();
  };
  EXPECT_TRUE(lm_head_quantized({.quantization = Quantization::kInt8}));
  EXPECT_FALSE(lm_head_quantized({.quantization = Quantization::kInt8, .quantize_lm_head = false}));
  EXPECT_FALSE(lm_head_quantized({})) << "an unquantized model keeps its head, without an error";
  const ::llmserve::testing::ScopedTempDir dir("worker_server_awq_head");
  ASSERT_TRUE(
      ::llmserve::testing::WriteTinyModel(
          dir.path(), 9, false, {.method = CheckpointQuantization::Method::kAwq, .group_size = 32})
          .ok());
  EXPECT_TRUE(lm_head_quantized({.model_dir = dir.path()}));
}

// AWQ and GPTQ checkpoints run as such with the default --quantization=none, and say so.
TEST_F(WorkerServerTest, FourBitCheckpointsSayWhatTheyAreAndGenerate) {
  using Method = CheckpointQuantization::Method;
  for (const auto& [method, name, head] :
       {std::tuple<Method, const char*, bool>{Method::kAwq, "awq", false},
        {Method::kGptq, "gptq", true}}) {
    const ::llmserve::testing::ScopedTempDir dir("worker_server_4bit");
    ASSERT_TRUE(::llmserve::testing::WriteTinyModel(dir.path(), 9, false,
                                                    {.method = method, .group_size = 32})
                    .ok());
    StartServer({.model_dir = dir.path(), .quantize_lm_head = head}, /*with_metrics=*/true);
    grpc::ClientContext context;
    v1::ModelInfo info;
    ASSERT_TRUE(stub_->GetModelInfo(&context, v1::GetModelInfoRequest(), &info).ok());
    EXPECT_EQ(info.quantization(), name);
    EXPECT_EQ(info.lm_head_quantized(), head);
    const StreamResult result = Generate(Request("q4", 20, 6));
    ASSERT_TRUE(result.status.ok()) << result.status.error_message();
    EXPECT_EQ(result.tokens.size(), 6u);
    EXPECT_EQ(Metric(absl::StrCat("llmserve_model_config_info{backend=\"cpu\",dtype=\"f32\","
                                  "lm_head_quantized=\"",
                                  head ? "true" : "false", "\",model=\"tiny-test\",quantization=\"",
                                  name, "\"}")),
              1);
    server_.reset();
  }
}

// A GGUF file whose projections are Q4 runs them in 4 bits and says "gguf" ("gguf+int8" with its
// other projections in int8). Skips without $LLMSERVE_TESTDATA.
TEST_F(WorkerServerTest, AGgufFileWithQ4ProjectionsSaysGgufAndGenerates) {
  std::string why;
  const std::string zoo = ::llmserve::testing::ModelsDir("gguf-quant-zoo", &why);
  if (zoo.empty()) GTEST_SKIP() << why;
  for (const auto& [quantization, name] :
       {std::pair<Quantization, const char*>{Quantization::kNone, "gguf"},
        {Quantization::kInt8, "gguf+int8"}}) {
    StartServer({.model_dir = zoo + "/zoo-Q4_K_M.gguf", .quantization = quantization});
    grpc::ClientContext context;
    v1::ModelInfo info;
    ASSERT_TRUE(stub_->GetModelInfo(&context, v1::GetModelInfoRequest(), &info).ok());
    EXPECT_EQ(info.quantization(), name);
    const StreamResult result = Generate(Request("g4", 20, 6));
    ASSERT_TRUE(result.status.ok()) << result.status.error_message();
    EXPECT_EQ(result.tokens.size(), 6u);
    server_.reset();
  }
}

// A directory with a SentencePiece tokenizer.model and no tokenizer.json (as older Llama
// repositories ship) serves the tokenizer built from it. Skips without $LLMSERVE_TESTDATA.
TEST_F(WorkerServerTest, ATokenizerModelWithoutTokenizerJsonIsServed) {
  std::string why;
  const std::string stories = ::llmserve::testing::ModelsDir("stories260K", &why);
  if (stories.empty()) GTEST_SKIP() << why;
  std::filesystem::remove(dir_.path() + "/tokenizer.json");
  std::filesystem::remove(dir_.path() + "/tokenizer_config.json");
  std::filesystem::copy_file(stories + "/tok512.model", dir_.path() + "/tokenizer.model");
  StartServer();
  grpc::ClientContext context;
  v1::ModelInfo info;
  ASSERT_TRUE(stub_->GetModelInfo(&context, v1::GetModelInfoRequest(), &info).ok());
  EXPECT_NE(info.tokenizer_json().find("\"type\":\"BPE\""), std::string::npos);
  EXPECT_NE(info.tokenizer_json().find("\u2581"), std::string::npos)
      << "no SentencePiece normalizer in " << info.tokenizer_json().substr(0, 300);
  EXPECT_NE(info.tokenizer_config_json().find("\"bos_token\":\"<s>\""), std::string::npos)
      << info.tokenizer_config_json();
}

TEST_F(WorkerServerTest, StreamMatchesTheOfflineEngineForTheSameSeed) {
  StartServer();
  v1::GenerateRequest request = Request("seeded", 20, 24);
  request.mutable_sampling()->set_temperature(0.9f);
  request.mutable_sampling()->set_seed(1234);
  request.mutable_sampling()->set_return_logprobs(true);
  const StreamResult streamed = Generate(request);
  ASSERT_TRUE(streamed.status.ok()) << streamed.status.error_message();
  ASSERT_EQ(streamed.tokens.size(), 24u);
  const v1::GenerateResponse& last = streamed.messages.back();
  EXPECT_EQ(last.finish_reason(), ::llmserve::v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(last.usage().prompt_tokens(), 20u);
  EXPECT_EQ(last.usage().completion_tokens(), 24u);
  EXPECT_GT(last.timing().total_s(), 0);
  EXPECT_TRUE(streamed.messages.front().tokens(0).has_logprob());

  // The same request through an engine driven by hand.
  absl::StatusOr<std::unique_ptr<Engine>> offline =
      BuildCpuEngine({.model_dir = dir_.path(), .num_threads = 1, .kv_cache_bytes = 8 << 20});
  ASSERT_TRUE(offline.ok()) << offline.status();
  std::vector<int32_t> expected;
  EngineRequest engine_request;
  engine_request.prompt.assign(request.prompt_token_ids().begin(),
                               request.prompt_token_ids().end());
  engine_request.sampling.temperature = 0.9f;
  engine_request.sampling.seed = 1234;
  engine_request.stopping.max_tokens = 24;
  engine_request.stopping.ignore_eos = true;
  engine_request.on_output = [&expected](const EngineOutput& output) {
    for (const GeneratedToken& token : output.tokens) expected.push_back(token.token_id);
  };
  ASSERT_TRUE((*offline)->AddRequest(std::move(engine_request)).ok());
  while ((*offline)->StepOnce()) {
  }
  EXPECT_EQ(streamed.tokens, expected);
}

TEST_F(WorkerServerTest, SixtyFourConcurrentStreamsComplete) {
  StartServer({.max_num_seqs = 16});
  constexpr int kStreams = 64;
  std::vector<std::thread> clients;
  std::atomic<int> completed{0};
  for (int i = 0; i < kStreams; ++i) {
    clients.emplace_back([this, i, &completed] {
      const StreamResult result = Generate(Request(absl::StrCat("c", i), 5 + i % 30, 8 + i % 5));
      if (result.status.ok() && result.tokens.size() == static_cast<size_t>(8 + i % 5)) {
        ++completed;
      } else {
        ADD_FAILURE() << "stream " << i << ": " << result.status.error_message() << ", "
                      << result.tokens.size() << " tokens";
      }
    });
  }
  for (std::thread& client : clients) client.join();
  EXPECT_EQ(completed.load(), kStreams);
  EXPECT_TRUE(WaitForIdleEngine());
}

TEST_F(WorkerServerTest, CancellingMidStreamFreesTheBlocks) {
  // A model slow enough that 900 tokens take seconds: the request is surely running at the cancel.
  ASSERT_TRUE(::llmserve::testing::WriteTinyModel(dir_.path(), 9, /*slow=*/true).ok());
  StartServer({.kv_cache_bytes = 64 << 20});
  {
    grpc::ClientContext context;
    v1::GenerateRequest request = Request("to-cancel", 40, 900);
    std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
        stub_->Generate(&context, request);
    v1::GenerateResponse response;
    ASSERT_TRUE(reader->Read(&response));
    // The load is reported at the end of the step whose tokens we just read.
    const absl::Time deadline = absl::Now() + kPatience;
    EngineLoad load = server_->load().Load();
    while (load.kv_blocks_free == load.kv_blocks_total && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(1));
      load = server_->load().Load();
    }
    EXPECT_EQ(load.running, 1);
    EXPECT_LT(load.kv_blocks_free, load.kv_blocks_total);
    context.TryCancel();
    while (reader->Read(&response)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  EXPECT_TRUE(WaitForIdleEngine());
  // The id is free again once the engine let go of it.
  const StreamResult again = Generate(Request("to-cancel", 4, 2));
  EXPECT_TRUE(again.status.ok()) << again.status.error_message();
}

TEST_F(WorkerServerTest, DeadlinePassingAbortsTheRequest) {
  // One slot, held by a long request: the second waits in the queue until its deadline passes.
  StartServer({.max_num_seqs = 1});
  grpc::ClientContext long_context;
  auto long_stream = stub_->Generate(&long_context, Request("long", 40, 900));
  v1::GenerateResponse response;
  ASSERT_TRUE(long_stream->Read(&response));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Milliseconds(20)));
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
      stub_->Generate(&context, Request("deadline", 40, 900));
  while (reader->Read(&response)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  long_context.TryCancel();
  while (long_stream->Read(&response)) {
  }
  EXPECT_TRUE(WaitForIdleEngine());
}

TEST_F(WorkerServerTest, BadRequestsGetTheRightCodes) {
  StartServer({}, /*with_metrics=*/true);
  auto code_of = [this](const v1::GenerateRequest& request) { return Generate(request).status; };
  v1::GenerateRequest empty = Request("e", 0, 4);
  grpc::Status status = code_of(empty);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("prompt_token_ids"), std::string::npos);

  v1::GenerateRequest out_of_vocab = Request("v", 3, 4);
  out_of_vocab.set_prompt_token_ids(2, 1 << 20);
  status = code_of(out_of_vocab);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("prompt_token_ids[2]"), std::string::npos);

  v1::GenerateRequest bad_sampling = Request("s", 3, 4);
  bad_sampling.mutable_sampling()->set_top_p(1.5f);
  status = code_of(bad_sampling);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("sampling.top_p"), std::string::npos);

  v1::GenerateRequest too_long = Request("l", 3, server_->engine().max_model_len());
  status = code_of(too_long);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("max_tokens"), std::string::npos);

  status = code_of(Request("", 3, 4));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("request_id"), std::string::npos);

  grpc::ClientContext watch_context;
  v1::WatchLoadRequest watch;
  watch.set_interval_ms(10);
  auto watch_reader = stub_->WatchLoad(&watch_context, watch);
  v1::LoadReport report;
  EXPECT_FALSE(watch_reader->Read(&report));
  status = watch_reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("interval_ms"), std::string::npos);

  EXPECT_TRUE(WaitForIdleEngine());
  EXPECT_EQ(Metric("llmserve_request_failure_total{code=\"invalid_argument\",model=\"tiny-test\"}"),
            5);
}

// A request far larger than the context can hold is refused by gRPC before it is parsed into
// memory (the cap follows the context length), not parsed and then refused.
TEST_F(WorkerServerTest, RequestsLargerThanTheContextCanHoldAreNotParsed) {
  StartServer();
  v1::GenerateRequest huge = Request("huge", 3, 4);
  for (int i = 0; i < 3'000'000; ++i) huge.add_prompt_token_ids(500);  // 2 bytes each: 6 MB
  const grpc::Status status = Generate(huge).status;
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  // Below the cap, a too-long prompt is parsed and refused by the worker's own check.
  v1::GenerateRequest long_prompt = Request("long", 3, 4);
  for (int i = 0; i < 100'000; ++i) long_prompt.add_prompt_token_ids(500);
  EXPECT_EQ(Generate(long_prompt).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

// Bytes that do not parse as the method's request get INVALID_ARGUMENT naming the message type
// (gRPC's typed handlers would answer UNIMPLEMENTED with no message).
TEST_F(WorkerServerTest, MalformedProtobufIsInvalidArgumentNamingTheMessage) {
  StartServer();
  const std::string garbage("\xff\xff\xff\xff", 4);
  const std::string bad_utf8("\x0a\x03\xff\xfe\xfd", 5);  // field 1 (a string): not UTF-8
  const std::string deep_groups(2000, '\x0b');            // start-group tags, nested
  for (const auto& [method, type] : std::vector<std::pair<std::string, std::string>>{
           {"/llmserve.worker.v1.Worker/Generate", "llmserve.worker.v1.GenerateRequest"},
           {"/llmserve.worker.v1.Worker/GetModelInfo", "llmserve.worker.v1.GetModelInfoRequest"},
           {"/llmserve.worker.v1.Worker/WatchLoad", "llmserve.worker.v1.WatchLoadRequest"}}) {
    for (const std::string& bytes : {garbage, bad_utf8, deep_groups}) {
      if (bytes == bad_utf8 && type != "llmserve.worker.v1.GenerateRequest") continue;
      const grpc::Status status = RawCall(method, bytes);
      EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << method;
      EXPECT_NE(status.error_message().find("could not be parsed as " + type), std::string::npos)
          << method << ": " << status.error_message();
    }
  }
  // Well-formed requests still work.
  const StreamResult result = Generate(Request("after", 3, 2));
  EXPECT_TRUE(result.status.ok()) << result.status.error_message();
}

TEST_F(WorkerServerTest, AFullKvCacheQueuesAndPreemptsButLosesNothing) {
  // About 16 blocks of 16 tokens: a request that can never fit is refused; eight that fit one at a
  // time but not together all complete (waiting or preempted and recomputed).
  StartServer({.kv_cache_bytes = 128 << 10});
  const int32_t blocks = static_cast<int32_t>(server_->model_info().num_kv_blocks());
  ASSERT_GT(blocks, 6);
  const StreamResult too_big = Generate(Request("too-big", blocks * 16 + 1, 1));
  EXPECT_EQ(too_big.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(too_big.status.error_message().find("block"), std::string::npos)
      << too_big.status.error_message();

  std::vector<std::thread> clients;
  std::atomic<int> completed{0};
  for (int i = 0; i < 8; ++i) {
    clients.emplace_back([this, i, &completed] {
      const StreamResult result = Generate(Request(absl::StrCat("kv", i), 40, 60));
      if (result.status.ok() && result.tokens.size() == 60u) ++completed;
    });
  }
  for (std::thread& client : clients) client.join();
  EXPECT_EQ(completed.load(), 8);
  EXPECT_TRUE(WaitForIdleEngine());
}

TEST_F(WorkerServerTest, DuplicateIdsAndOverloadAreRefused) {
  StartServer({.max_num_seqs = 1, .max_queue = 1});
  grpc::ClientContext first_context;
  auto first = stub_->Generate(&first_context, Request("dup", 10, 1000));
  v1::GenerateResponse response;
  ASSERT_TRUE(first->Read(&response));  // running now

  const StreamResult duplicate = Generate(Request("dup", 3, 2));
  EXPECT_EQ(duplicate.status.error_code(), grpc::StatusCode::ALREADY_EXISTS);

  grpc::ClientContext queued_context;
  auto queued = stub_->Generate(&queued_context, Request("queued", 3, 2));
  const absl::Time deadline = absl::Now() + kPatience;
  while (server_->engine().Counts().waiting < 1 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  const StreamResult overloaded = Generate(Request("third", 3, 2));
  EXPECT_EQ(overloaded.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(overloaded.status.error_message().find("overloaded"), std::string::npos);

  first_context.TryCancel();
  while (first->Read(&response)) {
  }
  while (queued->Read(&response)) {
  }
  EXPECT_TRUE(queued->Finish().ok());
  EXPECT_TRUE(WaitForIdleEngine());
}

TEST_F(WorkerServerTest, WatchLoadSnapshotsThenStreamsCacheEvents) {
  StartServer();
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kPatience));
  v1::WatchLoadRequest watch;
  watch.set_interval_ms(50);
  auto reader = stub_->WatchLoad(&context, watch);
  v1::LoadReport report;
  ASSERT_TRUE(reader->Read(&report));
  EXPECT_TRUE(report.reset());
  EXPECT_EQ(report.sequence(), 1u);
  EXPECT_EQ(report.kv_blocks_total(), report.kv_blocks_free());

  // Two full blocks of prompt: both are stored in the prefix cache.
  const v1::GenerateRequest request = Request("cached", 32, 1);
  ASSERT_TRUE(Generate(request).status.ok());
  const std::vector<int32_t> prompt(request.prompt_token_ids().begin(),
                                    request.prompt_token_ids().end());
  std::vector<uint64_t> expected;
  for (const common::BlockHash& hash : common::HashFullBlocks(prompt, 16, "")) {
    expected.push_back(hash.RoutingHash());
  }
  std::vector<uint64_t> stored;
  uint64_t sequence = report.sequence();
  while (stored.size() < expected.size() && reader->Read(&report)) {
    EXPECT_EQ(report.sequence(), ++sequence);
    EXPECT_FALSE(report.reset());
    for (const v1::PrefixCacheEvent& event : report.events()) {
      if (event.kind() == v1::PrefixCacheEvent::KIND_STORED) {
        stored.insert(stored.end(), event.block_hashes().begin(), event.block_hashes().end());
      }
    }
  }
  EXPECT_EQ(stored, expected);

  // A second watcher starts from a snapshot that has them.
  grpc::ClientContext second_context;
  second_context.set_deadline(absl::ToChronoTime(absl::Now() + kPatience));
  auto second = stub_->WatchLoad(&second_context, watch);
  ASSERT_TRUE(second->Read(&report));
  EXPECT_TRUE(report.reset());
  ASSERT_EQ(report.events_size(), 1);
  std::vector<uint64_t> snapshot(report.events(0).block_hashes().begin(),
                                 report.events(0).block_hashes().end());
  std::sort(snapshot.begin(), snapshot.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(snapshot, expected);
  context.TryCancel();
  second_context.TryCancel();
}

TEST_F(WorkerServerTest, HealthAndGracefulDrain) {
  // A slow model: the in-flight request takes seconds, so the drain is surely still on below.
  ASSERT_TRUE(::llmserve::testing::WriteTinyModel(dir_.path(), 9, /*slow=*/true).ok());
  StartServer({.kv_cache_bytes = 64 << 20, .drain_timeout = absl::Seconds(60)});
  EXPECT_EQ(Health(""), 1);
  EXPECT_EQ(Health(kReadinessServiceName), 1);

  grpc::ClientContext watch_context;
  v1::WatchLoadRequest watch;
  watch.set_interval_ms(60000);
  auto watcher = stub_->WatchLoad(&watch_context, watch);
  v1::LoadReport report;
  ASSERT_TRUE(watcher->Read(&report));
  EXPECT_FALSE(report.draining());

  // A stream in flight when the drain starts finishes normally.
  grpc::ClientContext context;
  auto in_flight = stub_->Generate(&context, Request("in-flight", 10, 600));
  v1::GenerateResponse response;
  ASSERT_TRUE(in_flight->Read(&response));
  int tokens = response.tokens_size();

  std::thread drain([this] { EXPECT_EQ(server_->Drain(), 0); });
  // The watcher hears about the drain at once, though its interval is a minute.
  EXPECT_TRUE(watcher->Read(&report));
  EXPECT_TRUE(report.draining());
  EXPECT_EQ(Health(kReadinessServiceName), 2);
  EXPECT_EQ(Health(""), 1);  // draining is not dead
  const StreamResult refused = Generate(Request("late", 3, 2));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(refused.status.error_message().find("draining"), std::string::npos);

  while (in_flight->Read(&response)) tokens += response.tokens_size();
  EXPECT_TRUE(in_flight->Finish().ok());
  EXPECT_EQ(tokens, 600);
  while (watcher->Read(&report)) {
  }
  EXPECT_TRUE(watcher->Finish().ok());
  drain.join();
}

TEST_F(WorkerServerTest, DrainTimeoutAbortsWithAClearStatus) {
  // One slot, a slow model and eight long requests: far more work than the drain timeout allows.
  ASSERT_TRUE(::llmserve::testing::WriteTinyModel(dir_.path(), 9, /*slow=*/true).ok());
  StartServer(
      {.kv_cache_bytes = 64 << 20, .max_num_seqs = 1, .drain_timeout = absl::Milliseconds(20)});
  constexpr int kStreams = 8;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>>> streams;
  auto start_stream = [&](int i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    contexts.back()->set_deadline(absl::ToChronoTime(absl::Now() + kPatience));
    streams.push_back(
        stub_->Generate(contexts.back().get(), Request(absl::StrCat("slow", i), 10, 1000)));
  };
  // The first stream holds the one slot (the others may reach the worker in any order, and the
  // slot's holder runs far longer than the test's patience); the others wait behind it.
  std::vector<int> tokens(kStreams, 0);
  v1::GenerateResponse response;
  start_stream(0);
  ASSERT_TRUE(streams[0]->Read(&response));
  tokens[0] = response.tokens_size();
  for (int i = 1; i < kStreams; ++i) start_stream(i);
  const absl::Time deadline = absl::Now() + kPatience;
  while (server_->engine().Counts().waiting < kStreams - 1 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(server_->engine().Counts().waiting, kStreams - 1);
  EXPECT_GE(server_->Drain(), 1);
  int aborted = 0;
  for (int i = 0; i < kStreams; ++i) {
    while (streams[i]->Read(&response)) tokens[i] += response.tokens_size();
    const grpc::Status status = streams[i]->Finish();
    if (status.ok()) {
      EXPECT_EQ(tokens[i], 1000);
      continue;
    }
    ++aborted;
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_NE(status.error_message().find("drain timeout"), std::string::npos)
        << status.error_message();
  }
  EXPECT_GE(aborted, 1);
}

TEST_F(WorkerServerTest, MetricsCountWhatHappened) {
  StartServer({}, /*with_metrics=*/true);
  const std::string model = "model=\"tiny-test\"";
  EXPECT_EQ(Metric("llmserve_generation_tokens_total{" + model + "}"), 0);  // warm-up excluded
  EXPECT_EQ(Metric("llmserve_num_requests_running{" + model + "}"), 0);
  ASSERT_TRUE(Generate(Request("m1", 20, 7)).status.ok());
  ASSERT_TRUE(Generate(Request("m2", 20, 5)).status.ok());
  EXPECT_EQ(WaitForMetric("llmserve_generation_tokens_total{" + model + "}", 12), 12);
  EXPECT_EQ(WaitForMetric("llmserve_prompt_tokens_total{" + model + "}", 40 - 16),
            40 - 16);  // a cached block
  EXPECT_EQ(Metric("llmserve_prefix_cache_hits_total{" + model + "}"), 16);
  EXPECT_EQ(Metric("llmserve_request_success_total{finished_reason=\"length\"," + model + "}"), 2);
  EXPECT_EQ(Metric("llmserve_time_to_first_token_seconds_count{" + model + "}"), 2);
  EXPECT_EQ(Metric("llmserve_inter_token_latency_seconds_count{" + model + "}"), 10);
  EXPECT_EQ(Metric("llmserve_request_generation_tokens_sum{" + model + "}"), 12);
  EXPECT_EQ(Metric("llmserve_kv_cache_usage_ratio{" + model + "}"), 0);
  EXPECT_EQ(Metric("llmserve_cache_config_info{block_size=\"16\"," + model + ",num_blocks=\"" +
                   absl::StrCat(server_->model_info().num_kv_blocks()) + "\"}"),
            1);
  EXPECT_EQ(Metric("llmserve_model_config_info{backend=\"cpu\",dtype=\"f32\","
                   "lm_head_quantized=\"false\"," +
                   model + ",quantization=\"none\"}"),
            1);
}

TEST_F(WorkerServerTest, VllmMetricNamesMirrorOursWhenAskedFor) {
  StartServer({.vllm_metric_names = true}, /*with_metrics=*/true);
  ASSERT_TRUE(Generate(Request("v1", 20, 7)).status.ok());
  ASSERT_TRUE(Generate(Request("v2", 20, 5)).status.ok());
  const std::string ours = "{model=\"tiny-test\"}";
  const std::string vllm = "{engine=\"0\",model_name=\"tiny-test\"}";
  EXPECT_EQ(WaitForMetric("vllm:generation_tokens_total" + vllm, 12), 12);
  // The traffic is over: two scrapes read settled values.
  for (const std::string name :
       {"prompt_tokens_total", "generation_tokens_total", "prefix_cache_queries_total",
        "prefix_cache_hits_total", "time_to_first_token_seconds_count",
        "inter_token_latency_seconds_sum", "request_prompt_tokens_sum"}) {
    EXPECT_EQ(Metric("vllm:" + name + vllm), Metric("llmserve_" + name + ours)) << name;
  }
  EXPECT_EQ(Metric("vllm:inter_token_latency_seconds_count" + vllm), 10);
  EXPECT_EQ(Metric("vllm:time_per_output_token_seconds_count" + vllm), 10);
  EXPECT_EQ(Metric("vllm:num_requests_waiting" + vllm), 0);
  EXPECT_EQ(Metric("vllm:kv_cache_usage_perc" + vllm), 0);
  EXPECT_EQ(Metric("vllm:request_success_total{engine=\"0\",finished_reason=\"length\","
                   "model_name=\"tiny-test\"}"),
            2);
  EXPECT_EQ(Metric("vllm:cache_config_info{block_size=\"16\",engine=\"0\",model_name=\""
                   "tiny-test\",num_gpu_blocks=\"" +
                   absl::StrCat(server_->model_info().num_kv_blocks()) + "\"}"),
            1);
}

TEST_F(WorkerServerTest, DrainingGaugeReadsOneFromTheDrainUntilExit) {
  StartServer({}, /*with_metrics=*/true);
  const std::string series = "llmserve_worker_draining{model=\"tiny-test\"}";
  EXPECT_EQ(Metric(series), 0);
  EXPECT_EQ(Metric("vllm:num_requests_waiting{engine=\"0\",model_name=\"tiny-test\"}"),
            -1);  // vLLM's names are opt-in
  EXPECT_EQ(server_->Drain(), 0);
  // The metrics server stops with the process (the destructor), not with the drain.
  EXPECT_EQ(Metric(series), 1);
}

TEST_F(WorkerServerTest, BenchmarkClientCountsEveryToken) {
  StartServer();
  tools::WorkerBenchClient client(stub_.get());
  absl::StatusOr<v1::ModelInfo> info = client.ModelInfo(kPatience);
  ASSERT_TRUE(info.ok()) << info.status();
  absl::StatusOr<tools::BenchLoad> load = tools::MakeBenchLoad(
      {.num_requests = 6, .prompt_len = 20, .output_len = 9}, info->vocab_size());
  ASSERT_TRUE(load.ok()) << load.status();
  std::vector<tools::BenchRequest> requests;
  for (std::vector<int32_t>& prompt : load->prompts) {
    requests.push_back({.prompt_ids = std::move(prompt), .prompt_tokens = 20, .output_len = 9});
  }
  const tools::LoadResult result = tools::RunLoad(&client, requests, {.max_concurrency = 3});
  EXPECT_EQ(result.client_threads, 3);
  const nlohmann::json json = tools::SummarizeLoad({.api = "worker", .requests = 6}, result);
  EXPECT_EQ(json["failed"], 0) << json.dump();
  EXPECT_EQ(json["completed"], 6);
  EXPECT_EQ(json["output_tokens"], 6 * 9);
  EXPECT_EQ(json["prompt_tokens"], 6 * 20);
  EXPECT_GT(json["output_tokens_per_s"].get<double>(), 0);
  EXPECT_GE(json["e2e_s"]["p99"].get<double>(), json["ttft_s"]["p50"].get<double>());
  // One inter-token gap per token after the first, unless a stream message carried several.
  EXPECT_GT(json["itl_s"]["p50"].get<double>(), 0);
  EXPECT_EQ(server_->load().Load().prefix_cache_queries, 6 * 20 + 1);  // + the warm-up token
}

TEST(WorkerServerOptionsTest, BadSpeculativeOptionsNameTheFlag) {
  auto message = [](SpeculativeConfig speculative) {
    return std::string(
        ValidateWorkerServerOptions({.model_dir = "/nonexistent", .speculative = speculative})
            .message());
  };
  EXPECT_EQ(message({.method = SpeculativeMethod::kNgram}), "");
  EXPECT_EQ(message({.method = SpeculativeMethod::kNgram, .num_speculative_tokens = 0}),
            "--num_speculative_tokens must be in [1, 16], got 0");
  EXPECT_EQ(
      message(
          {.method = SpeculativeMethod::kNgram, .prompt_lookup_min = 3, .prompt_lookup_max = 2}),
      "--prompt_lookup_max must be in [prompt_lookup_min (3), 32], got 2");
  EXPECT_EQ(message({.method = SpeculativeMethod::kNgram, .disable_batch_size = -2}),
            "--speculative_disable_batch_size must be >= 0 (or -1 for the method's default), got "
            "-2");
  EXPECT_EQ(message({.method = SpeculativeMethod::kDraft}),
            "--speculative_model must name the draft model's directory for "
            "speculative_method=draft");
  EXPECT_EQ(std::string(ValidateWorkerServerOptions(
                            {.model_dir = "/m",
                             .backend = "cuda",
                             .dtype = DType::kBF16,
                             .speculative = {.method = SpeculativeMethod::kDraft, .model = "/d"}})
                            .message())
                .find("--speculative_method=draft runs on --backend=cpu only"),
            0u);
}

TEST(WorkerServerOptionsTest, BadOptionsNameTheFlag) {
  auto message = [](WorkerServerOptions options) {
    options.model_dir = options.model_dir.empty() ? "/nonexistent" : options.model_dir;
    return std::string(ValidateWorkerServerOptions(options).message());
  };
  EXPECT_NE(message({.backend = "tpu"}).find("--backend=tpu"), std::string::npos);
  EXPECT_NE(message({.port = 70000}).find("--port=70000"), std::string::npos);
  EXPECT_NE(message({.block_size = 0}).find("--block_size=0"), std::string::npos);
  EXPECT_NE(message({.max_queue = -1}).find("--max_queue"), std::string::npos);
  EXPECT_NE(message({.drain_timeout = absl::Seconds(-1)}).find("--drain_timeout"),
            std::string::npos);
  // int8 has CUDA kernels (worker/engine/cuda/quantized_gemm.h); the int8 LM head does not.
  EXPECT_EQ(message({.backend = "cuda", .quantization = Quantization::kInt8}), "");
  EXPECT_NE(message({.backend = "cuda", .quantize_lm_head = true})
                .find("--quantize_lm_head runs on --backend=cpu only"),
            std::string::npos);
  EXPECT_NE(message({.backend = "cuda", .quantized_activations = true})
                .find("--quantized_activations runs on --backend=cpu only"),
            std::string::npos);
  // On the CPU, whether the model is quantized is known once its config is read.
  const ::llmserve::testing::ScopedTempDir dir("worker_server_head");
  ASSERT_TRUE(::llmserve::testing::WriteTinyModel(dir.path()).ok());
  absl::StatusOr<std::unique_ptr<WorkerServer>> head = WorkerServer::Start(
      {.model_dir = dir.path(), .quantize_lm_head = true, .port = 0, .metrics_port = -1});
  ASSERT_FALSE(head.ok());
  EXPECT_NE(head.status().message().find("quantize_lm_head needs a quantized model"),
            std::string::npos)
      << head.status();
  absl::StatusOr<std::unique_ptr<WorkerServer>> activations = WorkerServer::Start(
      {.model_dir = dir.path(), .quantized_activations = true, .port = 0, .metrics_port = -1});
  ASSERT_FALSE(activations.ok());
  EXPECT_NE(activations.status().message().find("quantized_activations needs a quantized model"),
            std::string::npos)
      << activations.status();
  EXPECT_NE(std::string(ValidateWorkerServerOptions({}).message()).find("--model"),
            std::string::npos);
  absl::StatusOr<std::unique_ptr<WorkerServer>> missing =
      WorkerServer::Start({.model_dir = "/nonexistent/model", .port = 0, .metrics_port = -1});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace llmserve::worker
