// The worker's Prometheus metrics (names prefixed llmserve_, every series labelled with the
// served model name). Two sources:
//   - events the service reports as they happen (tokens, finished requests, failures, steps,
//     the drain), kept in prometheus-cpp counters, gauges and histograms;
//   - the engine's load snapshot (running, waiting, KV usage, prefix-cache and preemption totals),
//     read at scrape time, so those gauges are exact rather than sampled.
//
// Optionally (WorkerMetricsConfig::vllm_names) every series that has a vLLM counterpart is also
// served under vLLM's name and labels (vllm:num_requests_waiting{model_name,engine}, ...), so
// dashboards, autoscalers and inference gateways written for vLLM read llmserve workers
// unmodified. Those series are copies made at scrape time from the same collected values, not a
// second set of counters: within one scrape both names always carry the same numbers.
//
// Thread-safe: every method may be called from any thread (the engine thread, gRPC threads).

#ifndef LLMSERVE_WORKER_SERVICE_WORKER_METRICS_H_
#define LLMSERVE_WORKER_SERVICE_WORKER_METRICS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/metric_family.h"
#include "prometheus/registry.h"
#include "worker/engine/engine.h"
#include "worker/service/load_accountant.h"

namespace llmserve::worker {

struct WorkerMetricsConfig {
  // The `model` label of every series (`model_name` under vLLM's names).
  std::string model_name;
  // KV cache layout, published as llmserve_cache_config_info's labels.
  int32_t block_size = 16;
  int32_t num_blocks = 0;
  // The model's runtime configuration, published as llmserve_model_config_info's labels: the
  // backend ("cpu", "cuda"), the weights' dtype, the quantization ("none", "int8") and whether the
  // LM head is quantized ("true", "false").
  std::string backend;
  std::string dtype;
  std::string quantization = "none";
  bool lm_head_quantized = false;
  // Also serve the series that have a vLLM counterpart under vLLM's names (--vllm_metric_names).
  bool vllm_names = false;
  // LoRA adapters that can run at once (--max_loras); 0: no LoRA series.
  int32_t max_loras = 0;
};

class WorkerMetrics {
 public:
  // `load` is called once per scrape (LoadAccountant::Load).
  WorkerMetrics(WorkerMetricsConfig config, std::function<EngineLoad()> load);

  // What /metrics serves: register each with the exposer.
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables() const;

  // Every engine report (engine thread); only forward passes count.
  void OnStep(const StepStats& step);
  // The first token of a request came `ttft_s` after it arrived.
  void OnFirstToken(double ttft_s);
  // `num_tokens` more tokens of one request arrived `seconds` after its previous ones.
  void OnInterToken(int num_tokens, double seconds);
  // A request ended with a finish reason (stop, length, abort).
  void OnFinished(const EngineOutput& final_output, int32_t prompt_tokens,
                  int32_t generated_tokens);
  // A request failed with `code` (rejected at the edge, or an engine error).
  void OnFailed(absl::StatusCode code);
  // The worker started draining (SIGTERM): llmserve_worker_draining reads 1 from now until the
  // process exits, so an alert can catch a drain that never finishes.
  void OnDrainStarted();

 private:
  class Collector;

  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<Collector> collector_;
  std::string model_name_;
  prometheus::Labels model_;
  prometheus::Counter* prompt_tokens_;
  prometheus::Counter* generation_tokens_;
  prometheus::Family<prometheus::Counter>* success_;
  prometheus::Family<prometheus::Counter>* failure_;
  prometheus::Gauge* draining_;
  prometheus::Histogram* ttft_;
  prometheus::Histogram* inter_token_;
  prometheus::Histogram* e2e_;
  prometheus::Histogram* queue_time_;
  prometheus::Histogram* request_prompt_tokens_;
  prometheus::Histogram* request_generation_tokens_;
  prometheus::Histogram* iteration_tokens_;
  prometheus::Histogram* step_duration_;
};

// "stop", "length", "abort" (errors count as failures, not here).
const char* FinishedReasonLabel(FinishReason reason);

// The vLLM-named copies of `families` (llmserve names in, vLLM names out; families without a vLLM
// counterpart are left out): label `model` becomes `model_name`, `num_blocks` becomes
// `num_gpu_blocks`, and every series gets vLLM v1's `engine="0"`. Values, buckets and types are
// unchanged. Exposed for tests and documentation; WorkerMetrics applies it at scrape time.
std::vector<prometheus::MetricFamily> VllmNamedCopies(
    const std::vector<prometheus::MetricFamily>& families);

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_SERVICE_WORKER_METRICS_H_
