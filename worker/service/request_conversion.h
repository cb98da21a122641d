// Turns a worker GenerateRequest (proto) into an EngineRequest, validating every field at the
// edge with INVALID_ARGUMENT messages that name it, and engine outputs back into
// GenerateResponse messages. The only place where the worker's proto and the engine's structs
// meet.
//
// Thread-safe: pure functions.

#ifndef LLMSERVE_WORKER_SERVICE_REQUEST_CONVERSION_H_
#define LLMSERVE_WORKER_SERVICE_REQUEST_CONVERSION_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "llmserve/worker/v1/worker.pb.h"
#include "worker/engine/engine.h"

namespace llmserve::worker {

// How a worker serving embeddings (--task embed) makes them.
struct EmbeddingTask {
  PoolingMethod method = PoolingMethod::kLast;
  bool normalize = true;
  // The hidden size.
  int64_t size = 0;
  // Matryoshka: lengths a request may truncate to (empty: any in [1, size]).
  bool matryoshka = false;
  std::vector<int64_t> matryoshka_dimensions;
};

// What a request is checked against.
struct RequestLimits {
  int64_t vocab_size = 0;
  int32_t max_model_len = 0;
  // Set when the worker serves embeddings: then every request must be an embedding request, and
  // otherwise none may be.
  std::optional<EmbeddingTask> embedding;
};

// Fields the engine does not check itself are checked against common/base/worker_api_limits.h.

// INVALID_ARGUMENT unless the id is 1 to 128 printable ASCII characters.
absl::Status ValidateRequestId(const std::string& request_id);

// The engine request for `request` (without its callback): INVALID_ARGUMENT naming the first bad
// field (prompt_token_ids, sampling.*, max_tokens, stop_token_ids, min_tokens, priority,
// cache_salt, lora_adapter (its spelling; whether it is loaded is the engine's NOT_FOUND),
// embedding.dimensions, or a generation field set on an embedding request);
// FAILED_PRECONDITION for an embedding request to a worker that does not serve embeddings, or the
// reverse. The engine re-checks what depends on its KV capacity.
absl::StatusOr<EngineRequest> ToEngineRequest(const v1::GenerateRequest& request,
                                              const RequestLimits& limits);

// Appends `output`'s tokens to `response` (several engine outputs may be merged into one message
// when the client reads slower than the engine produces).
void AppendTokens(const EngineOutput& output, v1::GenerateResponse* response);

// Sets finish reason, usage, timing and (embedding requests) the embedding from the last output
// of a request.
void SetFinal(const EngineOutput& output, v1::GenerateResponse* response);

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_SERVICE_REQUEST_CONVERSION_H_
