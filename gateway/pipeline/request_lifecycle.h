// One generation request's lifecycle in the gateway, whichever API it came through (gRPC
// Generate and GenerateStream, OpenAI completions and chat completions), and the one place that
// knows every request in flight.
//
// A RequestLifecycle counts as in flight from arrival until it is destroyed (the drain waits for
// it); it admits the request against the rate and concurrency limits with its token reservation;
// and it ends exactly once, in Finish: the request metric (api, model, code, duration), the token
// charge (the tokens used against the reservation) and the concurrency permit's release happen
// there, so that no frontend can count a request twice or forget one. A lifecycle destroyed
// without Finish (its client left) ends as CANCELLED. With a request log, Finish also writes the
// request's record (gateway/request_log/): what the frontends told the lifecycle along the way
// (request id, principal, model, each choice's result) and how it ended. With a tracer, the
// lifecycle is the request's server span (OpenTelemetry GenAI conventions): it starts at arrival
// as the child of the caller's traceparent, if any, has children for admission (and the queue
// wait) and for each worker attempt (generation.h), and ends in Finish with the usage, finish
// reasons and status.
//
// RequestTracker owns what both frontends share: whether new requests are accepted (drain), how
// many are in flight, and how many generations are still alive (they may outlive their request
// while a cancelled worker call unwinds).
//
// Thread-safe.

#ifndef LLMSERVE_GATEWAY_PIPELINE_REQUEST_LIFECYCLE_H_
#define LLMSERVE_GATEWAY_PIPELINE_REQUEST_LIFECYCLE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/tracing/tracer.h"
#include "gateway/admission/request_admission.h"
#include "gateway/metrics/gateway_metrics.h"
#include "gateway/pipeline/generation.h"
#include "gateway/pipeline/in_flight_count.h"
#include "gateway/request_log/request_log.h"

namespace llmserve::gateway {

class RequestLifecycle;

class RequestTracker {
 public:
  // `metrics` and `request_log` may be null. All must outlive every lifecycle.
  RequestTracker(const RequestAdmission* admission, GatewayMetrics* metrics,
                 RequestLog* request_log = nullptr, common::tracing::Tracer* tracer = nullptr)
      : admission_(admission), metrics_(metrics), request_log_(request_log), tracer_(tracer) {}

  // A request of `api` ("grpc", "http") to `endpoint` (the gRPC method or HTTP path, for the
  // request log and the span) arriving now, in the trace of `caller` when it sent one.
  std::shared_ptr<RequestLifecycle> Begin(
      absl::string_view api, absl::string_view endpoint = "",
      const std::optional<common::tracing::TraceContext>& caller = std::nullopt);

  common::tracing::Tracer* tracer() const { return tracer_; }

  // UNAVAILABLE once draining: new requests go elsewhere.
  absl::Status CheckAccepting() const;
  void StartDrain() { draining_ = true; }
  bool draining() const { return draining_; }
  // Requests in flight on both APIs; of one API.
  int active() const { return active_->count(); }
  int active(absl::string_view api) const;
  // Waits until no request is in flight or until `deadline`; returns how many are left.
  int WaitForRequests(absl::Time deadline) const { return active_->WaitForZero(deadline); }

  // What each generation the frontends start counts itself in (GenerationOptions::in_flight).
  const std::shared_ptr<InFlightCount>& generations() const { return generations_; }
  // Waits until no generation is alive or until `deadline`; returns how many are left.
  int WaitForGenerations(absl::Time deadline) const { return generations_->WaitForZero(deadline); }

  const RequestAdmission& admission() const { return *admission_; }

 private:
  std::shared_ptr<InFlightCount> CounterOf(absl::string_view api);

  const RequestAdmission* const admission_;
  GatewayMetrics* const metrics_;
  RequestLog* const request_log_;
  common::tracing::Tracer* const tracer_;
  std::atomic<bool> draining_{false};
  const std::shared_ptr<InFlightCount> active_ = InFlightCount::Create();
  const std::shared_ptr<InFlightCount> generations_ = InFlightCount::Create();
  mutable absl::Mutex api_mutex_;
  absl::flat_hash_map<std::string, std::shared_ptr<InFlightCount>> active_by_api_
      ABSL_GUARDED_BY(api_mutex_);
};

class RequestLifecycle : public std::enable_shared_from_this<RequestLifecycle> {
 public:
  // From RequestTracker::Begin.
  RequestLifecycle(const RequestAdmission* admission, GatewayMetrics* metrics,
                   RequestLog* request_log, common::tracing::Tracer* tracer, std::string api,
                   std::string endpoint, const std::optional<common::tracing::TraceContext>& caller,
                   InFlightCount::Guard active, InFlightCount::Guard active_in_api);
  ~RequestLifecycle();
  RequestLifecycle(const RequestLifecycle&) = delete;
  RequestLifecycle& operator=(const RequestLifecycle&) = delete;

  const std::string& api() const { return api_; }
  absl::Time arrival() const { return arrival_; }
  // The model's name for the request metric, once known (as the client sent it, then resolved).
  void set_model(absl::string_view model);
  // For the request log: the id its response carries, and who sent it once authenticated (Admit
  // sets it too).
  void set_request_id(absl::string_view request_id);
  void set_principal(const Principal& principal);
  // Who sent it, once authenticated.
  std::optional<Principal> principal() const;
  // For the request log: how choice `choice` ended, when it generated (its usage, finish reason,
  // latency and worker).
  void AddResult(int choice, const GenerationResult& result);

