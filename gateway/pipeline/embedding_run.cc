#include "gateway/pipeline/embedding_run.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace llmserve::gateway {
namespace {

absl::Status InvalidEmbeddingField(absl::string_view field, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat("'", field, "' ", problem));
}

absl::Status CheckEmbeddingDimensions(const ServedModel& model, int64_t dimensions) {
  const worker::v1::ModelInfo& info = model.info();
  const int64_t size = info.embedding_size();
  if (dimensions == 0 || dimensions == size) return absl::OkStatus();
  if (dimensions < 0) return InvalidEmbeddingField("dimensions", "must be at least 1");
  if (!info.matryoshka()) {
    return InvalidEmbeddingField(
        "dimensions",
        absl::StrCat("is ", dimensions, ", but model \"", model.name(), "\" makes embeddings of ",
                     size, " dimensions and does not support truncating them"));
  }
  const auto& allowed = info.matryoshka_dimensions();
  if (dimensions > size || (!allowed.empty() && std::find(allowed.begin(), allowed.end(),
                                                          dimensions) == allowed.end())) {
    return InvalidEmbeddingField(
        "dimensions", allowed.empty() ? absl::StrCat("is ", dimensions, "; model \"", model.name(),
                                                     "\" supports 1 to ", size)
                                      : absl::StrCat("is ", dimensions, "; model \"", model.name(),
                                                     "\" supports ", absl::StrJoin(allowed, ", ")));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PreparedRun> PrepareEmbeddings(std::shared_ptr<const ServedModel> model,
                                              const std::vector<EmbeddingInput>& inputs,
                                              int64_t dimensions, const std::string& request_id,
                                              const PromptLimits& limits) {
  if (!model->embeds()) {
    return InvalidEmbeddingField("model",
                                 absl::StrCat("\"", model->name(),
                                              "\" generates text; embeddings need a model whose "
                                              "workers run with --task=embed"));
  }
  if (inputs.empty()) return InvalidEmbeddingField("input", "must not be empty");
  if (inputs.size() > static_cast<size_t>(kMaxEmbeddingInputs)) {
    return InvalidEmbeddingField(
        "input", absl::StrCat("holds ", inputs.size(), " inputs; at most ", kMaxEmbeddingInputs));
  }
  if (absl::Status checked = CheckEmbeddingDimensions(*model, dimensions); !checked.ok())
    return checked;
  absl::StatusOr<std::string> id = ResolveRequestId(request_id);
  if (!id.ok()) return id.status();
  PreparedRun run{
      .model = model, .separate_prompts = true, .max_concurrent = kMaxEmbeddingInputsRunning};
  run.choices.reserve(inputs.size());
  int64_t total_tokens = 0;
  const int64_t context = model->max_model_len();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string field = absl::StrCat("input[", i, "]");
    std::vector<int32_t> ids;
    if (inputs[i].text.has_value()) {
      if (inputs[i].text->empty()) return InvalidEmbeddingField(field, "must not be empty");
      absl::StatusOr<std::vector<int32_t>> tokenized =
          TokenizeText(*model, *inputs[i].text, /*add_special_tokens=*/true, limits);
      if (!tokenized.ok()) {
        return absl::Status(tokenized.status().code(),
                            absl::StrCat(field, ": ", tokenized.status().message()));
      }
      ids = *std::move(tokenized);
    } else {
      ids = inputs[i].token_ids;
      for (size_t j = 0; j < ids.size(); ++j) {
        if (ids[j] < 0 || static_cast<uint32_t>(ids[j]) >= model->vocab_size()) {
          return InvalidEmbeddingField(absl::StrCat(field, "[", j, "]"),
                                       absl::StrCat("is ", ids[j], ", outside the vocabulary [0, ",
                                                    model->vocab_size(), ")"));
        }
      }
    }
    if (ids.empty()) return InvalidEmbeddingField(field, "must hold at least one token");
    if (static_cast<int64_t>(ids.size()) > context) {
      return InvalidEmbeddingField(
          field, absl::StrCat("is ", ids.size(), " tokens; model \"", model->name(),
                              "\" takes at most ", context));
    }
    total_tokens += static_cast<int64_t>(ids.size());
    if (total_tokens > kMaxEmbeddingRequestTokens) {
      return InvalidEmbeddingField("input",
                                   absl::StrCat("holds more than ", kMaxEmbeddingRequestTokens,
                                                " tokens in all; split the request"));
    }
    PreparedRequest choice;
    choice.request_id = *id;
    choice.model = model;
    choice.worker_request.mutable_prompt_token_ids()->Assign(ids.begin(), ids.end());
    choice.worker_request.mutable_embedding()->set_dimensions(static_cast<uint32_t>(dimensions));
    choice.worker_request.set_lora_adapter(model->lora_adapter());
    run.choices.push_back(std::move(choice));
  }
  return run;
}

}  // namespace llmserve::gateway
