#include "worker/engine/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status/status_macros.h"
#include "worker/engine/cuda/attention.h"
#include "worker/engine/cuda/cuda_status.h"
#include "worker/engine/cuda/gemm.h"
#include "worker/engine/cuda/lora_kernels.h"
#include "worker/engine/cuda/projection_image.h"
#include "worker/engine/cuda/quantized_gemm.h"
#include "worker/model/rope.h"

namespace llmserve::worker {
namespace {

using cuda::DeviceDType;

constexpr size_t kAlignment = cuda::kDeviceAlignment;
// cuBLAS gets its workspace from us, so that it allocates nothing behind the memory accounting
// (32 MiB is what NVIDIA recommends for Hopper).
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;
// The device logits buffer holds at most this many bytes of rows; larger all_logits batches are
// computed and copied in chunks.
constexpr int64_t kMaxLogitChunkBytes = int64_t{256} << 20;
// Keys per decode split below which splitting a context further does not pay.
constexpr int64_t kMinKeysPerSplit = 256;

size_t AlignUp(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

std::string MiB(int64_t bytes) { return absl::StrFormat("%.1f MiB", bytes / 1048576.0); }

cuda::DeviceActivation ToDeviceActivation(Activation activation) {
  switch (activation) {
    case Activation::kGeluTanh:
      return cuda::DeviceActivation::kGeluTanh;
    case Activation::kGeluErf:
      return cuda::DeviceActivation::kGeluErf;
    case Activation::kSilu:
      return cuda::DeviceActivation::kSilu;
  }
  return cuda::DeviceActivation::kSilu;
}

// Runs a kernel launcher and names it in the error.
#define LLMSERVE_LAUNCH(launch) LLMSERVE_CUDA_RETURN_IF_ERROR(launch)

}  // namespace

// Device pointers of one layer's weights; null for the tensors the model does not have.
struct CudaBackend::DeviceLayer {
  const void* attn_norm_weight = nullptr;  // f32
  const void* attn_norm_bias = nullptr;    // f32
  cuda::DeviceWeight qkv;                  // 16-bit, int8 or int4
  const void* qkv_bias = nullptr;          // f32
  cuda::DeviceWeight o;
  const void* o_bias = nullptr;
  const void* mlp_norm_weight = nullptr;
  const void* mlp_norm_bias = nullptr;
  cuda::DeviceWeight up;
  const void* up_bias = nullptr;
  cuda::DeviceWeight down;
  const void* down_bias = nullptr;
};

// One step's metadata on the device (pointers into device_meta_) and its host-side counts.
struct CudaBackend::Metadata {
  int32_t num_tokens = 0;
  const int32_t* token_ids = nullptr;          // [num_tokens]
  const int32_t* positions = nullptr;          // [num_tokens]
  const int32_t* token_seq = nullptr;          // [num_tokens]
  const int32_t* block_table_start = nullptr;  // [num_seqs + 1]
  const int32_t* block_ids = nullptr;          // [block ids]
  const int32_t* decode_tokens = nullptr;      // [num_decode]
  const int32_t* prefill_tiles = nullptr;      // [num_tiles, 3]
  const int32_t* logit_rows = nullptr;         // [num_logit_rows]
  int32_t num_decode = 0;
  int32_t num_decode_splits = 1;
  int32_t num_tiles = 0;
  int32_t num_logit_rows = 0;
  std::vector<int32_t> row_start;  // ForwardOutput::row_start
};

namespace {

float* AsFloat(const void* p) { return static_cast<float*>(const_cast<void*>(p)); }

// Free and total memory of the current device.
absl::Status MemoryInfo(size_t* free_bytes, size_t* total_bytes) {
  LLMSERVE_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(free_bytes, total_bytes));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(
    std::unique_ptr<const ModelWeights> weights, const CudaBackendOptions& options) {
  const ModelConfig& c = weights->config;
  if (options.dtype != DType::kBF16 && options.dtype != DType::kF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("the CUDA backend runs bf16 or f16 weights, not ", DTypeName(options.dtype)));
  }
  if (options.block_size < 1 || options.block_size > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("block_size ", options.block_size, " is outside [1, 1024]"));
  }
  if (options.max_num_batched_tokens < 1 || options.max_num_seqs < 1) {
    return absl::InvalidArgumentError("max_num_batched_tokens and max_num_seqs must be positive");
  }
  if (options.kv_cache_bytes < 0 ||
      (options.kv_cache_bytes == 0 &&
       !(options.kv_cache_fraction > 0 && options.kv_cache_fraction <= 1))) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv_cache_fraction ", options.kv_cache_fraction,
                     " is outside (0, 1] and no KV cache byte size is set"));
  }
  if (!cuda::IsSupportedHeadDim(c.head_dim)) {
    return absl::UnimplementedError(
        absl::StrCat("the CUDA backend has attention kernels for head_dim 64 and 128, not ",
                     c.head_dim, " (docs/cuda.md; the CPU backend runs any head_dim)"));
  }
  if (c.num_kv_heads < 1 || c.num_heads % c.num_kv_heads != 0 ||
      c.num_heads / c.num_kv_heads > cuda::kMaxGqaGroup) {
    return absl::UnimplementedError(
        absl::StrCat("the CUDA backend supports up to ", cuda::kMaxGqaGroup,
                     " query heads per KV head, not ", c.num_heads, " / ", c.num_kv_heads));
  }

  if (options.quantization != Quantization::kNone && options.quantization != Quantization::kInt8) {
    return absl::InvalidArgumentError(
        absl::StrCat("the CUDA backend's quantization option is none or int8, not ",
                     QuantizationName(options.quantization),
                     " (AWQ/GPTQ weights are recognised by their 4-bit projections)"));
  }
  // int8 on 4-bit weights, or 4-bit weights without their checkpoint's quantization_config.
  Quantization resolved;
  LLMSERVE_ASSIGN_OR_RETURN(resolved, ResolveQuantization(options.quantization, c.quantization));
  if (options.max_loras < 0 || options.max_loras > 1024 || options.max_lora_rank < 1 ||
      options.max_lora_rank > 512) {
    return absl::InvalidArgumentError(absl::StrCat("max_loras ", options.max_loras,
                                                   " or max_lora_rank ", options.max_lora_rank,
                                                   " is outside [0, 1024] / [1, 512]"));
  }

  LLMSERVE_RETURN_IF_ERROR(CheckDevice(options.device));
  LLMSERVE_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device));
  cudaDeviceProp props;
  LLMSERVE_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&props, options.device));
  std::unique_ptr<CudaBackend> backend(new CudaBackend(c, options));
  backend->quantization_ = resolved;
  backend->num_sms_ = std::max(1, props.multiProcessorCount);
  backend->lora_slots_.resize(options.max_loras);
  LLMSERVE_RETURN_IF_ERROR(backend->Init(*weights));
  return backend;
}

