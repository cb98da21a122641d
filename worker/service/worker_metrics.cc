#include "worker/service/worker_metrics.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/metrics/buckets.h"

namespace llmserve::worker {
namespace {

// vLLM's name for each llmserve series that has one (vLLM v1's vllm/v1/metrics/loggers.py;
// prometheus_client appends _total to counters, so vllm:prompt_tokens is served as
// vllm:prompt_tokens_total). Two entries for one llmserve name keep a deprecated vLLM name
// alongside its replacement, because consumers still read them: the Gateway API Inference
// Extension's endpoint picker defaulted to vllm:gpu_cache_usage_perc up to v1.2, and
// vllm:time_per_output_token_seconds (renamed vllm:inter_token_latency_seconds in vLLM 0.11) is
// in many dashboards.
struct VllmName {
  absl::string_view llmserve;
  absl::string_view vllm;
};
constexpr VllmName kVllmNames[] = {
    {"llmserve_num_requests_running", "vllm:num_requests_running"},
    {"llmserve_num_requests_waiting", "vllm:num_requests_waiting"},
    // Both are a 0..1 fraction despite the name ("1 means 100 percent usage"), as ours.
    {"llmserve_kv_cache_usage_ratio", "vllm:kv_cache_usage_perc"},
    {"llmserve_kv_cache_usage_ratio", "vllm:gpu_cache_usage_perc"},
    {"llmserve_prefix_cache_queries_total", "vllm:prefix_cache_queries_total"},
    {"llmserve_prefix_cache_hits_total", "vllm:prefix_cache_hits_total"},
    {"llmserve_num_preemptions_total", "vllm:num_preemptions_total"},
    {"llmserve_prompt_tokens_total", "vllm:prompt_tokens_total"},
    {"llmserve_generation_tokens_total", "vllm:generation_tokens_total"},
    {"llmserve_request_success_total", "vllm:request_success_total"},
    {"llmserve_time_to_first_token_seconds", "vllm:time_to_first_token_seconds"},
    {"llmserve_inter_token_latency_seconds", "vllm:inter_token_latency_seconds"},
    {"llmserve_inter_token_latency_seconds", "vllm:time_per_output_token_seconds"},
    {"llmserve_e2e_request_latency_seconds", "vllm:e2e_request_latency_seconds"},
    {"llmserve_request_queue_time_seconds", "vllm:request_queue_time_seconds"},
    {"llmserve_request_prompt_tokens", "vllm:request_prompt_tokens"},
    {"llmserve_request_generation_tokens", "vllm:request_generation_tokens"},
    {"llmserve_iteration_tokens", "vllm:iteration_tokens_total"},
    {"llmserve_cache_config_info", "vllm:cache_config_info"},
    {"llmserve_spec_decode_num_drafts_total", "vllm:spec_decode_num_drafts_total"},
    {"llmserve_spec_decode_num_draft_tokens_total", "vllm:spec_decode_num_draft_tokens_total"},
    {"llmserve_spec_decode_num_accepted_tokens_total",
     "vllm:spec_decode_num_accepted_tokens_total"},
    {"llmserve_spec_decode_num_accepted_tokens_per_pos_total",
     "vllm:spec_decode_num_accepted_tokens_per_pos_total"},
    // What the Gateway API Inference Extension's endpoint picker reads for LoRA affinity.
    {"llmserve_lora_requests_info", "vllm:lora_requests_info"},
};

// vLLM's label names for ours; labels not listed keep their name.
absl::string_view VllmLabelName(absl::string_view name) {
  if (name == "model") return "model_name";
  // The endpoint picker reads the block count from this label of vllm:cache_config_info.
  if (name == "num_blocks") return "num_gpu_blocks";
  return name;
}

prometheus::MetricFamily LoadFamily(std::string name, std::string help, prometheus::MetricType type,
                                    const std::string& model_name, double value) {
  prometheus::ClientMetric metric;
  metric.label.push_back({"model", model_name});
  if (type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  return prometheus::MetricFamily{std::move(name), std::move(help), type, {std::move(metric)}};
}

// The LoRA series (max_loras > 0): vLLM's info gauge (the adapters with running and waiting
// requests as comma-separated labels, the value the Unix time they were counted) and ours, the
// requests of each adapter.
void AddLoraFamilies(const EngineLoad& load, const std::string& model_name, int32_t max_loras,
                     std::vector<prometheus::MetricFamily>& families) {
  std::vector<std::string> running, waiting;
  prometheus::MetricFamily running_family{
      "llmserve_lora_requests_running",
      "Running requests of each LoRA adapter (adapters with live requests only).",
      prometheus::MetricType::Gauge,
      {}};
  prometheus::MetricFamily waiting_family{
      "llmserve_lora_requests_waiting",
      "Waiting requests of each LoRA adapter (adapters with live requests only).",
      prometheus::MetricType::Gauge,
      {}};
  for (const LoraAdapterLoad& adapter : load.lora_adapters) {
    if (adapter.running > 0) running.push_back(adapter.name);
    if (adapter.waiting > 0) waiting.push_back(adapter.name);
    for (auto [family, count] : {std::pair{&running_family, adapter.running},
                                 std::pair{&waiting_family, adapter.waiting}}) {
      prometheus::ClientMetric metric;
      metric.label = {{"lora_adapter", adapter.name}, {"model", model_name}};
      metric.gauge.value = count;
      family->metric.push_back(std::move(metric));
    }
  }
  prometheus::ClientMetric info;
  info.label = {{"max_lora", absl::StrCat(max_loras)},
                {"model", model_name},
                {"running_lora_adapters", absl::StrJoin(running, ",")},
                {"waiting_lora_adapters", absl::StrJoin(waiting, ",")}};
  info.gauge.value = absl::ToDoubleSeconds(load.lora_adapters_time - absl::UnixEpoch());
  families.push_back({"llmserve_lora_requests_info",
                      "LoRA adapters with running and waiting requests (labels); the value is "
                      "when they were counted (Unix seconds).",
                      prometheus::MetricType::Gauge,
                      {std::move(info)}});
  families.push_back(std::move(running_family));
  families.push_back(std::move(waiting_family));
}

// The gauges and counters read from the engine's load snapshot.
std::vector<prometheus::MetricFamily> LoadFamilies(const EngineLoad& load,
                                                   const std::string& model_name,
                                                   int32_t max_loras) {
  const double usage = load.kv_blocks_total == 0
                           ? 0
                           : 1.0 - static_cast<double>(load.kv_blocks_free) / load.kv_blocks_total;
  std::vector<prometheus::MetricFamily> families = {
      LoadFamily("llmserve_num_requests_running", "Requests in the running batch.",
                 prometheus::MetricType::Gauge, model_name, load.running),
      LoadFamily("llmserve_num_requests_waiting",
                 "Requests waiting to be scheduled (including preempted ones).",
                 prometheus::MetricType::Gauge, model_name, load.waiting),
      LoadFamily("llmserve_kv_cache_usage_ratio",
                 "Fraction of KV cache blocks held by requests (cached free blocks count as free).",
                 prometheus::MetricType::Gauge, model_name, usage),
      LoadFamily("llmserve_prefix_cache_queries_total",
                 "Prompt tokens looked up in the prefix cache.", prometheus::MetricType::Counter,
                 model_name, static_cast<double>(load.prefix_cache_queries)),
      LoadFamily("llmserve_prefix_cache_hits_total", "Prompt tokens served from the prefix cache.",
                 prometheus::MetricType::Counter, model_name,
                 static_cast<double>(load.prefix_cache_hits)),
      LoadFamily("llmserve_num_preemptions_total",
                 "Requests preempted (KV cache dropped, recomputed later).",
                 prometheus::MetricType::Counter, model_name,
                 static_cast<double>(load.preemptions)),
  };
  if (max_loras > 0) AddLoraFamilies(load, model_name, max_loras, families);
  // Speculative decoding, only when it is on (as vLLM registers them only then).
  if (load.spec_accepted_per_position.empty()) return families;
  families.push_back(LoadFamily(
      "llmserve_spec_decode_num_drafts_total",
      "Speculative verifications: a request's draft tokens checked in one step.",
      prometheus::MetricType::Counter, model_name, static_cast<double>(load.spec_drafts)));
  families.push_back(LoadFamily("llmserve_spec_decode_num_draft_tokens_total",
                                "Draft tokens verified.", prometheus::MetricType::Counter,
                                model_name, static_cast<double>(load.spec_draft_tokens)));
  families.push_back(LoadFamily(
      "llmserve_spec_decode_num_accepted_tokens_total",
      "Draft tokens the model accepted (generated tokens that cost no step of their own).",
      prometheus::MetricType::Counter, model_name, static_cast<double>(load.spec_accepted_tokens)));
  prometheus::MetricFamily per_position{
      "llmserve_spec_decode_num_accepted_tokens_per_pos_total",
      "Draft tokens accepted at each draft position (0 = the first draft of a verification).",
      prometheus::MetricType::Counter,
      {}};
  for (size_t position = 0; position < load.spec_accepted_per_position.size(); ++position) {
    prometheus::ClientMetric metric;
    metric.label = {{"model", model_name}, {"position", absl::StrCat(position)}};
    metric.counter.value = static_cast<double>(load.spec_accepted_per_position[position]);
    per_position.metric.push_back(std::move(metric));
  }
  families.push_back(std::move(per_position));
  return families;
}

}  // namespace

std::vector<prometheus::MetricFamily> VllmNamedCopies(
    const std::vector<prometheus::MetricFamily>& families) {
  std::vector<prometheus::MetricFamily> copies;
  for (const VllmName& names : kVllmNames) {
    const auto family =
        std::find_if(families.begin(), families.end(),
                     [&](const prometheus::MetricFamily& f) { return f.name == names.llmserve; });
    if (family == families.end()) continue;
    prometheus::MetricFamily copy = *family;
    copy.name = std::string(names.vllm);
    copy.help = absl::StrCat("vLLM's name of ", names.llmserve, ": ", family->help);
    for (prometheus::ClientMetric& metric : copy.metric) {
      for (prometheus::ClientMetric::Label& label : metric.label) {
        label.name = std::string(VllmLabelName(label.name));
      }
      // vLLM v1 labels every series with its engine core's index; a worker has one engine.
      metric.label.push_back({"engine", "0"});
      std::sort(metric.label.begin(), metric.label.end());
    }
    copies.push_back(std::move(copy));
  }
  return copies;
}

// What /metrics serves: the registry's families and the load snapshot's, plus their vLLM-named
// copies when asked. One collector reads the snapshot once per scrape, so the two names of a
// gauge cannot disagree within a scrape.
class WorkerMetrics::Collector : public prometheus::Collectable {
 public:
  Collector(std::shared_ptr<prometheus::Registry> registry, std::string model_name,
            std::function<EngineLoad()> load, bool vllm_names, int32_t max_loras)
      : registry_(std::move(registry)),
        model_name_(std::move(model_name)),
        load_(std::move(load)),
        vllm_names_(vllm_names),
        max_loras_(max_loras) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    std::vector<prometheus::MetricFamily> families = registry_->Collect();
    for (prometheus::MetricFamily& family : LoadFamilies(load_(), model_name_, max_loras_)) {
      families.push_back(std::move(family));
    }
    if (vllm_names_) {
      for (prometheus::MetricFamily& copy : VllmNamedCopies(families)) {
        families.push_back(std::move(copy));
      }
    }
    return families;
  }

