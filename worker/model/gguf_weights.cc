#include "worker/model/gguf_weights.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/logging.h"
#include "common/status/status_macros.h"
#include "worker/model/gguf/gguf_dequantize.h"

namespace llmserve::worker {
namespace {

// f32 values dequantized at a time (16 MiB): bounds the scratch buffer whatever the tensor size.
constexpr int64_t kGgufChunkFloats = int64_t{1} << 22;

std::string GgufDimsString(const std::vector<int64_t>& dims) {
  return absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
}

// Hands out the file's tensors by name, checking their shapes, converts them into runtime tensors,
// and remembers which were used so that leftovers can be reported.
class GgufTensorTaker {
 public:
  explicit GgufTensorTaker(const gguf::GgufFile& file) : file_(file) {}

  bool Has(const std::string& name) const { return file_.FindTensor(name) != nullptr; }

  const gguf::GgufFile& file() const { return file_; }

  // Copies matrix `name` (GGUF dims `dims`, HasInt4Groups) into rows [first_row, first_row +
  // dims[1]) of `dst`, its groups as they are (no rounding: gguf_dequantize.h). `rope_heads` as for
  // CopyInto.
  absl::Status CopyInt4Into(const std::string& name, const std::vector<int64_t>& dims,
                            Int4Matrix* dst, int64_t first_row, int64_t rope_heads = 0) {
    const gguf::GgufTensor* tensor;
    LLMSERVE_ASSIGN_OR_RETURN(tensor, Take(name, dims));
    const int64_t cols = dims[0], rows = dims[1];
    LLMSERVE_CHECK(cols == dst->cols && first_row >= 0 && first_row + rows <= dst->rows)
        << name << " does not fit its destination";
    int64_t head_rows;
    LLMSERVE_ASSIGN_OR_RETURN(head_rows, HeadRows(name, rows, rope_heads));
    const int64_t groups = dst->groups();
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t to = first_row + (rope_heads > 0 ? UnpermutedRow(row, head_rows) : row);
      LLMSERVE_RETURN_IF_ERROR(gguf::Int4GroupsOfRow(
          *tensor, row, dst->packed_values.data() + to * (cols / 2),
          dst->scales.data() + to * groups, dst->offsets.data() + to * groups));
    }
    return absl::OkStatus();
  }

  // Tensor `name` with GGUF dims `dims`, converted to `dtype` as a runtime tensor of the reversed
  // shape ([dims[1], dims[0]] for a matrix).
  absl::StatusOr<Tensor> Load(const std::string& name, const std::vector<int64_t>& dims,
                              DType dtype) {
    Tensor tensor(dtype, std::vector<int64_t>(dims.rbegin(), dims.rend()));
    LLMSERVE_RETURN_IF_ERROR(CopyInto(name, dims, &tensor, 0));
    return tensor;
  }

  // Copies tensor `name` (GGUF dims `dims`, 1-D or 2-D) into `dst` from element
  // `first_row * dims[0]` on (for a 1-D tensor: from element `first_row`). With `rope_heads` > 0,
  // the rows (of a 1-D tensor: the elements) of each of that many heads go from llama.cpp's
  // adjacent-pair order back to halves.
  absl::Status CopyInto(const std::string& name, const std::vector<int64_t>& dims, Tensor* dst,
                        int64_t first_row, int64_t rope_heads = 0) {
    const gguf::GgufTensor* tensor;
    LLMSERVE_ASSIGN_OR_RETURN(tensor, Take(name, dims));
    const int64_t cols = dims.size() == 1 ? 1 : dims[0];
    const int64_t rows = dims.size() == 1 ? dims[0] : dims[1];
    LLMSERVE_CHECK(first_row >= 0 && (first_row + rows) * cols <= dst->NumElements())
        << name << " does not fit its destination";
    int64_t head_rows;
    LLMSERVE_ASSIGN_OR_RETURN(head_rows, HeadRows(name, rows, rope_heads));
    const size_t element = DTypeSize(dst->dtype());
    auto* out = static_cast<unsigned char*>(dst->data()) + first_row * cols * element;
    if (dims.size() == 1) {
      // A vector is one GGUF row; biases and norms are small.
      buffer_.resize(rows);
      LLMSERVE_RETURN_IF_ERROR(gguf::DequantizeRows(*tensor, 0, 1, absl::MakeSpan(buffer_)));
      if (rope_heads > 0) UnpermuteRows(buffer_.data(), rows, head_rows, 1);
      ConvertElements(buffer_.data(), DType::kF32, out, dst->dtype(), rows);
      return absl::OkStatus();
    }
    // Whole heads per chunk, so that a permutation never crosses a chunk.
    const int64_t per_chunk =
        std::max<int64_t>(1, kGgufChunkFloats / (head_rows * cols)) * head_rows;
    for (int64_t row = 0; row < rows; row += per_chunk) {
      const int64_t n = std::min(per_chunk, rows - row);
      buffer_.resize(n * cols);
      LLMSERVE_RETURN_IF_ERROR(gguf::DequantizeRows(*tensor, row, n, absl::MakeSpan(buffer_)));
      if (rope_heads > 0) UnpermuteRows(buffer_.data(), n, head_rows, cols);
      ConvertElements(buffer_.data(), DType::kF32, out + row * cols * element, dst->dtype(),
                      n * cols);
    }
    return absl::OkStatus();
  }

