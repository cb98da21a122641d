#include "gateway/reasoning/reasoning_format.h"

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace llmserve::gateway::reasoning {

absl::StatusOr<ReasoningFormat> ParseReasoningFormatName(absl::string_view name) {
  if (name == "deepseek_r1") return ReasoningFormat::kDeepSeekR1;
  if (name == "qwen3") return ReasoningFormat::kQwen3;
  if (name == "none") return ReasoningFormat::kNone;
  return absl::InvalidArgumentError(absl::StrCat("unknown reasoning parser '", std::string(name),
                                                 "': expected one of deepseek_r1, qwen3, none"));
}

absl::string_view ReasoningFormatName(ReasoningFormat format) {
  switch (format) {
    case ReasoningFormat::kDeepSeekR1:
      return "deepseek_r1";
    case ReasoningFormat::kQwen3:
      return "qwen3";
    case ReasoningFormat::kNone:
      break;
  }
  return "none";
}

ReasoningFormat ReasoningParsers::For(absl::string_view model) const {
  const auto it = by_model.find(model);
  return it == by_model.end() ? default_format : it->second;
}

absl::StatusOr<ReasoningParsers> ParseReasoningParsers(absl::string_view flag) {
  ReasoningParsers parsers;
  if (absl::StripAsciiWhitespace(flag).empty()) return parsers;
  bool has_default = false;
  for (absl::string_view entry : absl::StrSplit(flag, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    const size_t equals = entry.rfind('=');
    const absl::string_view name = equals == absl::string_view::npos
                                       ? entry
                                       : absl::StripAsciiWhitespace(entry.substr(equals + 1));
    absl::StatusOr<ReasoningFormat> format = ParseReasoningFormatName(name);
    if (!format.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("entry '", std::string(entry), "': ", format.status().message()));
    }
    if (equals == absl::string_view::npos) {
      if (has_default) {
        return absl::InvalidArgumentError(absl::StrCat(
            "entry '", std::string(entry),
            "': a second default parser (give at most one bare name; MODEL=PARSER for a model)"));
      }
      has_default = true;
      parsers.default_format = *format;
      continue;
    }
    const std::string model(absl::StripAsciiWhitespace(entry.substr(0, equals)));
    if (model.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("entry '", std::string(entry), "': the model name is empty (MODEL=PARSER)"));
    }
    if (!parsers.by_model.emplace(model, *format).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("entry '", std::string(entry), "': model '", model, "' is given twice"));
    }
  }
  return parsers;
}

}  // namespace llmserve::gateway::reasoning
