#include "worker/model/pooling_config.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "worker/model/model_files.h"

namespace llmserve::worker {
namespace {

using nlohmann::json;

constexpr size_t kMaxFileBytes = 1 << 20;

absl::Status Invalid(absl::string_view file, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(file, ": ", problem));
}

absl::StatusOr<json> ParseFile(const std::filesystem::path& path) {
  std::string text;
  LLMSERVE_ASSIGN_OR_RETURN(text, ReadTextFile(path.string(), kMaxFileBytes));
  json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return Invalid(path.string(), "is not valid JSON");
  return parsed;
}

// The one pooling mode a sentence-transformers Pooling config.json sets.
absl::StatusOr<PoolingMethod> ReadPoolingModule(const std::filesystem::path& file,
                                                int64_t hidden_size) {
  json config;
  LLMSERVE_ASSIGN_OR_RETURN(config, ParseFile(file));
  const std::string name = file.string();
  if (!config.is_object()) return Invalid(name, "must be a JSON object");
  const auto flag = [&config](const char* key) {
    const auto it = config.find(key);
    return it != config.end() && it->is_boolean() && it->get<bool>();
  };
  for (const char* unsupported : {"pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens",
                                  "pooling_mode_weightedmean_tokens"}) {
    if (flag(unsupported)) {
      return Invalid(
          name,
          absl::StrCat(unsupported, " is not supported (llmserve pools with last, mean or cls)"));
    }
  }
  if (const auto it = config.find("include_prompt");
      it != config.end() && it->is_boolean() && !it->get<bool>()) {
    return Invalid(name, "include_prompt false is not supported (every prompt token is pooled)");
  }
  if (const auto it = config.find("word_embedding_dimension");
      it != config.end() && (!it->is_number_integer() || it->get<int64_t>() != hidden_size)) {
    return Invalid(name, absl::StrCat("word_embedding_dimension ", it->dump(),
                                      " does not match the model's hidden_size ", hidden_size));
  }
  std::optional<PoolingMethod> method;
  for (const auto& [key, value] : {std::pair{"pooling_mode_lasttoken", PoolingMethod::kLast},
                                   std::pair{"pooling_mode_mean_tokens", PoolingMethod::kMean},
                                   std::pair{"pooling_mode_cls_token", PoolingMethod::kCls}}) {
    if (!flag(key)) continue;
    if (method.has_value()) return Invalid(name, "sets more than one pooling_mode_*");
    method = value;
  }
  if (!method.has_value()) return Invalid(name, "sets no pooling_mode_* to true");
  return *method;
}

absl::Status ReadMatryoshka(absl::string_view config_json, int64_t hidden_size,
                            PoolingConfig* out) {
  json config = json::parse(config_json, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) return absl::OkStatus();  // ModelConfig says
  if (const auto it = config.find("matryoshka_dimensions"); it != config.end() && !it->is_null()) {
    if (!it->is_array() || it->empty()) {
      return Invalid("config.json", "matryoshka_dimensions must be a non-empty list of integers");
    }
    for (const json& value : *it) {
      if (!value.is_number_integer() || value.get<int64_t>() < 1 ||
          value.get<int64_t>() > hidden_size) {
        return Invalid("config.json", absl::StrCat("matryoshka_dimensions holds ", value.dump(),
                                                   ", outside [1, hidden_size ", hidden_size, "]"));
      }
      out->matryoshka_dimensions.push_back(value.get<int64_t>());
    }
    out->matryoshka = true;
  }
  if (const auto it = config.find("is_matryoshka"); it != config.end() && it->is_boolean()) {
    out->matryoshka = out->matryoshka || it->get<bool>();
  }
  return absl::OkStatus();
}

}  // namespace

absl::string_view PoolingMethodName(PoolingMethod method) {
  switch (method) {
    case PoolingMethod::kLast:
      return "last";
    case PoolingMethod::kMean:
      return "mean";
    case PoolingMethod::kCls:
      return "cls";
  }
  return "last";
}

absl::StatusOr<PoolingMethod> ParsePoolingMethod(absl::string_view name) {
  if (name == "last") return PoolingMethod::kLast;
  if (name == "mean") return PoolingMethod::kMean;
  if (name == "cls") return PoolingMethod::kCls;
  return absl::InvalidArgumentError(
      absl::StrCat("pooling \"", name, "\" is not one of last, mean, cls"));
}

absl::StatusOr<PoolingConfig> ReadPoolingConfig(const std::string& directory,
                                                absl::string_view config_json,
                                                int64_t hidden_size) {
  PoolingConfig out;
  LLMSERVE_RETURN_IF_ERROR(ReadMatryoshka(config_json, hidden_size, &out));
  const std::filesystem::path dir(directory);
  std::error_code error;
  if (!std::filesystem::is_regular_file(dir / "modules.json", error)) return out;
  json modules;
  LLMSERVE_ASSIGN_OR_RETURN(modules, ParseFile(dir / "modules.json"));
  if (!modules.is_array()) return Invalid("modules.json", "must be a list of modules");
  for (size_t i = 0; i < modules.size(); ++i) {
    const json& module = modules[i];
    const std::string where = absl::StrCat("modules.json: module ", i);
    if (!module.is_object() || !module.contains("type") || !module["type"].is_string()) {
      return Invalid(where, "needs a string \"type\"");
    }
    const std::string type = module["type"].get<std::string>();
    if (type == "sentence_transformers.models.Transformer") continue;
    if (type == "sentence_transformers.models.Normalize") {
      out.normalize = true;
      continue;
    }
    if (type != "sentence_transformers.models.Pooling") {
      return Invalid(where, absl::StrCat(type,
                                         " is not supported (llmserve runs Transformer, "
                                         "Pooling and Normalize modules)"));
    }
    const std::string path = module.contains("path") && module["path"].is_string()
                                 ? module["path"].get<std::string>()
                                 : "";
    const std::filesystem::path relative(path);
    if (path.empty() || relative.is_absolute() || path.find("..") != std::string::npos) {
      return Invalid(where, absl::StrCat("path \"", path,
                                         "\" must name a directory inside the model directory"));
    }
    LLMSERVE_ASSIGN_OR_RETURN(out.method,
                              ReadPoolingModule(dir / relative / "config.json", hidden_size));
  }
  return out;
}

}  // namespace llmserve::worker
