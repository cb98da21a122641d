#include "gateway/server/gateway_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/cgroup_limits.h"
#include "common/base/logging.h"
#include "common/status/status_macros.h"
#include "gateway/request_log/open_sink.h"

namespace llmserve::gateway {
namespace {

constexpr absl::Duration kHealthInterval = absl::Milliseconds(200);
constexpr absl::Duration kKeyReloadInterval = absl::Seconds(2);
// --prepare_threads=0: the usable CPUs up to this many. Tokenizing is the gateway's main CPU
// work besides the I/O threads; more threads than this only help a gateway that does nothing
// else, and a gateway that does is scaled out rather than up.
constexpr int kMaxDefaultPrepareThreads = 4;
// After a drain: the least time HTTP connections get to send their last bytes and close.
constexpr absl::Duration kHttpFlushGrace = absl::Seconds(1);

}  // namespace

absl::Status ValidateGatewayServerOptions(const GatewayServerOptions& options) {
  if (options.http_port < -1 || options.http_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--http_port=", options.http_port, " is outside [-1, 65535]"));
  }
  if (options.grpc_port < 0 || options.grpc_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--grpc_port=", options.grpc_port, " is outside [0, 65535]"));
  }
  LLMSERVE_RETURN_IF_ERROR(ValidateQueryOfDeathOptions(options.inference.query_of_death));
  if (options.lora_load_timeout <= absl::ZeroDuration() ||
      options.lora_load_timeout > absl::Minutes(10)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--lora_load_timeout=", absl::FormatDuration(options.lora_load_timeout),
                     " is outside (0, 10m]"));
  }
  if (options.worker_client == nullptr) {
    LLMSERVE_RETURN_IF_ERROR(ValidateWorkerPoolOptions(options.pool));
  }
  const int jwt_key_flags = !options.jwt_hs256_secret_file.empty() +
                            !options.jwt_public_key_file.empty() + !options.jwt_jwks_file.empty();
  if (jwt_key_flags > 1) {
    return absl::InvalidArgumentError(
        "--jwt_hs256_secret_file, --jwt_public_key_file and --jwt_jwks_file: give at most one");
  }
  if ((options.token_quota_daily > 0 || options.token_quota_monthly > 0) &&
      options.redis_url.empty()) {
    return absl::InvalidArgumentError(
        "--token_quota_daily and --token_quota_monthly are kept in Redis: set --redis_url");
  }
  if (options.token_quota_daily < 0 || options.token_quota_monthly < 0) {
    return absl::InvalidArgumentError("--token_quota_daily and --token_quota_monthly must be >= 0");
  }
  if (!options.redis_url.empty()) {
    LLMSERVE_RETURN_IF_ERROR(ParseRedisUrl(options.redis_url).status());
    if (options.redis_timeout <= absl::ZeroDuration() ||
        options.redis_timeout > absl::Seconds(10)) {
      return absl::InvalidArgumentError("--redis_timeout must be in (0, 10s]");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<GatewayServer>> GatewayServer::Start(
    const GatewayServerOptions& options) {
  LLMSERVE_RETURN_IF_ERROR(ValidateGatewayServerOptions(options));
  // Before anything starts: a bad certificate fails at once.
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> server_credentials =
      common::MakeServerCredentials(options.tls, "");
  if (!server_credentials.ok()) return server_credentials.status();
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> worker_credentials =
      common::MakeChannelCredentials(options.worker_tls, "worker_");
  if (!worker_credentials.ok()) return worker_credentials.status();
  std::unique_ptr<GatewayServer> server(new GatewayServer());
  server->options_ = options;
  LLMSERVE_RETURN_IF_ERROR(server->StartRecorders());
  LLMSERVE_RETURN_IF_ERROR(server->StartAuth());
  LLMSERVE_RETURN_IF_ERROR(server->StartLimits());
  LLMSERVE_RETURN_IF_ERROR(server->StartWorkerClient(*worker_credentials));
  LLMSERVE_RETURN_IF_ERROR(server->StartPipeline());
  LLMSERVE_RETURN_IF_ERROR(server->StartHttp());
  LLMSERVE_RETURN_IF_ERROR(server->StartMetricsExposer());
  LLMSERVE_RETURN_IF_ERROR(server->StartGrpc(*server_credentials));
  LLMSERVE_LOG(INFO)
      << "gateway: gRPC on " << options.host << ":" << server->grpc_port_
      << (server->http_server_ != nullptr
              ? absl::StrCat(", HTTP on http://", options.host, ":", server->http_server_->port())
              : std::string(", no HTTP API"))
      << ", auth: "
      << (server->authenticator_->allows_anonymous()
              ? "none (anonymous)"
              : absl::StrCat(server->api_keys_ ? "API keys " : "", server->jwt_ ? "JWT" : ""));
  return server;
}

absl::Status GatewayServer::StartRecorders() {
  if (!options_.tracing.endpoint.empty()) {
    LLMSERVE_ASSIGN_OR_RETURN(tracer_, common::tracing::Tracer::Create(
                                           options_.tracing, "llmserve-gateway", LLMSERVE_VERSION));
    LLMSERVE_LOG(INFO) << "gateway: traces to " << tracer_->Describe() << " (sampled "
                       << options_.tracing.sample_ratio << ")";
  }
  if (!options_.request_log.empty()) {
    absl::StatusOr<std::unique_ptr<RequestLogSink>> sink = OpenRequestLogSink(options_.request_log);
    absl::StatusOr<std::unique_ptr<RequestLog>> log =
        sink.ok() ? RequestLog::Start(*std::move(sink), options_.request_log_options)
                  : absl::StatusOr<std::unique_ptr<RequestLog>>(sink.status());
    if (!log.ok()) {
      return absl::Status(log.status().code(),
                          absl::StrCat("--request_log: ", log.status().message()));
    }
    request_log_ = *std::move(log);
    LLMSERVE_LOG(INFO) << "gateway: request log to " << request_log_->Describe();
  }
  return absl::OkStatus();
}

absl::Status GatewayServer::StartAuth() {
  if (!options_.api_keys_file.empty()) {
    LLMSERVE_ASSIGN_OR_RETURN(api_keys_, ApiKeyStore::Load(options_.api_keys_file));
  }
  const bool hs256 = !options_.jwt_hs256_secret_file.empty();
  if (hs256 || !options_.jwt_public_key_file.empty() || !options_.jwt_jwks_file.empty()) {
    LLMSERVE_ASSIGN_OR_RETURN(
        jwt_, JwtVerifier::Create({.algorithm = hs256 ? JwtAlgorithm::kHs256 : JwtAlgorithm::kRs256,
                                   .key_file = hs256 ? options_.jwt_hs256_secret_file
                                                     : options_.jwt_public_key_file,
                                   .jwks_file = options_.jwt_jwks_file,
                                   .issuer = options_.jwt_issuer,
                                   .audience = options_.jwt_audience}));
  }
  authenticator_ = std::make_unique<Authenticator>(api_keys_, jwt_);
  if (authenticator_->allows_anonymous() && !options_.allow_unauthenticated &&
      !IsLoopbackAddress(options_.host)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no --api_keys_file or JWT key is configured and --host=", options_.host,
        " is not loopback: anyone could use this gateway. Configure auth, listen on 127.0.0.1, "
        "or pass --allow_unauthenticated"));
  }
  return absl::OkStatus();
}

