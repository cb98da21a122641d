#include "gateway/pipeline/request_lifecycle.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

namespace llmserve::gateway {

std::shared_ptr<RequestLifecycle> RequestTracker::Begin(absl::string_view api,
                                                        absl::string_view endpoint) {
  return std::make_shared<RequestLifecycle>(admission_, metrics_, request_log_, std::string(api),
                                            std::string(endpoint), active_->Enter(),
                                            CounterOf(api)->Enter());
}

std::shared_ptr<InFlightCount> RequestTracker::CounterOf(absl::string_view api) {
  absl::MutexLock lock(&api_mutex_);
  std::shared_ptr<InFlightCount>& counter = active_by_api_[api];
  if (counter == nullptr) counter = InFlightCount::Create();
  return counter;
}

int RequestTracker::active(absl::string_view api) const {
  absl::MutexLock lock(&api_mutex_);
  const auto it = active_by_api_.find(api);
  return it == active_by_api_.end() ? 0 : it->second->count();
}

absl::Status RequestTracker::CheckAccepting() const {
  if (!draining_) return absl::OkStatus();
  return absl::UnavailableError("the gateway is draining (shutting down); retry elsewhere");
}

RequestLifecycle::RequestLifecycle(const RequestAdmission* admission, GatewayMetrics* metrics,
                                   RequestLog* request_log, std::string api, std::string endpoint,
                                   InFlightCount::Guard active, InFlightCount::Guard active_in_api)
    : admission_(admission),
      metrics_(metrics),
      request_log_(request_log),
      api_(std::move(api)),
      endpoint_(std::move(endpoint)),
      active_(std::move(active)),
      active_in_api_(std::move(active_in_api)) {}

RequestLifecycle::~RequestLifecycle() { Finish(absl::StatusCode::kCancelled); }

void RequestLifecycle::set_model(absl::string_view model) {
  absl::MutexLock lock(&mutex_);
  model_ = std::string(model);
}

void RequestLifecycle::set_request_id(absl::string_view request_id) {
  absl::MutexLock lock(&mutex_);
  request_id_ = std::string(request_id);
}

void RequestLifecycle::set_principal(const Principal& principal) {
  absl::MutexLock lock(&mutex_);
  principal_ = principal;
}

void RequestLifecycle::AddResult(int choice, const GenerationResult& result) {
  if (request_log_ == nullptr) return;
  absl::MutexLock lock(&mutex_);
  if (finished_) return;
  results_.push_back({.choice = choice, .result = result});
  // The record needs none of the calls' arguments.
  results_.back().result.tool_calls.clear();
}

void RequestLifecycle::Admit(const Principal& principal, int64_t reserved_tokens,
                             AdmitCallback done) {
  {
    absl::MutexLock lock(&mutex_);
    reserved_tokens_ = reserved_tokens;
    principal_ = principal;
  }
  std::shared_ptr<RequestLifecycle> self = shared_from_this();
  const ConcurrencyLimiter::WaitId wait = admission_->Admit(
      principal, reserved_tokens,
      [self, done = std::move(done)](absl::StatusOr<RequestAdmission::Admitted> admitted,
                                     absl::Duration retry_after) mutable {
        if (!admitted.ok()) return std::move(done)(admitted.status(), retry_after);
        bool finished = false;
        {
          absl::MutexLock lock(&self->mutex_);
          self->wait_ = 0;
          finished = self->finished_;
          if (!finished) self->admitted_ = *std::move(admitted);
        }
        // Ended while it waited (its client left and the cancel lost the race to the slot): the
        // slot goes straight back (with `admitted`, here) and nothing is started.
        if (finished) {
          return std::move(done)(
              absl::CancelledError("the request ended while it waited for a slot"),
              absl::ZeroDuration());
        }
        std::move(done)(absl::OkStatus(), absl::ZeroDuration());
      });
  absl::MutexLock lock(&mutex_);
  // 0 when `done` already ran; a wait that already ended cannot be cancelled either way.
  if (!admitted_.has_value() && !finished_) wait_ = wait;
}

bool RequestLifecycle::CancelAdmission() {
  ConcurrencyLimiter::WaitId wait = 0;
  {
    absl::MutexLock lock(&mutex_);
    std::swap(wait, wait_);
  }
  return wait != 0 && admission_->CancelWait(wait);
}

void RequestLifecycle::Finish(const absl::Status& status, int64_t completion_tokens) {
  std::optional<RequestAdmission::Admitted> admitted;
  std::string model;
  int64_t reserved = 0;
  std::optional<RequestRecord> record;
  const absl::Time end = absl::Now();
  {
    absl::MutexLock lock(&mutex_);
    if (finished_) return;
    finished_ = true;
    std::swap(admitted, admitted_);
    model = model_;
    reserved = reserved_tokens_;
    if (request_log_ != nullptr) record = MakeRecord(status, end);
  }
  if (metrics_ != nullptr) {
    metrics_->OnRequestDone(api_, model, status.code(), absl::ToDoubleSeconds(end - arrival_));
  }
  if (record.has_value()) request_log_->Append(*std::move(record));
  if (admitted.has_value()) {
    admission_->ChargeTokens(admitted->principal, completion_tokens - reserved);
  }
  // `admitted` goes out of scope here: its permit frees the slot.
}

namespace {

// "stop", "length", "tool_calls", ... as the OpenAI API names them.
std::string FinishReasonText(::llmserve::v1::FinishReason reason) {
  absl::string_view name = ::llmserve::v1::FinishReason_Name(reason);
  absl::ConsumePrefix(&name, "FINISH_REASON_");
  return absl::AsciiStrToLower(name);
}

}  // namespace

RequestRecord RequestLifecycle::MakeRecord(const absl::Status& status, absl::Time end) {
  RequestRecord record;
  record.time = arrival_;
  record.request_id = request_id_;
  if (principal_.has_value()) {
    record.principal = principal_->name;
    record.principal_kind = std::string(PrincipalKindName(principal_->kind));
  }
  record.model = model_;
  record.api = api_;
  record.endpoint = endpoint_;
  record.status = absl::StatusCodeToString(status.code());
  if (!status.ok()) record.error = std::string(status.message());
  std::sort(results_.begin(), results_.end(),
            [](const ChoiceResult& a, const ChoiceResult& b) { return a.choice < b.choice; });
  std::vector<std::string> reasons;
  std::vector<std::string> workers;
  for (const ChoiceResult& choice : results_) {
    const GenerationResult& result = choice.result;
    reasons.push_back(FinishReasonText(result.finish_reason));
    // One prompt, whatever the number of choices.
    record.prompt_tokens = std::max<int64_t>(record.prompt_tokens, result.usage.prompt_tokens());
    record.cached_prompt_tokens =
        std::max<int64_t>(record.cached_prompt_tokens, result.usage.cached_prompt_tokens());
    record.completion_tokens += result.usage.completion_tokens();
    record.reasoning_tokens += result.usage.reasoning_tokens();
    const double ttft = result.timing.time_to_first_token_s();
    if (result.usage.completion_tokens() > 0 && ttft > 0 &&
        (!record.time_to_first_token_s.has_value() || ttft < *record.time_to_first_token_s)) {
      record.time_to_first_token_s = ttft;
    }
    if (!result.worker.empty() &&
        std::find(workers.begin(), workers.end(), result.worker) == workers.end()) {
      workers.push_back(result.worker);
    }
  }
  record.choices = static_cast<int64_t>(results_.size());
  record.finish_reasons = absl::StrJoin(reasons, ",");
  record.worker = absl::StrJoin(workers, ",");
  record.duration_s = absl::ToDoubleSeconds(end - arrival_);
  results_.clear();
  return record;
}

}  // namespace llmserve::gateway
