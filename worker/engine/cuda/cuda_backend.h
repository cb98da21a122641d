// The CUDA backend: the same Backend contract as the CPU reference, on one NVIDIA GPU.
//
// Device state, allocated once in Create with plain cudaMalloc (never managed memory):
//  - weights in bf16 or f16 (f32 checkpoints converted on upload), norms and biases in f32, in one
//    allocation; projections instead in int8 per output row (quantization kInt8) or in 4 bits
//    (AWQ/GPTQ checkpoints), quantized_layout.h;
//  - an activation workspace sized for max_num_batched_tokens tokens and max_num_seqs sequences;
//  - the paged KV cache in one allocation, in the weight dtype, with the CPU backend's layout:
//    per layer, K and V each [num_blocks, num_kv_heads, block_size, head_dim].
//
// A forward pass: metadata (token ids, positions, block tables, the decode and prefill work lists,
// the logit rows) staged in pinned memory and sent in one copy; embedding; per layer fused
// residual-add + norm, QKV GEMM (cuBLAS, f32 out; quantized weights: quantized_gemm.h), bias + RoPE
// + KV write, paged attention (decode kernel for one-token sequences, tiled prefill kernel for
// chunks), O GEMM, add + norm, gate/up GEMM, activation, down GEMM; then the final norm and the LM
// head for the rows that need logits only, copied back as f32. All on one stream; Forward returns
// when the logits are on the host.
//
// Numerics: the residual stream and every GEMM output are f32; GEMM inputs (normed activations,
// attention output, MLP activation), weights and the KV cache are 16-bit. See docs/cuda.md for
// the tolerance against the CPU backend this implies.
//
// Not thread-safe: the engine thread owns it. It makes its device current in Create and in
// Forward.

#ifndef LLMSERVE_WORKER_ENGINE_CUDA_CUDA_BACKEND_H_
#define LLMSERVE_WORKER_ENGINE_CUDA_CUDA_BACKEND_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/backend.h"
#include "worker/engine/cuda/cuda_backend_options.h"
#include "worker/engine/cuda/device_memory.h"
#include "worker/engine/cuda/device_weight.h"
#include "worker/engine/cuda/kernels.h"
#include "worker/model/dtype.h"
#include "worker/model/model_weights.h"
#include "worker/model/quantization.h"

// Opaque CUDA and cuBLAS handle types, so that users of this header need no CUDA include path.
struct CUstream_st;
struct cublasContext;

namespace llmserve::worker {

class CudaBackend final : public Backend {
 public:
  // FAILED_PRECONDITION when there is no usable CUDA device ("no CUDA device: cudaGetDeviceCount
  // returned ..."), INVALID_ARGUMENT for options out of range or a device index past the count,
  // a quantization the weights cannot take (int8 of an AWQ/GPTQ model: ResolveQuantization's
  // pairs), a malformed 4-bit projection or a non-finite weight to quantize (naming it),
  // UNIMPLEMENTED for a model shape without kernels (head_dim other than 64 or 128, more than
  // 64 query heads per KV head), RESOURCE_EXHAUSTED naming the weight, workspace and KV sizes and
  // the free memory when the device is too small, and the failed call's status otherwise.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(
      std::unique_ptr<const ModelWeights> weights, const CudaBackendOptions& options);
  ~CudaBackend() override;

  const ModelConfig& config() const override { return config_; }
  int32_t block_size() const override { return block_size_; }
  int32_t num_kv_blocks() const override { return num_blocks_; }
  absl::string_view name() const override { return "cuda"; }
  // INVALID_ARGUMENT for a malformed batch or one larger than max_num_batched_tokens /
  // max_num_seqs; a CUDA error's status otherwise (after which the device may be unusable).
  absl::Status Forward(const ForwardBatch& batch, ForwardOutput* output) override;

  // OK when `device` is a usable CUDA device (exists, compute capability 8.0 or newer);
  // FAILED_PRECONDITION ("no CUDA device: cudaGetDeviceCount returned ...") or INVALID_ARGUMENT
  // otherwise. Cheap: callers check it before loading weights.
  static absl::Status CheckDevice(int device);
  // Bytes one KV block of `block_size` tokens takes for `config` in 16-bit (K and V, all layers).
  static int64_t KvBytesPerBlock(const ModelConfig& config, int32_t block_size);
  // Bytes of the uploaded weights.
  int32_t max_loras() const override { return static_cast<int32_t>(lora_slots_.size()); }
  int64_t max_lora_rank() const override { return options_.max_lora_rank; }
  // Copies the adapter's A and B^T (f32) to the device; null empties the slot.
  absl::Status SetLoraAdapter(int32_t slot, std::shared_ptr<const LoraAdapter> adapter) override;

  int64_t weight_bytes() const { return static_cast<int64_t>(weights_.size()); }
  int64_t workspace_bytes() const { return workspace_bytes_; }
  // kNone, kInt8, kAwq or kGptq: how the projections are held.
  Quantization quantization() const { return quantization_; }

 private:
  struct DeviceLayer;
  struct Metadata;

