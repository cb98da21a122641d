#include "worker/model/hf_export.h"

#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "worker/model/model_writer.h"
#include "worker/model/safetensors_writer.h"

namespace llmserve::worker {
namespace {

// Rows [first, first + rows) of the f32 matrix `t` as a safetensors F32 tensor.
void AddRows(SafetensorsWriter& writer, const std::string& name, const Tensor& t, int64_t first,
             int64_t rows) {
  const int64_t cols = t.shape().size() == 1 ? t.shape()[0] : t.shape()[1];
  const auto* data = static_cast<const char*>(t.data()) + first * cols * 4;
  std::vector<int64_t> shape = {rows, cols};
  if (t.shape().size() == 1) shape = {cols};
  writer.Add(name, "F32", shape, std::string(data, rows * cols * 4));
}

void AddAll(SafetensorsWriter& writer, const std::string& name, const Tensor& t) {
  AddRows(writer, name, t, 0, t.shape().size() == 1 ? 1 : t.shape()[0]);
}

}  // namespace

absl::Status WriteHuggingFaceDirectory(const ModelWeights& weights,
                                       const common::tokenizer::TokenizerFiles* tokenizer,
                                       const std::string& directory) {
  const ModelConfig& c = weights.config;
  if (weights.dtype != DType::kF32 || c.family != ModelFamily::kLlama || c.qkv_bias || c.o_bias ||
      c.mlp_bias || c.quantization.quantized()) {
    return absl::InvalidArgumentError(
        "only f32 Llama-family weights without biases or 4-bit projections can be written as a "
        "Hugging Face directory");
  }
  std::error_code error;
  const std::filesystem::path dir(directory);
  std::filesystem::create_directories(dir, error);
  if (error)
    return absl::InternalError(absl::StrCat("cannot create ", directory, ": ", error.message()));
  LLMSERVE_RETURN_IF_ERROR(WriteText(dir / "config.json", ModelConfigToJson(c)));
  LLMSERVE_RETURN_IF_ERROR(WriteText(dir / "generation_config.json", GenerationConfigToJson(c)));
  SafetensorsWriter writer;
  const int64_t q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  const int64_t inter = c.intermediate_size;
  AddAll(writer, "model.embed_tokens.weight", weights.token_embedding);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const LayerWeights& l = weights.layers[i];
    const std::string p = absl::StrCat("model.layers.", i, ".");
    AddAll(writer, p + "input_layernorm.weight", l.attn_norm_weight);
    AddRows(writer, p + "self_attn.q_proj.weight", l.qkv_weight, 0, q);
    AddRows(writer, p + "self_attn.k_proj.weight", l.qkv_weight, q, kv);
    AddRows(writer, p + "self_attn.v_proj.weight", l.qkv_weight, q + kv, kv);
    AddAll(writer, p + "self_attn.o_proj.weight", l.o_weight);
    AddAll(writer, p + "post_attention_layernorm.weight", l.mlp_norm_weight);
    AddRows(writer, p + "mlp.gate_proj.weight", l.up_weight, 0, inter);
    AddRows(writer, p + "mlp.up_proj.weight", l.up_weight, inter, inter);
    AddAll(writer, p + "mlp.down_proj.weight", l.down_weight);
  }
  AddAll(writer, "model.norm.weight", weights.final_norm_weight);
  if (!c.tied_embeddings) AddAll(writer, "lm_head.weight", weights.lm_head);
  writer.SetMetadata("format", "pt");
  LLMSERVE_RETURN_IF_ERROR(writer.WriteFile((dir / "model.safetensors").string()));
  if (tokenizer != nullptr) {
    LLMSERVE_RETURN_IF_ERROR(WriteText(dir / "tokenizer.json", tokenizer->tokenizer_json));
    LLMSERVE_RETURN_IF_ERROR(
        WriteText(dir / "tokenizer_config.json", tokenizer->tokenizer_config_json));
  }
  return absl::OkStatus();
}

}  // namespace llmserve::worker
