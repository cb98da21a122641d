#include "worker/model/model_writer.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/status/status_macros.h"
#include "worker/model/quantized_checkpoint.h"
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

// Whether `name` is a residual output projection of a layer RandomWeightsOptions::damp_layers_from
// damps.
bool IsDampedResidualOutput(absl::string_view name, const RandomWeightsOptions& options) {
  if (options.damp_layers_from < 0) return false;
  absl::string_view rest = name;
  if (!absl::ConsumePrefix(&rest, "model.layers.") && !absl::ConsumePrefix(&rest, "h.")) {
    return false;
  }
  const size_t dot = rest.find('.');
  int64_t layer = 0;
  if (dot == absl::string_view::npos || !absl::SimpleAtoi(rest.substr(0, dot), &layer)) {
    return false;
  }
  rest.remove_prefix(dot + 1);
  return layer >= options.damp_layers_from &&
         (absl::StartsWith(rest, "self_attn.o_proj.") || absl::StartsWith(rest, "mlp.down_proj.") ||
          absl::StartsWith(rest, "attn.c_proj.") || absl::StartsWith(rest, "mlp.c_proj."));
}

// Each tensor's values depend only on the seed and its name, not on the order of writing.
std::vector<float> TensorValues(const CheckpointTensorSpec& spec,
                                const RandomWeightsOptions& options) {
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
    if (IsDampedResidualOutput(spec.name, options)) {
      for (float& v : values) v *= options.layer_damping;
    }
  }
  return values;
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

std::string ToBytes(const std::vector<float>& values, DType dtype) {
  std::string bytes(values.size() * DTypeSize(dtype), '\0');
  ConvertElements(values.data(), DType::kF32, bytes.data(), dtype, values.size());
  return bytes;
}

struct TensorToWrite {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

// A Llama-family projection weight ("model.layers.N.*_proj.weight"): the tensors that AWQ and
// GPTQ quantize.
bool IsQuantizedProjection(const ModelConfig& c, const std::string& name) {
  return c.family == ModelFamily::kLlama && absl::StartsWith(name, "model.layers.") &&
         absl::EndsWith(name, "_proj.weight");
}

// What the checkpoint holds for `spec`: the tensor in options.dtype, or a projection quantized to
// AWQ/GPTQ (or, with options.dequantized, its dequantization in f32).
std::vector<TensorToWrite> TensorsFor(const ModelConfig& config, const CheckpointTensorSpec& spec,
                                      const RandomWeightsOptions& options) {
  std::vector<float> values = TensorValues(spec, options);
  const CheckpointQuantization& q = options.quantization;
  if (!q.quantized() || !IsQuantizedProjection(config, spec.name)) {
    return {{spec.name, SafetensorsDTypeName(options.dtype), spec.shape,
             ToBytes(values, options.dtype)}};
  }
  const int64_t rows = spec.shape[0], cols = spec.shape[1];
  const Int4Matrix w = QuantizeInt4(values.data(), rows, cols, q.GroupSizeFor(cols), q.symmetric);
  if (options.dequantized) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) values[r * cols + c] = w.Dequantized(r, c);
    }
    return {{spec.name, "F32", spec.shape, ToBytes(values, DType::kF32)}};
  }
  const std::string base = spec.name.substr(0, spec.name.size() - std::string(".weight").size());
  const bool awq = q.method == CheckpointQuantization::Method::kAwq;
  PackedProjection packed = awq ? PackAwq(w) : PackGptq(w);
  std::vector<TensorToWrite> out = {
      {base + ".qweight", "I32", packed.qweight_shape, std::move(packed.qweight)},
      {base + ".qzeros", "I32", packed.qzeros_shape, std::move(packed.qzeros)},
      {base + ".scales", "F16", packed.scales_shape, std::move(packed.scales)}};
  if (!awq) out.push_back({base + ".g_idx", "I32", packed.g_idx_shape, std::move(packed.g_idx)});
  return out;
}

}  // namespace

absl::Status WriteText(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat("failed writing ", path.string()));
  return absl::OkStatus();
}

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
  // As AutoAWQ and AutoGPTQ write them (transformers reads these fields).
  if (c.quantization.method == CheckpointQuantization::Method::kAwq) {
    j["quantization_config"] = {
        {"quant_method", "awq"}, {"bits", 4},         {"group_size", c.quantization.group_size},
        {"zero_point", true},    {"version", "gemm"}, {"modules_to_not_convert", nullptr}};
  } else if (c.quantization.method == CheckpointQuantization::Method::kGptq) {
    j["quantization_config"] = {{"quant_method", "gptq"},
                                {"bits", 4},
                                {"group_size", c.quantization.group_size},
                                {"desc_act", false},
                                {"sym", c.quantization.symmetric},
                                {"true_sequential", true},
                                {"damp_percent", 0.01},
                                {"checkpoint_format", "gptq"}};
  }
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
  if (options.quantization.quantized()) {
    // The reader's checks (family, dimensions divisible by 8 and by the group size) decide what
    // can be written.
    ModelConfig quantized = config;
    quantized.quantization = options.quantization;
    LLMSERVE_RETURN_IF_ERROR(ParseModelConfig(ModelConfigToJson(quantized), "").status());
  }
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot create ", directory, ": ", error.message()));
  }
  const std::filesystem::path dir(directory);
  ModelConfig written = config;
  written.quantization = options.dequantized ? CheckpointQuantization{} : options.quantization;
  LLMSERVE_RETURN_IF_ERROR(WriteText(dir / "config.json", ModelConfigToJson(written)));
  LLMSERVE_RETURN_IF_ERROR(
      WriteText(dir / "generation_config.json", GenerationConfigToJson(config)));

  // Group tensors into shards in checkpoint order; with no limit everything is one file.
  std::vector<SafetensorsWriter> shards(1);
  int64_t shard_bytes = 0;
  nlohmann::json weight_map = nlohmann::json::object();
  std::vector<std::string> shard_of_tensor;
  for (const CheckpointTensorSpec& spec : CheckpointTensors(config)) {
    for (TensorToWrite& tensor : TensorsFor(config, spec, options)) {
      const int64_t size = static_cast<int64_t>(tensor.bytes.size());
      if (options.max_shard_bytes > 0 && shard_bytes > 0 &&
          shard_bytes + size > options.max_shard_bytes) {
        shards.emplace_back();
        shard_bytes = 0;
      }
      weight_map[tensor.name] = shards.size() - 1;  // replaced by the file name below
      shards.back().Add(tensor.name, tensor.dtype, std::move(tensor.shape),
                        std::move(tensor.bytes));
      shard_bytes += size;
    }
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
