// llmserve-bench: a load generator that prints one JSON line, against a worker (--api=worker) or
// a gateway (--api=inference). The same options give the same prompts as llmserve-run --bench, so
// the three reports compare the engine, the worker service and the gateway.

#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "common/base/flag_names.h"
#include "common/base/worker_api_limits.h"
#include "tools/bench/worker_bench.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "host:port of the server to load");
ABSL_FLAG(std::string, api, "worker",
          "which API to call: worker (llmserve.worker.v1.Worker) or inference (a gateway's "
          "llmserve.v1.Inference)");
ABSL_FLAG(std::string, api_key, "", "with --api=inference: the bearer token");
ABSL_FLAG(int, requests, 64, "requests to send");
ABSL_FLAG(int, concurrency, 0, "most streams open at once (0: all requests at once)");
ABSL_FLAG(int, prompt_len, 128, "prompt tokens per request (random ids)");
ABSL_FLAG(int, output_len, 128, "tokens generated per request (EOS ignored)");
ABSL_FLAG(double, rate, 0.0, "requests per second, Poisson arrivals (0: all at once)");
ABSL_FLAG(double, shared_prefix, 0.0, "fraction of the prompt every request shares");
ABSL_FLAG(uint64_t, seed, 1, "seed of the prompts and arrivals");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Load generator: llmserve-bench --target=HOST:PORT [--requests=64 --prompt_len=128 "
      "--output_len=128]");
  llmserve::common::NormalizeFlagNames(argc, argv);
  absl::ParseCommandLine(argc, argv);
  const std::string api = absl::GetFlag(FLAGS_api);
  if (api != "worker" && api != "inference") {
    std::fprintf(stderr, "llmserve-bench: --api=%s is not one of worker, inference\n", api.c_str());
    return 2;
  }
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(llmserve::common::kWorkerApiMaxMessageBytes);
  auto channel = grpc::CreateCustomChannel(absl::GetFlag(FLAGS_target),
                                           grpc::InsecureChannelCredentials(), arguments);

  const llmserve::tools::BenchOptions options{.num_requests = absl::GetFlag(FLAGS_requests),
                                              .prompt_len = absl::GetFlag(FLAGS_prompt_len),
                                              .output_len = absl::GetFlag(FLAGS_output_len),
                                              .rate = absl::GetFlag(FLAGS_rate),
                                              .shared_prefix = absl::GetFlag(FLAGS_shared_prefix),
                                              .seed = absl::GetFlag(FLAGS_seed)};
  absl::StatusOr<std::string> report;
  if (api == "worker") {
    auto stub = llmserve::worker::v1::Worker::NewStub(channel);
    report =
        llmserve::tools::RunWorkerBenchmark(stub.get(), options, absl::GetFlag(FLAGS_concurrency));
  } else {
    auto stub = llmserve::v1::Inference::NewStub(channel);
    report = llmserve::tools::RunInferenceBenchmark(
        stub.get(), options, absl::GetFlag(FLAGS_concurrency), absl::GetFlag(FLAGS_api_key));
  }
  if (!report.ok()) {
    std::fprintf(stderr, "llmserve-bench: %s\n", report.status().ToString().c_str());
    return 1;
  }
  std::printf("%s\n", report->c_str());
  return 0;
}
