// The gateway's seam to its workers, what LevelDB's Env is to files: everything the request
// pipeline needs of the fleet (which worker takes a request, a call to it, what the workers
// serve) behind one interface. WorkerPool (gRPC, DNS, load streams) is the implementation the
// gateway runs; tests/testing/fake_worker_client.h is an in-memory one, so that routing retries,
// cancellation and drain are tested without starting workers.
//
// Thread-safe: every method may be called from any thread.

#ifndef LLMSERVE_GATEWAY_ROUTER_WORKER_CLIENT_H_
#define LLMSERVE_GATEWAY_ROUTER_WORKER_CLIENT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gateway/router/prompt_routing_hashes.h"
#include "gateway/router/routing_policy.h"
#include "llmserve/worker/v1/worker.pb.h"

namespace llmserve::gateway {

// A worker chosen for one request.
struct RoutedWorker {
  std::string address;
  std::shared_ptr<const worker::v1::ModelInfo> model_info;
  RoutingDecision decision;
  // The implementation's handle on the worker (WorkerPool: its gRPC channel), passed back to
  // NewCall; opaque to everyone else.
  std::shared_ptr<void> connection;
};

// What the client knows of one worker (for /readyz, ListModels, metrics and tests).
struct WorkerStatus {
  std::string address;
  bool ready = false;
  bool draining = false;
  // Set once GetModelInfo answered.
  std::shared_ptr<const worker::v1::ModelInfo> model_info;
  worker::v1::LoadReport last_report;
  // The LoRA adapters it has loaded (its latest load report's list, else its model info's),
  // sorted.
  std::vector<std::string> lora_adapters;
  size_t cached_blocks = 0;
  std::string last_error;
};

// How a Generate call is made.
struct WorkerCallOptions {
  absl::Time deadline = absl::InfiniteFuture();
  // W3C trace context for the worker (gRPC metadata `traceparent`, `tracestate`); empty: none.
  std::string traceparent;
  std::string tracestate;
};

// One Generate call's events. Called one at a time, in order, on the implementation's threads;
// must not block.
class WorkerCallObserver {
 public:
  virtual ~WorkerCallObserver() = default;
  virtual void OnMessage(const worker::v1::GenerateResponse& message) = 0;
  // Exactly once, last: OK when the worker ended the stream, else why the call failed (CANCELLED
  // after Cancel; UNAVAILABLE when the client gave up on a silent worker).
  virtual void OnDone(const absl::Status& status) = 0;
};

// A Generate call to one worker. Made by NewCall, owned by its caller until Start; from Start on
// it owns itself and is destroyed after the observer's OnDone returned, so its owner may call
// Cancel until it sees OnDone (and not after).
class WorkerCall {
 public:
  virtual ~WorkerCall() = default;
  virtual void Start() = 0;
  // Ends the call (the worker frees the request's KV blocks); OnDone follows with CANCELLED
  // unless the call had ended already. Never calls the observer on the caller's thread.
  virtual void Cancel() = 0;
};

class WorkerClient {
 public:
  virtual ~WorkerClient() = default;

  // A ready, non-draining worker serving `model` (empty: any model) for `prompt`, skipping the
  // `excluded` addresses (earlier failed attempts); when the prompt runs a LoRA adapter
  // (PromptRoutingHashes::lora_adapter), only a worker that has it loaded. NOT_FOUND when no
  // worker ever served the model; UNAVAILABLE when none is ready now (or none has the adapter).
  // Never waits on I/O.
  virtual absl::StatusOr<RoutedWorker> Route(absl::string_view model, PromptRoutingHashes& prompt,
                                             const absl::flat_hash_set<std::string>& excluded) = 0;

  // A call to `address` failed before its first token: mark it down until probes bring it back.
  virtual void ReportFailure(const std::string& address, const std::string& error) = 0;

  // A Generate call of `request` to `worker` (from Route), not started yet.
  virtual std::unique_ptr<WorkerCall> NewCall(const RoutedWorker& worker,
                                              worker::v1::GenerateRequest request,
                                              const WorkerCallOptions& options,
                                              std::shared_ptr<WorkerCallObserver> observer) = 0;

  // Asks the worker at `address` to load a LoRA adapter (Worker.LoadLoraAdapter), or to unload
  // one. `done` runs once with the worker's answer (or UNAVAILABLE / DEADLINE_EXCEEDED), on the
  // implementation's threads, or at once on the caller's for an unknown address: the caller must
  // hold no lock `done` takes. Once a change succeeded, Route and Workers() see it (before the
  // worker's next load report confirms it).
  virtual void LoadLoraAdapter(const std::string& address,
                               const worker::v1::LoadLoraAdapterRequest& request,
                               absl::Time deadline,
                               absl::AnyInvocable<void(absl::Status) &&> done) = 0;
  virtual void UnloadLoraAdapter(const std::string& address, const std::string& lora_name,
                                 absl::Time deadline,
                                 absl::AnyInvocable<void(absl::Status) &&> done) = 0;

  // A call to `address` was refused because the worker does not have LoRA adapter `lora_name`
  // (it lost it since its last load report said it had it): Route stops sending the adapter's
  // requests there until a load report or a load says it has it again.
  virtual void OnLoraAdapterMissing(const std::string& address, const std::string& lora_name) = 0;

  // Every worker known now, sorted by address.
  virtual std::vector<WorkerStatus> Workers() const = 0;
  // Every model a worker has described since the client started (also after its workers left).
  virtual std::vector<std::string> KnownModels() const = 0;
  // Whether some worker is ready and not draining.
  virtual bool AnyReady() const = 0;
  virtual RoutingPolicy routing_policy() const = 0;
};

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_ROUTER_WORKER_CLIENT_H_
