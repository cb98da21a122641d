#include "worker/model/model_config.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"

namespace llmserve::worker {
namespace {

using nlohmann::json;

// Reads typed fields of one JSON object, turning absence and wrong types into errors that name
// the file and the field. A JSON null counts as absent (HF writes "n_inner": null).
class FieldReader {
 public:
  FieldReader(const json& object, absl::string_view file) : object_(object), file_(file) {}

  bool Has(absl::string_view key) const {
    const auto it = object_.find(key);
    return it != object_.end() && !it->is_null();
  }

  absl::StatusOr<int64_t> Int(absl::string_view key, std::optional<int64_t> fallback, int64_t min,
                              int64_t max) const {
    if (!Has(key)) {
      if (fallback) return *fallback;
      return Error(key, "is required");
    }
    const json& value = object_.at(std::string(key));
    if (!value.is_number_integer()) return Error(key, "must be an integer");
    const int64_t number = value.get<int64_t>();
    if (number < min || number > max) {
      return Error(key, absl::StrCat("is ", number, ", outside [", min, ", ", max, "]"));
    }
    return number;
  }

  absl::StatusOr<double> Number(absl::string_view key, std::optional<double> fallback, double min,
                                double max) const {
    if (!Has(key)) {
      if (fallback) return *fallback;
      return Error(key, "is required");
    }
    const json& value = object_.at(std::string(key));
    if (!value.is_number()) return Error(key, "must be a number");
    const double number = value.get<double>();
    if (!std::isfinite(number) || number < min || number > max) {
      return Error(key, absl::StrCat("is ", number, ", outside [", min, ", ", max, "]"));
    }
    return number;
  }

  absl::StatusOr<bool> Bool(absl::string_view key, bool fallback) const {
    if (!Has(key)) return fallback;
    const json& value = object_.at(std::string(key));
    if (!value.is_boolean()) return Error(key, "must be true or false");
    return value.get<bool>();
  }

  absl::StatusOr<std::string> String(absl::string_view key, std::string fallback) const {
    if (!Has(key)) return fallback;
    const json& value = object_.at(std::string(key));
    if (!value.is_string()) return Error(key, "must be a string");
    return value.get<std::string>();
  }

  // An id or a list of ids (eos_token_id may be either).
  absl::Status AppendIds(absl::string_view key, std::vector<int32_t>* ids) const {
    if (!Has(key)) return absl::OkStatus();
    const json& value = object_.at(std::string(key));
    const json list = value.is_array() ? value : json::array({value});
    for (const json& id : list) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
        return Error(key, "must be a non-negative token id or a list of them");
      }
      ids->push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
    return absl::OkStatus();
  }

  absl::Status Error(absl::string_view key, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(file_, ": '", key, "' ", what));
  }

 private:
  const json& object_;
  absl::string_view file_;
};

constexpr int64_t kMaxDim = 1 << 20;
constexpr int64_t kMaxVocab = 1 << 24;

absl::Status ParseGpt2(const FieldReader& f, ModelConfig* c) {
  c->family = ModelFamily::kGpt2;
  LLMSERVE_ASSIGN_OR_RETURN(c->hidden_size, f.Int("n_embd", std::nullopt, 1, kMaxDim));
  LLMSERVE_ASSIGN_OR_RETURN(c->num_layers, f.Int("n_layer", std::nullopt, 1, 1024));
  LLMSERVE_ASSIGN_OR_RETURN(c->num_heads, f.Int("n_head", std::nullopt, 1, 1024));
  c->num_kv_heads = c->num_heads;
  LLMSERVE_ASSIGN_OR_RETURN(c->intermediate_size,
                            f.Int("n_inner", 4 * c->hidden_size, 1, 4 * kMaxDim));
  LLMSERVE_ASSIGN_OR_RETURN(c->max_position_embeddings,
                            f.Int("n_positions", std::nullopt, 1, kMaxDim));
  LLMSERVE_ASSIGN_OR_RETURN(c->norm_eps, f.Number("layer_norm_epsilon", 1e-5, 1e-12, 1.0));
  std::string activation;
  LLMSERVE_ASSIGN_OR_RETURN(activation, f.String("activation_function", "gelu_new"));
  if (activation == "gelu_new" || activation == "gelu_pytorch_tanh") {
    c->activation = Activation::kGeluTanh;
  } else if (activation == "gelu") {
    c->activation = Activation::kGeluErf;
  } else {
    return absl::UnimplementedError(
        absl::StrCat("config.json: activation_function '", activation,
                     "' is not supported (gelu_new, gelu_pytorch_tanh, gelu)"));
  }
  if (c->hidden_size % c->num_heads != 0) {
    return f.Error("n_embd", "must be a multiple of n_head");
  }
  c->head_dim = c->hidden_size / c->num_heads;
  c->norm = NormKind::kLayerNorm;
  c->norm_bias = c->qkv_bias = c->o_bias = c->mlp_bias = true;
  c->gated_mlp = false;
  c->position = PositionKind::kLearned;
  LLMSERVE_ASSIGN_OR_RETURN(c->tied_embeddings, f.Bool("tie_word_embeddings", true));
  return absl::OkStatus();
}

