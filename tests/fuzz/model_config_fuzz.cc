// Fuzzes config.json parsing: arbitrary text must give a config or an error, never a crash, and
// an accepted config must be self-consistent.

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
  return 0;
}
