#include "tools/run/prompts.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace llmserve::tools {
namespace {

using nlohmann::json;

absl::Status FieldError(const std::string& field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("'", field, "' ", what));
}

template <typename T>
absl::Status ReadNumber(const json& line, const std::string& field, T* out) {
  const auto it = line.find(field);
  if (it == line.end()) return absl::OkStatus();
  if (!it->is_number()) return FieldError(field, "must be a number");
  if constexpr (std::is_integral_v<T>) {
    if (!it->is_number_integer()) return FieldError(field, "must be an integer");
    const bool in_range = it->is_number_unsigned() ? std::in_range<T>(it->get<uint64_t>())
                                                   : std::in_range<T>(it->get<int64_t>());
    if (!in_range) return FieldError(field, "is out of range");
    *out = it->is_number_unsigned() ? static_cast<T>(it->get<uint64_t>())
                                    : static_cast<T>(it->get<int64_t>());
  } else {
    *out = it->get<T>();
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RunPrompt> ParsePromptLine(const std::string& text, const RunPrompt& defaults) {
  const json line = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (line.is_discarded() || !line.is_object()) {
    return absl::InvalidArgumentError("not a JSON object");
  }
  RunPrompt prompt = defaults;
  prompt.text.reset();
  prompt.ids.reset();
  for (const auto& [key, value] : line.items()) {
    static const char* const kKnown[] = {"prompt",
                                         "prompt_ids",
                                         "max_tokens",
                                         "ignore_eos",
                                         "temperature",
                                         "top_k",
                                         "top_p",
                                         "min_p",
                                         "seed",
                                         "repetition_penalty",
                                         "presence_penalty",
                                         "frequency_penalty",
                                         "logprobs"};
    if (std::find(std::begin(kKnown), std::end(kKnown), key) == std::end(kKnown)) {
      return FieldError(key, "is not a known field");
    }
  }
  if (line.contains("prompt") == line.contains("prompt_ids")) {
    return absl::InvalidArgumentError("give exactly one of 'prompt' and 'prompt_ids'");
  }
  if (line.contains("prompt")) {
    if (!line["prompt"].is_string()) return FieldError("prompt", "must be a string");
    prompt.text = line["prompt"].get<std::string>();
  } else {
    if (!line["prompt_ids"].is_array()) return FieldError("prompt_ids", "must be a list of ids");
    std::vector<int32_t> ids;
    for (const json& id : line["prompt_ids"]) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
        return FieldError("prompt_ids", "must hold non-negative integer ids");
      }
      ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
    prompt.ids = std::move(ids);
  }
  worker::SamplingParams& s = prompt.sampling;
  for (absl::Status status :
       {ReadNumber(line, "max_tokens", &prompt.stopping.max_tokens),
        ReadNumber(line, "temperature", &s.temperature), ReadNumber(line, "top_k", &s.top_k),
        ReadNumber(line, "top_p", &s.top_p), ReadNumber(line, "min_p", &s.min_p),
        ReadNumber(line, "repetition_penalty", &s.repetition_penalty),
        ReadNumber(line, "presence_penalty", &s.presence_penalty),
        ReadNumber(line, "frequency_penalty", &s.frequency_penalty),
        ReadNumber(line, "logprobs", &s.top_logprobs)}) {
    if (!status.ok()) return status;
  }
  if (line.contains("seed")) {
    uint64_t seed = 0;
    if (absl::Status status = ReadNumber(line, "seed", &seed); !status.ok()) return status;
    s.seed = seed;
  }
  if (line.contains("ignore_eos")) {
    if (!line["ignore_eos"].is_boolean()) return FieldError("ignore_eos", "must be true or false");
    prompt.stopping.ignore_eos = line["ignore_eos"].get<bool>();
  }
  if (s.top_logprobs > 0) s.return_logprobs = true;
  return prompt;
}

absl::StatusOr<std::vector<RunPrompt>> ReadPromptsFile(const std::string& path,
                                                       const RunPrompt& defaults) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot be opened"));
  std::vector<RunPrompt> prompts;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    absl::StatusOr<RunPrompt> prompt = ParsePromptLine(line, defaults);
    if (!prompt.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", number, ": ", prompt.status().message()));
    }
    prompts.push_back(*std::move(prompt));
  }
  if (prompts.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no prompts"));
  return prompts;
}

absl::StatusOr<std::vector<int32_t>> ParseIds(const std::string& text) {
  std::vector<int32_t> ids;
  for (absl::string_view part :
       absl::StrSplit(text, absl::ByAnyChar(" ,\t\n"), absl::SkipEmpty())) {
    int32_t id = 0;
    if (!absl::SimpleAtoi(part, &id) || id < 0) {
      return absl::InvalidArgumentError(absl::StrCat("'", part, "' is not a token id"));
    }
    ids.push_back(id);
  }
  if (ids.empty()) return absl::InvalidArgumentError("no token ids given");
  return ids;
}

}  // namespace llmserve::tools
