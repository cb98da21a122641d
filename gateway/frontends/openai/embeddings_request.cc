#include "gateway/frontends/openai/embeddings_request.h"

#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/json/ordered_json.h"
#include "gateway/frontends/openai/openai_json.h"
#include "gateway/frontends/openai/openai_request.h"

namespace llmserve::gateway {
namespace {

using EmbeddingsJson = openai_json::Json;

absl::StatusOr<std::vector<int32_t>> TokenIds(const EmbeddingsJson& list,
                                              const std::string& field) {
  std::vector<int32_t> ids;
  ids.reserve(list.size());
  for (size_t j = 0; j < list.size(); ++j) {
    const EmbeddingsJson& id = list[j];
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      return openai_json::Invalid(absl::StrCat(field, "[", j, "]"),
                                  "must be a token id (an integer >= 0)");
    }
    ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return ids;
}

absl::StatusOr<std::vector<EmbeddingInput>> Inputs(const EmbeddingsJson& input) {
  std::vector<EmbeddingInput> inputs;
  if (input.is_string()) {
    inputs.push_back({.text = input.get<std::string>()});
    return inputs;
  }
  if (!input.is_array()) {
    return openai_json::Invalid("input", "must be a string, a list of strings, or token ids");
  }
  if (input.empty()) return openai_json::Invalid("input", "must not be empty");
  if (input.size() > static_cast<size_t>(kMaxEmbeddingInputs)) {
    return openai_json::Invalid(
        "input", absl::StrCat("holds ", input.size(), " inputs; at most ", kMaxEmbeddingInputs));
  }
  // A list of ids is one input; a list of strings or of id lists is several.
  if (input[0].is_number()) {
    absl::StatusOr<std::vector<int32_t>> ids = TokenIds(input, "input");
    if (!ids.ok()) return ids.status();
    inputs.push_back({.token_ids = *std::move(ids)});
    return inputs;
  }
  for (size_t i = 0; i < input.size(); ++i) {
    const std::string field = absl::StrCat("input[", i, "]");
    const EmbeddingsJson& item = input[i];
    if (item.is_string()) {
      inputs.push_back({.text = item.get<std::string>()});
    } else if (item.is_array()) {
      absl::StatusOr<std::vector<int32_t>> ids = TokenIds(item, field);
      if (!ids.ok()) return ids.status();
      inputs.push_back({.token_ids = *std::move(ids)});
    } else {
      return openai_json::Invalid(field, "must be a string or a list of token ids");
    }
  }
  return inputs;
}

}  // namespace

absl::StatusOr<EmbeddingsRequest> ParseEmbeddingsRequest(absl::string_view body) {
  absl::StatusOr<EmbeddingsJson> document = common::ParseOrderedJson(
      std::string_view(body.data(), body.size()),
      {.max_depth = kMaxJsonDepth, .max_values = kMaxJsonValues, .what = "the body"});
  if (!document.ok()) return document.status();
  const EmbeddingsJson& json = *document;
  if (!json.is_object()) return absl::InvalidArgumentError("the body must be a JSON object");
  for (const auto& [key, value] : json.items()) {
    if (key != "model" && key != "input" && key != "encoding_format" && key != "dimensions" &&
        key != "user") {
      return openai_json::Invalid(key.substr(0, 64),
                                  "is not a field of the embeddings API we support");
    }
  }
  EmbeddingsRequest out;
  const EmbeddingsJson* model = openai_json::Find(json, "model");
  if (model == nullptr) return openai_json::Invalid("model", "is required");
  if (!model->is_string()) return openai_json::Invalid("model", "must be a string");
  out.model = model->get<std::string>();
  const EmbeddingsJson* input = openai_json::Find(json, "input");
  if (input == nullptr) return openai_json::Invalid("input", "is required");
  absl::StatusOr<std::vector<EmbeddingInput>> inputs = Inputs(*input);
  if (!inputs.ok()) return inputs.status();
  out.inputs = *std::move(inputs);
  if (const EmbeddingsJson* format = openai_json::Find(json, "encoding_format")) {
    if (!format->is_string() ||
        (format->get<std::string>() != "float" && format->get<std::string>() != "base64")) {
      return openai_json::Invalid("encoding_format", "must be \"float\" or \"base64\"");
    }
    out.base64 = format->get<std::string>() == "base64";
  }
  if (const EmbeddingsJson* dimensions = openai_json::Find(json, "dimensions")) {
    if (!dimensions->is_number_integer() || dimensions->get<int64_t>() < 1 ||
        dimensions->get<int64_t>() > (int64_t{1} << 24)) {
      return openai_json::Invalid("dimensions", "must be an integer >= 1");
    }
    out.dimensions = dimensions->get<int64_t>();
  }
  if (const EmbeddingsJson* user = openai_json::Find(json, "user");
      user != nullptr && !user->is_string()) {
    return openai_json::Invalid("user", "must be a string");
  }
  return out;
}

}  // namespace llmserve::gateway
