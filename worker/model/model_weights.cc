#include "worker/model/model_weights.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/huge_page_memory.h"
#include "common/base/logging.h"
#include "common/status/status_macros.h"
#include "worker/model/quantized_checkpoint.h"

namespace llmserve::worker {

namespace {

// Weight matrices go on huge pages (huge_page_memory.h: decode streams them every step); vectors
// such as norms and biases, read from cache, stay in malloc's memory.
constexpr size_t kHugePageMinBytes = size_t{64} << 10;

}  // namespace

Tensor::Tensor(DType dtype, std::vector<int64_t> shape)
    : dtype_(dtype),
      shape_(std::move(shape)),
      data_(nullptr, FreeDeleter{SizeBytes() >= kHugePageMinBytes}) {
  // aligned_alloc needs a multiple of the alignment, and an empty tensor still gets a buffer.
  const size_t bytes = std::max<size_t>((SizeBytes() + 63) / 64 * 64, 64);
  if (data_.get_deleter().huge_pages) {
    data_.reset(AllocateHugePageMemory(bytes));  // zeroed
  } else {
    data_.reset(std::aligned_alloc(64, bytes));
    if (data_ != nullptr) std::memset(data_.get(), 0, bytes);
  }
  LLMSERVE_CHECK(data_ != nullptr) << "out of memory allocating " << bytes << " bytes";
}

void Tensor::FreeDeleter::operator()(void* p) const {
  if (huge_pages) {
    FreeHugePageMemory(p);
  } else {
    std::free(p);
  }
}

int64_t Tensor::NumElements() const {
  if (shape_.empty()) return 0;
  int64_t count = 1;
  for (int64_t extent : shape_) count *= extent;
  return count;
}

size_t ModelWeights::SizeBytes() const {
  size_t total = token_embedding.SizeBytes() + position_embedding.SizeBytes() +
                 final_norm_weight.SizeBytes() + final_norm_bias.SizeBytes() + lm_head.SizeBytes();
  for (const LayerWeights& l : layers) {
    for (const Tensor* t : {&l.attn_norm_weight, &l.attn_norm_bias, &l.qkv_weight, &l.qkv_bias,
                            &l.o_weight, &l.o_bias, &l.mlp_norm_weight, &l.mlp_norm_bias,
                            &l.up_weight, &l.up_bias, &l.down_weight, &l.down_bias}) {
      total += t->SizeBytes();
    }
    for (const Int4Matrix* w : {&l.qkv_int4, &l.o_int4, &l.up_int4, &l.down_int4}) {
      total += static_cast<size_t>(w->SizeBytes());
    }
  }
  return total;
}

namespace {

using Shape = std::vector<int64_t>;

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// Hands out checkpoint tensors by name, checking shape and dtype, and remembers which were used
// so that leftovers can be reported.
class CheckpointReader {
 public:
  explicit CheckpointReader(const ModelFiles& files) : files_(files) {}

  // A float tensor (F32, F16, BF16).
  absl::StatusOr<const SafetensorsTensor*> Take(const std::string& name,
                                                const std::vector<int64_t>& shape) {
    const SafetensorsTensor* tensor;
    LLMSERVE_ASSIGN_OR_RETURN(tensor, FindWithShape(name, shape));
    absl::StatusOr<DType> dtype = ParseSafetensorsDType(tensor->dtype);
    if (!dtype.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(files_.directory(), ": tensor '", name, "': ", dtype.status().message()));
    }
    used_.insert(name);
    return tensor;
  }

  // A tensor of another element type (the int32 parts of quantized projections): its dtype must be
  // one of `dtypes`.
  absl::StatusOr<const SafetensorsTensor*> TakeRaw(
      const std::string& name, const std::vector<int64_t>& shape,
      std::initializer_list<absl::string_view> dtypes) {
    const SafetensorsTensor* tensor;
    LLMSERVE_ASSIGN_OR_RETURN(tensor, FindWithShape(name, shape));
    if (std::find(dtypes.begin(), dtypes.end(), tensor->dtype) == dtypes.end()) {
      return absl::InvalidArgumentError(absl::StrCat(files_.directory(), ": tensor '", name,
                                                     "' has dtype ", tensor->dtype, ", expected ",
                                                     absl::StrJoin(dtypes, " or ")));
    }
    used_.insert(name);
    return tensor;
  }

