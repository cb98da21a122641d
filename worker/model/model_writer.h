// Writes Hugging Face model directories from a ModelConfig: config.json,
// generation_config.json and safetensors weights in the family's own tensor names and layout.
// llmserve-make-model and the tests use it to make models, since no real weights can be
// downloaded where we build.
//
// Thread-safe: pure functions.

#ifndef LLMSERVE_WORKER_MODEL_MODEL_WRITER_H_
#define LLMSERVE_WORKER_MODEL_MODEL_WRITER_H_

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "worker/model/dtype.h"
#include "worker/model/model_config.h"

namespace llmserve::worker {

// One tensor of a checkpoint, as the family's Hugging Face code names and shapes it.
struct CheckpointTensorSpec {
  enum class Init { kRandom, kOnes, kZeros };
  std::string name;
  std::vector<int64_t> shape;
  // Norm weights start at one and biases at zero, as in training; everything else is random.
  Init init = Init::kRandom;
};

// Every tensor a checkpoint of `config` holds (GPT-2 without the "transformer." prefix).
std::vector<CheckpointTensorSpec> CheckpointTensors(const ModelConfig& config);

// config.json text that ParseModelConfig reads back as `config` (with quantization_config when
// config.quantization says so).
std::string ModelConfigToJson(const ModelConfig& config);

// generation_config.json text with the BOS and EOS ids.
std::string GenerationConfigToJson(const ModelConfig& config);

// Writes `text` into `path`, replacing it (a model directory's JSON files); DATA_LOSS naming the
// path when it cannot.
absl::Status WriteText(const std::filesystem::path& path, const std::string& text);

struct RandomWeightsOptions {
  DType dtype = DType::kF32;
  uint64_t seed = 0;
  // Random values are uniform in [-scale, scale]; biases get a tenth of it so that the model's
  // outputs depend on them without being dominated by them.
  float scale = 0.05f;
  // Split into shards of at most this many bytes with model.safetensors.index.json; 0: one file.
  int64_t max_shard_bytes = 0;
  // AWQ or GPTQ (its group size, and for GPTQ sym): every Llama-family projection is quantized
  // (QuantizeInt4) and written in that format, with config.json's quantization_config. The
  // config's own `quantization` is ignored.
  CheckpointQuantization quantization;
  // With `quantization`: write the same model's projections dequantized, as f32 `.weight` tensors,
  // and no quantization_config: the unquantized model that the quantized one computes, for tests.
  bool dequantized = false;
  // Layers from this index on (-1: none) have their residual outputs (Llama's o_proj and
  // down_proj, GPT-2's attn.c_proj and mlp.c_proj) scaled by `layer_damping`: the model then
  // computes nearly what its first layers do, so the same model cut to those layers (same seed,
  // fewer layers) is a draft model that often agrees with it. Random weights otherwise give a
  // draft model no better than chance, which cannot show what speculative decoding does.
  int64_t damp_layers_from = -1;
  float layer_damping = 1.0f;
};

// Writes config.json, generation_config.json and the weights into `directory` (created if
// needed). The same config, options and seed always give the same bytes.
absl::Status WriteRandomModel(const ModelConfig& config, const RandomWeightsOptions& options,
                              const std::string& directory);

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_MODEL_MODEL_WRITER_H_
