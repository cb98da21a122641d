#include "gateway/frontends/openai/responses_request.h"

#include <exception>
#include <regex>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/json/ordered_json.h"

namespace llmserve::gateway {
namespace {

using openai_json::Find;
using openai_json::Invalid;
using openai_json::Json;

// clang-format off
constexpr absl::string_view kKnownFields[] = {
    "model", "input", "instructions", "max_output_tokens", "temperature", "top_p", "stream",
    "store", "previous_response_id", "text", "tools", "tool_choice", "parallel_tool_calls",
    "user", "metadata", "truncation", "include", "background", "reasoning", "top_logprobs",
    "service_tier", "stream_options", "prompt_cache_key", "safety_identifier"};
// clang-format on

constexpr size_t kMaxMetadataKeys = 16;
constexpr size_t kMaxMetadataKeyBytes = 64;
constexpr size_t kMaxMetadataValueBytes = 512;

bool IsKnown(absl::string_view key) {
  for (absl::string_view known : kKnownFields) {
    if (key == known) return true;
  }
  return false;
}

// Fields whose only accepted values ask for nothing we lack.
absl::Status RefuseWhatAsksForMore(const Json& body) {
  if (const Json* store = Find(body, "store")) {
    if (!store->is_boolean()) return Invalid("store", "must be true or false");
    if (store->get<bool>()) {
      return Invalid("store", "true is not supported: responses are not stored (send false)");
    }
  }
  if (Find(body, "previous_response_id") != nullptr) {
    return Invalid("previous_response_id",
                   "is not supported: responses are not stored; send the conversation as input");
  }
  if (const Json* background = Find(body, "background")) {
    if (!background->is_boolean() || background->get<bool>()) {
      return Invalid("background", "is not supported (only false)");
    }
  }
  if (const Json* truncation = Find(body, "truncation")) {
    if (*truncation != "disabled")
      return Invalid("truncation", "is not supported (only \"disabled\")");
  }
  if (const Json* include = Find(body, "include")) {
    if (!include->is_array() || !include->empty()) {
      return Invalid("include", "is not supported (only an empty list)");
    }
  }
  if (const Json* reasoning = Find(body, "reasoning")) {
    if (!reasoning->is_object()) return Invalid("reasoning", "must be an object");
    for (const auto& [key, value] : reasoning->items()) {
      if (!value.is_null()) {
        return Invalid(absl::StrCat("reasoning.", key),
                       "is not supported: a model reasons as its chat template and reasoning "
                       "parser say");
      }
    }
  }
  if (const Json* top_logprobs = Find(body, "top_logprobs")) {
    if (!top_logprobs->is_number_integer() || top_logprobs->get<int64_t>() != 0) {
      return Invalid("top_logprobs", "is not supported (only 0)");
    }
  }
  if (const Json* tier = Find(body, "service_tier")) {
    if (*tier != "auto" && *tier != "default") {
      return Invalid("service_tier", "is not supported (only \"auto\" or \"default\")");
    }
  }
  if (const Json* options = Find(body, "stream_options")) {
    if (!options->is_object()) return Invalid("stream_options", "must be an object");
    for (const auto& [key, value] : options->items()) {
      if (key != "include_obfuscation" || !(value.is_null() || value == false)) {
        return Invalid(absl::StrCat("stream_options.", key), "is not supported");
      }
    }
  }
  for (const char* field : {"prompt_cache_key", "safety_identifier"}) {
    if (const Json* value = Find(body, field); value != nullptr && !value->is_string()) {
      return Invalid(field, "must be a string");
    }
  }
  return absl::OkStatus();
}

// A message's content: a string, or a list of text parts (input_text from the caller,
// output_text from an earlier response sent back).
absl::StatusOr<std::string> ItemText(const Json& content, const std::string& field) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return Invalid(field, "must be a string or a list of parts");
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& part = content[i];
    const std::string at = absl::StrCat(field, "[", i, "]");
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
      return Invalid(at, "must be an object with a 'type'");
    }
    const std::string& type = part["type"].get_ref<const std::string&>();
    if (type != "input_text" && type != "output_text") {
      return Invalid(absl::StrCat(at, ".type"),
                     absl::StrCat("\"", type.substr(0, 64),
                                  "\" is not supported (only input_text and output_text)"));
    }
    if (!part.contains("text") || !part["text"].is_string()) {
      return Invalid(absl::StrCat(at, ".text"), "must be a string");
    }
    text += part["text"].get<std::string>();
  }
  return text;
}

