#include "worker/service/worker_metrics.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/metrics/buckets.h"
#include "prometheus/gauge.h"

namespace llmserve::worker {

// Reads the engine's load snapshot at scrape time.
class WorkerMetrics::LoadCollector : public prometheus::Collectable {
 public:
  LoadCollector(std::string model_name, std::function<EngineLoad()> load)
      : model_name_(std::move(model_name)), load_(std::move(load)) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    const EngineLoad load = load_();
    const double usage =
        load.kv_blocks_total == 0
            ? 0
            : 1.0 - static_cast<double>(load.kv_blocks_free) / load.kv_blocks_total;
    return {
        Family("llmserve_num_requests_running", "Requests in the running batch.",
               prometheus::MetricType::Gauge, load.running),
        Family("llmserve_num_requests_waiting",
               "Requests waiting to be scheduled (including preempted ones).",
               prometheus::MetricType::Gauge, load.waiting),
        Family("llmserve_kv_cache_usage_ratio",
               "Fraction of KV cache blocks held by requests (cached free blocks count as free).",
               prometheus::MetricType::Gauge, usage),
        Family("llmserve_prefix_cache_queries_total",
               "Prompt tokens looked up in the prefix cache.", prometheus::MetricType::Counter,
               static_cast<double>(load.prefix_cache_queries)),
        Family("llmserve_prefix_cache_hits_total", "Prompt tokens served from the prefix cache.",
               prometheus::MetricType::Counter, static_cast<double>(load.prefix_cache_hits)),
        Family("llmserve_num_preemptions_total",
               "Requests preempted (KV cache dropped, recomputed later).",
               prometheus::MetricType::Counter, static_cast<double>(load.preemptions)),
    };
  }

 private:
  prometheus::MetricFamily Family(std::string name, std::string help, prometheus::MetricType type,
                                  double value) const {
    prometheus::ClientMetric metric;
    metric.label.push_back({"model", model_name_});
    if (type == prometheus::MetricType::Counter) {
      metric.counter.value = value;
    } else {
      metric.gauge.value = value;
    }
    return prometheus::MetricFamily{std::move(name), std::move(help), type, {std::move(metric)}};
  }

  std::string model_name_;
  std::function<EngineLoad()> load_;
};

const char* FinishedReasonLabel(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    default:
      return "abort";
  }
}

WorkerMetrics::WorkerMetrics(const std::string& model_name, int32_t block_size, int32_t num_blocks,
                             std::function<EngineLoad()> load)
    : registry_(std::make_shared<prometheus::Registry>()),
      load_collector_(std::make_shared<LoadCollector>(model_name, std::move(load))),
      model_name_(model_name),
      model_{{"model", model_name}} {
  auto counter = [&](const std::string& name, const std::string& help) -> prometheus::Counter* {
    return &prometheus::BuildCounter().Name(name).Help(help).Register(*registry_).Add(model_);
  };
  auto histogram = [&](const std::string& name, const std::string& help,
                       const prometheus::Histogram::BucketBoundaries& buckets) {
    return &prometheus::BuildHistogram()
                .Name(name)
                .Help(help)
                .Register(*registry_)
                .Add(model_, buckets);
  };
  prompt_tokens_ = counter("llmserve_prompt_tokens_total", "Prompt tokens processed (prefill).");
  generation_tokens_ = counter("llmserve_generation_tokens_total", "Tokens generated.");
  success_ = &prometheus::BuildCounter()
                  .Name("llmserve_request_success_total")
                  .Help("Requests that finished, by finished_reason (stop, length, abort).")
                  .Register(*registry_);
  failure_ = &prometheus::BuildCounter()
                  .Name("llmserve_request_failure_total")
                  .Help("Requests that failed or were refused, by gRPC status code name.")
                  .Register(*registry_);
  ttft_ = histogram("llmserve_time_to_first_token_seconds",
                    "From arrival at the worker to the first generated token.",
                    common::RequestLatencyBuckets());
  inter_token_ =
      histogram("llmserve_inter_token_latency_seconds",
                "Time between two generated tokens of a request.", common::TokenLatencyBuckets());
  e2e_ = histogram("llmserve_e2e_request_latency_seconds", "From arrival to finish.",
                   common::RequestLatencyBuckets());
  queue_time_ = histogram("llmserve_request_queue_time_seconds",
                          "From arrival to the first forward pass that included the request.",
                          common::RequestLatencyBuckets());
  request_prompt_tokens_ =
      histogram("llmserve_request_prompt_tokens", "Prompt tokens per finished request.",
                common::TokenCountBuckets());
  request_generation_tokens_ =
      histogram("llmserve_request_generation_tokens", "Generated tokens per finished request.",
                common::TokenCountBuckets());
  iteration_tokens_ = histogram("llmserve_iteration_tokens",
                                "Tokens in one engine step (prompt chunks plus decodes).",
                                common::TokenCountBuckets());
  step_duration_ = histogram("llmserve_step_duration_seconds",
                             "Wall time of one engine step (schedule, forward, sample, update).",
                             common::TokenLatencyBuckets());
  prometheus::BuildGauge()
      .Name("llmserve_cache_config_info")
      .Help("KV cache configuration (labels); the value is always 1.")
      .Register(*registry_)
      .Add({{"model", model_name},
            {"block_size", absl::StrCat(block_size)},
            {"num_blocks", absl::StrCat(num_blocks)}})
      .Set(1);
}

std::vector<std::shared_ptr<prometheus::Collectable>> WorkerMetrics::collectables() const {
  return {registry_, load_collector_};
}

void WorkerMetrics::OnStep(const StepStats& step) {
  prompt_tokens_->Increment(static_cast<double>(step.prompt_tokens));
  generation_tokens_->Increment(static_cast<double>(step.generated_tokens));
  iteration_tokens_->Observe(static_cast<double>(step.num_tokens));
  step_duration_->Observe(step.duration_s);
}

void WorkerMetrics::OnFirstToken(double ttft_s) { ttft_->Observe(ttft_s); }

void WorkerMetrics::OnInterToken(int num_tokens, double seconds) {
  // Tokens that arrive together (merged outputs) share the gap evenly.
  for (int i = 0; i < num_tokens; ++i) inter_token_->Observe(seconds / num_tokens);
}

void WorkerMetrics::OnFinished(const EngineOutput& final_output, int32_t prompt_tokens,
                               int32_t generated_tokens) {
  success_
      ->Add({{"model", model_name_}, {"finished_reason", FinishedReasonLabel(final_output.finish)}})
      .Increment();
  e2e_->Observe(final_output.total_s);
  if (final_output.finish != FinishReason::kAbort) queue_time_->Observe(final_output.queue_s);
  request_prompt_tokens_->Observe(prompt_tokens);
  request_generation_tokens_->Observe(generated_tokens);
}

void WorkerMetrics::OnFailed(absl::StatusCode code) {
  failure_
      ->Add(
          {{"model", model_name_}, {"code", absl::AsciiStrToLower(absl::StatusCodeToString(code))}})
      .Increment();
}

}  // namespace llmserve::worker