absl::Status CudaBackend::CheckDevice(int device) {
  int count = 0;
  const cudaError_t count_error = cudaGetDeviceCount(&count);
  if (count_error != cudaSuccess || count == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no CUDA device: cudaGetDeviceCount returned ",
        count_error == cudaSuccess ? "0 devices"
                                   : absl::StrCat(cudaGetErrorName(count_error), " (",
                                                  cudaGetErrorString(count_error), ")")));
  }
  if (device < 0 || device >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA device ", device, " does not exist (", count, " devices)"));
  }
  cudaDeviceProp props;
  LLMSERVE_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&props, device));
  if (props.major < 8) {
    return absl::FailedPreconditionError(
        absl::StrCat("CUDA device ", device, " (", props.name, ") has compute capability ",
                     props.major, ".", props.minor, "; the CUDA backend needs 8.0 or newer"));
  }
  return absl::OkStatus();
}

CudaBackend::CudaBackend(const ModelConfig& config, const CudaBackendOptions& options)
    : config_(config),
      options_(options),
      dtype_(options.dtype == DType::kBF16 ? DeviceDType::kBF16 : DeviceDType::kF16),
      block_size_(options.block_size) {}

CudaBackend::~CudaBackend() {
  // Errors here (a sticky fault from an earlier kernel) leave nothing to do.
  (void)cudaSetDevice(options_.device);
  if (stream_ != nullptr) (void)cudaStreamSynchronize(stream_);
  if (cublas_ != nullptr) (void)cublasDestroy(cublas_);
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
}

int64_t CudaBackend::KvBytesPerBlock(const ModelConfig& c, int32_t block_size) {
  return CudaKvBytesPerBlock(c, block_size);
}

absl::Status CudaBackend::Init(const ModelWeights& weights) {
  LLMSERVE_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  LLMSERVE_CUBLAS_RETURN_IF_ERROR(cublasCreate(&cublas_));
  LLMSERVE_CUBLAS_RETURN_IF_ERROR(cublasSetStream(cublas_, stream_));
  LLMSERVE_ASSIGN_OR_RETURN(
      cublas_workspace_, cuda::DeviceBuffer::Allocate(kCublasWorkspaceBytes, "cuBLAS workspace"));
  LLMSERVE_CUBLAS_RETURN_IF_ERROR(
      cublasSetWorkspace(cublas_, cublas_workspace_.data(), cublas_workspace_.size()));
  LLMSERVE_RETURN_IF_ERROR(UploadWeights(weights));
  LLMSERVE_RETURN_IF_ERROR(AllocateWorkspace());

  const int64_t per_block = KvBytesPerBlock(config_, block_size_);
  if (options_.kv_cache_bytes > 0) {
    LLMSERVE_RETURN_IF_ERROR(AllocateKvCache(options_.kv_cache_bytes));
    return ProfileForward();
  }
  // A temporary cache just large enough for the profiling batch, then the real one from what is
  // left.
  const int64_t profile_blocks =
      options_.max_num_batched_tokens / block_size_ + options_.max_num_seqs + 1;
  LLMSERVE_RETURN_IF_ERROR(AllocateKvCache(profile_blocks * per_block));
  LLMSERVE_RETURN_IF_ERROR(ProfileForward());
  kv_cache_.Reset();
  num_blocks_ = 0;
  size_t free_bytes = 0, total_bytes = 0;
  LLMSERVE_RETURN_IF_ERROR(MemoryInfo(&free_bytes, &total_bytes));
  const int64_t budget = static_cast<int64_t>(options_.kv_cache_fraction * free_bytes);
  if (budget < per_block) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "CUDA device ", options_.device, ": no room for a KV cache: ", MiB(free_bytes), " free of ",
        MiB(total_bytes), " after weights (", MiB(weight_bytes()), ") and activation workspace (",
        MiB(workspace_bytes_), "); ", options_.kv_cache_fraction, " of it is ", MiB(budget),
        ", less than one block of ", MiB(per_block)));
  }
  return AllocateKvCache(budget);
}