absl::Status ParseRopeScaling(const json& config, ModelConfig* c) {
  const auto it = config.find("rope_scaling");
  if (it == config.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_object()) {
    return absl::InvalidArgumentError("config.json: 'rope_scaling' must be an object or null");
  }
  const FieldReader f(*it, "config.json rope_scaling");
  std::string type;
  LLMSERVE_ASSIGN_OR_RETURN(type, f.String("rope_type", ""));
  if (type.empty()) LLMSERVE_ASSIGN_OR_RETURN(type, f.String("type", "default"));
  RopeScaling& s = c->rope_scaling;
  if (type == "default") return absl::OkStatus();
  LLMSERVE_ASSIGN_OR_RETURN(s.factor, f.Number("factor", std::nullopt, 1.0, 1e6));
  if (type == "linear") {
    s.kind = RopeScaling::Kind::kLinear;
  } else if (type == "llama3") {
    s.kind = RopeScaling::Kind::kLlama3;
    LLMSERVE_ASSIGN_OR_RETURN(s.low_freq_factor,
                              f.Number("low_freq_factor", std::nullopt, 1e-6, 1e6));
    LLMSERVE_ASSIGN_OR_RETURN(s.high_freq_factor,
                              f.Number("high_freq_factor", std::nullopt, 1e-6, 1e6));
    LLMSERVE_ASSIGN_OR_RETURN(s.original_max_position_embeddings,
                              f.Int("original_max_position_embeddings", std::nullopt, 1, kMaxDim));
    if (s.high_freq_factor <= s.low_freq_factor) {
      return f.Error("high_freq_factor", "must be greater than low_freq_factor");
    }
  } else {
    return absl::UnimplementedError(absl::StrCat("config.json: rope_scaling type '", type,
                                                 "' is not supported (linear, llama3)"));
  }
  return absl::OkStatus();
}

