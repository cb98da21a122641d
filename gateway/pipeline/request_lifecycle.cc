#include "gateway/pipeline/request_lifecycle.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/utf8/utf8.h"
#include "nlohmann/json.hpp"

namespace llmserve::gateway {

std::shared_ptr<RequestLifecycle> RequestTracker::Begin(
    absl::string_view api, absl::string_view endpoint,
    const std::optional<common::tracing::TraceContext>& caller) {
  return std::make_shared<RequestLifecycle>(admission_, metrics_, request_log_, tracer_,
                                            std::string(api), std::string(endpoint), caller,
                                            active_->Enter(), CounterOf(api)->Enter());
}

namespace {

common::tracing::Span ServerSpan(common::tracing::Tracer* tracer, const std::string& endpoint,
                                 const std::optional<common::tracing::TraceContext>& caller,
                                 absl::Time arrival) {
  if (tracer != nullptr) {
    return tracer->StartSpan(endpoint, common::tracing::SpanKind::kServer, caller, arrival);
  }
  // Tracing off here: the caller's context still goes on to the workers.
  return caller.has_value() ? common::tracing::Span::Unrecorded(*caller) : common::tracing::Span();
}

}  // namespace

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
                                   RequestLog* request_log, common::tracing::Tracer* tracer,
                                   std::string api, std::string endpoint,
                                   const std::optional<common::tracing::TraceContext>& caller,
                                   InFlightCount::Guard active, InFlightCount::Guard active_in_api)
    : admission_(admission),
      metrics_(metrics),
      request_log_(request_log),
      tracer_(tracer),
      api_(std::move(api)),
      endpoint_(std::move(endpoint)),
      span_(ServerSpan(tracer, endpoint_, caller, arrival_)),
      active_(std::move(active)),
      active_in_api_(std::move(active_in_api)) {}

RequestLifecycle::~RequestLifecycle() { Finish(absl::StatusCode::kCancelled); }

void RequestLifecycle::set_model(absl::string_view model) {
  absl::MutexLock lock(&mutex_);
  if (requested_model_.empty()) requested_model_ = std::string(model);
  model_ = std::string(model);
}

void RequestLifecycle::set_operation(absl::string_view operation) {
  absl::MutexLock lock(&mutex_);
  operation_ = std::string(operation);
}

void RequestLifecycle::set_request_parameters(const worker::v1::GenerateRequest& request,
                                              int choices) {
  if (!span_.recording()) return;
  span_.SetAttribute("gen_ai.request.max_tokens", int64_t{request.max_tokens()});
  const ::llmserve::v1::SamplingParams& sampling = request.sampling();
  if (sampling.has_temperature()) {
    span_.SetAttribute("gen_ai.request.temperature", double{sampling.temperature()});
  }
  if (sampling.has_top_p()) span_.SetAttribute("gen_ai.request.top_p", double{sampling.top_p()});
  if (sampling.has_top_k())
    span_.SetAttribute("gen_ai.request.top_k", static_cast<double>(sampling.top_k()));
  if (sampling.has_seed()) {
    span_.SetAttribute("gen_ai.request.seed", static_cast<int64_t>(sampling.seed()));
  }
  if (sampling.has_presence_penalty()) {
    span_.SetAttribute("gen_ai.request.presence_penalty", double{sampling.presence_penalty()});
  }
  if (sampling.has_frequency_penalty()) {
    span_.SetAttribute("gen_ai.request.frequency_penalty", double{sampling.frequency_penalty()});
  }
  if (choices != 1) span_.SetAttribute("gen_ai.request.choice.count", int64_t{choices});
}

