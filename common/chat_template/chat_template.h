// Renders a chat conversation into a prompt with a model's Hugging Face chat template (the
// Jinja2 "chat_template" of tokenizer_config.json), producing the string transformers'
// apply_chat_template(messages, tokenize=False, add_generation_prompt=...) produces.
//
// A template is parsed once, when the gateway discovers a model: a template using Jinja
// features outside the supported subset (docs/chat-templates.md) is rejected then, with the
// line and column, rather than rendered wrongly. Rendering errors (raise_exception in the
// template, e.g. non-alternating roles; invalid operations on the given messages) come back
// from Render as INVALID_ARGUMENT, limits exceeded as OUT_OF_RANGE.
//
//   absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(source);
//   absl::StatusOr<std::string> prompt = t->Render({.messages = {{"user", "Hi"}}});
//
// Thread-safety: a ChatTemplate is immutable after Parse; Render is const and safe to call
// concurrently. Copies share the parsed template.
#ifndef LLMSERVE_COMMON_CHAT_TEMPLATE_CHAT_TEMPLATE_H_
#define LLMSERVE_COMMON_CHAT_TEMPLATE_CHAT_TEMPLATE_H_

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/chat_template/ast.h"
#include "common/chat_template/renderer.h"

namespace llmserve::common {

// One call of an assistant turn, as OpenAI's API carries it.
struct ChatToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text
};

struct ChatMessage {
  std::string role;
  std::string content;
  // Optional; when empty the message has no "name" key (`message.name is defined` is false).
  std::string name;
  // OpenAI's `content: null` (an assistant turn that only calls tools): the template sees None.
  bool content_is_none = false;
  // When non-empty the template sees message.tool_calls =
  //   [{"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}]
  // where `arguments` is a dict when the JSON text parses as a JSON object, else the string.
  // That is vLLM's behaviour, not bare transformers' (which passes whatever the caller gave):
  // templates such as Qwen2.5's write `arguments | tojson` and Llama 3.1's iterate it, so they
  // need the object.
  std::vector<ChatToolCall> tool_calls;
  // When non-empty the template sees message.tool_call_id (a `tool` message's answer to).
  std::string tool_call_id;
};

struct ChatTemplateInput {
  std::vector<ChatMessage> messages;
  bool add_generation_prompt = true;
  std::string bos_token;
  std::string eos_token;
  // A JSON array of OpenAI tools ([{"type": "function", "function": {...}}]) the template sees
  // as `tools`; empty: `tools` is None. Render fails with INVALID_ARGUMENT when it is not a
  // JSON array.
  std::string tools_json;
  // A JSON object whose keys become variables of the template (chat_template_kwargs); empty:
  // none. Render fails with INVALID_ARGUMENT when it is not a JSON object, or when a key is not
  // an identifier or names one of the variables above (IsReservedTemplateVariable).
  std::string template_kwargs_json;
  // strftime_now()'s clock (tests pin it); unset: the real clock. Formatted in UTC.
  std::optional<absl::Time> now;
};

// Whether `name` is one of the variables Render sets itself (messages, tools, ...) or a global
// function of the renderer (range, namespace, ...), which a template kwarg may not replace.
bool IsReservedTemplateVariable(absl::string_view name);

// Limits of ChatTemplateInput::template_kwargs_json.
inline constexpr size_t kMaxTemplateKwargsBytes = 16 << 10;
inline constexpr int kMaxTemplateKwargs = 64;

// OK when `json` is a JSON object of at most kMaxTemplateKwargs keys and kMaxTemplateKwargsBytes,
// each key an identifier other than a reserved variable, each value nested at most 32 deep;
// otherwise INVALID_ARGUMENT saying what is wrong (the caller names the field).
absl::Status ValidateTemplateKwargsJson(absl::string_view json);

class ChatTemplate {
 public:
  // INVALID_ARGUMENT "chat template: line L, column C: ..." for a syntax error or a feature
  // outside the supported subset.
  static absl::StatusOr<ChatTemplate> Parse(absl::string_view source, RenderLimits limits = {});

  // The template of a tokenizer_config.json: "chat_template" as a string, or as a list of
  // {"name", "template"} from which `name` is taken (transformers uses "default"). NOT_FOUND
  // when the config has no such template (use RenderPlainChat then); INVALID_ARGUMENT for
  // malformed JSON or a template Parse rejects.
  static absl::StatusOr<ChatTemplate> FromTokenizerConfig(absl::string_view tokenizer_config_json,
                                                          absl::string_view name = "default");

  // The template sees `messages` (a list of dicts with "role", "content" and, when given,
  // "name", "tool_calls", "tool_call_id"), `add_generation_prompt`, `bos_token`, `eos_token`,
  // `tools` (the parsed tools_json, or None), `documents` (None), each key of
  // template_kwargs_json, and the globals
  // raise_exception(msg), namespace(...), range(...), dict(...), strftime_now(format).
  absl::StatusOr<std::string> Render(const ChatTemplateInput& input) const;

  const std::string& source() const { return *source_; }

 private:
  ChatTemplate(std::shared_ptr<const std::string> source, std::shared_ptr<const ast::Body> body,
               RenderLimits limits)
      : source_(std::move(source)), body_(std::move(body)), limits_(limits) {}

  std::shared_ptr<const std::string> source_;
  std::shared_ptr<const ast::Body> body_;
  RenderLimits limits_;
};

// The prompt for a model without a chat template (GPT-2 and other base models): one
// "role: content\n" line per message (the name, if any, is not shown), then "assistant:" when
// add_generation_prompt. No special tokens are added; the tokenizer adds BOS if the model
// wants one.
std::string RenderPlainChat(const ChatTemplateInput& input);

}  // namespace llmserve::common

#endif  // LLMSERVE_COMMON_CHAT_TEMPLATE_CHAT_TEMPLATE_H_
