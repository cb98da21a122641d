#include "gateway/admission/concurrency_limiter.h"

#include <algorithm>
#include <deque>
#include <map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace llmserve::gateway {

struct ConcurrencyLimiter::Permit::State {
  State(int64_t max_in_flight, int64_t max_queued)
      : max_in_flight(max_in_flight), max_queued(max_queued) {}

  const int64_t max_in_flight;  // 0 = unlimited
  const int64_t max_queued;
  mutable absl::Mutex mutex;
  int64_t in_flight ABSL_GUARDED_BY(mutex) = 0;
  WaitId last_wait_id ABSL_GUARDED_BY(mutex) = 0;
  // Ordered by id, which increases: begin() is the oldest waiter.
  std::map<WaitId, PermitCallback> waiters ABSL_GUARDED_BY(mutex);
  bool closed ABSL_GUARDED_BY(mutex) = false;
};

namespace {

// Runs `work` now, unless this thread is already running deferred work, in which case it joins
// the queue of that outer call. A waiter's callback that drops its permit at once releases the
// slot to the next waiter; this turns that chain into a loop instead of recursion as deep as the
// wait queue.
void RunWithoutRecursion(absl::AnyInvocable<void() &&> work) {
  thread_local std::deque<absl::AnyInvocable<void()&&>>* pending = nullptr;
  if (pending != nullptr) {
    pending->push_back(std::move(work));
    return;
  }
  std::deque<absl::AnyInvocable<void() &&>> queue;
  pending = &queue;
  std::move(work)();
  while (!queue.empty()) {
    absl::AnyInvocable<void()&&> next = std::move(queue.front());
    queue.pop_front();
    std::move(next)();
  }
  pending = nullptr;
}

}  // namespace

ConcurrencyLimiter::ConcurrencyLimiter(int64_t max_in_flight, int64_t max_queued)
    : state_(std::make_shared<Permit::State>(std::max<int64_t>(0, max_in_flight),
                                             std::max<int64_t>(0, max_queued))) {}

ConcurrencyLimiter::~ConcurrencyLimiter() {
  std::map<WaitId, PermitCallback> waiters;
  {
    absl::MutexLock lock(&state_->mutex);
    state_->closed = true;
    waiters.swap(state_->waiters);
  }
  for (auto& [id, callback] : waiters) {
    std::move(callback)(absl::UnavailableError("the server is shutting down"));
  }
}

std::optional<ConcurrencyLimiter::Permit> ConcurrencyLimiter::TryAcquire() {
  absl::MutexLock lock(&state_->mutex);
  if (state_->closed || !state_->waiters.empty()) return std::nullopt;
  if (state_->max_in_flight > 0 && state_->in_flight >= state_->max_in_flight) return std::nullopt;
  ++state_->in_flight;
  return Permit(state_);
}

ConcurrencyLimiter::WaitId ConcurrencyLimiter::Acquire(PermitCallback on_permit) {
  std::optional<Permit> permit = TryAcquire();
  if (permit.has_value()) {
    std::move(on_permit)(*std::move(permit));
    return 0;
  }
  absl::Status refusal;
  {
    absl::MutexLock lock(&state_->mutex);
    // The slot may have freed since TryAcquire(); with nobody queued it is ours.
    if (state_->waiters.empty() &&
        (state_->max_in_flight == 0 || state_->in_flight < state_->max_in_flight)) {
      ++state_->in_flight;
      permit.emplace(Permit(state_));
    } else if (static_cast<int64_t>(state_->waiters.size()) < state_->max_queued) {
      const WaitId id = ++state_->last_wait_id;
      state_->waiters.emplace(id, std::move(on_permit));
      return id;
    } else {
      refusal = absl::ResourceExhaustedError(
          absl::StrCat("server is at its limit of ", state_->max_in_flight,
                       " requests in flight and ", state_->max_queued, " waiting; retry later"));
    }
  }
  if (permit.has_value()) {
    std::move(on_permit)(*std::move(permit));
  } else {
    std::move(on_permit)(std::move(refusal));
  }
  return 0;
}

bool ConcurrencyLimiter::CancelWait(WaitId id) {
  if (id == 0) return false;
  absl::MutexLock lock(&state_->mutex);
  return state_->waiters.erase(id) > 0;
}

int64_t ConcurrencyLimiter::in_flight() const {
  absl::MutexLock lock(&state_->mutex);
  return state_->in_flight;
}

int64_t ConcurrencyLimiter::queued() const {
  absl::MutexLock lock(&state_->mutex);
  return static_cast<int64_t>(state_->waiters.size());
}

ConcurrencyLimiter::Permit& ConcurrencyLimiter::Permit::operator=(Permit&& other) noexcept {
  if (this != &other) {
    Release();
    state_ = std::move(other.state_);
  }
  return *this;
}

ConcurrencyLimiter::Permit::~Permit() { Release(); }

void ConcurrencyLimiter::Permit::Release() {
  if (state_ == nullptr) return;
  std::shared_ptr<State> state = std::move(state_);
  state_ = nullptr;
  PermitCallback next;
  {
    absl::MutexLock lock(&state->mutex);
    if (state->waiters.empty()) {
      --state->in_flight;
      return;
    }
    // The slot passes to the oldest waiter: in_flight stays the same.
    auto oldest = state->waiters.begin();
    next = std::move(oldest->second);
    state->waiters.erase(oldest);
  }
  RunWithoutRecursion([state = std::move(state), next = std::move(next)]() mutable {
    std::move(next)(Permit(std::move(state)));
  });
}

}  // namespace llmserve::gateway
