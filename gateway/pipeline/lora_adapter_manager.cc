#include "gateway/pipeline/lora_adapter_manager.h"

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"

namespace llmserve::gateway {
namespace {

constexpr size_t kMaxLoraNameLength = 128;
constexpr size_t kMaxLoraPathLength = 4096;

// A worker that can load adapters of `model` at run time now.
bool AcceptsRuntimeLoads(const WorkerStatus& worker, absl::string_view model) {
  return worker.ready && !worker.draining && worker.model_info != nullptr &&
         worker.model_info->model_name() == model &&
         worker.model_info->allow_runtime_lora_updating() && worker.model_info->max_loras() > 0;
}

bool HasAdapter(const WorkerStatus& worker, absl::string_view name) {
  return std::binary_search(worker.lora_adapters.begin(), worker.lora_adapters.end(), name);
}

// A worker's error, naming the worker.
absl::Status OnWorker(const std::string& address, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat("worker ", address, ": ", status.message()));
}

}  // namespace

absl::Status ValidateLoraAdapterSource(const LoraAdapterSource& source) {
  if (source.name.empty() || source.name.size() > kMaxLoraNameLength) {
    return absl::InvalidArgumentError(absl::StrCat("lora_name: must be 1 to ", kMaxLoraNameLength,
                                                   " characters, found ", source.name.size()));
  }
  for (unsigned char c : source.name) {
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(
          "lora_name: only printable ASCII characters without spaces are allowed");
    }
  }
  if (source.path.empty() || source.path.size() > kMaxLoraPathLength) {
    return absl::InvalidArgumentError(
        absl::StrCat("lora_path: the adapter's directory on the workers is required (at most ",
                     kMaxLoraPathLength, " bytes)"));
  }
  if (source.path.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError("lora_path: contains a NUL byte");
  }
  return absl::OkStatus();
}

struct LoraAdapterManager::State {
  State(WorkerClient* workers, absl::Duration load_timeout)
      : workers(workers), load_timeout(load_timeout) {}

  WorkerClient* const workers;
  const absl::Duration load_timeout;
  absl::Mutex mutex;
  std::map<std::string, LoraAdapterSource> sources ABSL_GUARDED_BY(mutex);
  // Admin loads and unloads in flight, by adapter name: one at a time per name.
  absl::flat_hash_set<std::string> changing ABSL_GUARDED_BY(mutex);
  // On-demand loads in flight, by adapter name, with the requests waiting for each.
  absl::flat_hash_map<std::string, std::vector<absl::AnyInvocable<void(absl::Status) &&>>> loading
      ABSL_GUARDED_BY(mutex);
};

namespace {

// Gathers the answers of one change sent to several workers; the last answer finishes it.
struct ChangeFanout {
  absl::Mutex mutex;
  size_t remaining ABSL_GUARDED_BY(mutex) = 0;
  LoraAdapterChangeResult result ABSL_GUARDED_BY(mutex);
  absl::Status first_error ABSL_GUARDED_BY(mutex);
  // Runs once, with the result and the first error, after the last answer.
  absl::AnyInvocable<void(LoraAdapterChangeResult, absl::Status) &&> finish;

  void Answer(const std::string& address, const absl::Status& status) {
    LoraAdapterChangeResult done;
    absl::Status error;
    {
      absl::MutexLock lock(&mutex);
      if (status.ok()) {
        result.changed.push_back(address);
      } else {
        result.failed.push_back(absl::StrCat(address, ": ", status.message()));
        if (first_error.ok()) first_error = OnWorker(address, status);
      }
      if (--remaining > 0) return;
      done = std::move(result);
      error = first_error;
    }
    std::sort(done.changed.begin(), done.changed.end());
    std::sort(done.failed.begin(), done.failed.end());
    // The last answer: nothing else touches `finish`.
    std::move(finish)(std::move(done), error);
  }
};

}  // namespace

LoraAdapterManager::LoraAdapterManager(WorkerClient* workers, absl::Duration load_timeout)
    : state_(std::make_shared<State>(workers, load_timeout)) {}

LoraAdapterManager::~LoraAdapterManager() = default;

