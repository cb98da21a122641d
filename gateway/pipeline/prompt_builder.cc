#include "gateway/pipeline/prompt_builder.h"

#include <algorithm>
#include <atomic>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/base/worker_api_limits.h"
#include "common/status/status_macros.h"
#include "common/utf8/utf8.h"

namespace llmserve::gateway {
namespace {

constexpr int kMaxStopStrings = 16;
constexpr size_t kMaxStopStringBytes = 256;
constexpr int kMaxChatMessages = 1024;
using common::kMaxLogitBiasEntries;
using common::kMaxPriority;
using common::kMaxRequestIdLength;
using common::kMaxStopTokenIds;
using common::kMaxTopLogprobs;

absl::Status Invalid(absl::string_view field, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", problem));
}

absl::Status CheckVocabulary(absl::string_view field, int index, int32_t id, uint32_t vocab) {
  if (id >= 0 && static_cast<uint32_t>(id) < vocab) return absl::OkStatus();
  return Invalid(absl::StrCat(field, "[", index, "]"),
                 absl::StrCat(id, " is outside the vocabulary [0, ", vocab, ")"));
}

absl::Status CheckRange(absl::string_view field, float value, common::SamplingRange range) {
  if (common::InRange(value, range)) return absl::OkStatus();
  return Invalid(field, absl::StrCat(value, " is outside ", common::RangeText(range)));
}

// The worker's ValidateLogitBias (worker/sampling/sampling_params.h), with the public field names.
absl::Status ValidateLogitBias(const ::llmserve::v1::SamplingParams& sampling,
                               uint32_t vocab_size) {
  if (sampling.logit_bias_size() > kMaxLogitBiasEntries) {
    return Invalid("sampling.logit_bias", absl::StrCat(sampling.logit_bias_size(),
                                                       " entries; at most ", kMaxLogitBiasEntries));
  }
  absl::flat_hash_set<int32_t> seen;
  for (const ::llmserve::v1::LogitBias& entry : sampling.logit_bias()) {
    const std::string field = absl::StrCat("sampling.logit_bias[", entry.token_id(), "]");
    if (entry.token_id() < 0 || static_cast<uint32_t>(entry.token_id()) >= vocab_size) {
      return Invalid(field, absl::StrCat("token id ", entry.token_id(),
                                         " is outside the vocabulary [0, ", vocab_size, ")"));
    }
    if (!seen.insert(entry.token_id()).second) return Invalid(field, "token id given twice");
    LLMSERVE_RETURN_IF_ERROR(CheckRange(field, entry.bias(), common::kLogitBiasRange));
  }
  return absl::OkStatus();
}

// Enough of the prompt's end to hold "<think>\n\n</think>\n\n" even one byte a token.
constexpr size_t kPromptTailTokens = 32;

// How the reply is split, read from the end of the prompt; a constraint (a structured output, a
// tool_choice that requires a call) then starts after the reasoning block, so that the worker's
// grammar leaves the reasoning free.
ReasoningParsing ResolveReasoning(const ServedModel& model, const std::vector<int32_t>& prompt,
                                  worker::v1::GenerateRequest* out) {
  ReasoningParsing parsing;
  parsing.format = model.reasoning_format();
  parsing.end_token_id = model.reasoning_end_token_id();
  const size_t tail = std::min(prompt.size(), kPromptTailTokens);
  absl::StatusOr<std::string> tail_text = model.tokenizer()->Decode(
      absl::MakeConstSpan(prompt).last(tail), /*skip_special_tokens=*/false);
  parsing.start = reasoning::StartFor(parsing.format, tail_text.ok() ? *tail_text : "");
  if (out->has_structured_output() && parsing.start != reasoning::ReasoningStart::kContent) {
    out->mutable_structured_output()->set_reasoning_block(
        parsing.start == reasoning::ReasoningStart::kReasoning
            ? ::llmserve::v1::StructuredOutput::REASONING_BLOCK_OPEN
            : ::llmserve::v1::StructuredOutput::REASONING_BLOCK_OPTIONAL);
  }
  return parsing;
}

}  // namespace

absl::Status ValidateChatPrompt(const ::llmserve::v1::ChatPrompt& chat) {
  if (chat.messages_size() == 0 || chat.messages_size() > kMaxChatMessages) {
    return Invalid("chat.messages", absl::StrCat("needs 1 to ", kMaxChatMessages, " messages, got ",
                                                 chat.messages_size()));
  }
  for (int i = 0; i < chat.messages_size(); ++i) {
    const std::string& role = chat.messages(i).role();
    if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
      return Invalid(absl::StrCat("chat.messages[", i, "].role"),
                     absl::StrCat("\"", role, "\" is not system, user, assistant or tool"));
    }
  }
  if (!chat.chat_template_kwargs_json().empty()) {
    if (absl::Status kwargs = common::ValidateTemplateKwargsJson(chat.chat_template_kwargs_json());
        !kwargs.ok()) {
      return Invalid("chat.chat_template_kwargs_json", kwargs.message());
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateSamplingParams(const ::llmserve::v1::SamplingParams& sampling,
                                    uint32_t vocab_size) {
  // The ranges of the worker's ValidateSamplingParams (worker/sampling/; one table in
  // worker_api_limits.h), which stays the last line for clients that reach a worker directly.
  if (sampling.has_temperature()) {
    LLMSERVE_RETURN_IF_ERROR(
        CheckRange("sampling.temperature", sampling.temperature(), common::kTemperatureRange));
  }
  if (sampling.has_top_k() &&
      (sampling.top_k() < 0 || static_cast<uint32_t>(sampling.top_k()) > vocab_size)) {
    return Invalid("sampling.top_k", absl::StrCat(sampling.top_k(), " is outside [0, ", vocab_size,
                                                  "] (0 disables it)"));
  }
  if (sampling.has_top_p()) {
    LLMSERVE_RETURN_IF_ERROR(CheckRange("sampling.top_p", sampling.top_p(), common::kTopPRange));
  }
  if (sampling.has_min_p()) {
    LLMSERVE_RETURN_IF_ERROR(CheckRange("sampling.min_p", sampling.min_p(), common::kMinPRange));
  }
  if (sampling.has_repetition_penalty()) {
    LLMSERVE_RETURN_IF_ERROR(CheckRange("sampling.repetition_penalty",
                                        sampling.repetition_penalty(),
                                        common::kRepetitionPenaltyRange));
  }
  if (sampling.has_presence_penalty()) {
    LLMSERVE_RETURN_IF_ERROR(CheckRange("sampling.presence_penalty", sampling.presence_penalty(),
                                        common::kPresencePenaltyRange));
  }
  if (sampling.has_frequency_penalty()) {
    LLMSERVE_RETURN_IF_ERROR(CheckRange("sampling.frequency_penalty", sampling.frequency_penalty(),
                                        common::kFrequencyPenaltyRange));
  }
  if (sampling.top_logprobs() < 0 || sampling.top_logprobs() > kMaxTopLogprobs) {
    return Invalid("sampling.top_logprobs",
                   absl::StrCat(sampling.top_logprobs(), " is outside [0, ", kMaxTopLogprobs, "]"));
  }
  return ValidateLogitBias(sampling, vocab_size);
}

absl::StatusOr<std::string> ResolveRequestId(const std::string& client_id) {
  if (client_id.empty()) {
    static std::atomic<uint64_t> counter{0};
    return absl::StrCat("req-", absl::ToUnixMicros(absl::Now()), "-", counter++);
  }
  if (client_id.size() > kMaxRequestIdLength) {
    return Invalid("request_id", absl::StrCat("at most ", kMaxRequestIdLength, " characters"));
  }
  for (char c : client_id) {
    if (c < 0x21 || c > 0x7e) return Invalid("request_id", "must be printable ASCII");
  }
  return client_id;
}

absl::StatusOr<std::vector<int32_t>> TokenizeText(
    const ServedModel& model, absl::string_view text, bool add_special_tokens,
    const PromptLimits& limits, absl::Span<const common::LiteralSpan> literal_spans) {
  if (model.tokenizer() == nullptr) return absl::FailedPreconditionError(model.tokenizer_error());
  if (text.size() > limits.max_prompt_bytes) {
    return Invalid("prompt",
                   absl::StrCat(text.size(), " bytes; at most ", limits.max_prompt_bytes));
  }
  const std::string_view view(text.data(), text.size());
  if (const size_t bad = common::utf8::FindFirstInvalid(view); bad != common::utf8::kValid) {
    return Invalid("prompt", absl::StrCat("not valid UTF-8 (byte ", bad, ")"));
  }
  std::vector<common::tokenizer::TextRange> ranges;
  ranges.reserve(literal_spans.size());
  for (const common::LiteralSpan& span : literal_spans) ranges.push_back({span.begin, span.end});
  absl::StatusOr<std::vector<int32_t>> ids =
      model.tokenizer()->EncodeWithLiteralRanges(view, add_special_tokens, ranges);
  if (!ids.ok()) return Invalid("prompt", ids.status().message());
  return ids;
}

absl::StatusOr<std::vector<int32_t>> TokenizeChat(const ServedModel& model,
                                                  const ::llmserve::v1::ChatPrompt& chat,
                                                  const PromptLimits& limits,
                                                  const ChatRenderer& render_chat) {
  if (absl::Status valid = ValidateChatPrompt(chat); !valid.ok()) return valid;
  if (model.tokenizer() == nullptr) return absl::FailedPreconditionError(model.tokenizer_error());
  absl::StatusOr<common::RenderedChat> rendered = render_chat(model, chat);
  if (!rendered.ok()) return rendered.status();
  // The template places the special tokens itself; the client's text in it stays text.
  return TokenizeText(model, rendered->text, /*add_special_tokens=*/false, limits,
                      rendered->literal_spans);
}

absl::StatusOr<PreparedRequest> PrepareRequest(const ::llmserve::v1::GenerateRequest& request,
                                               std::shared_ptr<const ServedModel> model,
                                               const PromptLimits& limits,
                                               const ChatRenderer& render_chat) {
  PreparedRequest prepared;
  absl::StatusOr<std::string> id = ResolveRequestId(request.request_id());
  if (!id.ok()) return id.status();
  prepared.request_id = *std::move(id);
  if (model->embeds()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model: \"", model->name(),
                     "\" serves embeddings (POST /v1/embeddings); it does not generate text"));
  }
  // Before the prompt's work (tokenizing, templates): cheap, and what a client most often gets
  // wrong.
  if (absl::Status sampling = ValidateSamplingParams(request.sampling(), model->vocab_size());
      !sampling.ok()) {
    return sampling;
  }
  std::vector<int32_t> prompt;
  switch (request.prompt_case()) {
    case ::llmserve::v1::GenerateRequest::kText: {
      absl::StatusOr<std::vector<int32_t>> ids = TokenizeText(
          *model, request.text(),
          request.has_add_special_tokens() ? request.add_special_tokens() : true, limits);
      if (!ids.ok()) return ids.status();
      prompt = *std::move(ids);
      break;
    }
    case ::llmserve::v1::GenerateRequest::kTokenIds:
      for (int i = 0; i < request.token_ids().ids_size(); ++i) {
        const int32_t token = request.token_ids().ids(i);
        if (absl::Status in_vocab = CheckVocabulary("token_ids.ids", i, token, model->vocab_size());
            !in_vocab.ok()) {
          return in_vocab;
        }
        prompt.push_back(token);
      }
      break;
    case ::llmserve::v1::GenerateRequest::kChat: {
      absl::StatusOr<std::vector<int32_t>> ids =
          TokenizeChat(*model, request.chat(), limits, render_chat);
      if (!ids.ok()) return ids.status();
      prompt = *std::move(ids);
      break;
    }
    case ::llmserve::v1::GenerateRequest::PROMPT_NOT_SET:
      return Invalid("prompt", "set one of text, token_ids or chat");
  }
  const uint32_t context = model->max_model_len();
  if (prompt.empty()) return Invalid("prompt", "is empty (0 tokens)");
  if (prompt.size() > context - 1) {
    return Invalid("prompt", absl::StrCat(prompt.size(), " tokens; the model's context (", context,
                                          ") leaves room for at most ", context - 1));
  }
  const uint32_t room = context - static_cast<uint32_t>(prompt.size());

  worker::v1::GenerateRequest& out = prepared.worker_request;
  out.mutable_prompt_token_ids()->Add(prompt.begin(), prompt.end());
  *out.mutable_sampling() = request.sampling();
  const ::llmserve::v1::StoppingCriteria& stopping = request.stopping();
  if (stopping.has_max_tokens()) {
    if (stopping.max_tokens() < 1 || stopping.max_tokens() > room) {
      return Invalid("stopping.max_tokens",
                     absl::StrCat(stopping.max_tokens(), " with a prompt of ", prompt.size(),
                                  " tokens; must be in [1, ", room, "] (context ", context, ")"));
    }
    out.set_max_tokens(stopping.max_tokens());
  } else {
    out.set_max_tokens(std::min(room, limits.default_max_tokens));
  }
  if (stopping.min_tokens() > out.max_tokens()) {
    return Invalid("stopping.min_tokens",
                   absl::StrCat(stopping.min_tokens(), " exceeds max_tokens ", out.max_tokens()));
  }
  out.set_min_tokens(stopping.min_tokens());
  out.set_ignore_eos(stopping.ignore_eos());
  if (stopping.stop_size() > kMaxStopStrings) {
    return Invalid("stopping.stop",
                   absl::StrCat(stopping.stop_size(), " strings; at most ", kMaxStopStrings));
  }
  for (int i = 0; i < stopping.stop_size(); ++i) {
    const std::string& stop = stopping.stop(i);
    if (stop.empty() || stop.size() > kMaxStopStringBytes ||
        !common::utf8::IsValid(std::string_view(stop))) {
      return Invalid(absl::StrCat("stopping.stop[", i, "]"),
                     absl::StrCat("must be 1 to ", kMaxStopStringBytes, " bytes of UTF-8"));
    }
    prepared.stop_strings.push_back(stop);
  }
  if (stopping.stop_token_ids_size() > kMaxStopTokenIds) {
    return Invalid("stopping.stop_token_ids", absl::StrCat(stopping.stop_token_ids_size(),
                                                           " ids; at most ", kMaxStopTokenIds));
  }
  for (int i = 0; i < stopping.stop_token_ids_size(); ++i) {
    if (absl::Status in_vocab = CheckVocabulary("stopping.stop_token_ids", i,
                                                stopping.stop_token_ids(i), model->vocab_size());
        !in_vocab.ok()) {
      return in_vocab;
    }
    out.add_stop_token_ids(stopping.stop_token_ids(i));
  }
  if (request.priority() < -kMaxPriority || request.priority() > kMaxPriority) {
    return Invalid("priority", absl::StrCat(request.priority(), " is outside [-1000, 1000]"));
  }
  out.set_priority(request.priority());
  out.set_lora_adapter(model->lora_adapter());
  absl::StatusOr<std::optional<ToolCalling>> tool_calling =
      ResolveOutputConstraints(request, model->tool_call_format(), &out);
  if (!tool_calling.ok()) return tool_calling.status();
  prepared.tool_calling = *std::move(tool_calling);
  if (request.has_chat() && model->reasoning_format() != reasoning::ReasoningFormat::kNone) {
    prepared.reasoning = ResolveReasoning(*model, prompt, &out);
  }
  prepared.skip_special_tokens =
      request.has_skip_special_tokens() ? request.skip_special_tokens() : true;
  prepared.model = std::move(model);
  return prepared;
}

}  // namespace llmserve::gateway
