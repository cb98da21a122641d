#include "gateway/tool_calls/call_object.h"

#include "gateway/tool_calls/json_scan.h"

namespace llmserve::gateway::tool_calls {

bool IsKnownTool(std::string_view name, absl::Span<const llmserve::v1::Tool> tools) {
  for (const llmserve::v1::Tool& tool : tools) {
    if (tool.name() == name) return true;
  }
  return false;
}

std::optional<std::string> ArgumentsText(const nlohmann::ordered_json* value) {
  if (value == nullptr || value->is_null()) return std::string("{}");
  if (value->is_object()) return DumpJson(*value);
  if (value->is_string()) {
    std::optional<nlohmann::ordered_json> inner =
        ParseBoundedJson(value->get_ref<const std::string&>());
    if (inner.has_value() && inner->is_object()) return DumpJson(*inner);
  }
  return std::nullopt;
}

std::optional<CallParts> CallFromJson(const nlohmann::ordered_json& object,
                                      const absl::Span<const llmserve::v1::Tool>* tools) {
  if (!object.is_object()) return std::nullopt;
  const auto name = object.find("name");
  if (name == object.end() || !name->is_string()) return std::nullopt;
  const std::string& name_text = name->get_ref<const std::string&>();
  if (name_text.empty()) return std::nullopt;
  if (tools != nullptr && !IsKnownTool(name_text, *tools)) return std::nullopt;
  const auto arguments = object.find("arguments");
  const auto parameters = object.find("parameters");
  if (arguments != object.end() && parameters != object.end()) return std::nullopt;
  // Required, as vLLM requires it: JSON that merely has a "name" is not a call.
  if (arguments == object.end() && parameters == object.end()) return std::nullopt;
  const nlohmann::ordered_json* args = nullptr;
  if (arguments != object.end()) args = &*arguments;
  if (parameters != object.end()) args = &*parameters;
  std::optional<std::string> text = ArgumentsText(args);
  if (!text.has_value()) return std::nullopt;
  return CallParts{name_text, *std::move(text)};
}

}  // namespace llmserve::gateway::tool_calls
