// llmserve-bench as users run it: against a real gateway (OpenAI HTTP completions and chat, the
// Inference gRPC API) and a real worker, checking that every request is counted with exactly
// the tokens it asked for, that a sweep gives one report per rate, and that bad flags and
// failing requests end with a clear message and exit code.

#include <unistd.h>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/testing/build_paths.h"
#include "tests/testing/json_lines_run.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_model.h"

namespace llmserve {
namespace {

using ::llmserve::testing::JsonLinesRun;
using ::llmserve::testing::NumberAfter;
using ::llmserve::testing::Subprocess;
using Json = nlohmann::json;

constexpr absl::Duration kPatience = absl::Seconds(120);

class BenchBinaryTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new ::llmserve::testing::ScopedTempDir();
    ASSERT_TRUE(::llmserve::testing::WriteTinyModel(dir_->path()).ok());
    worker_ = new Subprocess({::llmserve::testing::WorkerBinary(), "--model=" + dir_->path(),
                              "--served-model-name=tiny", "--host=127.0.0.1", "--port=0",
                              "--metrics-port=-1", "--threads=1", "--kv-cache-memory=64MiB"});
    ASSERT_TRUE(worker_->WaitForOutput("no metrics server", kPatience)) << worker_->output();
    worker_port_ = NumberAfter(worker_->output(), " on 127.0.0.1:");
    gateway_ =
        new Subprocess({::llmserve::testing::GatewayBinary(), "--host=127.0.0.1", "--grpc-port=0",
                        "--http-port=0", absl::StrCat("--workers=127.0.0.1:", worker_port_)});
    ASSERT_TRUE(gateway_->WaitForOutput("gateway: ready", kPatience)) << gateway_->output();
    grpc_port_ = NumberAfter(gateway_->output(), "gRPC on 127.0.0.1:");
    http_port_ = NumberAfter(gateway_->output(), "HTTP on http://127.0.0.1:");
  }
  static void TearDownTestSuite() {
    delete gateway_;
    delete worker_;
    delete dir_;
  }

  void SetUp() override {
    ASSERT_GT(http_port_, 0);
    ASSERT_GT(grpc_port_, 0);
    ASSERT_GT(worker_port_, 0);
  }

