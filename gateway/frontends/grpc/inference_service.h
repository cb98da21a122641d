// The public gRPC service llmserve.v1.Inference (callback API: no thread per call, nothing
// blocks), translation only: each generation call is read off the wire and handed to the request
// runner (gateway/pipeline/request_runner.h: drain, authentication from the `authorization`
// metadata, the prompt prepared on the prepare stage, admission, the Generation, cancellation,
// shared with the HTTP API), whose events become GenerateStream messages or Generate's one
// response. Cancelling a call cancels its run.
//
// Thread-safe.

#ifndef LLMSERVE_GATEWAY_FRONTENDS_GRPC_INFERENCE_SERVICE_H_
#define LLMSERVE_GATEWAY_FRONTENDS_GRPC_INFERENCE_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <string>

#include "absl/status/statusor.h"
#include "gateway/pipeline/request_runner.h"
#include "gateway/pipeline/served_model.h"
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
  // `runner` must outlive the service; its prepare stage must stop (PrepareStage::Shutdown)
  // before the service is destroyed: its callbacks reach the calls. Tokenize runs there too.
  explicit InferenceService(const RequestRunner* runner) : runner_(runner) {}

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

 private:
  // What the runner needs of a Generate or GenerateStream call: its `authorization`, deadline
  // and prompt, with the model, request id and choices resolved on a prepare thread.
  RunInput MakeRunInput(grpc::CallbackServerContext* context, absl::Status parsed,
                        ::llmserve::v1::GenerateRequest request) const;
  // Tokenize's work, on a prepare thread.
  absl::StatusOr<::llmserve::v1::TokenizeResponse> TokenizePrompt(
      const ::llmserve::v1::TokenizeRequest& request, const ServedModel& model) const;

  const RequestRunner* const runner_;
};

// The `authorization` metadata of a call ("" when absent).
std::string AuthorizationOf(const grpc::CallbackServerContext& context);

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_FRONTENDS_GRPC_INFERENCE_SERVICE_H_
