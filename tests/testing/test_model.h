// Writes the `tiny` preset model (random weights, a small trained byte-level BPE tokenizer with a
// chat template) into a directory, for tests that need a real model directory on disk.

#ifndef LLMSERVE_TESTS_TESTING_TEST_MODEL_H_
#define LLMSERVE_TESTS_TESTING_TEST_MODEL_H_

#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "tools/make_model/bpe_builder.h"
#include "tools/make_model/presets.h"
#include "worker/model/model_writer.h"

namespace llmserve::testing {

// `slow` widens and deepens it (8 layers of 256, about 3 ms a token on one thread): for tests that
// must catch a request still running. `quantization` writes its projections as an AWQ or GPTQ
// checkpoint.
inline absl::Status WriteTinyModel(const std::string& dir, uint64_t seed = 9, bool slow = false,
                                   const worker::CheckpointQuantization& quantization = {}) {
  const tools::BuiltTokenizer built = tools::BuildByteLevelTokenizer(200);
  absl::StatusOr<worker::ModelConfig> config =
      tools::PresetConfig("tiny", built.vocab_size, built.bos_token_id, {built.eos_token_id});
  if (!config.ok()) return config.status();
  if (slow) {
    config->hidden_size = 256;
    config->intermediate_size = 1024;
    config->num_heads = 256 / config->head_dim;
    config->num_kv_heads = config->num_heads / 4;
    config->num_layers = 8;
  }
  if (absl::Status written =
          worker::WriteRandomModel(*config, {.seed = seed, .quantization = quantization}, dir);
      !written.ok()) {
    return written;
  }
  std::ofstream(dir + "/tokenizer.json") << built.tokenizer_json;
  std::ofstream(dir + "/tokenizer_config.json") << built.tokenizer_config_json;
  return absl::OkStatus();
}

}  // namespace llmserve::testing

#endif  // LLMSERVE_TESTS_TESTING_TEST_MODEL_H_
