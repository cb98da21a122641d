#include "common/chat_template/chat_template.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/chat_template/lexer.h"
#include "common/chat_template/parser.h"
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
  if (it->is_string()) return Parse(it->get_ref<const std::string&>());
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
      return Parse(entry_template->get_ref<const std::string&>());
    }
  }
  return absl::NotFoundError(
      absl::StrCat("tokenizer_config.json has no chat template named \"", name, "\""));
}

absl::StatusOr<std::string> ChatTemplate::Render(const ChatTemplateInput& input) const {
  ValueList messages;
  messages.reserve(input.messages.size());
  for (const ChatMessage& message : input.messages) {
    ValueDict dict;
    dict.Set("role", Value::String(message.role));
    dict.Set("content", Value::String(message.content));
    if (!message.name.empty()) dict.Set("name", Value::String(message.name));
    messages.push_back(Value::Dict(std::move(dict)));
  }
  ValueDict globals;
  globals.Set("messages", Value::List(std::move(messages)));
  globals.Set("add_generation_prompt", Value::Bool(input.add_generation_prompt));
  globals.Set("bos_token", Value::String(input.bos_token));
  globals.Set("eos_token", Value::String(input.eos_token));
  globals.Set("tools", Value::None());
  globals.Set("documents", Value::None());
  return RenderTemplate(*body_, globals, limits_);
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