absl::StatusOr<std::string> StringField(const Json& item, const char* key, const std::string& at) {
  const Json* value = Find(item, key);
  if (value == nullptr || !value->is_string()) {
    return Invalid(absl::StrCat(at, ".", key), "must be a string");
  }
  return value->get<std::string>();
}

// The Responses input as chat messages.
absl::Status AppendInput(const Json& input, Json& messages) {
  if (input.is_string()) {
    messages.push_back({{"role", "user"}, {"content", input}});
    return absl::OkStatus();
  }
  if (!input.is_array() || input.empty()) {
    return Invalid("input", "must be a string or a non-empty list of items");
  }
  for (size_t i = 0; i < input.size(); ++i) {
    const Json& item = input[i];
    const std::string at = absl::StrCat("input[", i, "]");
    if (!item.is_object()) return Invalid(at, "must be an object");
    std::string type = "message";
    if (const Json* given = Find(item, "type")) {
      if (!given->is_string()) return Invalid(absl::StrCat(at, ".type"), "must be a string");
      type = given->get<std::string>();
    }
    if (type == "message") {
      absl::StatusOr<std::string> role = StringField(item, "role", at);
      if (!role.ok()) return role.status();
      if (*role != "user" && *role != "system" && *role != "developer" && *role != "assistant") {
        return Invalid(absl::StrCat(at, ".role"), "must be user, system, developer or assistant");
      }
      const Json* content = Find(item, "content");
      if (content == nullptr) return Invalid(absl::StrCat(at, ".content"), "is required");
      absl::StatusOr<std::string> text = ItemText(*content, absl::StrCat(at, ".content"));
      if (!text.ok()) return text.status();
      messages.push_back({{"role", *role}, {"content", *std::move(text)}});
    } else if (type == "function_call") {
      absl::StatusOr<std::string> call_id = StringField(item, "call_id", at);
      if (!call_id.ok()) return call_id.status();
      absl::StatusOr<std::string> name = StringField(item, "name", at);
      if (!name.ok()) return name.status();
      absl::StatusOr<std::string> arguments = StringField(item, "arguments", at);
      if (!arguments.ok()) return arguments.status();
      Json call = {{"id", *call_id},
                   {"type", "function"},
                   {"function", {{"name", *name}, {"arguments", *arguments}}}};
      // Calls one after another are one assistant turn.
      if (!messages.empty() && messages.back()["role"] == "assistant" &&
          messages.back().contains("tool_calls")) {
        messages.back()["tool_calls"].push_back(std::move(call));
      } else {
        messages.push_back({{"role", "assistant"},
                            {"content", nullptr},
                            {"tool_calls", Json::array({std::move(call)})}});
      }
    } else if (type == "function_call_output") {
      absl::StatusOr<std::string> call_id = StringField(item, "call_id", at);
      if (!call_id.ok()) return call_id.status();
      const Json* output = Find(item, "output");
      if (output == nullptr) return Invalid(absl::StrCat(at, ".output"), "is required");
      absl::StatusOr<std::string> text = ItemText(*output, absl::StrCat(at, ".output"));
      if (!text.ok()) return text.status();
      messages.push_back(
          {{"role", "tool"}, {"tool_call_id", *call_id}, {"content", *std::move(text)}});
    } else if (type == "reasoning") {
      // An earlier response's reasoning sent back: chat templates drop it from the history.
      continue;
    } else {
      return Invalid(absl::StrCat(at, ".type"),
                     absl::StrCat("\"", type.substr(0, 64),
                                  "\" is not supported (message, function_call, "
                                  "function_call_output and reasoning items)"));
    }
  }
  return absl::OkStatus();
}

