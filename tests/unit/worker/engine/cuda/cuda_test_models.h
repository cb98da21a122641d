// Random checkpoints for the CUDA backend's model-level tests (cuda_backend_test,
// cuda_quantized_backend_test): a small GPT-2 config, and a checkpoint written to a temporary
// directory and loaded back. Header-only, for gtest tests.

#ifndef LLMSERVE_TESTS_UNIT_CUDA_CUDA_TEST_MODELS_H_
#define LLMSERVE_TESTS_UNIT_CUDA_CUDA_TEST_MODELS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/unit/worker/engine/small_model_configs.h"
#include "worker/model/model_config.h"
#include "worker/model/model_files.h"
#include "worker/model/model_weights.h"
#include "worker/model/model_writer.h"

namespace llmserve::worker::cuda::testing {

// A small Llama with `kv_heads` KV heads of `group` query heads each, of `head_dim` (64 or 128:
// the sizes the attention kernels have), and llama3 RoPE scaling.
inline ModelConfig LlamaConfig(int64_t kv_heads, int64_t group, int64_t head_dim) {
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.family = ModelFamily::kLlama;
  c.vocab_size = 301;
  c.num_layers = 2;
  c.max_position_embeddings = c.max_model_len = 512;
  c.eos_token_ids = {0};
  c.num_kv_heads = kv_heads;
  c.num_heads = kv_heads * group;
  c.head_dim = head_dim;
  c.hidden_size = 160;
  c.intermediate_size = 224;
  c.rope_theta = 500000;
  c.rope_scaling.kind = RopeScaling::Kind::kLlama3;
  c.rope_scaling.factor = 8;
  c.rope_scaling.original_max_position_embeddings = 64;
  return c;
}

// small_model_configs.h's GPT-2 (biases everywhere, a tied head) at head_dim 64 (a size the
// attention kernels have): 2 heads, hidden 128.
inline ModelConfig Gpt2TestConfig() {
  ModelConfig c = worker::testing::SmallGpt2();
  c.vocab_size = 257;
  c.max_position_embeddings = c.max_model_len = 512;
  c.num_heads = c.num_kv_heads = 2;
  c.head_dim = 64;
  c.hidden_size = 128;
  c.intermediate_size = 512;
  return c;
}

// A random checkpoint of `config` (its projections in `quantization`'s 4-bit format, if any) in a
// temporary directory, and its config as loaded back.
struct TestModel {
  TestModel(const ModelConfig& config, uint64_t seed, const std::string& dir_name,
            const CheckpointQuantization& quantization = {})
      : dir(dir_name) {
    EXPECT_TRUE(WriteRandomModel(config,
                                 {.seed = seed, .scale = 0.15f, .quantization = quantization},
                                 dir.path())
                    .ok());
    auto opened = ModelFiles::Open(dir.path());
    EXPECT_TRUE(opened.ok()) << opened.status();
    files = *std::move(opened);
    auto parsed = ParseModelConfig(files->config_json(), "");
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    loaded_config = *parsed;
  }
  std::unique_ptr<ModelWeights> Weights(DType dtype = DType::kF32) const {
    auto weights = LoadModelWeights(*files, loaded_config, dtype);
    EXPECT_TRUE(weights.ok()) << weights.status();
    return *std::move(weights);
  }

  ::llmserve::testing::ScopedTempDir dir;
  std::unique_ptr<ModelFiles> files;
  ModelConfig loaded_config;
};

}  // namespace llmserve::worker::cuda::testing

#endif  // LLMSERVE_TESTS_UNIT_CUDA_CUDA_TEST_MODELS_H_
