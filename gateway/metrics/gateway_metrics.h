// The gateway's Prometheus metrics (names prefixed llmserve_gateway_):
//   requests_total{api,model,code}          every request that ended, by gRPC status code name
//   request_duration_seconds{api}           arrival to end
//   time_to_first_token_seconds{api}        arrival to the first token reaching the gateway
//   inter_token_latency_seconds{api}        gap between tokens of a stream
//   active_streams                          requests in flight (read at scrape time)
//   prepare_queued                          prompts waiting for a prepare thread (read at scrape)
//   worker_up{worker,model}                 1 when the worker is ready and not draining
//   model_ready_workers{model}              ready workers per model, 0 for a model whose workers
//                                           are all gone (every model seen since start)
//   draining                                1 from SIGTERM until exit
//   routing_decisions_total{policy,reason}  which rule picked the worker
//   rate_limited_total, auth_failures_total  (429s: rate limits, the concurrency and prepare
//   queues)
//   query_of_death_crashes_total{action}    requests whose worker went away while running them
//                                           (action: retried, or failed: given up on and
//                                           quarantined)
//   query_of_death_refused_total            requests refused because an identical one made a
//                                           worker fail (quarantine), without reaching a worker
//   query_of_death_quarantined              fingerprints in quarantine (as of the last crash)
//   request_log_records_total{result}       with a request log: records written, or dropped
//                                           (queue full, refused by the sink, left at shutdown)
//   request_log_write_failures_total        failed writes to the sink (each retry counts)
//   request_log_queued                      records waiting for the sink
//   request_log_sink_up                     0 from a failed write until one succeeds, else 1
//   trace_spans_total{result}               with tracing: spans exported, or dropped (queue
//                                           full, export failed, left at shutdown)
//   trace_spans_queued                      spans waiting for the exporter
//   rate_limit_backend_errors_total         global rate limits: Redis could not answer (the
//                                           failure policy decided instead)
//   redis_up                                with global rate limits: 1 while connected to Redis
//
// Thread-safe.

#ifndef LLMSERVE_GATEWAY_METRICS_GATEWAY_METRICS_H_
#define LLMSERVE_GATEWAY_METRICS_GATEWAY_METRICS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace llmserve::gateway {

class GatewayMetrics {
 public:
  // What the gateway knows of one worker at scrape time.
  struct WorkerGauge {
    std::string address;
    std::string model;   // empty until the worker described its model
    bool ready = false;  // ready and not draining
  };
  struct LiveState {
    int active_requests = 0;
    // Prompts waiting for a prepare thread (gateway/pipeline/prepare_stage.h).
    int prepare_queued = 0;
    bool draining = false;
    std::vector<WorkerGauge> workers;
    // Every model served since start: each gets a model_ready_workers series, 0 when none is up.
    std::vector<std::string> models;
    // The request log's series exist only when it does.
    struct RequestLogState {
      int64_t written = 0;
      int64_t dropped = 0;
      int64_t write_failures = 0;
      int64_t queued = 0;
      bool sink_up = true;
    };
    std::optional<RequestLogState> request_log;
    // The tracer's series exist only with one.
    struct TraceState {
      int64_t exported = 0;
      int64_t dropped = 0;
      int64_t queued = 0;
    };
    std::optional<TraceState> traces;
    // With global rate limits: whether Redis is connected.
    std::optional<bool> redis_connected;
  };
  // `live` is read at every scrape.
  explicit GatewayMetrics(std::function<LiveState()> live);

  // For an exposer, or Render() for /metrics on the HTTP port.
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables() const;
  // The Prometheus text format of everything.
  std::string Render() const;

  void OnRequestDone(absl::string_view api, absl::string_view model, absl::StatusCode code,
                     double duration_s);
  void OnFirstToken(absl::string_view api, double ttft_s);
  void OnInterToken(absl::string_view api, int num_tokens, double seconds);
  void OnRoutingDecision(absl::string_view policy, absl::string_view reason);
  void OnRateLimited();
  void OnRateLimitBackendError();
  void OnAuthFailure();
  // Query-of-death protection (gateway/pipeline/query_of_death.h).
  void OnQueryOfDeathCrash(bool retried);
  void OnQueryOfDeathRefused();
  void SetQueryOfDeathQuarantined(int64_t fingerprints);

 private:
  class LiveCollector;

  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<LiveCollector> live_;
  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Family<prometheus::Histogram>* duration_;
  prometheus::Family<prometheus::Histogram>* ttft_;
  prometheus::Family<prometheus::Histogram>* inter_token_;
  prometheus::Family<prometheus::Counter>* routing_;
  prometheus::Counter* rate_limited_;
  prometheus::Counter* rate_limit_backend_errors_;
  prometheus::Counter* auth_failures_;
  prometheus::Counter* qod_retried_;
  prometheus::Counter* qod_failed_;
  prometheus::Counter* qod_refused_;
  prometheus::Gauge* qod_quarantined_;
};

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_METRICS_GATEWAY_METRICS_H_
