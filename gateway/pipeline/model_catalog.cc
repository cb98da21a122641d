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
  for (const WorkerStatus& worker : workers_->Workers()) {
    if (worker.model_info == nullptr) continue;
    ModelSummary& summary = models[worker.model_info->model_name()];
    // Prefer the description of a ready worker.
    if (summary.info == nullptr || (worker.ready && !worker.draining)) {
      summary.info = worker.model_info;
    }
    if (worker.ready && !worker.draining) ++summary.ready_workers;
  }
  std::vector<ModelSummary> list;
  for (auto& [name, summary] : models) list.push_back(std::move(summary));
  return list;
}

absl::StatusOr<std::shared_ptr<const ServedModel>> ModelCatalog::Resolve(absl::string_view name) {
  const std::vector<ModelSummary> models = List();
  if (models.empty()) {
    const std::vector<std::string> known = workers_->KnownModels();
    if (known.empty()) {
      return absl::UnavailableError("no worker has answered yet: no model is available");
    }
    // Workers answered before and are gone now (scaled to zero, left DNS): say so, not "yet".
    return absl::UnavailableError(
        absl::StrCat("no worker is available now for ", absl::StrJoin(known, ", "),
                     " (the workers that served it left or are down); retry later"));
  }
  const ModelSummary* found = nullptr;
  if (name.empty()) {
    if (models.size() > 1) {
      std::vector<std::string> names;
      for (const ModelSummary& summary : models) names.push_back(summary.info->model_name());
      return absl::InvalidArgumentError(absl::StrCat(
          "model: required, this gateway serves several: ", absl::StrJoin(names, ", ")));
    }
    found = &models[0];
  } else {
    for (const ModelSummary& summary : models) {
      if (summary.info->model_name() == name) found = &summary;
    }
    if (found == nullptr) {
      const std::vector<std::string> known = workers_->KnownModels();
      if (std::find(known.begin(), known.end(), name) != known.end()) {
        // A model served before whose workers all left: unavailable for now, not unknown.
        return absl::UnavailableError(
            absl::StrCat("no worker is available now for model \"", name,
                         "\" (the workers that served it left or are down); retry later"));
      }
      std::vector<std::string> names;
      for (const ModelSummary& summary : models) names.push_back(summary.info->model_name());
      return absl::NotFoundError(absl::StrCat(
          "model \"", name, "\" does not exist; served: ", absl::StrJoin(names, ", ")));
    }
  }
  const std::shared_ptr<const worker::v1::ModelInfo>& info = found->info;
  absl::MutexLock lock(&mutex_);
  Entry& entry = cache_[info->model_name()];
  if (entry.model != nullptr && (entry.source == info || SameModel(*entry.source, *info))) {
    entry.source = info;
    return entry.model;
  }
  absl::StatusOr<std::shared_ptr<const ServedModel>> model =
      ServedModel::Create(*info, tool_call_format_, reasoning_.For(info->model_name()));
  if (!model.ok()) return model.status();
  entry = {info, *model};
  return entry.model;
}

}  // namespace llmserve::gateway
