// The LoRA adapters this gateway loads on workers: the admin API's loads and unloads
// (/v1/load_lora_adapter, /v1/unload_lora_adapter) go to every ready worker of the base model, and
// each adapter loaded that way is remembered (name, directory, base model), so that when a
// request needs it and no ready worker has it (the workers that had it restarted, or failed this
// request) the least loaded worker that accepts runtime loads loads it on demand, bounded by
// load_timeout. Adapters that workers load at start (--lora_modules) need none of this: the
// workers report them.
//
// The manager never waits: every answer comes through a callback, on a worker client thread or
// (when nothing needs loading) at once on the caller's.
//
// Thread-safe.

#ifndef LLMSERVE_GATEWAY_PIPELINE_LORA_ADAPTER_MANAGER_H_
#define LLMSERVE_GATEWAY_PIPELINE_LORA_ADAPTER_MANAGER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gateway/router/worker_client.h"

namespace llmserve::gateway {

// An adapter the gateway knows how to load.
struct LoraAdapterSource {
  std::string name;
  // Its directory on the workers' file system.
  std::string path;
  std::string base_model;
};

// What a load or unload did on each worker.
struct LoraAdapterChangeResult {
  // The base model (loads).
  std::string base_model;
  // The workers that changed, sorted.
  std::vector<std::string> changed;
  // "address: why" of each worker that refused or failed.
  std::vector<std::string> failed;
};

class LoraAdapterManager {
 public:
  // `workers` must outlive the manager's callbacks (the WorkerPool waits for its calls when it is
  // destroyed, and the calls hold what they need of the manager).
  LoraAdapterManager(WorkerClient* workers, absl::Duration load_timeout);
  ~LoraAdapterManager();
  LoraAdapterManager(const LoraAdapterManager&) = delete;
  LoraAdapterManager& operator=(const LoraAdapterManager&) = delete;

  using ChangeDone = absl::AnyInvocable<void(absl::StatusOr<LoraAdapterChangeResult>) &&>;

  // Loads `source` on every ready worker of its base model (empty: the only model whose workers
  // accept runtime LoRA loads) that accepts runtime loads, and remembers it. OK when at least one
  // loaded it (the others are listed in `failed`); else INVALID_ARGUMENT for a bad name, path or
  // base model, ALREADY_EXISTS when the name is a model's or an adapter's already,
  // FAILED_PRECONDITION when no ready worker of the base model accepts runtime loads, or the
  // first worker's error.
  void Load(LoraAdapterSource source, ChangeDone done);

  // Unloads the adapter from every worker that has it and forgets it. OK when every worker that
  // had it unloaded it; NOT_FOUND when neither the manager nor any worker knows it; else the
  // first worker's error (FAILED_PRECONDITION while requests use it, PERMISSION_DENIED on a
  // worker without runtime updates), after the others unloaded it.
  void Unload(std::string name, ChangeDone done);

  // Before a request of adapter `name` of `base_model` is routed: OK at once when a ready worker
  // not in `excluded` has it, or when the manager does not know the adapter (routing then says
  // that no worker has it); else it is loaded on the least loaded ready worker of the base model
  // that accepts runtime loads and is not excluded (one load per adapter at a time: requests that
  // need it meanwhile wait for the same load), and `done` gets that load's result.
  void EnsureLoaded(const std::string& base_model, const std::string& name,
                    const absl::flat_hash_set<std::string>& excluded,
                    absl::AnyInvocable<void(absl::Status) &&> done);

  // The adapters loaded through the manager, sorted by name.
  std::vector<LoraAdapterSource> Sources() const;

 private:
  struct State;
  const std::shared_ptr<State> state_;
};

// INVALID_ARGUMENT naming the field when `name` is not 1-128 printable ASCII characters without
// spaces (what workers accept), or `path` is empty or longer than 4096 bytes.
absl::Status ValidateLoraAdapterSource(const LoraAdapterSource& source);

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_PIPELINE_LORA_ADAPTER_MANAGER_H_