  // The 4-bit projection `name` (without ".qweight") with `in` inputs and `out` outputs.
  absl::StatusOr<Int4Matrix> TakeInt4(const std::string& name, int64_t in, int64_t out,
                                      const CheckpointQuantization& q) {
    const int64_t group = q.GroupSizeFor(in), groups = in / group;
    const bool awq = q.method == CheckpointQuantization::Method::kAwq;
    QuantizedProjectionBytes bytes;
    const SafetensorsTensor* tensor;
    LLMSERVE_ASSIGN_OR_RETURN(
        tensor, TakeRaw(name + ".qweight", awq ? Shape{in, out / 8} : Shape{in / 8, out}, {"I32"}));
    bytes.qweight = tensor->data;
    LLMSERVE_ASSIGN_OR_RETURN(tensor, TakeRaw(name + ".qzeros", {groups, out / 8}, {"I32"}));
    bytes.qzeros = tensor->data;
    LLMSERVE_ASSIGN_OR_RETURN(tensor,
                              TakeRaw(name + ".scales", {groups, out}, {"F16", "BF16", "F32"}));
    bytes.scales = tensor->data;
    bytes.scales_dtype = *ParseSafetensorsDType(tensor->dtype);
    if (awq) return UnpackAwq(bytes, in, out, group, files_.directory() + ": " + name);
    LLMSERVE_ASSIGN_OR_RETURN(tensor, TakeRaw(name + ".g_idx", {in}, {"I32"}));
    bytes.g_idx = tensor->data;
    return UnpackGptq(bytes, in, out, group, files_.directory() + ": " + name);
  }

  // AutoGPTQ's QuantLinear saves a bias for every projection, zeros where the model has none:
  // such a tensor is taken when all zero, and refused otherwise (the model would need it).
  absl::Status TakeZeroBias(const std::string& name, int64_t size) {
    if (files_.Find(name) == nullptr) return absl::OkStatus();
    Tensor bias;
    LLMSERVE_ASSIGN_OR_RETURN(bias, Load(name, {size}, DType::kF32));
    for (int64_t i = 0; i < size; ++i) {
      if (bias.data_as<float>()[i] != 0.0f) {
        return absl::InvalidArgumentError(absl::StrCat(files_.directory(), ": tensor '", name,
                                                       "' is not zero, but config.json declares no "
                                                       "bias for this projection"));
      }
    }
    return absl::OkStatus();
  }

