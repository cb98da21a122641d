// llmserve-worker as users run it: the real binary on a random loopback port with the tiny
// model, driven over gRPC and HTTP, stopped with SIGTERM.

#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "llmserve/worker/v1/worker.grpc.pb.h"
#include "tests/testing/build_paths.h"
#include "tests/testing/http_get.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_model.h"

namespace llmserve::worker {
namespace {

using ::llmserve::testing::NumberAfter;
using ::llmserve::testing::Subprocess;

constexpr absl::Duration kPatience = absl::Seconds(60);

class WorkerBinaryTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(::llmserve::testing::WriteTinyModel(dir_.path()).ok()); }

  std::vector<std::string> Args(std::vector<std::string> extra) {
    // No --host: the worker listens on loopback unless told otherwise (the tests read
    // "on 127.0.0.1:" from its log).
    std::vector<std::string> args = {::llmserve::testing::WorkerBinary(),
                                     "--model=" + dir_.path(),
                                     "--port=0",
                                     "--metrics-port=0",
                                     "--threads=1",
                                     "--kv-cache-memory=8MiB"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }

  ::llmserve::testing::ScopedTempDir dir_{"worker_binary_test"};
};

// The binary tells an unset --quantize_lm_head (int8 with quantized projections) from an explicit
// false, in both spellings.
TEST_F(WorkerBinaryTest, TheLmHeadFollowsTheProjectionsUnlessTheFlagSaysOtherwise) {
  for (const auto& [flags, int8_head] :
       {std::pair<std::vector<std::string>, bool>{{"--quantization=int8"}, true},
        {{"--quantization=int8", "--quantize-lm-head=false"}, false},
        {{"--quantization=int8", "--noquantize_lm_head"}, false},
        {{}, false}}) {
    Subprocess worker(Args(flags));
    ASSERT_TRUE(worker.WaitForOutput("/metrics", kPatience)) << worker.output();
    const int metrics_port = NumberAfter(worker.output(), "metrics on http://127.0.0.1:");
    const std::string metrics = ::llmserve::testing::HttpGet(metrics_port, "/metrics");
    EXPECT_NE(metrics.find(absl::StrCat("lm_head_quantized=\"", int8_head ? "true" : "false")),
              std::string::npos)
        << absl::StrJoin(flags, " ") << "\n"
        << metrics;
    EXPECT_EQ(worker.output().find("LM head in int8") != std::string::npos, int8_head)
        << worker.output();
  }
}

TEST_F(WorkerBinaryTest, ServesScrapesAndDrainsOnSigterm) {
  Subprocess worker(Args({"--max-num-seqs=1"}));
  ASSERT_TRUE(worker.started());
  ASSERT_TRUE(worker.WaitForOutput("/metrics", kPatience)) << worker.output();
  EXPECT_NE(worker.output().find("KV cache: "), std::string::npos) << worker.output();
  EXPECT_NE(worker.output().find("warm-up step done"), std::string::npos);
  const int port = NumberAfter(worker.output(), " on 127.0.0.1:");
  const int metrics_port = NumberAfter(worker.output(), "metrics on http://127.0.0.1:");
  ASSERT_GT(port, 0) << worker.output();
  ASSERT_GT(metrics_port, 0) << worker.output();

  auto stub = v1::Worker::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  v1::GenerateRequest request;
  request.set_request_id("binary-1");
  for (int i = 0; i < 12; ++i) request.add_prompt_token_ids(5 + i);
  request.set_max_tokens(400);
  request.set_ignore_eos(true);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kPatience));
  auto stream = stub->Generate(&context, request);
  v1::GenerateResponse response;
  ASSERT_TRUE(stream->Read(&response));
  int tokens = response.tokens_size();

  const std::string metrics = ::llmserve::testing::HttpGet(metrics_port, "/metrics");
  EXPECT_NE(metrics.find("llmserve_num_requests_running{model=\""), std::string::npos);
  EXPECT_NE(metrics.find("# TYPE llmserve_time_to_first_token_seconds histogram"),
            std::string::npos);

  // SIGTERM while the stream runs: it still completes, then the process exits 0.
  worker.Signal(SIGTERM);
  while (stream->Read(&response)) tokens += response.tokens_size();
  const grpc::Status status = stream->Finish();
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(tokens, 400);
  EXPECT_EQ(response.finish_reason(), ::llmserve::v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(worker.WaitForExit(kPatience), 0) << worker.output();
  EXPECT_NE(worker.output().find("draining"), std::string::npos);
}

TEST_F(WorkerBinaryTest, BadFlagsFailWithAClearMessage) {
  {
    Subprocess worker(Args({"--block-size=0"}));
    EXPECT_EQ(worker.WaitForExit(kPatience), 2);
    EXPECT_NE(worker.output().find("--block_size=0 is outside [1, 1024]"), std::string::npos)
        << worker.output();
  }
  {
    Subprocess worker(Args({"--kv-cache-memory=lots"}));
    EXPECT_EQ(worker.WaitForExit(kPatience), 2);
    EXPECT_NE(worker.output().find("--kv_cache_memory"), std::string::npos) << worker.output();
  }
  {
    Subprocess worker(
        {::llmserve::testing::WorkerBinary(), "--model=" + dir_.path() + "/missing", "--port=0"});
    EXPECT_EQ(worker.WaitForExit(kPatience), 1);
    EXPECT_NE(worker.output().find("NOT_FOUND"), std::string::npos) << worker.output();
  }
  {
    Subprocess worker(Args({"--dtype=f8"}));
    EXPECT_EQ(worker.WaitForExit(kPatience), 2);
    EXPECT_NE(worker.output().find("--dtype"), std::string::npos) << worker.output();
  }
  {
    Subprocess worker(Args({"--quantization=int4"}));
    EXPECT_EQ(worker.WaitForExit(kPatience), 2);
    EXPECT_NE(worker.output().find("--quantization: unknown quantization 'int4'"),
              std::string::npos)
        << worker.output();
  }
  {
    Subprocess worker(Args({"--quantize_lm_head", "--backend=cuda"}));
    EXPECT_EQ(worker.WaitForExit(kPatience), 2);
    EXPECT_NE(worker.output().find("--quantize_lm_head runs on --backend=cpu only"),
              std::string::npos)
        << worker.output();
  }
}

}  // namespace
}  // namespace llmserve::worker
