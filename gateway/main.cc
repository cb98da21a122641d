// llmserve-gateway: the public front door. Clients call llmserve.v1.Inference over gRPC; the
// gateway authenticates them, applies limits, tokenizes, routes to workers and streams back.
//
// SIGTERM or SIGINT drains (stop admitting, finish running requests up to --drain_timeout) and
// exits 0; a second signal exits at once with status 1.

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/base/flag_names.h"
#include "common/base/protobuf_log.h"
#include "common/base/serve_until_signal.h"
#include "common/tracing/tracing_flags.h"
#include "gateway/pipeline/logprob_budget.h"
#include "gateway/server/gateway_server.h"

ABSL_FLAG(std::string, host, "127.0.0.1",
          "address to listen on; a non-loopback address needs auth or --allow_unauthenticated");
ABSL_FLAG(int, grpc_port, 50050, "port of the public gRPC API (0: pick a free one)");
ABSL_FLAG(int, http_port, 8080,
          "port of the OpenAI-compatible HTTP API, /healthz, /readyz, /metrics (0: pick a free "
          "one; -1: off)");
ABSL_FLAG(int, metrics_port, -1,
          "a separate Prometheus /metrics port, then the only one (/metrics names the workers' "
          "addresses); -1: /metrics on the HTTP port");
ABSL_FLAG(int, http_threads, 1, "HTTP I/O threads (one holds thousands of SSE streams)");
ABSL_FLAG(int, prepare_threads, 0,
          "threads that render chat templates and tokenize prompts, off the I/O threads (0: the "
          "usable CPUs, at most 4)");
ABSL_FLAG(int, prepare_queue, 256,
          "requests that may wait for a --prepare_threads thread; beyond them, 429");
ABSL_FLAG(int64_t, max_body_bytes, 4 << 20, "largest HTTP request body (413 beyond)");
ABSL_FLAG(absl::Duration, http_idle_timeout, absl::Seconds(60),
          "an HTTP connection is closed when a kept-alive one sits idle this long, or when reading "
          "a body or a write to the client (e.g. an SSE stream it stopped reading) makes no "
          "progress for this long");
ABSL_FLAG(absl::Duration, http_header_timeout, absl::Seconds(10),
          "an HTTP request's headers (and a TLS handshake) must arrive within this");
ABSL_FLAG(std::vector<std::string>, workers, {},
          "workers as host:port, comma-separated (static list)");
ABSL_FLAG(std::vector<std::string>, worker_dns, {},
          "name:port entries, comma-separated, each resolving to workers (e.g. one Kubernetes "
          "headless service per worker group), re-resolved every --dns_refresh");
ABSL_FLAG(absl::Duration, dns_refresh, absl::Seconds(10), "how often --worker_dns is resolved");
ABSL_FLAG(
    absl::Duration, stream_idle_timeout, absl::Minutes(5),
    "a request whose worker sends nothing for this long fails (retried elsewhere before its "
    "first token); 0: no limit. A worker silent past its heartbeat fails its requests sooner");
ABSL_FLAG(absl::Duration, worker_backoff_max, absl::Seconds(30),
          "a worker that fails is probed again after a backoff that doubles from 500ms up to this "
          "(a restarted worker is back in at most this long)");
ABSL_FLAG(std::string, tool_call_parser, "auto",
          "how models write tool calls: auto (detected from the chat template), hermes, "
          "llama3_json, mistral, none (tool calls are never parsed)");
ABSL_FLAG(std::string, reasoning_parser, "",
          "how reasoning models mark their reasoning, to return it apart from the answer in chat "
          "replies: deepseek_r1, qwen3 or none for every model, and/or MODEL=PARSER for one "
          "model, comma-separated (e.g. 'qwen3,r1-distill=deepseek_r1'); empty: none");
ABSL_FLAG(std::string, routing, "prefix",
          "routing policy: prefix (cache affinity within a load bound), least_load, round_robin");
ABSL_FLAG(double, prefix_load_bound, 8,
          "prefix routing: how much busier (running + 2 * waiting + 8 * KV usage) the worker "
          "holding a prefix may be than the least-loaded one");
ABSL_FLAG(std::string, api_keys_file, "",
          "API keys: lines 'NAME SHA256HEX' (hash of the key), reloaded when the file changes");
