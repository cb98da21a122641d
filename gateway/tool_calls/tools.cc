#include "gateway/tool_calls/tools.h"

#include <exception>
#include <optional>
#include <string_view>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "gateway/tool_calls/json_scan.h"

namespace llmserve::gateway::tool_calls {
namespace {

absl::Status Invalid(const std::string& field, std::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", std::string(problem)));
}

bool IsValidName(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// Checks the name (and its uniqueness); `field` names it in errors.
absl::Status CheckName(std::string_view name, const std::string& field,
                       absl::flat_hash_set<std::string>* seen) {
  if (!IsValidName(name)) return Invalid(field, "must match [A-Za-z0-9_-]{1,64}");
  if (!seen->insert(std::string(name)).second) {
    return Invalid(field, absl::StrCat("duplicate function name '", std::string(name), "'"));
  }
  return absl::OkStatus();
}

absl::Status CheckParametersText(const std::string& text, const std::string& field) {
  if (text.empty()) return absl::OkStatus();
  const std::optional<nlohmann::ordered_json> schema = ParseBoundedJson(text);
  if (!schema.has_value()) {
    return Invalid(field, absl::StrCat("must be a JSON object (JSON Schema) of at most ",
                                       kMaxJsonBytes, " bytes and ", kMaxJsonDepth, " levels"));
  }
  if (!schema->is_object()) return Invalid(field, "must be a JSON object (JSON Schema)");
  return absl::OkStatus();
}

const nlohmann::ordered_json* Find(const nlohmann::ordered_json& object, const char* key) {
  const auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

absl::StatusOr<llmserve::v1::Tool> ParseOneTool(const nlohmann::ordered_json& item,
                                                const std::string& field,
                                                absl::flat_hash_set<std::string>* seen) {
  if (!item.is_object()) return Invalid(field, "must be an object");
  const nlohmann::ordered_json* type = Find(item, "type");
  if (type == nullptr || !type->is_string() || type->get_ref<const std::string&>() != "function") {
    return Invalid(field + ".type", "must be \"function\"");
  }
  const nlohmann::ordered_json* function = Find(item, "function");
  if (function == nullptr || !function->is_object()) {
    return Invalid(field + ".function", "must be an object");
  }
  llmserve::v1::Tool tool;
  const nlohmann::ordered_json* name = Find(*function, "name");
  if (name == nullptr || !name->is_string()) {
    return Invalid(field + ".function.name", "must be a string");
  }
  if (absl::Status status =
          CheckName(name->get_ref<const std::string&>(), field + ".function.name", seen);
      !status.ok()) {
    return status;
  }
  tool.set_name(name->get_ref<const std::string&>());
  if (const nlohmann::ordered_json* description = Find(*function, "description")) {
    if (!description->is_string()) {
      return Invalid(field + ".function.description", "must be a string");
    }
    tool.set_description(description->get_ref<const std::string&>());
  }
  if (const nlohmann::ordered_json* parameters = Find(*function, "parameters")) {
    if (!parameters->is_object()) {
      return Invalid(field + ".function.parameters", "must be a JSON object (JSON Schema)");
    }
    std::string text;
    try {
      text = parameters->dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    } catch (const std::exception& e) {
      return Invalid(field + ".function.parameters", e.what());
    }
    if (absl::Status status = CheckParametersText(text, field + ".function.parameters");
        !status.ok()) {
      return status;
    }
    if (!parameters->empty()) tool.set_parameters(std::move(text));
  }
  if (const nlohmann::ordered_json* strict = Find(*function, "strict")) {
    if (!strict->is_boolean()) return Invalid(field + ".function.strict", "must be a boolean");
    tool.set_strict(strict->get<bool>());
  }
  return tool;
}

}  // namespace

absl::StatusOr<std::vector<llmserve::v1::Tool>> ParseOpenAiTools(
    const nlohmann::ordered_json& tools) {
  std::vector<llmserve::v1::Tool> out;
  if (tools.is_null()) return out;
  if (!tools.is_array()) return Invalid("tools", "must be an array");
  if (tools.size() > static_cast<size_t>(kMaxTools)) {
    return Invalid("tools", absl::StrCat("at most ", kMaxTools, " tools are allowed"));
  }
  absl::flat_hash_set<std::string> seen;
  for (size_t i = 0; i < tools.size(); ++i) {
    absl::StatusOr<llmserve::v1::Tool> tool =
        ParseOneTool(tools[i], absl::StrCat("tools[", i, "]"), &seen);
    if (!tool.ok()) return tool.status();
    out.push_back(*std::move(tool));
  }
  return out;
}

absl::Status ValidateTools(absl::Span<const llmserve::v1::Tool> tools) {
  if (tools.size() > static_cast<size_t>(kMaxTools)) {
    return Invalid("chat.tools", absl::StrCat("at most ", kMaxTools, " tools are allowed"));
  }
  absl::flat_hash_set<std::string> seen;
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string field = absl::StrCat("chat.tools[", i, "]");
    if (absl::Status status = CheckName(tools[i].name(), field + ".name", &seen); !status.ok()) {
      return status;
    }
    if (absl::Status status = CheckParametersText(tools[i].parameters(), field + ".parameters");
        !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

nlohmann::ordered_json ToolParametersSchema(const llmserve::v1::Tool& tool) {
  std::optional<nlohmann::ordered_json> schema;
  if (!tool.parameters().empty()) schema = ParseBoundedJson(tool.parameters());
  if (!schema.has_value() || !schema->is_object() || schema->empty()) {
    return nlohmann::ordered_json{{"type", "object"}};
  }
  return *std::move(schema);
}

std::string ToolsToTemplateJson(absl::Span<const llmserve::v1::Tool> tools) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const llmserve::v1::Tool& tool : tools) {
    nlohmann::ordered_json function;
    function["name"] = tool.name();
    if (!tool.description().empty()) function["description"] = tool.description();
    nlohmann::ordered_json parameters = ToolParametersSchema(tool);
    if (!parameters.contains("properties"))
      parameters["properties"] = nlohmann::ordered_json::object();
    function["parameters"] = std::move(parameters);
    out.push_back({{"type", "function"}, {"function", std::move(function)}});
  }
  return DumpJson(out);
}

}  // namespace llmserve::gateway::tool_calls