  // Copies `name` (shape `shape`) into `dst` starting at element `offset`; with `transpose`, a
  // [rows, cols] source lands as [cols, rows].
  absl::Status CopyInto(const std::string& name, const std::vector<int64_t>& shape, Tensor* dst,
                        int64_t offset, bool transpose = false) {
    const SafetensorsTensor* src;
    LLMSERVE_ASSIGN_OR_RETURN(src, Take(name, shape));
    const DType from = *ParseSafetensorsDType(src->dtype);
    auto* out = static_cast<unsigned char*>(dst->data()) + offset * DTypeSize(dst->dtype());
    if (!transpose) {
      ConvertElements(src->data, from, out, dst->dtype(), src->NumElements());
      return absl::OkStatus();
    }
    const int64_t rows = shape[0], cols = shape[1];
    const size_t element = DTypeSize(from);
    std::string transposed(src->size, '\0');
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        std::memcpy(&transposed[(c * rows + r) * element], src->data + (r * cols + c) * element,
                    element);
      }
    }
    ConvertElements(transposed.data(), from, out, dst->dtype(), src->NumElements());
    return absl::OkStatus();
  }

  // Tensor `name` alone, converted to `dtype`.
  absl::StatusOr<Tensor> Load(const std::string& name, const std::vector<int64_t>& shape,
                              DType dtype) {
    Tensor tensor(dtype, shape);
    LLMSERVE_RETURN_IF_ERROR(CopyInto(name, shape, &tensor, 0));
    return tensor;
  }

  // INVALID_ARGUMENT listing the tensors nobody took, except those `ignorable` accepts.
  template <typename Predicate>
  absl::Status CheckNothingLeft(Predicate ignorable) const {
    std::vector<std::string> left;
    for (const SafetensorsTensor* tensor : files_.AllTensors()) {
      if (!used_.contains(tensor->name) && !ignorable(tensor->name)) left.push_back(tensor->name);
    }
    if (left.empty()) return absl::OkStatus();
    std::sort(left.begin(), left.end());
    if (left.size() > 8) left.resize(8);
    return absl::InvalidArgumentError(absl::StrCat(
        files_.directory(), ": unexpected tensors for this config: ", absl::StrJoin(left, ", ")));
  }

 private:
  // Tensor `name`, which must exist with `shape`.
  absl::StatusOr<const SafetensorsTensor*> FindWithShape(const std::string& name,
                                                         const std::vector<int64_t>& shape) const {
    const SafetensorsTensor* tensor = files_.Find(name);
    if (tensor == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(files_.directory(), ": tensor '", name, "' ",
                                                     ShapeString(shape), " is missing"));
    }
    if (tensor->shape != shape) {
      return absl::InvalidArgumentError(absl::StrCat(files_.directory(), ": tensor '", name,
                                                     "' has shape ", ShapeString(tensor->shape),
                                                     ", expected ", ShapeString(shape)));
    }
    return tensor;
  }

  const ModelFiles& files_;
  absl::flat_hash_set<std::string> used_;
};

// The projections of a Llama-family layer, q/k/v and gate/up fused, converted to `dtype`.
absl::Status LoadProjections(CheckpointReader& reader, const ModelConfig& c, DType dtype,
                             const std::string& p, LayerWeights* l) {
  const int64_t h = c.hidden_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  const int64_t inter = c.intermediate_size;
  l->qkv_weight = Tensor(dtype, {q + 2 * kv, h});
  LLMSERVE_RETURN_IF_ERROR(
      reader.CopyInto(p + "self_attn.q_proj.weight", {q, h}, &l->qkv_weight, 0));
  LLMSERVE_RETURN_IF_ERROR(
      reader.CopyInto(p + "self_attn.k_proj.weight", {kv, h}, &l->qkv_weight, q * h));
  LLMSERVE_RETURN_IF_ERROR(
      reader.CopyInto(p + "self_attn.v_proj.weight", {kv, h}, &l->qkv_weight, (q + kv) * h));
  LLMSERVE_ASSIGN_OR_RETURN(l->o_weight, reader.Load(p + "self_attn.o_proj.weight", {h, q}, dtype));
  l->up_weight = Tensor(dtype, {2 * inter, h});
  LLMSERVE_RETURN_IF_ERROR(
      reader.CopyInto(p + "mlp.gate_proj.weight", {inter, h}, &l->up_weight, 0));
  LLMSERVE_RETURN_IF_ERROR(
      reader.CopyInto(p + "mlp.up_proj.weight", {inter, h}, &l->up_weight, inter * h));
  LLMSERVE_ASSIGN_OR_RETURN(l->down_weight,
                            reader.Load(p + "mlp.down_proj.weight", {h, inter}, dtype));
  return absl::OkStatus();
}

