#include "worker/model/model_writer.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status/status_macros.h"
#include "worker/model/safetensors_writer.h"

namespace llmserve::worker {
namespace {

using Init = CheckpointTensorSpec::Init;

void AddLlamaLayer(const ModelConfig& c, int i, std::vector<CheckpointTensorSpec>* out) {
  const std::string p = absl::StrCat("model.layers.", i, ".");
  const int64_t h = c.hidden_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  const int64_t inter = c.intermediate_size;
  out->push_back({p + "input_layernorm.weight", {h}, Init::kOnes});
  out->push_back({p + "self_attn.q_proj.weight", {q, h}});
  out->push_back({p + "self_attn.k_proj.weight", {kv, h}});
  out->push_back({p + "self_attn.v_proj.weight", {kv, h}});
  if (c.qkv_bias) {
    out->push_back({p + "self_attn.q_proj.bias", {q}});
    out->push_back({p + "self_attn.k_proj.bias", {kv}});
    out->push_back({p + "self_attn.v_proj.bias", {kv}});
  }
  out->push_back({p + "self_attn.o_proj.weight", {h, q}});
  if (c.o_bias) out->push_back({p + "self_attn.o_proj.bias", {h}});
  out->push_back({p + "post_attention_layernorm.weight", {h}, Init::kOnes});
  out->push_back({p + "mlp.gate_proj.weight", {inter, h}});
  out->push_back({p + "mlp.up_proj.weight", {inter, h}});
  out->push_back({p + "mlp.down_proj.weight", {h, inter}});
  if (c.mlp_bias) {
    out->push_back({p + "mlp.gate_proj.bias", {inter}});
    out->push_back({p + "mlp.up_proj.bias", {inter}});
    out->push_back({p + "mlp.down_proj.bias", {h}});
  }
}

void AddGpt2Layer(const ModelConfig& c, int i, std::vector<CheckpointTensorSpec>* out) {
  const std::string p = absl::StrCat("h.", i, ".");
  const int64_t h = c.hidden_size, inter = c.intermediate_size;
  out->push_back({p + "ln_1.weight", {h}, Init::kOnes});
  out->push_back({p + "ln_1.bias", {h}, Init::kZeros});
  out->push_back({p + "attn.c_attn.weight", {h, 3 * h}});  // Conv1D: [in, out]
  out->push_back({p + "attn.c_attn.bias", {3 * h}});
  out->push_back({p + "attn.c_proj.weight", {h, h}});
  out->push_back({p + "attn.c_proj.bias", {h}});
  out->push_back({p + "ln_2.weight", {h}, Init::kOnes});
  out->push_back({p + "ln_2.bias", {h}, Init::kZeros});
  out->push_back({p + "mlp.c_fc.weight", {h, inter}});
  out->push_back({p + "mlp.c_fc.bias", {inter}});
  out->push_back({p + "mlp.c_proj.weight", {inter, h}});
  out->push_back({p + "mlp.c_proj.bias", {h}});
}

// splitmix64: a tiny generator whose output is the same on every platform, unlike
// std::uniform_real_distribution.
uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Each tensor's values depend only on the seed and its name, not on the order of writing.
std::string TensorBytes(const CheckpointTensorSpec& spec, const RandomWeightsOptions& options) {
  int64_t count = 1;
  for (int64_t extent : spec.shape) count *= extent;
  std::vector<float> values(static_cast<size_t>(count));
  if (spec.init == Init::kOnes) {
    std::fill(values.begin(), values.end(), 1.0f);
  } else if (spec.init == Init::kRandom) {
    uint64_t state = options.seed;
    for (unsigned char ch : spec.name) state = (state ^ ch) * 0x100000001b3ull;  // FNV-1a step
    const bool bias = spec.shape.size() == 1;
    const float scale = bias ? options.scale / 10 : options.scale;
    for (float& v : values) {
      const double unit = static_cast<double>(SplitMix64(state) >> 11) * 0x1.0p-53;  // [0, 1)
      v = static_cast<float>((2 * unit - 1) * scale);
    }
  }
  std::string bytes(values.size() * DTypeSize(options.dtype), '\0');
  ConvertElements(values.data(), DType::kF32, bytes.data(), options.dtype, values.size());
  return bytes;
}

std::string SafetensorsDTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
  }
  return "F32";
}

absl::Status WriteText(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat("failed writing ", path.string()));
  return absl::OkStatus();
}

}  // namespace

std::vector<CheckpointTensorSpec> CheckpointTensors(const ModelConfig& c) {
  std::vector<CheckpointTensorSpec> out;
  const int64_t h = c.hidden_size, vocab = c.vocab_size;
  if (c.family == ModelFamily::kGpt2) {
    out.push_back({"wte.weight", {vocab, h}});
    out.push_back({"wpe.weight", {c.max_position_embeddings, h}});
    for (int i = 0; i < c.num_layers; ++i) AddGpt2Layer(c, i, &out);
    out.push_back({"ln_f.weight", {h}, Init::kOnes});
    out.push_back({"ln_f.bias", {h}, Init::kZeros});
  } else {
    out.push_back({"model.embed_tokens.weight", {vocab, h}});
    for (int i = 0; i < c.num_layers; ++i) AddLlamaLayer(c, i, &out);
    out.push_back({"model.norm.weight", {h}, Init::kOnes});
  }
  if (!c.tied_embeddings) out.push_back({"lm_head.weight", {vocab, h}});
  return out;
}

