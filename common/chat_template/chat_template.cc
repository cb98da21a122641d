#include "common/chat_template/chat_template.h"

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/chat_template/lexer.h"
#include "common/chat_template/parser.h"
#include "common/chat_template/tokenizer_config_template.h"
#include "common/status/status_macros.h"
#include "nlohmann/json.hpp"

namespace llmserve::common {

absl::StatusOr<ChatTemplate> ChatTemplate::Parse(absl::string_view source, RenderLimits limits) {
  absl::StatusOr<std::vector<Token>> tokens = Lex(source);
  if (!tokens.ok()) return tokens.status();
  absl::StatusOr<ast::Body> body = ParseTemplate(*tokens);
  if (!body.ok()) return body.status();
  return ChatTemplate(std::make_shared<const std::string>(source),
                      std::make_shared<const ast::Body>(*std::move(body)), limits);
}

absl::StatusOr<ChatTemplate> ChatTemplate::FromTokenizerConfig(
    absl::string_view tokenizer_config_json, absl::string_view name) {
  absl::StatusOr<std::string> source =
      ChatTemplateSourceFromTokenizerConfig(tokenizer_config_json, name);
  if (!source.ok()) return source.status();
  return Parse(*source);
}

namespace {

// Values nested deeper than this in tools_json or tool-call arguments are refused (the renderer
// bounds value depth too; refusing here gives a clearer error).
constexpr int kMaxJsonDepth = 32;

absl::StatusOr<Value> ValueFromJson(const nlohmann::ordered_json& json, int depth) {
  if (depth > kMaxJsonDepth) return absl::InvalidArgumentError("JSON nested too deeply");
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::None();
    case nlohmann::ordered_json::value_t::boolean:
      return Value::Bool(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value::Int(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = json.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return absl::InvalidArgumentError("JSON integer out of range");
      }
      return Value::Int(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value::Float(json.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value::String(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      ValueList items;
      for (const nlohmann::ordered_json& item : json) {
        Value v;
        LLMSERVE_ASSIGN_OR_RETURN(v, ValueFromJson(item, depth + 1));
        items.push_back(std::move(v));
      }
      return Value::List(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      ValueDict dict;
      for (const auto& [key, item] : json.items()) {
        Value v;
        LLMSERVE_ASSIGN_OR_RETURN(v, ValueFromJson(item, depth + 1));
        dict.Set(key, std::move(v));
      }
      return Value::Dict(std::move(dict));
    }
    default:
      return absl::InvalidArgumentError("unsupported JSON value");
  }
}

// nlohmann throws on malformed input; nothing may leave this module as an exception. Ordered:
// the template sees the keys in the order the client sent them (json.loads keeps it too).
nlohmann::ordered_json ParseJson(const std::string& text) {
  return nlohmann::ordered_json::parse(text.begin(), text.end(), nullptr,
                                       /*allow_exceptions=*/false);
}

// The arguments as the template sees them: a dict when they are a JSON object (see ChatMessage).
Value ToolCallArguments(const std::string& arguments) {
  const nlohmann::ordered_json json = ParseJson(arguments);
  if (!json.is_discarded() && json.is_object()) {
    absl::StatusOr<Value> v = ValueFromJson(json, 0);
    if (v.ok()) return *std::move(v);
  }
  return Value::String(arguments);
}

Value MessageValue(const ChatMessage& message) {
  ValueDict dict;
  dict.Set("role", Value::String(message.role));
  dict.Set("content", message.content_is_none ? Value::None() : Value::String(message.content));
  if (!message.name.empty()) dict.Set("name", Value::String(message.name));
  if (!message.tool_calls.empty()) {
    ValueList calls;
    for (const ChatToolCall& call : message.tool_calls) {
      ValueDict function;
      function.Set("name", Value::String(call.name));
      function.Set("arguments", ToolCallArguments(call.arguments));
      ValueDict entry;
      entry.Set("id", Value::String(call.id));
      entry.Set("type", Value::String("function"));
      entry.Set("function", Value::Dict(std::move(function)));
      calls.push_back(Value::Dict(std::move(entry)));
    }
    dict.Set("tool_calls", Value::List(std::move(calls)));
  }
  if (!message.tool_call_id.empty()) {
    dict.Set("tool_call_id", Value::String(message.tool_call_id));
  }
  return Value::Dict(std::move(dict));
}

// The variables Render sets, and the globals the renderer provides.
constexpr absl::string_view kReservedVariables[] = {
    "messages",  "tools",     "add_generation_prompt", "bos_token",
    "eos_token", "documents", "raise_exception",       "namespace",
    "range",     "dict",      "strftime_now"};

bool IsIdentifier(absl::string_view name) {
  if (name.empty() || absl::ascii_isdigit(static_cast<unsigned char>(name[0]))) return false;
  for (const char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

}  // namespace

bool IsReservedTemplateVariable(absl::string_view name) {
  for (absl::string_view reserved : kReservedVariables) {
    if (name == reserved) return true;
  }
  return false;
}

namespace {

// The kwargs as template variables, in the object's order; INVALID_ARGUMENT as
// ValidateTemplateKwargsJson says.
absl::StatusOr<std::vector<std::pair<std::string, Value>>> TemplateKwargs(absl::string_view json) {
  if (json.size() > kMaxTemplateKwargsBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("is ", json.size(), " bytes, over the limit of ", kMaxTemplateKwargsBytes));
  }
  const nlohmann::ordered_json parsed = ParseJson(std::string(json));
  if (parsed.is_discarded() || !parsed.is_object()) {
    return absl::InvalidArgumentError("must be a JSON object");
  }
  if (parsed.size() > static_cast<size_t>(kMaxTemplateKwargs)) {
    return absl::InvalidArgumentError(
        absl::StrCat("has ", parsed.size(), " keys, over the limit of ", kMaxTemplateKwargs));
  }
  std::vector<std::pair<std::string, Value>> out;
  for (const auto& [key, item] : parsed.items()) {
    if (!IsIdentifier(key)) {
      return absl::InvalidArgumentError(
          absl::StrCat("key \"", key, "\" is not an identifier ([A-Za-z_][A-Za-z0-9_]*)"));
    }
    if (IsReservedTemplateVariable(key)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "key \"", key, "\" is a variable the chat template gets from the request itself"));
    }
    absl::StatusOr<Value> value = ValueFromJson(item, 0);
    if (!value.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(key, ": ", value.status().message()));
    }
    out.emplace_back(key, *std::move(value));
  }
  return out;
}

}  // namespace

absl::Status ValidateTemplateKwargsJson(absl::string_view json) {
  return TemplateKwargs(json).status();
}

absl::StatusOr<std::string> ChatTemplate::Render(const ChatTemplateInput& input) const {
  ValueList messages;
  messages.reserve(input.messages.size());
  for (const ChatMessage& message : input.messages) messages.push_back(MessageValue(message));
  Value tools = Value::None();
  if (!input.tools_json.empty()) {
    const nlohmann::ordered_json json = ParseJson(input.tools_json);
    if (json.is_discarded() || !json.is_array()) {
      return absl::InvalidArgumentError("chat template: tools must be a JSON array");
    }
    absl::StatusOr<Value> parsed = ValueFromJson(json, 0);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("chat template: tools: ", parsed.status().message()));
    }
    tools = *std::move(parsed);
  }
  ValueDict globals;
  globals.Set("messages", Value::List(std::move(messages)));
  globals.Set("add_generation_prompt", Value::Bool(input.add_generation_prompt));
  globals.Set("bos_token", Value::String(input.bos_token));
  globals.Set("eos_token", Value::String(input.eos_token));
  globals.Set("tools", std::move(tools));
  globals.Set("documents", Value::None());
  if (!input.template_kwargs_json.empty()) {
    absl::StatusOr<std::vector<std::pair<std::string, Value>>> kwargs =
        TemplateKwargs(input.template_kwargs_json);
    if (!kwargs.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("chat template: kwargs: ", kwargs.status().message()));
    }
    for (auto& [key, value] : *kwargs) globals.Set(key, std::move(value));
  }
  return RenderTemplate(*body_, globals, limits_, input.now.value_or(absl::Now()));
}

std::string RenderPlainChat(const ChatTemplateInput& input) {
  std::string out;
  for (const ChatMessage& message : input.messages) {
    absl::StrAppend(&out, message.role, ": ", message.content, "\n");
  }
  if (input.add_generation_prompt) out.append("assistant:");
  return out;
}

}  // namespace llmserve::common
