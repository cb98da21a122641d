// One generation request's way through the gateway, written once for both APIs:
//   drain -> authenticate -> prepare (parse, model, template, tokenize; on the prepare stage) ->
//   admit (rate limits, token reservation, concurrency) -> n Generations -> finish or cancel.
// A frontend only translates (llama.cpp's server_response_reader is the shape): it reads the
// request off the wire, hands the runner what it read with a RequestSink, and turns the sink's
// events into its wire format. The runner finishes the request's lifecycle (the request metric,
// the token charge, the concurrency slot, the request log and the span) before the sink's last
// event, so that a client that reads its response finds the request counted.
//
// Thread-safe.

#ifndef LLMSERVE_GATEWAY_PIPELINE_REQUEST_RUNNER_H_
#define LLMSERVE_GATEWAY_PIPELINE_REQUEST_RUNNER_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gateway/admission/authenticator.h"
#include "gateway/pipeline/generation.h"
#include "gateway/pipeline/model_catalog.h"
#include "gateway/pipeline/prepare_stage.h"
#include "gateway/pipeline/prompt_builder.h"
#include "gateway/pipeline/request_lifecycle.h"
#include "gateway/pipeline/request_options.h"
#include "gateway/router/worker_client.h"

namespace llmserve::gateway {

// A request's prepared choices (PrepareChoices), all for one model.
struct PreparedRun {
  std::shared_ptr<const ServedModel> model;
  std::vector<PreparedRequest> choices;
  // Embeddings: each choice is one input with a prompt of its own (the rate limits reserve and
  // charge every one; otherwise the choices share the first's), and at most max_concurrent of
  // them run at once (0: all), the next starting as one ends, so that a request of many inputs
  // neither floods a worker's queue nor takes the whole fleet. When one fails the request fails:
  // those still running are cancelled, and those not started end with its error.
  bool separate_prompts = false;
  int max_concurrent = 0;
};

// The prompt tokens of a run, as the rate limits count them.
int64_t PromptTokens(const PreparedRun& run);

// What a frontend read off the wire.
struct RunInput {
  // The `authorization` the client sent ("" when none).
  std::string authorization;
  // The client's own deadline (gRPC); the request timeout applies too.
  absl::Time client_deadline = absl::InfiniteFuture();
  // The size of the prompt work (a body, or a prompt's text), for the prepare stage's order.
  size_t prompt_bytes = 0;
  // Runs once on a prepare thread: parses what is left to parse, resolves the model
  // (RequestRunner::ResolveModel) and prepares
  // the choices (PrepareChoices), naming what it learns on the lifecycle (model, request id,
  // content). Its error is the request's answer.
  absl::AnyInvocable<absl::StatusOr<PreparedRun>(RequestLifecycle& lifecycle) &&> prepare;
};

// Where a run's events go, in this order: OnRefused alone; or OnStarted, then for each choice
// OnDelta* and one OnChoiceEnd (choices interleave), then OnCompleted. Called one at a time per
// choice, on the runner's threads (a gRPC, HTTP, prepare or worker-call thread), without any of
// the runner's locks held; must not block.
class RequestSink {
 public:
  virtual ~RequestSink() = default;
  // The request ended before any generation started (draining, authentication, preparation,
  // admission, or the client left): the error is the whole answer. A positive `retry_after`
  // says when to retry (a rate limit, a full prepare queue).
  virtual void OnRefused(const absl::Status& status, absl::Duration retry_after) = 0;
  // Admitted: a generation starts for each of run.choices.
  virtual void OnStarted(const PreparedRun& run) = 0;
  virtual void OnDelta(int choice, GenerationDelta delta) = 0;
  // Choice `choice` ended: `result`, or (when null) `error`.
  virtual void OnChoiceEnd(int choice, const GenerationResult* result,
                           const absl::Status& error) = 0;
  // Every choice ended; `first_error` is the first choice's error in time (OK when none failed).
  virtual void OnCompleted(const absl::Status& first_error) = 0;
};

class RequestRun;

// What every run shares: the gateway's workers, models, tracker and prepare stage.
class RequestRunner {
 public:
  // All must outlive every run; `prepare` must shut down before the runner goes (its callbacks
  // reach runs).
  RequestRunner(WorkerClient* workers, ModelCatalog* catalog, RequestTracker* tracker,
                PrepareStage* prepare, RequestOptions options)
      : workers_(workers),
        catalog_(catalog),
        tracker_(tracker),
        prepare_(prepare),
        options_(std::move(options)) {}

  // A run of the request `lifecycle` stands for (begun by the frontend, which knows its API,
  // endpoint and trace), reporting to `sink`. Nothing happens until Start: the frontend first
  // hooks the client's departure to RequestRun::Cancel.
  std::shared_ptr<RequestRun> NewRun(std::shared_ptr<RequestLifecycle> lifecycle,
                                     std::shared_ptr<RequestSink> sink) const;

