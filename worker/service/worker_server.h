// A whole worker process minus its command line: loads the model into an engine, warms it up,
// serves llmserve.worker.v1.Worker with gRPC health and reflection, exposes /metrics, and
// drains on request. main.cc and the in-process tests both run it.
//
// Health (grpc.health.v1): the empty service name is liveness (SERVING while the process runs,
// draining included: a busy or draining worker must not be restarted); the name
// "llmserve.worker.v1.Worker" is readiness (SERVING once weights are loaded and a warm-up step ran,
// NOT_SERVING from the start of a drain). The port opens only when the worker is ready.
//
// Thread-safe: Drain may be called from any thread, once.

#ifndef LLMSERVE_WORKER_SERVICE_WORKER_SERVER_H_
#define LLMSERVE_WORKER_SERVICE_WORKER_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/metrics/metrics_exposer.h"
#include "common/tls/grpc_tls.h"
#include "common/tracing/tracer.h"
#include "worker/engine/engine.h"
#include "worker/model/dtype.h"
#include "worker/model/pooling_config.h"
#include "worker/model/quantization.h"
#include "worker/service/load_accountant.h"
#include "worker/service/worker_metrics.h"
#include "worker/service/worker_service.h"

namespace llmserve::worker {

struct WorkerServerOptions {
  std::string model_dir;
  // Empty: the model directory's name.
  std::string served_model_name;
  // "cpu" (or "cuda" when built with it).
  std::string backend = "cpu";
  int device = 0;
  DType dtype = DType::kF32;
  // Weights quantized at load (both backends), and the LM head with them (cpu backend only; unset:
  // exactly when the projections are quantized, CpuBackendOptions).
  Quantization quantization = Quantization::kNone;
  std::optional<bool> quantize_lm_head;
  // Integer dot products on activations quantized per token (cpu backend, quantized models only).
  bool quantized_activations = false;
  std::string host = "0.0.0.0";
  // 0 picks a free port (tests); port() tells which.
  int port = 50051;
  // -1: no metrics server; 0 picks a free port.
  int metrics_port = 9400;
  // KV cache size: bytes when > 0, otherwise this fraction of the memory available after the
  // weights are loaded.
  int64_t kv_cache_bytes = 0;
  double kv_cache_fraction = 0.25;
  int32_t block_size = 16;
  int32_t max_num_seqs = 64;
  int32_t max_num_batched_tokens = 2048;
  // 0: the model's context length.
  int64_t max_model_len = 0;
  bool enable_prefix_caching = true;
  // Kernel threads; 0: one per hardware thread.
  int threads = 0;
  // Requests allowed to wait before RESOURCE_EXHAUSTED; 0: no limit.
  int32_t max_queue = 256;
  absl::Duration drain_timeout = absl::Seconds(30);
  // Also serve the metrics that have a vLLM counterpart under vLLM's names and labels
  // (vllm:num_requests_waiting{model_name}, ...), for consumers written for vLLM.
  bool vllm_metric_names = false;
  // Speculative decoding (EngineConfig::speculative).
  SpeculativeConfig speculative;
  // "generate", or "embed": serve the model as embeddings (GenerateRequest.embedding), pooled by
  // `pooling` (unset: the model directory's sentence-transformers Pooling module, else last
  // token) and normalized to unit length unless normalize_embeddings is false.
  // LoRA adapters loaded at start (name, directory), adapters that can run at once (0: no LoRA),
  // the largest rank, and whether Load/UnloadLoraAdapter may change them at run time. cpu only.
  std::vector<std::pair<std::string, std::string>> lora_modules;
  int32_t max_loras = 0;
  int64_t max_lora_rank = 64;
  bool allow_runtime_lora_updating = false;
  std::string task = "generate";
  std::optional<PoolingMethod> pooling;
  bool normalize_embeddings = true;
  // TLS on the gRPC port (and mutual TLS with a client CA); empty: plaintext.
  common::ServerTlsFiles tls;
  // TEST ONLY (--test_only_crash_on_prompt_tokens): crash on a prompt holding these ids in a row
  // (WorkerService::CrashOnPromptTokensForTesting). Empty: off.
  std::vector<int32_t> test_only_crash_on_prompt_tokens;
  // OpenTelemetry traces (common/tracing/); an empty endpoint: none.
  common::tracing::TracingFlags tracing;
};

// INVALID_ARGUMENT naming the option (with the flag spelling) for values out of range.
absl::Status ValidateWorkerServerOptions(const WorkerServerOptions& options);

class WorkerServer {
 public:
  // Loads, warms up, and starts listening. Errors name what failed: the model (NOT_FOUND,
  // INVALID_ARGUMENT), --backend=cuda without the plugin (NOT_FOUND) or a device
  // (FAILED_PRECONDITION), a port in use (UNAVAILABLE).
  static absl::StatusOr<std::unique_ptr<WorkerServer>> Start(const WorkerServerOptions& options);
  // Drains (if not yet) and stops.
  ~WorkerServer();

  int port() const { return port_; }
  // -1 without a metrics server.
  int metrics_port() const { return metrics_ == nullptr ? -1 : exposer_->port(); }
  const Engine& engine() const { return *engine_; }
  // The engine's load as the load stream and /metrics see it.
  const LoadAccountant& load() const { return load_; }
  const v1::ModelInfo& model_info() const { return model_info_; }

  // Readiness NOT_SERVING, new calls UNAVAILABLE, llmserve_worker_draining 1; waits for running
  // requests up to the drain timeout, aborts the rest (UNAVAILABLE naming the timeout), then shuts
  // the gRPC server down. Returns how many requests were aborted.
  int Drain();

 private:
  WorkerServer() = default;
  // Start's steps, in order (each needs the ones before): the engine built from the model files
  // (not started), what GetModelInfo answers, the metrics and their exposer, the engine thread
  // and its warm-up step, the gRPC service (with structured outputs and tracing), and the
  // listener with its health service.
  absl::Status LoadEngine();
  absl::Status DescribeModel();
  // --task=embed: how embeddings are made (the model's sentence-transformers files and flags).
  absl::Status DescribeEmbeddings(const ModelConfig& config, v1::ModelInfo* info);
  absl::Status StartMetrics();
  absl::Status StartEngine();
  absl::Status MakeService();
  absl::Status Listen(const std::shared_ptr<grpc::ServerCredentials>& credentials);

  WorkerServerOptions options_;
  std::string model_name_;
  // What runs: the flag, or the checkpoint's own.
  Quantization quantization_ = Quantization::kNone;
  // What the engine reports every iteration to (from its creation on, the warm-up included);
  // first, so that it outlives every reader.
  LoadAccountant load_;
  // Before the engine, so that it goes after: the engine's last outputs end spans. Null without
  // tracing.
  std::unique_ptr<common::tracing::Tracer> tracer_;
  std::unique_ptr<Engine> engine_;
  v1::ModelInfo model_info_;
  std::unique_ptr<WorkerMetrics> metrics_;
  // What the engine thread also reports steps to (metrics_ once warmed up).
  std::atomic<WorkerMetrics*> step_metrics_{nullptr};
  std::unique_ptr<common::MetricsExposer> exposer_;
  std::unique_ptr<StructuredOutputCompiler> structured_;
  std::unique_ptr<WorkerService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::atomic<bool> drained_{false};
};

// The gRPC health service name that reports readiness.
inline constexpr char kReadinessServiceName[] = "llmserve.worker.v1.Worker";

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_SERVICE_WORKER_SERVER_H_
