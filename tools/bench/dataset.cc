#include "tools/bench/dataset.h"

#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace llmserve::tools {
namespace {

using Json = nlohmann::json;

constexpr int64_t kMaxOutputLen = 1 << 20;

absl::Status ParseLine(const Json& json, int32_t default_output_len, BenchRequest* request) {
  if (!json.is_object()) return absl::InvalidArgumentError("is not a JSON object");
  const int forms = static_cast<int>(json.contains("prompt")) +
                    static_cast<int>(json.contains("prompt_ids")) +
                    static_cast<int>(json.contains("messages"));
  if (forms != 1) {
    return absl::InvalidArgumentError(
        "needs exactly one of \"prompt\", \"prompt_ids\" and \"messages\"");
  }
  if (json.contains("prompt")) {
    if (!json["prompt"].is_string() || json["prompt"].get<std::string>().empty()) {
      return absl::InvalidArgumentError("\"prompt\" must be a non-empty string");
    }
    request->prompt_text = json["prompt"].get<std::string>();
  } else if (json.contains("prompt_ids")) {
    const Json& ids = json["prompt_ids"];
    if (!ids.is_array() || ids.empty()) {
      return absl::InvalidArgumentError("\"prompt_ids\" must be a non-empty array of token ids");
    }
    for (const Json& id : ids) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
          id.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
        return absl::InvalidArgumentError("\"prompt_ids\" holds something not a token id");
      }
      request->prompt_ids.push_back(id.get<int32_t>());
    }
    request->prompt_tokens = static_cast<int64_t>(request->prompt_ids.size());
  } else {
    const Json& messages = json["messages"];
    if (!messages.is_array() || messages.empty()) {
      return absl::InvalidArgumentError("\"messages\" must be a non-empty array");
    }
    for (const Json& message : messages) {
      if (!message.is_object() || !message.contains("role") || !message["role"].is_string() ||
          !message.contains("content") || !message["content"].is_string()) {
        return absl::InvalidArgumentError(
            "every message must be an object with string \"role\" and \"content\"");
      }
      request->messages.push_back(
          {message["role"].get<std::string>(), message["content"].get<std::string>()});
    }
  }
  request->output_len = default_output_len;
  if (json.contains("output_len")) {
    const Json& length = json["output_len"];
    if (!length.is_number_integer() || length.get<int64_t>() < 1 ||
        length.get<int64_t>() > kMaxOutputLen) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"output_len\" must be an integer in [1, ", kMaxOutputLen, "]"));
    }
    request->output_len = length.get<int32_t>();
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<BenchRequest>> ParseJsonlDataset(absl::string_view text,
                                                            absl::string_view name,
                                                            int32_t default_output_len) {
  std::vector<BenchRequest> requests;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    const Json json = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (json.is_discarded()) {
      return absl::InvalidArgumentError(absl::StrCat(name, ":", line_number, ": not valid JSON"));
    }
    BenchRequest request;
    if (absl::Status status = ParseLine(json, default_output_len, &request); !status.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ":", line_number, ": ", status.message()));
    }
    requests.push_back(std::move(request));
  }
  if (requests.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": holds no request"));
  }
  return requests;
}

absl::StatusOr<std::vector<BenchRequest>> LoadJsonlDataset(const std::string& path,
                                                           int32_t default_output_len) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return absl::NotFoundError(absl::StrCat("cannot read dataset ", path));
  std::stringstream text;
  text << file.rdbuf();
  return ParseJsonlDataset(text.str(), path, default_output_len);
}

}  // namespace llmserve::tools
