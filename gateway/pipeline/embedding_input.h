// One input of an embeddings request and the limits on a request's inputs, apart from the run
// that serves them (embedding_run.h), so that request parsers need only this.
//
// Thread-safe: plain data.

#ifndef LLMSERVE_GATEWAY_PIPELINE_EMBEDDING_INPUT_H_
#define LLMSERVE_GATEWAY_PIPELINE_EMBEDDING_INPUT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace llmserve::gateway {

// OpenAI's limit on inputs per request.
inline constexpr int kMaxEmbeddingInputs = 2048;
// Tokens of all inputs of one request together.
inline constexpr int64_t kMaxEmbeddingRequestTokens = int64_t{1} << 20;
inline constexpr int kMaxEmbeddingInputsRunning = 32;

// One input: text, or token ids.
struct EmbeddingInput {
  std::optional<std::string> text;
  std::vector<int32_t> token_ids;
};

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_PIPELINE_EMBEDDING_INPUT_H_