  // Other prompt work (gRPC Tokenize) on the prepare stage: `work` runs there with OK, or with
  // why it should only answer. A refusal comes back here, with when to retry when the stage's
  // queue is full (counted as rate limited).
  struct Refusal {
    absl::Status status;
    absl::Duration retry_after;
  };
  Refusal RunPromptWork(size_t prompt_bytes, std::shared_ptr<const PrepareStage::Ticket> ticket,
                        PrepareStage::Work work) const;

  // The models a caller with `authorization` may list: those with a ready worker, sorted by name.
  absl::StatusOr<std::vector<ModelCatalog::ModelSummary>> ListModels(
      absl::string_view authorization) const;

  // The model a request of `lifecycle` names (ModelCatalog::Resolve), or PERMISSION_DENIED when
  // its principal may not use it: what every frontend's prepare step resolves the model with.
  absl::StatusOr<std::shared_ptr<const ServedModel>> ResolveModel(const RequestLifecycle& lifecycle,
                                                                  absl::string_view name) const;

  ModelCatalog& catalog() const { return *catalog_; }
  const PrepareStage& prepare() const { return *prepare_; }
  const RequestOptions& options() const { return options_; }
  RequestTracker& tracker() const { return *tracker_; }

 private:
  friend class RequestRun;

  WorkerClient* const workers_;
  ModelCatalog* const catalog_;
  RequestTracker* const tracker_;
  PrepareStage* const prepare_;
  const RequestOptions options_;
};

// One request's run. Holds itself (through the stages' callbacks and its generations) until its
// sink's last event.
class RequestRun : public std::enable_shared_from_this<RequestRun> {
 public:
  RequestRun(const RequestRunner* runner, std::shared_ptr<RequestLifecycle> lifecycle,
             std::shared_ptr<RequestSink> sink);

  // Starts the sequence. A refusal known at once (draining, authentication, a full prepare queue)
  // reaches the sink before Start returns.
  void Start(RunInput input);

  // The client left (or a frontend gives up on the request): a prompt still waiting for a thread
  // is skipped, a queued admission withdrawn, the generations cancelled (the workers free their
  // blocks). The sink still gets its last event (OnRefused with CANCELLED, or OnCompleted).
  // Idempotent; from any thread.
  void Cancel();

 private:
  class ChoiceObserver;

  void Prepare(RunInput input);
  void Admit(PreparedRun prepared);
  void StartGenerations(PreparedRun prepared);
  // Starts choice `choice` (taken out of pending_).
  void StartChoice(int choice, PreparedRequest request);
  // Ends the run once every choice ended (only the first call that sees it counts).
  void CompleteIfDone();
  // Ends the run before any generation: the lifecycle is finished and let go (the request is no
  // longer in flight, as when a frontend refuses it outright), then the sink hears of it. Only
  // the first call counts.
  void Refuse(const absl::Status& status, absl::Duration retry_after = absl::ZeroDuration());
  void OnDelta(int choice, GenerationDelta delta);
  void OnChoiceEnd(int choice, const GenerationResult* result, const absl::Status& error);
  bool cancelled() const;

  const RequestRunner* const runner_;
  // Let go when the run is refused (Refuse takes it under mutex_; Cancel reads it there). Every
  // other use is on the run's own sequence, before its end.
  std::shared_ptr<RequestLifecycle> lifecycle_;
  const std::shared_ptr<RequestSink> sink_;
  const std::shared_ptr<PrepareStage::Ticket> ticket_ = std::make_shared<PrepareStage::Ticket>();
  Principal principal_;
  absl::Time client_deadline_ = absl::InfiniteFuture();
  mutable absl::Mutex mutex_;
  bool cancelled_ ABSL_GUARDED_BY(mutex_) = false;
  // Refused, or every choice ended.
  bool ended_ ABSL_GUARDED_BY(mutex_) = false;
  int choices_ ABSL_GUARDED_BY(mutex_) = 0;
  int finished_ ABSL_GUARDED_BY(mutex_) = 0;
  // The choices not started yet are pending_[next_choice_..]; each is moved out as it starts.
  std::vector<PreparedRequest> pending_ ABSL_GUARDED_BY(mutex_);
  int next_choice_ ABSL_GUARDED_BY(mutex_) = 0;
  GenerationOptions generation_options_ ABSL_GUARDED_BY(mutex_);
  bool separate_prompts_ ABSL_GUARDED_BY(mutex_) = false;
  int64_t prompt_tokens_ ABSL_GUARDED_BY(mutex_) = 0;
  // Each choice's, as its deltas came, then as its result says.
  std::vector<int64_t> completion_tokens_ ABSL_GUARDED_BY(mutex_);
  absl::Status first_error_ ABSL_GUARDED_BY(mutex_);
  // Until every choice ended: they hold observers that hold this run.
  std::vector<std::shared_ptr<Generation>> generations_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_PIPELINE_REQUEST_RUNNER_H_
