#include "gateway/pipeline/request_runner.h"

#include <algorithm>
#include <utility>

namespace llmserve::gateway {

// A choice's events, forwarded to its run.
class RequestRun::ChoiceObserver final : public GenerationObserver {
 public:
  ChoiceObserver(std::shared_ptr<RequestRun> run, int choice)
      : run_(std::move(run)), choice_(choice) {}
  void OnDelta(GenerationDelta delta) override { run_->OnDelta(choice_, std::move(delta)); }
  void OnFinish(const GenerationResult& result) override {
    run_->OnChoiceEnd(choice_, &result, absl::OkStatus());
  }
  void OnError(const absl::Status& status) override { run_->OnChoiceEnd(choice_, nullptr, status); }

 private:
  const std::shared_ptr<RequestRun> run_;
  const int choice_;
};

int64_t PromptTokens(const PreparedRun& run) {
  if (run.choices.empty()) return 0;
  if (!run.separate_prompts) return run.choices[0].worker_request.prompt_token_ids_size();
  int64_t tokens = 0;
  for (const PreparedRequest& choice : run.choices) {
    tokens += choice.worker_request.prompt_token_ids_size();
  }
  return tokens;
}

std::shared_ptr<RequestRun> RequestRunner::NewRun(std::shared_ptr<RequestLifecycle> lifecycle,
                                                  std::shared_ptr<RequestSink> sink) const {
  return std::make_shared<RequestRun>(this, std::move(lifecycle), std::move(sink));
}

RequestRunner::Refusal RequestRunner::RunPromptWork(
    size_t prompt_bytes, std::shared_ptr<const PrepareStage::Ticket> ticket,
    PrepareStage::Work work) const {
  const absl::Status submitted = prepare_->Run(prompt_bytes, std::move(ticket), std::move(work));
  if (!absl::IsResourceExhausted(submitted)) return {submitted, absl::ZeroDuration()};
  // A full queue is a busy gateway: retry soon (429 / RESOURCE_EXHAUSTED with retry-after).
  if (options_.metrics != nullptr) options_.metrics->OnRateLimited();
  return {submitted, absl::Seconds(1)};
}

absl::StatusOr<std::vector<ModelCatalog::ModelSummary>> RequestRunner::ListModels(
    absl::string_view authorization) const {
  absl::StatusOr<Principal> principal = tracker_->admission().Authenticate(authorization);
  if (!principal.ok()) return principal.status();
  std::vector<ModelCatalog::ModelSummary> models = catalog_->List();
  models.erase(std::remove_if(models.begin(), models.end(),
                              [&](const ModelCatalog::ModelSummary& summary) {
                                return summary.ready_workers == 0 ||
                                       !principal->MayUseModel(summary.name);
                              }),
               models.end());
  return models;
}

absl::StatusOr<std::shared_ptr<const ServedModel>> RequestRunner::ResolveModel(
    const RequestLifecycle& lifecycle, absl::string_view name) const {
  const std::optional<Principal> principal = lifecycle.principal();
  ModelCatalog::ModelFilter may_use;
  if (principal.has_value()) {
    may_use = [&principal](absl::string_view model) { return principal->MayUseModel(model); };
  }
  absl::StatusOr<std::shared_ptr<const ServedModel>> model = catalog_->Resolve(name, may_use);
  if (!model.ok() || !principal.has_value()) return model;
  if (absl::Status allowed = CheckModelAccess(*principal, (*model)->name()); !allowed.ok()) {
    return allowed;
  }
  return model;
}

RequestRun::RequestRun(const RequestRunner* runner, std::shared_ptr<RequestLifecycle> lifecycle,
                       std::shared_ptr<RequestSink> sink)
    : runner_(runner), lifecycle_(std::move(lifecycle)), sink_(std::move(sink)) {}

bool RequestRun::cancelled() const {
  absl::MutexLock lock(&mutex_);
  return cancelled_;
}

void RequestRun::Start(RunInput input) {
  client_deadline_ = input.client_deadline;
  if (absl::Status accepting = runner_->tracker_->CheckAccepting(); !accepting.ok()) {
    return Refuse(accepting);
  }
  absl::StatusOr<Principal> principal =
      runner_->tracker_->admission().Authenticate(input.authorization);
  if (!principal.ok()) return Refuse(principal.status());
  principal_ = *std::move(principal);
  lifecycle_->set_principal(principal_);
  Prepare(std::move(input));
}

void RequestRun::Prepare(RunInput input) {
  // Everything else (a JSON body of up to --max_body_bytes, the template, the tokenizer) runs on
  // the prepare stage's threads, not on the I/O or gRPC thread that read the request.
  common::tracing::Span span = lifecycle_->StartChildSpan("prepare");
  const size_t prompt_bytes = input.prompt_bytes;
  const RequestRunner::Refusal refused = runner_->RunPromptWork(
      prompt_bytes, ticket_,
      [run = shared_from_this(), prepare = std::move(input.prepare),
       span](absl::Status ready) mutable {
        absl::StatusOr<PreparedRun> prepared = ready.ok()
                                                   ? std::move(prepare)(*run->lifecycle_)
                                                   : absl::StatusOr<PreparedRun>(std::move(ready));
        // A client that left while its prompt was being prepared needs no generation.
        if (prepared.ok() && run->cancelled()) {
          prepared = absl::CancelledError("the client left while the prompt was prepared");
        }
        // Frontends resolve through ResolveModel; this holds whatever they did.
        if (prepared.ok()) {
          if (absl::Status allowed = CheckModelAccess(run->principal_, prepared->model->name());
              !allowed.ok()) {
            prepared = std::move(allowed);
          }
        }
        if (!prepared.ok()) {
          span.SetError(absl::StatusCodeToString(prepared.status().code()),
                        prepared.status().message());
          span.End();
          return run->Refuse(prepared.status());
        }
        span.SetAttribute("gen_ai.usage.input_tokens", PromptTokens(*prepared));
        span.End();
        run->Admit(*std::move(prepared));
      });
  if (!refused.status.ok()) {
    span.SetError(absl::StatusCodeToString(refused.status.code()), refused.status.message());
    span.End();
    Refuse(refused.status, refused.retry_after);
  }
}

void RequestRun::Admit(PreparedRun prepared) {
  const worker::v1::GenerateRequest& first = prepared.choices[0].worker_request;
  const int n = static_cast<int>(prepared.choices.size());
  lifecycle_->set_request_parameters(first, n);
  // The rate limits reserve the prompt and every choice's whole budget, and charge what was used.
  const int64_t reserved =
      PromptTokens(prepared) + int64_t{n} * static_cast<int64_t>(first.max_tokens());
  // Its own reference: a refusal inside Admit (the callback may run at once) lets go of lifecycle_.
  const std::shared_ptr<RequestLifecycle> lifecycle = lifecycle_;
  lifecycle->Admit(principal_, reserved,
                   [run = shared_from_this(), prepared = std::move(prepared)](
                       absl::Status admitted, absl::Duration retry_after) mutable {
                     if (!admitted.ok()) return run->Refuse(admitted, retry_after);
                     if (run->cancelled()) {
                       return run->Refuse(absl::CancelledError("the client left while queued"));
                     }
                     run->StartGenerations(std::move(prepared));
                   });
}

void RequestRun::StartGenerations(PreparedRun prepared) {
  const RequestOptions& options = runner_->options_;
  GenerationOptions generation;
  generation.deadline = std::min(client_deadline_, lifecycle_->arrival() + options.request_timeout);
  generation.max_attempts = options.max_attempts;
  generation.metrics = options.metrics;
  generation.query_of_death = options.query_of_death_guard;
  generation.api = lifecycle_->api();
  generation.in_flight = runner_->tracker_->generations();
  generation.tracer = lifecycle_->tracer();
  generation.parent_span = lifecycle_->span();
  generation.clock = options.clock;
  generation.lora_adapters = options.lora_adapters;
  if (options.isolate_cache_per_principal) generation.cache_salt = principal_.name;
  const int n = static_cast<int>(prepared.choices.size());
  const int first = prepared.max_concurrent > 0 ? std::min(n, prepared.max_concurrent) : n;
  sink_->OnStarted(prepared);
  std::vector<PreparedRequest> starting;
  {
    absl::MutexLock lock(&mutex_);
    choices_ = n;
    completion_tokens_.assign(n, 0);
    prompt_tokens_ = PromptTokens(prepared);
    generation_options_ = std::move(generation);
    separate_prompts_ = prepared.separate_prompts;
    pending_ = std::move(prepared.choices);
    next_choice_ = first;
    // Taken out now: a choice that ends at once lets go of those not started.
    for (int i = 0; i < first; ++i) starting.push_back(std::move(pending_[i]));
  }
  for (int i = 0; i < first; ++i) StartChoice(i, std::move(starting[i]));
  // The client may have left while the generations started: Cancel copied only those before.
  if (cancelled()) Cancel();
}

void RequestRun::StartChoice(int choice, PreparedRequest request) {
  GenerationOptions options;
  absl::Status failed;
  {
    absl::MutexLock lock(&mutex_);
    options = generation_options_;
    // Separate prompts fail as a whole: once one failed, one not started yet never starts.
    if (separate_prompts_) failed = first_error_;
  }
  if (!failed.ok()) return OnChoiceEnd(choice, nullptr, failed);
  std::shared_ptr<Generation> started =
      Generation::Start(runner_->workers_, std::move(request), options,
                        std::make_shared<ChoiceObserver>(shared_from_this(), choice));
  bool stop = false;
  {
    absl::MutexLock lock(&mutex_);
    // Every choice may already have ended (at once, with no worker to route to, or faster than
    // this loop): keeping its generation then would hold this run forever through the cycle that
    // the end breaks, and a drain would wait for a request that is over.
    if (!ended_) generations_.push_back(started);
    // A cancel, or (separate prompts) another choice's failure, that came while this one started
    // did not see it.
    stop = cancelled_ || (separate_prompts_ && !first_error_.ok());
  }
  if (stop) started->Cancel();
}

void RequestRun::Cancel() {
  std::vector<std::shared_ptr<Generation>> generations;
  std::shared_ptr<RequestLifecycle> lifecycle;
  {
    absl::MutexLock lock(&mutex_);
    cancelled_ = true;
    generations = generations_;
    lifecycle = lifecycle_;
  }
  // A prompt still waiting for a thread is skipped; its work then sees the cancel.
  ticket_->Cancel();
  // Queued for a concurrency slot: nothing else will end the run.
  if (lifecycle != nullptr && lifecycle->CancelAdmission()) {
    Refuse(absl::CancelledError("the client left while queued"));
  }
  for (const std::shared_ptr<Generation>& generation : generations) generation->Cancel();
}

void RequestRun::Refuse(const absl::Status& status, absl::Duration retry_after) {
  std::shared_ptr<RequestLifecycle> lifecycle;
  {
    absl::MutexLock lock(&mutex_);
    if (ended_) return;
    ended_ = true;
    lifecycle = std::move(lifecycle_);
  }
  lifecycle->Finish(status);
  lifecycle.reset();
  sink_->OnRefused(status, retry_after);
}

void RequestRun::OnDelta(int choice, GenerationDelta delta) {
  lifecycle_->AppendOutputText(choice, delta.text);
  {
    absl::MutexLock lock(&mutex_);
    completion_tokens_[choice] += static_cast<int64_t>(delta.tokens.size());
  }
  sink_->OnDelta(choice, std::move(delta));
}

void RequestRun::OnChoiceEnd(int choice, const GenerationResult* result,
                             const absl::Status& error) {
  if (result != nullptr) lifecycle_->AddResult(choice, *result);
  sink_->OnChoiceEnd(choice, result, error);
  int next = -1;
  PreparedRequest next_request;
  // Separate prompts (embeddings) fail as a whole: the others still running are cancelled.
  std::vector<std::shared_ptr<Generation>> to_cancel;
  int skipped_from = 0, skipped_to = 0;
  absl::Status skip;
  {
    absl::MutexLock lock(&mutex_);
    if (result != nullptr) {
      completion_tokens_[choice] = result->usage.completion_tokens();
    } else if (first_error_.ok()) {
      first_error_ = error;
      if (separate_prompts_) to_cancel = generations_;
    }
    ++finished_;
    if (next_choice_ < choices_) {
      if (!cancelled_ && first_error_.ok()) {
        next = next_choice_++;
        next_request = std::move(pending_[next]);
      } else {
        // Not started, and never will be: they end with the reason, before the run's end (they
        // are counted as finished only after their sink events).
        skip = cancelled_ ? absl::CancelledError("the client left") : first_error_;
        skipped_from = next_choice_;
        skipped_to = next_choice_ = choices_;
        pending_.clear();
      }
    }
  }
  for (const std::shared_ptr<Generation>& generation : to_cancel) generation->Cancel();
  for (int i = skipped_from; i < skipped_to; ++i) sink_->OnChoiceEnd(i, nullptr, skip);
  if (skipped_to > skipped_from) {
    absl::MutexLock lock(&mutex_);
    finished_ += skipped_to - skipped_from;
  }
  if (next >= 0) StartChoice(next, std::move(next_request));
  CompleteIfDone();
}

void RequestRun::CompleteIfDone() {
  absl::Status first_error;
  int64_t used_tokens = 0;
  {
    absl::MutexLock lock(&mutex_);
    if (ended_ || finished_ < choices_) return;
    ended_ = true;
    // The generations hold observers that hold this run: let go of them to break the cycle.
    generations_.clear();
    first_error = first_error_;
    // The rate limits count prompt and completion (a failed choice's tokens as far as they
    // came); a request that generated nothing (it failed before any worker ran it) gives its
    // whole reservation back.
    int64_t completion_tokens = 0;
    for (int64_t tokens : completion_tokens_) completion_tokens += tokens;
    if (completion_tokens > 0 || first_error_.ok()) {
      used_tokens = prompt_tokens_ + completion_tokens;
    }
  }
  lifecycle_->Finish(first_error, used_tokens);
  sink_->OnCompleted(first_error);
}

}  // namespace llmserve::gateway
