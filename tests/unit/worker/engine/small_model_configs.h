// Small model shapes for the CPU backend's model-level tests: big enough to cover every code path
// (GQA, a tied or untied head, q/k/v biases, GPT-2's learned positions and LayerNorm), small
// enough for the double-precision reference model. Header-only, for gtest tests.

#ifndef LLMSERVE_TESTS_UNIT_ENGINE_SMALL_MODEL_CONFIGS_H_
#define LLMSERVE_TESTS_UNIT_ENGINE_SMALL_MODEL_CONFIGS_H_

#include "worker/model/model_config.h"

namespace llmserve::worker::testing {

// A Llama (or, with `qwen`, a Qwen2: q/k/v biases) of 2 layers, 4 query heads sharing 2 KV heads,
// hidden 40 and intermediate 52 (sizes that are not multiples of 16 or 32), vocabulary 101 (three
// panels of 32 rows and a tail of 5).
inline ModelConfig SmallLlama(bool qwen = false, bool tied = false) {
  ModelConfig c;
  c.architecture = qwen ? "Qwen2ForCausalLM" : "LlamaForCausalLM";
  c.family = ModelFamily::kLlama;
  c.vocab_size = 101;
  c.num_layers = 2;
  c.max_position_embeddings = c.max_model_len = 96;
  c.eos_token_ids = {0};
  c.num_kv_heads = 2;
  c.num_heads = 4;
  c.head_dim = 8;
  c.hidden_size = 40;
  c.intermediate_size = 52;  // gate/up: 104 rows
  c.qkv_bias = qwen;
  c.tied_embeddings = tied;
  return c;
}

// A GPT-2 of 2 layers, 3 heads of 8, hidden 24: biases everywhere, a tied head.
inline ModelConfig SmallGpt2() {
  ModelConfig c;
  c.architecture = "GPT2LMHeadModel";
  c.family = ModelFamily::kGpt2;
  c.vocab_size = 64;
  c.num_layers = 2;
  c.max_position_embeddings = c.max_model_len = 96;
  c.eos_token_ids = {0};
  c.num_heads = c.num_kv_heads = 3;
  c.head_dim = 8;
  c.hidden_size = 24;
  c.intermediate_size = 96;
  c.norm = NormKind::kLayerNorm;
  c.activation = Activation::kGeluTanh;
  c.gated_mlp = false;
  c.position = PositionKind::kLearned;
  c.qkv_bias = c.o_bias = c.mlp_bias = c.norm_bias = true;
  c.tied_embeddings = true;
  return c;
}

}  // namespace llmserve::worker::testing

#endif  // LLMSERVE_TESTS_UNIT_ENGINE_SMALL_MODEL_CONFIGS_H_