  static JsonLinesRun Bench(const std::vector<std::string>& flags) {
    std::vector<std::string> argv = {::llmserve::testing::BenchBinary(), "--progress=off"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    return ::llmserve::testing::RunForJsonLines(argv, kPatience);
  }

  static std::string Http() { return absl::StrCat("--target=127.0.0.1:", http_port_); }

  static ::llmserve::testing::ScopedTempDir* dir_;
  static Subprocess* worker_;
  static Subprocess* gateway_;
  static int worker_port_, grpc_port_, http_port_;
};

::llmserve::testing::ScopedTempDir* BenchBinaryTest::dir_ = nullptr;
Subprocess* BenchBinaryTest::worker_ = nullptr;
Subprocess* BenchBinaryTest::gateway_ = nullptr;
int BenchBinaryTest::worker_port_ = -1;
int BenchBinaryTest::grpc_port_ = -1;
int BenchBinaryTest::http_port_ = -1;

// Every request completed with exactly its tokens.
void ExpectAllCompleted(const Json& report, int requests, int output_len) {
  ASSERT_TRUE(report.is_object());
  EXPECT_EQ(report["completed"], requests) << report.dump();
  EXPECT_EQ(report["failed"], 0) << report.dump();
  EXPECT_EQ(report["output_tokens"], requests * output_len) << report.dump();
  EXPECT_GT(report["prompt_tokens"].get<int64_t>(), 0);
  EXPECT_GT(report["output_tokens_per_s"].get<double>(), 0);
  EXPECT_GT(report["ttft_s"]["p50"].get<double>(), 0);
  EXPECT_GE(report["e2e_s"]["p99"].get<double>(), report["ttft_s"]["p99"].get<double>());
  EXPECT_TRUE(report["tpot_s"].is_object());
  EXPECT_TRUE(report["itl_s"].is_object());
}

TEST_F(BenchBinaryTest, OpenAiCompletionsSweepWritesAReportPerRateAndAPlot) {
  ::llmserve::testing::ScopedTempDir out;
  const JsonLinesRun run = Bench({Http(), "--requests=12", "--prompt-len=24", "--output-len=6",
                                  "--request-rate=40,inf", "--max-concurrency=8", "--vocab-size=64",
                                  "--slo-ttft=10s", "--result-file=" + out.path() + "/result.json",
                                  "--plot=" + out.path() + "/sweep.png"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  ASSERT_EQ(run.lines.size(), 2u) << run.output;
  EXPECT_EQ(run.lines[0]["rate"], 40.0);
  EXPECT_EQ(run.lines[1]["rate"], "inf");
  for (const Json& report : run.lines) {
    ExpectAllCompleted(report, 12, 6);
    EXPECT_EQ(report["api"], "openai");
    EXPECT_EQ(report["model"], "tiny");           // from GET /v1/models
    EXPECT_EQ(report["prompt_tokens"], 12 * 24);  // token-id prompts, counted by the server
    EXPECT_EQ(report["max_concurrency"], 8);
    // Every request met a 10 s TTFT SLO.
    EXPECT_DOUBLE_EQ(report["goodput_requests_per_s"].get<double>(),
                     report["requests_per_s"].get<double>());
  }
  std::ifstream result(out.path() + "/result.json");
  const Json saved = Json::parse(result, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(saved.is_object());
  EXPECT_EQ(saved["runs"].size(), 2u);
  if (access("/usr/bin/gnuplot", X_OK) == 0) {
    std::ifstream png(out.path() + "/sweep.png", std::ios::binary);
    EXPECT_TRUE(png.good()) << run.output;
  }
}

TEST_F(BenchBinaryTest, ChatInferenceAndWorkerApisCountTheSameLoad) {
  const std::string tokenizer = "--tokenizer=" + dir_->path();
  const JsonLinesRun chat = Bench({Http(), "--api=openai-chat", tokenizer, "--requests=6",
                                   "--prompt-len=16", "--output-len=5", "--request-rate=100"});
  ASSERT_EQ(chat.exit_code, 0) << chat.output;
  ASSERT_EQ(chat.lines.size(), 1u) << chat.output;
  ExpectAllCompleted(chat.lines[0], 6, 5);
  EXPECT_EQ(chat.lines[0]["api"], "openai-chat");

  const JsonLinesRun inference =
      Bench({absl::StrCat("--target=127.0.0.1:", grpc_port_), "--api=inference", "--requests=6",
             "--prompt-len=16", "--output-len=5", "--format=table"});
  ASSERT_EQ(inference.exit_code, 0) << inference.output;
  EXPECT_NE(inference.output.find("TTFT ms p50 p99"), std::string::npos) << inference.output;
  EXPECT_NE(inference.output.find("inference 127.0.0.1:"), std::string::npos);

  const JsonLinesRun worker =
      Bench({absl::StrCat("--target=127.0.0.1:", worker_port_), "--api=worker", "--requests=6",
             "--prompt-len=16", "--output-len=5", "--max-concurrency=2"});
  ASSERT_EQ(worker.exit_code, 0) << worker.output;
  ASSERT_EQ(worker.lines.size(), 1u) << worker.output;
  ExpectAllCompleted(worker.lines[0], 6, 5);
  EXPECT_EQ(worker.lines[0]["client_threads"], 2);
}

TEST_F(BenchBinaryTest, DatasetRequestsGoAsWritten) {
  ::llmserve::testing::ScopedTempDir out;
  const std::string path = out.path() + "/prompts.jsonl";
  std::ofstream(path) << "{\"prompt\": \"once upon a time\", \"output_len\": 3}\n"
                      << "{\"messages\": [{\"role\": \"user\", \"content\": \"hello\"}], "
                         "\"output_len\": 4}\n";
  const JsonLinesRun run =
      Bench({Http(), "--api=openai-chat", "--dataset=" + path, "--requests=4"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  ASSERT_EQ(run.lines.size(), 1u) << run.output;
  EXPECT_EQ(run.lines[0]["completed"], 4);
  EXPECT_EQ(run.lines[0]["output_tokens"], 3 + 4 + 3 + 4);  // the file, twice
  EXPECT_EQ(run.lines[0]["dataset"], path);

  // Completions take no conversation: refused before anything is sent.
  const JsonLinesRun refused = Bench({Http(), "--dataset=" + path});
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("use --api=openai-chat"), std::string::npos) << refused.output;
}

TEST_F(BenchBinaryTest, FailedRequestsAreCountedByStatus) {
  // An unknown model: the gateway answers 404 to each request.
  const JsonLinesRun counted = Bench({Http(), "--model=nope", "--warmup=0", "--requests=3",
                                      "--vocab-size=64", "--prompt-len=4", "--output-len=2"});
  EXPECT_EQ(counted.exit_code, 3) << counted.output;
  ASSERT_EQ(counted.lines.size(), 1u) << counted.output;
  EXPECT_EQ(counted.lines[0]["failures"], Json::parse(R"({"http 404": 3})"));
  EXPECT_NE(counted.lines[0]["first_error"].get<std::string>().find("does not exist"),
            std::string::npos);
  // With a warm-up, the run stops there and says why.
  const JsonLinesRun warm = Bench({Http(), "--model=nope", "--vocab-size=64", "--requests=3"});
  EXPECT_EQ(warm.exit_code, 1) << warm.output;
  EXPECT_NE(warm.output.find("every warm-up request failed: http 404"), std::string::npos)
      << warm.output;
  // Nothing listening.
  const JsonLinesRun down = Bench({"--target=127.0.0.1:1", "--vocab-size=64"});
  EXPECT_EQ(down.exit_code, 1) << down.output;
  EXPECT_NE(down.output.find("cannot connect to 127.0.0.1:1"), std::string::npos) << down.output;
}

TEST_F(BenchBinaryTest, BadFlagsNameTheFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--api=carrier-pigeon", Http()}, "--api=carrier-pigeon"},
      {{}, "--target is required"},
      {{Http(), "--request-rate=2,-1"}, "--request_rate: '-1'"},
      {{Http(), "--range-ratio=1.5"}, "--range_ratio"},
      {{Http(), "--format=xml"}, "--format=xml"},
      {{"--target=https://x:443"}, "https is not supported"},
      {{Http(), "--api=openai-chat"}, "give --tokenizer DIR"},
      {{Http()}, "give --tokenizer DIR or --vocab_size N"},
      {{Http(), "--extra-body=[1]", "--vocab-size=9"}, "--extra_body is not a JSON object"},
      {{Http(), "--dataset=/nonexistent.jsonl"}, "cannot read dataset"},
      {{Http(), "--endpoint=v1/x"}, "--endpoint='v1/x' is not a path"},
      {{Http(), "--endpoint=/v1/x HTTP/1.0"}, "is not a path"},
      {{Http(), "--api-key=a\r\nX-Evil: 1"}, "--api_key holds a control character"},
  };
  for (const auto& [flags, message] : cases) {
    const JsonLinesRun run = Bench(flags);
    EXPECT_EQ(run.exit_code, 2) << run.output;
    EXPECT_NE(run.output.find(message), std::string::npos)
        << "expected '" << message << "' in: " << run.output;
  }
}

}  // namespace
}  // namespace llmserve