// The same projections from an AWQ or GPTQ checkpoint, fused alike.
absl::Status LoadInt4Projections(CheckpointReader& reader, const ModelConfig& c,
                                 const std::string& p, LayerWeights* l) {
  const int64_t h = c.hidden_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  const int64_t inter = c.intermediate_size;
  const CheckpointQuantization& quant = c.quantization;
  std::vector<Int4Matrix> parts(3);
  LLMSERVE_ASSIGN_OR_RETURN(parts[0], reader.TakeInt4(p + "self_attn.q_proj", h, q, quant));
  LLMSERVE_ASSIGN_OR_RETURN(parts[1], reader.TakeInt4(p + "self_attn.k_proj", h, kv, quant));
  LLMSERVE_ASSIGN_OR_RETURN(parts[2], reader.TakeInt4(p + "self_attn.v_proj", h, kv, quant));
  l->qkv_int4 = ConcatRows(parts);
  LLMSERVE_ASSIGN_OR_RETURN(l->o_int4, reader.TakeInt4(p + "self_attn.o_proj", q, h, quant));
  parts.resize(2);
  LLMSERVE_ASSIGN_OR_RETURN(parts[0], reader.TakeInt4(p + "mlp.gate_proj", h, inter, quant));
  LLMSERVE_ASSIGN_OR_RETURN(parts[1], reader.TakeInt4(p + "mlp.up_proj", h, inter, quant));
  l->up_int4 = ConcatRows(parts);
  LLMSERVE_ASSIGN_OR_RETURN(l->down_int4, reader.TakeInt4(p + "mlp.down_proj", inter, h, quant));
  for (const auto& [name, size, declared] :
       {std::tuple<const char*, int64_t, bool>{"self_attn.q_proj", q, c.qkv_bias},
        {"self_attn.k_proj", kv, c.qkv_bias},
        {"self_attn.v_proj", kv, c.qkv_bias},
        {"self_attn.o_proj", h, c.o_bias},
        {"mlp.gate_proj", inter, c.mlp_bias},
        {"mlp.up_proj", inter, c.mlp_bias},
        {"mlp.down_proj", h, c.mlp_bias}}) {
    if (!declared) LLMSERVE_RETURN_IF_ERROR(reader.TakeZeroBias(p + name + ".bias", size));
  }
  return absl::OkStatus();
}

absl::Status LoadLlamaLayer(CheckpointReader& reader, const ModelConfig& c, DType dtype, int i,
                            LayerWeights* l) {
  const std::string p = absl::StrCat("model.layers.", i, ".");
  const int64_t h = c.hidden_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  const int64_t inter = c.intermediate_size;
  LLMSERVE_ASSIGN_OR_RETURN(l->attn_norm_weight,
                            reader.Load(p + "input_layernorm.weight", {h}, DType::kF32));
  if (c.quantization.quantized()) {
    LLMSERVE_RETURN_IF_ERROR(LoadInt4Projections(reader, c, p, l));
  } else {
    LLMSERVE_RETURN_IF_ERROR(LoadProjections(reader, c, dtype, p, l));
  }
  if (c.qkv_bias) {
    l->qkv_bias = Tensor(DType::kF32, {q + 2 * kv});
    LLMSERVE_RETURN_IF_ERROR(reader.CopyInto(p + "self_attn.q_proj.bias", {q}, &l->qkv_bias, 0));
    LLMSERVE_RETURN_IF_ERROR(reader.CopyInto(p + "self_attn.k_proj.bias", {kv}, &l->qkv_bias, q));
    LLMSERVE_RETURN_IF_ERROR(
        reader.CopyInto(p + "self_attn.v_proj.bias", {kv}, &l->qkv_bias, q + kv));
  }
  if (c.o_bias) {
    LLMSERVE_ASSIGN_OR_RETURN(l->o_bias,
                              reader.Load(p + "self_attn.o_proj.bias", {h}, DType::kF32));
  }
  LLMSERVE_ASSIGN_OR_RETURN(l->mlp_norm_weight,
                            reader.Load(p + "post_attention_layernorm.weight", {h}, DType::kF32));
  if (c.mlp_bias) {
    l->up_bias = Tensor(DType::kF32, {2 * inter});
    LLMSERVE_RETURN_IF_ERROR(reader.CopyInto(p + "mlp.gate_proj.bias", {inter}, &l->up_bias, 0));
    LLMSERVE_RETURN_IF_ERROR(reader.CopyInto(p + "mlp.up_proj.bias", {inter}, &l->up_bias, inter));
    LLMSERVE_ASSIGN_OR_RETURN(l->down_bias,
                              reader.Load(p + "mlp.down_proj.bias", {h}, DType::kF32));
  }
  return absl::OkStatus();
}

