#include "tools/make_model/presets.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace llmserve::tools {
namespace {

using worker::ModelConfig;

ModelConfig Llama(int64_t hidden, int64_t intermediate, int64_t layers, int64_t heads,
                  int64_t kv_heads, int64_t max_positions) {
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.family = worker::ModelFamily::kLlama;
  c.hidden_size = hidden;
  c.intermediate_size = intermediate;
  c.num_layers = layers;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = hidden / heads;
  c.max_position_embeddings = c.max_model_len = max_positions;
  c.norm_eps = 1e-5;
  return c;
}

ModelConfig Gpt2(int64_t hidden, int64_t layers, int64_t heads, int64_t max_positions) {
  ModelConfig c;
  c.architecture = "GPT2LMHeadModel";
  c.family = worker::ModelFamily::kGpt2;
  c.hidden_size = hidden;
  c.intermediate_size = 4 * hidden;
  c.num_layers = layers;
  c.num_heads = c.num_kv_heads = heads;
  c.head_dim = hidden / heads;
  c.max_position_embeddings = c.max_model_len = max_positions;
  c.norm = worker::NormKind::kLayerNorm;
  c.activation = worker::Activation::kGeluTanh;
  c.gated_mlp = false;
  c.position = worker::PositionKind::kLearned;
  c.qkv_bias = c.o_bias = c.mlp_bias = c.norm_bias = true;
  c.tied_embeddings = true;
  return c;
}

}  // namespace

std::vector<std::string> PresetNames() {
  return {"tiny", "tiny-gpt2", "small", "gpt2", "llama3-8b"};
}

absl::StatusOr<ModelConfig> PresetConfig(absl::string_view name, int64_t tokenizer_vocab,
                                         int32_t bos_id, std::vector<int32_t> eos_ids) {
  ModelConfig c;
  if (name == "tiny") {
    c = Llama(64, 128, 2, 4, 2, 1024);
  } else if (name == "tiny-gpt2") {
    c = Gpt2(64, 2, 4, 1024);
  } else if (name == "small") {
    c = Llama(576, 1536, 30, 9, 3, 2048);
    c.vocab_size = 128256;
    c.tied_embeddings = true;
  } else if (name == "gpt2") {
    c = Gpt2(768, 12, 12, 1024);
    c.vocab_size = 50257;
  } else if (name == "llama3-8b") {
    // Meta-Llama-3-8B's shape, for GPU benchmarks (16 GB of bf16 weights).
    c = Llama(4096, 14336, 32, 32, 8, 8192);
    c.vocab_size = 128256;
    c.rope_theta = 500000;
  } else {
    return absl::NotFoundError(absl::StrCat("unknown preset '", name,
                                            "' (known: ", absl::StrJoin(PresetNames(), ", "), ")"));
  }
  c.vocab_size = std::max(c.vocab_size, tokenizer_vocab);
  c.bos_token_id = bos_id;
  c.eos_token_ids = std::move(eos_ids);
  return c;
}

}  // namespace llmserve::tools