ABSL_FLAG(std::string, jwt_hs256_secret_file, "", "accept HS256 JWTs signed with this secret");
ABSL_FLAG(std::string, jwt_public_key_file, "", "accept RS256 JWTs signed for this PEM key");
ABSL_FLAG(std::string, jwt_jwks_file, "",
          "accept RS256 JWTs signed for a key in this JWKS file (read at start)");
ABSL_FLAG(std::string, jwt_audience, "", "required JWT 'aud' (empty: not checked)");
ABSL_FLAG(std::string, jwt_issuer, "", "required JWT 'iss' (empty: not checked)");
ABSL_FLAG(bool, allow_unauthenticated, false,
          "serve without auth on a non-loopback address (trusted networks only)");
ABSL_FLAG(int64_t, rate_limit_rpm, 0, "requests per minute per key (0: unlimited)");
ABSL_FLAG(int64_t, rate_limit_tpm, 0,
          "tokens (prompt + completion) per minute per key (0: unlimited)");
ABSL_FLAG(int64_t, token_quota_daily, 0,
          "tokens (prompt + completion) per UTC day per key, across replicas (needs --redis_url; "
          "0: none)");
ABSL_FLAG(int64_t, token_quota_monthly, 0,
          "tokens (prompt + completion) per UTC month per key, across replicas (needs "
          "--redis_url; 0: none)");
ABSL_FLAG(std::string, redis_url, "",
          "redis://[[user]:password@]host[:port][/db]: the rate limits and quotas hold across "
          "every gateway replica sharing it; empty: the LLMSERVE_REDIS_URL environment variable, "
          "else each replica counts alone");
ABSL_FLAG(absl::Duration, redis_timeout, absl::Milliseconds(100),
          "how long a rate-limit check may wait for Redis before the failure policy decides");
ABSL_FLAG(std::string, redis_failure_policy, "open",
          "when Redis cannot answer: open (this replica's own --rate_limit_* limits; quotas "
          "unchecked) or closed (refuse with 503)");
ABSL_FLAG(int64_t, max_concurrency, 0, "requests in flight at once (0: unlimited)");
ABSL_FLAG(int64_t, max_queued_requests, 256,
          "with --max_concurrency: requests that may wait for a slot before 429");
ABSL_FLAG(int64_t, max_prompt_bytes, 1 << 20, "largest text prompt or rendered chat, in bytes");
ABSL_FLAG(int, default_max_tokens, 1024, "max_tokens of requests that leave it unset");
ABSL_FLAG(int64_t, max_logprob_entries, llmserve::gateway::kDefaultMaxLogprobEntries,
          "logprob entries one request may return, n * max_tokens * (top_logprobs + 1) over all "
          "its choices (400 beyond): bounds the gateway's memory per request, about 100 bytes an "
          "entry at the peak of a chat response (docs/gateway.md)");
ABSL_FLAG(int, max_attempts, 3, "workers tried for a request that fails before its first token");
ABSL_FLAG(int, query_of_death_retries, 0,
          "workers a request is retried on after its worker went away while running it (0: "
          "none, so one request takes down one worker at most)");
ABSL_FLAG(absl::Duration, query_of_death_quarantine, absl::Minutes(5),
          "how long requests identical to one whose worker went away while running it are "
          "refused (503) without reaching a worker (0: never)");
ABSL_FLAG(int64_t, query_of_death_quarantine_size, 10000,
          "request fingerprints kept in quarantine at most (the oldest go first)");
ABSL_FLAG(absl::Duration, request_timeout, absl::Minutes(10),
          "requests without a client deadline end after this");
ABSL_FLAG(bool, isolate_cache_per_key, false,
          "never share prefix-cache blocks between keys (per-tenant cache salt)");
ABSL_FLAG(std::string, tls_cert, "", "PEM certificate chain: serve the public APIs over TLS");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, worker_tls_ca, "", "PEM CA of the workers' certificates: TLS to workers");
ABSL_FLAG(std::string, worker_tls_cert, "",
          "PEM client certificate presented to workers (mutual TLS; needs --worker_tls_ca)");
ABSL_FLAG(std::string, worker_tls_key, "", "PEM private key of --worker_tls_cert");
ABSL_FLAG(std::string, worker_tls_server_name, "",
          "name to check in the workers' certificates when it is not the dialled address");
ABSL_FLAG(absl::Duration, drain_timeout, absl::Seconds(30),
          "on SIGTERM, how long running requests may take");
