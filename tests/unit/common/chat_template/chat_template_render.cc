// Renders a chat template with conversations, for jinja2_corpus_test.py:
//   chat_template_render <template file> <context.json>
//     prints the rendering (exit 0), or "ERROR: <message>" (exit 1);
//   chat_template_render --out_dir=DIR <template file> <context.json>...
//     writes the i-th context's rendering to DIR/i.ok or "ERROR: <message>" to DIR/i.err (exit 0
//     once all are written): one process per template, as process start-up under the
//     sanitizers cost more than the renderings.
// context.json: {"messages": [OpenAI chat messages], "add_generation_prompt", "bos_token",
// "eos_token", "tools": [OpenAI tools] (optional), "now": "YYYY-MM-DDTHH:MM:SSZ"}.
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

// The rendering with the context in `context_path`, or the error (the template's, if it did not
// parse).
absl::StatusOr<std::string> Render(const absl::StatusOr<ChatTemplate>& parsed,
                                   const char* context_path) {
  std::string context_text;
  if (!ReadFile(context_path, &context_text)) {
    return absl::NotFoundError(std::string("cannot read ") + context_path);
  }
  const nlohmann::ordered_json context =
      nlohmann::ordered_json::parse(context_text, nullptr, false);
  if (context.is_discarded() || !context.is_object()) {
    return absl::InvalidArgumentError("context is not a JSON object");
  }

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
      return absl::InvalidArgumentError("bad now: " + error);
    }
    input.now = now;
  }
  if (!parsed.ok()) return parsed.status();
  return parsed->Render(input);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string out_flag = "--out_dir=";
  std::string out_dir;
  int first = 1;
  if (argc > 1 && std::string(argv[1]).rfind(out_flag, 0) == 0) {
    out_dir = std::string(argv[1]).substr(out_flag.size());
    first = 2;
  }
  if (out_dir.empty() ? argc != 3 : argc < first + 2) {
    return Fail(
        "usage: chat_template_render <template> <context.json> | chat_template_render "
        "--out_dir=DIR <template> <context.json>...");
  }
  std::string source;
  if (!ReadFile(argv[first], &source)) return Fail(std::string("cannot read ") + argv[first]);
  const absl::StatusOr<ChatTemplate> parsed = ChatTemplate::Parse(source);
  if (out_dir.empty()) {
    const absl::StatusOr<std::string> rendered = Render(parsed, argv[2]);
    if (!rendered.ok()) return Fail(std::string(rendered.status().message()));
    std::cout << *rendered;
    return 0;
  }
  for (int i = first + 1; i < argc; ++i) {
    const absl::StatusOr<std::string> rendered = Render(parsed, argv[i]);
    const std::string path =
        out_dir + "/" + std::to_string(i - first - 1) + (rendered.ok() ? ".ok" : ".err");
    std::ofstream out(path, std::ios::binary);
    out << (rendered.ok() ? *rendered : "ERROR: " + std::string(rendered.status().message()));
    if (!out.flush()) return Fail("cannot write " + path);
  }
  return 0;
}
