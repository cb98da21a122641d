// Fuzz target: ParseOpenAiRequest, ParseResponsesRequest and ParseEmbeddingsRequest, the first
// thing the gateway does with an OpenAI request body. The first byte picks the endpoint ('r':
// /v1/responses, 'e': /v1/embeddings, else odd: /v1/chat/completions, even: /v1/completions; the
// seeds start with 'c', 'p', 'r' or 'e'), the rest is the body. Any body must give a request or
// INVALID_ARGUMENT, never a crash, an exception or another code; an accepted request must keep the
// parser's promises (n in [1, kMaxChoices], the prompt the endpoint needs) and be a message the
// gateway can send on: its strings are valid UTF-8, so it serializes and parses back unchanged.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gateway/frontends/openai/embeddings_request.h"
#include "gateway/frontends/openai/openai_request.h"
#include "gateway/frontends/openai/responses_request.h"
#include "llmserve/v1/inference.pb.h"

namespace {

using llmserve::gateway::kMaxChoices;
using llmserve::gateway::OpenAiEndpoint;
using llmserve::gateway::OpenAiRequest;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "openai_request_fuzz: %s\n", what);
  std::abort();
}

void CheckAccepted(OpenAiEndpoint endpoint, const OpenAiRequest& parsed) {
  if (parsed.n < 1 || parsed.n > kMaxChoices) Fail("n outside [1, kMaxChoices]");
  const llmserve::v1::GenerateRequest& request = parsed.request;
  if (endpoint == OpenAiEndpoint::kChatCompletions) {
    if (!request.has_chat() || request.chat().messages_size() == 0) {
      Fail("a chat request was accepted without messages");
    }
  } else if (request.prompt_case() != llmserve::v1::GenerateRequest::kText &&
             request.prompt_case() != llmserve::v1::GenerateRequest::kTokenIds) {
    Fail("a completion request was accepted without a text or token-id prompt");
  }
  const int top_logprobs = request.sampling().top_logprobs();
  if (top_logprobs < 0 || top_logprobs > 20) Fail("top_logprobs outside [0, 20]");
  for (int32_t id : request.token_ids().ids()) {
    if (id < 0) Fail("negative prompt token id");
  }
  // proto3 strings must be UTF-8: a request that does not parse back would fail at the worker
  // pool's serialization instead of here, with a less clear error.
  std::string bytes;
  if (!request.SerializeToString(&bytes)) Fail("the request does not serialize");
  llmserve::v1::GenerateRequest reparsed;
  if (!reparsed.ParseFromString(bytes)) Fail("the serialized request does not parse back");
  if (reparsed.ByteSizeLong() != bytes.size()) Fail("the request changed on a round trip");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if (data[0] == 'e') {
    const absl::StatusOr<llmserve::gateway::EmbeddingsRequest> parsed =
        llmserve::gateway::ParseEmbeddingsRequest(
            absl::string_view(reinterpret_cast<const char*>(data) + 1, size - 1));
    if (!parsed.ok()) {
      if (!absl::IsInvalidArgument(parsed.status())) Fail("a refusal that is not INVALID_ARGUMENT");
      return 0;
    }
    if (parsed->inputs.empty() ||
        parsed->inputs.size() > static_cast<size_t>(llmserve::gateway::kMaxEmbeddingInputs)) {
      Fail("an embeddings request with no inputs or too many");
    }
    if (parsed->dimensions < 0) Fail("negative embedding dimensions");
    for (const llmserve::gateway::EmbeddingInput& input : parsed->inputs) {
      for (int32_t id : input.token_ids) {
        if (id < 0) Fail("a negative token id in an embedding input");
      }
    }
    return 0;
  }
  if (data[0] == 'r') {
    const absl::StatusOr<llmserve::gateway::ResponsesRequest> parsed =
        llmserve::gateway::ParseResponsesRequest(
            absl::string_view(reinterpret_cast<const char*>(data) + 1, size - 1));
    if (!parsed.ok()) {
      if (!absl::IsInvalidArgument(parsed.status())) Fail("a refusal that is not INVALID_ARGUMENT");
      return 0;
    }
    // A Responses request is a chat of one choice.
    if (parsed->chat.n != 1) Fail("a Responses request with more than one choice");
    CheckAccepted(OpenAiEndpoint::kChatCompletions, parsed->chat);
    return 0;
  }
  const OpenAiEndpoint endpoint =
      (data[0] & 1) != 0 ? OpenAiEndpoint::kChatCompletions : OpenAiEndpoint::kCompletions;
  const absl::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  const absl::StatusOr<OpenAiRequest> parsed =
      llmserve::gateway::ParseOpenAiRequest(endpoint, body);
  if (!parsed.ok()) {
    if (!absl::IsInvalidArgument(parsed.status())) Fail("a refusal that is not INVALID_ARGUMENT");
    return 0;
  }
  CheckAccepted(endpoint, *parsed);
  return 0;
}