// Responses tools are flat ({"type": "function", "name": ...}); chat's nest the function.
absl::StatusOr<Json> ChatTools(const Json& tools) {
  if (!tools.is_array()) return Invalid("tools", "must be a list");
  Json out = Json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& tool = tools[i];
    const std::string at = absl::StrCat("tools[", i, "]");
    if (!tool.is_object()) return Invalid(at, "must be an object");
    if (tool.value("type", "") != "function") {
      return Invalid(absl::StrCat(at, ".type"), "is not supported (only function tools)");
    }
    Json function = Json::object();
    for (const auto& [key, value] : tool.items()) {
      if (key == "type") continue;
      if (key != "name" && key != "description" && key != "parameters" && key != "strict") {
        return Invalid(absl::StrCat(at, ".", key), "is not a field of a function tool");
      }
      function[key] = value;
    }
    out.push_back({{"type", "function"}, {"function", std::move(function)}});
  }
  return out;
}

// {"type": "function", "name": N} -> chat's {"type": "function", "function": {"name": N}}.
absl::StatusOr<Json> ChatToolChoice(const Json& choice) {
  if (choice.is_string()) return choice;
  if (!choice.is_object() || choice.value("type", "") != "function" || !choice.contains("name")) {
    return Invalid("tool_choice",
                   "must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
                   "\"name\": ...}");
  }
  return Json{{"type", "function"}, {"function", {{"name", choice["name"]}}}};
}

absl::Status CheckMetadata(const Json& metadata) {
  if (!metadata.is_object()) return Invalid("metadata", "must be an object of strings");
  if (metadata.size() > kMaxMetadataKeys) {
    return Invalid("metadata", absl::StrCat("has more than ", kMaxMetadataKeys, " keys"));
  }
  for (const auto& [key, value] : metadata.items()) {
    if (key.size() > kMaxMetadataKeyBytes || !value.is_string() ||
        value.get_ref<const std::string&>().size() > kMaxMetadataValueBytes) {
      return Invalid("metadata", absl::StrCat("keys are at most ", kMaxMetadataKeyBytes,
                                              " bytes and values strings of at most ",
                                              kMaxMetadataValueBytes, " bytes"));
    }
  }
  return absl::OkStatus();
}

// The chat parser names chat's fields; the client wrote the Responses ones.
absl::Status InResponsesTerms(const absl::Status& status) {
  if (status.ok()) return status;
  std::string message(status.message());
  static const std::regex* const kToolField = new std::regex(R"(tools\[(\d+)\]\.function\.)");
  message = std::regex_replace(message, *kToolField, "tools[$1].");
  message = absl::StrReplaceAll(message, {{"max_completion_tokens", "max_output_tokens"},
                                          {"response_format", "text.format"}});
  return absl::Status(status.code(), message);
}

}  // namespace

