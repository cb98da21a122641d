// OpenAI-compatible request bodies (POST /v1/completions, /v1/chat/completions) parsed into the
// public API's GenerateRequest, with the parameters OpenAI and vLLM name: max_tokens /
// max_completion_tokens, temperature, top_p, top_k, min_p, presence_penalty, frequency_penalty,
// repetition_penalty, seed, stop, stop_token_ids, ignore_eos, min_tokens, logprobs /
// top_logprobs, logit_bias, n, stream, stream_options.include_usage, user, skip_special_tokens,
// and the structured-output and tool fields of openai_structured.h; the "developer" role is
// "system". Unknown fields are ignored (as OpenAI's clients send extras); known ones with a wrong
// type are INVALID_ARGUMENT naming the field, and known ones we do not implement (echo: true,
// best_of other than n, prompt_logprobs, a non-empty suffix) are INVALID_ARGUMENT naming them.
//
// Thread-safe: pure functions.

#ifndef LLMSERVE_GATEWAY_FRONTENDS_OPENAI_OPENAI_REQUEST_H_
#define LLMSERVE_GATEWAY_FRONTENDS_OPENAI_OPENAI_REQUEST_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "llmserve/v1/inference.pb.h"

namespace llmserve::gateway {

enum class OpenAiEndpoint { kCompletions, kChatCompletions };

struct OpenAiRequest {
  ::llmserve::v1::GenerateRequest request;
  // Choices to generate, in [1, 16].
  int n = 1;
  bool stream = false;
  bool include_usage = false;
  // Completions: `logprobs` N (alternatives per token); chat: `logprobs: true` + top_logprobs.
  bool logprobs = false;
  // The caller's `user` field (for logs).
  std::string user;
  // The field that gave the request's structured output ("response_format", "guided_json", ...),
  // so that errors about `structured_output` name it as the client wrote it; "" when none.
  std::string constraint_field;
};

inline constexpr int kMaxChoices = 16;
// Bounds on a body's JSON (every value counts, in ignored fields too): the memory a parsed body
// takes stays a small multiple of the body's size, however it is shaped. 262,144 values hold a
// token-id prompt that fills a 256k context.
inline constexpr int kMaxJsonDepth = 64;
inline constexpr int kMaxJsonValues = 1 << 18;

absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(OpenAiEndpoint endpoint, absl::string_view body);

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_FRONTENDS_OPENAI_OPENAI_REQUEST_H_
