#include "common/chat_template/tokenizer_config_template.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace llmserve::common {

absl::StatusOr<std::string> ChatTemplateSourceFromTokenizerConfig(
    absl::string_view tokenizer_config_json, absl::string_view name) {
  // nlohmann throws on malformed input; nothing may leave this module as an exception.
  const nlohmann::json config =
      nlohmann::json::parse(tokenizer_config_json.begin(), tokenizer_config_json.end(), nullptr,
                            /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) {
    return absl::InvalidArgumentError("tokenizer_config.json: not a JSON object");
  }
  const auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) {
    return absl::NotFoundError("tokenizer_config.json has no chat_template");
  }
  if (it->is_string()) return it->get<std::string>();
  if (!it->is_array()) {
    return absl::InvalidArgumentError(
        "tokenizer_config.json: chat_template must be a string or a list of {name, template}");
  }
  for (const nlohmann::json& entry : *it) {
    if (!entry.is_object()) continue;
    const auto entry_name = entry.find("name");
    const auto entry_template = entry.find("template");
    if (entry_name == entry.end() || !entry_name->is_string() || entry_template == entry.end() ||
        !entry_template->is_string()) {
      return absl::InvalidArgumentError(
          "tokenizer_config.json: chat_template entries need string \"name\" and \"template\"");
    }
    if (entry_name->get_ref<const std::string&>() == name) {
      return entry_template->get<std::string>();
    }
  }
  return absl::NotFoundError(
      absl::StrCat("tokenizer_config.json has no chat template named \"", name, "\""));
}

}  // namespace llmserve::common