absl::StatusOr<ResponsesRequest> ParseResponsesRequest(absl::string_view body) {
  absl::StatusOr<Json> document = common::ParseOrderedJson(
      std::string_view(body.data(), body.size()),
      {.max_depth = kMaxJsonDepth, .max_values = kMaxJsonValues, .what = "the body"});
  if (!document.ok()) return document.status();
  const Json& json = *document;
  if (!json.is_object()) return absl::InvalidArgumentError("the body must be a JSON object");
  ResponsesRequest out;
  Json chat = Json::object();
  try {
    for (const auto& [key, value] : json.items()) {
      if (!IsKnown(key)) {
        return Invalid(key.substr(0, 64), "is not a field of the Responses API we support");
      }
    }
    if (absl::Status refused = RefuseWhatAsksForMore(json); !refused.ok()) return refused;
    if (const Json* model = Find(json, "model")) chat["model"] = *model;
    Json messages = Json::array();
    if (const Json* instructions = Find(json, "instructions")) {
      if (!instructions->is_string()) return Invalid("instructions", "must be a string");
      messages.push_back({{"role", "system"}, {"content", *instructions}});
    }
    const Json* input = Find(json, "input");
    if (input == nullptr) return Invalid("input", "is required");
    if (absl::Status appended = AppendInput(*input, messages); !appended.ok()) return appended;
    chat["messages"] = std::move(messages);
    if (const Json* max = Find(json, "max_output_tokens")) chat["max_completion_tokens"] = *max;
    for (const char* field : {"temperature", "top_p", "stream", "parallel_tool_calls", "user"}) {
      if (const Json* value = Find(json, field)) chat[field] = *value;
    }
    if (const Json* tools = Find(json, "tools")) {
      absl::StatusOr<Json> converted = ChatTools(*tools);
      if (!converted.ok()) return converted.status();
      chat["tools"] = *std::move(converted);
    }
    if (const Json* choice = Find(json, "tool_choice")) {
      absl::StatusOr<Json> converted = ChatToolChoice(*choice);
      if (!converted.ok()) return converted.status();
      chat["tool_choice"] = *std::move(converted);
    }
    Json text = {{"format", {{"type", "text"}}}};
    if (const Json* given = Find(json, "text")) {
      if (!given->is_object()) return Invalid("text", "must be an object");
      for (const auto& [key, value] : given->items()) {
        if (key != "format") return Invalid(absl::StrCat("text.", key), "is not supported");
      }
      if (const Json* format = Find(*given, "format")) {
        if (!format->is_object() || !format->contains("type") || !(*format)["type"].is_string()) {
          return Invalid("text.format", "must be an object with a 'type'");
        }
        const std::string& type = (*format)["type"].get_ref<const std::string&>();
        if (type == "json_schema") {
          // Chat nests the schema's fields under "json_schema".
          Json schema = Json::object();
          for (const auto& [key, value] : format->items()) {
            if (key != "type") schema[key] = value;
          }
          chat["response_format"] = {{"type", "json_schema"}, {"json_schema", std::move(schema)}};
        } else if (type == "json_object") {
          chat["response_format"] = {{"type", "json_object"}};
        } else if (type != "text") {
          return Invalid("text.format.type", "must be text, json_object or json_schema");
        }
        text["format"] = *format;
      }
    }
    Json metadata = Json::object();
    if (const Json* given = Find(json, "metadata")) {
      if (absl::Status checked = CheckMetadata(*given); !checked.ok()) return checked;
      metadata = *given;
    }
    absl::StatusOr<OpenAiRequest> parsed =
        ParseOpenAiRequest(OpenAiEndpoint::kChatCompletions, chat.dump());
    if (!parsed.ok()) return InResponsesTerms(parsed.status());
    out.chat = *std::move(parsed);
    if (!out.chat.constraint_field.empty()) out.chat.constraint_field = "text.format";
    const auto echoed = [&json](const char* field, Json fallback) {
      const Json* value = Find(json, field);
      return value == nullptr ? std::move(fallback) : *value;
    };
    out.echo = {{"instructions", echoed("instructions", nullptr)},
                {"max_output_tokens", echoed("max_output_tokens", nullptr)},
                {"metadata", std::move(metadata)},
                {"parallel_tool_calls", echoed("parallel_tool_calls", true)},
                {"temperature", echoed("temperature", 1.0)},
                {"text", std::move(text)},
                {"tool_choice", echoed("tool_choice", "auto")},
                {"tools", echoed("tools", Json::array())},
                {"top_p", echoed("top_p", 1.0)},
                {"user", echoed("user", nullptr)}};
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("malformed request: ", e.what()));
  }
  return out;
}

}  // namespace llmserve::gateway