absl::Status ParseLlama(const json& config, const FieldReader& f, bool qwen2, ModelConfig* c) {
  c->family = ModelFamily::kLlama;
  LLMSERVE_ASSIGN_OR_RETURN(c->hidden_size, f.Int("hidden_size", std::nullopt, 1, kMaxDim));
  LLMSERVE_ASSIGN_OR_RETURN(c->intermediate_size,
                            f.Int("intermediate_size", std::nullopt, 1, 4 * kMaxDim));
  LLMSERVE_ASSIGN_OR_RETURN(c->num_layers, f.Int("num_hidden_layers", std::nullopt, 1, 1024));
  LLMSERVE_ASSIGN_OR_RETURN(c->num_heads, f.Int("num_attention_heads", std::nullopt, 1, 1024));
  LLMSERVE_ASSIGN_OR_RETURN(c->num_kv_heads,
                            f.Int("num_key_value_heads", c->num_heads, 1, c->num_heads));
  if (c->num_heads % c->num_kv_heads != 0) {
    return f.Error("num_attention_heads", "must be a multiple of num_key_value_heads");
  }
  if (!f.Has("head_dim") && c->hidden_size % c->num_heads != 0) {
    return f.Error("hidden_size", "must be a multiple of num_attention_heads");
  }
  LLMSERVE_ASSIGN_OR_RETURN(c->head_dim, f.Int("head_dim", c->hidden_size / c->num_heads, 2, 1024));
  if (c->head_dim % 2 != 0) return f.Error("head_dim", "must be even for rotary embeddings");
  LLMSERVE_ASSIGN_OR_RETURN(c->max_position_embeddings,
                            f.Int("max_position_embeddings", std::nullopt, 1, kMaxDim));
  LLMSERVE_ASSIGN_OR_RETURN(c->norm_eps, f.Number("rms_norm_eps", 1e-6, 1e-12, 1.0));
  LLMSERVE_ASSIGN_OR_RETURN(c->rope_theta, f.Number("rope_theta", 10000.0, 1.0, 1e12));
  std::string activation;
  LLMSERVE_ASSIGN_OR_RETURN(activation, f.String("hidden_act", "silu"));
  if (activation != "silu") {
    return absl::UnimplementedError(
        absl::StrCat("config.json: hidden_act '", activation, "' is not supported (silu)"));
  }
  c->activation = Activation::kSilu;
  c->norm = NormKind::kRmsNorm;
  c->position = PositionKind::kRope;
  c->gated_mlp = true;
  bool attention_bias = false;
  LLMSERVE_ASSIGN_OR_RETURN(attention_bias, f.Bool("attention_bias", false));
  c->qkv_bias = qwen2 || attention_bias;  // Qwen2 always has q/k/v biases and no o bias
  c->o_bias = !qwen2 && attention_bias;
  LLMSERVE_ASSIGN_OR_RETURN(c->mlp_bias, f.Bool("mlp_bias", false));
  LLMSERVE_ASSIGN_OR_RETURN(c->tied_embeddings, f.Bool("tie_word_embeddings", false));
  bool sliding = !qwen2;  // Qwen2 uses it only with use_sliding_window: true
  if (qwen2) LLMSERVE_ASSIGN_OR_RETURN(sliding, f.Bool("use_sliding_window", false));
  if (sliding && f.Has("sliding_window")) {
    int64_t window = 0;
    LLMSERVE_ASSIGN_OR_RETURN(window, f.Int("sliding_window", std::nullopt, 1, kMaxDim));
    c->max_model_len = std::min(c->max_position_embeddings, window);
  }
  return ParseRopeScaling(config, c);
}

absl::StatusOr<json> ParseObject(absl::string_view text, absl::string_view file) {
  json value = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(file, " is not JSON"));
  if (!value.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(file, " is not a JSON object"));
  }
  return value;
}

absl::Status ParseSpecialIds(const json& config, absl::string_view generation_config_json,
                             ModelConfig* c) {
  const FieldReader f(config, "config.json");
  int64_t bos = -1;
  LLMSERVE_ASSIGN_OR_RETURN(bos, f.Int("bos_token_id", -1, -1, c->vocab_size - 1));
  std::vector<int32_t> eos;
  LLMSERVE_RETURN_IF_ERROR(f.AppendIds("eos_token_id", &eos));
  if (!generation_config_json.empty()) {
    json generation;
    LLMSERVE_ASSIGN_OR_RETURN(generation,
                              ParseObject(generation_config_json, "generation_config.json"));
    const FieldReader g(generation, "generation_config.json");
    if (g.Has("bos_token_id")) {
      LLMSERVE_ASSIGN_OR_RETURN(bos, g.Int("bos_token_id", -1, -1, c->vocab_size - 1));
    }
    LLMSERVE_RETURN_IF_ERROR(g.AppendIds("eos_token_id", &eos));
  }
  c->bos_token_id = static_cast<int32_t>(bos);
  absl::flat_hash_set<int32_t> seen;
  for (int32_t id : eos) {
    if (id >= c->vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "eos_token_id ", id, " is outside the vocabulary of ", c->vocab_size, " tokens"));
    }
    if (seen.insert(id).second) c->eos_token_ids.push_back(id);
  }
  return absl::OkStatus();
}

}  // namespace