absl::Status LoadGpt2Layer(CheckpointReader& reader, const ModelConfig& c, DType dtype,
                           const std::string& prefix, int i, LayerWeights* l) {
  const std::string p = absl::StrCat(prefix, "h.", i, ".");
  const int64_t h = c.hidden_size, inter = c.intermediate_size;
  LLMSERVE_ASSIGN_OR_RETURN(l->attn_norm_weight, reader.Load(p + "ln_1.weight", {h}, DType::kF32));
  LLMSERVE_ASSIGN_OR_RETURN(l->attn_norm_bias, reader.Load(p + "ln_1.bias", {h}, DType::kF32));
  // Conv1D stores [in, out]: transpose to [out, in].
  l->qkv_weight = Tensor(dtype, {3 * h, h});
  LLMSERVE_RETURN_IF_ERROR(
      reader.CopyInto(p + "attn.c_attn.weight", {h, 3 * h}, &l->qkv_weight, 0, true));
  LLMSERVE_ASSIGN_OR_RETURN(l->qkv_bias, reader.Load(p + "attn.c_attn.bias", {3 * h}, DType::kF32));
  l->o_weight = Tensor(dtype, {h, h});
  LLMSERVE_RETURN_IF_ERROR(
      reader.CopyInto(p + "attn.c_proj.weight", {h, h}, &l->o_weight, 0, true));
  LLMSERVE_ASSIGN_OR_RETURN(l->o_bias, reader.Load(p + "attn.c_proj.bias", {h}, DType::kF32));
  LLMSERVE_ASSIGN_OR_RETURN(l->mlp_norm_weight, reader.Load(p + "ln_2.weight", {h}, DType::kF32));
  LLMSERVE_ASSIGN_OR_RETURN(l->mlp_norm_bias, reader.Load(p + "ln_2.bias", {h}, DType::kF32));
  l->up_weight = Tensor(dtype, {inter, h});
  LLMSERVE_RETURN_IF_ERROR(
      reader.CopyInto(p + "mlp.c_fc.weight", {h, inter}, &l->up_weight, 0, true));
  LLMSERVE_ASSIGN_OR_RETURN(l->up_bias, reader.Load(p + "mlp.c_fc.bias", {inter}, DType::kF32));
  l->down_weight = Tensor(dtype, {h, inter});
  LLMSERVE_RETURN_IF_ERROR(
      reader.CopyInto(p + "mlp.c_proj.weight", {inter, h}, &l->down_weight, 0, true));
  LLMSERVE_ASSIGN_OR_RETURN(l->down_bias, reader.Load(p + "mlp.c_proj.bias", {h}, DType::kF32));
  return absl::OkStatus();
}

// Tensors that checkpoints carry but a forward pass never reads: GPT-2's causal-mask buffers,
// old Llama checkpoints' rotary inv_freq, and an LM head stored beside tied embeddings.
bool IsKnownUnusedTensor(const ModelConfig& c, const std::string& name) {
  if (c.family == ModelFamily::kGpt2) {
    if (absl::EndsWith(name, ".attn.bias") || absl::EndsWith(name, ".attn.masked_bias")) {
      return true;
    }
  } else if (absl::EndsWith(name, ".self_attn.rotary_emb.inv_freq")) {
    return true;
  }
  return c.tied_embeddings && name == "lm_head.weight";
}

}  // namespace

