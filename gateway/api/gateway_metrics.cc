#include "gateway/api/gateway_metrics.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "common/metrics/buckets.h"
#include "prometheus/text_serializer.h"

namespace llmserve::gateway {

class GatewayMetrics::LiveCollector : public prometheus::Collectable {
 public:
  LiveCollector(std::function<int()> active,
                std::function<std::vector<std::pair<std::string, bool>>()> workers_up)
      : active_(std::move(active)), workers_up_(std::move(workers_up)) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    prometheus::MetricFamily active{"llmserve_gateway_active_streams",
                                    "Requests in flight through the gateway.",
                                    prometheus::MetricType::Gauge,
                                    {}};
    prometheus::ClientMetric active_metric;
    active_metric.gauge.value = active_ ? active_() : 0;
    active.metric.push_back(active_metric);
    prometheus::MetricFamily up{"llmserve_gateway_worker_up",
                                "1 when the worker is ready for requests, 0 otherwise.",
                                prometheus::MetricType::Gauge,
                                {}};
    if (workers_up_) {
      for (const auto& [worker, ready] : workers_up_()) {
        prometheus::ClientMetric metric;
        metric.label.push_back({"worker", worker});
        metric.gauge.value = ready ? 1 : 0;
        up.metric.push_back(std::move(metric));
      }
    }
    return {std::move(active), std::move(up)};
  }

 private:
  std::function<int()> active_;
  std::function<std::vector<std::pair<std::string, bool>>()> workers_up_;
};

GatewayMetrics::GatewayMetrics(
    std::function<int()> active,
    std::function<std::vector<std::pair<std::string, bool>>()> workers_up)
    : registry_(std::make_shared<prometheus::Registry>()),
      live_(std::make_shared<LiveCollector>(std::move(active), std::move(workers_up))) {
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
void GatewayMetrics::OnAuthFailure() { auth_failures_->Increment(); }

}  // namespace llmserve::gateway