  // INVALID_ARGUMENT listing the tensors nobody took.
  absl::Status CheckNothingLeft() const {
    std::vector<std::string> left;
    for (const gguf::GgufTensor& tensor : file_.tensors()) {
      if (!used_.contains(tensor.name)) left.push_back(tensor.name);
    }
    if (left.empty()) return absl::OkStatus();
    std::sort(left.begin(), left.end());
    const size_t count = left.size();
    if (left.size() > 8) left.resize(8);
    return absl::InvalidArgumentError(absl::StrCat(
        file_.name(), ": ", count, " tensors this model does not use: ", absl::StrJoin(left, ", "),
        count > left.size() ? ", ..." : ""));
  }

 private:
  absl::StatusOr<const gguf::GgufTensor*> Take(const std::string& name,
                                               const std::vector<int64_t>& dims) {
    const gguf::GgufTensor* tensor = file_.FindTensor(name);
    if (tensor == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(file_.name(), ": tensor '", name, "' ",
                                                     GgufDimsString(dims), " is missing"));
    }
    if (tensor->dims != dims) {
      return absl::InvalidArgumentError(absl::StrCat(
          file_.name(), ": tensor '", name, "' has shape ", GgufDimsString(tensor->dims),
          ", expected ", GgufDimsString(dims), " (GGUF order, fastest dimension first)"));
    }
    used_.insert(name);
    return tensor;
  }

  // Rows per head of `rows` rows in `rope_heads` heads (all of them when 0); INVALID_ARGUMENT
  // naming the tensor unless they are whole heads of an even size.
  absl::StatusOr<int64_t> HeadRows(const std::string& name, int64_t rows,
                                   int64_t rope_heads) const {
    if (rope_heads == 0) return rows;
    const int64_t head_rows = rows / rope_heads;
    if (head_rows * rope_heads != rows || head_rows % 2 != 0) {
      return absl::InvalidArgumentError(absl::StrCat(file_.name(), ": tensor '", name, "': ", rows,
                                                     " rows are not ", rope_heads,
                                                     " heads of an even size"));
    }
    return head_rows;
  }

  // Where row `row` goes in heads of `head_rows`: h * head_rows + 2i + j moves to
  // h * head_rows + j * head_rows / 2 + i (the inverse of llama.cpp's LlamaModel.permute).
  static int64_t UnpermutedRow(int64_t row, int64_t head_rows) {
    const int64_t within = row % head_rows;
    return row - within + (within % 2) * (head_rows / 2) + within / 2;
  }

  // `rows` rows of `cols` values, in heads of `head_rows`, unpermuted in place (UnpermutedRow).
  void UnpermuteRows(float* data, int64_t rows, int64_t head_rows, int64_t cols) {
    permuted_.assign(data, data + rows * cols);
    for (int64_t row = 0; row < rows; ++row) {
      std::copy_n(permuted_.data() + row * cols, cols, data + UnpermutedRow(row, head_rows) * cols);
    }
  }

  const gguf::GgufFile& file_;
  absl::flat_hash_set<std::string> used_;
  std::vector<float> buffer_;
  std::vector<float> permuted_;
};

// One GGUF matrix of a fused projection: its name, GGUF dims and, for llama's Q and K, heads to
// unpermute.
struct GgufPart {
  std::string name;
  std::vector<int64_t> dims;
  int64_t rope_heads = 0;
};

// Whether every part of a projection exists and holds 4-bit groups: what LoadGgufProjection keeps
// in 4 bits.
bool ProjectionIn4Bits(const gguf::GgufFile& file, const std::vector<GgufPart>& parts) {
  for (const GgufPart& part : parts) {
    const gguf::GgufTensor* tensor = file.FindTensor(part.name);
    if (tensor == nullptr || !gguf::HasInt4Groups(tensor->type)) return false;
  }
  return true;
}