int64_t ModelConfig::NumParameters() const {
  const int64_t q = num_heads * head_dim;
  const int64_t kv = num_kv_heads * head_dim;
  int64_t per_layer = hidden_size * (q + 2 * kv) + q * hidden_size;
  per_layer += (gated_mlp ? 3 : 2) * hidden_size * intermediate_size;
  per_layer += (norm_bias ? 4 : 2) * hidden_size;
  if (qkv_bias) per_layer += q + 2 * kv;
  if (o_bias) per_layer += hidden_size;
  if (mlp_bias) per_layer += (gated_mlp ? 2 : 1) * intermediate_size + hidden_size;
  int64_t total = num_layers * per_layer + vocab_size * hidden_size;
  if (!tied_embeddings) total += vocab_size * hidden_size;
  if (position == PositionKind::kLearned) total += max_position_embeddings * hidden_size;
  total += (norm_bias ? 2 : 1) * hidden_size;
  return total;
}

namespace {

// config.json's "quantization_config", for a model whose dimensions are parsed (4-bit checkpoints
// of Llama-family models only).
absl::Status ParseQuantizationConfig(const json& config, ModelConfig* c) {
  const auto it = config.find("quantization_config");
  if (it == config.end() || it->is_null()) return absl::OkStatus();
  constexpr absl::string_view kFile = "config.json: quantization_config";
  if (!it->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(kFile, " must be an object"));
  }
  const FieldReader f(*it, kFile);
  std::string method;
  LLMSERVE_ASSIGN_OR_RETURN(method, f.String("quant_method", ""));
  if (method != "awq" && method != "gptq") {
    return absl::UnimplementedError(absl::StrCat(
        kFile, ": quant_method '", method,
        "' is not supported (awq and gptq checkpoints are; unquantized checkpoints can be "
        "quantized at load with --quantization=int8)"));
  }
  if (c->family != ModelFamily::kLlama) {
    return absl::UnimplementedError(absl::StrCat(kFile, ": ", method, " checkpoints of ",
                                                 c->architecture, " are not supported"));
  }
  CheckpointQuantization& q = c->quantization;
  q.method = method == "awq" ? CheckpointQuantization::Method::kAwq
                             : CheckpointQuantization::Method::kGptq;
  int64_t bits;
  LLMSERVE_ASSIGN_OR_RETURN(
      bits, f.Int(method == "awq" && f.Has("w_bit") ? "w_bit" : "bits", std::nullopt, 1, 64));
  if (bits != 4) {
    return absl::UnimplementedError(
        absl::StrCat(kFile, ": ", bits, "-bit ", method, " is not supported (4 bits is)"));
  }
  LLMSERVE_ASSIGN_OR_RETURN(
      q.group_size, f.Int(method == "awq" && f.Has("q_group_size") ? "q_group_size" : "group_size",
                          std::nullopt, -1, kMaxDim));
  if (q.group_size == 0 || (q.group_size == -1 && method == "awq")) {
    return f.Error("group_size", absl::StrCat("is ", q.group_size, "; it must be positive",
                                              method == "gptq" ? " or -1" : ""));
  }
  if (method == "awq") {
    std::string version;
    LLMSERVE_ASSIGN_OR_RETURN(version, f.String("version", "gemm"));
    if (absl::AsciiStrToLower(version) != "gemm") {
      return absl::UnimplementedError(
          absl::StrCat(kFile, ": AWQ version '", version,
                       "' is not supported (\"gemm\" is; GEMV and Marlin "
                       "checkpoints pack their weights differently)"));
    }
    bool zero_point;
    LLMSERVE_ASSIGN_OR_RETURN(zero_point, f.Bool("zero_point", true));
    if (!zero_point) {
      return absl::UnimplementedError(
          absl::StrCat(kFile, ": AWQ without zero points is not supported"));
    }
  } else {
    bool desc_act;
    LLMSERVE_ASSIGN_OR_RETURN(desc_act, f.Bool("desc_act", false));
    if (desc_act) {
      return absl::UnimplementedError(absl::StrCat(
          kFile,
          ": desc_act true (act-order GPTQ) is not supported; quantize with desc_act false"));
    }
    LLMSERVE_ASSIGN_OR_RETURN(q.symmetric, f.Bool("sym", true));
    std::string format;
    LLMSERVE_ASSIGN_OR_RETURN(format, f.String("checkpoint_format", "gptq"));
    if (format != "gptq") {
      return absl::UnimplementedError(
          absl::StrCat(kFile, ": checkpoint_format '", format, "' is not supported (\"gptq\" is)"));
    }
  }
  if (f.Has("modules_to_not_convert") &&
      !(it->at("modules_to_not_convert").is_array() && it->at("modules_to_not_convert").empty())) {
    return absl::UnimplementedError(
        absl::StrCat(kFile,
                     ": modules_to_not_convert is not supported (every projection of every "
                     "layer must be quantized)"));
  }
  // Every projection's input dimension is cut into whole groups, and both formats pack 8 values
  // of a dimension into one int32.
  const int64_t q_dim = c->num_heads * c->head_dim, kv_dim = c->num_kv_heads * c->head_dim;
  for (const auto& [name, value] : {std::pair<const char*, int64_t>{"hidden_size", c->hidden_size},
                                    {"intermediate_size", c->intermediate_size},
                                    {"num_attention_heads * head_dim", q_dim},
                                    {"num_key_value_heads * head_dim", kv_dim}}) {
    if (value % 8 != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          kFile, ": ", method, " needs every projection dimension to be a multiple of 8; ", name,
          " is ", value));
    }
  }
  for (const auto& [name, value] : {std::pair<const char*, int64_t>{"hidden_size", c->hidden_size},
                                    {"intermediate_size", c->intermediate_size},
                                    {"num_attention_heads * head_dim", q_dim}}) {
    if (value % q.GroupSizeFor(value) != 0) {
      return f.Error("group_size", absl::StrCat("is ", q.group_size, ", which does not divide ",
                                                name, " (", value, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::string_view CheckpointQuantizationName(CheckpointQuantization::Method method) {
  switch (method) {
    case CheckpointQuantization::Method::kNone:
      return "none";
    case CheckpointQuantization::Method::kAwq:
      return "awq";
    case CheckpointQuantization::Method::kGptq:
      return "gptq";
    case CheckpointQuantization::Method::kGguf:
      return "gguf";
  }
  return "none";
}

absl::StatusOr<ModelConfig> ParseModelConfig(absl::string_view config_json,
                                             absl::string_view generation_config_json) {
  json config;
  LLMSERVE_ASSIGN_OR_RETURN(config, ParseObject(config_json, "config.json"));
  ModelConfig c;
  const auto architectures = config.find("architectures");
  if (architectures == config.end() || !architectures->is_array() || architectures->empty() ||
      !(*architectures)[0].is_string()) {
    return absl::InvalidArgumentError(
        "config.json: 'architectures' must be a non-empty list of names");
  }
  c.architecture = (*architectures)[0].get<std::string>();
  const FieldReader f(config, "config.json");
  LLMSERVE_ASSIGN_OR_RETURN(c.vocab_size, f.Int("vocab_size", std::nullopt, 1, kMaxVocab));
  absl::Status family;
  if (c.architecture == "GPT2LMHeadModel") {
    family = ParseGpt2(f, &c);
  } else if (c.architecture == "LlamaForCausalLM" || c.architecture == "MistralForCausalLM") {
    family = ParseLlama(config, f, /*qwen2=*/false, &c);
  } else if (c.architecture == "Qwen2ForCausalLM") {
    family = ParseLlama(config, f, /*qwen2=*/true, &c);
  } else {
    return absl::UnimplementedError(
        absl::StrCat("config.json: architecture '", c.architecture,
                     "' is not supported (GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM, "
                     "Qwen2ForCausalLM)"));
  }
  LLMSERVE_RETURN_IF_ERROR(family);
  LLMSERVE_RETURN_IF_ERROR(ParseQuantizationConfig(config, &c));
  if (c.max_model_len == 0) c.max_model_len = c.max_position_embeddings;
  LLMSERVE_RETURN_IF_ERROR(ParseSpecialIds(config, generation_config_json, &c));
  return c;
}

}  // namespace llmserve::worker
