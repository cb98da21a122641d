// The public gRPC service llmserve.v1.Inference (callback API: no thread per call, nothing
// blocks), a thin adapter over the request pipeline: each generation call is a RequestLifecycle
// (gateway/pipeline/request_lifecycle.h: drain, admission and accounting, shared with the HTTP
// API), authenticated from its `authorization` metadata, with its prompt prepared on the prepare
// stage's threads
// (gateway/pipeline/prepare_stage.h; gRPC's own threads only parse and authenticate) and runs a
// Generation, streaming its deltas (GenerateStream) or collecting them (Generate). Cancelling a
// call cancels its prompt's preparation (while it waits for a thread) or the worker's request.
//
// Thread-safe.

#ifndef LLMSERVE_GATEWAY_FRONTENDS_GRPC_INFERENCE_SERVICE_H_
#define LLMSERVE_GATEWAY_FRONTENDS_GRPC_INFERENCE_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gateway/admission/authenticator.h"
#include "gateway/metrics/gateway_metrics.h"
#include "gateway/pipeline/generation.h"
#include "gateway/pipeline/model_catalog.h"
#include "gateway/pipeline/prepare_stage.h"
#include "gateway/pipeline/prompt_builder.h"
#include "gateway/pipeline/request_lifecycle.h"
#include "gateway/pipeline/request_options.h"
#include "gateway/router/worker_client.h"
#include "llmserve/v1/inference.grpc.pb.h"

namespace llmserve::gateway {

// Every method is registered raw (bytes in, bytes out) and parses its own request, so a request
// that does not parse gets INVALID_ARGUMENT saying so (gRPC's typed handlers would answer
// UNIMPLEMENTED with no message).
using RawInferenceService = ::llmserve::v1::Inference::WithRawCallbackMethod_Generate<
    ::llmserve::v1::Inference::WithRawCallbackMethod_GenerateStream<
        ::llmserve::v1::Inference::WithRawCallbackMethod_Tokenize<
            ::llmserve::v1::Inference::WithRawCallbackMethod_ListModels<
                ::llmserve::v1::Inference::Service>>>>;

class InferenceService final : public RawInferenceService {
 public:
  // `prepare` must stop (PrepareStage::Shutdown) before this service is destroyed: its callbacks
  // come back here. Tokenize runs there too, with its chat renderer.
  InferenceService(WorkerClient* workers, ModelCatalog* catalog, RequestTracker* tracker,
                   PrepareStage* prepare, RequestOptions options);

  grpc::ServerUnaryReactor* Generate(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* GenerateStream(
      grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;

  // What a generation call knows before its prompt is prepared.
  struct Accepted {
    Principal principal;
    std::shared_ptr<const ServedModel> model;
    absl::Time client_deadline = absl::InfiniteFuture();
  };
  // Everything a generation call needs before admission: caller, model, prompt.
  struct Started {
    PreparedRequest request;
    GenerationOptions generation;
    Principal principal;
    // Prompt + max_tokens, reserved against the caller's token rate.
    int64_t tokens = 0;
  };

 private:
  // Draining, authentication, the model and the request id (set into `request`), on gRPC's
  // thread: what a call needs before its prompt goes to the prepare stage. Names the model in
  // `lifecycle` as soon as it is known.
  absl::StatusOr<Accepted> Accept(grpc::CallbackServerContext* context,
                                  ::llmserve::v1::GenerateRequest& request,
                                  RequestLifecycle& lifecycle);
  Started MakeStarted(PreparedRequest request, const Accepted& accepted, absl::Time arrival) const;
  // Hands the prompt to the prepare stage; when it comes back, Launch, or the error ends the call.
  template <typename Call>
  void PrepareThenLaunch(Call* call, ::llmserve::v1::GenerateRequest request, Accepted accepted);
  // Tokenize's work, on a prepare thread.
  absl::StatusOr<::llmserve::v1::TokenizeResponse> TokenizePrompt(
      const ::llmserve::v1::TokenizeRequest& request, const ServedModel& model) const;
  // Admits the call (possibly after a wait in the concurrency queue), then starts its Generation.
  template <typename Call>
  void Launch(Call* call, Started started);

  WorkerClient* const workers_;
  ModelCatalog* const catalog_;
  RequestTracker* const tracker_;
  PrepareStage* const prepare_;
  const RequestOptions options_;
};

// The `authorization` metadata of a call ("" when absent).
std::string AuthorizationOf(const grpc::CallbackServerContext& context);

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_FRONTENDS_GRPC_INFERENCE_SERVICE_H_
