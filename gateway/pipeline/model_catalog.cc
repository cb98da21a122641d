#include "gateway/pipeline/model_catalog.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace llmserve::gateway {
namespace {

// Two worker descriptions that build the same ServedModel.
bool SameModel(const worker::v1::ModelInfo& a, const worker::v1::ModelInfo& b) {
  return a.model_name() == b.model_name() && a.max_model_len() == b.max_model_len() &&
         a.vocab_size() == b.vocab_size() && a.block_size() == b.block_size() &&
         a.chat_template() == b.chat_template() && a.tokenizer_json() == b.tokenizer_json() &&
         a.tokenizer_config_json() == b.tokenizer_config_json();
}

}  // namespace

std::vector<ModelCatalog::ModelSummary> ModelCatalog::List() const {
  std::map<std::string, ModelSummary> models;
  std::map<std::string, ModelSummary> adapters;
  // Per base model, its serving workers that load adapters on demand.
  std::map<std::string, int> loading_workers;
  for (const WorkerStatus& worker : workers_->Workers()) {
    if (worker.model_info == nullptr) continue;
    const bool serving = worker.ready && !worker.draining;
    if (serving && worker.model_info->allow_runtime_lora_updating() &&
        worker.model_info->max_loras() > 0) {
      ++loading_workers[worker.model_info->model_name()];
    }
    ModelSummary& summary = models[worker.model_info->model_name()];
    summary.name = worker.model_info->model_name();
    // Prefer the description of a ready worker.
    if (summary.info == nullptr || serving) summary.info = worker.model_info;
    if (serving) ++summary.ready_workers;
    for (const std::string& adapter : worker.lora_adapters) {
      ModelSummary& adapted = adapters[adapter];
      adapted.name = adapter;
      adapted.parent = worker.model_info->model_name();
      if (adapted.info == nullptr || serving) adapted.info = worker.model_info;
      if (serving) ++adapted.ready_workers;
    }
  }
  if (lora_adapters_ != nullptr) {
    for (const LoraAdapterSource& source : lora_adapters_->Sources()) {
      const auto base = models.find(source.base_model);
      if (base == models.end() || adapters.contains(source.name)) continue;
      adapters[source.name] = {.name = source.name,
                               .info = base->second.info,
                               .ready_workers = loading_workers[source.base_model],
                               .parent = source.base_model};
    }
  }
  for (auto& [name, adapted] : adapters) models.try_emplace(name, std::move(adapted));
  std::vector<ModelSummary> list;
  for (auto& [name, summary] : models) list.push_back(std::move(summary));
  return list;
}

absl::StatusOr<std::shared_ptr<const ServedModel>> ModelCatalog::Resolve(
    absl::string_view name, const ModelFilter& may_use) {
  // The names an error may show this caller.
  auto shown = [&](const std::vector<std::string>& names) {
    std::vector<std::string> kept;
    for (const std::string& model : names) {
      if (!may_use || may_use(model)) kept.push_back(model);
    }
    return absl::StrJoin(kept, ", ");
  };
  const std::vector<ModelSummary> models = List();
  if (models.empty()) {
    const std::vector<std::string> known = workers_->KnownModels();
    if (known.empty()) {
      return absl::UnavailableError("no worker has answered yet: no model is available");
    }
    // Workers answered before and are gone now (scaled to zero, left DNS): say so, not "yet".
    const std::string gone = shown(known);
    return absl::UnavailableError(
        absl::StrCat("no worker is available now", gone.empty() ? "" : absl::StrCat(" for ", gone),
                     " (the workers that served it left or are down); retry later"));
  }
  std::vector<std::string> names;
  for (const ModelSummary& summary : models) names.push_back(summary.name);
  const ModelSummary* found = nullptr;
  if (name.empty()) {
    std::vector<const ModelSummary*> usable;
    for (const ModelSummary& summary : models) {
      if (!may_use || may_use(summary.name)) usable.push_back(&summary);
    }
    if (usable.size() == 1) {
      found = usable[0];
    } else if (usable.empty() && models.size() == 1) {
      found = &models[0];  // the access check refuses it, naming it
    } else {
      const std::string served = shown(names);
      return absl::InvalidArgumentError(
          absl::StrCat("model: required, this gateway serves several",
                       served.empty() ? "" : absl::StrCat(": ", served)));
    }
  } else {
    for (const ModelSummary& summary : models) {
      if (summary.name == name) found = &summary;
    }
    if (found == nullptr) {
      const std::vector<std::string> known = workers_->KnownModels();
      if (std::find(known.begin(), known.end(), name) != known.end()) {
        // A model served before whose workers all left: unavailable for now, not unknown.
        return absl::UnavailableError(
            absl::StrCat("no worker is available now for model \"", name,
                         "\" (the workers that served it left or are down); retry later"));
      }
      const std::string served = shown(names);
      return absl::NotFoundError(
          absl::StrCat("model \"", name, "\" does not exist",
                       served.empty() ? "" : absl::StrCat("; served: ", served)));
    }
  }
  const std::shared_ptr<const worker::v1::ModelInfo>& info = found->info;
  absl::MutexLock lock(&mutex_);
  Entry& entry = cache_[info->model_name()];
  if (entry.model == nullptr || !(entry.source == info || SameModel(*entry.source, *info))) {
    absl::StatusOr<std::shared_ptr<const ServedModel>> model =
        ServedModel::Create(*info, tool_call_format_, reasoning_.For(info->model_name()));
    if (!model.ok()) return model.status();
    entry = {info, *model};
    adapters_.erase(info->model_name());
  }
  entry.source = info;
  if (found->parent.empty()) return entry.model;
  // An adapter shares its base model's tokenizer and template.
  std::shared_ptr<const ServedModel>& adapted = adapters_[info->model_name()][found->name];
  if (adapted == nullptr) adapted = ServedModel::ForAdapter(*entry.model, found->name);
  return adapted;
}

}  // namespace llmserve::gateway