  // Tracing. The request's server span (not recorded without a tracer or when not sampled; it
  // still carries the caller's trace on). The operation ("chat", "text_completion") names it with
  // the model: "chat tiny". The request's sampling parameters and choices become its
  // gen_ai.request.* attributes.
  const common::tracing::Span& span() const { return span_; }
  common::tracing::Tracer* tracer() const { return tracer_; }
  void set_operation(absl::string_view operation);
  void set_request_parameters(const worker::v1::GenerateRequest& request, int choices);
  // Content, kept only when asked for: with --trace_content the prompt (its chat messages or
  // text) and each choice's output text go in the span as gen_ai.input.messages and
  // gen_ai.output.messages, and with --request_log_content in the request's record as `prompt`
  // and `output` (JSON, as the GenAI conventions shape messages). The prompt's text and the
  // outputs' are each cut to a budget (kMaxTracedContentBytes for the span, the request log's
  // content_max_bytes for the record, whichever is larger while collecting). Otherwise these do
  // nothing.
  bool collects_content() const;
  void set_input_content(const ::llmserve::v1::GenerateRequest& request);
  void AppendOutputText(int choice, absl::string_view text);
  static constexpr size_t kMaxTracedContentBytes = 16 * 1024;
  // A child span of the request's (prepare, ...): the caller ends it.
  common::tracing::Span StartChildSpan(std::string name) const;

  // Admits `principal`'s request of `reserved_tokens` (prompt + every choice's max_tokens): the
  // rate limits now, then a concurrency slot, now or when one frees up. `done` runs exactly once
  // (unless CancelAdmission returns true first), on this thread or the one that frees a slot:
  // with OK, or with RESOURCE_EXHAUSTED and when to retry, or UNAVAILABLE at shutdown, or
  // CANCELLED when the request was finished while it waited (the slot then goes back at once).
  using AdmitCallback = absl::AnyInvocable<void(absl::Status, absl::Duration retry_after) &&>;
  void Admit(const Principal& principal, int64_t reserved_tokens, AdmitCallback done);
  // The client left while queued for a slot: true when `done` will never run.
  bool CancelAdmission();

  // Ends the request with `status`; when it was admitted, the tokens it used (prompt and
  // completion, as the rate limits count them) are charged against its reservation and its slot
  // is released. Only the first call counts.
  void Finish(const absl::Status& status, int64_t used_tokens = 0);
  void Finish(absl::StatusCode code, int64_t used_tokens = 0) {
    Finish(absl::Status(code, ""), used_tokens);
  }

 private:
  struct ChoiceResult {
    int choice = 0;
    GenerationResult result;
  };
  // The request log's record of the request that ended with `status`.
  RequestRecord MakeRecord(const absl::Status& status, absl::Time end)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const RequestAdmission* const admission_;
  GatewayMetrics* const metrics_;
  // Sets the span's closing attributes (under mutex_, before the results are consumed).
  void EndSpan(const absl::Status& status, const RequestRecord* record, absl::Time end)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  RequestLog* const request_log_;
  common::tracing::Tracer* const tracer_;
  const std::string api_;
  const std::string endpoint_;
  const absl::Time arrival_ = absl::Now();
  const common::tracing::Span span_;
  // The admission's span, from Admit until the slot (or the refusal) came.
  common::tracing::Span admission_span_ ABSL_GUARDED_BY(mutex_);
  const InFlightCount::Guard active_;
  const InFlightCount::Guard active_in_api_;
  mutable absl::Mutex mutex_;
  std::string model_ ABSL_GUARDED_BY(mutex_);
  // The model as the client named it (the first set_model).
  std::string requested_model_ ABSL_GUARDED_BY(mutex_);
  std::string operation_ ABSL_GUARDED_BY(mutex_);
  // With content collected only: the prompt's messages (role, text) and each choice's output.
  std::vector<std::pair<std::string, std::string>> input_messages_ ABSL_GUARDED_BY(mutex_);
  std::vector<std::string> output_texts_ ABSL_GUARDED_BY(mutex_);
  size_t content_budget() const;
  // The outputs as GenAI messages JSON within `budget` bytes of text: one per choice, at least
  // `choices` (a choice that generated no text has an empty one).
  std::string OutputJson(size_t budget, int64_t choices) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  std::string request_id_ ABSL_GUARDED_BY(mutex_);
  std::optional<Principal> principal_ ABSL_GUARDED_BY(mutex_);
  // Only with a request log or a recorded span.
  std::vector<ChoiceResult> results_ ABSL_GUARDED_BY(mutex_);
  // Set once admitted.
  std::optional<RequestAdmission::Admitted> admitted_ ABSL_GUARDED_BY(mutex_);
  int64_t reserved_tokens_ ABSL_GUARDED_BY(mutex_) = 0;
  ConcurrencyLimiter::WaitId wait_ ABSL_GUARDED_BY(mutex_) = 0;
  bool finished_ ABSL_GUARDED_BY(mutex_) = false;
};

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_PIPELINE_REQUEST_LIFECYCLE_H_
