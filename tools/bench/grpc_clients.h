// The benchmark's clients for llmserve's own gRPC APIs: a worker's llmserve.worker.v1.Worker
// (prompts as token ids) and a gateway's llmserve.v1.Inference (token ids, text or a chat), both
// through their streaming Generate call, greedy with EOS ignored so that each request makes
// exactly its output length.
//
// Thread-safe: gRPC stubs may be shared by many threads.

#ifndef LLMSERVE_TOOLS_BENCH_GRPC_CLIENTS_H_
#define LLMSERVE_TOOLS_BENCH_GRPC_CLIENTS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "llmserve/v1/inference.grpc.pb.h"
#include "llmserve/worker/v1/worker.grpc.pb.h"
#include "tools/bench/bench_client.h"

namespace llmserve::tools {

class WorkerBenchClient final : public BenchClient {
 public:
  explicit WorkerBenchClient(worker::v1::Worker::StubInterface* stub) : stub_(stub) {}
  // The worker's vocabulary size and served name (GetModelInfo).
  absl::StatusOr<worker::v1::ModelInfo> ModelInfo(absl::Duration timeout);
  RequestOutcome Send(const std::string& id, const BenchRequest& request,
                      absl::Time deadline) override;

 private:
  worker::v1::Worker::StubInterface* const stub_;
};

class InferenceBenchClient final : public BenchClient {
 public:
  // `model` may be empty when the gateway serves one model; `api_key` is sent as a bearer token
  // when not empty.
  InferenceBenchClient(::llmserve::v1::Inference::StubInterface* stub, std::string model,
                       std::string api_key)
      : stub_(stub), model_(std::move(model)), api_key_(std::move(api_key)) {}
  // The gateway's models (ListModels).
  absl::StatusOr<::llmserve::v1::ListModelsResponse> ListModels(absl::Duration timeout);
  RequestOutcome Send(const std::string& id, const BenchRequest& request,
                      absl::Time deadline) override;

 private:
  ::llmserve::v1::Inference::StubInterface* const stub_;
  const std::string model_;
  const std::string api_key_;
};

}  // namespace llmserve::tools

#endif  // LLMSERVE_TOOLS_BENCH_GRPC_CLIENTS_H_
