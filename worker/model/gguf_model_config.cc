#include "worker/model/gguf_model_config.h"

#include <cstdint>
#include <optional>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status/status_macros.h"
#include "worker/model/gguf_weights.h"

namespace llmserve::worker {
namespace {

// The bounds ParseModelConfig applies to config.json (model_config.cc).
constexpr int64_t kGgufMaxDim = 1 << 20;
constexpr int64_t kGgufMaxVocab = 1 << 24;
// llama.cpp writes token ids as uint32 and uses this one for "none".
constexpr int64_t kGgufNoToken = 0xffffffff;

// Reads `<arch>.<name>` keys, with errors naming the file and the key.
class GgufKeyReader {
 public:
  GgufKeyReader(const gguf::GgufFile& file, absl::string_view arch) : file_(file), arch_(arch) {}

  std::string Key(absl::string_view name) const { return absl::StrCat(arch_, ".", name); }
  bool Has(absl::string_view name) const { return file_.metadata().Has(Key(name)); }

  absl::Status Error(absl::string_view key, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(file_.name(), ": ", key, " ", what));
  }
  // A metadata error (missing, wrong type) with the file name in front.
  absl::Status Wrap(const absl::Status& status) const {
    return absl::Status(status.code(), absl::StrCat(file_.name(), ": ", status.message()));
  }

  absl::StatusOr<int64_t> Int(absl::string_view name, std::optional<int64_t> fallback, int64_t min,
                              int64_t max) const {
    const std::string key = Key(name);
    if (!file_.metadata().Has(key)) {
      if (fallback) return *fallback;
      return Error(key, "is required");
    }
    absl::StatusOr<int64_t> value = file_.metadata().GetInt(key);
    if (!value.ok()) return Wrap(value.status());
    if (*value < min || *value > max) {
      return Error(key, absl::StrCat("is ", *value, ", outside [", min, ", ", max, "]"));
    }
    return *value;
  }

  absl::StatusOr<double> Float(absl::string_view name, double fallback, double min,
                               double max) const {
    const std::string key = Key(name);
    if (!file_.metadata().Has(key)) return fallback;
    absl::StatusOr<double> value = file_.metadata().GetFloat(key);
    if (!value.ok()) return Wrap(value.status());
    if (!(*value >= min && *value <= max)) {
      return Error(key, absl::StrCat("is ", *value, ", outside [", min, ", ", max, "]"));
    }
    return *value;
  }

  absl::StatusOr<std::string> String(absl::string_view name, absl::string_view fallback) const {
    const std::string key = Key(name);
    if (!file_.metadata().Has(key)) return std::string(fallback);
    absl::StatusOr<absl::string_view> value = file_.metadata().GetString(key);
    if (!value.ok()) return Wrap(value.status());
    return std::string(*value);
  }