absl::StatusOr<std::unique_ptr<ModelWeights>> LoadModelWeights(const ModelFiles& files,
                                                               const ModelConfig& config,
                                                               DType dtype,
                                                               const LoadProgress& progress) {
  auto weights = std::make_unique<ModelWeights>();
  weights->config = config;
  weights->dtype = dtype;
  CheckpointReader reader(files);
  const int64_t h = config.hidden_size, vocab = config.vocab_size;
  weights->layers.resize(config.num_layers);
  if (config.family == ModelFamily::kGpt2) {
    // save_pretrained of GPT2LMHeadModel prefixes "transformer."; the original files do not.
    const std::string prefix = files.Find("transformer.wte.weight") ? "transformer." : "";
    LLMSERVE_ASSIGN_OR_RETURN(weights->token_embedding,
                              reader.Load(prefix + "wte.weight", {vocab, h}, dtype));
    LLMSERVE_ASSIGN_OR_RETURN(
        weights->position_embedding,
        reader.Load(prefix + "wpe.weight", {config.max_position_embeddings, h}, DType::kF32));
    for (int i = 0; i < config.num_layers; ++i) {
      LLMSERVE_RETURN_IF_ERROR(
          LoadGpt2Layer(reader, config, dtype, prefix, i, &weights->layers[i]));
      if (progress) progress(i + 1, config.num_layers);
    }
    LLMSERVE_ASSIGN_OR_RETURN(weights->final_norm_weight,
                              reader.Load(prefix + "ln_f.weight", {h}, DType::kF32));
    LLMSERVE_ASSIGN_OR_RETURN(weights->final_norm_bias,
                              reader.Load(prefix + "ln_f.bias", {h}, DType::kF32));
  } else {
    LLMSERVE_ASSIGN_OR_RETURN(weights->token_embedding,
                              reader.Load("model.embed_tokens.weight", {vocab, h}, dtype));
    for (int i = 0; i < config.num_layers; ++i) {
      LLMSERVE_RETURN_IF_ERROR(LoadLlamaLayer(reader, config, dtype, i, &weights->layers[i]));
      if (progress) progress(i + 1, config.num_layers);
    }
    LLMSERVE_ASSIGN_OR_RETURN(weights->final_norm_weight,
                              reader.Load("model.norm.weight", {h}, DType::kF32));
  }
  if (!config.tied_embeddings) {
    LLMSERVE_ASSIGN_OR_RETURN(weights->lm_head, reader.Load("lm_head.weight", {vocab, h}, dtype));
  }
  LLMSERVE_RETURN_IF_ERROR(reader.CheckNothingLeft(
      [&config](const std::string& name) { return IsKnownUnusedTensor(config, name); }));
  return weights;
}

void DequantizeInt4Projections(ModelWeights* weights) {
  for (LayerWeights& l : weights->layers) {
    for (const auto& [int4, dense] : {std::pair<Int4Matrix*, Tensor*>{&l.qkv_int4, &l.qkv_weight},
                                      {&l.o_int4, &l.o_weight},
                                      {&l.up_int4, &l.up_weight},
                                      {&l.down_int4, &l.down_weight}}) {
      if (int4->empty()) continue;
      std::vector<float> row(int4->cols);
      *dense = Tensor(weights->dtype, {int4->rows, int4->cols});
      auto* out = static_cast<unsigned char*>(dense->data());
      const size_t row_bytes = int4->cols * DTypeSize(weights->dtype);
      for (int64_t r = 0; r < int4->rows; ++r) {
        for (int64_t c = 0; c < int4->cols; ++c) row[c] = int4->Dequantized(r, c);
        ConvertElements(row.data(), DType::kF32, out + r * row_bytes, weights->dtype, row.size());
      }
      *int4 = Int4Matrix();
    }
  }
}

absl::StatusOr<std::unique_ptr<ModelWeights>> LoadModelDirectory(const std::string& model_dir,
                                                                 int64_t max_model_len, DType dtype,
                                                                 const LoadProgress& progress) {
  std::unique_ptr<ModelFiles> files;
  LLMSERVE_ASSIGN_OR_RETURN(files, ModelFiles::Open(model_dir));
  ModelConfig config;
  LLMSERVE_ASSIGN_OR_RETURN(
      config, ParseModelConfig(files->config_json(), files->generation_config_json()));
  if (max_model_len < 0 || max_model_len > config.max_model_len) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_model_len ", max_model_len, " is outside [1, ", config.max_model_len,
                     "] (the model's context length); 0 uses the model's"));
  }
  if (max_model_len > 0) config.max_model_len = max_model_len;
  return LoadModelWeights(*files, config, dtype, progress);
}

}  // namespace llmserve::worker
