#include "gateway/pipeline/output_constraints.h"

#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/utf8/utf8.h"
#include "gateway/tool_calls/tools.h"

namespace llmserve::gateway {
namespace {

absl::Status InvalidConstraint(absl::string_view field, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", problem));
}

absl::Status CheckText(absl::string_view field, const std::string& text) {
  if (text.empty()) return InvalidConstraint(field, "must not be empty");
  if (text.size() > kMaxConstraintBytes) {
    return InvalidConstraint(field,
                             absl::StrCat(text.size(), " bytes; at most ", kMaxConstraintBytes));
  }
  if (!common::utf8::IsValid(std::string_view(text)))
    return InvalidConstraint(field, "is not valid UTF-8");
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateStructuredOutput(const ::llmserve::v1::StructuredOutput& output) {
  using Kind = ::llmserve::v1::StructuredOutput;
  switch (output.kind_case()) {
    case Kind::KIND_NOT_SET:
      return absl::OkStatus();
    case Kind::kJsonObject:
      if (!output.json_object()) {
        return InvalidConstraint("structured_output.json_object", "must be true when set");
      }
      return absl::OkStatus();
    case Kind::kJsonSchema: {
      if (absl::Status text = CheckText("structured_output.json_schema", output.json_schema());
          !text.ok()) {
        return text;
      }
      const nlohmann::json schema = nlohmann::json::parse(output.json_schema(), nullptr, false);
      if (schema.is_discarded() || !(schema.is_object() || schema.is_boolean())) {
        return InvalidConstraint("structured_output.json_schema",
                                 "must be a JSON Schema: a JSON object (or true/false)");
      }
      return absl::OkStatus();
    }
    case Kind::kRegex:
      return CheckText("structured_output.regex", output.regex());
    case Kind::kGrammar:
      return CheckText("structured_output.grammar", output.grammar());
    case Kind::kChoice: {
      const auto& choices = output.choice().choices();
      if (choices.empty() || choices.size() > kMaxConstraintChoices) {
        return InvalidConstraint(
            "structured_output.choice",
            absl::StrCat("needs 1 to ", kMaxConstraintChoices, " choices, got ", choices.size()));
      }
      size_t total = 0;
      for (int i = 0; i < choices.size(); ++i) {
        const std::string field = absl::StrCat("structured_output.choice[", i, "]");
        if (!common::utf8::IsValid(std::string_view(choices[i]))) {
          return InvalidConstraint(field, "is not valid UTF-8");
        }
        if (choices[i].empty()) return InvalidConstraint(field, "must not be empty");
        total += choices[i].size();
      }
      if (total > kMaxConstraintBytes) {
        return InvalidConstraint(
            "structured_output.choice",
            absl::StrCat(total, " bytes in all; at most ", kMaxConstraintBytes));
      }
      return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<ToolCalling>> ResolveOutputConstraints(
    const ::llmserve::v1::GenerateRequest& request, tool_calls::ToolCallFormat model_format,
    worker::v1::GenerateRequest* out) {
  if (absl::Status valid = ValidateStructuredOutput(request.structured_output()); !valid.ok()) {
    return valid;
  }
  if (request.has_structured_output()) {
    *out->mutable_structured_output() = request.structured_output();
  }
  if (!request.has_chat()) return std::nullopt;
  const ::llmserve::v1::ChatPrompt& chat = request.chat();
  ToolCalling calling;
  calling.tools.assign(chat.tools().begin(), chat.tools().end());
  if (absl::Status tools = tool_calls::ValidateTools(calling.tools); !tools.ok()) return tools;
  absl::StatusOr<tool_calls::ToolChoice> choice =
      tool_calls::ParseChatToolChoice(chat, calling.tools);
  if (!choice.ok()) return choice.status();
  calling.choice = *std::move(choice);
  calling.format = model_format;
  calling.parallel_tool_calls = chat.has_parallel_tool_calls() ? chat.parallel_tool_calls() : true;
  if (calling.tools.empty() || calling.choice.mode == tool_calls::ToolChoice::Mode::kNone) {
    return std::nullopt;
  }
  if (calling.constrained()) {
    if (request.has_structured_output()) {
      return InvalidConstraint(
          chat.tool_choice_function().empty() ? "chat.tool_choice" : "chat.tool_choice_function",
          "\"required\" or a named function constrains the output itself and cannot "
          "be combined with structured_output");
    }
    out->mutable_structured_output()->set_json_schema(
        tool_calls::ToolChoiceSchema(calling.choice, calling.tools, calling.parallel_tool_calls));
    return calling;
  }
  // "auto": the model decides; its own format is parsed when known.
  if (calling.format == tool_calls::ToolCallFormat::kNone) return std::nullopt;
  return calling;
}

}  // namespace llmserve::gateway
