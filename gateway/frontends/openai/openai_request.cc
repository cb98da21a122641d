#include "gateway/frontends/openai/openai_request.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/base/worker_api_limits.h"
#include "common/json/ordered_json.h"
#include "common/status/status_macros.h"
#include "gateway/frontends/openai/openai_json.h"
#include "gateway/frontends/openai/openai_structured.h"

namespace llmserve::gateway {
namespace {

using openai_json::Find;
using openai_json::Invalid;
using openai_json::Json;

absl::StatusOr<double> Number(const Json& value, const char* field) {
  if (!value.is_number()) return Invalid(field, "must be a number");
  const double number = value.get<double>();
  if (!std::isfinite(number)) return Invalid(field, "must be finite");
  return number;
}

absl::StatusOr<int64_t> Integer(const Json& value, const char* field, int64_t low, int64_t high) {
  if (!value.is_number_integer() && !value.is_number_unsigned()) {
    return Invalid(field, "must be an integer");
  }
  if (value.is_number_unsigned() &&
      value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return Invalid(field, absl::StrCat("must be in [", low, ", ", high, "]"));
  }
  const int64_t number = value.get<int64_t>();
  if (number < low || number > high) {
    return Invalid(field, absl::StrCat("must be in [", low, ", ", high, "], got ", number));
  }
  return number;
}

absl::StatusOr<bool> Bool(const Json& value, const char* field) {
  if (!value.is_boolean()) return Invalid(field, "must be true or false");
  return value.get<bool>();
}

// Sets a float sampling field when present.
template <typename Setter>
absl::Status OptionalFloat(const Json& body, const char* field, Setter set) {
  const Json* value = Find(body, field);
  if (value == nullptr) return absl::OkStatus();
  absl::StatusOr<double> number = Number(*value, field);
  if (!number.ok()) return number.status();
  set(static_cast<float>(*number));
  return absl::OkStatus();
}

// A message's content: a string, or a list of parts of which the text ones are joined.
absl::StatusOr<std::string> MessageContent(const Json& content, int index) {
  const std::string field = absl::StrCat("messages[", index, "].content");
  if (content.is_null()) return std::string();
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return Invalid(field, "must be a string or a list of parts");
  std::string text;
  for (const Json& part : content) {
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
        !part["text"].is_string()) {
      return Invalid(field, "parts must be {\"type\": \"text\", \"text\": ...} (only text)");
    }
    text += part["text"].get<std::string>();
  }
  return text;
}

// OpenAI's logit_bias: {"<token id>": bias, ...}. Keys are decimal token ids, biases finite
// numbers in [-100, 100], at most 300 entries; the vocabulary's range is checked with the other
// sampling fields against the served model (prompt_builder.h).
absl::Status ParseLogitBias(const Json& value, ::llmserve::v1::SamplingParams* sampling) {
  if (!value.is_object()) {
    return Invalid("logit_bias", "must be an object mapping token ids to biases");
  }
  if (value.size() > static_cast<size_t>(common::kMaxLogitBiasEntries)) {
    return Invalid("logit_bias", absl::StrCat("has ", value.size(), " entries; at most ",
                                              common::kMaxLogitBiasEntries));
  }
  for (const auto& [key, bias] : value.items()) {
    int64_t token_id = 0;
    const bool digits = !key.empty() && key.size() <= 10 &&
                        key.find_first_not_of("0123456789") == std::string::npos;
    if (!digits || !absl::SimpleAtoi(key, &token_id) ||
        token_id > std::numeric_limits<int32_t>::max()) {
      return Invalid("logit_bias", absl::StrCat("key \"", key.substr(0, 64),
                                                "\" is not a token id (a decimal integer)"));
    }
    const std::string field = absl::StrCat("logit_bias[\"", key, "\"]");
    if (!bias.is_number() || !std::isfinite(bias.get<double>()) ||
        std::fabs(bias.get<double>()) > common::kMaxLogitBias) {
      return Invalid(field, absl::StrCat("must be a number in [-", common::kMaxLogitBias, ", ",
                                         common::kMaxLogitBias, "]"));
    }
    ::llmserve::v1::LogitBias* entry = sampling->add_logit_bias();
    entry->set_token_id(static_cast<int32_t>(token_id));
    entry->set_bias(static_cast<float>(bias.get<double>()));
  }
  return absl::OkStatus();
}

absl::Status ParseSampling(const Json& body, OpenAiEndpoint endpoint, OpenAiRequest* out) {
  ::llmserve::v1::SamplingParams& sampling = *out->request.mutable_sampling();
  absl::Status status;
  status.Update(OptionalFloat(body, "temperature", [&](float v) { sampling.set_temperature(v); }));
  status.Update(OptionalFloat(body, "top_p", [&](float v) { sampling.set_top_p(v); }));
  status.Update(OptionalFloat(body, "min_p", [&](float v) { sampling.set_min_p(v); }));
  status.Update(
      OptionalFloat(body, "presence_penalty", [&](float v) { sampling.set_presence_penalty(v); }));
  status.Update(OptionalFloat(body, "frequency_penalty",
                              [&](float v) { sampling.set_frequency_penalty(v); }));
  status.Update(OptionalFloat(body, "repetition_penalty",
                              [&](float v) { sampling.set_repetition_penalty(v); }));
  if (!status.ok()) return status;
  if (const Json* top_k = Find(body, "top_k")) {
    // vLLM accepts -1 for "disabled".
    absl::StatusOr<int64_t> value =
        Integer(*top_k, "top_k", -1, std::numeric_limits<int32_t>::max());
    if (!value.ok()) return value.status();
    sampling.set_top_k(*value < 0 ? 0 : static_cast<int32_t>(*value));
  }
  if (const Json* seed = Find(body, "seed")) {
    absl::StatusOr<int64_t> value = Integer(*seed, "seed", std::numeric_limits<int64_t>::min(),
                                            std::numeric_limits<int64_t>::max());
    if (!value.ok()) return value.status();
    sampling.set_seed(static_cast<uint64_t>(*value));
  }
  if (const Json* bias = Find(body, "logit_bias")) {
    LLMSERVE_RETURN_IF_ERROR(ParseLogitBias(*bias, &sampling));
  }
  if (endpoint == OpenAiEndpoint::kCompletions) {
    if (const Json* logprobs = Find(body, "logprobs")) {
      absl::StatusOr<int64_t> value = Integer(*logprobs, "logprobs", 0, 20);
      if (!value.ok()) return value.status();
      out->logprobs = true;
      sampling.set_return_logprobs(true);
      sampling.set_top_logprobs(static_cast<int32_t>(*value));
    }
  } else {
    if (const Json* logprobs = Find(body, "logprobs")) {
      absl::StatusOr<bool> value = Bool(*logprobs, "logprobs");
      if (!value.ok()) return value.status();
      out->logprobs = *value;
      sampling.set_return_logprobs(*value);
    }
    if (const Json* top = Find(body, "top_logprobs")) {
      absl::StatusOr<int64_t> value = Integer(*top, "top_logprobs", 0, 20);
      if (!value.ok()) return value.status();
      if (*value > 0 && !out->logprobs) return Invalid("top_logprobs", "needs \"logprobs\": true");
      sampling.set_top_logprobs(static_cast<int32_t>(*value));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseStopping(const Json& body, OpenAiRequest* out) {
  ::llmserve::v1::StoppingCriteria& stopping = *out->request.mutable_stopping();
  for (const char* field : {"max_completion_tokens", "max_tokens"}) {
    const Json* value = Find(body, field);
    if (value == nullptr) continue;
    absl::StatusOr<int64_t> tokens = Integer(*value, field, 1, std::numeric_limits<int32_t>::max());
    if (!tokens.ok()) return tokens.status();
    stopping.set_max_tokens(static_cast<uint32_t>(*tokens));
    break;  // max_completion_tokens (the newer name) wins
  }
  if (const Json* stop = Find(body, "stop")) {
    if (stop->is_string()) {
      stopping.add_stop(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (const Json& entry : *stop) {
        if (!entry.is_string()) return Invalid("stop", "must be a string or a list of strings");
        stopping.add_stop(entry.get<std::string>());
      }
    } else {
      return Invalid("stop", "must be a string or a list of strings");
    }
  }
  if (const Json* ids = Find(body, "stop_token_ids")) {
    if (!ids->is_array()) return Invalid("stop_token_ids", "must be a list of integers");
    for (const Json& id : *ids) {
      absl::StatusOr<int64_t> value =
          Integer(id, "stop_token_ids", 0, std::numeric_limits<int32_t>::max());
      if (!value.ok()) return value.status();
      stopping.add_stop_token_ids(static_cast<int32_t>(*value));
    }
  }
  if (const Json* ignore = Find(body, "ignore_eos")) {
    absl::StatusOr<bool> value = Bool(*ignore, "ignore_eos");
    if (!value.ok()) return value.status();
    stopping.set_ignore_eos(*value);
  }
  if (const Json* min_tokens = Find(body, "min_tokens")) {
    absl::StatusOr<int64_t> value =
        Integer(*min_tokens, "min_tokens", 0, std::numeric_limits<int32_t>::max());
    if (!value.ok()) return value.status();
    stopping.set_min_tokens(static_cast<uint32_t>(*value));
  }
  return absl::OkStatus();
}

absl::Status ParsePrompt(const Json& body, OpenAiEndpoint endpoint, OpenAiRequest* out) {
  if (endpoint == OpenAiEndpoint::kChatCompletions) {
    const Json* messages = Find(body, "messages");
    if (messages == nullptr || !messages->is_array() || messages->empty()) {
      return Invalid("messages", "must be a non-empty list");
    }
    ::llmserve::v1::ChatPrompt& chat = *out->request.mutable_chat();
    for (size_t i = 0; i < messages->size(); ++i) {
      const Json& message = (*messages)[i];
      if (!message.is_object() || !message.contains("role") || !message["role"].is_string()) {
        return Invalid(absl::StrCat("messages[", i, "]"), "must be an object with a 'role'");
      }
      ::llmserve::v1::ChatMessage* added = chat.add_messages();
      // OpenAI's newer clients send instructions as "developer"; chat templates know "system".
      const std::string& role = message["role"].get_ref<const std::string&>();
      added->set_role(role == "developer" ? "system" : role);
      absl::StatusOr<std::string> content =
          MessageContent(message.contains("content") ? message["content"] : Json(), i);
      if (!content.ok()) return content.status();
      added->set_content(*std::move(content));
      if (message.contains("name") && message["name"].is_string()) {
        added->set_name(message["name"].get<std::string>());
      }
      if (absl::Status tools = ParseOpenAiMessageToolFields(message, i, added); !tools.ok()) {
        return tools;
      }
    }
    if (const Json* add = Find(body, "add_generation_prompt")) {
      absl::StatusOr<bool> value = Bool(*add, "add_generation_prompt");
      if (!value.ok()) return value.status();
      chat.set_add_generation_prompt(*value);
    }
    if (const Json* parse = Find(body, "parse_special_tokens_in_content")) {
      absl::StatusOr<bool> value = Bool(*parse, "parse_special_tokens_in_content");
      if (!value.ok()) return value.status();
      chat.set_parse_special_tokens_in_content(*value);
    }
    if (const Json* kwargs = Find(body, "chat_template_kwargs");
        kwargs != nullptr && !kwargs->is_null()) {
      if (!kwargs->is_object()) return Invalid("chat_template_kwargs", "must be an object");
      // Keys and limits are checked with the chat (ValidateChatPrompt), whichever API.
      if (!kwargs->empty()) {
        chat.set_chat_template_kwargs_json(
            kwargs->dump(-1, ' ', false, Json::error_handler_t::replace));
      }
    }
    return ParseOpenAiTools(body, &chat);
  }
  // A raw prompt is the client's own markup: its special-token text is always parsed, so the
  // chat-only switch would be a no-op that suggests otherwise.
  if (Find(body, "parse_special_tokens_in_content") != nullptr) {
    return Invalid("parse_special_tokens_in_content",
                   "applies to chat completions only (a completions prompt's special-token text "
                   "is always read as special tokens)");
  }
  if (const Json* kwargs = Find(body, "chat_template_kwargs");
      kwargs != nullptr && !kwargs->is_null() && !(kwargs->is_object() && kwargs->empty())) {
    return Invalid("chat_template_kwargs",
                   "applies to chat completions only (a completions prompt is not rendered by a "
                   "chat template)");
  }
  const Json* prompt = Find(body, "prompt");
  if (prompt == nullptr) return Invalid("prompt", "is required");
  // A list of one prompt is the same as the prompt (clients send [text]).
  const Json* single = prompt;
  if (prompt->is_array() && prompt->size() == 1 &&
      ((*prompt)[0].is_string() || (*prompt)[0].is_array())) {
    single = &(*prompt)[0];
  }
  if (single->is_string()) {
    out->request.set_text(single->get<std::string>());
    return absl::OkStatus();
  }
  if (single->is_array()) {
    if (single->empty()) return Invalid("prompt", "must not be empty");
    for (const Json& id : *single) {
      if (!id.is_number_integer()) {
        return Invalid("prompt",
                       "must be a string, a list of token ids, or a list of one of those "
                       "(batched prompts: send one request per prompt)");
      }
      absl::StatusOr<int64_t> value = Integer(id, "prompt", 0, std::numeric_limits<int32_t>::max());
      if (!value.ok()) return value.status();
      out->request.mutable_token_ids()->add_ids(static_cast<int32_t>(*value));
    }
    return absl::OkStatus();
  }
  return Invalid("prompt", "must be a string or a list of token ids");
}

// The top-level fields ParseOpenAiRequest reads, for either endpoint. The others are skipped by
// the parser without being stored: a field read below must be listed here.
// clang-format off
constexpr absl::string_view kReadFields[] = {
    "model", "prompt", "messages", "add_generation_prompt", "temperature", "top_p", "min_p",
    "presence_penalty", "frequency_penalty", "repetition_penalty", "top_k", "seed", "logprobs",
    "top_logprobs", "max_completion_tokens", "max_tokens", "stop", "stop_token_ids", "ignore_eos",
    "min_tokens", "n", "stream", "stream_options", "skip_special_tokens", "echo", "user",
    "response_format", "guided_json", "guided_regex", "guided_choice", "guided_grammar",
    "structured_outputs", "tools", "tool_choice", "parallel_tool_calls", "logit_bias", "best_of",
    "prompt_logprobs", "suffix", "parse_special_tokens_in_content", "chat_template_kwargs"};
// clang-format on

// Fields we do not implement are refused rather than ignored, except for the values that ask for
// nothing: best_of equal to n (each choice is then its own best), an empty suffix.
absl::Status RefuseUnsupported(const Json& body, int n) {
  if (const Json* best_of = Find(body, "best_of")) {
    if (!best_of->is_number_integer() || best_of->get<int64_t>() != n) {
      return Invalid("best_of", absl::StrCat("is not supported (only best_of equal to n, ", n,
                                             ", is accepted)"));
    }
  }
  if (Find(body, "prompt_logprobs") != nullptr) {
    return Invalid("prompt_logprobs", "is not supported");
  }
  if (const Json* suffix = Find(body, "suffix")) {
    if (!suffix->is_string() || !suffix->get_ref<const std::string&>().empty()) {
      return Invalid("suffix", "is not supported (insertion after a suffix)");
    }
  }
  return absl::OkStatus();
}

bool IsReadField(absl::string_view key) {
  return std::find(std::begin(kReadFields), std::end(kReadFields), key) != std::end(kReadFields);
}

}  // namespace

absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(OpenAiEndpoint endpoint, absl::string_view body) {
  // Values of unread top-level fields are skipped (counted, not kept): nlohmann's own DOM parser
  // builds whatever it is given (4 MiB of `[{},{},...]` became 156 MiB of nodes).
  absl::StatusOr<Json> document =
      common::ParseOrderedJson(std::string_view(body.data(), body.size()),
                               {.max_depth = kMaxJsonDepth,
                                .max_values = kMaxJsonValues,
                                .what = "the body",
                                .keep_top_level_key = [](std::string_view key) {
                                  return IsReadField(absl::string_view(key.data(), key.size()));
                                }});
  if (!document.ok()) return document.status();
  Json json = *std::move(document);
  if (!json.is_object()) return absl::InvalidArgumentError("the body must be a JSON object");
  OpenAiRequest out;
  try {
    if (const Json* model = Find(json, "model")) {
      if (!model->is_string()) return Invalid("model", "must be a string");
      out.request.set_model(model->get<std::string>());
    }
    if (absl::Status prompt = ParsePrompt(json, endpoint, &out); !prompt.ok()) return prompt;
    if (absl::Status sampling = ParseSampling(json, endpoint, &out); !sampling.ok())
      return sampling;
    if (absl::Status stopping = ParseStopping(json, &out); !stopping.ok()) return stopping;
    if (absl::Status structured =
            ParseOpenAiStructuredOutput(json, &out.request, &out.constraint_field);
        !structured.ok()) {
      return structured;
    }
    if (const Json* n = Find(json, "n")) {
      absl::StatusOr<int64_t> value = Integer(*n, "n", 1, kMaxChoices);
      if (!value.ok()) return value.status();
      out.n = static_cast<int>(*value);
    }
    if (const Json* stream = Find(json, "stream")) {
      absl::StatusOr<bool> value = Bool(*stream, "stream");
      if (!value.ok()) return value.status();
      out.stream = *value;
    }
    if (const Json* options = Find(json, "stream_options")) {
      if (!options->is_object()) return Invalid("stream_options", "must be an object");
      if (const Json* usage = Find(*options, "include_usage")) {
        absl::StatusOr<bool> value = Bool(*usage, "stream_options.include_usage");
        if (!value.ok()) return value.status();
        out.include_usage = *value;
      }
    }
    if (const Json* skip = Find(json, "skip_special_tokens")) {
      absl::StatusOr<bool> value = Bool(*skip, "skip_special_tokens");
      if (!value.ok()) return value.status();
      out.request.set_skip_special_tokens(*value);
    }
    if (const Json* echo = Find(json, "echo")) {
      if (echo->is_boolean() && echo->get<bool>()) return Invalid("echo", "is not supported");
    }
    LLMSERVE_RETURN_IF_ERROR(RefuseUnsupported(json, out.n));
    if (const Json* user = Find(json, "user")) {
      if (!user->is_string()) return Invalid("user", "must be a string");
      out.user = user->get<std::string>();
    }
  } catch (const std::exception& e) {
    // nlohmann's accessors throw on type mismatches the checks above did not foresee.
    return absl::InvalidArgumentError(absl::StrCat("malformed request: ", e.what()));
  }
  return out;
}

}  // namespace llmserve::gateway