  CudaBackend(const ModelConfig& config, const CudaBackendOptions& options);
  absl::Status Init(const ModelWeights& weights);
  absl::Status UploadWeights(const ModelWeights& weights);
  // A projection's GEMM in whatever format its weight is (quantized_gemm.h).
  absl::Status Project(const void* x, const cuda::DeviceWeight& w, float* y, int64_t m,
                       const char* what);
  absl::Status AllocateWorkspace();
  absl::Status AllocateKvCache(int64_t bytes);
  // A forward pass at the largest batch on a temporary cache: loads every kernel and cuBLAS's
  // internals before free memory is measured for the KV cache.
  absl::Status ProfileForward();
  absl::Status StageMetadata(const ForwardBatch& batch, Metadata* meta);
  // The step's LoRA pairs (lora_kernels.h), per layer and target, uploaded; none without an
  // adapter in the batch.
  absl::Status StageLora(const ForwardBatch& batch);
  // Adds the LoRA deltas of layer `layer`'s `target` projection: input `x` (16-bit, x_width
  // wide), output `y` (f32, y_width wide).
  absl::Status ApplyLora(int64_t layer, LoraTarget target, const void* x, int64_t x_width, float* y,
                         int64_t y_width);
  absl::Status RunLayers(const ForwardBatch& batch, const Metadata& meta);
  absl::Status Attention(int layer, const Metadata& meta);
  absl::Status ComputeLogits(const Metadata& meta, ForwardOutput* output);

  ModelConfig config_;
  CudaBackendOptions options_;
  cuda::DeviceDType dtype_;
  Quantization quantization_ = Quantization::kNone;
  int32_t block_size_;
  int32_t num_blocks_ = 0;
  int num_sms_ = 1;
  CUstream_st* stream_ = nullptr;
  cublasContext* cublas_ = nullptr;

  cuda::DeviceBuffer weights_;  // every weight tensor, 256-byte aligned
  std::vector<DeviceLayer> layers_;
  const void* token_embedding_ = nullptr;
  const float* position_embedding_ = nullptr;
  const float* final_norm_weight_ = nullptr;
  const float* final_norm_bias_ = nullptr;
  const void* lm_head_ = nullptr;
  const double* rope_inv_freq_ = nullptr;

  cuda::DeviceBuffer kv_cache_;  // K of all layers, then V of all layers
  int64_t layer_kv_elements_ = 0;

  // Workspace, for max_num_batched_tokens tokens.
  int64_t workspace_bytes_ = 0;
  cuda::DeviceBuffer workspace_;
  float* residual_ = nullptr;         // [tokens, hidden] f32
  void* normed_ = nullptr;            // [tokens, hidden] 16-bit
  float* qkv_ = nullptr;              // [tokens, (heads + 2 * kv_heads) * head_dim] f32
  void* attn_out_ = nullptr;          // [tokens, heads * head_dim] 16-bit
  float* proj_ = nullptr;             // [tokens, hidden] f32
  float* mlp_up_ = nullptr;           // [tokens, up width] f32
  void* mlp_act_ = nullptr;           // [tokens, intermediate] 16-bit
  float* partial_out_ = nullptr;      // [max_num_seqs, heads, kMaxDecodeSplits, head_dim] f32
  float* partial_max_sum_ = nullptr;  // [max_num_seqs, heads, kMaxDecodeSplits, 2] f32
  float* logits_ = nullptr;           // [logit_chunk_rows_, vocab] f32
  int32_t logit_chunk_rows_ = 0;
  cuda::DeviceBuffer cublas_workspace_;
  // 16-bit scratch for quantized projections' dequantized row chunks (prefill); empty without
  // quantized weights.
  void* dequant_scratch_ = nullptr;
  int64_t dequant_scratch_elements_ = 0;
  cuda::PinnedBuffer pinned_logits_;  // [logit_chunk_rows_, vocab] f32

  // Per-step int32 metadata, grown when a batch needs more.
  cuda::PinnedBuffer pinned_meta_;
  cuda::DeviceBuffer device_meta_;

  // LoRA: each slot's adapter on the device (its modules' A and B^T in one allocation), empty
  // when the slot holds none.
  struct DeviceLoraModule {
    LoraTarget target;
    const float* a;
    const float* b_t;
    int32_t in, out, rank, row_offset;
  };
  struct DeviceLoraSlot {
    cuda::DeviceBuffer memory;
    std::vector<std::vector<DeviceLoraModule>> layers;
  };
  std::vector<DeviceLoraSlot> lora_slots_;
  // This step's pairs on the device; (layer, target) = layer * 4 + target owns pairs
  // [lora_pair_start_[i], lora_pair_start_[i + 1]) with outputs up to lora_max_out_[i] wide.
  // Empty: no adapter in the step.
  std::vector<int32_t> lora_pair_start_;
  std::vector<int32_t> lora_max_out_;
  cuda::PinnedBuffer pinned_lora_;
  cuda::DeviceBuffer device_lora_;
  // Shrink values of one projection's pairs.
  cuda::DeviceBuffer lora_s_;
};

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_ENGINE_CUDA_CUDA_BACKEND_H_
