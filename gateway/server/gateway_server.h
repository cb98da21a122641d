// A whole gateway process minus its command line: auth and limits from files and flags, the
// worker pool, the public gRPC API (llmserve.v1.Inference with health and reflection), and
// draining. main.cc and the tests run it.
//
// Health (grpc.health.v1): "" is liveness (SERVING while the process runs); the name
// "llmserve.v1.Inference" is readiness (SERVING while at least one worker is ready and the
// gateway is not draining).
//
// Thread-safe: Drain may be called from any thread, once.

#ifndef LLMSERVE_GATEWAY_SERVER_GATEWAY_SERVER_H_
#define LLMSERVE_GATEWAY_SERVER_GATEWAY_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/metrics/metrics_exposer.h"
#include "common/tls/grpc_tls.h"
#include "common/tracing/tracer.h"
#include "gateway/admission/api_key_store.h"
#include "gateway/admission/authenticator.h"
#include "gateway/admission/concurrency_limiter.h"
#include "gateway/admission/global_rate_limiter.h"
#include "gateway/admission/jwt_verifier.h"
#include "gateway/admission/rate_limiter.h"
#include "gateway/admission/redis_client.h"
#include "gateway/frontends/grpc/inference_service.h"
#include "gateway/frontends/openai/openai_api.h"
#include "gateway/http/http_server.h"
#include "gateway/metrics/gateway_metrics.h"
#include "gateway/pipeline/model_catalog.h"
#include "gateway/pipeline/prepare_stage.h"
#include "gateway/pipeline/request_lifecycle.h"
#include "gateway/pipeline/request_options.h"
#include "gateway/pipeline/request_runner.h"
#include "gateway/reasoning/reasoning_format.h"
#include "gateway/request_log/request_log.h"
#include "gateway/router/worker_pool.h"

namespace llmserve::gateway {

struct GatewayServerOptions {
  std::string host = "0.0.0.0";
  // 0 picks a free port (tests); grpc_port() tells which.
  int grpc_port = 50050;
  // The OpenAI-compatible HTTP API with /healthz, /readyz and /metrics; -1: off.
  int http_port = 8080;
  int http_threads = 1;
  // Threads that prepare prompts (chat template, tokenizer) off the I/O threads; 0: the usable
  // CPUs, at most 4. Up to prepare_queue requests wait for one; beyond that, 429 /
  // RESOURCE_EXHAUSTED (gateway/pipeline/prepare_stage.h).
  int prepare_threads = 0;
  int prepare_queue = 256;
  // Renders chats into prompt text (tests count or hold the calls).
  ChatRenderer render_chat = RenderChatPrompt;
  // A separate Prometheus port (0 picks a free one; metrics_port() tells which). /metrics names
  // every worker's address, so with this port it is served here only (404 on the HTTP port); -1:
  // /metrics on the HTTP port.
  int metrics_port = -1;
  size_t max_body_bytes = size_t{4} << 20;
  // HTTP connections (http::HttpServerOptions): idle keep-alive, body reads and writes to a client
  // that stopped reading end after http_idle_timeout; request headers get http_header_timeout.
  absl::Duration http_idle_timeout = absl::Seconds(60);
  absl::Duration http_header_timeout = absl::Seconds(10);
  WorkerPoolOptions pool;
  // The workers to use instead of a WorkerPool made from `pool` (tests: a fake). Not owned; must
  // outlive the server.
  WorkerClient* worker_client = nullptr;
  // Auth: none configured means anonymous access, allowed only on a loopback host unless
  // allow_unauthenticated.
  std::string api_keys_file;
  std::string jwt_hs256_secret_file;
  std::string jwt_public_key_file;
  std::string jwt_jwks_file;
  std::string jwt_audience;
  std::string jwt_issuer;
  bool allow_unauthenticated = false;
  // Per principal; 0 = unlimited.
  int64_t rate_limit_rpm = 0;
  int64_t rate_limit_tpm = 0;
  // Token quotas per UTC day and month per principal (0: none); they need redis_url.
  int64_t token_quota_daily = 0;
  int64_t token_quota_monthly = 0;
  // redis://...: the limits above hold across every replica sharing it (global_rate_limiter.h).
  std::string redis_url;
  absl::Duration redis_timeout = absl::Milliseconds(100);
  RedisFailurePolicy redis_failure_policy = RedisFailurePolicy::kOpen;
  // Requests in flight at once; 0 = unlimited. Beyond it up to max_queued_requests wait (in
  // arrival order) for a slot; beyond that, 429 / RESOURCE_EXHAUSTED.
  int64_t max_concurrency = 0;
  int64_t max_queued_requests = 256;
  RequestOptions inference;
  // How models write tool calls (--tool_call_parser); nullopt: detected from each chat template.
  std::optional<tool_calls::ToolCallFormat> tool_call_format;
  // Which models' chat replies have their reasoning parsed (--reasoning_parser); none by default.
  reasoning::ReasoningParsers reasoning_parsers;
  absl::Duration drain_timeout = absl::Seconds(30);
  // How long loading a LoRA adapter on a worker may take (admin loads, on-demand loads).
  absl::Duration lora_load_timeout = absl::Seconds(30);
  // Where every finished request's record goes (gateway/request_log/): a postgres:// URL or the
  // path of a JSON-lines file; empty: no request log.
  std::string request_log;
  RequestLogOptions request_log_options;
  // OpenTelemetry traces (common/tracing/); an empty endpoint: none.
  common::tracing::TracingFlags tracing;
  // TLS on the public gRPC port; empty: plaintext.
  common::ServerTlsFiles tls;
  // TLS (with a CA) or mutual TLS (with a client certificate too) towards the workers.
  common::ClientTlsFiles worker_tls;
  std::string worker_tls_server_name;
};

// INVALID_ARGUMENT naming the flag: ports out of range, more than one JWT key, quotas without
// Redis, a bad Redis URL or timeout, bad worker pool or query-of-death options.
absl::Status ValidateGatewayServerOptions(const GatewayServerOptions& options);

class GatewayServer {
 public:
  // INVALID_ARGUMENT naming the flag for bad options or files; UNAVAILABLE when a port is taken;
  // FAILED_PRECONDITION for no auth on a non-loopback address without allow_unauthenticated.
  // Validates the options (ValidateGatewayServerOptions) and starts everything.
  static absl::StatusOr<std::unique_ptr<GatewayServer>> Start(const GatewayServerOptions& options);
  ~GatewayServer();

