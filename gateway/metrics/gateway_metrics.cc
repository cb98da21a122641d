#include "gateway/metrics/gateway_metrics.h"

#include <map>
#include <utility>

#include "absl/strings/ascii.h"
#include "common/metrics/buckets.h"
#include "prometheus/text_serializer.h"

namespace llmserve::gateway {

class GatewayMetrics::LiveCollector : public prometheus::Collectable {
 public:
  explicit LiveCollector(std::function<LiveState()> live) : live_(std::move(live)) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    const LiveState state = live_ ? live_() : LiveState{};
    prometheus::MetricFamily active =
        Family("llmserve_gateway_active_streams", "Requests in flight through the gateway.");
    active.metric.push_back(Gauge({}, state.active_requests));
    prometheus::MetricFamily prepare_queued = Family(
        "llmserve_gateway_prepare_queued",
        "Prompts waiting for a prepare thread (chat template, tokenizer); beyond --prepare_queue, "
        "429.");
    prepare_queued.metric.push_back(Gauge({}, state.prepare_queued));
    prometheus::MetricFamily draining =
        Family("llmserve_gateway_draining", "1 while the gateway drains after SIGTERM, else 0.");
    draining.metric.push_back(Gauge({}, state.draining ? 1 : 0));
    prometheus::MetricFamily up =
        Family("llmserve_gateway_worker_up",
               "1 when the worker is ready for requests (and not draining), 0 otherwise.");
    std::map<std::string, int> ready_per_model;
    for (const std::string& model : state.models) ready_per_model[model] = 0;
    for (const WorkerGauge& worker : state.workers) {
      up.metric.push_back(
          Gauge({{"worker", worker.address}, {"model", worker.model}}, worker.ready ? 1 : 0));
      if (worker.ready && !worker.model.empty()) ++ready_per_model[worker.model];
    }
    // A model stays listed (at 0) after its last worker left DNS, so "no ready worker for this
    // model" can alert instead of the series silently disappearing.
    prometheus::MetricFamily per_model =
        Family("llmserve_gateway_model_ready_workers",
               "Ready workers per model, for every model a worker has served since start.");
    for (const auto& [model, ready] : ready_per_model) {
      per_model.metric.push_back(Gauge({{"model", model}}, ready));
    }
    std::vector<prometheus::MetricFamily> families = {std::move(active), std::move(prepare_queued),
                                                      std::move(draining), std::move(up),
                                                      std::move(per_model)};
    if (state.request_log.has_value()) AddRequestLog(*state.request_log, families);
    if (state.redis_connected.has_value()) {
      prometheus::MetricFamily up = Family("llmserve_gateway_redis_up",
                                           "1 while connected to the global rate limits' Redis.");
      up.metric.push_back(Gauge({}, *state.redis_connected ? 1 : 0));
      families.push_back(std::move(up));
    }
    if (state.traces.has_value()) {
      prometheus::MetricFamily spans = Family(
          "llmserve_gateway_trace_spans_total",
          "Trace spans exported over OTLP, or dropped (queue full, export failed, shutdown).",
          prometheus::MetricType::Counter);
      spans.metric.push_back(
          Counter({{"result", "exported"}}, static_cast<double>(state.traces->exported)));
      spans.metric.push_back(
          Counter({{"result", "dropped"}}, static_cast<double>(state.traces->dropped)));
      prometheus::MetricFamily queued =
          Family("llmserve_gateway_trace_spans_queued", "Trace spans waiting for the exporter.");
      queued.metric.push_back(Gauge({}, static_cast<double>(state.traces->queued)));
      families.push_back(std::move(spans));
      families.push_back(std::move(queued));
    }
    return families;
  }