namespace {

bool TracesContent(const common::tracing::Span& span, common::tracing::Tracer* tracer) {
  return span.recording() && tracer != nullptr && tracer->content();
}

std::string CutUtf8(absl::string_view text, size_t max_bytes) {
  return std::string(
      common::utf8::TruncateAtCharBoundary(std::string_view(text.data(), text.size()), max_bytes));
}

nlohmann::json TextMessage(absl::string_view role, absl::string_view text) {
  return {{"role", role},
          {"parts", nlohmann::json::array({{{"type", "text"}, {"content", text}}})}};
}

// The messages as GenAI JSON, their texts cut so that together they hold at most `budget` bytes.
std::string MessagesJson(const std::vector<std::pair<std::string, std::string>>& messages,
                         size_t budget) {
  nlohmann::json json = nlohmann::json::array();
  for (const auto& [role, text] : messages) {
    const std::string kept = CutUtf8(text, budget);
    budget -= kept.size();
    json.push_back(TextMessage(role, kept));
  }
  return json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

size_t RequestLifecycle::content_budget() const {
  size_t budget = 0;
  if (TracesContent(span_, tracer_)) budget = kMaxTracedContentBytes;
  if (request_log_ != nullptr) budget = std::max(budget, request_log_->content_max_bytes());
  return budget;
}

bool RequestLifecycle::collects_content() const { return content_budget() > 0; }

void RequestLifecycle::set_input_content(const ::llmserve::v1::GenerateRequest& request) {
  size_t budget = content_budget();
  if (budget == 0) return;
  std::vector<std::pair<std::string, std::string>> messages;
  auto add = [&](const std::string& role, const std::string& text) {
    messages.emplace_back(role, CutUtf8(text, budget));
    budget -= messages.back().second.size();
  };
  if (request.has_chat()) {
    for (const ::llmserve::v1::ChatMessage& message : request.chat().messages()) {
      add(message.role(), message.content());
    }
  } else if (request.has_text()) {
    add("user", request.text());
  }
  absl::MutexLock lock(&mutex_);
  input_messages_ = std::move(messages);
}

void RequestLifecycle::AppendOutputText(int choice, absl::string_view text) {
  if (text.empty() || choice < 0) return;
  const size_t budget = content_budget();
  if (budget == 0) return;
  absl::MutexLock lock(&mutex_);
  if (finished_) return;
  if (output_texts_.size() <= static_cast<size_t>(choice)) output_texts_.resize(choice + 1);
  size_t used = 0;
  for (const std::string& output : output_texts_) used += output.size();
  if (used >= budget) return;
  output_texts_[choice] += CutUtf8(text, budget - used);
}

common::tracing::Span RequestLifecycle::StartChildSpan(std::string name) const {
  if (!span_.recording()) return common::tracing::Span();
  return common::tracing::StartChildSpan(tracer_, span_, std::move(name),
                                         common::tracing::SpanKind::kInternal);
}

void RequestLifecycle::set_request_id(absl::string_view request_id) {
  absl::MutexLock lock(&mutex_);
  request_id_ = std::string(request_id);
}

void RequestLifecycle::set_principal(const Principal& principal) {
  absl::MutexLock lock(&mutex_);
  principal_ = principal;
}

std::optional<Principal> RequestLifecycle::principal() const {
  absl::MutexLock lock(&mutex_);
  return principal_;
}

void RequestLifecycle::AddResult(int choice, const GenerationResult& result) {
  if (request_log_ == nullptr && !span_.recording()) return;
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
    admission_span_ = StartChildSpan("admission");
  }
  std::shared_ptr<RequestLifecycle> self = shared_from_this();
  const ConcurrencyLimiter::WaitId wait = admission_->Admit(
      principal, reserved_tokens,
      [self, done = std::move(done)](absl::StatusOr<RequestAdmission::Admitted> admitted,
                                     absl::Duration retry_after) mutable {
        common::tracing::Span admission_span;
        {
          absl::MutexLock lock(&self->mutex_);
          std::swap(admission_span, self->admission_span_);
        }
        if (!admitted.ok()) {
          admission_span.SetError(absl::StatusCodeToString(admitted.status().code()),
                                  admitted.status().message());
        }
        admission_span.End();
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

void RequestLifecycle::Finish(const absl::Status& status, int64_t used_tokens) {
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
    if (request_log_ != nullptr || span_.recording()) record = MakeRecord(status, end);
    EndSpan(status, record.has_value() ? &*record : nullptr, end);
  }
  if (metrics_ != nullptr) {
    metrics_->OnRequestDone(api_, model, status.code(), absl::ToDoubleSeconds(end - arrival_));
  }
  if (record.has_value() && request_log_ != nullptr) request_log_->Append(*std::move(record));
  if (admitted.has_value()) {
    admission_->ChargeTokens(admitted->principal, used_tokens - reserved, admitted->admitted_at);
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

std::string RequestLifecycle::OutputJson(size_t budget, int64_t choices) const {
  std::vector<std::pair<std::string, std::string>> outputs;
  for (const std::string& text : output_texts_) outputs.emplace_back("assistant", text);
  while (static_cast<int64_t>(outputs.size()) < choices) outputs.emplace_back("assistant", "");
  return MessagesJson(outputs, budget);
}

void RequestLifecycle::EndSpan(const absl::Status& status, const RequestRecord* record,
                               absl::Time end) {
  // A request that ends while it waits for a slot ends its admission span too.
  admission_span_.End(end);
  if (!span_.recording() || record == nullptr) return;
  const std::string operation = operation_.empty() ? "generate" : operation_;
  span_.SetName(model_.empty() ? operation : absl::StrCat(operation, " ", model_));
  span_.SetAttribute("gen_ai.operation.name", operation);
  span_.SetAttribute("gen_ai.provider.name", std::string("llmserve"));
  span_.SetAttribute("llmserve.api", api_);
  span_.SetAttribute("llmserve.endpoint", endpoint_);
  if (!requested_model_.empty()) span_.SetAttribute("gen_ai.request.model", requested_model_);
  if (!record->request_id.empty()) span_.SetAttribute("gen_ai.response.id", record->request_id);
  // The API key's name or the JWT's subject, never a credential.
  if (principal_.has_value()) {
    span_.SetAttribute("user.id", principal_->name);
    span_.SetAttribute("llmserve.principal_kind", std::string(PrincipalKindName(principal_->kind)));
  }
  if (record->choices > 0) {
    span_.SetAttribute("gen_ai.response.model", model_);
    span_.SetAttribute("gen_ai.response.finish_reasons",
                       std::vector<std::string>(absl::StrSplit(record->finish_reasons, ',')));
    span_.SetAttribute("gen_ai.usage.input_tokens", record->prompt_tokens);
    span_.SetAttribute("gen_ai.usage.output_tokens", record->completion_tokens);
    span_.SetAttribute("llmserve.usage.cached_prompt_tokens", record->cached_prompt_tokens);
    if (record->reasoning_tokens > 0) {
      span_.SetAttribute("llmserve.usage.reasoning_tokens", record->reasoning_tokens);
    }
    span_.SetAttribute("llmserve.worker", record->worker);
  }
  if (record->time_to_first_token_s.has_value()) {
    span_.SetAttribute("llmserve.time_to_first_token_s", *record->time_to_first_token_s);
    span_.AddEvent("first_token", arrival_ + absl::Seconds(*record->time_to_first_token_s));
  }
  if (tracer_->content()) {
    if (!input_messages_.empty()) {
      span_.SetAttribute("gen_ai.input.messages",
                         MessagesJson(input_messages_, kMaxTracedContentBytes));
    }
    if (!output_texts_.empty() || record->choices > 0) {
      span_.SetAttribute("gen_ai.output.messages",
                         OutputJson(kMaxTracedContentBytes, record->choices));
    }
  }
  if (!status.ok()) span_.SetError(absl::StatusCodeToString(status.code()), status.message());
  span_.End(end);
}

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
  if (request_log_ != nullptr && request_log_->content_max_bytes() > 0) {
    record.prompt = MessagesJson(input_messages_, request_log_->content_max_bytes());
    record.output = OutputJson(request_log_->content_max_bytes(), record.choices);
  }
  results_.clear();
  return record;
}

}  // namespace llmserve::gateway
