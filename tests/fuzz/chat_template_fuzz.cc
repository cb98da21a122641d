// Fuzz target: the chat-template interpreter, which runs the Jinja a model directory ships (a
// tokenizer_config.json the operator downloaded) on the messages a client sends.
//
// Input: TEMPLATE '\0' MESSAGES. MESSAGES is JSON, either a list of {"role", "content", "name"}
// or {"messages": [...], "add_generation_prompt": bool, "bos_token": str, "eos_token": str}; when
// it is absent or not of that shape a fixed conversation is used, so that every template still
// renders. A TEMPLATE that starts with '{' is also tried as a whole tokenizer_config.json.
//
// Parse must give a template or INVALID_ARGUMENT; Render a string within the output limit,
// INVALID_ARGUMENT or OUT_OF_RANGE (a limit). The limits are far below the gateway's defaults so
// that a template looping for its whole step budget still costs well under a millisecond or so:
// what is bounded is the same code either way.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/chat_template/chat_template.h"
#include "common/chat_template/renderer.h"

namespace {

using llmserve::common::ChatMessage;
using llmserve::common::ChatTemplate;
using llmserve::common::ChatTemplateInput;
using llmserve::common::RenderLimits;
using Json = nlohmann::json;

constexpr RenderLimits kLimits = {
    .max_output_bytes = 64 << 10, .max_steps = 20'000, .max_allocated_bytes = 1 << 20};
// More messages would only make renders slower without reaching new code.
constexpr size_t kMaxMessages = 16;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "chat_template_fuzz: %s\n", what);
  std::abort();
}

ChatTemplateInput DefaultInput() {
  ChatTemplateInput input;
  input.messages = {{"system", "You are helpful.", ""},
                    {"user", "Hi \xc3\xa9\xf0\x9f\x98\x80 <b>", "alice"},
                    {"assistant", "Hello! How can I help?", ""},
                    {"user", "  trailing space  \n", ""}};
  input.bos_token = "<s>";
  input.eos_token = "</s>";
  return input;
}

// The messages of `list`, false when it is not a list of message objects with string fields.
bool ReadMessages(const Json& list, std::vector<ChatMessage>* messages) {
  if (!list.is_array() || list.size() > kMaxMessages) return false;
  for (const Json& entry : list) {
    if (!entry.is_object()) return false;
    ChatMessage message;
    for (auto [field, out] : {std::pair<const char*, std::string*>{"role", &message.role},
                              {"content", &message.content},
                              {"name", &message.name}}) {
      const auto it = entry.find(field);
      if (it == entry.end()) continue;
      if (!it->is_string()) return false;
      *out = it->get<std::string>();
    }
    messages->push_back(std::move(message));
  }
  return true;
}

ChatTemplateInput ParseInput(absl::string_view text) {
  ChatTemplateInput input = DefaultInput();
  const Json json = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return input;
  std::vector<ChatMessage> messages;
  if (json.is_array()) {
    if (ReadMessages(json, &messages)) input.messages = std::move(messages);
    return input;
  }
  if (!json.is_object()) return input;
  if (const auto it = json.find("messages"); it != json.end() && ReadMessages(*it, &messages)) {
    input.messages = std::move(messages);
  }
  if (const auto it = json.find("add_generation_prompt"); it != json.end() && it->is_boolean()) {
    input.add_generation_prompt = it->get<bool>();
  }
  if (const auto it = json.find("bos_token"); it != json.end() && it->is_string()) {
    input.bos_token = it->get<std::string>();
  }
  if (const auto it = json.find("eos_token"); it != json.end() && it->is_string()) {
    input.eos_token = it->get<std::string>();
  }
  return input;
}

void RenderAndCheck(const ChatTemplate& chat_template, const ChatTemplateInput& input) {
  const absl::StatusOr<std::string> prompt = chat_template.Render(input);
  if (prompt.ok()) {
    if (prompt->size() > kLimits.max_output_bytes) Fail("a prompt over max_output_bytes");
    return;
  }
  if (!absl::IsInvalidArgument(prompt.status()) && !absl::IsOutOfRange(prompt.status())) {
    std::fprintf(stderr, "%s\n", prompt.status().ToString().c_str());
    Fail("Render failed with a code other than INVALID_ARGUMENT or OUT_OF_RANGE");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find('\0');
  const absl::string_view source = input.substr(0, split);
  const ChatTemplateInput messages =
      split == absl::string_view::npos ? DefaultInput() : ParseInput(input.substr(split + 1));

  if (!source.empty() && source.front() == '{') {
    const absl::StatusOr<ChatTemplate> from_config = ChatTemplate::FromTokenizerConfig(source);
    if (from_config.ok()) {
      // FromTokenizerConfig keeps the default (production) limits; render under the fuzzing ones.
      const absl::StatusOr<ChatTemplate> bounded =
          ChatTemplate::Parse(from_config->source(), kLimits);
      if (!bounded.ok()) Fail("a template from a config does not parse again");
      RenderAndCheck(*bounded, messages);
    } else if (!absl::IsInvalidArgument(from_config.status()) &&
               !absl::IsNotFound(from_config.status())) {
      Fail("FromTokenizerConfig failed with a code other than INVALID_ARGUMENT or NOT_FOUND");
    }
  }

  const absl::StatusOr<ChatTemplate> chat_template = ChatTemplate::Parse(source, kLimits);
  if (!chat_template.ok()) {
    if (!absl::IsInvalidArgument(chat_template.status())) {
      Fail("Parse failed with a code other than INVALID_ARGUMENT");
    }
    return 0;
  }
  RenderAndCheck(*chat_template, messages);
  return 0;
}
