// Renders one chat template with one conversation, for jinja2_corpus_test.py:
//   chat_template_render <template file> <context.json>
// context.json: {"messages": [OpenAI chat messages], "add_generation_prompt", "bos_token",
// "eos_token", "tools": [OpenAI tools] (optional), "now": "YYYY-MM-DDTHH:MM:SSZ"}.
// Prints the rendering (exit 0), or "ERROR: <message>" (exit 1).
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/chat_template/chat_template.h"
#include "nlohmann/json.hpp"

namespace {

using llmserve::common::ChatMessage;
using llmserve::common::ChatTemplate;
using llmserve::common::ChatTemplateInput;
using llmserve::common::ChatToolCall;

bool ReadFile(const char* path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream buffer;
  buffer << in.rdbuf();
  *out = buffer.str();
  return true;
}

int Fail(const std::string& message) {
  std::cout << "ERROR: " << message << std::endl;
  return 1;
}

std::string StringOr(const nlohmann::ordered_json& object, const char* key) {
  const auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) return Fail("usage: chat_template_render <template> <context.json>");
  std::string source;
  std::string context_text;
  if (!ReadFile(argv[1], &source)) return Fail(std::string("cannot read ") + argv[1]);
  if (!ReadFile(argv[2], &context_text)) return Fail(std::string("cannot read ") + argv[2]);
  const nlohmann::ordered_json context =
      nlohmann::ordered_json::parse(context_text, nullptr, false);
  if (context.is_discarded() || !context.is_object()) return Fail("context is not a JSON object");

  ChatTemplateInput input;
  for (const nlohmann::ordered_json& m :
       context.value("messages", nlohmann::ordered_json::array())) {
    ChatMessage message;
    message.role = StringOr(m, "role");
    message.content = StringOr(m, "content");
    message.content_is_none = m.contains("content") && m["content"].is_null();
    message.name = StringOr(m, "name");
    message.tool_call_id = StringOr(m, "tool_call_id");
    for (const nlohmann::ordered_json& call :
         m.value("tool_calls", nlohmann::ordered_json::array())) {
      const nlohmann::ordered_json function =
          call.value("function", nlohmann::ordered_json::object());
      message.tool_calls.push_back(ChatToolCall{.id = StringOr(call, "id"),
                                                .name = StringOr(function, "name"),
                                                .arguments = StringOr(function, "arguments")});
    }
    input.messages.push_back(std::move(message));
  }
  input.add_generation_prompt = context.value("add_generation_prompt", true);
  input.bos_token = StringOr(context, "bos_token");
  input.eos_token = StringOr(context, "eos_token");
  if (context.contains("tools")) input.tools_json = context["tools"].dump();
  if (context.contains("now")) {
    absl::Time now;
    std::string error;
    if (!absl::ParseTime(absl::RFC3339_full, StringOr(context, "now"), &now, &error)) {
      return Fail("bad now: " + error);
    }
    input.now = now;
  }

  absl::StatusOr<ChatTemplate> parsed = ChatTemplate::Parse(source);
  if (!parsed.ok()) return Fail(std::string(parsed.status().message()));
  absl::StatusOr<std::string> rendered = parsed->Render(input);
  if (!rendered.ok()) return Fail(std::string(rendered.status().message()));
  std::cout << *rendered;
  return 0;
}
