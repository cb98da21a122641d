// The OpenAI-compatible HTTP API on the gateway's HTTP server:
//   POST /v1/completions, POST /v1/chat/completions   (stream: true -> SSE, data: [DONE])
//   GET  /v1/models
//   GET  /healthz (liveness), /readyz (a worker is ready and the gateway is not draining),
//        /metrics (Prometheus text)
// A thin adapter over the request pipeline it shares with the gRPC API: each generation request
// is a RequestLifecycle (gateway/pipeline/request_lifecycle.h: drain, admission, accounting) and
// runs the same prompt preparation and Generation. The I/O thread only authenticates; the JSON
// body is parsed, the model resolved and the prompt rendered and tokenized on the prepare stage's
// threads (gateway/pipeline/prepare_stage.h), once for all `n` choices, which then run as n
// generations (seeds seed, seed+1, ... when a seed is given).
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
#include "gateway/pipeline/generation.h"
#include "gateway/pipeline/model_catalog.h"
#include "gateway/pipeline/prepare_stage.h"
#include "gateway/pipeline/request_lifecycle.h"
#include "gateway/pipeline/request_options.h"
#include "gateway/router/worker_client.h"

namespace llmserve::gateway {

class OpenAiApi {
 public:
  // `metrics_text` renders /metrics (may be null: 404).
  // `prepare` runs the prompts' CPU work; it must stop (PrepareStage::Shutdown) before this API
  // is destroyed, since its callbacks come back here.
  OpenAiApi(WorkerClient* workers, ModelCatalog* catalog, RequestTracker* tracker,
            PrepareStage* prepare, RequestOptions options,
            std::function<std::string()> metrics_text);

  void Handle(http::HttpRequest request, std::shared_ptr<http::ResponseWriter> writer);

 private:
  void HandleGeneration(OpenAiEndpoint endpoint, http::HttpRequest request,
                        std::shared_ptr<http::ResponseWriter> writer);
  void HandleModels(const http::HttpRequest& request, http::ResponseWriter& writer);

  // A generation request from its authentication (on the I/O thread) to its generations.
  struct PendingGeneration {
    OpenAiEndpoint endpoint;
    Principal principal;
    std::shared_ptr<http::ResponseWriter> writer;
    std::shared_ptr<RequestLifecycle> lifecycle;
    // From the submission to the prepare stage until the prompt is ready (or refused).
    common::tracing::Span prepare_span;
    // Set by Prepare: the parsed request (its `request` cleared once prepared) and its model.
    OpenAiRequest parsed;
    std::shared_ptr<const ServedModel> model;
  };
  // On a prepare thread: parses `body`, resolves the model and prepares the choices.
  void Prepare(PendingGeneration pending, absl::string_view body);
  // On the prepare thread: the prepared choices, or the error to answer with.
  void OnPrepared(PendingGeneration pending, absl::StatusOr<std::vector<PreparedRequest>> choices);
  // The prompt is ready: admission, then the n generations.
  void StartGeneration(PendingGeneration pending, std::vector<PreparedRequest> requests);

  WorkerClient* const workers_;
  ModelCatalog* const catalog_;
  RequestTracker* const tracker_;
  PrepareStage* const prepare_;
  const RequestOptions options_;
  const std::function<std::string()> metrics_text_;
};

// Sends `status` as an OpenAI error, with retry-after when given (429).
void SendOpenAiError(http::ResponseWriter& writer, const absl::Status& status,
                     absl::Duration retry_after = absl::ZeroDuration());

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_FRONTENDS_OPENAI_OPENAI_API_H_
