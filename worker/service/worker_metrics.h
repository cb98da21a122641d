// The worker's Prometheus metrics (names prefixed llmserve_, every series labelled with the
// served model name). Two sources:
//   - events the service reports as they happen (tokens, finished requests, failures, steps),
//     kept in prometheus-cpp counters and histograms;
//   - the engine's load snapshot (running, waiting, KV usage, prefix-cache and preemption totals),
//     read at scrape time, so those gauges are exact rather than sampled.
//
// Thread-safe: every method may be called from any thread (the engine thread, gRPC threads).

#ifndef LLMSERVE_WORKER_SERVICE_WORKER_METRICS_H_
#define LLMSERVE_WORKER_SERVICE_WORKER_METRICS_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "worker/engine/engine.h"

namespace llmserve::worker {

class WorkerMetrics {
 public:
  // `load` is called at every scrape (Engine::Load).
  WorkerMetrics(const std::string& model_name, int32_t block_size, int32_t num_blocks,
                std::function<EngineLoad()> load);

  // What /metrics serves: register both with the exposer.
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables() const;

  // After every engine step (engine thread).
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

 private:
  class LoadCollector;

  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<LoadCollector> load_collector_;
  std::string model_name_;
  prometheus::Labels model_;
  prometheus::Counter* prompt_tokens_;
  prometheus::Counter* generation_tokens_;
  prometheus::Family<prometheus::Counter>* success_;
  prometheus::Family<prometheus::Counter>* failure_;
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

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_SERVICE_WORKER_METRICS_H_
