// The OpenAI-compatible HTTP API on the gateway's HTTP server:
//   POST /v1/completions, POST /v1/chat/completions   (stream: true -> SSE, data: [DONE])
//   POST /v1/responses   (stateless; responses_request.h, responses_job.h)
//   POST /v1/embeddings  (embeddings_request.h, embeddings_job.h; workers run with --task=embed)
//   GET  /v1/models
//   POST /v1/load_lora_adapter, /v1/unload_lora_adapter  (admin only; lora_admin_api.h)
//   GET  /healthz (liveness), /readyz (a worker is ready and the gateway is not draining),
//        /metrics (Prometheus text)
// Translation only: each generation request is handed to the request runner it shares with the
// gRPC API (gateway/pipeline/request_runner.h: drain, authentication, preparation, admission, the
// generations, cancellation), whose events become the response. The JSON body is parsed, the
// model resolved and the prompt rendered and tokenized on the prepare stage's threads
// (gateway/pipeline/prepare_stage.h), once for all `n` choices, which then run as n generations
// (seeds seed, seed+1, ... when a seed is given).
// Errors use OpenAI's JSON shape with the HTTP status of common/status/http_error.h; 429 carries
// retry-after. A streamed response's status and headers go out with its first output, so that
// what fails before (a bad prompt, no ready worker, a worker refusing the request) gets its real
// status, as without streaming; only later errors are SSE error events. A client that
// disconnects cancels its generations (or its prompt's preparation, when still waiting), which
// frees the workers' blocks at once.
//
// Thread-safe: Handle is called on the HTTP server's I/O threads and never blocks.

#ifndef LLMSERVE_GATEWAY_FRONTENDS_OPENAI_OPENAI_API_H_
#define LLMSERVE_GATEWAY_FRONTENDS_OPENAI_OPENAI_API_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gateway/frontends/openai/openai_request.h"
#include "gateway/http/http_request.h"
#include "gateway/http/response_writer.h"
#include "gateway/pipeline/request_runner.h"
#include "gateway/router/worker_client.h"

namespace llmserve::gateway {

class OpenAiApi {
 public:
  // `runner` and `workers` must outlive the API; the runner's prepare stage must stop
  // (PrepareStage::Shutdown) before the API is destroyed, since its callbacks reach the requests.
  // `metrics_text` renders /metrics (may be null: 404).
  OpenAiApi(const RequestRunner* runner, const WorkerClient* workers,
            std::function<std::string()> metrics_text);

  void Handle(http::HttpRequest request, std::shared_ptr<http::ResponseWriter> writer);

 private:
  void HandleGeneration(OpenAiEndpoint endpoint, http::HttpRequest request,
                        std::shared_ptr<http::ResponseWriter> writer);
  void HandleResponses(http::HttpRequest request, std::shared_ptr<http::ResponseWriter> writer);
  void HandleEmbeddings(http::HttpRequest request, std::shared_ptr<http::ResponseWriter> writer);
  // The request's lifecycle (endpoint = its path, a trace continued from its headers).
  std::shared_ptr<RequestLifecycle> BeginLifecycle(const http::HttpRequest& request,
                                                   const char* operation) const;
  // A run whose client leaving (the writer closing) cancels it.
  std::shared_ptr<RequestRun> NewRun(std::shared_ptr<RequestLifecycle> lifecycle,
                                     std::shared_ptr<RequestSink> sink,
                                     http::ResponseWriter& writer) const;
  void HandleModels(const http::HttpRequest& request, http::ResponseWriter& writer);

  const RequestRunner* const runner_;
  const WorkerClient* const workers_;
  const std::function<std::string()> metrics_text_;
};

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_FRONTENDS_OPENAI_OPENAI_API_H_