absl::Status CudaBackend::UploadWeights(const ModelWeights& weights) {
  const ModelConfig& c = config_;
  const DType device_dtype = options_.dtype;
  const bool int8 = quantization_ == Quantization::kInt8;
  // Every array's place in the one allocation, planned (and the projections' formats checked)
  // before anything is allocated or converted.
  struct Upload {
    const Tensor* tensor = nullptr;
    DType to = DType::kF32;                // a plain tensor: converted to this
    const void** target = nullptr;         // a plain tensor: where its device address goes
    const Int4Matrix* int4 = nullptr;      // a projection: its 4-bit form (maybe empty)
    cuda::ProjectionPlan plan;             // a projection: its format and image size
    cuda::DeviceWeight* weight = nullptr;  // a projection: bound here; null for plain tensors
    std::string name;
    size_t offset = 0;
  };
  std::vector<Upload> uploads;
  size_t total = 0;
  auto place = [&](Upload u, size_t bytes) {
    u.offset = AlignUp(total);
    total = u.offset + bytes;
    uploads.push_back(std::move(u));
  };
  auto plan = [&](const Tensor& tensor, bool matrix, const void** target) {
    if (tensor.empty()) return;
    Upload u;
    u.tensor = &tensor;
    u.to = matrix ? device_dtype : DType::kF32;
    u.target = target;
    place(std::move(u), tensor.NumElements() * DTypeSize(u.to));
  };
  auto plan_projection = [&](const Tensor& dense, const Int4Matrix& int4, std::string name,
                             cuda::DeviceWeight* weight) -> absl::Status {
    Upload u;
    LLMSERVE_ASSIGN_OR_RETURN(u.plan, cuda::PlanProjection(dense, int4, int8, device_dtype, name));
    u.tensor = &dense;
    u.int4 = &int4;
    u.weight = weight;
    u.name = std::move(name);
    const size_t bytes = u.plan.bytes;
    place(std::move(u), bytes);
    return absl::OkStatus();
  };
  layers_.assign(c.num_layers, DeviceLayer{});
  plan(weights.token_embedding, true, &token_embedding_);
  plan(weights.position_embedding, false, reinterpret_cast<const void**>(&position_embedding_));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const LayerWeights& w = weights.layers[l];
    DeviceLayer& d = layers_[l];
    const std::string layer = absl::StrCat("layer ", l, " ");
    plan(w.attn_norm_weight, false, &d.attn_norm_weight);
    plan(w.attn_norm_bias, false, &d.attn_norm_bias);
    LLMSERVE_RETURN_IF_ERROR(plan_projection(w.qkv_weight, w.qkv_int4, layer + "qkv", &d.qkv));
    plan(w.qkv_bias, false, &d.qkv_bias);
    LLMSERVE_RETURN_IF_ERROR(plan_projection(w.o_weight, w.o_int4, layer + "o_proj", &d.o));
    plan(w.o_bias, false, &d.o_bias);
    plan(w.mlp_norm_weight, false, &d.mlp_norm_weight);
    plan(w.mlp_norm_bias, false, &d.mlp_norm_bias);
    LLMSERVE_RETURN_IF_ERROR(plan_projection(w.up_weight, w.up_int4, layer + "gate/up", &d.up));
    plan(w.up_bias, false, &d.up_bias);
    LLMSERVE_RETURN_IF_ERROR(
        plan_projection(w.down_weight, w.down_int4, layer + "down_proj", &d.down));
    plan(w.down_bias, false, &d.down_bias);
  }
  plan(weights.final_norm_weight, false, reinterpret_cast<const void**>(&final_norm_weight_));
  plan(weights.final_norm_bias, false, reinterpret_cast<const void**>(&final_norm_bias_));
  if (!weights.lm_head.empty()) plan(weights.lm_head, true, &lm_head_);
  std::vector<double> inv_freq;
  size_t inv_freq_offset = 0;
  if (c.position == PositionKind::kRope) {
    inv_freq = RopeInverseFrequencies(c);  // worker/model/rope.h, scaling included
    inv_freq_offset = AlignUp(total);
    total = inv_freq_offset + inv_freq.size() * sizeof(double);
  }

  size_t free_bytes = 0, total_bytes = 0;
  LLMSERVE_RETURN_IF_ERROR(MemoryInfo(&free_bytes, &total_bytes));
  if (total > free_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("CUDA device ", options_.device, ": the model's weights need ", MiB(total),
                     " in ", DTypeName(device_dtype),
                     quantization_ == Quantization::kNone
                         ? ""
                         : absl::StrCat(" with ", QuantizationName(quantization_), " projections"),
                     " but only ", MiB(free_bytes), " of ", MiB(total_bytes), " are free"));
  }
  LLMSERVE_ASSIGN_OR_RETURN(weights_, cuda::DeviceBuffer::Allocate(total, "model weights"));
  char* base = weights_.as<char>();
  std::vector<unsigned char> staging;
  for (const Upload& u : uploads) {
    char* at = base + u.offset;
    if (u.weight != nullptr) {
      // Converted one projection at a time: the host holds one image beside the loaded model.
      LLMSERVE_RETURN_IF_ERROR(
          cuda::BuildProjectionImage(u.plan, *u.tensor, *u.int4, device_dtype, u.name, &staging));
      LLMSERVE_CUDA_RETURN_IF_ERROR(
          cudaMemcpy(at, staging.data(), u.plan.bytes, cudaMemcpyHostToDevice));
      *u.weight = cuda::BindProjection(u.plan, at);
      continue;
    }
    const Tensor& t = *u.tensor;
    const size_t count = static_cast<size_t>(t.NumElements());
    const void* source = t.data();
    if (t.dtype() != u.to) {
      staging.resize(count * DTypeSize(u.to));
      ConvertElements(t.data(), t.dtype(), staging.data(), u.to, count);
      source = staging.data();
    }
    LLMSERVE_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(at, source, count * DTypeSize(u.to), cudaMemcpyHostToDevice));
    *u.target = at;
  }
  if (!inv_freq.empty()) {
    LLMSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpy(base + inv_freq_offset, inv_freq.data(),
                                             inv_freq.size() * sizeof(double),
                                             cudaMemcpyHostToDevice));
    rope_inv_freq_ = reinterpret_cast<const double*>(base + inv_freq_offset);
  }
  if (lm_head_ == nullptr) lm_head_ = token_embedding_;  // tied embeddings
  return absl::OkStatus();
}