// An empty Int4Matrix of [rows, cols] in groups of 32 with offsets (GGUF's form), to fill.
Int4Matrix AllocateGgufInt4(int64_t rows, int64_t cols) {
  Int4Matrix m;
  m.rows = rows;
  m.cols = cols;
  m.group_size = gguf::kInt4GroupSize;
  m.packed_values.assign(static_cast<size_t>(rows * cols / 2), 0);
  m.scales.assign(static_cast<size_t>(rows * m.groups()), 0.0f);
  m.offsets.assign(static_cast<size_t>(rows * m.groups()), 0.0f);
  return m;
}

// The projection made of `parts` (rows one after another): kept in 4 bits in `int4` when every
// part holds 4-bit groups (ProjectionIn4Bits), otherwise dequantized into `dense` in `dtype`.
absl::Status LoadGgufProjection(GgufTensorTaker& taker, const std::vector<GgufPart>& parts,
                                DType dtype, Tensor* dense, Int4Matrix* int4) {
  const int64_t cols = parts[0].dims[0];
  int64_t rows = 0;
  for (const GgufPart& part : parts) rows += part.dims[1];
  int64_t first_row = 0;
  if (ProjectionIn4Bits(taker.file(), parts)) {
    *int4 = AllocateGgufInt4(rows, cols);
    for (const GgufPart& part : parts) {
      LLMSERVE_RETURN_IF_ERROR(
          taker.CopyInt4Into(part.name, part.dims, int4, first_row, part.rope_heads));
      first_row += part.dims[1];
    }
    return absl::OkStatus();
  }
  *dense = Tensor(dtype, {rows, cols});
  for (const GgufPart& part : parts) {
    LLMSERVE_RETURN_IF_ERROR(
        taker.CopyInto(part.name, part.dims, dense, first_row, part.rope_heads));
    first_row += part.dims[1];
  }
  return absl::OkStatus();
}

// The projections of layer i as GGUF parts, in the order LayerWeights fuses them: qkv, o, gate/up
// (or up), down.
std::vector<std::vector<GgufPart>> GgufProjections(const ModelConfig& c, int i) {
  const std::string p = absl::StrCat("blk.", i, ".");
  const int64_t h = c.hidden_size, inter = c.intermediate_size;
  if (c.family == ModelFamily::kGpt2) {
    return {{{p + "attn_qkv.weight", {h, 3 * h}}},
            {{p + "attn_output.weight", {h, h}}},
            {{p + "ffn_up.weight", {h, inter}}},
            {{p + "ffn_down.weight", {inter, h}}}};
  }
  const int64_t q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  // Only llama.cpp's `llama` graph rotates adjacent pairs (ModelConfigFromGguf names qwen2
  // Qwen2ForCausalLM).
  const bool permute = c.architecture == "LlamaForCausalLM";
  return {{{p + "attn_q.weight", {h, q}, permute ? c.num_heads : 0},
           {p + "attn_k.weight", {h, kv}, permute ? c.num_kv_heads : 0},
           {p + "attn_v.weight", {h, kv}}},
          {{p + "attn_output.weight", {q, h}}},
          {{p + "ffn_gate.weight", {h, inter}}, {p + "ffn_up.weight", {h, inter}}},
          {{p + "ffn_down.weight", {inter, h}}}};
}