void LoraAdapterManager::Load(LoraAdapterSource source, ChangeDone done) {
  if (absl::Status valid = ValidateLoraAdapterSource(source); !valid.ok()) {
    return std::move(done)(valid);
  }
  const std::vector<WorkerStatus> workers = state_->workers->Workers();
  if (source.base_model.empty()) {
    std::vector<std::string> models;
    for (const WorkerStatus& worker : workers) {
      if (worker.model_info != nullptr && worker.model_info->allow_runtime_lora_updating() &&
          worker.model_info->max_loras() > 0) {
        models.push_back(worker.model_info->model_name());
      }
    }
    std::sort(models.begin(), models.end());
    models.erase(std::unique(models.begin(), models.end()), models.end());
    if (models.size() > 1) {
      return std::move(done)(absl::InvalidArgumentError(
          absl::StrCat("base_model_name: required, the workers of several models load LoRA "
                       "adapters at run time: ",
                       absl::StrJoin(models, ", "))));
    }
    if (models.empty()) {
      return std::move(done)(absl::FailedPreconditionError(
          "no worker loads LoRA adapters at run time (start workers with "
          "--allow_runtime_lora_updating)"));
    }
    source.base_model = models[0];
  }
  bool base_known = false;
  std::vector<std::string> targets;
  for (const WorkerStatus& worker : workers) {
    if (worker.model_info == nullptr) continue;
    if (worker.model_info->model_name() == source.name) {
      return std::move(done)(absl::AlreadyExistsError(
          absl::StrCat("lora_name: \"", source.name, "\" is the name of a model")));
    }
    if (HasAdapter(worker, source.name)) {
      return std::move(done)(absl::AlreadyExistsError(absl::StrCat(
          "LoRA adapter \"", source.name, "\" is already loaded (on ", worker.address, ")")));
    }
    base_known = base_known || worker.model_info->model_name() == source.base_model;
    if (AcceptsRuntimeLoads(worker, source.base_model)) targets.push_back(worker.address);
  }
  if (!base_known) {
    return std::move(done)(absl::NotFoundError(
        absl::StrCat("base_model_name: no worker serves model \"", source.base_model, "\"")));
  }
  if (targets.empty()) {
    return std::move(done)(absl::FailedPreconditionError(
        absl::StrCat("no ready worker of model \"", source.base_model,
                     "\" loads LoRA adapters at run time (--allow_runtime_lora_updating)")));
  }
  absl::Status refused;
  {
    absl::MutexLock lock(&state_->mutex);
    if (state_->sources.contains(source.name)) {
      refused = absl::AlreadyExistsError(
          absl::StrCat("LoRA adapter \"", source.name, "\" is already loaded"));
    } else if (!state_->changing.insert(source.name).second) {
      refused = absl::FailedPreconditionError(absl::StrCat(
          "LoRA adapter \"", source.name, "\" is being loaded or unloaded; retry when done"));
    }
  }
  // Answered outside the lock: `done` may do anything.
  if (!refused.ok()) return std::move(done)(refused);
  auto fanout = std::make_shared<ChangeFanout>();
  {
    absl::MutexLock lock(&fanout->mutex);
    fanout->remaining = targets.size();
    fanout->result.base_model = source.base_model;
  }
  fanout->finish = [state = state_, source, done = std::move(done)](
                       LoraAdapterChangeResult result, absl::Status first_error) mutable {
    {
      absl::MutexLock lock(&state->mutex);
      state->changing.erase(source.name);
      if (!result.changed.empty()) state->sources[source.name] = source;
    }
    if (result.changed.empty()) return std::move(done)(first_error);
    std::move(done)(std::move(result));
  };
  worker::v1::LoadLoraAdapterRequest request;
  request.set_lora_name(source.name);
  request.set_lora_path(source.path);
  const absl::Time deadline = absl::Now() + state_->load_timeout;
  for (const std::string& address : targets) {
    state_->workers->LoadLoraAdapter(
        address, request, deadline,
        [fanout, address](absl::Status status) { fanout->Answer(address, status); });
  }
}