absl::Status GatewayServer::StartLimits() {
  if (options_.rate_limit_rpm > 0 || options_.rate_limit_tpm > 0) {
    LLMSERVE_ASSIGN_OR_RETURN(
        rate_limiter_,
        RateLimiter::Create({.default_limits = {.requests_per_minute = options_.rate_limit_rpm,
                                                .tokens_per_minute = options_.rate_limit_tpm}}));
  }
  if (!options_.redis_url.empty()) {
    redis_ = RedisClient::Start(
        {.url = *ParseRedisUrl(options_.redis_url),  // checked by ValidateGatewayServerOptions
         .timeout = options_.redis_timeout,
         .connect_timeout = std::max(options_.redis_timeout, absl::Seconds(1))});
    LLMSERVE_LOG(INFO) << "gateway: rate limits across replicas in " << redis_->Describe()
                       << " (if it cannot answer: "
                       << (options_.redis_failure_policy == RedisFailurePolicy::kOpen
                               ? "this replica's own limits"
                               : "refuse")
                       << ")";
  }
  if (options_.max_concurrency > 0) {
    concurrency_ = std::make_unique<ConcurrencyLimiter>(options_.max_concurrency,
                                                        options_.max_queued_requests);
  }
  return absl::OkStatus();
}

absl::Status GatewayServer::StartWorkerClient(
    const std::shared_ptr<grpc::ChannelCredentials>& credentials) {
  if (options_.worker_client != nullptr) {
    workers_ = options_.worker_client;
    return absl::OkStatus();
  }
  WorkerPoolOptions pool_options = options_.pool;
  pool_options.credentials = credentials;
  pool_options.tls_server_name = options_.worker_tls_server_name;
  LLMSERVE_ASSIGN_OR_RETURN(pool_, WorkerPool::Start(pool_options));
  workers_ = pool_.get();
  return absl::OkStatus();
}