absl::Status LoadGgufLlamaLayer(GgufTensorTaker& taker, const ModelConfig& c, DType dtype, int i,
                                LayerWeights* l) {
  const std::string p = absl::StrCat("blk.", i, ".");
  const int64_t h = c.hidden_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  const int64_t inter = c.intermediate_size;
  const std::vector<std::vector<GgufPart>> projections = GgufProjections(c, i);
  // The Q and K biases are permuted as their rows are.
  const int64_t q_heads = projections[0][0].rope_heads, k_heads = projections[0][1].rope_heads;
  LLMSERVE_ASSIGN_OR_RETURN(l->attn_norm_weight,
                            taker.Load(p + "attn_norm.weight", {h}, DType::kF32));
  LLMSERVE_RETURN_IF_ERROR(
      LoadGgufProjection(taker, projections[0], dtype, &l->qkv_weight, &l->qkv_int4));
  if (c.qkv_bias) {
    l->qkv_bias = Tensor(DType::kF32, {q + 2 * kv});
    LLMSERVE_RETURN_IF_ERROR(taker.CopyInto(p + "attn_q.bias", {q}, &l->qkv_bias, 0, q_heads));
    LLMSERVE_RETURN_IF_ERROR(taker.CopyInto(p + "attn_k.bias", {kv}, &l->qkv_bias, q, k_heads));
    LLMSERVE_RETURN_IF_ERROR(taker.CopyInto(p + "attn_v.bias", {kv}, &l->qkv_bias, q + kv));
  }
  LLMSERVE_RETURN_IF_ERROR(
      LoadGgufProjection(taker, projections[1], dtype, &l->o_weight, &l->o_int4));
  if (c.o_bias) {
    LLMSERVE_ASSIGN_OR_RETURN(l->o_bias, taker.Load(p + "attn_output.bias", {h}, DType::kF32));
  }
  LLMSERVE_ASSIGN_OR_RETURN(l->mlp_norm_weight,
                            taker.Load(p + "ffn_norm.weight", {h}, DType::kF32));
  LLMSERVE_RETURN_IF_ERROR(
      LoadGgufProjection(taker, projections[2], dtype, &l->up_weight, &l->up_int4));
  LLMSERVE_RETURN_IF_ERROR(
      LoadGgufProjection(taker, projections[3], dtype, &l->down_weight, &l->down_int4));
  if (c.mlp_bias) {
    l->up_bias = Tensor(DType::kF32, {2 * inter});
    LLMSERVE_RETURN_IF_ERROR(taker.CopyInto(p + "ffn_gate.bias", {inter}, &l->up_bias, 0));
    LLMSERVE_RETURN_IF_ERROR(taker.CopyInto(p + "ffn_up.bias", {inter}, &l->up_bias, inter));
    LLMSERVE_ASSIGN_OR_RETURN(l->down_bias, taker.Load(p + "ffn_down.bias", {h}, DType::kF32));
  }
  return absl::OkStatus();
}

// llama.cpp's converter stores GPT-2's Conv1D weights transposed to [out, in] (GGUF [in, out]),
// q/k/v still fused: the runtime layout already.
absl::Status LoadGgufGpt2Layer(GgufTensorTaker& taker, const ModelConfig& c, DType dtype, int i,
                               LayerWeights* l) {
  const std::string p = absl::StrCat("blk.", i, ".");
  const int64_t h = c.hidden_size, inter = c.intermediate_size;
  const auto f32 = [&](const std::string& name, int64_t size, Tensor* out) -> absl::Status {
    LLMSERVE_ASSIGN_OR_RETURN(*out, taker.Load(p + name, {size}, DType::kF32));
    return absl::OkStatus();
  };
  LLMSERVE_RETURN_IF_ERROR(f32("attn_norm.weight", h, &l->attn_norm_weight));
  LLMSERVE_RETURN_IF_ERROR(f32("attn_norm.bias", h, &l->attn_norm_bias));
  const std::vector<std::vector<GgufPart>> projections = GgufProjections(c, i);
  LLMSERVE_RETURN_IF_ERROR(
      LoadGgufProjection(taker, projections[0], dtype, &l->qkv_weight, &l->qkv_int4));
  LLMSERVE_RETURN_IF_ERROR(f32("attn_qkv.bias", 3 * h, &l->qkv_bias));
  LLMSERVE_RETURN_IF_ERROR(
      LoadGgufProjection(taker, projections[1], dtype, &l->o_weight, &l->o_int4));
  LLMSERVE_RETURN_IF_ERROR(f32("attn_output.bias", h, &l->o_bias));
  LLMSERVE_RETURN_IF_ERROR(f32("ffn_norm.weight", h, &l->mlp_norm_weight));
  LLMSERVE_RETURN_IF_ERROR(f32("ffn_norm.bias", h, &l->mlp_norm_bias));
  LLMSERVE_RETURN_IF_ERROR(
      LoadGgufProjection(taker, projections[2], dtype, &l->up_weight, &l->up_int4));
  LLMSERVE_RETURN_IF_ERROR(f32("ffn_up.bias", inter, &l->up_bias));
  LLMSERVE_RETURN_IF_ERROR(
      LoadGgufProjection(taker, projections[3], dtype, &l->down_weight, &l->down_int4));
  LLMSERVE_RETURN_IF_ERROR(f32("ffn_down.bias", h, &l->down_bias));
  return absl::OkStatus();
}

