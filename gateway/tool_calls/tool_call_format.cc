#include "gateway/tool_calls/tool_call_format.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace llmserve::gateway::tool_calls {

ToolCallFormat DetectToolCallFormat(std::string_view source) {
  const auto has = [source](std::string_view needle) {
    return source.find(needle) != std::string_view::npos;
  };
  if (has("<tool_call>")) return ToolCallFormat::kHermes;
  if (has("[TOOL_CALLS]")) return ToolCallFormat::kMistral;
  if (has("<|python_tag|>")) return ToolCallFormat::kLlama3Json;
  // Llama 3.2/3.3 templates without built-in tools still ask for this JSON and answer as ipython.
  if ((has("\"parameters\": ") || has("\\\"parameters\\\": ")) && has("ipython")) {
    return ToolCallFormat::kLlama3Json;
  }
  return ToolCallFormat::kNone;
}

absl::StatusOr<ToolCallFormat> ParseToolCallFormatName(std::string_view name) {
  if (name == "hermes") return ToolCallFormat::kHermes;
  if (name == "llama3_json") return ToolCallFormat::kLlama3Json;
  if (name == "mistral") return ToolCallFormat::kMistral;
  if (name == "none") return ToolCallFormat::kNone;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown tool call parser '", std::string(name),
                   "': expected one of hermes, llama3_json, mistral, none"));
}

std::string_view ToolCallFormatName(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return "hermes";
    case ToolCallFormat::kLlama3Json:
      return "llama3_json";
    case ToolCallFormat::kMistral:
      return "mistral";
    case ToolCallFormat::kNone:
      break;
  }
  return "none";
}

}  // namespace llmserve::gateway::tool_calls