 private:
  const gguf::GgufFile& file_;
  absl::string_view arch_;
};

// Sizes shared by every architecture: dimensions, heads, context, vocabulary.
absl::Status ReadGgufShape(const gguf::GgufFile& file, const GgufKeyReader& r, ModelConfig* c) {
  LLMSERVE_ASSIGN_OR_RETURN(c->hidden_size,
                            r.Int("embedding_length", std::nullopt, 1, kGgufMaxDim));
  LLMSERVE_ASSIGN_OR_RETURN(c->intermediate_size,
                            r.Int("feed_forward_length", std::nullopt, 1, 4 * kGgufMaxDim));
  LLMSERVE_ASSIGN_OR_RETURN(c->num_layers, r.Int("block_count", std::nullopt, 1, 1024));
  LLMSERVE_ASSIGN_OR_RETURN(c->num_heads, r.Int("attention.head_count", std::nullopt, 1, 1024));
  LLMSERVE_ASSIGN_OR_RETURN(c->num_kv_heads,
                            r.Int("attention.head_count_kv", c->num_heads, 1, c->num_heads));
  if (c->num_heads % c->num_kv_heads != 0) {
    return r.Error(r.Key("attention.head_count"), "must be a multiple of attention.head_count_kv");
  }
  if (!r.Has("attention.key_length") && c->hidden_size % c->num_heads != 0) {
    return r.Error(r.Key("embedding_length"), "must be a multiple of attention.head_count");
  }
  LLMSERVE_ASSIGN_OR_RETURN(c->head_dim,
                            r.Int("attention.key_length", c->hidden_size / c->num_heads, 2, 1024));
  int64_t value_length = 0;
  LLMSERVE_ASSIGN_OR_RETURN(value_length, r.Int("attention.value_length", c->head_dim, 1, 1024));
  if (value_length != c->head_dim) {
    return absl::UnimplementedError(absl::StrCat(
        file.name(), ": ", r.Key("attention.value_length"), " ", value_length, " differs from ",
        r.Key("attention.key_length"), " ", c->head_dim, ", which is not supported"));
  }
  LLMSERVE_ASSIGN_OR_RETURN(c->max_position_embeddings,
                            r.Int("context_length", std::nullopt, 1, kGgufMaxDim));
  c->max_model_len = c->max_position_embeddings;
  absl::StatusOr<const gguf::GgufTensor*> embedding = file.GetTensor("token_embd.weight");
  if (!embedding.ok()) return r.Wrap(embedding.status());
  const std::vector<int64_t>& dims = (*embedding)->dims;
  if (dims.size() != 2 || dims[0] != c->hidden_size || dims[1] > kGgufMaxVocab) {
    return absl::InvalidArgumentError(absl::StrCat(
        file.name(), ": token_embd.weight must be [", c->hidden_size, ", vocabulary of at most ",
        kGgufMaxVocab, "], not [", absl::StrJoin(dims, ", "), "]"));
  }
  c->vocab_size = dims[1];
  c->tied_embeddings = file.FindTensor("output.weight") == nullptr;
  return absl::OkStatus();
}

absl::Status ReadGgufRope(const gguf::GgufFile& file, const GgufKeyReader& r, ModelConfig* c) {
  if (c->head_dim % 2 != 0) {
    return r.Error(r.Key("attention.key_length"), "must be even for rotary embeddings");
  }
  int64_t rotary = 0;
  LLMSERVE_ASSIGN_OR_RETURN(rotary, r.Int("rope.dimension_count", c->head_dim, 1, 1024));
  if (rotary != c->head_dim) {
    return absl::UnimplementedError(absl::StrCat(
        file.name(), ": ", r.Key("rope.dimension_count"), " ", rotary,
        " is a partial rotary embedding (head size ", c->head_dim, "), which is not supported"));
  }
  LLMSERVE_ASSIGN_OR_RETURN(c->rope_theta, r.Float("rope.freq_base", 10000.0, 1.0, 1e12));
  if (file.FindTensor("rope_freqs.weight") != nullptr) {
    return absl::UnimplementedError(
        absl::StrCat(file.name(),
                     ": RoPE frequency factors stored as rope_freqs.weight (Llama 3.1-style "
                     "scaling) are not supported yet"));
  }
  std::string scaling;
  LLMSERVE_ASSIGN_OR_RETURN(scaling, r.String("rope.scaling.type", "none"));
  if (scaling == "linear") {
    c->rope_scaling.kind = RopeScaling::Kind::kLinear;
    LLMSERVE_ASSIGN_OR_RETURN(c->rope_scaling.factor,
                              r.Float("rope.scaling.factor", 1.0, 1.0, 1024));
  } else if (scaling != "none") {
    return absl::UnimplementedError(absl::StrCat(file.name(), ": ", r.Key("rope.scaling.type"),
                                                 " '", scaling,
                                                 "' is not supported (none, linear)"));
  }
  return absl::OkStatus();
}

absl::Status ReadGgufLlama(const gguf::GgufFile& file, const GgufKeyReader& r, bool qwen2,
                           ModelConfig* c) {
  c->family = ModelFamily::kLlama;
  c->architecture = qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM";
  LLMSERVE_RETURN_IF_ERROR(ReadGgufShape(file, r, c));
  LLMSERVE_ASSIGN_OR_RETURN(c->norm_eps,
                            r.Float("attention.layer_norm_rms_epsilon", 1e-5, 1e-12, 1.0));
  LLMSERVE_RETURN_IF_ERROR(ReadGgufRope(file, r, c));
  c->norm = NormKind::kRmsNorm;
  c->activation = Activation::kSilu;
  c->position = PositionKind::kRope;
  c->gated_mlp = true;
  c->qkv_bias = file.FindTensor("blk.0.attn_q.bias") != nullptr;
  c->o_bias = file.FindTensor("blk.0.attn_output.bias") != nullptr;
  c->mlp_bias = file.FindTensor("blk.0.ffn_up.bias") != nullptr;
  return absl::OkStatus();
}

absl::Status ReadGgufGpt2(const gguf::GgufFile& file, const GgufKeyReader& r, ModelConfig* c) {
  c->family = ModelFamily::kGpt2;
  c->architecture = "GPT2LMHeadModel";
  LLMSERVE_RETURN_IF_ERROR(ReadGgufShape(file, r, c));
  if (c->num_kv_heads != c->num_heads) {
    return r.Error(r.Key("attention.head_count_kv"), "must equal attention.head_count for gpt2");
  }
  LLMSERVE_ASSIGN_OR_RETURN(c->norm_eps, r.Float("attention.layer_norm_epsilon", 1e-5, 1e-12, 1.0));
  c->norm = NormKind::kLayerNorm;
  c->activation = Activation::kGeluTanh;  // llama.cpp's gpt2 graph uses the tanh GELU
  c->position = PositionKind::kLearned;
  c->gated_mlp = false;
  c->norm_bias = c->qkv_bias = c->o_bias = c->mlp_bias = true;
  return absl::OkStatus();
}

// tokenizer.ggml.{bos,eos,eot,eom}_token_id; 0xFFFFFFFF means none.
absl::Status ReadGgufSpecialIds(const gguf::GgufFile& file, ModelConfig* c) {
  auto read = [&](absl::string_view name) -> absl::StatusOr<std::optional<int32_t>> {
    const std::string key = absl::StrCat("tokenizer.ggml.", name, "_token_id");
    if (!file.metadata().Has(key)) return std::nullopt;
    absl::StatusOr<int64_t> id = file.metadata().GetInt(key);
    if (!id.ok())
      return absl::InvalidArgumentError(absl::StrCat(file.name(), ": ", id.status().message()));
    if (*id == kGgufNoToken) return std::nullopt;
    if (*id < 0 || *id >= c->vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(file.name(), ": ", key, " ", *id,
                                                     " is outside the vocabulary of ",
                                                     c->vocab_size, " tokens"));
    }
    return static_cast<int32_t>(*id);
  };
  std::optional<int32_t> bos;
  LLMSERVE_ASSIGN_OR_RETURN(bos, read("bos"));
  c->bos_token_id = bos.value_or(-1);
  absl::flat_hash_set<int32_t> seen;
  for (const absl::string_view name : {"eos", "eot", "eom"}) {
    std::optional<int32_t> id;
    LLMSERVE_ASSIGN_OR_RETURN(id, read(name));
    if (id && seen.insert(*id).second) c->eos_token_ids.push_back(*id);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> ModelConfigFromGguf(const gguf::GgufFile& file) {
  absl::StatusOr<absl::string_view> arch = file.metadata().GetString("general.architecture");
  if (!arch.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(file.name(), ": ", arch.status().message()));
  }
  const GgufKeyReader reader(file, *arch);
  ModelConfig c;
  if (*arch == "llama" || *arch == "qwen2") {
    LLMSERVE_RETURN_IF_ERROR(ReadGgufLlama(file, reader, *arch == "qwen2", &c));
  } else if (*arch == "gpt2") {
    LLMSERVE_RETURN_IF_ERROR(ReadGgufGpt2(file, reader, &c));
  } else {
    return absl::UnimplementedError(absl::StrCat(file.name(), ": general.architecture '", *arch,
                                                 "' is not supported (llama, qwen2, gpt2)"));
  }
  LLMSERVE_RETURN_IF_ERROR(ReadGgufSpecialIds(file, &c));
  c.quantization = GgufQuantization(file, c);
  return c;
}

}  // namespace llmserve::worker