// The names of the tensors LoadGgufWeights keeps in 4 bits: every part of each projection whose
// parts all hold 4-bit groups (ProjectionIn4Bits).
absl::flat_hash_set<std::string> TensorsIn4Bits(const gguf::GgufFile& file,
                                                const ModelConfig& config) {
  absl::flat_hash_set<std::string> names;
  for (int i = 0; i < config.num_layers; ++i) {
    for (const std::vector<GgufPart>& parts : GgufProjections(config, i)) {
      if (!ProjectionIn4Bits(file, parts)) continue;
      for (const GgufPart& part : parts) names.insert(part.name);
    }
  }
  return names;
}

}  // namespace

CheckpointQuantization GgufQuantization(const gguf::GgufFile& file, const ModelConfig& config) {
  if (TensorsIn4Bits(file, config).empty()) return {};
  return {.method = CheckpointQuantization::Method::kGguf, .group_size = gguf::kInt4GroupSize};
}

int64_t GgufRuntimeWeightBytes(const gguf::GgufFile& file, const ModelConfig& config, DType dtype) {
  const absl::flat_hash_set<std::string> in_4_bits = TensorsIn4Bits(file, config);
  int64_t total = 0;
  for (const gguf::GgufTensor& tensor : file.tensors()) {
    if (in_4_bits.contains(tensor.name)) {
      // Int4Matrix: half a byte per value, an f32 scale and an f32 offset per 32.
      total += tensor.num_elements / 2 + tensor.num_elements / gguf::kInt4GroupSize * 8;
      continue;
    }
    const bool matrix = tensor.dims.size() >= 2 && tensor.name != "position_embd.weight";
    total += tensor.num_elements * static_cast<int64_t>(matrix ? DTypeSize(dtype) : 4);
  }
  return total;
}

absl::StatusOr<std::unique_ptr<ModelWeights>> LoadGgufWeights(const gguf::GgufFile& file,
                                                              const ModelConfig& config,
                                                              const FileLoadOptions& options) {
  const DType dtype = options.dtype;
  // The weights plus the scratch (two f32 chunks), before the first allocation.
  int64_t largest = 0;
  for (const gguf::GgufTensor& tensor : file.tensors()) {
    largest = std::max(largest, tensor.num_elements);
  }
  const int64_t needed =
      GgufRuntimeWeightBytes(file, config, dtype) + 2 * 4 * std::min(largest, kGgufChunkFloats);
  LLMSERVE_RETURN_IF_ERROR(CheckWeightsFitInMemory(
      file.name(), needed, dtype, options.memory_limit_bytes,
      "tensors other than Q4_0/Q4_1/Q4_K projections are dequantized at load"));
  auto weights = std::make_unique<ModelWeights>();
  weights->config = config;
  weights->dtype = dtype;
  GgufTensorTaker taker(file);
  const int64_t h = config.hidden_size, vocab = config.vocab_size;
  LLMSERVE_ASSIGN_OR_RETURN(weights->token_embedding,
                            taker.Load("token_embd.weight", {h, vocab}, dtype));
  weights->layers.resize(config.num_layers);
  const bool gpt2 = config.family == ModelFamily::kGpt2;
  if (gpt2) {
    LLMSERVE_ASSIGN_OR_RETURN(
        weights->position_embedding,
        taker.Load("position_embd.weight", {h, config.max_position_embeddings}, DType::kF32));
  }
  for (int i = 0; i < config.num_layers; ++i) {
    if (gpt2) {
      LLMSERVE_RETURN_IF_ERROR(LoadGgufGpt2Layer(taker, config, dtype, i, &weights->layers[i]));
    } else {
      LLMSERVE_RETURN_IF_ERROR(LoadGgufLlamaLayer(taker, config, dtype, i, &weights->layers[i]));
    }
    if (options.progress) options.progress(i + 1, config.num_layers);
  }
  LLMSERVE_ASSIGN_OR_RETURN(weights->final_norm_weight,
                            taker.Load("output_norm.weight", {h}, DType::kF32));
  if (gpt2) {
    LLMSERVE_ASSIGN_OR_RETURN(weights->final_norm_bias,
                              taker.Load("output_norm.bias", {h}, DType::kF32));
  }
  if (!config.tied_embeddings) {
    LLMSERVE_ASSIGN_OR_RETURN(weights->lm_head, taker.Load("output.weight", {h, vocab}, dtype));
  }
  LLMSERVE_RETURN_IF_ERROR(taker.CheckNothingLeft());
  return weights;
}

}  // namespace llmserve::worker
