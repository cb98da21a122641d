#include "gateway/pipeline/request_lifecycle.h"

#include <utility>

#include "absl/time/clock.h"

namespace llmserve::gateway {

std::shared_ptr<RequestLifecycle> RequestTracker::Begin(absl::string_view api) {
  return std::make_shared<RequestLifecycle>(admission_, metrics_, std::string(api),
                                            active_->Enter(), CounterOf(api)->Enter());
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
                                   std::string api, InFlightCount::Guard active,
                                   InFlightCount::Guard active_in_api)
    : admission_(admission),
      metrics_(metrics),
      api_(std::move(api)),
      active_(std::move(active)),
      active_in_api_(std::move(active_in_api)) {}

RequestLifecycle::~RequestLifecycle() { Finish(absl::StatusCode::kCancelled); }

void RequestLifecycle::set_model(absl::string_view model) {
  absl::MutexLock lock(&mutex_);
  model_ = std::string(model);
}

void RequestLifecycle::Admit(const Principal& principal, int64_t reserved_tokens,
                             AdmitCallback done) {
  {
    absl::MutexLock lock(&mutex_);
    reserved_tokens_ = reserved_tokens;
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

void RequestLifecycle::Finish(absl::StatusCode code, int64_t completion_tokens) {
  std::optional<RequestAdmission::Admitted> admitted;
  std::string model;
  int64_t reserved = 0;
  {
    absl::MutexLock lock(&mutex_);
    if (finished_) return;
    finished_ = true;
    std::swap(admitted, admitted_);
    model = model_;
    reserved = reserved_tokens_;
  }
  if (metrics_ != nullptr) {
    metrics_->OnRequestDone(api_, model, code, absl::ToDoubleSeconds(absl::Now() - arrival_));
  }
  if (admitted.has_value()) {
    admission_->ChargeTokens(admitted->principal, completion_tokens - reserved);
  }
  // `admitted` goes out of scope here: its permit frees the slot.
}

}  // namespace llmserve::gateway