absl::Status CudaBackend::AllocateWorkspace() {
  const ModelConfig& c = config_;
  const int64_t t = options_.max_num_batched_tokens, s = options_.max_num_seqs;
  const int64_t qkv_width = (c.num_heads + 2 * c.num_kv_heads) * c.head_dim;
  const int64_t up_width = c.intermediate_size * (c.gated_mlp ? 2 : 1);
  // Quantized projections dequantize row chunks into 16-bit scratch for batches the GEMV kernel
  // does not take; the largest projection sets its size.
  dequant_scratch_elements_ = 0;
  if (t > cuda::kMaxGemvBatch) {
    for (const DeviceLayer& layer : layers_) {
      for (const cuda::DeviceWeight* w : {&layer.qkv, &layer.o, &layer.up, &layer.down}) {
        if (w->format == cuda::WeightFormat::kDense16) continue;
        dequant_scratch_elements_ =
            std::max(dequant_scratch_elements_, cuda::DequantScratchElements(w->n, w->k));
      }
    }
  }
  logit_chunk_rows_ = static_cast<int32_t>(
      std::clamp<int64_t>(std::min<int64_t>(s, kMaxLogitChunkBytes / (c.vocab_size * 4)), 1, t));
  size_t total = 0;
  struct Slice {
    void** target;
    size_t bytes;
  };
  const Slice slices[] = {
      {reinterpret_cast<void**>(&residual_), size_t(t * c.hidden_size * 4)},
      {&normed_, size_t(t * c.hidden_size * 2)},
      {reinterpret_cast<void**>(&qkv_), size_t(t * qkv_width * 4)},
      {&attn_out_, size_t(t * c.num_heads * c.head_dim * 2)},
      {reinterpret_cast<void**>(&proj_), size_t(t * c.hidden_size * 4)},
      {reinterpret_cast<void**>(&mlp_up_), size_t(t * up_width * 4)},
      {&mlp_act_, size_t(t * c.intermediate_size * 2)},
      {reinterpret_cast<void**>(&partial_out_),
       size_t(s * c.num_heads * cuda::kMaxDecodeSplits * c.head_dim * 4)},
      {reinterpret_cast<void**>(&partial_max_sum_),
       size_t(s * c.num_heads * cuda::kMaxDecodeSplits * 2 * 4)},
      {reinterpret_cast<void**>(&logits_), size_t(logit_chunk_rows_ * c.vocab_size * 4)},
      {&dequant_scratch_, size_t(dequant_scratch_elements_ * 2)},
  };
  std::vector<size_t> offsets;
  for (const Slice& slice : slices) {
    offsets.push_back(AlignUp(total));
    total = offsets.back() + slice.bytes;
  }
  workspace_bytes_ = static_cast<int64_t>(total + kCublasWorkspaceBytes);
  size_t free_bytes = 0, total_bytes = 0;
  LLMSERVE_RETURN_IF_ERROR(MemoryInfo(&free_bytes, &total_bytes));
  if (total > free_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "CUDA device ", options_.device, ": the activation workspace for ", t, " tokens and ", s,
        " sequences needs ", MiB(total), " but only ", MiB(free_bytes), " of ", MiB(total_bytes),
        " are free after the weights (", MiB(weight_bytes()), ")"));
  }
  LLMSERVE_ASSIGN_OR_RETURN(workspace_,
                            cuda::DeviceBuffer::Allocate(total, "activation workspace"));
  for (size_t i = 0; i < std::size(slices); ++i) {
    *slices[i].target = workspace_.as<char>() + offsets[i];
  }
  LLMSERVE_ASSIGN_OR_RETURN(
      pinned_logits_,
      cuda::PinnedBuffer::Allocate(size_t(logit_chunk_rows_) * c.vocab_size * 4, "logits"));
  return absl::OkStatus();
}

absl::Status CudaBackend::AllocateKvCache(int64_t bytes) {
  const int64_t per_block = KvBytesPerBlock(config_, block_size_);
  const int64_t blocks = std::min<int64_t>(bytes / per_block, INT32_MAX / 2);
  size_t free_bytes = 0, total_bytes = 0;
  LLMSERVE_RETURN_IF_ERROR(MemoryInfo(&free_bytes, &total_bytes));
  if (blocks < 1 || blocks * per_block > static_cast<int64_t>(free_bytes)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("CUDA device ", options_.device, ": a KV cache of ", MiB(bytes),
                     " (blocks of ", MiB(per_block), ") does not fit: ", MiB(free_bytes),
                     " free of ", MiB(total_bytes), " after weights (", MiB(weight_bytes()),
                     ") and activation workspace (", MiB(workspace_bytes_), ")"));
  }
  LLMSERVE_ASSIGN_OR_RETURN(kv_cache_,
                            cuda::DeviceBuffer::Allocate(blocks * per_block, "KV cache"));
  num_blocks_ = static_cast<int32_t>(blocks);
  layer_kv_elements_ = blocks * config_.num_kv_heads * block_size_ * config_.head_dim;
  return absl::OkStatus();
}

