#include "tools/bench/worker_bench.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/status/grpc_status.h"

namespace llmserve::tools {
namespace {

struct Sample {
  bool ok = false;
  int64_t tokens = 0;
  double ttft_s = 0;
  double e2e_s = 0;
  std::string error;
};

Sample RunOne(worker::v1::Worker::StubInterface* stub, const std::string& id,
              const std::vector<int32_t>& prompt, int32_t output_len) {
  worker::v1::GenerateRequest request;
  request.set_request_id(id);
  request.mutable_prompt_token_ids()->Add(prompt.begin(), prompt.end());
  request.mutable_sampling()->set_temperature(0);
  request.set_max_tokens(output_len);
  request.set_ignore_eos(true);
  grpc::ClientContext context;
  Sample sample;
  const absl::Time start = absl::Now();
  auto reader = stub->Generate(&context, request);
  worker::v1::GenerateResponse response;
  while (reader->Read(&response)) {
    if (sample.tokens == 0 && response.tokens_size() > 0) {
      sample.ttft_s = absl::ToDoubleSeconds(absl::Now() - start);
    }
    sample.tokens += response.tokens_size();
  }
  const grpc::Status status = reader->Finish();
  sample.e2e_s = absl::ToDoubleSeconds(absl::Now() - start);
  sample.ok = status.ok();
  if (!status.ok()) sample.error = common::FromGrpcStatus(status).ToString();
  return sample;
}

using RunOneFn = std::function<Sample(const std::string& id, const std::vector<int32_t>& prompt)>;

std::string Report(const char* api, const BenchOptions& options, int threads, double seconds,
                   const std::vector<Sample>& samples) {
  std::vector<double> ttft, tpot, e2e;
  int64_t generated = 0, errors = 0;
  std::string first_error;
  for (const Sample& sample : samples) {
    if (!sample.ok) {
      if (errors++ == 0) first_error = sample.error;
      continue;
    }
    generated += sample.tokens;
    ttft.push_back(sample.ttft_s);
    e2e.push_back(sample.e2e_s);
    if (sample.tokens > 1) tpot.push_back((sample.e2e_s - sample.ttft_s) / (sample.tokens - 1));
  }
  nlohmann::json report = {
      {"api", api},
      {"requests", options.num_requests},
      {"concurrency", threads},
      {"prompt_len", options.prompt_len},
      {"output_len", options.output_len},
      {"rate", options.rate},
      {"shared_prefix", options.shared_prefix},
      {"errors", errors},
      {"elapsed_s", seconds},
      {"requests_per_s", (options.num_requests - errors) / seconds},
      {"output_tokens_per_s", generated / seconds},
      {"total_tokens_per_s",
       (generated + static_cast<double>(options.num_requests - errors) * options.prompt_len) /
           seconds},
      {"ttft_s", Percentiles(ttft)},
      {"tpot_s", Percentiles(tpot)},
      {"e2e_s", Percentiles(e2e)},
  };
  if (errors > 0) report["first_error"] = first_error;
  return report.dump();
}

absl::StatusOr<std::string> RunLoad(const char* api, int64_t vocab_size,
                                    const BenchOptions& options, int concurrency,
                                    const RunOneFn& run_one) {
  absl::StatusOr<BenchLoad> load = MakeBenchLoad(options, vocab_size);
  if (!load.ok()) return load.status();
  const int threads =
      concurrency <= 0 ? options.num_requests : std::min(concurrency, options.num_requests);
  std::vector<Sample> samples(options.num_requests);
  std::atomic<int> next{0};
  const std::string run_id = absl::StrCat(absl::ToUnixMicros(absl::Now()));
  const absl::Time start = absl::Now();
  std::vector<std::thread> clients;
  for (int t = 0; t < threads; ++t) {
    clients.emplace_back([&] {
      for (int i = next++; i < options.num_requests; i = next++) {
        if (!load->arrivals.empty()) absl::SleepFor(start + load->arrivals[i] - absl::Now());
        samples[i] = run_one(absl::StrCat("bench-", run_id, "-", i), load->prompts[i]);
      }
    });
  }
  for (std::thread& client : clients) client.join();
  return Report(api, options, threads, absl::ToDoubleSeconds(absl::Now() - start), samples);
}

Sample RunOneInference(::llmserve::v1::Inference::StubInterface* stub, const std::string& id,
                       const std::vector<int32_t>& prompt, int32_t output_len,
                       const std::string& api_key) {
  ::llmserve::v1::GenerateRequest request;
  request.set_request_id(id);
  request.mutable_token_ids()->mutable_ids()->Add(prompt.begin(), prompt.end());
  request.mutable_sampling()->set_temperature(0);
  request.mutable_stopping()->set_max_tokens(output_len);
  request.mutable_stopping()->set_ignore_eos(true);
  grpc::ClientContext context;
  if (!api_key.empty()) context.AddMetadata("authorization", "Bearer " + api_key);
  Sample sample;
  const absl::Time start = absl::Now();
  auto reader = stub->GenerateStream(&context, request);
  ::llmserve::v1::GenerateStreamResponse response;
  while (reader->Read(&response)) {
    if (sample.tokens == 0 && response.tokens_size() > 0) {
      sample.ttft_s = absl::ToDoubleSeconds(absl::Now() - start);
    }
    sample.tokens += response.tokens_size();
  }
  const grpc::Status status = reader->Finish();
  sample.e2e_s = absl::ToDoubleSeconds(absl::Now() - start);
  sample.ok = status.ok();
  if (!status.ok()) sample.error = common::FromGrpcStatus(status).ToString();
  return sample;
}

}  // namespace

absl::StatusOr<std::string> RunWorkerBenchmark(worker::v1::Worker::StubInterface* stub,
                                               const BenchOptions& options, int concurrency) {
  grpc::ClientContext info_context;
  worker::v1::ModelInfo info;
  const grpc::Status info_status =
      stub->GetModelInfo(&info_context, worker::v1::GetModelInfoRequest(), &info);
  if (!info_status.ok()) return common::FromGrpcStatus(info_status);
  return RunLoad("worker", info.vocab_size(), options, concurrency,
                 [&](const std::string& id, const std::vector<int32_t>& prompt) {
                   return RunOne(stub, id, prompt, options.output_len);
                 });
}

absl::StatusOr<std::string> RunInferenceBenchmark(::llmserve::v1::Inference::StubInterface* stub,
                                                  const BenchOptions& options, int concurrency,
                                                  const std::string& api_key) {
  grpc::ClientContext context;
  if (!api_key.empty()) context.AddMetadata("authorization", "Bearer " + api_key);
  ::llmserve::v1::ListModelsResponse models;
  const grpc::Status status = stub->ListModels(&context, {}, &models);
  if (!status.ok()) return common::FromGrpcStatus(status);
  if (models.models_size() == 0) return absl::UnavailableError("the gateway lists no model");
  return RunLoad("inference", models.models(0).vocab_size(), options, concurrency,
                 [&](const std::string& id, const std::vector<int32_t>& prompt) {
                   return RunOneInference(stub, id, prompt, options.output_len, api_key);
                 });
}

}  // namespace llmserve::tools
