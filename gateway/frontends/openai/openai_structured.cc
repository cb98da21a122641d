#include "gateway/frontends/openai/openai_structured.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "gateway/frontends/openai/openai_json.h"
#include "gateway/tool_calls/tool_choice.h"
#include "gateway/tool_calls/tools.h"

namespace llmserve::gateway {
namespace {

using openai_json::Find;
using openai_json::Invalid;
using openai_json::Json;

// A schema given as an object, or (vLLM accepts both for guided_json) as JSON text.
absl::StatusOr<std::string> SchemaText(const Json& value, absl::string_view field) {
  if (value.is_object()) return value.dump();
  if (value.is_boolean()) return value.dump();
  if (value.is_string()) {
    const Json parsed = Json::parse(value.get<std::string>(), nullptr, false);
    if (parsed.is_discarded() || !(parsed.is_object() || parsed.is_boolean())) {
      return Invalid(field, "must be a JSON Schema (an object, or its JSON text)");
    }
    return parsed.dump();
  }
  return Invalid(field, "must be a JSON Schema (an object)");
}

absl::StatusOr<std::string> NonEmptyString(const Json& value, absl::string_view field) {
  if (!value.is_string()) return Invalid(field, "must be a string");
  std::string text = value.get<std::string>();
  if (text.empty()) return Invalid(field, "must not be empty");
  return text;
}

absl::Status SetChoices(const Json& value, absl::string_view field,
                        ::llmserve::v1::StructuredOutput* out) {
  if (!value.is_array() || value.empty())
    return Invalid(field, "must be a non-empty list of strings");
  for (const Json& choice : value) {
    if (!choice.is_string()) return Invalid(field, "must be a non-empty list of strings");
    out->mutable_choice()->add_choices(choice.get<std::string>());
  }
  return absl::OkStatus();
}

// `response_format`.
absl::Status ParseResponseFormat(const Json& format, ::llmserve::v1::StructuredOutput* out,
                                 bool* set) {
  if (!format.is_object()) return Invalid("response_format", "must be an object");
  const Json* type = Find(format, "type");
  if (type == nullptr || !type->is_string()) {
    return Invalid("response_format.type", "must be \"text\", \"json_object\" or \"json_schema\"");
  }
  const std::string kind = type->get<std::string>();
  if (kind == "text") return absl::OkStatus();
  if (kind == "json_object") {
    out->set_json_object(true);
    *set = true;
    return absl::OkStatus();
  }
  if (kind != "json_schema") {
    return Invalid("response_format.type", absl::StrCat("must be \"text\", \"json_object\" or ",
                                                        "\"json_schema\", got \"", kind, "\""));
  }
  const Json* spec = Find(format, "json_schema");
  if (spec == nullptr || !spec->is_object()) {
    return Invalid("response_format.json_schema", "must be an object with a 'schema'");
  }
  if (const Json* name = Find(*spec, "name"); name != nullptr && !name->is_string()) {
    return Invalid("response_format.json_schema.name", "must be a string");
  }
  if (const Json* strict = Find(*spec, "strict"); strict != nullptr && !strict->is_boolean()) {
    return Invalid("response_format.json_schema.strict", "must be true or false");
  }
  const Json* schema = Find(*spec, "schema");
  if (schema == nullptr) {
    return Invalid("response_format.json_schema.schema", "is required");
  }
  absl::StatusOr<std::string> text = SchemaText(*schema, "response_format.json_schema.schema");
  if (!text.ok()) return text.status();
  out->set_json_schema(*std::move(text));
  *set = true;
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseOpenAiStructuredOutput(const Json& body, ::llmserve::v1::GenerateRequest* request,
                                         std::string* field) {
  ::llmserve::v1::StructuredOutput constraint;
  std::vector<std::string> given;
  auto one = [&](absl::string_view field, absl::Status status, bool set) -> absl::Status {
    if (!status.ok()) return status;
    if (set) given.emplace_back(field);
    return absl::OkStatus();
  };
  if (const Json* format = Find(body, "response_format")) {
    bool set = false;
    absl::Status status = ParseResponseFormat(*format, &constraint, &set);
    if (absl::Status s = one("response_format", status, set); !s.ok()) return s;
  }
  // vLLM's extra parameters: the same constraints by other names.
  const Json* nested = Find(body, "structured_outputs");
  if (nested != nullptr && !nested->is_object()) {
    return Invalid("structured_outputs", "must be an object");
  }
  struct Source {
    const Json* object;
    const char* prefix;
    const char* json;
    const char* regex;
    const char* choice;
    const char* grammar;
    const char* json_object;
  };
  const Source sources[] = {
      {&body, "", "guided_json", "guided_regex", "guided_choice", "guided_grammar", nullptr},
      {nested, "structured_outputs.", "json", "regex", "choice", "grammar", "json_object"},
  };
  for (const Source& source : sources) {
    if (source.object == nullptr) continue;
    const Json& object = *source.object;
    if (const Json* value = Find(object, source.json)) {
      const std::string field = absl::StrCat(source.prefix, source.json);
      absl::StatusOr<std::string> text = SchemaText(*value, field);
      if (!text.ok()) return text.status();
      ::llmserve::v1::StructuredOutput next;
      next.set_json_schema(*std::move(text));
      if (given.empty()) constraint = next;
      given.push_back(field);
    }
    if (const Json* value = Find(object, source.regex)) {
      const std::string field = absl::StrCat(source.prefix, source.regex);
      absl::StatusOr<std::string> text = NonEmptyString(*value, field);
      if (!text.ok()) return text.status();
      if (given.empty()) constraint.set_regex(*std::move(text));
      given.push_back(field);
    }
    if (const Json* value = Find(object, source.choice)) {
      const std::string field = absl::StrCat(source.prefix, source.choice);
      ::llmserve::v1::StructuredOutput next;
      if (absl::Status status = SetChoices(*value, field, &next); !status.ok()) return status;
      if (given.empty()) constraint = next;
      given.push_back(field);
    }
    if (const Json* value = Find(object, source.grammar)) {
      const std::string field = absl::StrCat(source.prefix, source.grammar);
      absl::StatusOr<std::string> text = NonEmptyString(*value, field);
      if (!text.ok()) return text.status();
      if (given.empty()) constraint.set_grammar(*std::move(text));
      given.push_back(field);
    }
    if (source.json_object != nullptr) {
      if (const Json* value = Find(object, source.json_object)) {
        const std::string field = absl::StrCat(source.prefix, source.json_object);
        if (!value->is_boolean()) return Invalid(field, "must be true or false");
        if (value->get<bool>()) {
          if (given.empty()) constraint.set_json_object(true);
          given.push_back(field);
        }
      }
    }
  }
  if (given.size() > 1) {
    return Invalid(given[1], absl::StrCat("cannot be combined with '", given[0],
                                          "': give one output constraint"));
  }
  // Said here, where the fields' OpenAI names are known (the pipeline sees only the proto).
  const ::llmserve::v1::ChatPrompt& chat = request->chat();
  if (!given.empty() &&
      (chat.tool_choice() == "required" || !chat.tool_choice_function().empty())) {
    return Invalid(given[0],
                   "cannot be combined with 'tool_choice' \"required\" or a named function, "
                   "which constrains the output to the call itself");
  }
  if (!given.empty()) *request->mutable_structured_output() = std::move(constraint);
  if (field != nullptr) *field = given.empty() ? std::string() : given[0];
  return absl::OkStatus();
}

absl::Status ParseOpenAiTools(const Json& body, ::llmserve::v1::ChatPrompt* chat) {
  if (const Json* tools = Find(body, "tools")) {
    absl::StatusOr<std::vector<::llmserve::v1::Tool>> parsed = tool_calls::ParseOpenAiTools(*tools);
    if (!parsed.ok()) return parsed.status();
    for (::llmserve::v1::Tool& tool : *parsed) *chat->add_tools() = std::move(tool);
  }
  if (const Json* choice = Find(body, "tool_choice")) {
    std::vector<::llmserve::v1::Tool> tools(chat->tools().begin(), chat->tools().end());
    absl::StatusOr<tool_calls::ToolChoice> parsed =
        tool_calls::ParseToolChoice(nlohmann::json(*choice), tools);
    if (!parsed.ok()) return parsed.status();
    switch (parsed->mode) {
      case tool_calls::ToolChoice::Mode::kNone:
        chat->set_tool_choice("none");
        break;
      case tool_calls::ToolChoice::Mode::kAuto:
        chat->set_tool_choice("auto");
        break;
      case tool_calls::ToolChoice::Mode::kRequired:
        chat->set_tool_choice("required");
        break;
      case tool_calls::ToolChoice::Mode::kFunction:
        // Its own field: a tool called "none" or "auto" is still that tool.
        chat->set_tool_choice_function(parsed->function);
        break;
    }
  }
  if (const Json* parallel = Find(body, "parallel_tool_calls")) {
    if (!parallel->is_boolean()) return Invalid("parallel_tool_calls", "must be true or false");
    chat->set_parallel_tool_calls(parallel->get<bool>());
  }
  return absl::OkStatus();
}

absl::Status ParseOpenAiMessageToolFields(const Json& message, size_t index,
                                          ::llmserve::v1::ChatMessage* out) {
  const std::string prefix = absl::StrCat("messages[", index, "].");
  if (const Json* id = Find(message, "tool_call_id")) {
    if (!id->is_string()) return Invalid(absl::StrCat(prefix, "tool_call_id"), "must be a string");
    out->set_tool_call_id(id->get<std::string>());
  }
  const Json* calls = Find(message, "tool_calls");
  if (calls == nullptr) return absl::OkStatus();
  const std::string field = absl::StrCat(prefix, "tool_calls");
  if (!calls->is_array()) return Invalid(field, "must be a list");
  for (size_t i = 0; i < calls->size(); ++i) {
    const Json& call = (*calls)[i];
    const std::string at = absl::StrCat(field, "[", i, "]");
    if (!call.is_object()) return Invalid(at, "must be an object");
    ::llmserve::v1::ToolCall* added = out->add_tool_calls();
    if (const Json* id = Find(call, "id")) {
      if (!id->is_string()) return Invalid(absl::StrCat(at, ".id"), "must be a string");
      added->set_id(id->get<std::string>());
    }
    if (const Json* type = Find(call, "type");
        type != nullptr && (!type->is_string() || type->get<std::string>() != "function")) {
      return Invalid(absl::StrCat(at, ".type"), "must be \"function\"");
    }
    const Json* function = Find(call, "function");
    if (function == nullptr || !function->is_object()) {
      return Invalid(absl::StrCat(at, ".function"), "must be an object with a 'name'");
    }
    const Json* name = Find(*function, "name");
    if (name == nullptr || !name->is_string() || name->get<std::string>().empty()) {
      return Invalid(absl::StrCat(at, ".function.name"), "must be a non-empty string");
    }
    added->set_name(name->get<std::string>());
    // OpenAI sends the arguments as JSON text; some clients send the object itself.
    if (const Json* arguments = Find(*function, "arguments")) {
      if (arguments->is_string()) {
        added->set_arguments(arguments->get<std::string>());
      } else if (arguments->is_object()) {
        added->set_arguments(arguments->dump());
      } else {
        return Invalid(absl::StrCat(at, ".function.arguments"), "must be a string (JSON text)");
      }
    } else {
      added->set_arguments("{}");
    }
  }
  return absl::OkStatus();
}

}  // namespace llmserve::gateway
