// How a model directory says its embeddings are made, as sentence-transformers writes it:
// modules.json lists the pipeline (Transformer, then Pooling, perhaps Normalize), the Pooling
// module's directory holds config.json with one pooling_mode_* set, and a Normalize module asks
// for unit-length vectors. Matryoshka training is read from config.json (`matryoshka_dimensions`,
// or `is_matryoshka: true`), where vLLM reads it.
//
// Thread-safe: pure functions.

#ifndef LLMSERVE_WORKER_MODEL_POOLING_CONFIG_H_
#define LLMSERVE_WORKER_MODEL_POOLING_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace llmserve::worker {

// Which of the last layer's hidden states (after the final norm) make the embedding.
enum class PoolingMethod {
  kLast,  // the last token's (decoder-only embedding models: gte-Qwen2, e5-mistral)
  kMean,  // the mean over every token
  kCls,   // the first token's (BERT-style [CLS])
};

absl::string_view PoolingMethodName(PoolingMethod method);
// "last", "mean" or "cls"; INVALID_ARGUMENT otherwise.
absl::StatusOr<PoolingMethod> ParsePoolingMethod(absl::string_view name);

struct PoolingConfig {
  // Unset when the directory has no sentence-transformers Pooling module.
  std::optional<PoolingMethod> method;
  // Whether modules.json has a Normalize module.
  bool normalize = false;
  bool matryoshka = false;
  // The lengths the model was trained to be truncated to (empty with matryoshka: any).
  std::vector<int64_t> matryoshka_dimensions;
};

// Reads `directory`'s sentence-transformers files (none is fine: an empty config) and
// `config_json` (the model's config.json text). INVALID_ARGUMENT naming the file and field for a
// pooling mode we do not implement (max, weightedmean, mean_sqrt_len_tokens), for more than one
// mode set, for malformed JSON, or for Matryoshka lengths outside [1, hidden_size].
absl::StatusOr<PoolingConfig> ReadPoolingConfig(const std::string& directory,
                                                absl::string_view config_json, int64_t hidden_size);

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_MODEL_POOLING_CONFIG_H_