GatewayMetrics::LiveState GatewayServer::LiveState() const {
  GatewayMetrics::LiveState state;
  // Read before Start finished wiring the APIs, too.
  state.active_requests = tracker_ != nullptr ? tracker_->active() : 0;
  state.prepare_queued = prepare_ != nullptr ? prepare_->queued() : 0;
  state.draining = drained_.load();
  state.models = workers_->KnownModels();
  for (const WorkerStatus& worker : workers_->Workers()) {
    state.workers.push_back(
        {.address = worker.address,
         .model = worker.model_info != nullptr ? worker.model_info->model_name() : "",
         .ready = worker.ready && !worker.draining});
  }
  if (redis_ != nullptr) state.redis_connected = redis_->connected();
  if (tracer_ != nullptr) {
    const common::tracing::Tracer::Stats spans = tracer_->stats();
    state.traces = GatewayMetrics::LiveState::TraceState{
        .exported = spans.exported, .dropped = spans.dropped, .queued = spans.queued};
  }
  if (request_log_ != nullptr) {
    const RequestLog::Stats log = request_log_->stats();
    state.request_log =
        GatewayMetrics::LiveState::RequestLogState{.written = log.written,
                                                   .dropped = log.dropped,
                                                   .write_failures = log.write_failures,
                                                   .queued = log.queued,
                                                   .sink_up = log.sink_ok};
  }
  return state;
}

