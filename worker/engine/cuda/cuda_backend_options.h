// The CUDA backend's options: plain C++, shared by the backend (in the plugin) and the code that
// loads the plugin, which has no CUDA dependency.
//
// Thread-safe: a plain value.

#ifndef LLMSERVE_WORKER_ENGINE_CUDA_CUDA_BACKEND_OPTIONS_H_
#define LLMSERVE_WORKER_ENGINE_CUDA_CUDA_BACKEND_OPTIONS_H_

#include <cstdint>

#include "worker/model/dtype.h"
#include "worker/model/model_config.h"
#include "worker/model/quantization.h"

namespace llmserve::worker {

struct CudaBackendOptions {
  // CUDA device index.
  int device = 0;
  // Weights, GEMM inputs and KV cache on the device: kBF16 or kF16 (kF32 is INVALID_ARGUMENT).
  // Weights in another dtype are converted while uploading.
  DType dtype = DType::kBF16;
  // kInt8: every projection (q/k/v, o, gate/up, down) is quantized to int8 per output row while
  // uploading (the CPU backend's int8 values and scales); the LM head and embeddings stay in
  // dtype. kNone: projections in dtype, except an AWQ/GPTQ checkpoint's, which stay in 4 bits
  // (its Int4Matrix projections). kAwq and kGptq are INVALID_ARGUMENT here (the checkpoint says
  // what it is; the engine builder resolves the flag against it), as is kInt8 on 4-bit weights.
  Quantization quantization = Quantization::kNone;
  // Bytes of KV cache; 0: kv_cache_fraction of the device memory free once the weights, the
  // workspace and a profiling forward pass at the largest batch have run.
  int64_t kv_cache_bytes = 0;
  double kv_cache_fraction = 0.9;
  // Tokens per KV block.
  int32_t block_size = 16;
  // The largest batch Forward accepts (the engine's token budget and sequence cap): the activation
  // workspace is sized for it.
  int32_t max_num_batched_tokens = 2048;
  int32_t max_num_seqs = 256;
  // LoRA adapter slots served unmerged (Backend::SetLoraAdapter), and the largest rank one may
  // have (at most 512).
  int32_t max_loras = 0;
  int64_t max_lora_rank = 64;
};

// Bytes of one KV block on the device: K and V of every layer in the 16-bit device dtype. Here
// rather than on CudaBackend so that code sizing a cache without linking CUDA (the tools) uses it.
inline int64_t CudaKvBytesPerBlock(const ModelConfig& c, int32_t block_size) {
  return 2 * c.num_layers * c.num_kv_heads * block_size * c.head_dim * int64_t{2};
}

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_ENGINE_CUDA_CUDA_BACKEND_OPTIONS_H_
