#include "gateway/server/gateway_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/cgroup_limits.h"
#include "common/base/logging.h"
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

absl::StatusOr<std::unique_ptr<GatewayServer>> GatewayServer::Start(
    const GatewayServerOptions& options) {
  if (options.http_port < -1 || options.http_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--http_port=", options.http_port, " is outside [-1, 65535]"));
  }
  if (options.grpc_port < 0 || options.grpc_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--grpc_port=", options.grpc_port, " is outside [0, 65535]"));
  }
  if (absl::Status guard = ValidateQueryOfDeathOptions(options.inference.query_of_death);
      !guard.ok()) {
    return guard;
  }
  if (options.worker_client == nullptr) {
    if (absl::Status pool_options = ValidateWorkerPoolOptions(options.pool); !pool_options.ok()) {
      return pool_options;
    }
  }
  const int jwt_key_flags = !options.jwt_hs256_secret_file.empty() +
                            !options.jwt_public_key_file.empty() + !options.jwt_jwks_file.empty();
  if (jwt_key_flags > 1) {
    return absl::InvalidArgumentError(
        "--jwt_hs256_secret_file, --jwt_public_key_file and --jwt_jwks_file: give at most one");
  }
  std::unique_ptr<GatewayServer> server(new GatewayServer());
  server->options_ = options;
  if (!options.tracing.endpoint.empty()) {
    absl::StatusOr<std::unique_ptr<common::tracing::Tracer>> tracer =
        common::tracing::Tracer::Create(options.tracing, "llmserve-gateway", LLMSERVE_VERSION);
    if (!tracer.ok()) return tracer.status();
    server->tracer_ = *std::move(tracer);
    LLMSERVE_LOG(INFO) << "gateway: traces to " << server->tracer_->Describe() << " (sampled "
                       << options.tracing.sample_ratio << ")";
  }
  if (!options.request_log.empty()) {
    absl::StatusOr<std::unique_ptr<RequestLogSink>> sink = OpenRequestLogSink(options.request_log);
    absl::StatusOr<std::unique_ptr<RequestLog>> log =
        sink.ok() ? RequestLog::Start(*std::move(sink), options.request_log_options)
                  : absl::StatusOr<std::unique_ptr<RequestLog>>(sink.status());
    if (!log.ok()) {
      return absl::Status(log.status().code(),
                          absl::StrCat("--request_log: ", log.status().message()));
    }
    server->request_log_ = *std::move(log);
    LLMSERVE_LOG(INFO) << "gateway: request log to " << server->request_log_->Describe();
  }
  if (!options.api_keys_file.empty()) {
    absl::StatusOr<std::unique_ptr<ApiKeyStore>> keys = ApiKeyStore::Load(options.api_keys_file);
    if (!keys.ok()) return keys.status();
    server->api_keys_ = *std::move(keys);
  }
  if (jwt_key_flags == 1) {
    const bool hs256 = !options.jwt_hs256_secret_file.empty();
    absl::StatusOr<std::unique_ptr<JwtVerifier>> jwt = JwtVerifier::Create(
        {.algorithm = hs256 ? JwtAlgorithm::kHs256 : JwtAlgorithm::kRs256,
         .key_file = hs256 ? options.jwt_hs256_secret_file : options.jwt_public_key_file,
         .jwks_file = options.jwt_jwks_file,
         .issuer = options.jwt_issuer,
         .audience = options.jwt_audience});
    if (!jwt.ok()) return jwt.status();
    server->jwt_ = *std::move(jwt);
  }
  server->authenticator_ = std::make_unique<Authenticator>(server->api_keys_, server->jwt_);
  if (server->authenticator_->allows_anonymous() && !options.allow_unauthenticated &&
      !IsLoopbackAddress(options.host)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no --api_keys_file or JWT key is configured and --host=", options.host,
        " is not loopback: anyone could use this gateway. Configure auth, listen on 127.0.0.1, "
        "or pass --allow_unauthenticated"));
  }
  if (options.rate_limit_rpm > 0 || options.rate_limit_tpm > 0) {
    absl::StatusOr<std::unique_ptr<RateLimiter>> limiter =
        RateLimiter::Create({.default_limits = {.requests_per_minute = options.rate_limit_rpm,
                                                .tokens_per_minute = options.rate_limit_tpm}});
    if (!limiter.ok()) return limiter.status();
    server->rate_limiter_ = *std::move(limiter);
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
    absl::StatusOr<RedisUrl> url = ParseRedisUrl(options.redis_url);
    if (!url.ok()) return url.status();
    if (options.redis_timeout <= absl::ZeroDuration() ||
        options.redis_timeout > absl::Seconds(10)) {
      return absl::InvalidArgumentError("--redis_timeout must be in (0, 10s]");
    }
    server->redis_ =
        RedisClient::Start({.url = *std::move(url),
                            .timeout = options.redis_timeout,
                            .connect_timeout = std::max(options.redis_timeout, absl::Seconds(1))});
    LLMSERVE_LOG(INFO) << "gateway: rate limits across replicas in " << server->redis_->Describe()
                       << " (if it cannot answer: "
                       << (options.redis_failure_policy == RedisFailurePolicy::kOpen
                               ? "this replica's own limits"
                               : "refuse")
                       << ")";
  }
  if (options.max_concurrency > 0) {
    server->concurrency_ =
        std::make_unique<ConcurrencyLimiter>(options.max_concurrency, options.max_queued_requests);
  }
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> server_credentials =
      common::MakeServerCredentials(options.tls, "");
  if (!server_credentials.ok()) return server_credentials.status();
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> worker_credentials =
      common::MakeChannelCredentials(options.worker_tls, "worker_");
  if (!worker_credentials.ok()) return worker_credentials.status();
  if (options.worker_client != nullptr) {
    server->workers_ = options.worker_client;
  } else {
    WorkerPoolOptions pool_options = options.pool;
    pool_options.credentials = *worker_credentials;
    pool_options.tls_server_name = options.worker_tls_server_name;
    absl::StatusOr<std::unique_ptr<WorkerPool>> pool = WorkerPool::Start(pool_options);
    if (!pool.ok()) return pool.status();
    server->pool_ = *std::move(pool);
    server->workers_ = server->pool_.get();
  }
  GatewayServer* raw = server.get();
  server->metrics_ = std::make_unique<GatewayMetrics>([raw] {
    GatewayMetrics::LiveState state;
    // Read before Start finished wiring the APIs, too.
    state.active_requests = raw->tracker_ != nullptr ? raw->tracker_->active() : 0;
    state.prepare_queued = raw->prepare_ != nullptr ? raw->prepare_->queued() : 0;
    state.draining = raw->drained_.load();
    state.models = raw->workers_->KnownModels();
    for (const WorkerStatus& worker : raw->workers_->Workers()) {
      state.workers.push_back(
          {.address = worker.address,
           .model = worker.model_info != nullptr ? worker.model_info->model_name() : "",
           .ready = worker.ready && !worker.draining});
    }
    if (raw->redis_ != nullptr) state.redis_connected = raw->redis_->connected();
    if (raw->tracer_ != nullptr) {
      const common::tracing::Tracer::Stats spans = raw->tracer_->stats();
      state.traces = GatewayMetrics::LiveState::TraceState{
          .exported = spans.exported, .dropped = spans.dropped, .queued = spans.queued};
    }
    if (raw->request_log_ != nullptr) {
      const RequestLog::Stats log = raw->request_log_->stats();
      state.request_log =
          GatewayMetrics::LiveState::RequestLogState{.written = log.written,
                                                     .dropped = log.dropped,
                                                     .write_failures = log.write_failures,
                                                     .queued = log.queued,
                                                     .sink_up = log.sink_ok};
    }
    return state;
  });
  server->options_.inference.metrics = server->metrics_.get();
  server->query_of_death_ =
      std::make_unique<QueryOfDeathGuard>(options.inference.query_of_death, server->metrics_.get());
  server->options_.inference.query_of_death_guard = server->query_of_death_.get();
  if (server->redis_ != nullptr) {
    server->global_limiter_ = std::make_unique<GlobalRateLimiter>(
        server->redis_.get(),
        GlobalLimits{.requests_per_minute = options.rate_limit_rpm,
                     .tokens_per_minute = options.rate_limit_tpm,
                     .tokens_per_day = options.token_quota_daily,
                     .tokens_per_month = options.token_quota_monthly,
                     .failure_policy = options.redis_failure_policy},
        server->rate_limiter_.get(), server->metrics_.get());
  }
  server->admission_ = std::make_unique<RequestAdmission>(
      server->authenticator_.get(), server->rate_limiter_.get(), server->concurrency_.get(),
      server->metrics_.get(), server->global_limiter_.get());
  server->tracker_ =
      std::make_unique<RequestTracker>(server->admission_.get(), server->metrics_.get(),
                                       server->request_log_.get(), server->tracer_.get());
  server->catalog_ = std::make_unique<ModelCatalog>(server->workers_, options.tool_call_format,
                                                    options.reasoning_parsers);
  absl::StatusOr<std::unique_ptr<PrepareStage>> prepare = PrepareStage::Create(
      {.threads = options.prepare_threads > 0
                      ? options.prepare_threads
                      : std::min(common::UsableCpusOfThisProcess(), kMaxDefaultPrepareThreads),
       .max_queued = options.prepare_queue,
       .limits = options.inference.limits,
       .render_chat = options.render_chat});
  if (!prepare.ok()) return prepare.status();
  server->prepare_ = *std::move(prepare);
  server->inference_ = std::make_unique<InferenceService>(
      server->workers_, server->catalog_.get(), server->tracker_.get(), server->prepare_.get(),
      server->options_.inference);

  if (options.http_port >= 0) {
    // /metrics names every worker's address: with a metrics port (which operators can keep off
    // the public network) it is served there only.
    std::function<std::string()> metrics_text;
    if (options.metrics_port < 0) metrics_text = [raw] { return raw->metrics_->Render(); };
    server->openai_ = std::make_unique<OpenAiApi>(server->workers_, server->catalog_.get(),
                                                  server->tracker_.get(), server->prepare_.get(),
                                                  server->options_.inference, metrics_text);
    absl::StatusOr<std::unique_ptr<http::HttpServer>> http = http::HttpServer::Start(
        {.host = options.host,
         .port = options.http_port,
         .io_threads = options.http_threads,
         .max_body_bytes = options.max_body_bytes,
         .idle_timeout = options.http_idle_timeout,
         .header_timeout = options.http_header_timeout,
         .tls_cert_file = options.tls.cert_file,
         .tls_key_file = options.tls.key_file,
         // A browser may POST text/plain to a gateway on localhost without a CORS preflight.
         .require_json_post_body = true},
        [api = server->openai_.get()](http::HttpRequest request,
                                      std::shared_ptr<http::ResponseWriter> writer) {
          api->Handle(std::move(request), std::move(writer));
        });
    if (!http.ok()) return http.status();
    server->http_server_ = *std::move(http);
  }

  if (options.metrics_port >= 0) {
    absl::StatusOr<std::unique_ptr<common::MetricsExposer>> exposer =
        common::MetricsExposer::Start(options.host, options.metrics_port);
    if (!exposer.ok()) return exposer.status();
    server->exposer_ = *std::move(exposer);
    for (const auto& collectable : server->metrics_->collectables()) {
      server->exposer_->Register(collectable);
    }
  }

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  const std::string address = absl::StrCat(options.host, ":", options.grpc_port);
  builder.AddListeningPort(address, *server_credentials, &server->grpc_port_);
  builder.RegisterService(server->inference_.get());
  server->grpc_server_ = builder.BuildAndStart();
  if (server->grpc_server_ == nullptr || server->grpc_port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", address, " (port in use, or a bad address?)"));
  }
  server->grpc_server_->GetHealthCheckService()->SetServingStatus(kGatewayReadinessService, false);
  server->health_thread_ = std::thread([raw = server.get()] { raw->HealthLoop(); });
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