  int grpc_port() const { return grpc_port_; }
  // -1 without the HTTP API.
  int http_port() const { return http_server_ == nullptr ? -1 : http_server_->port(); }
  // -1 without a separate metrics port.
  int metrics_port() const { return exposer_ == nullptr ? -1 : exposer_->port(); }
  WorkerClient& workers() { return *workers_; }

  // Readiness NOT_SERVING on gRPC and 503 on /readyz, new requests UNAVAILABLE (gRPC) or 503
  // (HTTP) while the listeners stay open, in-flight requests and streams of both APIs finish (up to
  // the drain timeout), then the servers stop. Returns how many requests were still running at the
  // end (they are cancelled).
  int Drain();

  // Requests in flight on both APIs.
  int active_requests() const;
  // HTTP connections open now (a closed one has run its request's on_close); 0 without HTTP.
  int http_connections() const {
    return http_server_ == nullptr ? 0 : http_server_->active_connections();
  }

 private:
  GatewayServer() = default;
  // Start's steps, in order (each needs the ones before): tracing and the request log, API keys
  // and JWT, the rate and concurrency limits (and Redis), the worker pool, the request pipeline
  // (metrics, admission, the tracker, the prepare stage, the gRPC service), the HTTP API, the
  // metrics port, and the gRPC listener with the readiness loop.
  absl::Status StartRecorders();
  absl::Status StartAuth();
  absl::Status StartLimits();
  absl::Status StartWorkerClient(const std::shared_ptr<grpc::ChannelCredentials>& credentials);
  absl::Status StartPipeline();
  absl::Status StartHttp();
  absl::Status StartMetricsExposer();
  absl::Status StartGrpc(const std::shared_ptr<grpc::ServerCredentials>& credentials);
  // What /metrics reads of the gateway's state at each scrape.
  GatewayMetrics::LiveState LiveState() const;
  void HealthLoop();

  GatewayServerOptions options_;
  std::shared_ptr<ApiKeyStore> api_keys_;
  std::shared_ptr<JwtVerifier> jwt_;
  std::unique_ptr<Authenticator> authenticator_;
  std::unique_ptr<RateLimiter> rate_limiter_;
  // With redis_url. The limiter goes after the client, whose last callbacks it still serves.
  std::unique_ptr<GlobalRateLimiter> global_limiter_;
  std::unique_ptr<RedisClient> redis_;
  std::unique_ptr<ConcurrencyLimiter> concurrency_;
  std::unique_ptr<GatewayMetrics> metrics_;
  // Null without an OTLP endpoint.
  std::unique_ptr<common::tracing::Tracer> tracer_;
  // Outlives every request's lifecycle (each writes its record as it ends).
  std::unique_ptr<RequestLog> request_log_;
  // Shared by both APIs' generations, which end before it goes (see the destructor).
  std::unique_ptr<QueryOfDeathGuard> query_of_death_;
  std::unique_ptr<common::MetricsExposer> exposer_;
  std::unique_ptr<RequestAdmission> admission_;
  // Both APIs' requests in flight, and whether new ones are accepted.
  std::unique_ptr<RequestTracker> tracker_;
  // Null with options.worker_client.
  std::unique_ptr<WorkerPool> pool_;
  // pool_, or options.worker_client.
  WorkerClient* workers_ = nullptr;
  // LoRA adapters loaded through the admin API, and loaded on demand.
  std::unique_ptr<LoraAdapterManager> lora_adapters_;
  std::unique_ptr<ModelCatalog> catalog_;
  // Shut down before the APIs whose callbacks it runs are destroyed.
  std::unique_ptr<PrepareStage> prepare_;
  // One generation request's sequence, for both APIs.
  std::unique_ptr<RequestRunner> runner_;
  std::unique_ptr<InferenceService> inference_;
  std::unique_ptr<OpenAiApi> openai_;
  std::unique_ptr<http::HttpServer> http_server_;
  std::unique_ptr<grpc::Server> grpc_server_;
  int grpc_port_ = 0;
  // Keeps readiness and the API-key file current.
  std::thread health_thread_;
  absl::Notification stop_health_;
  std::atomic<bool> drained_{false};
};

inline constexpr char kGatewayReadinessService[] = "llmserve.v1.Inference";

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_SERVER_GATEWAY_SERVER_H_
