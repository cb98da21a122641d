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
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/chat_template/ast.h"
#include "common/chat_template/renderer.h"

namespace llmserve::common {

struct ChatMessage {
  std::string role;
  std::string content;
  // Optional; when empty the message has no "name" key (`message.name is defined` is false).
  std::string name;
};

struct ChatTemplateInput {
  std::vector<ChatMessage> messages;
  bool add_generation_prompt = true;
  std::string bos_token;
  std::string eos_token;
};

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

  // The template sees `messages` (a list of dicts with "role", "content" and, when non-empty,
  // "name"), `add_generation_prompt`, `bos_token`, `eos_token`, `tools` and `documents` (None,
  // as transformers passes them without tools), `raise_exception(msg)` and `namespace(...)`.
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
