// The weights of a model in the layout the engine runs, loaded and checked from a checkpoint.
//
// Checkpoints differ by family (GPT-2 keeps Conv1D weights as [in, out] and a fused c_attn;
// Llama keeps separate q/k/v and gate/up projections as [out, in]); at load time every family is
// brought to one layout: projection weights [out, in] in the runtime dtype, q/k/v fused into one
// matrix and gate/up fused into one, norms and biases in f32.
//
// AWQ and GPTQ checkpoints (config.quantization) keep their projections in 4 bits: they load into
// LayerWeights' Int4Matrix fields instead (quantized_checkpoint.h), checked tensor by tensor
// (int32 qweight/qzeros/g_idx, float scales, shapes from the config).
//
// Loading validates that every expected tensor is present with the expected shape and a float
// dtype, and that no tensor is left over (a few known buffers, such as GPT-2's causal-mask
// "attn.bias", are named and skipped). Errors name the tensor.
//
// Thread-safe after loading: immutable.

#ifndef LLMSERVE_WORKER_MODEL_MODEL_WEIGHTS_H_
#define LLMSERVE_WORKER_MODEL_MODEL_WEIGHTS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/dtype.h"
#include "worker/model/int4_matrix.h"
#include "worker/model/model_config.h"
#include "worker/model/model_files.h"

namespace llmserve::worker {

// A dense row-major tensor in 64-byte-aligned, zero-initialized memory it owns (on huge pages
// from 64 KiB up: common/base/huge_page_memory.h). Empty (no shape) when absent, e.g.
// a bias the model does not have.
class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, std::vector<int64_t> shape);

  bool empty() const { return shape_.empty(); }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t NumElements() const;
  size_t SizeBytes() const { return static_cast<size_t>(NumElements()) * DTypeSize(dtype_); }

  void* data() { return data_.get(); }
  const void* data() const { return data_.get(); }
  template <typename T>
  T* data_as() {
    return static_cast<T*>(data());
  }
  template <typename T>
  const T* data_as() const {
    return static_cast<const T*>(data());
  }

 private:
  struct FreeDeleter {
    explicit FreeDeleter(bool on_huge_pages) : huge_pages(on_huge_pages) {}
    void operator()(void* p) const;
    bool huge_pages;  // from AllocateHugePageMemory rather than aligned_alloc
  };
  DType dtype_ = DType::kF32;
  std::vector<int64_t> shape_;
  std::unique_ptr<void, FreeDeleter> data_{nullptr, FreeDeleter(false)};
};

struct LayerWeights {
  Tensor attn_norm_weight;  // [hidden] f32
  Tensor attn_norm_bias;    // [hidden] f32, LayerNorm only
  // Rows: q heads, then k heads, then v heads. [(num_heads + 2 * num_kv_heads) * head_dim, hidden]
  Tensor qkv_weight;
  Tensor qkv_bias;         // [(num_heads + 2 * num_kv_heads) * head_dim] f32, when the model has it
  Tensor o_weight;         // [hidden, num_heads * head_dim]
  Tensor o_bias;           // [hidden] f32, when the model has it
  Tensor mlp_norm_weight;  // [hidden] f32
  Tensor mlp_norm_bias;    // [hidden] f32, LayerNorm only
  // Gated MLP: rows 0..I-1 are gate, rows I..2I-1 are up: [2 * intermediate, hidden].
  // Plain MLP: [intermediate, hidden].
  Tensor up_weight;
  Tensor up_bias;      // [2 * intermediate] or [intermediate] f32, when the model has it
  Tensor down_weight;  // [hidden, intermediate]
  Tensor down_bias;    // [hidden] f32, when the model has it
  // An AWQ/GPTQ checkpoint's projections (config.quantization), in the same row layout as the
  // tensors above (q/k/v fused, gate/up fused), which are then empty.
  Int4Matrix qkv_int4;
  Int4Matrix o_int4;
  Int4Matrix up_int4;
  Int4Matrix down_int4;
};

struct ModelWeights {
  ModelConfig config;
  // The dtype of the projection and embedding matrices.
  DType dtype = DType::kF32;
  Tensor token_embedding;     // [vocab, hidden]
  Tensor position_embedding;  // [max_position_embeddings, hidden] f32, learned positions only
  std::vector<LayerWeights> layers;
  Tensor final_norm_weight;  // [hidden] f32
  Tensor final_norm_bias;    // [hidden] f32, LayerNorm only
  // [vocab, hidden]; empty when tied: the LM head is then token_embedding.
  Tensor lm_head;

  const Tensor& LmHead() const { return lm_head.empty() ? token_embedding : lm_head; }
  // Bytes of all tensors.
  size_t SizeBytes() const;
};

// Called after each decoder layer is loaded (for a progress line on big models).
using LoadProgress = std::function<void(int64_t layers_done, int64_t layers_total)>;

// Loads and converts the weights of `files` described by `config` into `dtype`.
absl::StatusOr<std::unique_ptr<ModelWeights>> LoadModelWeights(const ModelFiles& files,
                                                               const ModelConfig& config,
                                                               DType dtype,
                                                               const LoadProgress& progress = {});

// The 16-bit (or f32) twin of a 4-bit model, for tests and tools (both backends now run 4-bit
// projections as such; the CUDA backend dequantized with this at load before it had kernels):
// replaces each layer's AWQ/GPTQ projections by dense tensors in weights->dtype holding their
// dequantization, (q - zero) * scale computed in f32 and then rounded to the dtype, and frees the
// 4-bit ones. config.quantization still names the checkpoint's format. A no-op for unquantized
// weights.
void DequantizeInt4Projections(ModelWeights* weights);

// Opens the model directory `model_dir`, parses its config, caps the context length at
// `max_model_len` (0 keeps the model's; INVALID_ARGUMENT outside [0, the model's]) and loads the
// weights into `dtype`: what every backend's engine builder does first.
absl::StatusOr<std::unique_ptr<ModelWeights>> LoadModelDirectory(const std::string& model_dir,
                                                                 int64_t max_model_len, DType dtype,
                                                                 const LoadProgress& progress = {});

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_MODEL_MODEL_WEIGHTS_H_