std::string ModelConfigToJson(const ModelConfig& c) {
  nlohmann::json j;
  j["architectures"] = {c.architecture};
  j["vocab_size"] = c.vocab_size;
  j["tie_word_embeddings"] = c.tied_embeddings;
  if (c.bos_token_id >= 0) j["bos_token_id"] = c.bos_token_id;
  if (!c.eos_token_ids.empty()) {
    j["eos_token_id"] = c.eos_token_ids.size() == 1 ? nlohmann::json(c.eos_token_ids[0])
                                                    : nlohmann::json(c.eos_token_ids);
  }
  if (c.family == ModelFamily::kGpt2) {
    j["model_type"] = "gpt2";
    j["n_embd"] = c.hidden_size;
    j["n_layer"] = c.num_layers;
    j["n_head"] = c.num_heads;
    j["n_inner"] = c.intermediate_size;
    j["n_positions"] = c.max_position_embeddings;
    j["layer_norm_epsilon"] = c.norm_eps;
    j["activation_function"] = c.activation == Activation::kGeluErf ? "gelu" : "gelu_new";
    return j.dump(2);
  }
  const bool qwen2 = c.architecture == "Qwen2ForCausalLM";
  j["model_type"] = qwen2 ? "qwen2" : c.architecture == "MistralForCausalLM" ? "mistral" : "llama";
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_heads;
  j["num_key_value_heads"] = c.num_kv_heads;
  j["head_dim"] = c.head_dim;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.norm_eps;
  j["rope_theta"] = c.rope_theta;
  j["hidden_act"] = "silu";
  if (!qwen2) j["attention_bias"] = c.qkv_bias;
  j["mlp_bias"] = c.mlp_bias;
  if (c.max_model_len < c.max_position_embeddings) j["sliding_window"] = c.max_model_len;
  if (qwen2 && c.max_model_len < c.max_position_embeddings) j["use_sliding_window"] = true;
  const RopeScaling& s = c.rope_scaling;
  if (s.kind == RopeScaling::Kind::kLinear) {
    j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", s.factor}};
  } else if (s.kind == RopeScaling::Kind::kLlama3) {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", s.factor},
                         {"low_freq_factor", s.low_freq_factor},
                         {"high_freq_factor", s.high_freq_factor},
                         {"original_max_position_embeddings", s.original_max_position_embeddings}};
  }
  return j.dump(2);
}

std::string GenerationConfigToJson(const ModelConfig& c) {
  nlohmann::json j = nlohmann::json::object();
  if (c.bos_token_id >= 0) j["bos_token_id"] = c.bos_token_id;
  if (!c.eos_token_ids.empty()) j["eos_token_id"] = c.eos_token_ids;
  return j.dump(2);
}

absl::Status WriteRandomModel(const ModelConfig& config, const RandomWeightsOptions& options,
                              const std::string& directory) {
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot create ", directory, ": ", error.message()));
  }
  const std::filesystem::path dir(directory);
  LLMSERVE_RETURN_IF_ERROR(WriteText(dir / "config.json", ModelConfigToJson(config)));
  LLMSERVE_RETURN_IF_ERROR(
      WriteText(dir / "generation_config.json", GenerationConfigToJson(config)));

  // Group tensors into shards in checkpoint order; with no limit everything is one file.
  std::vector<SafetensorsWriter> shards(1);
  int64_t shard_bytes = 0;
  nlohmann::json weight_map = nlohmann::json::object();
  std::vector<std::string> shard_of_tensor;
  for (const CheckpointTensorSpec& spec : CheckpointTensors(config)) {
    std::string bytes = TensorBytes(spec, options);
    const int64_t size = static_cast<int64_t>(bytes.size());
    if (options.max_shard_bytes > 0 && shard_bytes > 0 &&
        shard_bytes + size > options.max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().Add(spec.name, SafetensorsDTypeName(options.dtype), spec.shape, std::move(bytes));
    shard_bytes += size;
    weight_map[spec.name] = shards.size() - 1;  // replaced by the file name below
  }
  for (SafetensorsWriter& shard : shards) shard.SetMetadata("format", "pt");
  if (options.max_shard_bytes <= 0)
    return shards[0].WriteFile((dir / "model.safetensors").string());

  auto shard_name = [&shards](size_t i) {
    return absl::StrFormat("model-%05d-of-%05d.safetensors", i + 1, shards.size());
  };
  for (auto& [name, shard] : weight_map.items()) shard = shard_name(shard.get<size_t>());
  for (size_t i = 0; i < shards.size(); ++i) {
    LLMSERVE_RETURN_IF_ERROR(shards[i].WriteFile((dir / shard_name(i)).string()));
  }
  const nlohmann::json index = {{"metadata", nlohmann::json::object()}, {"weight_map", weight_map}};
  return WriteText(dir / "model.safetensors.index.json", index.dump(2));
}

}  // namespace llmserve::worker
