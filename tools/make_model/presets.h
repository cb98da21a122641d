// Named model shapes for llmserve-make-model.
//
//   tiny        Llama-style, 2 layers, hidden 64, GQA 4:2 — unit and integration tests
//   tiny-gpt2   GPT-2-style, 2 layers, hidden 64 — unit and integration tests
//   small       SmolLM-135M's layer shape with a Llama-3-sized vocabulary (hidden 576,
//               intermediate 1536, 30 layers, 9 heads, 3 KV heads, head dim 64, vocab 128256,
//               tied embeddings, ~180M parameters) — benchmarks
//   gpt2        GPT-2-124M's shape — benchmarks
//
// Thread-safe: pure functions.

#ifndef LLMSERVE_TOOLS_MAKE_MODEL_PRESETS_H_
#define LLMSERVE_TOOLS_MAKE_MODEL_PRESETS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/model/model_config.h"

namespace llmserve::tools {

// The preset's config with vocab_size at least `tokenizer_vocab` (the tokenizer's size; presets
// with a fixed larger vocabulary keep theirs, and the extra ids are never produced by the
// tokenizer) and BOS/EOS set. NOT_FOUND names the known presets.
absl::StatusOr<worker::ModelConfig> PresetConfig(absl::string_view name, int64_t tokenizer_vocab,
                                                 int32_t bos_id, std::vector<int32_t> eos_ids);

std::vector<std::string> PresetNames();

}  // namespace llmserve::tools

#endif  // LLMSERVE_TOOLS_MAKE_MODEL_PRESETS_H_
