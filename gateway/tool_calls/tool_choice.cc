#include "gateway/tool_calls/tool_choice.h"

#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gateway/tool_calls/call_object.h"
#include "gateway/tool_calls/json_scan.h"
#include "gateway/tool_calls/tool_call_id.h"
#include "gateway/tool_calls/tool_call_scanner.h"
#include "gateway/tool_calls/tools.h"

namespace llmserve::gateway::tool_calls {
namespace {

absl::Status Invalid(std::string_view field, std::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(std::string(field), ": ", std::string(problem)));
}

ToolChoice Default(absl::Span<const llmserve::v1::Tool> tools) {
  return ToolChoice{tools.empty() ? ToolChoice::Mode::kNone : ToolChoice::Mode::kAuto, ""};
}

// A function the model must call: one of `tools`, whatever its name (a tool may be called "none").
absl::StatusOr<ToolChoice> FromFunctionName(std::string_view field, std::string_view name,
                                            absl::Span<const llmserve::v1::Tool> tools) {
  if (tools.empty()) return Invalid(field, "a named function needs `tools`");
  if (!IsKnownTool(name, tools)) {
    return Invalid(field,
                   absl::StrCat("function \"", std::string(name), "\" is not among `tools`"));
  }
  return ToolChoice{ToolChoice::Mode::kFunction, std::string(name)};
}

// "none" / "auto" / "required" and a function name, checked against `tools`.
absl::StatusOr<ToolChoice> FromKeyword(std::string_view field, std::string_view value,
                                       absl::Span<const llmserve::v1::Tool> tools,
                                       bool allow_function_name) {
  if (value == "none") return ToolChoice{ToolChoice::Mode::kNone, ""};
  if (value == "auto") return ToolChoice{ToolChoice::Mode::kAuto, ""};
  if (value == "required") {
    if (tools.empty()) return Invalid(field, "\"required\" needs at least one tool in `tools`");
    return ToolChoice{ToolChoice::Mode::kRequired, ""};
  }
  if (!allow_function_name) {
    return Invalid(field, absl::StrCat("unknown value \"", std::string(value),
                                       "\": expected \"none\", \"auto\", \"required\" or "
                                       "{\"type\": \"function\", \"function\": {\"name\": ...}}"));
  }
  return FromFunctionName(field, value, tools);
}

}  // namespace

absl::StatusOr<ToolChoice> ParseToolChoice(const nlohmann::json& value,
                                           absl::Span<const llmserve::v1::Tool> tools) {
  if (value.is_null()) return Default(tools);
  if (value.is_string()) {
    return FromKeyword("tool_choice", value.get_ref<const std::string&>(), tools, false);
  }
  if (!value.is_object()) return Invalid("tool_choice", "must be a string or an object");
  const auto type = value.find("type");
  if (type == value.end() || !type->is_string() ||
      type->get_ref<const std::string&>() != "function") {
    return Invalid("tool_choice.type", "must be \"function\"");
  }
  const auto function = value.find("function");
  if (function == value.end() || !function->is_object()) {
    return Invalid("tool_choice.function", "must be an object with a name");
  }
  const auto name = function->find("name");
  if (name == function->end() || !name->is_string() ||
      name->get_ref<const std::string&>().empty()) {
    return Invalid("tool_choice.function.name", "must be a non-empty string");
  }
  // The object form names a function, never a mode: a tool may be called "none" or "auto".
  return FromFunctionName("tool_choice.function.name", name->get_ref<const std::string&>(), tools);
}

absl::StatusOr<ToolChoice> ParseToolChoiceName(std::string_view value,
                                               absl::Span<const llmserve::v1::Tool> tools) {
  if (value.empty()) return Default(tools);
  return FromKeyword("chat.tool_choice", value, tools, true);
}

absl::StatusOr<ToolChoice> ParseChatToolChoice(const llmserve::v1::ChatPrompt& chat,
                                               absl::Span<const llmserve::v1::Tool> tools) {
  if (chat.tool_choice_function().empty()) return ParseToolChoiceName(chat.tool_choice(), tools);
  if (!chat.tool_choice().empty()) {
    return Invalid("chat.tool_choice_function", "cannot be combined with chat.tool_choice");
  }
  return FromFunctionName("chat.tool_choice_function", chat.tool_choice_function(), tools);
}

std::string ToolChoiceSchema(const ToolChoice& choice, absl::Span<const llmserve::v1::Tool> tools,
                             bool parallel_tool_calls) {
  if (choice.mode == ToolChoice::Mode::kFunction) {
    for (const llmserve::v1::Tool& tool : tools) {
      if (tool.name() == choice.function) return DumpJson(ToolParametersSchema(tool));
    }
    return DumpJson(nlohmann::ordered_json{{"type", "object"}});
  }
  if (choice.mode != ToolChoice::Mode::kRequired) return "";
  nlohmann::ordered_json any_of = nlohmann::ordered_json::array();
  for (const llmserve::v1::Tool& tool : tools) {
    nlohmann::ordered_json item;
    item["type"] = "object";
    item["properties"]["name"]["const"] = tool.name();
    item["properties"]["parameters"] = ToolParametersSchema(tool);
    item["required"] = {"name", "parameters"};
    any_of.push_back(std::move(item));
  }
  nlohmann::ordered_json schema;
  schema["type"] = "array";
  schema["minItems"] = 1;
  if (!parallel_tool_calls) schema["maxItems"] = 1;
  schema["items"]["anyOf"] = std::move(any_of);
  return DumpJson(schema);
}

absl::StatusOr<std::vector<llmserve::v1::ToolCall>> ParseConstrainedToolCalls(
    const ToolChoice& choice, std::string_view output) {
  std::vector<llmserve::v1::ToolCall> calls;
  if (choice.mode != ToolChoice::Mode::kFunction && choice.mode != ToolChoice::Mode::kRequired) {
    return absl::InvalidArgumentError(
        "tool_choice is neither \"required\" nor a named function: the output is not constrained");
  }
  const std::optional<nlohmann::ordered_json> parsed = ParseBoundedJson(output);
  if (!parsed.has_value()) {
    return absl::InvalidArgumentError("the constrained tool-call output is not complete JSON");
  }
  if (choice.mode == ToolChoice::Mode::kFunction) {
    if (!parsed->is_object()) {
      return absl::InvalidArgumentError("the named function's arguments are not a JSON object");
    }
    llmserve::v1::ToolCall call;
    call.set_id(NewToolCallId());
    call.set_name(choice.function);
    call.set_arguments(DumpJson(*parsed));
    calls.push_back(std::move(call));
    return calls;
  }
  if (!parsed->is_array() || parsed->empty() ||
      parsed->size() > static_cast<size_t>(kMaxToolCalls)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the required tool calls are not a JSON array of 1 to ", kMaxToolCalls, " calls"));
  }
  for (const nlohmann::ordered_json& item : *parsed) {
    std::optional<CallParts> parts = CallFromJson(item, nullptr);
    if (!parts.has_value()) {
      return absl::InvalidArgumentError(
          "a required tool call is not {\"name\": ..., \"parameters\": {...}}");
    }
    llmserve::v1::ToolCall call;
    call.set_id(NewToolCallId());
    call.set_name(std::move(parts->name));
    call.set_arguments(std::move(parts->arguments));
    calls.push_back(std::move(call));
  }
  return calls;
}

}  // namespace llmserve::gateway::tool_calls
