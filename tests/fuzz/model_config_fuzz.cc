// Fuzzes config.json parsing: arbitrary text must give a config or an error, never a crash, and
// an accepted config must be self-consistent (quantization_config included).

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "worker/model/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto config = llmserve::worker::ParseModelConfig(text, text);
  if (!config.ok()) return 0;
  if (config->num_heads % config->num_kv_heads != 0 || config->head_dim <= 0 ||
      config->max_model_len <= 0 || config->max_model_len > config->max_position_embeddings) {
    std::abort();
  }
  // An accepted AWQ/GPTQ config cuts every projection's inputs into whole groups of 8-packable
  // columns: the loader's shape arithmetic relies on it.
  const llmserve::worker::CheckpointQuantization& q = config->quantization;
  if (q.quantized()) {
    for (const int64_t in :
         {config->hidden_size, config->intermediate_size, config->num_heads * config->head_dim}) {
      if (in % 8 != 0 || q.GroupSizeFor(in) < 1 || in % q.GroupSizeFor(in) != 0) std::abort();
    }
    if ((config->num_kv_heads * config->head_dim) % 8 != 0) std::abort();
  }
  return 0;
}
