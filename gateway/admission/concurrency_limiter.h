// A global cap on in-flight requests, with a bounded queue of waiters, that never blocks a thread:
// the gateway's request handlers are asynchronous, so a waiter is a callback, not a sleeping
// thread.
//
// A slot is held by a Permit (move-only; destroying it frees the slot). When a permit is released
// and someone is queued, the slot passes straight to the oldest waiter, whose callback runs on
// the releasing thread; so callbacks should only hand the permit to the request's own executor.
// While anyone waits, TryAcquire() does not jump the queue.
//
// Thread-safe. Permits and pending waits may outlive the limiter: they share its state, and the
// limiter's destructor fails every queued waiter with UNAVAILABLE (the gateway is shutting down).

#ifndef LLMSERVE_GATEWAY_ADMISSION_CONCURRENCY_LIMITER_H_
#define LLMSERVE_GATEWAY_ADMISSION_CONCURRENCY_LIMITER_H_

#include <cstdint>
#include <memory>
#include <optional>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"

namespace llmserve::gateway {

class ConcurrencyLimiter {
 public:
  class Permit;
  using PermitCallback = absl::AnyInvocable<void(absl::StatusOr<Permit>) &&>;
  // Names a queued wait for CancelWait(). 0 means "not queued".
  using WaitId = uint64_t;

  // `max_in_flight` 0 = unlimited; `max_queued` 0 = no waiting (refuse when full). Negative
  // values count as 0.
  ConcurrencyLimiter(int64_t max_in_flight, int64_t max_queued);
  ~ConcurrencyLimiter();
  ConcurrencyLimiter(const ConcurrencyLimiter&) = delete;
  ConcurrencyLimiter& operator=(const ConcurrencyLimiter&) = delete;

  // A permit when a slot is free and no one is queued; nullopt otherwise. Never queues.
  std::optional<Permit> TryAcquire();

  // Calls `on_permit` exactly once (unless CancelWait(id) returns true first):
  //  - now, with a Permit, when a slot is free and no one is queued;
  //  - now, with RESOURCE_EXHAUSTED, when every slot is taken and the queue is full;
  //  - later, on the thread that releases a permit, with a Permit, when this waiter is the oldest;
  //  - with UNAVAILABLE when the limiter is destroyed first.
  // Returns the WaitId of a queued wait, or 0 when the callback has already run.
  WaitId Acquire(PermitCallback on_permit);

  // Removes a queued wait (a client that went away). True when it was still queued: its callback
  // will never run. False when the callback has run or is about to (the permit it gets must then be
  // dropped as usual).
  bool CancelWait(WaitId id);

  int64_t in_flight() const;
  int64_t queued() const;

  class Permit {
   public:
    Permit(Permit&& other) noexcept = default;
    Permit& operator=(Permit&& other) noexcept;
    Permit(const Permit&) = delete;
    Permit& operator=(const Permit&) = delete;
    ~Permit();

   private:
    friend class ConcurrencyLimiter;
    struct State;
    explicit Permit(std::shared_ptr<State> state) : state_(std::move(state)) {}
    void Release();
    std::shared_ptr<State> state_;
  };

 private:
  std::shared_ptr<Permit::State> state_;
};

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_ADMISSION_CONCURRENCY_LIMITER_H_
