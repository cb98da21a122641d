// One parametrized description of the decoder-only transformers we run, read from a Hugging Face
// config.json (+ generation_config.json). Families differ only in these parameters and in their
// tensor names (model_layout.h), never in code paths of their own.
//
// Supported: GPT2LMHeadModel, LlamaForCausalLM (rope_scaling none, linear or llama3),
// MistralForCausalLM, Qwen2ForCausalLM.
//
// Thread-safe: a plain value.

#ifndef LLMSERVE_WORKER_MODEL_MODEL_CONFIG_H_
#define LLMSERVE_WORKER_MODEL_MODEL_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace llmserve::worker {

// Which tensor naming scheme the checkpoint uses.
enum class ModelFamily { kGpt2, kLlama };

enum class NormKind {
  kLayerNorm,  // (x - mean) / sqrt(var + eps) * weight + bias
  kRmsNorm,    // x / sqrt(mean(x^2) + eps) * weight
};

enum class Activation {
  kGeluTanh,  // GPT-2's "gelu_new": 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3)))
  kGeluErf,   // exact GELU: 0.5x(1 + erf(x/sqrt(2)))
  kSilu,      // x * sigmoid(x)
};

enum class PositionKind { kLearned, kRope };

struct RopeScaling {
  enum class Kind { kNone, kLinear, kLlama3 };
  Kind kind = Kind::kNone;
  // Linear: positions are divided by factor. Llama3: frequencies are scaled as Llama 3.1 does.
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

// A checkpoint whose projections are stored quantized (config.json's "quantization_config"):
// AWQ (quant_method "awq", version "gemm", zero points) or GPTQ (quant_method "gptq", desc_act
// false, the original "gptq" packing), 4 bits with per-group scales along the input dimension.
// Embeddings, norms and the LM head stay in a float dtype. quantized_checkpoint.h reads them.
// kGguf: a GGUF file with some projections in Q4_0/Q4_1/Q4_K, kept in 4 bits (groups of 32)
// while its other tensors are dequantized (gguf_weights.h): a mix, projection by projection.
struct CheckpointQuantization {
  enum class Method { kNone, kAwq, kGptq, kGguf };
  Method method = Method::kNone;
  // Input columns sharing one scale and zero point; -1 (GPTQ) means the whole input dimension.
  int64_t group_size = 0;
  // GPTQ's "sym": every zero point is 8. AWQ always stores zero points.
  bool symmetric = false;

  bool quantized() const { return method != Method::kNone; }
  // The group size of a projection with `cols` inputs.
  int64_t GroupSizeFor(int64_t cols) const { return group_size < 0 ? cols : group_size; }
};

// "none", "awq", "gptq" or "gguf".
absl::string_view CheckpointQuantizationName(CheckpointQuantization::Method method);

struct ModelConfig {
  // The `architectures[0]` entry, e.g. "LlamaForCausalLM".
  std::string architecture;
  ModelFamily family = ModelFamily::kLlama;

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  // Width of the MLP's hidden layer.
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  // Grouped-query attention: num_heads is a multiple of num_kv_heads.
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  // The longest sequence the positions support.
  int64_t max_position_embeddings = 0;
  // The context length we serve: max_position_embeddings, capped by a sliding window (we run
  // full attention, which equals sliding-window attention for sequences within the window).
  int64_t max_model_len = 0;

  NormKind norm = NormKind::kRmsNorm;
  double norm_eps = 1e-5;
  Activation activation = Activation::kSilu;
  // SwiGLU-style MLP (down(act(gate(x)) * up(x))) rather than down(act(up(x))).
  bool gated_mlp = true;

  PositionKind position = PositionKind::kRope;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;

  bool qkv_bias = false;
  bool o_bias = false;
  bool mlp_bias = false;
  // Whether the norms have a bias (LayerNorm).
  bool norm_bias = false;
  // The LM head reuses the token embedding matrix.
  bool tied_embeddings = false;

  // -1 when the model has none.
  int32_t bos_token_id = -1;
  // From config.json and generation_config.json, without duplicates.
  std::vector<int32_t> eos_token_ids;

  // Quantized projections in the checkpoint itself (Llama-family architectures only).
  CheckpointQuantization quantization;

  // Parameters of the model as described (embeddings counted once when tied).
  int64_t NumParameters() const;
};

// Parses config.json text, and generation_config.json text when not empty. INVALID_ARGUMENT
// names the field for missing or out-of-range values, and UNIMPLEMENTED names what is not
// supported (architecture, activation, rope_scaling type, a quantization_config other than 4-bit
// AWQ GEMM or GPTQ without act-order).
absl::StatusOr<ModelConfig> ParseModelConfig(absl::string_view config_json,
                                             absl::string_view generation_config_json);

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_MODEL_MODEL_CONFIG_H_