absl::Status GatewayServer::StartPipeline() {
  metrics_ = std::make_unique<GatewayMetrics>([this] { return LiveState(); });
  options_.inference.metrics = metrics_.get();
  query_of_death_ =
      std::make_unique<QueryOfDeathGuard>(options_.inference.query_of_death, metrics_.get());
  options_.inference.query_of_death_guard = query_of_death_.get();
  if (redis_ != nullptr) {
    global_limiter_ = std::make_unique<GlobalRateLimiter>(
        redis_.get(),
        GlobalLimits{.requests_per_minute = options_.rate_limit_rpm,
                     .tokens_per_minute = options_.rate_limit_tpm,
                     .tokens_per_day = options_.token_quota_daily,
                     .tokens_per_month = options_.token_quota_monthly,
                     .failure_policy = options_.redis_failure_policy},
        rate_limiter_.get(), metrics_.get());
  }
  admission_ =
      std::make_unique<RequestAdmission>(authenticator_.get(), rate_limiter_.get(),
                                         concurrency_.get(), metrics_.get(), global_limiter_.get());
  tracker_ = std::make_unique<RequestTracker>(admission_.get(), metrics_.get(), request_log_.get(),
                                              tracer_.get());
  lora_adapters_ = std::make_unique<LoraAdapterManager>(workers_, options_.lora_load_timeout);
  options_.inference.lora_adapters = lora_adapters_.get();
  catalog_ = std::make_unique<ModelCatalog>(workers_, options_.tool_call_format,
                                            options_.reasoning_parsers, lora_adapters_.get());
  LLMSERVE_ASSIGN_OR_RETURN(
      prepare_, PrepareStage::Create({.threads = options_.prepare_threads > 0
                                                     ? options_.prepare_threads
                                                     : std::min(common::UsableCpusOfThisProcess(),
                                                                kMaxDefaultPrepareThreads),
                                      .max_queued = options_.prepare_queue,
                                      .limits = options_.inference.limits,
                                      .render_chat = options_.render_chat}));
  runner_ = std::make_unique<RequestRunner>(workers_, catalog_.get(), tracker_.get(),
                                            prepare_.get(), options_.inference);
  inference_ = std::make_unique<InferenceService>(runner_.get());
  return absl::OkStatus();
}

absl::Status GatewayServer::StartHttp() {
  if (options_.http_port < 0) return absl::OkStatus();
  // /metrics names every worker's address: with a metrics port (which operators can keep off
  // the public network) it is served there only.
  std::function<std::string()> metrics_text;
  if (options_.metrics_port < 0) metrics_text = [this] { return metrics_->Render(); };
  openai_ = std::make_unique<OpenAiApi>(runner_.get(), workers_, metrics_text);
  LLMSERVE_ASSIGN_OR_RETURN(
      http_server_,
      http::HttpServer::Start(
          {.host = options_.host,
           .port = options_.http_port,
           .io_threads = options_.http_threads,
           .max_body_bytes = options_.max_body_bytes,
           .idle_timeout = options_.http_idle_timeout,
           .header_timeout = options_.http_header_timeout,
           .tls_cert_file = options_.tls.cert_file,
           .tls_key_file = options_.tls.key_file,
           // A browser may POST text/plain to a gateway on localhost without a CORS preflight.
           .require_json_post_body = true},
          [api = openai_.get()](http::HttpRequest request,
                                std::shared_ptr<http::ResponseWriter> writer) {
            api->Handle(std::move(request), std::move(writer));
          }));
  return absl::OkStatus();
}

absl::Status GatewayServer::StartMetricsExposer() {
  if (options_.metrics_port < 0) return absl::OkStatus();
  LLMSERVE_ASSIGN_OR_RETURN(exposer_,
                            common::MetricsExposer::Start(options_.host, options_.metrics_port));
  for (const auto& collectable : metrics_->collectables()) exposer_->Register(collectable);
  return absl::OkStatus();
}

absl::Status GatewayServer::StartGrpc(const std::shared_ptr<grpc::ServerCredentials>& credentials) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  const std::string address = absl::StrCat(options_.host, ":", options_.grpc_port);
  builder.AddListeningPort(address, credentials, &grpc_port_);
  builder.RegisterService(inference_.get());
  grpc_server_ = builder.BuildAndStart();
  if (grpc_server_ == nullptr || grpc_port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", address, " (port in use, or a bad address?)"));
  }
  // Not ready until the health loop finds a ready worker.
  grpc_server_->GetHealthCheckService()->SetServingStatus(kGatewayReadinessService, false);
  health_thread_ = std::thread([this] { HealthLoop(); });
  return absl::OkStatus();
}