 private:
  const std::shared_ptr<prometheus::Registry> registry_;
  const std::string model_name_;
  const std::function<EngineLoad()> load_;
  const bool vllm_names_;
  const int32_t max_loras_;
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

WorkerMetrics::WorkerMetrics(WorkerMetricsConfig config, std::function<EngineLoad()> load)
    : registry_(std::make_shared<prometheus::Registry>()),
      collector_(std::make_shared<Collector>(registry_, config.model_name, std::move(load),
                                             config.vllm_names, config.max_loras)),
      model_name_(config.model_name),
      model_{{"model", config.model_name}} {
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
      .Add({{"model", model_name_},
            {"block_size", absl::StrCat(config.block_size)},
            {"num_blocks", absl::StrCat(config.num_blocks)}})
      .Set(1);
  prometheus::BuildGauge()
      .Name("llmserve_model_config_info")
      .Help(
          "Model runtime configuration (labels: backend, dtype, quantization, "
          "lm_head_quantized); the value is always 1.")
      .Register(*registry_)
      .Add({{"model", model_name_},
            {"backend", config.backend},
            {"dtype", config.dtype},
            {"quantization", config.quantization},
            {"lm_head_quantized", config.lm_head_quantized ? "true" : "false"}})
      .Set(1);
  // Exported from the start (0), so that an alert on it has a series to read before any drain.
  draining_ = &prometheus::BuildGauge()
                   .Name("llmserve_worker_draining")
                   .Help("1 from the start of a drain (SIGTERM) until the process exits, else 0.")
                   .Register(*registry_)
                   .Add(model_);
}

std::vector<std::shared_ptr<prometheus::Collectable>> WorkerMetrics::collectables() const {
  return {collector_};
}

void WorkerMetrics::OnStep(const StepStats& step) {
  // Reports between steps, and failed passes, processed no tokens.
  if (!step.forward || step.failed) return;
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

void WorkerMetrics::OnDrainStarted() { draining_->Set(1); }

}  // namespace llmserve::worker
