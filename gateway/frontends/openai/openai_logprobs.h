// The logprobs of OpenAI responses: kept compactly per choice while it generates (a token id and a
// float per entry, 8 bytes; texts are looked up when rendered) and rendered in OpenAI's shapes,
// chat's `{"content": [...]}` and completions' `{"text_offset", "token_logprobs", "tokens",
// "top_logprobs"}`: as a JSON value for a stream's chunk (a few tokens), or appended straight to
// a whole response's body, one token at a time. Keeping every entry as a JSON tree (or as protos
// with their texts) until the response was built cost the gateway about 1.2 KB an entry, 17 times
// the bytes it renders to (issue 28).
//
// Thread-compatible.

#ifndef LLMSERVE_GATEWAY_FRONTENDS_OPENAI_OPENAI_LOGPROBS_H_
#define LLMSERVE_GATEWAY_FRONTENDS_OPENAI_OPENAI_LOGPROBS_H_

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "gateway/pipeline/served_model.h"
#include "llmserve/v1/inference.pb.h"

namespace llmserve::gateway {

struct LogprobEntry {
  int32_t token_id = 0;
  float logprob = 0;
};

// The logprobs of a sequence of generated tokens.
class TokenLogprobs {
 public:
  void Add(const ::llmserve::v1::GeneratedToken& token);
  size_t size() const { return chosen_.size(); }
  const LogprobEntry& chosen(size_t i) const { return chosen_[i]; }
  // Token i's most likely alternatives, most likely first.
  absl::Span<const LogprobEntry> alternatives(size_t i) const;

 private:
  std::vector<LogprobEntry> chosen_;
  std::vector<LogprobEntry> alternatives_;
  // Where token i's alternatives end in alternatives_.
  std::vector<uint32_t> alternatives_end_;
};

// Chat's logprobs object.
nlohmann::json ChatLogprobsJson(const ServedModel& model, const TokenLogprobs& tokens);
void AppendChatLogprobs(const ServedModel& model, const TokenLogprobs& tokens, std::string* out);

// The completions API's logprobs object; text offsets count from `text_offset`.
nlohmann::json CompletionLogprobsJson(const ServedModel& model, const TokenLogprobs& tokens,
                                      size_t text_offset);
void AppendCompletionLogprobs(const ServedModel& model, const TokenLogprobs& tokens,
                              size_t text_offset, std::string* out);

// JSON text of `json` as the OpenAI API writes it: compact, and token texts holding part of a
// UTF-8 character get U+FFFD for their bad bytes (as OpenAI does) instead of an exception.
std::string DumpJson(const nlohmann::json& json);

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_FRONTENDS_OPENAI_OPENAI_LOGPROBS_H_