 private:
  static prometheus::MetricFamily Family(
      std::string name, std::string help,
      prometheus::MetricType type = prometheus::MetricType::Gauge) {
    return {std::move(name), std::move(help), type, {}};
  }
  static prometheus::ClientMetric Counter(std::vector<std::pair<std::string, std::string>> labels,
                                          double value) {
    prometheus::ClientMetric metric = Labelled(std::move(labels));
    metric.counter.value = value;
    return metric;
  }
  // The request log counts in its own thread; its counters are read here, at the scrape.
  static void AddRequestLog(const LiveState::RequestLogState& log,
                            std::vector<prometheus::MetricFamily>& families) {
    prometheus::MetricFamily records =
        Family("llmserve_gateway_request_log_records_total",
               "Request log records written to the sink, or dropped (queue full, refused by the "
               "sink, left at shutdown).",
               prometheus::MetricType::Counter);
    records.metric.push_back(Counter({{"result", "written"}}, static_cast<double>(log.written)));
    records.metric.push_back(Counter({{"result", "dropped"}}, static_cast<double>(log.dropped)));
    prometheus::MetricFamily failures =
        Family("llmserve_gateway_request_log_write_failures_total",
               "Failed writes to the request log's sink (each retry counts).",
               prometheus::MetricType::Counter);
    failures.metric.push_back(Counter({}, static_cast<double>(log.write_failures)));
    prometheus::MetricFamily queued =
        Family("llmserve_gateway_request_log_queued", "Request log records waiting for the sink.");
    queued.metric.push_back(Gauge({}, static_cast<double>(log.queued)));
    prometheus::MetricFamily up =
        Family("llmserve_gateway_request_log_sink_up",
               "0 from a failed write to the request log's sink until one succeeds, else 1.");
    up.metric.push_back(Gauge({}, log.sink_up ? 1 : 0));
    families.push_back(std::move(records));
    families.push_back(std::move(failures));
    families.push_back(std::move(queued));
    families.push_back(std::move(up));
  }
  static prometheus::ClientMetric Labelled(
      std::vector<std::pair<std::string, std::string>> labels) {
    prometheus::ClientMetric metric;
    for (auto& [name, label_value] : labels) {
      metric.label.push_back({std::move(name), std::move(label_value)});
    }
    return metric;
  }
  static prometheus::ClientMetric Gauge(std::vector<std::pair<std::string, std::string>> labels,
                                        double value) {
    prometheus::ClientMetric metric = Labelled(std::move(labels));
    metric.gauge.value = value;
    return metric;
  }

  std::function<LiveState()> live_;
};

