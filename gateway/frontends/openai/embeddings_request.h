// OpenAI embeddings request bodies (POST /v1/embeddings).
//
// Taken: model (required), input (required: a string, a list of strings, a list of token ids, or
// a list of lists of token ids; at most kMaxEmbeddingInputs), encoding_format ("float", the
// default, or "base64": little-endian float32 bytes), dimensions (an integer >= 1), user. Any
// other field, and every wrong type, is refused with INVALID_ARGUMENT naming it.
//
// Thread-safe: pure functions.

#ifndef LLMSERVE_GATEWAY_FRONTENDS_OPENAI_EMBEDDINGS_REQUEST_H_
#define LLMSERVE_GATEWAY_FRONTENDS_OPENAI_EMBEDDINGS_REQUEST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gateway/pipeline/embedding_input.h"

namespace llmserve::gateway {

struct EmbeddingsRequest {
  std::string model;
  std::vector<EmbeddingInput> inputs;
  bool base64 = false;
  // 0: the model's length.
  int64_t dimensions = 0;
};

absl::StatusOr<EmbeddingsRequest> ParseEmbeddingsRequest(absl::string_view body);

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_FRONTENDS_OPENAI_EMBEDDINGS_REQUEST_H_