absl::Status CudaBackend::ProfileForward() {
  // Sequences of up to max_model_len tokens filling the token budget, on consecutive blocks.
  ForwardBatch batch;
  batch.Clear();
  int64_t tokens_left = options_.max_num_batched_tokens;
  int32_t next_block = 0;
  while (tokens_left > 0 && batch.num_seqs() < options_.max_num_seqs) {
    const int32_t len = static_cast<int32_t>(std::min<int64_t>(tokens_left, config_.max_model_len));
    const int32_t needed = (len + block_size_ - 1) / block_size_;
    if (next_block + needed > num_blocks_) break;
    std::vector<int32_t> blocks(needed);
    for (int32_t& b : blocks) b = next_block++;
    batch.AddSequence(std::vector<int32_t>(len, 0), 0, blocks);
    tokens_left -= len;
  }
  if (batch.num_seqs() == 0) return absl::OkStatus();
  ForwardOutput output;
  absl::Status status = Forward(batch, &output);
  if (!status.ok()) {
    return absl::Status(status.code(),
                        absl::StrCat("profiling forward pass failed: ", status.message()));
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::Forward(const ForwardBatch& batch, ForwardOutput* output) {
  LLMSERVE_RETURN_IF_ERROR(ValidateForwardBatch(batch, config_, block_size_, num_blocks_));
  for (int32_t s = 0; s < batch.num_seqs(); ++s) {
    if (batch.wants_hidden_states(s)) {
      return absl::UnimplementedError(
          "the CUDA backend does not return hidden states: embeddings run on the CPU backend");
    }
  }
  if (batch.num_tokens() > options_.max_num_batched_tokens ||
      batch.num_seqs() > options_.max_num_seqs) {
    return absl::InvalidArgumentError(
        absl::StrCat("forward batch of ", batch.num_tokens(), " tokens in ", batch.num_seqs(),
                     " sequences exceeds the CUDA backend's max_num_batched_tokens ",
                     options_.max_num_batched_tokens, " / max_num_seqs ", options_.max_num_seqs));
  }
  LLMSERVE_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  Metadata meta;
  LLMSERVE_RETURN_IF_ERROR(StageMetadata(batch, &meta));
  LLMSERVE_RETURN_IF_ERROR(StageLora(batch));
  LLMSERVE_RETURN_IF_ERROR(RunLayers(batch, meta));
  return ComputeLogits(meta, output);
}

absl::Status CudaBackend::SetLoraAdapter(int32_t slot, std::shared_ptr<const LoraAdapter> adapter) {
  LLMSERVE_RETURN_IF_ERROR(CheckLoraAdapter(slot, adapter.get()));
  LLMSERVE_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  // A step that failed midway may still read the slot's memory.
  LLMSERVE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  DeviceLoraSlot& target = lora_slots_[slot];
  target = DeviceLoraSlot();
  if (adapter == nullptr) return absl::OkStatus();
  size_t floats = 0;
  for (const auto& layer : adapter->layers) {
    for (const LoraModule& module : layer) floats += module.a.size() + module.b_t.size();
  }
  LLMSERVE_ASSIGN_OR_RETURN(
      target.memory,
      cuda::DeviceBuffer::Allocate(std::max<size_t>(floats, 1) * sizeof(float), "LoRA adapter"));
  float* at = target.memory.as<float>();
  const auto copy = [&](const std::vector<float>& values) -> absl::StatusOr<const float*> {
    float* where = at;
    LLMSERVE_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(where, values.data(), values.size() * sizeof(float), cudaMemcpyHostToDevice));
    at += values.size();
    return where;
  };
  target.layers.resize(adapter->layers.size());
  for (size_t l = 0; l < adapter->layers.size(); ++l) {
    for (const LoraModule& module : adapter->layers[l]) {
      DeviceLoraModule device{.target = module.target,
                              .a = nullptr,
                              .b_t = nullptr,
                              .in = static_cast<int32_t>(module.in),
                              .out = static_cast<int32_t>(module.out),
                              .rank = static_cast<int32_t>(adapter->rank),
                              .row_offset = static_cast<int32_t>(module.row_offset)};
      LLMSERVE_ASSIGN_OR_RETURN(device.a, copy(module.a));
      LLMSERVE_ASSIGN_OR_RETURN(device.b_t, copy(module.b_t));
      target.layers[l].push_back(device);
    }
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::StageLora(const ForwardBatch& batch) {
  lora_pair_start_.clear();
  lora_max_out_.clear();
  LLMSERVE_RETURN_IF_ERROR(
      CheckLoraSlots(batch, [&](int32_t slot) { return !lora_slots_[slot].layers.empty(); }));
  if (std::all_of(batch.lora_slots.begin(), batch.lora_slots.end(),
                  [](int32_t slot) { return slot < 0; })) {
    return absl::OkStatus();
  }
  constexpr LoraTarget kTargets[] = {LoraTarget::kQkv, LoraTarget::kO, LoraTarget::kUp,
                                     LoraTarget::kDown};
  std::vector<cuda::LoraPair> pairs;
  int64_t most_s = 0;
  lora_pair_start_.push_back(0);
  for (int64_t l = 0; l < config_.num_layers; ++l) {
    for (LoraTarget target : kTargets) {
      int32_t s_size = 0, max_out = 0;
      for (int32_t seq = 0; seq < batch.num_seqs(); ++seq) {
        const int32_t slot = batch.lora_slot(seq);
        if (slot < 0) continue;
        for (const DeviceLoraModule& module : lora_slots_[slot].layers[l]) {
          if (module.target != target) continue;
          max_out = std::max(max_out, module.out);
          for (int32_t t = batch.query_start[seq]; t < batch.query_start[seq + 1]; ++t) {
            pairs.push_back({.a = module.a,
                             .b_t = module.b_t,
                             .token = t,
                             .in = module.in,
                             .out = module.out,
                             .rank = module.rank,
                             .row_offset = module.row_offset,
                             .s_offset = s_size});
            s_size += module.rank;
          }
        }
      }
      most_s = std::max<int64_t>(most_s, s_size);
      lora_pair_start_.push_back(static_cast<int32_t>(pairs.size()));
      lora_max_out_.push_back(max_out);
    }
  }
  const size_t bytes = std::max<size_t>(pairs.size(), 1) * sizeof(cuda::LoraPair);
  // StageMetadata synchronised the stream: the previous step's pairs are no longer read.
  if (bytes > pinned_lora_.size()) {
    const size_t capacity = std::max(bytes + bytes / 2, size_t{1} << 16);
    LLMSERVE_ASSIGN_OR_RETURN(pinned_lora_, cuda::PinnedBuffer::Allocate(capacity, "LoRA pairs"));
    LLMSERVE_ASSIGN_OR_RETURN(device_lora_, cuda::DeviceBuffer::Allocate(capacity, "LoRA pairs"));
  }
  const size_t s_bytes = std::max<size_t>(most_s, 1) * sizeof(float);
  if (s_bytes > lora_s_.size()) {
    LLMSERVE_ASSIGN_OR_RETURN(
        lora_s_, cuda::DeviceBuffer::Allocate(s_bytes + s_bytes / 2, "LoRA shrink values"));
  }
  std::memcpy(pinned_lora_.data(), pairs.data(), pairs.size() * sizeof(cuda::LoraPair));
  LLMSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(device_lora_.data(), pinned_lora_.data(),
                                                pairs.size() * sizeof(cuda::LoraPair),
                                                cudaMemcpyHostToDevice, stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::ApplyLora(int64_t layer, LoraTarget target, const void* x,
                                    int64_t x_width, float* y, int64_t y_width) {
  if (lora_pair_start_.empty()) return absl::OkStatus();
  const size_t range = static_cast<size_t>(layer) * 4 + static_cast<size_t>(target);
  const int32_t begin = lora_pair_start_[range], end = lora_pair_start_[range + 1];
  if (begin == end) return absl::OkStatus();
  const cuda::LoraPair* pairs = device_lora_.as<cuda::LoraPair>() + begin;
  LLMSERVE_LAUNCH(cuda::LaunchLoraShrink(dtype_,
                                         {.pairs = pairs,
                                          .num_pairs = end - begin,
                                          .x = x,
                                          .x_width = static_cast<int32_t>(x_width),
                                          .s = lora_s_.as<float>()},
                                         stream_));
  LLMSERVE_LAUNCH(cuda::LaunchLoraExpand({.pairs = pairs,
                                          .num_pairs = end - begin,
                                          .s = lora_s_.as<float>(),
                                          .y = y,
                                          .y_width = static_cast<int32_t>(y_width),
                                          .max_out = lora_max_out_[range]},
                                         stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::StageMetadata(const ForwardBatch& batch, Metadata* meta) {
  const int32_t tokens = batch.num_tokens(), seqs = batch.num_seqs();
  const int32_t num_block_ids = static_cast<int32_t>(batch.block_ids.size());
  // Work lists: one-token sequences go to the decode kernel, longer chunks to prefill tiles.
  std::vector<int32_t> decode, tiles, logit_rows;
  int64_t max_decode_len = 0;
  meta->row_start.assign(1, 0);
  for (int32_t s = 0; s < seqs; ++s) {
    const int32_t begin = batch.query_start[s], end = batch.query_start[s + 1];
    if (end - begin == 1) {
      decode.push_back(begin);
      max_decode_len = std::max<int64_t>(max_decode_len, batch.num_computed[s] + 1);
    } else {
      for (int32_t first = begin; first < end; first += cuda::kPrefillTileQ) {
        tiles.insert(tiles.end(), {s, first, std::min(cuda::kPrefillTileQ, end - first)});
      }
    }
    const bool all = !batch.all_logits.empty() && batch.all_logits[s];
    for (int32_t t = all ? begin : end - 1; t < end; ++t) logit_rows.push_back(t);
    meta->row_start.push_back(static_cast<int32_t>(logit_rows.size()));
  }
  meta->num_tokens = tokens;
  meta->num_decode = static_cast<int32_t>(decode.size());
  meta->num_tiles = static_cast<int32_t>(tiles.size() / 3);
  meta->num_logit_rows = static_cast<int32_t>(logit_rows.size());
  // Split long decode contexts while the (token, KV head) blocks alone leave SMs idle.
  const int64_t blocks = int64_t{meta->num_decode} * config_.num_kv_heads;
  if (blocks > 0 && blocks < 2 * num_sms_) {
    const int64_t for_occupancy = (2 * num_sms_ + blocks - 1) / blocks;
    const int64_t for_length = (max_decode_len + kMinKeysPerSplit - 1) / kMinKeysPerSplit;
    meta->num_decode_splits = static_cast<int32_t>(
        std::clamp<int64_t>(std::min(for_occupancy, for_length), 1, cuda::kMaxDecodeSplits));
  }

  const size_t total = 3 * size_t(tokens) + (seqs + 1) + num_block_ids + decode.size() +
                       tiles.size() + logit_rows.size();
  const size_t bytes = total * sizeof(int32_t);
  // The previous step normally ended synchronised; after one that failed midway its copies and
  // kernels may still use the staging buffers about to be rewritten.
  LLMSERVE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  if (bytes > pinned_meta_.size()) {
    const size_t capacity = std::max(bytes + bytes / 2, size_t{1} << 16);
    LLMSERVE_ASSIGN_OR_RETURN(pinned_meta_, cuda::PinnedBuffer::Allocate(capacity, "metadata"));
    LLMSERVE_ASSIGN_OR_RETURN(device_meta_, cuda::DeviceBuffer::Allocate(capacity, "metadata"));
  }
  int32_t* host = pinned_meta_.as<int32_t>();
  const int32_t* device = device_meta_.as<int32_t>();
  size_t at = 0;
  auto put = [&](const int32_t* data, size_t count) {
    std::memcpy(host + at, data, count * sizeof(int32_t));
    const int32_t* where = device + at;
    at += count;
    return where;
  };
  meta->token_ids = put(batch.token_ids.data(), tokens);
  int32_t* positions = host + at;
  int32_t* token_seq = host + at + tokens;
  for (int32_t s = 0; s < seqs; ++s) {
    for (int32_t t = batch.query_start[s]; t < batch.query_start[s + 1]; ++t) {
      positions[t] = batch.num_computed[s] + (t - batch.query_start[s]);
      token_seq[t] = s;
    }
  }
  meta->positions = device + at;
  meta->token_seq = device + at + tokens;
  at += 2 * size_t(tokens);
  meta->block_table_start = put(batch.block_table_start.data(), seqs + 1);
  meta->block_ids = put(batch.block_ids.data(), num_block_ids);
  meta->decode_tokens = put(decode.data(), decode.size());
  meta->prefill_tiles = put(tiles.data(), tiles.size());
  meta->logit_rows = put(logit_rows.data(), logit_rows.size());
  LLMSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(device_meta_.data(), pinned_meta_.data(), bytes,
                                                cudaMemcpyHostToDevice, stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::RunLayers(const ForwardBatch& batch, const Metadata& meta) {
  const ModelConfig& c = config_;
  const int64_t tokens = batch.num_tokens();
  const int32_t hidden = static_cast<int32_t>(c.hidden_size);
  const float eps = static_cast<float>(c.norm_eps);
  const bool rms = c.norm == NormKind::kRmsNorm;
  LLMSERVE_LAUNCH(cuda::LaunchEmbed(dtype_,
                                    {.embedding = token_embedding_,
                                     .position_embedding = position_embedding_,
                                     .token_ids = meta.token_ids,
                                     .positions = meta.positions,
                                     .residual = residual_,
                                     .num_tokens = meta.num_tokens,
                                     .hidden = hidden},
                                    stream_));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const DeviceLayer& w = layers_[l];
    // The previous layer's MLP output joins the residual stream in this layer's first norm.
    LLMSERVE_LAUNCH(
        cuda::LaunchAddNorm(dtype_,
                            {.residual = residual_,
                             .delta = l == 0 ? nullptr : proj_,
                             .delta_bias = l == 0 ? nullptr : AsFloat(layers_[l - 1].down_bias),
                             .rows = nullptr,
                             .weight = AsFloat(w.attn_norm_weight),
                             .bias = AsFloat(w.attn_norm_bias),
                             .out = normed_,
                             .num_rows = meta.num_tokens,
                             .hidden = hidden,
                             .eps = eps,
                             .rms_norm = rms},
                            stream_));
    const int64_t q_width = c.num_heads * c.head_dim;
    const int64_t qkv_width = q_width + 2 * c.num_kv_heads * c.head_dim;
    LLMSERVE_RETURN_IF_ERROR(Project(normed_, w.qkv, qkv_, tokens, "qkv"));
    LLMSERVE_RETURN_IF_ERROR(ApplyLora(l, LoraTarget::kQkv, normed_, hidden, qkv_, qkv_width));
    LLMSERVE_RETURN_IF_ERROR(Attention(static_cast<int>(l), meta));
    LLMSERVE_RETURN_IF_ERROR(Project(attn_out_, w.o, proj_, tokens, "o_proj"));
    LLMSERVE_RETURN_IF_ERROR(ApplyLora(l, LoraTarget::kO, attn_out_, q_width, proj_, hidden));
    LLMSERVE_LAUNCH(cuda::LaunchAddNorm(dtype_,
                                        {.residual = residual_,
                                         .delta = proj_,
                                         .delta_bias = AsFloat(w.o_bias),
                                         .rows = nullptr,
                                         .weight = AsFloat(w.mlp_norm_weight),
                                         .bias = AsFloat(w.mlp_norm_bias),
                                         .out = normed_,
                                         .num_rows = meta.num_tokens,
                                         .hidden = hidden,
                                         .eps = eps,
                                         .rms_norm = rms},
                                        stream_));
    LLMSERVE_RETURN_IF_ERROR(Project(normed_, w.up, mlp_up_, tokens, "up_proj"));
    LLMSERVE_RETURN_IF_ERROR(
        ApplyLora(l, LoraTarget::kUp, normed_, hidden, mlp_up_,
                  c.gated_mlp ? 2 * c.intermediate_size : c.intermediate_size));
    LLMSERVE_LAUNCH(
        cuda::LaunchActivation(dtype_,
                               {.up = mlp_up_,
                                .up_bias = AsFloat(w.up_bias),
                                .out = mlp_act_,
                                .num_tokens = meta.num_tokens,
                                .intermediate = static_cast<int32_t>(c.intermediate_size),
                                .gated = c.gated_mlp,
                                .activation = ToDeviceActivation(c.activation)},
                               stream_));
    LLMSERVE_RETURN_IF_ERROR(Project(mlp_act_, w.down, proj_, tokens, "down_proj"));
    LLMSERVE_RETURN_IF_ERROR(
        ApplyLora(l, LoraTarget::kDown, mlp_act_, c.intermediate_size, proj_, hidden));
  }
  // The last MLP output joins the residual stream (the final norm reads only the logit rows).
  return cuda::CudaStatus(cuda::LaunchAddNorm(dtype_,
                                              {.residual = residual_,
                                               .delta = proj_,
                                               .delta_bias = AsFloat(layers_.back().down_bias),
                                               .rows = nullptr,
                                               .weight = final_norm_weight_,
                                               .bias = nullptr,
                                               .out = nullptr,
                                               .num_rows = meta.num_tokens,
                                               .hidden = hidden,
                                               .eps = eps,
                                               .rms_norm = rms},
                                              stream_),
                          "LaunchAddNorm (final residual add)");
}

absl::Status CudaBackend::Project(const void* x, const cuda::DeviceWeight& w, float* y, int64_t m,
                                  const char* what) {
  return cuda::ProjectionGemm(cublas_, stream_, dtype_, x, w, y, m, dequant_scratch_,
                              dequant_scratch_elements_, what);
}

absl::Status CudaBackend::Attention(int layer, const Metadata& meta) {
  const ModelConfig& c = config_;
  const int64_t q_width = c.num_heads * c.head_dim;
  void* k_cache = kv_cache_.as<char>() + 2 * layer * layer_kv_elements_;
  void* v_cache = kv_cache_.as<char>() + 2 * (c.num_layers + layer) * layer_kv_elements_;
  const DeviceLayer& w = layers_[layer];
  LLMSERVE_LAUNCH(cuda::LaunchRopeKv(dtype_,
                                     {.qkv = qkv_,
                                      .qkv_bias = AsFloat(w.qkv_bias),
                                      .inv_freq = rope_inv_freq_,
                                      .positions = meta.positions,
                                      .token_seq = meta.token_seq,
                                      .block_table_start = meta.block_table_start,
                                      .block_ids = meta.block_ids,
                                      .k_cache = k_cache,
                                      .v_cache = v_cache,
                                      .num_tokens = meta.num_tokens,
                                      .num_heads = static_cast<int32_t>(c.num_heads),
                                      .num_kv_heads = static_cast<int32_t>(c.num_kv_heads),
                                      .head_dim = static_cast<int32_t>(c.head_dim),
                                      .block_size = block_size_},
                                     stream_));
  const cuda::PagedAttentionCommon common = {
      .q = qkv_,
      .q_stride = q_width + 2 * c.num_kv_heads * c.head_dim,
      .out = attn_out_,
      .out_stride = q_width,
      .positions = meta.positions,
      .token_seq = meta.token_seq,
      .block_table_start = meta.block_table_start,
      .block_ids = meta.block_ids,
      .k_cache = k_cache,
      .v_cache = v_cache,
      .num_heads = static_cast<int32_t>(c.num_heads),
      .num_kv_heads = static_cast<int32_t>(c.num_kv_heads),
      .block_size = block_size_,
      .scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim))),
  };
  const int32_t head_dim = static_cast<int32_t>(c.head_dim);
  if (meta.num_decode > 0) {
    LLMSERVE_LAUNCH(cuda::LaunchDecodeAttention(dtype_, head_dim,
                                                {.c = common,
                                                 .tokens = meta.decode_tokens,
                                                 .num_tokens = meta.num_decode,
                                                 .num_splits = meta.num_decode_splits,
                                                 .partial_out = partial_out_,
                                                 .partial_max_sum = partial_max_sum_},
                                                stream_));
  }
  if (meta.num_tiles > 0) {
    LLMSERVE_LAUNCH(cuda::LaunchPrefillAttention(
        dtype_, head_dim, {.c = common, .tiles = meta.prefill_tiles, .num_tiles = meta.num_tiles},
        stream_));
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::ComputeLogits(const Metadata& meta, ForwardOutput* output) {
  const ModelConfig& c = config_;
  const int64_t vocab = c.vocab_size;
  output->vocab_size = vocab;
  output->row_start = meta.row_start;
  output->logits.resize(int64_t{meta.num_logit_rows} * vocab);
  for (int32_t first = 0; first < meta.num_logit_rows; first += logit_chunk_rows_) {
    const int32_t rows = std::min(logit_chunk_rows_, meta.num_logit_rows - first);
    LLMSERVE_LAUNCH(cuda::LaunchAddNorm(dtype_,
                                        {.residual = residual_,
                                         .delta = nullptr,
                                         .delta_bias = nullptr,
                                         .rows = meta.logit_rows + first,
                                         .weight = final_norm_weight_,
                                         .bias = final_norm_bias_,
                                         .out = normed_,
                                         .num_rows = rows,
                                         .hidden = static_cast<int32_t>(c.hidden_size),
                                         .eps = static_cast<float>(c.norm_eps),
                                         .rms_norm = c.norm == NormKind::kRmsNorm},
                                        stream_));
    LLMSERVE_RETURN_IF_ERROR(cuda::Gemm(cublas_, dtype_, normed_, lm_head_, logits_, rows, vocab,
                                        c.hidden_size, "lm_head"));
    const size_t bytes = size_t(rows) * vocab * sizeof(float);
    LLMSERVE_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(pinned_logits_.data(), logits_, bytes, cudaMemcpyDeviceToHost, stream_));
    LLMSERVE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    std::memcpy(output->logits.data() + int64_t{first} * vocab, pinned_logits_.data(), bytes);
  }
  return absl::OkStatus();
}

}  // namespace llmserve::worker