void GatewayServer::HealthLoop() {
  absl::Time next_reload = absl::Now() + kKeyReloadInterval;
  bool was_ready = false;
  while (!stop_health_.WaitForNotificationWithTimeout(kHealthInterval)) {
    const bool ready = workers_->AnyReady() && !drained_.load();
    if (ready != was_ready) {
      grpc_server_->GetHealthCheckService()->SetServingStatus(kGatewayReadinessService, ready);
      LLMSERVE_LOG(INFO) << "gateway: " << (ready ? "ready" : "not ready");
      was_ready = ready;
    }
    if (api_keys_ != nullptr && absl::Now() >= next_reload) {
      next_reload = absl::Now() + kKeyReloadInterval;
      absl::StatusOr<bool> reloaded = api_keys_->ReloadIfChanged();
      if (!reloaded.ok()) {
        LLMSERVE_LOG(WARNING) << "keeping the old API keys: " << reloaded.status();
      } else if (*reloaded) {
        LLMSERVE_LOG(INFO) << "reloaded " << api_keys_->size() << " API keys";
      }
    }
  }
}

int GatewayServer::active_requests() const { return tracker_->active(); }

int GatewayServer::Drain() {
  if (drained_.exchange(true)) return 0;
  // Both APIs refuse new requests (UNAVAILABLE / 503) and both readiness checks fail, while the
  // listeners stay open: a load balancer or kubelet probing /readyz reads "not ready", not
  // "refused", and clients of HTTP keep-alive connections reconnect elsewhere.
  grpc_server_->GetHealthCheckService()->SetServingStatus(kGatewayReadinessService, false);
  tracker_->StartDrain();
  if (http_server_ != nullptr) http_server_->CloseConnectionsAfterResponses();
  LLMSERVE_LOG(INFO) << "gateway: draining " << tracker_->active("grpc") << " gRPC and "
                     << tracker_->active("http") << " HTTP requests, up to "
                     << absl::FormatDuration(options_.drain_timeout);
  const absl::Time deadline = absl::Now() + options_.drain_timeout;
  const int left = tracker_->WaitForRequests(deadline);
  // The last responses' bytes may still be on their way out: HTTP connections get what is left of
  // the drain timeout (at least a moment) to close by themselves; then the rest is cut, which
  // cancels their generations.
  if (http_server_ != nullptr) {
    http_server_->Shutdown(std::max(deadline - absl::Now(), kHttpFlushGrace));
  }
  // gRPC calls still running are cancelled by the shutdown (and so are their worker requests).
  grpc_server_->Shutdown(absl::ToChronoTime(absl::Now()));
  grpc_server_->Wait();
  // Prompts still waiting for a prepare thread end with UNAVAILABLE (their clients are gone by
  // now); the ones being prepared finish. Their callbacks use the APIs, which outlive this.
  prepare_->Shutdown();
  if (!stop_health_.HasBeenNotified()) stop_health_.Notify();
  if (health_thread_.joinable()) health_thread_.join();
  LLMSERVE_LOG(INFO) << "gateway: drained" << (left > 0 ? absl::StrCat(", cancelled ", left) : "");
  return left;
}

GatewayServer::~GatewayServer() {
  if (grpc_server_ != nullptr) Drain();
  if (!stop_health_.HasBeenNotified()) stop_health_.Notify();
  if (health_thread_.joinable()) health_thread_.join();
  // Also when Start failed before the servers existed: no callback may outlive the APIs.
  if (prepare_ != nullptr) prepare_->Shutdown();
  // Admissions still waiting on Redis end now (failed over by the policy), while the APIs their
  // callbacks reach are alive.
  redis_.reset();
  // Calls are done; generations still finishing hold the pool: it waits for its own streams.
  exposer_.reset();
  http_server_.reset();
  openai_.reset();
  inference_.reset();
  // Cancelled generations may still be unwinding on gRPC threads, and they use the pool.
  if (tracker_ != nullptr) tracker_->WaitForGenerations(absl::Now() + absl::Seconds(10));
  pool_.reset();
}

}  // namespace llmserve::gateway