GatewayMetrics::GatewayMetrics(std::function<LiveState()> live)
    : registry_(std::make_shared<prometheus::Registry>()),
      live_(std::make_shared<LiveCollector>(std::move(live))) {
  requests_ = &prometheus::BuildCounter()
                   .Name("llmserve_gateway_requests_total")
                   .Help("Requests that ended, by API (grpc, http), model and status code name.")
                   .Register(*registry_);
  duration_ = &prometheus::BuildHistogram()
                   .Name("llmserve_gateway_request_duration_seconds")
                   .Help("From arrival at the gateway to the end of the response.")
                   .Register(*registry_);
  ttft_ = &prometheus::BuildHistogram()
               .Name("llmserve_gateway_time_to_first_token_seconds")
               .Help("From arrival at the gateway to the first generated token reaching it.")
               .Register(*registry_);
  inter_token_ = &prometheus::BuildHistogram()
                      .Name("llmserve_gateway_inter_token_latency_seconds")
                      .Help("Gap between two tokens of a request, as the gateway sees them.")
                      .Register(*registry_);
  routing_ = &prometheus::BuildCounter()
                  .Name("llmserve_gateway_routing_decisions_total")
                  .Help("Worker choices by policy and the rule that decided.")
                  .Register(*registry_);
  rate_limit_backend_errors_ =
      &prometheus::BuildCounter()
           .Name("llmserve_gateway_rate_limit_backend_errors_total")
           .Help("Global rate limit checks Redis could not answer (the failure policy decided).")
           .Register(*registry_)
           .Add({});
  rate_limited_ = &prometheus::BuildCounter()
                       .Name("llmserve_gateway_rate_limited_total")
                       .Help("Requests refused by a rate or concurrency limit.")
                       .Register(*registry_)
                       .Add({});
  auth_failures_ = &prometheus::BuildCounter()
                        .Name("llmserve_gateway_auth_failures_total")
                        .Help("Requests refused because their credentials were not accepted.")
                        .Register(*registry_)
                        .Add({});
  // Both series exist from the start, so that alerts can use rate() without waiting for a crash.
  prometheus::Family<prometheus::Counter>& crashes =
      prometheus::BuildCounter()
          .Name("llmserve_gateway_query_of_death_crashes_total")
          .Help(
              "Requests whose worker went away (its connection broke) while running them: "
              "retried on another worker, or failed (given up on, identical requests "
              "quarantined).")
          .Register(*registry_);
  qod_retried_ = &crashes.Add({{"action", "retried"}});
  qod_failed_ = &crashes.Add({{"action", "failed"}});
  qod_refused_ = &prometheus::BuildCounter()
                      .Name("llmserve_gateway_query_of_death_refused_total")
                      .Help(
                          "Requests refused without reaching a worker because an identical "
                          "request made a worker fail (query-of-death quarantine).")
                      .Register(*registry_)
                      .Add({});
  qod_quarantined_ = &prometheus::BuildGauge()
                          .Name("llmserve_gateway_query_of_death_quarantined")
                          .Help("Request fingerprints in quarantine, as of the last worker crash.")
                          .Register(*registry_)
                          .Add({});
}

std::vector<std::shared_ptr<prometheus::Collectable>> GatewayMetrics::collectables() const {
  return {registry_, live_};
}

std::string GatewayMetrics::Render() const {
  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  for (prometheus::MetricFamily& family : live_->Collect()) families.push_back(std::move(family));
  return prometheus::TextSerializer().Serialize(families);
}

void GatewayMetrics::OnRequestDone(absl::string_view api, absl::string_view model,
                                   absl::StatusCode code, double duration_s) {
  requests_
      ->Add({{"api", std::string(api)},
             {"model", std::string(model)},
             {"code", absl::AsciiStrToLower(absl::StatusCodeToString(code))}})
      .Increment();
  duration_->Add({{"api", std::string(api)}}, common::RequestLatencyBuckets()).Observe(duration_s);
}

void GatewayMetrics::OnFirstToken(absl::string_view api, double ttft_s) {
  ttft_->Add({{"api", std::string(api)}}, common::RequestLatencyBuckets()).Observe(ttft_s);
}

void GatewayMetrics::OnInterToken(absl::string_view api, int num_tokens, double seconds) {
  prometheus::Histogram& histogram =
      inter_token_->Add({{"api", std::string(api)}}, common::TokenLatencyBuckets());
  for (int i = 0; i < num_tokens; ++i) histogram.Observe(seconds / num_tokens);
}

void GatewayMetrics::OnRoutingDecision(absl::string_view policy, absl::string_view reason) {
  routing_->Add({{"policy", std::string(policy)}, {"reason", std::string(reason)}}).Increment();
}

void GatewayMetrics::OnRateLimited() { rate_limited_->Increment(); }
void GatewayMetrics::OnRateLimitBackendError() { rate_limit_backend_errors_->Increment(); }
void GatewayMetrics::OnAuthFailure() { auth_failures_->Increment(); }

void GatewayMetrics::OnQueryOfDeathCrash(bool retried) {
  (retried ? qod_retried_ : qod_failed_)->Increment();
}
void GatewayMetrics::OnQueryOfDeathRefused() { qod_refused_->Increment(); }
void GatewayMetrics::SetQueryOfDeathQuarantined(int64_t fingerprints) {
  qod_quarantined_->Set(static_cast<double>(fingerprints));
}

}  // namespace llmserve::gateway