void LoraAdapterManager::Unload(std::string name, ChangeDone done) {
  if (name.empty()) return std::move(done)(absl::InvalidArgumentError("lora_name: required"));
  std::vector<std::string> targets;
  for (const WorkerStatus& worker : state_->workers->Workers()) {
    if (HasAdapter(worker, name)) targets.push_back(worker.address);
  }
  absl::Status refused;
  bool forgotten = false;
  {
    absl::MutexLock lock(&state_->mutex);
    if (targets.empty()) {
      forgotten = state_->sources.erase(name) > 0;
      if (!forgotten) {
        refused = absl::NotFoundError(absl::StrCat("LoRA adapter \"", name, "\" is not loaded"));
      }
    } else if (!state_->changing.insert(name).second) {
      refused = absl::FailedPreconditionError(
          absl::StrCat("LoRA adapter \"", name, "\" is being loaded or unloaded; retry when done"));
    }
  }
  // Answered outside the lock: `done` may do anything.
  if (!refused.ok()) return std::move(done)(refused);
  if (forgotten) return std::move(done)(LoraAdapterChangeResult{});
  auto fanout = std::make_shared<ChangeFanout>();
  {
    absl::MutexLock lock(&fanout->mutex);
    fanout->remaining = targets.size();
  }
  fanout->finish = [state = state_, name, done = std::move(done)](
                       LoraAdapterChangeResult result, absl::Status first_error) mutable {
    {
      absl::MutexLock lock(&state->mutex);
      state->changing.erase(name);
      state->sources.erase(name);
    }
    if (!first_error.ok()) return std::move(done)(first_error);
    std::move(done)(std::move(result));
  };
  const absl::Time deadline = absl::Now() + state_->load_timeout;
  for (const std::string& address : targets) {
    state_->workers->UnloadLoraAdapter(
        address, name, deadline,
        [fanout, address](absl::Status status) { fanout->Answer(address, status); });
  }
}

void LoraAdapterManager::EnsureLoaded(const std::string& base_model, const std::string& name,
                                      const absl::flat_hash_set<std::string>& excluded,
                                      absl::AnyInvocable<void(absl::Status) &&> done) {
  std::optional<LoraAdapterSource> source;
  {
    absl::MutexLock lock(&state_->mutex);
    const auto it = state_->sources.find(name);
    if (it != state_->sources.end() && it->second.base_model == base_model) source = it->second;
  }
  if (!source.has_value()) return std::move(done)(absl::OkStatus());
  const WorkerStatus* target = nullptr;
  int64_t target_load = 0;
  const std::vector<WorkerStatus> workers = state_->workers->Workers();
  for (const WorkerStatus& worker : workers) {
    if (excluded.contains(worker.address) || !worker.ready || worker.draining ||
        worker.model_info == nullptr || worker.model_info->model_name() != base_model) {
      continue;
    }
    if (HasAdapter(worker, name)) return std::move(done)(absl::OkStatus());
    if (!AcceptsRuntimeLoads(worker, base_model)) continue;
    const int64_t load =
        int64_t{worker.last_report.running()} + int64_t{worker.last_report.waiting()};
    // Workers come sorted by address: ties go to the first.
    if (target == nullptr || load < target_load) {
      target = &worker;
      target_load = load;
    }
  }
  if (target == nullptr) {
    return std::move(done)(absl::UnavailableError(
        absl::StrCat("no ready worker of model \"", base_model, "\" has LoRA adapter \"", name,
                     "\" or can load it now (--allow_runtime_lora_updating)")));
  }
  {
    absl::MutexLock lock(&state_->mutex);
    auto [it, first] = state_->loading.try_emplace(name);
    it->second.push_back(std::move(done));
    if (!first) return;  // the load in flight answers this request too
  }
  worker::v1::LoadLoraAdapterRequest request;
  request.set_lora_name(name);
  request.set_lora_path(source->path);
  const std::string address = target->address;
  state_->workers->LoadLoraAdapter(
      address, request, absl::Now() + state_->load_timeout,
      [state = state_, name, address](absl::Status status) {
        // Someone else (another gateway) loaded it there first: it is there all the same.
        if (absl::IsAlreadyExists(status)) status = absl::OkStatus();
        if (!status.ok()) {
          status = absl::Status(
              status.code(), absl::StrCat("loading LoRA adapter \"", name, "\" on worker ", address,
                                          " failed: ", status.message()));
        }
        std::vector<absl::AnyInvocable<void(absl::Status) &&>> waiting;
        {
          absl::MutexLock lock(&state->mutex);
          const auto it = state->loading.find(name);
          if (it != state->loading.end()) {
            waiting = std::move(it->second);
            state->loading.erase(it);
          }
        }
        for (auto& waiter : waiting) std::move(waiter)(status);
      });
}

std::vector<LoraAdapterSource> LoraAdapterManager::Sources() const {
  absl::MutexLock lock(&state_->mutex);
  std::vector<LoraAdapterSource> sources;
  for (const auto& [name, source] : state_->sources) sources.push_back(source);
  return sources;
}

}  // namespace llmserve::gateway
