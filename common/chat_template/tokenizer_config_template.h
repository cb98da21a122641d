// The chat template's source as a Hugging Face tokenizer_config.json carries it, without parsing
// the template: the worker only passes it on to the gateway (GetModelInfo), which parses it
// (ChatTemplate::FromTokenizerConfig reads the source here first).

#ifndef LLMSERVE_COMMON_CHAT_TEMPLATE_TOKENIZER_CONFIG_TEMPLATE_H_
#define LLMSERVE_COMMON_CHAT_TEMPLATE_TOKENIZER_CONFIG_TEMPLATE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace llmserve::common {

// "chat_template" as a string, or from a list of {"name", "template"} the entry named `name`
// (transformers uses "default"). NOT_FOUND when the config has no such template (null counts as
// none); INVALID_ARGUMENT "tokenizer_config.json: ..." when the config is not a JSON object, the
// field is neither a string nor a list, or a listed entry lacks a string name or template.
absl::StatusOr<std::string> ChatTemplateSourceFromTokenizerConfig(
    absl::string_view tokenizer_config_json, absl::string_view name = "default");

}  // namespace llmserve::common

#endif  // LLMSERVE_COMMON_CHAT_TEMPLATE_TOKENIZER_CONFIG_TEMPLATE_H_
