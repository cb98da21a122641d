// The public gRPC service llmserve.v1.Inference (callback API: no thread per call, nothing
// blocks): authenticates each call from its `authorization` metadata, applies rate and
// concurrency limits, has the prompt prepared on the prepare stage's threads
// (gateway/pipeline/prepare_stage.h; gRPC's own threads only parse and authenticate) and runs a
// Generation, streaming its deltas (GenerateStream) or collecting them (Generate). Cancelling a
// call cancels its prompt's preparation (while it waits for a thread) or the worker's request.
//
// Thread-safe.

#ifndef LLMSERVE_GATEWAY_API_INFERENCE_SERVICE_H_
#define LLMSERVE_GATEWAY_API_INFERENCE_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gateway/api/gateway_metrics.h"
#include "gateway/api/generation.h"
#include "gateway/api/model_catalog.h"
#include "gateway/api/prompt_builder.h"
#include "gateway/auth/authenticator.h"
#include "gateway/auth/concurrency_limiter.h"
#include "gateway/auth/rate_limiter.h"
#include "gateway/pipeline/prepare_stage.h"
#include "gateway/router/worker_pool.h"
#include "llmserve/v1/inference.grpc.pb.h"

namespace llmserve::gateway {

// Who may run a request now: authentication, then limits. Shared by the gRPC and HTTP APIs.
class RequestAdmission {
 public:
  // `rate_limiter` and `concurrency` may be null (no limit).
  RequestAdmission(const Authenticator* authenticator, RateLimiter* rate_limiter,
                   ConcurrencyLimiter* concurrency, GatewayMetrics* metrics = nullptr)
      : authenticator_(authenticator),
        rate_limiter_(rate_limiter),
        concurrency_(concurrency),
        metrics_(metrics) {}

  struct Admitted {
    Principal principal;
    // Released when the request ends.
    std::shared_ptr<ConcurrencyLimiter::Permit> permit;
  };
  // The caller, from an Authorization header value: UNAUTHENTICATED when it is not accepted.
  absl::StatusOr<Principal> Authenticate(absl::string_view authorization) const;
  // Rate limits for a request of `tokens` (prompt + max_tokens), checked now, then a concurrency
  // slot: now, or from the bounded queue when one frees up. `done` runs exactly once (unless
  // CancelWait returns true first): with the admission, or with RESOURCE_EXHAUSTED and how long
  // to wait before retrying (429 / retry-after), or UNAVAILABLE when the gateway shuts down. A
  // request the concurrency limit refuses gets back what the rate limits took for it: it never
  // ran. `done` may run on this thread or later on the thread that frees a slot. Returns the
  // queued wait's id, 0 when `done` already ran.
  using AdmitCallback =
      absl::AnyInvocable<void(absl::StatusOr<Admitted> admitted, absl::Duration retry_after) &&>;
  ConcurrencyLimiter::WaitId Admit(const Principal& principal, int64_t tokens,
                                   AdmitCallback done) const;
  // A client left while queued: true when `done` will never run.
  bool CancelWait(ConcurrencyLimiter::WaitId id) const;
  // Completion tokens, known at the end, counted against the principal's token budget.
  void ChargeTokens(const Principal& principal, int64_t tokens) const;

 private:
  const Authenticator* const authenticator_;
  RateLimiter* const rate_limiter_;
  ConcurrencyLimiter* const concurrency_;
  GatewayMetrics* const metrics_;
};

struct InferenceServiceOptions {
  PromptLimits limits;
  int max_attempts = 3;
  // Requests without a client deadline end after this.
  absl::Duration request_timeout = absl::Minutes(10);
  // Mix the principal's name into prefix-cache hashes, so tenants never share cached blocks.
  bool isolate_cache_per_principal = false;
  // May be null.
  GatewayMetrics* metrics = nullptr;
};

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
  InferenceService(WorkerPool* pool, ModelCatalog* catalog, const RequestAdmission* admission,
                   PrepareStage* prepare, InferenceServiceOptions options);

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

  // New calls get UNAVAILABLE from now on.
  void StartDrain() { draining_ = true; }
  int active_requests() const { return active_->load(); }

  // What a generation call knows before its prompt is prepared.
  struct Accepted {
    Principal principal;
    std::shared_ptr<const ServedModel> model;
    absl::Time client_deadline = absl::InfiniteFuture();
    absl::Time arrival;
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
  // thread: what a call needs before its prompt goes to the prepare stage.
  absl::StatusOr<Accepted> Accept(grpc::CallbackServerContext* context,
                                  ::llmserve::v1::GenerateRequest& request);
  Started MakeStarted(PreparedRequest request, const Accepted& accepted) const;
  // Hands the prompt to the prepare stage; when it comes back, Launch, or the error ends the call.
  template <typename Call>
  void PrepareThenLaunch(Call* call, ::llmserve::v1::GenerateRequest request, Accepted accepted);
  // Ends a call that never reached admission with `status` (counted), with a retry-after trailer
  // when `retry_after` is positive.
  template <typename Call>
  void FailCall(Call* call, const absl::Status& status, absl::Duration retry_after,
                absl::string_view model, absl::Time arrival);
  void RecordDone(absl::string_view model, absl::StatusCode code, absl::Time arrival) const;
  // Tokenize's work, on a prepare thread.
  absl::StatusOr<::llmserve::v1::TokenizeResponse> TokenizePrompt(
      const ::llmserve::v1::TokenizeRequest& request, const ServedModel& model) const;
  // Admits the call (possibly after a wait in the concurrency queue), then starts its Generation.
  template <typename Call>
  void Launch(Call* call, Started started, absl::Time arrival);

  WorkerPool* const pool_;
  ModelCatalog* const catalog_;
  const RequestAdmission* const admission_;
  PrepareStage* const prepare_;
  const InferenceServiceOptions options_;
  std::atomic<bool> draining_{false};
  std::shared_ptr<std::atomic<int>> active_ = std::make_shared<std::atomic<int>>(0);
};

// The `authorization` metadata of a call ("" when absent).
std::string AuthorizationOf(const grpc::CallbackServerContext& context);

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_API_INFERENCE_SERVICE_H_
