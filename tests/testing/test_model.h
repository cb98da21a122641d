// Writes the `tiny` preset model (random weights, a small trained byte-level BPE tokenizer with a
// chat template) into a directory, for tests that need a real model directory on disk.

#ifndef LLMSERVE_TESTS_TESTING_TEST_MODEL_H_
#define LLMSERVE_TESTS_TESTING_TEST_MODEL_H_

#include <fstream>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "tools/make_model/bpe_builder.h"
#include "tools/make_model/presets.h"
#include "worker/model/model_writer.h"

namespace llmserve::testing {

// The tiny preset with `reshape` applied to its config, random weights from `options`, and the
// tokenizer files.
inline absl::Status WriteReshapedTinyModel(const std::string& dir,
                                           const std::function<void(worker::ModelConfig&)>& reshape,
                                           const worker::RandomWeightsOptions& options) {
  const tools::BuiltTokenizer built = tools::BuildByteLevelTokenizer(200);
  absl::StatusOr<worker::ModelConfig> config =
      tools::PresetConfig("tiny", built.vocab_size, built.bos_token_id, {built.eos_token_id});
  if (!config.ok()) return config.status();
  reshape(*config);
  if (absl::Status written = worker::WriteRandomModel(*config, options, dir); !written.ok()) {
    return written;
  }
  std::ofstream(dir + "/tokenizer.json") << built.tokenizer_json;
  std::ofstream(dir + "/tokenizer_config.json") << built.tokenizer_config_json;
  return absl::OkStatus();
}

// `slow` widens and deepens it (8 layers of 256, about 3 ms a token on one thread): for tests that
// must catch a request still running. `quantization` writes its projections as an AWQ or GPTQ
// checkpoint.
inline absl::Status WriteTinyModel(const std::string& dir, uint64_t seed = 9, bool slow = false,
                                   const worker::CheckpointQuantization& quantization = {}) {
  return WriteReshapedTinyModel(dir,
                                [slow](worker::ModelConfig& config) {
                                  if (!slow) return;
                                  config.hidden_size = 256;
                                  config.intermediate_size = 1024;
                                  config.num_heads = 256 / config.head_dim;
                                  config.num_kv_heads = config.num_heads / 4;
                                  config.num_layers = 8;
                                },
                                {.seed = seed, .quantization = quantization});
}

// The tiny preset at the CUDA backend's smallest head dim (64; the preset's 16 has no kernels,
// docs/cuda.md): hidden 128 in 2 query heads sharing 1 KV head, `num_layers` layers. For tests
// that serve one model on both backends.
inline absl::Status WriteTinyHeadDim64Model(const std::string& dir, uint64_t seed, int num_layers) {
  return WriteReshapedTinyModel(dir,
                                [num_layers](worker::ModelConfig& config) {
                                  config.hidden_size = 128;
                                  config.head_dim = 64;
                                  config.num_heads = 2;
                                  config.num_kv_heads = 1;
                                  config.intermediate_size = 256;
                                  config.num_layers = num_layers;
                                },
                                {.seed = seed});
}

}  // namespace llmserve::testing

#endif  // LLMSERVE_TESTS_TESTING_TEST_MODEL_H_