ABSL_FLAG(absl::Duration, lora_load_timeout, absl::Seconds(30),
          "how long a worker may take to load a LoRA adapter (/v1/load_lora_adapter, and loads "
          "on demand for a request whose adapter no ready worker has); at most 10m");
ABSL_FLAG(std::string, request_log, "",
          "where every finished request's record goes: postgres://[user@]host[:port]/db[?...] "
          "(PostgreSQL; a password is better in PGPASSWORD than in the URL) or the path of a "
          "JSON-lines file; empty: the LLMSERVE_REQUEST_LOG environment variable, else none");
ABSL_FLAG(bool, request_log_content, false,
          "put each request's prompt and output text in its request log record (off by default: "
          "they may hold personal data)");
ABSL_FLAG(int64_t, request_log_content_max_bytes, 16384,
          "with --request_log_content: at most this many bytes of prompt text, and of output "
          "text, per record");
ABSL_FLAG(int64_t, request_log_queue, 10000,
          "request log records held in memory while the sink is slow or down; beyond it new "
          "records are dropped (counted in llmserve_gateway_request_log_records_total)");

namespace {

absl::StatusOr<llmserve::gateway::GatewayServerOptions> OptionsFromFlags() {
  llmserve::gateway::GatewayServerOptions options;
  options.host = absl::GetFlag(FLAGS_host);
  options.grpc_port = absl::GetFlag(FLAGS_grpc_port);
  options.http_port = absl::GetFlag(FLAGS_http_port);
  options.http_threads = absl::GetFlag(FLAGS_http_threads);
  options.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  if (options.metrics_port < -1 || options.metrics_port > 65535) {
    return absl::InvalidArgumentError("--metrics_port must be in [-1, 65535]");
  }
  if (options.http_threads < 1 || options.http_threads > 256) {
    return absl::InvalidArgumentError("--http_threads must be in [1, 256]");
  }
  options.prepare_threads = absl::GetFlag(FLAGS_prepare_threads);
  if (options.prepare_threads < 0 || options.prepare_threads > 256) {
    return absl::InvalidArgumentError("--prepare_threads must be in [0, 256]");
  }
  options.prepare_queue = absl::GetFlag(FLAGS_prepare_queue);
  if (options.prepare_queue < 0 || options.prepare_queue > 65536) {
    return absl::InvalidArgumentError("--prepare_queue must be in [0, 65536]");
  }
  const int64_t max_body_bytes = absl::GetFlag(FLAGS_max_body_bytes);
  if (max_body_bytes < 1024 || max_body_bytes > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError("--max_body_bytes must be in [1KiB, 1GiB]");
  }
  options.max_body_bytes = static_cast<size_t>(max_body_bytes);
  options.http_idle_timeout = absl::GetFlag(FLAGS_http_idle_timeout);
  if (options.http_idle_timeout < absl::Seconds(1) || options.http_idle_timeout > absl::Hours(24)) {
    return absl::InvalidArgumentError("--http_idle_timeout must be in [1s, 24h]");
  }
  options.http_header_timeout = absl::GetFlag(FLAGS_http_header_timeout);
  if (options.http_header_timeout < absl::Seconds(1) ||
      options.http_header_timeout > absl::Minutes(10)) {
    return absl::InvalidArgumentError("--http_header_timeout must be in [1s, 10m]");
  }
  options.pool.workers = absl::GetFlag(FLAGS_workers);
  options.pool.worker_dns = absl::GetFlag(FLAGS_worker_dns);
  options.pool.dns_refresh = absl::GetFlag(FLAGS_dns_refresh);
  options.pool.stream_idle_timeout = absl::GetFlag(FLAGS_stream_idle_timeout);
  options.pool.backoff_max = absl::GetFlag(FLAGS_worker_backoff_max);
  absl::StatusOr<llmserve::gateway::RoutingPolicy> routing =
      llmserve::gateway::ParseRoutingPolicy(absl::GetFlag(FLAGS_routing));
  if (!routing.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--routing: ", routing.status().message()));
  }
  options.pool.routing.policy = *routing;
  if (const std::string parser = absl::GetFlag(FLAGS_tool_call_parser); parser != "auto") {
    absl::StatusOr<llmserve::gateway::tool_calls::ToolCallFormat> format =
        llmserve::gateway::tool_calls::ParseToolCallFormatName(parser);
    if (!format.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tool_call_parser: ", format.status().message(),
                       " (auto, hermes, llama3_json, mistral or none)"));
    }
    options.tool_call_format = *format;
  }
  absl::StatusOr<llmserve::gateway::reasoning::ReasoningParsers> reasoning_parsers =
      llmserve::gateway::reasoning::ParseReasoningParsers(absl::GetFlag(FLAGS_reasoning_parser));
  if (!reasoning_parsers.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--reasoning_parser: ", reasoning_parsers.status().message()));
  }
  options.reasoning_parsers = *std::move(reasoning_parsers);
  options.pool.routing.prefix_load_bound = absl::GetFlag(FLAGS_prefix_load_bound);
  if (!(options.pool.routing.prefix_load_bound >= 0)) {
    return absl::InvalidArgumentError("--prefix_load_bound must be >= 0");
  }
  options.api_keys_file = absl::GetFlag(FLAGS_api_keys_file);
  options.jwt_hs256_secret_file = absl::GetFlag(FLAGS_jwt_hs256_secret_file);
  options.jwt_public_key_file = absl::GetFlag(FLAGS_jwt_public_key_file);
  options.jwt_jwks_file = absl::GetFlag(FLAGS_jwt_jwks_file);
  options.jwt_audience = absl::GetFlag(FLAGS_jwt_audience);
  options.jwt_issuer = absl::GetFlag(FLAGS_jwt_issuer);
  options.allow_unauthenticated = absl::GetFlag(FLAGS_allow_unauthenticated);
  options.rate_limit_rpm = absl::GetFlag(FLAGS_rate_limit_rpm);
  options.rate_limit_tpm = absl::GetFlag(FLAGS_rate_limit_tpm);
  options.max_concurrency = absl::GetFlag(FLAGS_max_concurrency);
  options.token_quota_daily = absl::GetFlag(FLAGS_token_quota_daily);
  options.token_quota_monthly = absl::GetFlag(FLAGS_token_quota_monthly);
  options.redis_url = absl::GetFlag(FLAGS_redis_url);
  // From the environment, so that a URL holding a password stays off the command line.
  if (const char* from_env = std::getenv("LLMSERVE_REDIS_URL");
      options.redis_url.empty() && from_env != nullptr) {
    options.redis_url = from_env;
  }
  options.redis_timeout = absl::GetFlag(FLAGS_redis_timeout);
  const std::string policy = absl::GetFlag(FLAGS_redis_failure_policy);
  if (policy != "open" && policy != "closed") {
    return absl::InvalidArgumentError(
        absl::StrCat("--redis_failure_policy must be open or closed, got '", policy, "'"));
  }
  options.redis_failure_policy = policy == "open" ? llmserve::gateway::RedisFailurePolicy::kOpen
                                                  : llmserve::gateway::RedisFailurePolicy::kClosed;
  options.max_queued_requests = absl::GetFlag(FLAGS_max_queued_requests);
  if (options.max_queued_requests < 0) {
    return absl::InvalidArgumentError("--max_queued_requests must be >= 0");
  }
  if (options.rate_limit_rpm < 0 || options.rate_limit_tpm < 0 || options.max_concurrency < 0) {
    return absl::InvalidArgumentError(
        "--rate_limit_rpm, --rate_limit_tpm and --max_concurrency must be >= 0");
  }
  const int64_t max_prompt_bytes = absl::GetFlag(FLAGS_max_prompt_bytes);
  const int default_max_tokens = absl::GetFlag(FLAGS_default_max_tokens);
  const int max_attempts = absl::GetFlag(FLAGS_max_attempts);
  if (max_prompt_bytes < 1 || max_prompt_bytes > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError("--max_prompt_bytes must be in [1, 1GiB]");
  }
  if (default_max_tokens < 1)
    return absl::InvalidArgumentError("--default_max_tokens must be >= 1");
  if (max_attempts < 1 || max_attempts > 10) {
    return absl::InvalidArgumentError("--max_attempts must be in [1, 10]");
  }
  options.inference.limits.max_prompt_bytes = static_cast<size_t>(max_prompt_bytes);
  options.inference.limits.default_max_tokens = static_cast<uint32_t>(default_max_tokens);
  const int64_t max_logprob_entries = absl::GetFlag(FLAGS_max_logprob_entries);
  if (max_logprob_entries < 1 || max_logprob_entries > llmserve::gateway::kMaxMaxLogprobEntries) {
    return absl::InvalidArgumentError(absl::StrCat("--max_logprob_entries must be in [1, ",
                                                   llmserve::gateway::kMaxMaxLogprobEntries,
                                                   "], got ", max_logprob_entries));
  }
  options.inference.limits.max_logprob_entries = max_logprob_entries;
  options.inference.max_attempts = max_attempts;
  const int64_t quarantine_size = absl::GetFlag(FLAGS_query_of_death_quarantine_size);
  if (quarantine_size < 1 || quarantine_size > 1000000) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--query_of_death_quarantine_size must be in [1, 1000000], got ", quarantine_size));
  }
  options.inference.query_of_death = {.crash_retries = absl::GetFlag(FLAGS_query_of_death_retries),
                                      .quarantine = absl::GetFlag(FLAGS_query_of_death_quarantine),
                                      .quarantine_size = static_cast<size_t>(quarantine_size)};
  if (absl::Status guard =
          llmserve::gateway::ValidateQueryOfDeathOptions(options.inference.query_of_death);
      !guard.ok()) {
    return guard;
  }
  options.inference.request_timeout = absl::GetFlag(FLAGS_request_timeout);
  options.inference.isolate_cache_per_principal = absl::GetFlag(FLAGS_isolate_cache_per_key);
  if (options.inference.request_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--request_timeout must be positive");
  }
  options.drain_timeout = absl::GetFlag(FLAGS_drain_timeout);
  options.lora_load_timeout = absl::GetFlag(FLAGS_lora_load_timeout);
  options.tls = {.cert_file = absl::GetFlag(FLAGS_tls_cert),
                 .key_file = absl::GetFlag(FLAGS_tls_key)};
  options.worker_tls = {.ca_file = absl::GetFlag(FLAGS_worker_tls_ca),
                        .cert_file = absl::GetFlag(FLAGS_worker_tls_cert),
                        .key_file = absl::GetFlag(FLAGS_worker_tls_key)};
  options.worker_tls_server_name = absl::GetFlag(FLAGS_worker_tls_server_name);
  if (options.drain_timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--drain_timeout must be >= 0");
  }
  absl::StatusOr<llmserve::common::tracing::TracingFlags> tracing =
      llmserve::common::tracing::TracingFlagsFromCommandLine();
  if (!tracing.ok()) return tracing.status();
  options.tracing = *std::move(tracing);
  options.request_log = absl::GetFlag(FLAGS_request_log);
  // From the environment, so that a URL holding a password (a Kubernetes Secret) stays out of the
  // command line that `ps` shows.
  if (const char* from_env = std::getenv("LLMSERVE_REQUEST_LOG");
      options.request_log.empty() && from_env != nullptr) {
    options.request_log = from_env;
  }
  const int64_t request_log_queue = absl::GetFlag(FLAGS_request_log_queue);
  if (request_log_queue < 1 || request_log_queue > 10000000) {
    return absl::InvalidArgumentError(
        absl::StrCat("--request_log_queue must be in [1, 10000000], got ", request_log_queue));
  }
  options.request_log_options.max_queued = static_cast<size_t>(request_log_queue);
  const int64_t content_max_bytes = absl::GetFlag(FLAGS_request_log_content_max_bytes);
  if (content_max_bytes < 1 || content_max_bytes > (int64_t{1} << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--request_log_content_max_bytes must be in [1, 1048576], got ", content_max_bytes));
  }
  if (absl::GetFlag(FLAGS_request_log_content)) {
    options.request_log_options.content_max_bytes = static_cast<size_t>(content_max_bytes);
  }
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "The llmserve gateway.\n"
      "  llmserve-gateway --workers=127.0.0.1:50051 [--grpc_port=50050] [--api_keys_file=F]");
  // Before any thread parses a request: a client can provoke a libprotobuf log line per request.
  llmserve::common::InstallThrottledProtobufLogHandler();
  llmserve::common::NormalizeFlagNames(argc, argv);
  absl::ParseCommandLine(argc, argv);
  return llmserve::common::ServeUntilShutdownSignal("llmserve-gateway", OptionsFromFlags(),
                                                    &llmserve::gateway::GatewayServer::Start,
                                                    /*invalid_start_is_usage_error=*/true);
}
