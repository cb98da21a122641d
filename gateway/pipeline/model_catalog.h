// The models the gateway serves, as its workers describe them: resolves a request's model name
// to a ServedModel (tokenizer, template, limits), built once per distinct worker description and
// cached.
//
// Thread-safe.

#ifndef LLMSERVE_GATEWAY_PIPELINE_MODEL_CATALOG_H_
#define LLMSERVE_GATEWAY_PIPELINE_MODEL_CATALOG_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "gateway/pipeline/lora_adapter_manager.h"
#include "gateway/pipeline/served_model.h"
#include "gateway/reasoning/reasoning_format.h"
#include "gateway/router/worker_client.h"
#include "gateway/tool_calls/tool_call_format.h"

namespace llmserve::gateway {

class ModelCatalog {
 public:
  // `tool_call_format`: how every model writes tool calls; nullopt detects it from each model's
  // chat template. `reasoning`: which models' replies have their reasoning parsed, and how.
  // `lora_adapters` (may be null) adds the adapters it can load on demand.
  explicit ModelCatalog(const WorkerClient* workers,
                        std::optional<tool_calls::ToolCallFormat> tool_call_format = std::nullopt,
                        reasoning::ReasoningParsers reasoning = {},
                        const LoraAdapterManager* lora_adapters = nullptr)
      : workers_(workers),
        tool_call_format_(tool_call_format),
        reasoning_(std::move(reasoning)),
        lora_adapters_(lora_adapters) {}

  // Which models a caller may use (an API key or token limited to some); empty: every model.
  using ModelFilter = std::function<bool(absl::string_view model)>;

  // `name` empty selects the only model the caller may use (INVALID_ARGUMENT when there are
  // several); NOT_FOUND naming the served models for an unknown name; UNAVAILABLE before any
  // worker answered. Errors name only models `may_use` accepts: a key limited to one model does
  // not learn what else the gateway serves. Resolving is not permission: a model the caller may
  // not use still resolves (CheckModelAccess refuses it, naming it). A LoRA adapter's name
  // resolves to its base model served through it (ServedModel::ForAdapter).
  absl::StatusOr<std::shared_ptr<const ServedModel>> Resolve(absl::string_view name,
                                                             const ModelFilter& may_use = {});

  struct ModelSummary {
    // What requests call it: the model's name, or a LoRA adapter's.
    std::string name;
    // The base model's description (for an adapter, of a worker that has it loaded).
    std::shared_ptr<const worker::v1::ModelInfo> info;
    // For an adapter: those that have it loaded, or (none has, and the adapter manager can load
    // it) those that can load it on demand.
    int ready_workers = 0;
    // For a LoRA adapter: the base model's name; empty for a base model.
    std::string parent;
  };
  // Every model some worker described, every LoRA adapter a worker has loaded now and every one
  // the adapter manager can load (a model named after its adapter, whose parent is the base
  // model), sorted by name. A base model's name wins over an adapter of the same name.
  std::vector<ModelSummary> List() const;

 private:
  struct Entry {
    std::shared_ptr<const worker::v1::ModelInfo> source;
    std::shared_ptr<const ServedModel> model;
  };
  const WorkerClient* const workers_;
  const std::optional<tool_calls::ToolCallFormat> tool_call_format_;
  const reasoning::ReasoningParsers reasoning_;
  const LoraAdapterManager* const lora_adapters_;
  absl::Mutex mutex_;
  absl::flat_hash_map<std::string, Entry> cache_ ABSL_GUARDED_BY(mutex_);
  // Per base model, its adapters' ServedModels (built with the base's entry, dropped with it).
  absl::flat_hash_map<std::string,
                      absl::flat_hash_map<std::string, std::shared_ptr<const ServedModel>>>
      adapters_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_PIPELINE_MODEL_CATALOG_H_
